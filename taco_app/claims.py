"""The paper's claims against the committed cells: docs/claims.md (`taco report --claims FILE`).

Each claim names the grid its figure comes from, the figure with its 95 % interval, the protocol
the cells ran under (spec/evaluation.md §7), a verdict by a rule stated beside it, and the cells.
Nothing here is typed in by hand but the paper's words and numbers: the figures are computed
from the cell files, so the page is regenerated identically from the same cells
(tests/test_claims.py).

Verdict rules (points are percentage points of task accuracy, or of alignment):
  better    "X beats Y": mean over seeds of the per-seed paired difference X - Y, its interval
            over the seeds (spec/evaluation.md eq. (13): the t interval, never narrower than the
            paired interval of every seed's tasks pooled; a t interval where the figure has no
            per-task outcomes); holds if its lower end > 0, fails if its upper end < 0, else
            undecided (the interval includes 0).
  matches   "X approaches / is commensurate with Y": the same interval; holds if its lower end
            >= -MARGIN, fails if its upper end < -MARGIN, else undecided.
  none      "X completes no task": completions pooled over the seeds with their Wilson
            interval; holds if the interval's upper end < NONE_BOUND, else fails.
  most      "X completes most sub-tasks": mean sub-task accuracy over seeds, t interval; holds
            if the lower end > 50 %, fails if the upper end < 50 %, else undecided.
  value     "the paper's figure": our mean over seeds (t interval) beside the paper's; holds if
            the paper's figure lies within MARGIN points of our mean, else fails.
  slower    "X degrades with L_test at a lower rate than Y": per seed the least-squares slope of
            task accuracy against L_test, X's minus Y's paired by seed, t interval; holds if its
            lower end > 0 and Y's own slope interval lies below 0; undecided if Y does not
            degrade (its slope interval includes 0) or the difference's interval includes 0;
            fails if the difference's upper end < 0.
"""
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from taco_ref import algorithms, evaluate
from taco_app.cells import load_cells, load_results
from taco_app import grids as grids_mod
from taco_app import stats

MARGIN = 5.0
"""Points within which "approaches" and "the paper's figure" count as met."""
NONE_BOUND = 0.05
"""A method "completes no task" when the Wilson 95 % upper end of its pooled completions is
below this share."""

GRIDS = {"navworld": "results/navworld", "craft": "results/craft", "dial": "results/dial",
         "dial-image-small": "results/dial-image-small-trained-core"}
"""The grid each domain's claims read (paths relative to the repository root)."""


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and how it is tested.

    Field   | Meaning
    domain  | a key of GRIDS
    where   | where the paper says it
    text    | the claim, in the paper's words or close to them
    rule    | better, matches, none, most, value, slower (module docstring)
    first   | the algorithm it is about
    second  | the algorithm it is compared with (better, matches, slower), else None
    size    | the demonstrations the cells trained on
    figure  | value: the figure compared ("align_forward_argmax")
    paper   | value: the paper's figures, {table name: number}
    grid    | the grid it reads when not the domain's (GRIDS): an equal-budget grid
    """

    domain: str
    where: str
    text: str
    rule: str
    first: str
    second: Optional[str] = None
    size: int = 0
    figure: str = "task_accuracy"
    paper: tuple = ()
    grid: Optional[str] = None

    @property
    def source(self):
        """The grid this claim's cells come from."""
        return self.grid or GRIDS[self.domain]


def _alignment_claims(domain, size):
    """The paper's alignment figures (its Sec. 5 table; the appendix B table where it differs),
    from each algorithm's declaration (Algorithm.paper)."""
    out = []
    for algo in ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru"):
        main, appendix = algorithms.get(algo).paper[domain if domain != "dial-image-small" else "dial-image"]
        tables = (("table 1", main),) if main == appendix else (("table 1", main), ("appendix B", appendix))
        for name, value in tables:
            out.append(Claim(domain, name, f"{algorithms.label(algo)} aligns {value:.1f} %",
                             "value", algo, size=size, figure="align_forward_argmax",
                             paper=((name, value),)))
    return out


