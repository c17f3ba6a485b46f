"""The paper's claims against the committed cells: docs/claims.md (`taco report --claims FILE`).

Each claim names the grid its figure comes from, the figure with its 95 % interval, the protocol
the cells ran under (spec/evaluation.md §7), a verdict by a rule stated beside it, and the cells.
Nothing here is typed in by hand but the paper's words and numbers: the figures are computed
from the cell files, so the page is regenerated identically from the same cells
(tests/test_claims.py).

Verdicts (spec/evaluation.md §8), what the interval says of the paper's sentence:
  holds         the interval lies on the side of the bound the paper's sentence claims;
  level         (better) the interval lies within +-EQUIVALENCE of 0: whatever separates the
                two methods is smaller than the margin, so "X beats Y" is not borne out, and
                neither is the opposite;
  contradicted  the interval lies on the other side: it excludes what the paper says;
  undecided     the interval crosses a bound; the reason says about how many seeds would
                decide it, at the mean and spread the seeds show (stats.seeds_to_decide).

Rules (points are percentage points of task accuracy, or of alignment):
  better    "X beats Y": mean over seeds of the per-seed paired difference X - Y, its interval
            over the seeds (spec/evaluation.md eq. (13): the t interval, never narrower than the
            paired interval of every seed's tasks pooled, counted as eq. (14)'s independent
            tasks on a one-layout domain; a t interval where the figure has no per-task
            outcomes); holds above 0, contradicted below 0, level within +-EQUIVALENCE.
  matches   "X approaches / is commensurate with Y": the same interval; holds above -MARGIN,
            contradicted below it.
  collapses (with better and matches on task accuracy) a seed where one method completes under
            COLLAPSE while the other completes half or more: the outcomes are bimodal, and a t
            interval over them describes neither mode. Each method's collapse rate with its
            Wilson interval, and their paired difference over the seeds (eq. (6) on the
            seeds): a method that collapses more often contradicts "X approaches/beats Y" for X,
            supports it for Y; otherwise the claim is undecided on the collapses.
  none      "X completes no task": completions pooled over the seeds with their Wilson interval
            (at eq. (14)'s effective count); holds if its upper end < NONE_BOUND, contradicted if
            its lower end >= NONE_BOUND.
  most      "X completes most sub-tasks": mean sub-task accuracy over seeds, t interval; holds
            above 50 %, contradicted below.
  value     "the paper's figure", one-sided as the paper's sentence is (Claim.side): "at least"
            holds when our interval lies above the paper's figure less MARGIN (ours being better
            never counts against it), contradicted when it lies below; "at most" mirrors it
            (the paper says CTC-BC aligns poorly).
  slower    "X degrades with L_test at a lower rate than Y": per seed the least-squares slope of
            task accuracy against L_test, X's minus Y's paired by seed, t interval; holds above 0
            when Y's own slope interval lies below 0, contradicted below 0, level within
            +-SLOPE_EQUIVALENCE points per digit (as when neither degrades), else undecided.
"""
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from taco_ref import algorithms, evaluate
from taco_app.grid.store import load_cells, load_results
from taco_app.grid import manifest as grids_mod
from taco_app import paper, stats

MARGIN = 5.0
"""Points within which "approaches" and "the paper's figure" count as met."""
EQUIVALENCE = {"task_accuracy": 5.0, "align_forward_argmax": 1.0}
"""Points within which two methods are *level* on a figure: task accuracy 5 (one figure of 1000
tasks has a standard error of about 1.5 points at 50 %), alignment 1 (the paper's own TACO -
GT-BC alignment gaps are 0.2-2.5 points)."""
SLOPE_EQUIVALENCE = 1.0
"""Points per digit of L_test within which two slopes are level."""
NONE_BOUND = 0.05
"""A method "completes no task" when the Wilson 95 % upper end of its pooled completions is
below this share."""
COLLAPSE = 0.2
"""A seed *collapses* for a method when it completes less than this share of the tasks while the
other method, on the same data and seed, completes at least COLLAPSE_PARTNER."""
COLLAPSE_PARTNER = 0.5

HARDER = "results/dial-1000"
"""The Dial at the paper's 1000 demonstrations on equal budgets (the recipe protocol), scored on
the standard test and on the harder one (spec/dial.md §11): the comparison with headroom."""
HEADLINE = {"navworld": "results/navworld-recipe", "craft": "results/craft-recipe", "dial": "results/dial-recipe",
            "dial-image-small": "results/dial-image-small-horizon-recipe"}
