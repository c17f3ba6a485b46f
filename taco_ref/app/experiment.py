"""Experiments: train every algorithm on a domain and compare them (paper Sec. 5).

A *cell* of a results table is (domain, algorithm, dataset size, seed): collect its data, train
one algorithm, and measure zero-shot task accuracy, sub-task accuracy and alignment accuracy on
held-out demonstrations (and, when asked, task accuracy against the test sketch length, paper
figure 8). `run` computes one cell's figures; `collect` and `run_cell` are the two kinds of
task the engine (taco_ref/app/engine.py) runs, locally or on a Dask cluster.

Every finished cell is one JSON file, OUT/cells/<domain>/<algo>/n<size>/seed<seed>.json
(`write_cell`), keyed by `cell_key`; `load_results` reads them back, `write_report` turns them
into results.md and the figures (`taco report`). Protocol: spec/evaluation.md §4-6.

Domains come from taco_sim's registry (taco_sim.get(name), the contract in taco_sim/domain.py);
the evaluation is taco_ref.evaluate.protocol, the same as `taco evaluate`'s.
"""
import glob
import hashlib
import json
import os
import platform
import time
from dataclasses import asdict

import numpy as np
from scipy import stats as scipy_stats

import taco_ref
import taco_sim
from taco_ref import data as data_mod, evaluate, files, train

ALGOS = ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru")
LABELS = {"taco": "TACO", "gtbc": "GT-BC", "ctcbc-mlp": "CTC-BC (MLP)", "ctcbc-gru": "CTC-BC (GRU)"}

CELL_FIELDS = ("domain", "algo", "size", "seed", "train_sketch_len", "n_tasks", "n_align", "test_lengths")
"""What a cell is, besides its training config (`cell["config"]`, the settings given)."""
TRAIN_DATA_SEED, TEST_DATA_SEED = 10_000, 20_000
"""A cell of seed s trains on collect(size, L, 10_000 + s) and aligns collect(n_align, L, 20_000 + s)."""


def data_specs(cell):
    """(training set, held-out set) of a cell, each (domain, n, sketch_len, seed): what
    `collect` needs, and the name under which the engine collects it once for every cell."""
    L = cell["train_sketch_len"]
    return ((cell["domain"], cell["size"], L, TRAIN_DATA_SEED + cell["seed"]),
            (cell["domain"], cell["n_align"], L, TEST_DATA_SEED + cell["seed"]))


def collect(spec):
    """The data task: domain.collect(n, sketch_len, seed) for spec = (domain, n, sketch_len, seed);
    deterministic, so any worker (or a later run) collects the same Demos (same fingerprint)."""
    domain, n, sketch_len, seed = spec
    return taco_sim.get(domain).collect(n, sketch_len, seed)


def run(cell, demos=None, test_demos=None):
    """One cell's figures (a dict): task_accuracy, subtask_accuracy, n_tasks, align_<decoder>
    for every decoder, task_accuracy_by_length (with test_lengths), epochs, policy_epochs,
    best_held_out_loss, train_loglik, train_seconds.

    cell: the CELL_FIELDS and config (TrainConfig settings; algo and seed are the cell's).
    demos, test_demos: the cell's training and held-out data (`collect(data_specs(cell)[i])`);
    collected here when not given.
    """
    dom = taco_sim.get(cell["domain"])
    train_spec, test_spec = data_specs(cell)
    demos = collect(train_spec) if demos is None else demos
    test_demos = collect(test_spec) if test_demos is None else test_demos
    cfg = train.TrainConfig.from_dict(dict(cell["config"], algo=cell["algo"], seed=cell["seed"]))
    validate = (evaluate.validation_rollouts(dom, cfg.select_tasks, cell["seed"], cell["train_sketch_len"])
                if cfg.select == "rollouts" else None)
    model = train.train(demos, cfg, progress=False, validate=validate)
    acc = evaluate.protocol(model, dom, cell["n_tasks"], cell["seed"], lengths=cell.get("test_lengths") or ())
    both = evaluate.alignment_accuracies(model, test_demos)
    align_acc, by_subtask = both["position"], both["subtask"]
    policy_stage = [h for h in model.info["history"] if h["stage"] == "policy"]
    return dict(acc, **{f"align_{k}": v for k, v in align_acc.items()},
                **{f"align_subtask_{k}": v for k, v in by_subtask.items()},
                epochs=len(model.info["history"]), policy_epochs=len(policy_stage),
                best_held_out_loss=min(h["held_out_loss"] for h in policy_stage),
                train_loglik=model.info.get("train_loglik"), train_seconds=model.info["seconds"])