CLAIMS = (
    Claim("navworld", "Sec. 5.1, figure 5", "TACO approaches the performance of GT-BC given enough data",
          "matches", "taco", "gtbc", 1000),
    *(Claim("navworld", "Sec. 5.1, figure 5", f"TACO approaches the performance of GT-BC, both on the {p} "
            "protocol's budget", "matches", "taco", "gtbc", 1000, grid=f"results/navworld-{p}")
      for p in ("paper", "recipe")),
    Claim("navworld", "Sec. 5.1", "CTC-BC performs poorly (MLP)", "none", "ctcbc-mlp", size=1000),
    Claim("navworld", "Sec. 5.1", "CTC-BC performs poorly (GRU)", "none", "ctcbc-gru", size=1000),
    Claim("navworld", "Sec. 5.1, table 1", "TACO aligns better than CTC-BC (MLP)", "better", "taco",
          "ctcbc-mlp", 1000, "align_forward_argmax"),
    *_alignment_claims("navworld", 1000),
    Claim("craft", "Sec. 5.2, figure 6", "TACO approaches the performance of GT-BC given enough data",
          "matches", "taco", "gtbc", 500),
    *(Claim("craft", "Sec. 5.2, figure 6", f"TACO approaches the performance of GT-BC, both on the {p} "
            "protocol's budget", "matches", "taco", "gtbc", 500, grid=f"results/craft-{p}")
      for p in ("paper", "recipe")),
    Claim("craft", "Sec. 5.2", "CTC-BC fails to obtain substantial reward (MLP)", "none", "ctcbc-mlp", size=500),
    Claim("craft", "Sec. 5.2", "CTC-BC fails to obtain substantial reward (GRU)", "none", "ctcbc-gru", size=500),
    Claim("craft", "Sec. 5.2, table 1", "TACO aligns better than CTC-BC (GRU)", "better", "taco",
          "ctcbc-gru", 500, "align_forward_argmax"),
    *_alignment_claims("craft", 500),
    Claim("dial", "Sec. 5.3.1, figure 8", "TACO is superior to GT-BC at 1200 demonstrations",
          "better", "taco", "gtbc", 1200),
    *(Claim("dial", "Sec. 5.3.1, figure 8", f"TACO is superior to GT-BC at 1200 demonstrations, both on the {p} "
            "protocol's budget", "better", "taco", "gtbc", 1200, grid=f"results/dial-{p}")
      for p in ("paper", "recipe")),
    Claim("dial", "Sec. 5.3.1", "CTC-BC fails to complete any tasks (MLP)", "none", "ctcbc-mlp", size=1200),
    Claim("dial", "Sec. 5.3.1", "CTC-BC fails to complete any tasks (GRU)", "none", "ctcbc-gru", size=1200),
    Claim("dial", "Sec. 5.3.1, table 1", "TACO aligns better than GT-BC (GT-BC overfits)", "better", "taco",
          "gtbc", 1200, "align_forward_argmax"),
    Claim("dial", "Sec. 5.3.1, figure 9", "TACO's accuracy falls with L_test at a lower rate than GT-BC's",
          "slower", "taco", "gtbc", 1200),
    *_alignment_claims("dial", 1200),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "TACO performs well in comparison with GT-BC",
          "matches", "taco", "gtbc", 200),
    *(Claim("dial-image-small", "Sec. 5.3.2, figure 10", f"TACO performs well in comparison with GT-BC, both on "
            f"the {p} protocol's budget, {average}", "matches", "taco", "gtbc", 200,
            grid=f"results/dial-image-small-{prefix}{p}")
      for prefix, average in (("", "the parameter average of the last 1000 steps (over half the run)"),
                              ("horizon-", "the parameter average of the last 5.5 epochs"))
      for p in ("paper", "recipe")),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "CTC-BC is unable to perform full task sequences (MLP)",
          "none", "ctcbc-mlp", size=200),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "CTC-BC is unable to perform full task sequences (GRU)",
          "none", "ctcbc-gru", size=200),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "TACO completes most sub-tasks", "most", "taco", size=200),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "GT-BC completes most sub-tasks", "most", "gtbc", size=200),
    *_alignment_claims("dial-image-small", 200),
)
"""Every claim of the paper this page tests, in the paper's order."""


def protocol(records):
    """The protocol the cells ran under (spec/evaluation.md §7), from the configs their cell
    files record (taco_app.cells.load_cells: a table row carries no config)."""
    names = set()
    for r in records:
        cfg = r.get("config") or {}
        warmup, prestage = cfg.get("warmup_epochs", 5), cfg.get("prestage", "taco")
        if r["cell"]["algo"] == "compile":
            continue
        if warmup == 0:
            names.add("paper")
        elif prestage == "all":
            names.add("recipe")
        else:
            names.add("TACO pre-stage only")
    return " + ".join(sorted(names)) or "-"


def _seeds(n):
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _fmt(mean, lo, hi, unit=""):
    if lo is None:
        return f"{mean:+.1f}{unit} (one seed)"
    return f"{mean:+.1f}{unit} [{lo:+.1f}, {hi:+.1f}]"


def _slope(by_length):
    lengths = sorted(by_length, key=int)
    x = np.array([int(L) for L in lengths], dtype=float)
    y = 100 * np.array([by_length[L] for L in lengths])
    # the least-squares slope in closed form: exactly 0 when the accuracy is the same at every
    # length (polyfit's solver leaves a -1e-15 there, which read as "degrades")
    dx = x - x.mean()
    return float(dx @ (y - y.mean()) / (dx @ dx))