"""Each domain's headline grid: equal budgets under the recipe protocol (spec/evaluation.md §7),
every method with the same 5-epoch pre-stage, and the domain's config as chosen on validation
tasks (spec/selection.md). Its first rows and README's tables come from it."""
PAPER_PROTOCOL = {"navworld": "results/navworld-paper", "craft": "results/craft-paper", "dial": "results/dial-paper",
                  "dial-image-small": "results/dial-image-small-horizon-paper"}
"""Each domain's equal-budget grid under the paper protocol: no pre-stage for any method."""
BASELINES = {"navworld": "results/navworld", "craft": "results/craft", "dial": "results/dial",
             "dial-image-small": "results/dial-image-small-trained-core"}
"""The grids of every method the paper ran (CTC-BC included), from before the equal-budget
protocols: TACO alone had the pre-stage there (its rows are ablations); CTC-BC had none, as
under the paper protocol."""


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and how it is tested.

    Field   | Meaning
    domain  | a key of HEADLINE
    where   | where the paper says it
    text    | the claim, in the paper's words or close to them
    rule    | better, matches, none, most, value, slower (module docstring)
    first   | the algorithm it is about
    second  | the algorithm it is compared with (better, matches, slower), else None
    size    | the demonstrations the cells trained on
    figure  | the figure compared ("task_accuracy", "align_forward_argmax")
    paper   | value: the paper's figures, {table name: number}
    grid    | the grid its cells come from
    side    | value: "at least" or "at most", the direction of the paper's sentence
    ablation| why its grid is not an equal-budget one ("" for the headline and paper protocols)
    test    | a named test condition the figures come from (the Dial's harder test: the cells'
            | tests[test] figures, task accuracy by PIN length from its outcomes), None: the
            | standard test
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
    grid: str = ""
    side: str = "at least"
    ablation: str = ""
    test: Optional[str] = None

    @property
    def source(self):
        """The grid this claim's cells come from."""
        return self.grid or HEADLINE[self.domain]


CTC_SIDE = {("navworld", "ctcbc-mlp"): "at least"}
"""Where the paper's sentence on CTC-BC's alignment says it aligns well (Sec. 5.1: "CTC(MLP)
provides accurate alignment, often reaching 90 %"); elsewhere it says CTC-BC aligns poorly
("not capable of aligning", Sec. 5.3.1; "does not achieve good alignments", Sec. 5.2), so its
figure is an upper bound."""


def _alignment_claims(domain, size, ctc_grid):
    """The paper's alignment figures (its Sec. 5 table; the appendix B table where it differs),
    (taco_app.paper): TACO's and GT-BC's from the headline
    grid, CTC-BC's from ctc_grid."""
    out = []
    for algo in ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru"):
        main, appendix = paper.ALIGNMENT[algo][domain if domain != "dial-image-small" else "dial-image"]
        tables = (("table 1", main),) if main == appendix else (("table 1", main), ("appendix B", appendix))
        side = CTC_SIDE.get((domain, algo), "at most") if algo.startswith("ctcbc") else "at least"
        grid = ctc_grid if algo.startswith("ctcbc") else HEADLINE[domain]
        for name, value in tables:
            out.append(Claim(domain, name, f"{algorithms.label(algo)} aligns {value:.1f} % "
                             f"({'or better' if side == 'at least' else 'or worse'})",
                             "value", algo, size=size, figure="align_forward_argmax",
                             paper=((name, value),), grid=grid, side=side))
    return out


def _comparison(domain, where, text, rule, size, **kw):
    """The paper's comparison of TACO with GT-BC on the headline grid (recipe protocol), the
    paper protocol's grid, and, as an ablation, the grid where TACO alone had the pre-stage."""
    return (Claim(domain, where, f"{text} (recipe protocol: the same pre-stage for both)", rule, "taco", "gtbc",
                  size, grid=HEADLINE[domain], **kw),
            Claim(domain, where, f"{text} (paper protocol: no pre-stage for either)", rule, "taco", "gtbc",
                  size, grid=PAPER_PROTOCOL[domain], **kw))


PRESTAGE_ABLATION = "TACO alone had the 5-epoch pre-stage: not an equal budget"
NAVWORLD_ABLATION = PRESTAGE_ABLATION + "; σ = 0.5, chosen on test tasks"