def full_config(cell):
    """The cell's whole TrainConfig as a dict (every field, defaults included)."""
    return asdict(train.TrainConfig.from_dict(dict(cell["config"], algo=cell["algo"], seed=cell["seed"])))


def cell_key(cell):
    """SHA-256 of what determines a cell's figures: domain, algo, size, seed, sketch lengths,
    evaluation sizes and the full training config. The data seeds are the seed's
    (TRAIN_DATA_SEED + seed, TEST_DATA_SEED + seed), so the seed stands for them."""
    fields = {k: cell.get(k) for k in CELL_FIELDS}
    fields["config"] = full_config(cell)
    # each field at the value it trained with before the field existed (dtype's default is now
    # float32; float64 is what every older cell ran): keys from before the field stay valid
    for name, before in (("dtype", "float64"), ("act_l2", 0.0), ("stop_l2", 0.0), ("lr_decay", "none"),
                         ("select", "held_out_loss"), ("ema", 0.0)):
        if fields["config"][name] == before:
            del fields["config"][name]
    if fields["config"]["sigma"] != "learned":    # sigma_init is read only with a learned sigma
        del fields["config"]["sigma_init"]
    if fields["config"].get("select") != "rollouts":   # read only when epochs are chosen by rollouts
        del fields["config"]["select_tasks"], fields["config"]["select_from"]
    n_train = cell["size"] - data_mod.holdout_count(cell["size"], fields["config"]["holdout_fraction"])
    if train.passes_per_epoch(fields["config"]["epoch_size"], n_train) == 1:
        del fields["config"]["epoch_size"]        # one pass per epoch: the same run as before the field
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def versions():
    """The software a figure was computed with."""
    return {"taco_ref": taco_ref.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def run_cell(cell, demos, test_demos):
    """The cell task: `run` plus what makes its result a record (the contents of its cell file):
    key, cell, config (full), data (seeds, sizes, fingerprints), figures, seconds (wall time of
    the cell where it ran), train_seconds, versions, and the BLAS thread variables it ran with (the thread
    count changes float64 sums in the last bit: engine._single_threaded)."""
    start = time.time()
    figures = run(cell, demos, test_demos)
    train_seconds = figures.pop("train_seconds")          # timings are not figures: they vary
    data = {}
    for name, spec, d in zip(("train", "test"), data_specs(cell), (demos, test_demos)):
        data[name] = {"n": spec[1], "sketch_len": spec[2], "seed": spec[3], "fingerprint": d.fingerprint()}
    return {"key": cell_key(cell), "cell": {k: cell.get(k) for k in CELL_FIELDS},
            "config": full_config(cell), "data": data, "figures": figures,
            "seconds": time.time() - start, "train_seconds": train_seconds, "versions": versions(),
            "threads": {v: os.environ.get(v) for v in BLAS_THREAD_VARS}}


# --- cell files -----------------------------------------------------------------------------

def cell_path(out_dir, cell):
    """OUT/cells/<domain>/<algo>/n<size>/seed<seed>.json"""
    return os.path.join(out_dir, "cells", cell["domain"], cell["algo"], f"n{cell['size']}",
                        f"seed{cell['seed']}.json")


def write_cell(out_dir, record):
    """Write a cell's record to its cell file, atomically; returns the path."""
    path = cell_path(out_dir, record["cell"])
    files.write_bytes(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return path


def read_cell(path):
    """The record in a cell file, or None when it is not one (unreadable, not JSON, or without
    key, cell and figures): such a file is never reused, its cell runs again."""
    try:
        record = files.read_json(path)
    except ValueError:
        return None
    if not isinstance(record, dict) or not all(isinstance(record.get(k), (str, dict))
                                               for k in ("key", "cell", "figures")):
        return None
    return record


def finished(out_dir, cell):
    """The record of cell in out_dir if it was computed with this very cell (same cell_key), else
    None: a cell file of another config is never reused."""
    record = read_cell(cell_path(out_dir, cell))
    return record if record is not None and record["key"] == cell_key(cell) else None


def load_cells(out_dir):
    """Every cell file's record under out_dir/cells, in path order."""
    paths = sorted(glob.glob(os.path.join(out_dir, "cells", "*", "*", "n*", "seed*.json")))
    return [r for r in map(read_cell, paths) if r is not None]


def flat(record):
    """A record as one row for the tables and figures: the cell's fields, its figures, key and seconds."""
    return dict(record["cell"], **record["figures"], key=record["key"], seconds=record.get("seconds"))


# --- results.json, the record of earlier versions --------------------------------------------

def _read_list(path):
    """The JSON list of objects in path (bounded read), or [] when there is no such file."""
    if not os.path.exists(path):
        return []
    try:
        value = json.loads(files.read_bytes(path, files.MAX_JSON_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not valid JSON ({type(err).__name__})") from None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{path}: expected a JSON list of objects")
    return value


def load(out_dir):
    """The cells of out_dir/results.json (what `taco experiment` wrote before cell files), or []."""
    return _read_list(os.path.join(out_dir, "results.json"))


def migrate(cells, out_dir):
    """Convert the cells of results.json in out_dir whose key equals cell_key(cell) into cell
    files (the grid's cells carry the full config that the old record did not keep; a record
    of another config matches no key and is left alone). Cells that already have a finished
    cell file are skipped. Returns the records written. The old record has no data
    fingerprints and only the training time: the cell files say `"migrated": "results.json"`."""
    by_key = {r.get("key"): r for r in load(out_dir)}
    written = []
    for cell in cells:
        key = cell_key(cell)
        old = by_key.get(key)
        if old is None or finished(out_dir, cell) is not None:
            continue
        figures = {k: v for k, v in old.items()
                   if k not in CELL_FIELDS + ("key", "config", "data", "test_data", "seconds")}
        data = {name: {"n": spec[1], "sketch_len": spec[2], "seed": spec[3], "fingerprint": None}
                for name, spec in zip(("train", "test"), data_specs(cell))}
        record = {"key": key, "cell": {k: cell.get(k) for k in CELL_FIELDS},
                  "config": full_config(cell), "data": data, "figures": figures,
                  "seconds": old.get("seconds"), "train_seconds": old.get("seconds"), "versions": None,
                  "migrated": "results.json"}
        write_cell(out_dir, record)
        written.append(record)
    return written


def load_results(out_dir):
    """The rows of out_dir: every cell file, and the results.json cells of (domain, algo, size,
    seed) that have no cell file (so a directory not yet migrated still reports)."""
    rows = [flat(r) for r in load_cells(out_dir)]
    have = {tuple(r[k] for k in ("domain", "algo", "size", "seed")) for r in rows}
    rows += [dict(r, legacy=True) for r in load(out_dir)
             if tuple(r.get(k) for k in ("domain", "algo", "size", "seed")) not in have]
    return rows


def load_failures(out_dir):
    """The failed cells of the last grid run in out_dir (out_dir/failures.json), or []."""
    return _read_list(os.path.join(out_dir, "failures.json"))


# --- tables, report and figures --------------------------------------------------------------

PAPER_ALIGNMENT = {
    # Alignment accuracy (%) in the paper's table of alignment accuracy: (Sec. 5 table, appendix B
    # table). The two agree except for the Dial, where the appendix's CTC-BC figures are the ones
    # that match its text ("CTC-BC ... is not capable of aligning the sequences", Sec. 5.3.1).
    "navworld": {"taco": (95.3, 95.3), "ctcbc-mlp": (89.0, 89.0), "ctcbc-gru": (80.0, 80.0), "gtbc": (94.6, 94.6)},
    "craft": {"taco": (95.6, 95.6), "ctcbc-mlp": (41.4, 41.4), "ctcbc-gru": (57.1, 57.1), "gtbc": (99.4, 99.4)},
    "dial": {"taco": (99.8, 98.9), "ctcbc-mlp": (90.1, 31.4), "ctcbc-gru": (93.4, 28.6), "gtbc": (97.3, 98.7)},
}


def _mean_std(values):
    v = 100 * np.asarray(values, dtype=float)
    return f"{v.mean():.1f} ± {v.std():.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def table(results):
    """Markdown table: one row per (algo, size), mean ± std over seeds, in percent."""
    keys = ("task_accuracy", "subtask_accuracy", "align_forward_argmax", "align_posterior_argmax",
            "align_viterbi")
    heads = ("task acc.", "sub-task acc.", "align (fwd argmax)", "align (posterior)", "align (Viterbi)")
    lines = ["| algorithm | demos | seeds | " + " | ".join(heads) + " |",
             "|---|---:|---:|" + "---:|" * len(keys)]
    for algo in ALGOS:
        for size in sorted({r["size"] for r in results}):
            rows = [r for r in results if r["algo"] == algo and r["size"] == size]
            if rows:
                cells = [_mean_std([r[k] for r in rows]) for k in keys]
                lines.append(f"| {LABELS[algo]} | {size} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_table(results, key="task_accuracy", title="task acc."):
    """Markdown table of one figure with every seed visible: one row per (algo, size), one
    column per seed (in percent, "-" where a cell is missing), then mean ± std over the seeds."""
    seeds = sorted({r["seed"] for r in results})
    lines = [f"| {title} | demos | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± std |",
             "|---|---:|" + "---:|" * (len(seeds) + 1)]
    for algo in ALGOS:
        for size in sorted({r["size"] for r in results}):
            by_seed = {r["seed"]: 100 * r[key] for r in results if r["algo"] == algo and r["size"] == size}
            if not by_seed:
                continue
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
    for algo in ALGOS:
        for size in sorted({r["size"] for r in results}):
            by_seed = {r["seed"]: r for r in results if r["algo"] == algo and r["size"] == size}
            if by_seed:
                tasks = sorted({r["n_tasks"] for r in by_seed.values()})
                lines.append(f"| {LABELS[algo]} | {size} | {'/'.join(map(str, tasks))} | "
                             + " | ".join(_ci(by_seed[s]) if s in by_seed else "-" for s in seeds) + " |")
    return "\n".join(lines)


def paired_table(results, first="taco", second="gtbc"):
    """Markdown table of first - second on the same test tasks (the cells of one seed share
    them): per seed the difference of task accuracy with its paired 95 % interval
    (spec/evaluation.md eq. (6)), then the mean of the per-seed differences with its t interval
    over the seeds. "" when no seed has both cells with their per-task outcomes."""
    lines = []
    for size in sorted({r["size"] for r in results}):
        cells = {(r["algo"], r["seed"]): r for r in results if r["size"] == size and r.get("outcomes")}
        seeds = sorted(s for (a, s) in cells if a == first and (second, s) in cells
                       and len(cells[(first, s)]["outcomes"]) == len(cells[(second, s)]["outcomes"]))
        if not seeds:
            continue
        diffs, shown = [], []
        for s in seeds:
            d, lo, hi = evaluate.paired_difference_interval(cells[(first, s)]["outcomes"],
                                                            cells[(second, s)]["outcomes"])
            diffs.append(100 * d)
            shown.append(f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
        mean = float(np.mean(diffs))
        if len(diffs) > 1:
            half = float(scipy_stats.t.ppf(0.975, len(diffs) - 1) * np.std(diffs, ddof=1) / np.sqrt(len(diffs)))
            over = f"{mean:+.1f} [{mean - half:+.1f}, {mean + half:+.1f}]"
        else:
            over = f"{mean:+.1f}"
        lines.append(f"| {size} | " + "; ".join(f"seed {s}: {c}" for s, c in zip(seeds, shown))
                     + f" | {over} ({len(diffs)} seeds) |")
    if not lines:
        return ""
    head = (f"| {LABELS[first]} − {LABELS[second]}, task acc. (points) | per seed [paired 95 % interval] "
            f"| mean over seeds [95 % t interval] |")
    return "\n".join([head, "|---:|---|---|"] + lines)


def failure_kinds_table(results):
    """Markdown table of why test sketches failed (spec/evaluation.md eq. (4)): per (algo,
    size), each kind's share of the failed sketches, summed over seeds; "" when no cell has them."""
    rows = [r for r in results if r.get("failures") is not None and "outcomes" in r]
    if not rows:
        return ""
    kinds = [k for k in evaluate.FAILURE_KINDS if any(r["failures"].get(k) for r in rows)]
    lines = ["| why tasks failed | demos | failed / tasks | " + " | ".join(kinds) + " |",
             "|---|---:|---:|" + "---:|" * len(kinds)]
    for algo in ALGOS:
        for size in sorted({r["size"] for r in rows}):
            mine = [r for r in rows if r["algo"] == algo and r["size"] == size]
            if not mine:
                continue
            counts = {k: sum(r["failures"].get(k, 0) for r in mine) for k in kinds}
            failed, tasks = sum(counts.values()), sum(r["n_tasks"] for r in mine)
            lines.append(f"| {LABELS[algo]} | {size} | {failed} / {tasks} | "
                         + " | ".join(f"{100 * counts[k] / max(failed, 1):.0f} %" for k in kinds) + " |")
    details = {}
    for r in rows:
        for key, n in r.get("failure_details", {}).items():
            details[(r["algo"], r["size"], key)] = details.get((r["algo"], r["size"], key), 0) + n
    if details:
        lines += ["", "| details | demos | sketches |", "|---|---:|---:|"]
        for (algo, size, key), n in sorted(details.items(), key=lambda kv: (ALGOS.index(kv[0][0]), kv[0][1], -kv[1])):
            lines.append(f"| {LABELS[algo]}: {key} | {size} | {n} |")
    return "\n".join(lines)


def length_table(results):
    """Markdown table of task accuracy against L_test (paper figure 8): one row per (algo, size),
    mean ± std over seeds per length, in percent; "" when no cell measured it."""
    rows = [r for r in results if r.get("task_accuracy_by_length")]
    if not rows:
        return ""
    lengths = sorted({L for r in rows for L in r["task_accuracy_by_length"]}, key=int)
    lines = ["| task acc. by L_test | demos | seeds | " + " | ".join(f"L = {L}" for L in lengths) + " |",
             "|---|---:|---:|" + "---:|" * len(lengths)]
    for algo in ALGOS:
        for size in sorted({r["size"] for r in rows}):
            mine = [r["task_accuracy_by_length"] for r in rows if r["algo"] == algo and r["size"] == size]
            if mine:
                shown = [_mean_std([m[L] for m in mine if L in m]) if any(L in m for m in mine) else "-"
                         for L in lengths]
                lines.append(f"| {LABELS[algo]} | {size} | {len(mine)} | " + " | ".join(shown) + " |")
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
    for algo in ALGOS:
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
        parts += [table(mine), seed_table(mine, "task_accuracy", "task acc."), interval_table(mine),
                  paired_table(mine), failure_kinds_table(mine),
                  seed_table(mine, "align_forward_argmax", "align (fwd argmax)"),
                  seed_table(mine, "subtask_accuracy", "sub-task acc.")]
        if any("align_subtask_forward_argmax" in r for r in mine):   # spec/evaluation.md eq. (3)
            measured = [r for r in mine if "align_subtask_forward_argmax" in r]
            parts.append(seed_table(measured, "align_subtask_forward_argmax",
                                    "align by sub-task id (fwd argmax)"))
        parts += [length_table(mine), paper_table(mine, domain)]
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
        plot(mine, written[-1])
        if any(r.get("task_accuracy_by_length") for r in mine):
            written.append(os.path.join(dest, f"accuracy_by_length{suffix}.png"))
            plot_lengths(mine, written[-1])
    return text, written, None


def _spread(n, width):
    """n offsets in [-width, width] that keep one algorithm's per-seed points apart from another's."""
    return np.linspace(-width, width, n) if n > 1 else np.zeros(1)


def plot(results, path):
    """Task and alignment accuracy against dataset size, one line per algorithm: mean ± std over
    seeds as error bars, every seed as a point (paper figures 4, 5, 7; PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    sizes = sorted({r["size"] for r in results})
    algos = [a for a in ALGOS if any(r["algo"] == a for r in results)]
    offsets = _spread(len(algos), 0.04)
    for algo, off in zip(algos, offsets):
        for ax, key in zip(axes, ("task_accuracy", "align_forward_argmax")):
            pts = {s: [100 * r[key] for r in results if r["algo"] == algo and r["size"] == s] for s in sizes}
            pts = {s: p for s, p in pts.items() if p}       # sizes this algorithm has cells for
            x = np.array(list(pts)) * 10 ** off            # shifted on the log axis, not overlapping
            line = ax.errorbar(x, [np.mean(p) for p in pts.values()], yerr=[np.std(p) for p in pts.values()],
                               marker="o", capsize=3, label=LABELS[algo])
            for xi, p in zip(x, pts.values()):
                ax.scatter([xi] * len(p), p, s=10, alpha=0.5, color=line[0].get_color())
    axes[0].set_title("zero-shot task accuracy")
    axes[1].set_title("alignment accuracy (argmax of forward variables)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("demonstrations")
        ax.set_ylabel("% (mean ± std over seeds; dots: seeds)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_lengths(results, path):
    """Task accuracy against the test sketch length L_test, one line per algorithm and dataset
    size, mean ± std over seeds and every seed as a point (paper figure 8; PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 4))
    groups = [(a, s) for a in ALGOS for s in sorted({r["size"] for r in results})
              if any(r["algo"] == a and r["size"] == s and r.get("task_accuracy_by_length") for r in results)]
    for (algo, size), off in zip(groups, _spread(len(groups), 0.15)):
        rows = [r["task_accuracy_by_length"] for r in results
                if r["algo"] == algo and r["size"] == size and r.get("task_accuracy_by_length")]
        lengths = sorted(rows[0], key=int)
        acc = 100 * np.array([[row[L] for L in lengths] for row in rows])     # (seeds, lengths)
        x = np.array([int(L) for L in lengths]) + off
        line = ax.errorbar(x, acc.mean(0), yerr=acc.std(0), marker="o", capsize=3, label=f"{LABELS[algo]} ({size})")
        for row in acc:
            ax.scatter(x, row, s=10, alpha=0.5, color=line[0].get_color())
    ax.set_xlabel("test sketch length L_test")
    ax.set_ylabel("task accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