def judge(claim, rows):
    """(figure text, verdict, reason, cells) of claim on the grid's rows; verdict "no cells"
    where the grid lacks them."""
    mine = [r for r in rows if r["size"] == claim.size]
    a = {r["seed"]: r for r in mine if r["algo"] == claim.first}
    b = {r["seed"]: r for r in mine if r["algo"] == claim.second} if claim.second else {}
    seeds = sorted(set(a) & set(b)) if claim.second else sorted(a)
    cells = [f"{claim.first} n{claim.size} seeds {','.join(map(str, seeds))}"] if seeds else []
    if claim.second and seeds:
        cells.append(f"{claim.second} n{claim.size}")
    if not seeds:
        return "-", "no cells", "the grid has no such cells yet", cells
    if claim.rule in ("better", "matches"):
        if claim.figure == "task_accuracy" and all(a[s].get("outcomes") and b[s].get("outcomes") for s in seeds):
            mean, lo, hi = (None if x is None else 100 * x for x in
                            stats.seeds_difference_interval([(a[s]["outcomes"], b[s]["outcomes"]) for s in seeds]))
        else:
            mean, lo, hi = stats.t_interval([100 * (a[s][claim.figure] - b[s][claim.figure]) for s in seeds])
        text = _fmt(mean, lo, hi, " points") + f", {_seeds(len(seeds))}"
        if lo is None:
            return text, "undecided", "one seed: no interval over seeds", cells
        bound = 0.0 if claim.rule == "better" else -MARGIN
        if lo > bound:
            return text, "holds", f"the interval lies above {bound:g}", cells
        if hi < bound:
            return text, "fails", f"the interval lies below {bound:g}", cells
        return text, "undecided", f"the interval includes {bound:g}", cells
    if claim.rule == "none":
        done = sum(a[s]["outcomes"].count("1") if a[s].get("outcomes") else
                   round(a[s]["task_accuracy"] * a[s]["n_tasks"]) for s in seeds)
        n = sum(int(a[s]["n_tasks"]) for s in seeds)
        lo, hi = evaluate.wilson_interval(done, n)
        text = f"{done} of {n} ({100 * done / n:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]), {_seeds(len(seeds))}"
        if hi < NONE_BOUND:
            return text, "holds", f"the interval's upper end is below {100 * NONE_BOUND:.0f} %", cells
        return text, "fails", f"the interval reaches {100 * NONE_BOUND:.0f} % or more", cells
    if claim.rule == "most":
        mean, lo, hi = stats.t_interval([100 * a[s]["subtask_accuracy"] for s in seeds])
        text = (f"{mean:.1f} % [{lo:.1f}, {hi:.1f}]" if lo is not None else f"{mean:.1f} %") + f", {_seeds(len(seeds))}"
        if lo is not None and lo > 50:
            return text, "holds", "the interval lies above 50 %", cells
        if hi is not None and hi < 50:
            return text, "fails", "the interval lies below 50 %", cells
        return text, "undecided", "the interval includes 50 % (or one seed)", cells
    if claim.rule == "value":
        mean, lo, hi = stats.t_interval([100 * a[s][claim.figure] for s in seeds])
        (table, value), = claim.paper
        text = (f"{mean:.1f} % [{lo:.1f}, {hi:.1f}]" if lo is not None else f"{mean:.1f} %") \
            + f", {_seeds(len(seeds))}; paper {value:.1f}"
        if abs(mean - value) <= MARGIN:
            return text, "holds", f"within {MARGIN:.0f} points of the paper's", cells
        return text, "fails", f"{mean - value:+.1f} points from the paper's", cells
    if claim.rule == "slower":
        pairs = [s for s in seeds if a[s].get("task_accuracy_by_length") and b[s].get("task_accuracy_by_length")]
        if not pairs:
            return "-", "no cells", "no cell measured task accuracy by L_test", cells
        diffs = [_slope(a[s]["task_accuracy_by_length"]) - _slope(b[s]["task_accuracy_by_length"]) for s in pairs]
        own = stats.t_interval([_slope(b[s]["task_accuracy_by_length"]) for s in pairs])
        mean, lo, hi = stats.t_interval(diffs)
        text = (_fmt(mean, lo, hi, " points per digit") + f"; {algorithms.label(claim.second)}'s slope "
                + _fmt(*own, " points per digit") + f", {_seeds(len(pairs))}")
        if lo is None:
            return text, "undecided", "one seed: no interval over seeds", cells
        if hi < 0:
            return text, "fails", "TACO's accuracy falls faster", cells
        if own[2] is None or own[2] >= 0:
            return text, "undecided", f"{algorithms.label(claim.second)} does not degrade with L_test here", cells
        if lo > 0:
            return text, "holds", "the difference's interval lies above 0", cells
        return text, "undecided", "the difference's interval includes 0", cells
    raise ValueError(f"claim rule: unknown {claim.rule!r}")