CLAIMS = (
    *_comparison("navworld", "Sec. 5.1, figure 5", "TACO approaches the performance of GT-BC given enough data",
                 "matches", 1000),
    Claim("navworld", "Sec. 5.1", "CTC-BC performs poorly (MLP)", "none", "ctcbc-mlp", size=1000,
          grid=HEADLINE["navworld"]),
    Claim("navworld", "Sec. 5.1", "CTC-BC performs poorly (GRU)", "none", "ctcbc-gru", size=1000,
          grid=HEADLINE["navworld"]),
    Claim("navworld", "Sec. 5.1, table 1", "TACO aligns better than CTC-BC (MLP)", "better", "taco",
          "ctcbc-mlp", 1000, "align_forward_argmax", grid=HEADLINE["navworld"]),
    *_alignment_claims("navworld", 1000, HEADLINE["navworld"]),
    Claim("navworld", "Sec. 5.1, figure 5", "TACO approaches the performance of GT-BC given enough data",
          "matches", "taco", "gtbc", 1000, grid=BASELINES["navworld"], ablation=NAVWORLD_ABLATION),
    *_comparison("craft", "Sec. 5.2, figure 6", "TACO approaches the performance of GT-BC given enough data",
                 "matches", 500),
    Claim("craft", "Sec. 5.2", "CTC-BC fails to obtain substantial reward (MLP)", "none", "ctcbc-mlp", size=500,
          grid=BASELINES["craft"]),
    Claim("craft", "Sec. 5.2", "CTC-BC fails to obtain substantial reward (GRU)", "none", "ctcbc-gru", size=500,
          grid=BASELINES["craft"]),
    Claim("craft", "Sec. 5.2, table 1", "TACO aligns better than CTC-BC (GRU)", "better", "taco",
          "ctcbc-gru", 500, "align_forward_argmax", grid=BASELINES["craft"], ablation=PRESTAGE_ABLATION),
    *_alignment_claims("craft", 500, BASELINES["craft"]),
    Claim("craft", "Sec. 5.2, figure 6", "TACO approaches the performance of GT-BC given enough data",
          "matches", "taco", "gtbc", 500, grid=BASELINES["craft"], ablation=PRESTAGE_ABLATION),
    Claim("dial", "Sec. 5.3.1, figure 8", "TACO is superior to GT-BC at 1000 demonstrations, on the harder test "
          "(recipe protocol)", "better", "taco", "gtbc", 1000, grid=HARDER, test="harder"),
    Claim("dial", "Sec. 5.3.1, figure 9", "TACO's accuracy falls with L_test at a lower rate than GT-BC's, on the "
          "harder test's PINs of 5-10 digits (recipe protocol)", "slower", "taco", "gtbc", 1000, grid=HARDER,
          test="harder"),
    Claim("dial", "Sec. 5.3.1, table 1", "TACO aligns better than GT-BC (GT-BC overfits), at 1000 demonstrations "
          "(recipe protocol)", "better", "taco", "gtbc", 1000, "align_forward_argmax", grid=HARDER),
    Claim("dial", "Sec. 5.3.1, figure 8", "TACO is superior to GT-BC at 1000 demonstrations, on the standard test "
          "(recipe protocol)", "better", "taco", "gtbc", 1000, grid=HARDER),
    *_comparison("dial", "Sec. 5.3.1, figure 8", "TACO is superior to GT-BC at 1200 demonstrations", "better", 1200),
    Claim("dial", "Sec. 5.3.1", "CTC-BC fails to complete any tasks (MLP)", "none", "ctcbc-mlp", size=1200,
          grid=BASELINES["dial"]),
    Claim("dial", "Sec. 5.3.1", "CTC-BC fails to complete any tasks (GRU)", "none", "ctcbc-gru", size=1200,
          grid=BASELINES["dial"]),
    Claim("dial", "Sec. 5.3.1, table 1", "TACO aligns better than GT-BC (GT-BC overfits)", "better", "taco",
          "gtbc", 1200, "align_forward_argmax", grid=HEADLINE["dial"]),
    Claim("dial", "Sec. 5.3.1, figure 9", "TACO's accuracy falls with L_test at a lower rate than GT-BC's",
          "slower", "taco", "gtbc", 1200, grid=BASELINES["dial"], ablation=PRESTAGE_ABLATION),
    *_alignment_claims("dial", 1200, BASELINES["dial"]),
    Claim("dial", "Sec. 5.3.1, figure 8", "TACO is superior to GT-BC at 1200 demonstrations", "better", "taco",
          "gtbc", 1200, grid=BASELINES["dial"], ablation=PRESTAGE_ABLATION),
    *_comparison("dial-image-small", "Sec. 5.3.2, figure 10", "TACO performs well in comparison with GT-BC",
                 "matches", 200),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "CTC-BC is unable to perform full task sequences (MLP)",
          "none", "ctcbc-mlp", size=200, grid=BASELINES["dial-image-small"]),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "CTC-BC is unable to perform full task sequences (GRU)",
          "none", "ctcbc-gru", size=200, grid=BASELINES["dial-image-small"]),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "TACO completes most sub-tasks", "most", "taco", size=200,
          grid=HEADLINE["dial-image-small"]),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "GT-BC completes most sub-tasks", "most", "gtbc", size=200,
          grid=HEADLINE["dial-image-small"]),
    *_alignment_claims("dial-image-small", 200, BASELINES["dial-image-small"]),
    *(Claim("dial-image-small", "Sec. 5.3.2, figure 10", f"TACO performs well in comparison with GT-BC ({p} "
            "protocol, the parameter average of the last 1000 steps: over half the run)", "matches", "taco",
            "gtbc", 200, grid=f"results/dial-image-small-{p}",
            ablation="the parameter average spans over half the run (spec/training.md eq. (15))")
      for p in ("recipe", "paper")),
    Claim("dial-image-small", "Sec. 5.3.2, figure 10", "TACO performs well in comparison with GT-BC", "matches",
          "taco", "gtbc", 200, grid=BASELINES["dial-image-small"],
          ablation=PRESTAGE_ABLATION + "; a STOP in one step; the average over half the run"),
)
"""Every claim of the paper this page tests, per domain: the headline (recipe protocol) and the
paper protocol first, then the baselines' claims, the paper's alignment figures, and last the
ablations (grids that are not equal budgets, or not today's recipe)."""


