"""The markdown report of a grid's cells (`taco report`, results.md): the summary table, every
seed, intervals, paired differences, failure kinds, task accuracy by length, the paper beside
ours; spec/evaluation.md §4-6."""
import os
import re

import numpy as np

import taco_sim
from taco_ref import algorithms, align, evaluate
from taco_ref.plumbing import files
from taco_app import paper as paper_mod, plots, stats
from taco_app.grid.store import load_failures, load_results

ALGOS = algorithms.names()
LABELS = {name: algorithms.label(name) for name in ALGOS}


PAPER_ALIGNMENT = {domain: {name: figures[domain] for name, figures in paper_mod.ALIGNMENT.items() if domain in figures}
                   for domain in sorted({d for figures in paper_mod.ALIGNMENT.values() for d in figures})}
"""Alignment accuracy (%) in the paper's tables, {domain: {algo: (Sec. 5, appendix B)}}
(taco_app.paper)."""


def _mean_std(values):
    v = 100 * np.asarray(values, dtype=float)
    return f"{v.mean():.1f} ± {v.std():.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def _groups(rows):
    """(algo, size, its rows) for each (algorithm, dataset size) that has rows, in the order of the
    tables' lines: algorithms as ALGOS lists them, sizes ascending."""
    for algo in ALGOS:
        for size in sorted({r["size"] for r in rows}):
            mine = [r for r in rows if r["algo"] == algo and r["size"] == size]
            if mine:
                yield algo, size, mine


def alignment_columns(results):
    """The alignment figures of the rows: one per decoder (align.DECODER_NAMES), then each
    algorithm's own (Algorithm.extra_alignments) where a row has it."""
    extra = [e for name in ALGOS for e in algorithms.get(name).extra_alignments
             if any(f"align_{e}" in r for r in results)]
    return [(f"align_{d}", f"align ({align.DECODER_LABELS[d]})") for d in align.DECODER_NAMES] + \
        [(f"align_{e}", f"align ({e})") for e in dict.fromkeys(extra)]