def page(root="."):
    """docs/claims.md as text, from the committed cells under root."""
    lines = ["# The paper's claims, tested on the committed cells",
             "",
             "Generated by `taco report --claims docs/claims.md` from the cell files of the grids "
             "below; a test regenerates it. Rules (taco_app/claims.py): *better*, the mean of the "
             "per-seed paired differences with its interval over the seeds (spec/evaluation.md "
             "eq. (13): the t interval, never narrower than the paired interval of all seeds' "
             "tasks pooled), holds above 0; "
             f"*matches* (\"approaches\"), the same, holds above −{MARGIN:.0f} points; *none*, "
             "completions pooled over the seeds with their Wilson interval, holds below "
             f"{100 * NONE_BOUND:.0f} %; *most*, sub-task accuracy, holds above 50 %; *value*, "
             f"our mean within {MARGIN:.0f} points of the paper's figure; *slower*, the per-seed "
             "slope of task accuracy against L_test. Protocol: how the cells' budgets were set "
             "(spec/evaluation.md §7; \"TACO pre-stage only\": the grids before the equal-budget "
             "protocols, where TACO alone ran its 5-epoch warm-up). The Dial's task accuracy is "
             "the keypad's (spec/evaluation.md eq. (10), (11) give the other rules).",
             ""]
    verdicts, grids = {}, _Grids(root)
    for domain, grid in GRIDS.items():
        lines += [f"## {domain} ([{grid}](../{grid}/README.md))", "",
                  f"Protocol: {grids.protocol(grid)}{grids.others(domain)}.", "",
                  "| claim | where | rule | ours [95 % interval] | verdict | why | cells |",
                  "|---|---|---|---|---|---|---|"]
        for claim in (c for c in CLAIMS if c.domain == domain):
            text, verdict, why, cells = judge(claim, grids.rows(claim.source))
            if claim.grid:
                cells = [f"[{claim.grid}](../{claim.grid}/README.md)"] + cells
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
            lines.append(f"| {claim.text} | {claim.where} | {claim.rule} | {text} | **{verdict}** | {why} | "
                         f"{'; '.join(cells) or '-'} |")
        lines.append("")
    lines.append("Verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())) + ".")
    return "\n".join(lines) + "\n"


class _Grids:
    """The committed grids under root, each read once per page: its rows (load_results, for
    the figures) and its cell records (load_cells, for the configs its protocol is read from);
    [] for a grid with no cells (yet)."""

    def __init__(self, root):
        self.root, self._rows, self._records = root, {}, {}

    def _has_cells(self, grid):
        return os.path.isdir(os.path.join(self.root, grid, "cells"))

    def rows(self, grid):
        if grid not in self._rows:
            self._rows[grid] = load_results(os.path.join(self.root, grid)) if self._has_cells(grid) else []
        return self._rows[grid]

    def protocol(self, grid):
        if grid not in self._records:
            self._records[grid] = load_cells(os.path.join(self.root, grid), strict=True) if self._has_cells(grid) else []
        return protocol(self._records[grid])

    def planned(self, grid):
        """The protocol a grid without cells yet will run under, from its grid.yaml."""
        try:
            runs = grids_mod.load(os.path.join(self.root, grid))
        except grids_mod.ManifestError:
            return "-"
        names = sorted({run["protocol"] or "TACO pre-stage only" for run in runs})
        return ", ".join(names) + " (no cells yet)"

    def others(self, domain):
        """", and the equal-budget grids' own" with their protocols, for a domain with such claims."""
        grids = sorted({c.grid for c in CLAIMS if c.domain == domain and c.grid})
        said = [f"{g}: {self.protocol(g) if self._has_cells(g) else self.planned(g)}" for g in grids]
        return f" (equal-budget claims: {'; '.join(said)})" if said else ""


NAMES = {"navworld": "Nav-World", "craft": "Craft", "dial": "The Dial", "dial-image-small": "The image Dial"}


def summary(root="."):
    """The verdicts as README lines: per domain each claim but the alignment figures with its
    verdict, then how many of the paper's alignment figures ours are within MARGIN points of."""
    lines, grids = [], _Grids(root)
    for domain in GRIDS:
        judged = [(c, judge(c, grids.rows(c.source))) for c in CLAIMS if c.domain == domain]
        said = [f"{c.text}: **{v[1]}**" for c, v in judged if c.rule != "value"]
        values = [v[1] for c, v in judged if c.rule == "value" and v[1] != "no cells"]
        if values:
            said.append(f"alignment within {MARGIN:.0f} points of the paper's figure: {values.count('holds')} "
                        f"of {len(values)}")
        lines.append(f"- {NAMES[domain]}: " + "; ".join(said) + ".")
    return "\n".join(lines)