def protocol(records):
    """The protocol the cells ran under (spec/evaluation.md §7), from the configs their cell
    files record (taco_app.grid.store.load_cells: a table row carries no config)."""
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


def _shares(interval):
    """(mean, lo, hi) of a t interval of a share in percent, its ends clipped to [0, 100] (a
    share cannot lie outside)."""
    mean, lo, hi = interval
    return (mean, lo, hi) if lo is None else (mean, max(lo, 0.0), min(hi, 100.0))


def _slope(by_length):
    lengths = sorted(by_length, key=int)
    x = np.array([int(L) for L in lengths], dtype=float)
    y = 100 * np.array([by_length[L] for L in lengths])
    # the least-squares slope in closed form: exactly 0 when the accuracy is the same at every
    # length (polyfit's solver leaves a -1e-15 there, which read as "degrades")
    dx = x - x.mean()
    return float(dx @ (y - y.mean()) / (dx @ dx))


def _effective(rows):
    """One number per row: the independent test tasks its outcomes are worth (report.effective_tasks,
    spec/evaluation.md eq. (14)), or None where every task counts (or a row's sketches cannot be
    rebuilt)."""
    from taco_app.report import effective_tasks
    counts = [effective_tasks(r) for r in rows]
    return None if None in counts else counts


def _undecided(values, bound_distance, floor=0.0):
    """The reason of an undecided verdict: how many seeds would decide it at the mean and spread
    the seeds show (stats.seeds_to_decide), or that no number would."""
    n = stats.seeds_to_decide(values, bound_distance, floor)
    if n is None:
        return "the mean sits on a bound: more seeds would not decide it"
    return f"about {n} seeds would decide it at this mean and spread"