def table(results):
    """Markdown table: one row per (algo, size), mean ± std over seeds, in percent ("-" where
    an algorithm has no such figure)."""
    columns = [("task_accuracy", "task acc."), ("subtask_accuracy", "sub-task acc.")] + alignment_columns(results)
    lines = ["| algorithm | demos | seeds | " + " | ".join(h for _, h in columns) + " |",
             "|---|---:|---:|" + "---:|" * len(columns)]
    for algo, size, rows in _groups(results):
        cells = [_mean_std([r[k] for r in rows]) if all(k in r for r in rows) else "-" for k, _ in columns]
        lines.append(f"| {LABELS[algo]} | {size} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compact_table(results):
    """Markdown table for a summary page: one row per algorithm, one column per dataset size,
    each cell "task acc. / alignment (fwd argmax)", means over seeds in percent; where every
    cell also has the paper's per-sub-task rule (the Dial), "keypad / paper rule / alignment".
    The last column counts the seeds, one number per size (in order) where sizes differ.
    A line saying so when there is no finished cell yet (a grid that is being run)."""
    if not results:
        return "No finished cell yet."
    sizes = sorted({r["size"] for r in results})
    paper = all("paper" in r.get("rules", {}) for r in results)
    head = "task acc. keypad / paper rule / align (%)" if paper else "task acc. / align (%)"
    lines = [f"| {head} | " + " | ".join(f"{s} demos" for s in sizes) + " | seeds |",
             "|---|" + "---:|" * (len(sizes) + 1)]
    for algo in ALGOS:
        mine = [r for r in results if r["algo"] == algo]
        if not mine:
            continue
        shown = []
        for size in sizes:
            rows = [r for r in mine if r["size"] == size]
            rule = (f"{100 * np.mean([r['rules']['paper']['task_accuracy'] for r in rows]):.1f} / "
                    if paper and rows else "")
            shown.append(f"{100 * np.mean([r['task_accuracy'] for r in rows]):.1f} / {rule}"
                         f"{100 * np.mean([r['align_forward_argmax'] for r in rows]):.1f}" if rows else "-")
        counts = [len({r["seed"] for r in mine if r["size"] == size}) for size in sizes]
        counts = [c for c in counts if c]
        seeds = str(counts[0]) if len(set(counts)) == 1 else ", ".join(map(str, counts))
        lines.append(f"| {LABELS[algo]} | " + " | ".join(shown) + f" | {seeds} |")
    return "\n".join(lines)


def seed_table(results, key="task_accuracy", title="task acc."):
    """Markdown table of one figure with every seed visible: one row per (algo, size), one
    column per seed (in percent, "-" where a cell is missing), then mean ± std over the seeds."""
    seeds = sorted({r["seed"] for r in results})
    lines = [f"| {title} | demos | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± std |",
             "|---|---:|" + "---:|" * (len(seeds) + 1)]
    for algo, size, rows in _groups(results):
        by_seed = {r["seed"]: 100 * r[key] for r in rows}
        v = np.array(list(by_seed.values()))
        shown = [f"{by_seed[s]:.1f}" if s in by_seed else "-" for s in seeds]
        lines.append(f"| {LABELS[algo]} | {size} | " + " | ".join(shown) + f" | {v.mean():.1f} ± {v.std():.1f} |")
    return "\n".join(lines)


def _ci(r):
    """A cell's task accuracy with its Wilson 95 % interval, in percent (spec/evaluation.md eq. (5))."""
    n = int(r["n_tasks"])
    lo, hi = evaluate.wilson_interval(int(round(r["task_accuracy"] * n)), n)
    return f"{100 * r['task_accuracy']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def interval_table(results):
    """Markdown table of task accuracy with every seed's Wilson 95 % interval: one row per
    (algo, size), one column per seed."""
    results = [r for r in results if r.get("n_tasks")]
    if not results:
        return ""
    seeds = sorted({r["seed"] for r in results})
    lines = ["| task acc. [95 % interval] | demos | tasks | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|---:|---:|" + "---:|" * len(seeds)]
    for algo, size, rows in _groups(results):
        by_seed = {r["seed"]: r for r in rows}
        tasks = sorted({r["n_tasks"] for r in by_seed.values()})
        lines.append(f"| {LABELS[algo]} | {size} | {'/'.join(map(str, tasks))} | "
                     + " | ".join(_ci(by_seed[s]) if s in by_seed else "-" for s in seeds) + " |")
    return "\n".join(lines)


def effective_tasks(r):
    """The independent test tasks a row's outcomes are worth (taco_app.stats.effective_tasks,
    spec/evaluation.md eq. (14)): None where its domain draws a layout per task (every task
    counts) or its sketches cannot be rebuilt."""
    if r["domain"] not in taco_sim.names() or not taco_sim.get(r["domain"]).one_layout:
        return None
    sketches = cell_sketches(r)
    return None if sketches is None else stats.effective_tasks(taco_sim.get(r["domain"]), sketches)


def paired_table(results, first="taco", second="gtbc"):
    """Markdown table of first - second on the same test tasks (the cells of one seed share
    them): per seed the difference of task accuracy with its paired 95 % interval
    (spec/evaluation.md eq. (6)), then the mean of the per-seed differences with its interval
    over the seeds (eq. (13)); on a one-layout domain (the Dial) the tasks count as their
    distinct moves (eq. (14)). "" when no seed has both cells with their per-task outcomes."""
    lines = []
    for size in sorted({r["size"] for r in results}):
        cells = {(r["algo"], r["seed"]): r for r in results if r["size"] == size and r.get("outcomes")}
        seeds = sorted(s for (a, s) in cells if a == first and (second, s) in cells
                       and len(cells[(first, s)]["outcomes"]) == len(cells[(second, s)]["outcomes"]))
        if not seeds:
            continue
        pairs = [(cells[(first, s)]["outcomes"], cells[(second, s)]["outcomes"]) for s in seeds]
        effective = [effective_tasks(cells[(first, s)]) for s in seeds]
        effective = None if None in effective else effective
        shown = []
        for i, (a, b) in enumerate(pairs):
            d, lo, hi = evaluate.paired_difference_interval(a, b, effective=effective and effective[i])
            shown.append(f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
        mean, lo, hi = stats.seeds_difference_interval(pairs, effective)
        over = f"{100 * mean:+.1f}" if lo is None else f"{100 * mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        lines.append(f"| {size} | " + "; ".join(f"seed {s}: {c}" for s, c in zip(seeds, shown))
                     + f" | {over} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}) |")
    if not lines:
        return ""
    head = (f"| {LABELS[first]} − {LABELS[second]}, task acc. (points) | per seed [paired 95 % interval] "
            f"| mean over seeds [95 % interval] |")
    return "\n".join([head, "|---:|---|---|"] + lines)


def tests_table(results, first="taco", second="gtbc"):
    """Markdown tables of the named test conditions (spec/evaluation.md §9: the Dial's harder
    test) the cells were also evaluated on: per (algo, size) the task accuracy on the standard
    test and on each condition, mean ± std over seeds; per condition and size, first - second
    paired per seed and over the seeds (eq. (13), the PINs counted as eq. (14) says); per
    condition with mixed lengths, task accuracy by PIN length (mean over seeds). "" when no
    cell has any."""
    names = list(dict.fromkeys(n for r in results for n in (r.get("tests") or {})))
    if not names:
        return ""
    lines = ["| task acc. (%) | demos | seeds | standard | " + " | ".join(names) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(names)]
    for algo, size, rows in _groups([r for r in results if r.get("tests")]):
        cells = [_mean_std([r["task_accuracy"] for r in rows])]
        cells += [_mean_std([r["tests"][n]["task_accuracy"] for r in rows if n in r["tests"]])
                  if all(n in r["tests"] for r in rows) else "-" for n in names]
        lines.append(f"| {LABELS[algo]} | {size} | {len(rows)} | " + " | ".join(cells) + " |")
    parts = ["\n".join(lines)]
    for name in names:
        flat = [dict(r, **{k: v for k, v in r["tests"][name].items() if k in ("outcomes", "task_lengths")},
                     test=name) for r in results if name in (r.get("tests") or {})]
        paired = paired_table(flat, first, second)
        if paired:
            parts.append(paired.replace("task acc. (points)", f"task acc. on {name} (points)", 1))
        by_length = _length_split(flat, name)
        if by_length:
            parts.append(by_length)
    return "\n\n".join(parts)


def _length_split(rows, name):
    """Task accuracy by PIN length within a condition of mixed lengths (from each PIN's outcome
    and length): per (algo, size), the mean over seeds; "" for a single length."""
    lengths = sorted({L for r in rows for L in (r.get("task_lengths") or [])})
    if len(lengths) < 2:
        return ""
    lines = [f"| task acc. on {name} by PIN length (%) | demos | seeds | " + " | ".join(f"L = {L}" for L in lengths) + " |",
             "|---|---:|---:|" + "---:|" * len(lengths)]
    for algo, size, mine in _groups([r for r in rows if r.get("task_lengths")]):
        shown = []
        for L in lengths:
            per_seed = [np.mean([o == "1" for o, n in zip(r["outcomes"], r["task_lengths"]) if n == L])
                        for r in mine if L in r["task_lengths"]]
            shown.append(f"{100 * np.mean(per_seed):.1f}" if per_seed else "-")
        lines.append(f"| {LABELS[algo]} | {size} | {len(mine)} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def failure_kinds_table(results):
    """Markdown table of why test sketches failed (spec/evaluation.md eq. (4)): per (algo,
    size), each kind's share of the failed sketches, summed over seeds; "" when no cell has them."""
    rows = [r for r in results if r.get("failures") is not None and "outcomes" in r]
    if not rows:
        return ""
    kinds = [k for k in evaluate.FAILURE_KINDS if any(r["failures"].get(k) for r in rows)]
    lines = ["| " + " | ".join(["why tasks failed", "demos", "failed / tasks"] + kinds) + " |",
             "|---|---:|---:|" + "---:|" * len(kinds)]
    for algo, size, mine in _groups(rows):
        counts = {k: sum(r["failures"].get(k, 0) for r in mine) for k in kinds}
        failed, tasks = sum(counts.values()), sum(r["n_tasks"] for r in mine)
        shares = [f"{100 * counts[k] / max(failed, 1):.0f} %" for k in kinds]
        lines.append("| " + " | ".join([LABELS[algo], str(size), f"{failed} / {tasks}"] + shares) + " |")
    details = {}
    for r in rows:
        for key, n in r.get("failure_details", {}).items():
            details[(r["algo"], r["size"], key)] = details.get((r["algo"], r["size"], key), 0) + n
    if details:
        lines += ["", "| details | demos | sketches |", "|---|---:|---:|"]
        for (algo, size, key), n in sorted(details.items(), key=lambda kv: (ALGOS.index(kv[0][0]), kv[0][1], -kv[1])):
            lines.append(f"| {LABELS[algo]}: {key} | {size} | {n} |")
    return "\n".join(lines)


def cell_sketches(r):
    """The protocol's test sketches of a row (evaluate.protocol_sketches, the cell's seed; a row
    of a named condition, `test`, that condition's), or None when its domain is unknown or they
    do not give its recorded task_lengths."""
    if not r.get("task_lengths") or r["domain"] not in taco_sim.names():
        return None
    sketches = evaluate.protocol_sketches(taco_sim.get(r["domain"]), r["n_tasks"], r["seed"],
                                          split=r.get("split") or "test", test=r.get("test"))
    if [len(evaluate.unpad(row)) for row in sketches] != list(r["task_lengths"]):
        return None
    return sketches


def cell_subtask_success(r, sketches=None):
    """A row's per-sub-task success (evaluate.subtask_success), or None: recorded in the cell, else
    rebuilt from its task_progress and its test sketches (cell_sketches(r), unless given)."""
    if r.get("subtask_success"):
        return r["subtask_success"]
    if not r.get("task_progress"):
        return None
    sketches = cell_sketches(r) if sketches is None else sketches
    return None if sketches is None else evaluate.subtask_success(sketches, r["task_progress"])


def independent_accuracy(sketches, success):
    """The task accuracy the sub-task successes would give if sub-tasks failed independently:
    the mean over the sketches of the product of their sub-tasks' success shares."""
    share = {int(k): done / reached for k, (done, reached) in success.items()}
    return float(np.mean([np.prod([share.get(int(k), 0.0) for k in evaluate.unpad(row)])
                          for row in sketches]))


def subtask_table(results, domain):
    """Markdown table of each cell's sub-task success by sub-task (completed / reached, %;
    spec/evaluation.md eq. (7)) beside its task accuracy and the task accuracy those shares give
    if sub-tasks fail independently (independent_accuracy: "product"), one row per (algo, size,
    seed), its lowest entry in bold; "" when no cell has it."""
    rows = []
    for r in results:
        sketches = cell_sketches(r)                       # drawn once: the shares and "product"
        ok = cell_subtask_success(r, sketches)
        if ok:
            rows.append((r, ok, sketches))
    if not rows:
        return ""
    vocab = taco_sim.get(domain).vocab
    lines = ["| sub-task success by sub-task, % | demos | seed | task acc. | product | "
             + " | ".join(vocab) + " |", "|---|---:|---:|---:|---:|" + "---:|" * len(vocab)]
    for algo in ALGOS:
        for r, ok, sketches in sorted((x for x in rows if x[0]["algo"] == algo),
                                      key=lambda x: (x[0]["size"], x[0]["seed"])):
            shares = {int(k): 100 * done / reached for k, (done, reached) in ok.items()}
            low = min(shares, key=shares.get)
            cells = [("-" if k not in shares else f"**{shares[k]:.0f}**" if k == low else f"{shares[k]:.0f}")
                     for k in range(len(vocab))]
            product = "-" if sketches is None else f"{100 * independent_accuracy(sketches, ok):.1f}"
            lines.append(f"| {LABELS[algo]} | {r['size']} | {r['seed']} | {100 * r['task_accuracy']:.1f} | "
                         f"{product} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def prefix_table(results, first=25):
    """Markdown table of task and sub-task accuracy over the first `first` test tasks beside all
    of them (the image Dial's figure reports 25 test tasks; the first 25 of a cell's tasks are
    the tasks of a cell with n_tasks 25: the sketches and episode seeds are drawn in order),
    mean ± std over seeds per (algo, size), in percent; "" when no cell has more tasks than
    `first` and its per-task progress."""
    rows = [r for r in results if r.get("task_progress") and r.get("task_lengths") and r["n_tasks"] > first]
    if not rows:
        return ""
    n_all = sorted({r["n_tasks"] for r in rows})
    all_label = "/".join(str(n) for n in n_all)
    lines = [f"| algorithm | demos | seeds | task acc., first {first} | sub-task acc., first {first} | "
             f"task acc., all {all_label} | sub-task acc., all {all_label} |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for algo, size, mine in _groups(rows):
        head = [[r["outcomes"][:first].count("1") / first for r in mine],
                [sum(r["task_progress"][:first]) / sum(r["task_lengths"][:first]) for r in mine]]
        whole = [[r["task_accuracy"] for r in mine], [r["subtask_accuracy"] for r in mine]]
        lines.append(f"| {LABELS[algo]} | {size} | {len(mine)} | "
                     + " | ".join(_mean_std(v) for v in head + whole) + " |")
    return "\n".join(lines)


def length_table(results, rule=None):
    """Markdown table of task accuracy against L_test (paper figure 8): one row per (algo, size),
    mean ± std over seeds per length, in percent; "" when no cell measured it. rule: one of the
    env's other success rules (evaluate.RULES; None: the task environment's own verdict)."""
    rows = [r for r in results if plots.lengths_of(r, rule)]
    if not rows:
        return ""
    lengths = sorted({L for r in rows for L in plots.lengths_of(r, rule)}, key=int)
    title = "task acc. by L_test" + (f", {rule} rule" if rule else "")
    lines = [f"| {title} | demos | seeds | " + " | ".join(f"L = {L}" for L in lengths) + " |",
             "|---|---:|---:|" + "---:|" * len(lengths)]
    for algo, size, group in _groups(rows):
        mine = [plots.lengths_of(r, rule) for r in group]
        shown = [_mean_std([m[L] for m in mine if L in m]) if any(L in m for m in mine) else "-"
                 for L in lengths]
        lines.append(f"| {LABELS[algo]} | {size} | {len(mine)} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def rules_table(results):
    """Markdown table of task and sub-task accuracy under each success rule the cells recorded
    (the Dial: the keypad's, "strict" and "paper", spec/evaluation.md eq. (10)-(11)): one row
    per (algo, size), mean ± std over seeds, in percent; "" when no cell has other rules."""
    rows = [r for r in results if r.get("rules")]
    if not rows:
        return ""
    rules = [k for k in evaluate.RULES if all(k in r["rules"] for r in rows)]
    heads = ["task: keypad"] + [f"task: {k}" for k in rules] + ["sub-task: keypad"] + [f"sub-task: {k}" for k in rules]
    lines = ["| success rule (%) | demos | seeds | " + " | ".join(heads) + " |",
             "|---|---:|---:|" + "---:|" * len(heads)]
    for algo, size, mine in _groups(rows):
        cols = [[r["task_accuracy"] for r in mine]] + [[r["rules"][k]["task_accuracy"] for r in mine] for k in rules] \
            + [[r["subtask_accuracy"] for r in mine]] + [[r["rules"][k]["subtask_accuracy"] for r in mine] for k in rules]
        lines.append(f"| {LABELS[algo]} | {size} | {len(mine)} | " + " | ".join(_mean_std(c) for c in cols) + " |")
    return "\n".join(lines)


def paper_table(results, domain):
    """Markdown table: our alignment accuracy (argmax of the forward variables, mean ± std over
    seeds per dataset size) beside the paper's (PAPER_ALIGNMENT); "" for a domain the paper lacks."""
    paper = PAPER_ALIGNMENT.get(domain)
    if paper is None:
        return ""
    sizes = sorted({r["size"] for r in results})
    lines = ["| alignment (fwd argmax) | paper, Sec. 5 table | paper, appendix B table | "
             + " | ".join(f"ours, {s} demos" for s in sizes) + " |",
             "|---|---:|---:|" + "---:|" * len(sizes)]
    for algo in (a for a in ALGOS if a in paper):
        ours = [[r["align_forward_argmax"] for r in results if r["algo"] == algo and r["size"] == s]
                for s in sizes]
        if any(ours):
            shown = [_mean_std(v) if v else "-" for v in ours]
            lines.append(f"| {LABELS[algo]} | {paper[algo][0]:.1f} | {paper[algo][1]:.1f} | "
                         + " | ".join(shown) + " |")
    return "\n".join(lines)


def report(results, failures=()):
    """results.md: per domain the summary table, then task, sub-task and alignment accuracy with
    every seed visible, task accuracy against L_test (when measured) and the alignment beside
    the paper's; then the cells that failed in the last run, with their errors."""
    parts = []
    domains = sorted({r["domain"] for r in results})
    for domain in domains:
        mine = [r for r in results if r["domain"] == domain]
        if len(domains) > 1:
            parts.append(f"## {domain}")
        parts += [table(mine), prefix_table(mine), seed_table(mine, "task_accuracy", "task acc."),
                  interval_table(mine),
                  paired_table(mine), tests_table(mine), failure_kinds_table(mine), subtask_table(mine, domain),
                  seed_table(mine, "align_forward_argmax", "align (fwd argmax)"),
                  seed_table(mine, "subtask_accuracy", "sub-task acc.")]
        if any("align_subtask_forward_argmax" in r for r in mine):   # spec/evaluation.md eq. (3)
            measured = [r for r in mine if "align_subtask_forward_argmax" in r]
            parts.append(seed_table(measured, "align_subtask_forward_argmax",
                                    "align by sub-task id (fwd argmax)"))
        parts += [rules_table(mine), length_table(mine)]
        parts += [length_table(mine, rule) for rule in evaluate.RULES]
        parts += [paper_table(mine, domain)]
        legacy = sum(1 for r in mine if r.get("legacy"))
        if legacy:
            parts.append(f"({legacy} of these {len(mine)} cells are read from results.json, the "
                         f"record of an earlier version; `taco experiment ... --migrate` converts them "
                         f"into cell files.)")
    if failures:
        parts.append(f"Failed in the last run ({len(failures)} cells):\n\n"
                     + "\n".join(f"- {f['cell']['domain']} {f['cell']['algo']} n{f['cell']['size']} "
                                 f"seed {f['cell']['seed']}: {f['error']}" for f in failures))
    return "\n\n".join(p for p in parts if p)


def write_report(out_dirs, dest=None):
    """Read the cells of every directory in out_dirs (a cell present in several is taken from
    the first), write dest/results.md (dest: the only out_dir unless given) and the figures;
    returns (the report text, the paths written, a note when there are no figures)."""
    if dest is None:
        if len(out_dirs) != 1:
            raise ValueError("--out: needed when reporting more than one directory")
        dest = out_dirs[0]
    rows, failures, seen = [], [], set()
    for d in out_dirs:
        if not os.path.isdir(d):
            raise FileNotFoundError(f"{d}: no such directory")
        for r in load_results(d):
            ident = tuple(r[k] for k in ("domain", "algo", "size", "seed"))
            if ident not in seen:
                seen.add(ident)
                rows.append(r)
        failures += load_failures(d)
    if not rows and not failures:
        raise ValueError(f"{', '.join(out_dirs)}: no cell files (OUT/cells/...) and no results.json")
    text = report(rows, failures)
    os.makedirs(dest, exist_ok=True)
    written = [os.path.join(dest, "results.md")]
    files.write_bytes(written[0], (text + "\n").encode())
    try:
        import matplotlib  # noqa: F401  (optional: the `plot` extra)
    except ImportError:
        return text, written, "no figures: matplotlib is not installed (pip install -e '.[plot]')"
    domains = sorted({r["domain"] for r in rows})
    for domain in domains:
        mine = [r for r in rows if r["domain"] == domain]
        suffix = f"-{domain}" if len(domains) > 1 else ""
        written.append(os.path.join(dest, f"accuracy{suffix}.png"))
        plots.plot(mine, written[-1])
        for rule in (None,) + tuple(evaluate.RULES):
            if any(plots.lengths_of(r, rule) for r in mine):
                written.append(os.path.join(dest, f"accuracy_by_length{suffix}{'-' + rule if rule else ''}.png"))
                plots.plot_lengths(mine, written[-1], rule)
    return text, written, None




# --- tables in other documents (README.md) ---------------------------------------------------

GENERATED = re.compile(r"(<!-- table: (\S+) -->\n)(.*?)(<!-- end of table -->)", re.S)
"""A generated table in a markdown file: `<!-- table: results/GRID -->`, the table, and
`<!-- end of table -->`; `python -m taco_app.report FILE` rewrites every such table from the
cells of results/GRID (compact_table: the summary of its results.md)."""


CLAIMS_BLOCK = re.compile(r"(<!-- claims -->\n)(.*?)(<!-- end of claims -->)", re.S)
"""The claims' verdicts in a markdown file: `<!-- claims -->`, one line per domain
(taco_app.claims.summary), `<!-- end of claims -->`."""


def fill_tables(text, root="."):
    """text with every marked table replaced by compact_table(load_results(root/GRID)), every
    marked command block by the commands of root/GRID/grid.yaml (taco_app.grid.manifest.fill_commands),
    and the claims block by taco_app.claims.summary(root)."""
    def fill(match):
        rows = load_results(os.path.join(root, match.group(2)))
        return match.group(1) + compact_table(rows) + "\n" + match.group(4)

    def verdicts(match):
        from taco_app import claims
        return match.group(1) + claims.summary(root) + "\n" + match.group(3)
    from taco_app.grid import manifest as grids
    return grids.fill_commands(CLAIMS_BLOCK.sub(verdicts, GENERATED.sub(fill, text)), root)


def main(argv=None):
    """python -m taco_app.report FILE...: regenerate the marked tables and command blocks of each
    markdown FILE (tables and claims: results/GRID relative to FILE's folder; command blocks:
    results/GRID as typed from the repository root, found from FILE's folder upwards)."""
    import sys
    for path in (argv if argv is not None else sys.argv[1:]):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        files.write_bytes(path, fill_tables(text, os.path.dirname(os.path.abspath(path))).encode())
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

