"""The paper's figures, drawn from the committed cells: docs/figures/ (`taco report --figures DIR`).

Task accuracy against the number of demonstrations (paper figures 5, 6 and 8) and against the test
sketch length L_test (figure 9), one line per method and grid: the mean over seeds with its 95 %
t band (clipped to [0, 100]; none for one seed) and every seed as a dot. Each figure's lines
come from the grids taco_app.claims reads: the headline grid (recipe protocol, solid), the paper
protocol's (dashed), and, where the headline has no such cells, the grids from before equal
budgets (dotted, named as ablations in the legend). Beside the pictures, figures.json holds
every plotted number, so a test checks them against the cells without reading pixels.
"""
import json
import os
from dataclasses import dataclass

import numpy as np

from taco_ref import algorithms
from taco_ref.plumbing import files
from taco_app import claims, stats
from taco_app.grid.store import load_results


@dataclass(frozen=True)
class Series:
    """The lines one grid contributes to a figure: its algorithms, a legend suffix, a line style."""

    grid: str
    algos: tuple
    label: str
    style: str = "-"


@dataclass(frozen=True)
class Figure:
    """One of the paper's figures: its file name, title, x axis ("size" or "length") and lines."""

    name: str
    title: str
    x: str
    series: tuple
    size: int = 0          # x "length": the demonstrations of the cells drawn


BOTH = ("taco", "gtbc")
ALL = ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru")
def _before(domain):
    """The legend suffix of a grid from before equal budgets: its folder (TACO alone had the
    pre-stage there, CTC-BC had none, as under the paper protocol)."""
    return f"{claims.BASELINES[domain].removeprefix('results/')}, before equal budgets"


def _by_size(domain, paper_figure, baselines_algos=("ctcbc-mlp", "ctcbc-gru")):
    return Figure(f"figure{paper_figure}-{domain}", f"{claims.NAMES[domain]}: task accuracy against demonstrations "
                  f"(paper figure {paper_figure})", "size", (
                      Series(claims.HEADLINE[domain], ALL, "recipe protocol"),
                      Series(claims.PAPER_PROTOCOL[domain], BOTH, "paper protocol", "--"),
                      Series(claims.BASELINES[domain], baselines_algos, _before(domain), ":")))


FIGURES = (
    _by_size("navworld", 5, baselines_algos=()),
    _by_size("craft", 6),
    _by_size("dial", 8, baselines_algos=ALL),
    Figure("figure9-dial", "The Dial: task accuracy against L_test at 1200 demonstrations (paper figure 9)",
           "length", (Series(claims.BASELINES["dial"], BOTH, _before("dial"), ":"),), size=1200),
)
"""The figures docs/figures/ holds, in the paper's order."""


def _band(values):
    """(mean, lo, hi) in percent of values (shares): the 95 % t interval clipped to [0, 100]; lo
    and hi None for one value."""
    mean, lo, hi = stats.t_interval(100 * np.asarray(values, dtype=float))
    return (mean, None, None) if lo is None else (mean, max(lo, 0.0), min(hi, 100.0))


def points(figure, root="."):
    """{legend label: {x: {"mean", "lo", "hi", "seeds": [per-seed %]}}} of a figure's lines from the
    cells under root; a line appears where its grid has cells of the algorithm."""
    out = {}
    for series in figure.series:
        rows = load_results(os.path.join(root, series.grid)) if os.path.isdir(os.path.join(root, series.grid, "cells")) \
            else []
        for algo in series.algos:
            mine = [r for r in rows if r["algo"] == algo]
            line = {}
            if figure.x == "size":
                for size in sorted({r["size"] for r in mine}):
                    line[str(size)] = [r["task_accuracy"] for r in mine if r["size"] == size]
            else:
                measured = [r["task_accuracy_by_length"] for r in mine
                            if r["size"] == figure.size and r.get("task_accuracy_by_length")]
                for L in sorted({L for m in measured for L in m}, key=int):
                    line[L] = [m[L] for m in measured if L in m]
            if line:
                label = f"{algorithms.label(algo)} ({series.label})"
                out[label] = {"grid": series.grid, "style": series.style, "points": {
                    x: dict(zip(("mean", "lo", "hi"), _band(v)), seeds=[100 * float(a) for a in v])
                    for x, v in line.items()}}
    return out


def data(root="."):
    """figures.json's content: every figure's points, by figure name."""
    return {f.name: {"title": f.title, "x": f.x, "lines": points(f, root)} for f in FIGURES}


def draw(figure, lines, path):
    """One figure as a PNG: each line's mean, its 95 % band and its seeds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from taco_app.plots import size_limits
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colours = {name: f"C{i}" for i, name in enumerate(algorithms.names())}
    xs = set()
    for label, line in lines.items():
        algo = next(a for a in algorithms.names() if label.startswith(algorithms.label(a) + " ("))
        x = np.array([float(k) for k in line["points"]])
        xs |= set(x)
        mean = [p["mean"] for p in line["points"].values()]
        ax.plot(x, mean, line["style"], marker="o", color=colours[algo], label=label, lw=1.6, ms=4)
        banded = [(xi, p) for xi, p in zip(x, line["points"].values()) if p["lo"] is not None]
        if len(banded) > 1:
            ax.fill_between([b[0] for b in banded], [b[1]["lo"] for b in banded], [b[1]["hi"] for b in banded],
                            color=colours[algo], alpha=0.12, lw=0)
        for xi, p in zip(x, line["points"].values()):
            if p["lo"] is not None:
                ax.plot([xi, xi], [p["lo"], p["hi"]], color=colours[algo], alpha=0.5, lw=1)
            ax.scatter([xi] * len(p["seeds"]), p["seeds"], s=7, alpha=0.35, color=colours[algo])
    if figure.x == "size":
        ax.set_xscale("log")
        ticks = sorted(xs)
        if ticks:
            ax.set_xlim(*size_limits(ticks))
            ax.set_xticks(ticks, [str(int(t)) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("demonstrations")
    else:
        ax.set_xlabel("test sketch length L_test")
    ax.set_ylabel("task accuracy (%): mean, 95 % band, seeds")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.set_title(figure.title, fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(dest, root="."):
    """Write dest/figures.json and one PNG per figure (the PNGs need matplotlib, the `plot`
    extra); returns the paths written."""
    everything = data(root)
    os.makedirs(dest, exist_ok=True)
    written = [os.path.join(dest, "figures.json")]
    files.write_bytes(written[0], (json.dumps(everything, indent=1, sort_keys=True) + "\n").encode())
    for figure in FIGURES:
        written.append(os.path.join(dest, f"{figure.name}.png"))
        draw(figure, everything[figure.name]["lines"], written[-1])
    return written