def _excludes_zero(first, second, seeds):
    """Whether the paired interval of two collapse records (strings of 0/1 over the seeds) would
    exclude 0 with `seeds` seeds at the same rates (the records repeated, counted as `seeds`)."""
    reps = -(-seeds // len(first))
    _, lo, hi = evaluate.paired_difference_interval(first * reps, second * reps, effective=seeds)
    return lo > 0 or hi < 0


def _collapses(claim, a, b, seeds):
    """(text, verdict or None, reason): the collapses of either method on the paired seeds
    (module docstring, "collapses"), or None when no seed collapses."""
    def collapsed(x, y):
        return "".join("1" if x[s]["task_accuracy"] < COLLAPSE and y[s]["task_accuracy"] >= COLLAPSE_PARTNER
                       else "0" for s in seeds)
    first, second = collapsed(a, b), collapsed(b, a)
    if "1" not in first + second:
        return None
    n = len(seeds)
    parts = []
    for algo, mark in ((claim.first, first), (claim.second, second)):
        k = mark.count("1")
        lo, hi = evaluate.wilson_interval(k, n)
        parts.append(f"{algorithms.label(algo)} collapses on {k} of {n} seeds ({100 * lo:.0f}-{100 * hi:.0f} %)")
    d, lo, hi = evaluate.paired_difference_interval(first, second)
    text = "; ".join(parts) + f"; difference {100 * d:+.0f} points [{100 * lo:+.0f}, {100 * hi:+.0f}]"
    if lo > 0:
        return text, "contradicted", f"{algorithms.label(claim.first)} collapses more often than " \
                                     f"{algorithms.label(claim.second)}: the interval lies above 0"
    if hi < 0:
        return text, None, ""
    need = next((m for m in range(n + 1, 201) if _excludes_zero(first, second, m)), None) if d != 0 else None
    said = (f"about {need} seeds would decide it at these rates" if need else
            "equal rates: more seeds would not decide it" if d == 0 else "more than 200 seeds would be needed")
    return text, "undecided", f"bimodal: the seeds collapse or not, and the collapse rates' interval includes 0; {said}"


def on_test(rows, test):
    """The rows as the named test condition saw them: each row that has tests[test] with that
    condition's task and sub-task accuracy, outcomes and task lengths in place of the standard
    test's, and its task accuracy by PIN length (from the outcomes) as task_accuracy_by_length;
    rows without it are left out."""
    out = []
    for r in rows:
        figures = (r.get("tests") or {}).get(test)
        if not figures:
            continue
        row = dict(r, test=test, **{k: figures[k] for k in ("task_accuracy", "subtask_accuracy", "outcomes",
                                                            "task_lengths", "n_tasks") if k in figures})
        row.pop("rules", None)
        lengths = figures.get("task_lengths") or []
        if len(set(lengths)) > 1 and figures.get("outcomes"):
            row["task_accuracy_by_length"] = {
                str(L): float(np.mean([o == "1" for o, n in zip(figures["outcomes"], lengths) if n == L]))
                for L in sorted(set(lengths))}
        else:
            row.pop("task_accuracy_by_length", None)
        out.append(row)
    return out


def judge(claim, rows):
    """(figure text, verdict, reason, cells) of claim on the grid's rows (on its named test
    condition's figures where it names one: on_test); verdict "no cells" where the grid lacks
    them."""
    if claim.test is not None:
        rows = on_test(rows, claim.test)
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
        floor = 0.0
        if claim.figure == "task_accuracy" and all(a[s].get("outcomes") and b[s].get("outcomes") for s in seeds):
            effective = _effective([a[s] for s in seeds])
            pairs = [(a[s]["outcomes"], b[s]["outcomes"]) for s in seeds]
            mean, lo, hi = (None if x is None else 100 * x for x in stats.seeds_difference_interval(pairs, effective))
            diffs = [100 * (x.count("1") - y.count("1")) / len(x) for x, y in pairs]
            d, p_lo, p_hi = stats.pooled_interval(pairs, effective)      # eq. (13)'s floor
            floor = 100 * max(d - p_lo, p_hi - d)
        else:
            diffs = [100 * (a[s][claim.figure] - b[s][claim.figure]) for s in seeds]
            mean, lo, hi = stats.t_interval(diffs)
        margin = EQUIVALENCE[claim.figure]
        text = _fmt(mean, lo, hi, " points") + f", {_seeds(len(seeds))}"
        if lo is None:
            return text, "undecided", "one seed: no interval over seeds", cells
        if claim.figure == "task_accuracy":
            collapse = _collapses(claim, a, b, seeds)
            if collapse is not None:
                text += f"; {collapse[0]}"
                if collapse[1] is not None:
                    return text, collapse[1], collapse[2], cells
        if claim.rule == "better":
            if lo > 0:
                return text, "holds", "the interval lies above 0", cells
            if hi < 0:
                return text, "contradicted", "the interval lies below 0", cells
            if lo >= -margin and hi <= margin:
                return text, "level", f"the interval lies within ±{margin:g} points of 0", cells
            return text, "undecided", (f"the interval includes 0 and reaches past ±{margin:g}; "
                                       + _undecided(diffs, max(abs(mean), margin - abs(mean)), floor)), cells
        if lo > -margin:
            return text, "holds", f"the interval lies above −{margin:g}", cells
        if hi < -margin:
            return text, "contradicted", f"the interval lies below −{margin:g}", cells
        return text, "undecided", f"the interval includes −{margin:g}; " + \
            _undecided(diffs, abs(mean + margin), floor), cells
    if claim.rule == "none":
        done = sum(a[s]["outcomes"].count("1") if a[s].get("outcomes") else
                   round(a[s]["task_accuracy"] * a[s]["n_tasks"]) for s in seeds)
        n = sum(int(a[s]["n_tasks"]) for s in seeds)
        effective = _effective([a[s] for s in seeds])
        count = n if effective is None else sum(effective)
        lo, hi = evaluate._wilson(done / n, count, 1.959963984540054)
        worth = "" if effective is None else f" (worth {count} independent tasks, eq. (14))"
        text = f"{done} of {n}{worth} ({100 * done / n:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]), {_seeds(len(seeds))}"
        if hi < NONE_BOUND:
            return text, "holds", f"the interval's upper end is below {100 * NONE_BOUND:.0f} %", cells
        if lo >= NONE_BOUND:
            return text, "contradicted", f"the interval lies at {100 * NONE_BOUND:.0f} % or above", cells
        return text, "undecided", f"the interval includes {100 * NONE_BOUND:.0f} %", cells
    if claim.rule == "most":
        values = [100 * a[s]["subtask_accuracy"] for s in seeds]
        mean, lo, hi = _shares(stats.t_interval(values))
        text = (f"{mean:.1f} % [{lo:.1f}, {hi:.1f}]" if lo is not None else f"{mean:.1f} %") + f", {_seeds(len(seeds))}"
        if lo is None:
            return text, "undecided", "one seed: no interval over seeds", cells
        if lo > 50:
            return text, "holds", "the interval lies above 50 %", cells
        if hi < 50:
            return text, "contradicted", "the interval lies below 50 %", cells
        return text, "undecided", "the interval includes 50 %; " + _undecided(values, abs(mean - 50)), cells
    if claim.rule == "value":
        values = [100 * a[s][claim.figure] for s in seeds]
        mean, lo, hi = _shares(stats.t_interval(values))
        (table, value), = claim.paper
        text = (f"{mean:.1f} % [{lo:.1f}, {hi:.1f}]" if lo is not None else f"{mean:.1f} %") \
            + f", {_seeds(len(seeds))}; paper {value:.1f}"
        if lo is None:
            lo = hi = mean
        sign = 1 if claim.side == "at least" else -1
        bound = value - sign * MARGIN
        near, far = (lo, hi) if sign > 0 else (-hi, -lo)      # the interval, on the claim's side
        beyond = sign * (mean - value) > MARGIN
        if near >= sign * bound:
            return text, "holds", (f"{claim.side} the paper's figure {'less' if sign > 0 else 'plus'} {MARGIN:.0f} points"
                                   + (f"; {abs(mean - value):.1f} points {'above' if sign > 0 else 'below'} it"
                                      if beyond else "")), cells
        if far < sign * bound:
            return text, "contradicted", f"{mean - value:+.1f} points from the paper's, past the {MARGIN:.0f}-point margin", cells
        return text, "undecided", f"the interval includes the paper's figure {'less' if sign > 0 else 'plus'} " \
            f"{MARGIN:.0f} points", cells
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
            return text, "contradicted", "TACO's accuracy falls faster: the interval lies below 0", cells
        if lo > 0 and own[2] is not None and own[2] < 0:
            return text, "holds", "the difference's interval lies above 0 and GT-BC degrades", cells
        if -SLOPE_EQUIVALENCE <= lo and hi <= SLOPE_EQUIVALENCE:
            return text, "level", f"the interval lies within ±{SLOPE_EQUIVALENCE:g} points per digit", cells
        if own[2] is None or own[2] >= 0:
            return text, "undecided", f"{algorithms.label(claim.second)} does not degrade with L_test here", cells
        return text, "undecided", "the difference's interval includes 0; " + \
            _undecided(diffs, max(abs(mean), SLOPE_EQUIVALENCE - abs(mean))), cells
    raise ValueError(f"claim rule: unknown {claim.rule!r}")


def page(root="."):
    """docs/claims.md as text, from the committed cells under root."""
    lines = ["# The paper's claims, tested on the committed cells",
             "",
             "Generated by `taco report --claims docs/claims.md` from the cell files of the grids "
             "below; a test regenerates it. Each domain's first rows come from equal budgets: the "
             "recipe protocol (the same 5-epoch pre-stage for every method; the headline) and the "
             "paper protocol (no pre-stage for any), spec/evaluation.md §7; the rows marked "
             "*ablation* come from grids that are not equal budgets or not today's recipe, and say why. "
             "Verdicts (spec/evaluation.md §8; taco_app/claims.py): **holds**, the interval lies on "
             "the side the paper's sentence claims; **level**, it lies within a stated margin of 0 "
             f"(±{EQUIVALENCE['task_accuracy']:g} points of task accuracy, ±{EQUIVALENCE['align_forward_argmax']:g} "
             "of alignment): neither method is ahead by more; **contradicted**, it lies on the "
             "other side; **undecided**, it crosses a bound, with the number of seeds that would "
             "decide it at the observed mean and spread. Rules: *better*, the mean of the per-seed "
             "paired differences with its interval over the seeds (spec/evaluation.md eq. (13): the "
             "t interval, never narrower than the paired interval of all seeds' tasks pooled; on the "
             "Dial, whose test PINs share one keypad, the pooled tasks count as their distinct key "
             "moves, eq. (14)); *matches* (\"approaches\"), the same interval, holds above "
             f"−{MARGIN:.0f} points; where a method *collapses* on some seeds (under "
             f"{100 * COLLAPSE:.0f} % while the other completes {100 * COLLAPSE_PARTNER:.0f} % or more) the "
             "collapse rates with their paired interval decide instead of a t interval over bimodal "
             "outcomes; *none*, completions pooled over the seeds with their Wilson interval, holds "
             f"below {100 * NONE_BOUND:.0f} %; *most*, sub-task accuracy, holds above 50 %; *value*, "
             f"one-sided as the paper's sentence: our figure at least (or at most) the paper's, less "
             f"(or plus) {MARGIN:.0f} points; *slower*, the per-seed slope of task accuracy against "
             "L_test. The Dial's task accuracy is the keypad's (spec/evaluation.md eq. (10), (11) "
             "give the other rules).",
             ""]
    verdicts, grids = {}, _Grids(root)
    for domain in HEADLINE:
        mine = [c for c in CLAIMS if c.domain == domain]
        used = list(dict.fromkeys(c.source for c in mine))
        lines += [f"## {NAMES[domain]}", "",
                  "Grids: " + "; ".join(f"[{g}](../{g}/README.md) ({grids.describe(g)})" for g in used) + ".", "",
                  "| claim | where | rule | ours [95 % interval] | verdict | why | cells |",
                  "|---|---|---|---|---|---|---|"]
        for claim in mine:
            text, verdict, why, cells = judge(claim, grids.rows(claim.source))
            cells = [f"[{claim.source}](../{claim.source}/README.md)"] + cells
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
            said = f"*ablation* ({claim.ablation}): {claim.text}" if claim.ablation else claim.text
            lines.append(f"| {said} | {claim.where} | {claim.rule} | {text} | **{verdict}** | {why} | "
                         f"{'; '.join(cells)} |")
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

    def describe(self, grid):
        """A grid's protocol as the page names it: from its cells, or its manifest before it has any."""
        return self.protocol(grid) if self._has_cells(grid) else self.planned(grid)


NAMES = {"navworld": "Nav-World", "craft": "Craft", "dial": "The Dial", "dial-image-small": "The image Dial"}


def summary(root="."):
    """The verdicts as README lines: per domain each claim but the alignment figures and the
    ablations with its verdict, then how many of the paper's alignment figures ours meet."""
    lines, grids = [], _Grids(root)
    for domain in HEADLINE:
        judged = [(c, judge(c, grids.rows(c.source))) for c in CLAIMS if c.domain == domain]
        said = [f"{c.text}: **{v[1]}**" for c, v in judged if c.rule != "value" and not c.ablation]
        values = [v[1] for c, v in judged if c.rule == "value" and v[1] != "no cells"]
        if values:
            said.append(f"the paper's alignment figures met (one-sided, {MARGIN:.0f}-point margin): "
                        f"{values.count('holds')} of {len(values)}")
        lines.append(f"- {NAMES[domain]}: " + "; ".join(said) + ".")
    return "\n".join(lines)
