"""Experiments: train every algorithm on a domain and compare them (paper Sec. 5).

`run` is one cell of a results table: collect (or load) data, train one algorithm, and measure
zero-shot task accuracy, sub-task accuracy and alignment accuracy on held-out demonstrations
(and, when asked, task accuracy against the test sketch length, paper figure 8).
`prepare_data` collects each cell's data once, into files the cells share; `table` formats many
cells; `plot` draws accuracy against dataset size when matplotlib exists. Cells run in parallel
worker processes (one per core), each single-threaded.

Domains come from taco_sim's registry (taco_sim.get(name), the contract in taco_sim/domain.py);
the evaluation is taco_ref.evaluate.protocol, the same as `taco evaluate`'s.
"""
import contextlib
import hashlib
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict

import numpy as np

import taco_sim
from taco_ref import data as data_mod, evaluate, files, train

ALGOS = ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru")
LABELS = {"taco": "TACO", "gtbc": "GT-BC", "ctcbc-mlp": "CTC-BC (MLP)", "ctcbc-gru": "CTC-BC (GRU)"}


def _data_seeds(cell):
    return 10_000 + cell["seed"], 20_000 + cell["seed"]


def _data_paths(cell, out_dir):
    name = f"{cell['domain']}-L{cell['train_sketch_len']}-seed{cell['seed']}"
    return (os.path.join(out_dir, "data", f"{name}-train{cell['size']}.npz"),
            os.path.join(out_dir, "data", f"{name}-test{cell['n_align']}.npz"))


def prepare_data(cells, out_dir, workers=1, progress=None):
    """Collect each distinct training and held-out set of cells once into out_dir/data (reused
    when the file exists) and point the cells at the files; returns the updated cells."""
    out = []
    for cell in cells:
        paths = _data_paths(cell, out_dir)
        dom = taco_sim.get(cell["domain"])
        for path, n, seed in zip(paths, (cell["size"], cell["n_align"]), _data_seeds(cell)):
            if not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                label = f"collect {os.path.basename(path)}"
                demos = dom.collect(n, cell["train_sketch_len"], seed, workers=workers,
                                    progress=progress(label) if progress else None)
                data_mod.save(demos, path)
        out.append(dict(cell, data=paths[0], test_data=paths[1]))
    return out


def run(cell):
    """One (domain, algo, size, seed) cell; returns a dict of measured figures.

    cell: domain, algo, size, seed, train_sketch_len, n_tasks, n_align, config, and optionally
    data / test_data (files from prepare_data; collected here otherwise) and test_lengths (task
    accuracy for each of these sketch lengths, on top of the domain's zero-shot test sketches).
    """
    dom = taco_sim.get(cell["domain"])
    seed, size = cell["seed"], cell["size"]
    train_seed, test_seed = _data_seeds(cell)
    if cell.get("data"):
        demos, test_demos = data_mod.load(cell["data"]), data_mod.load(cell["test_data"])
    else:
        demos = dom.collect(size, cell["train_sketch_len"], train_seed)
        test_demos = dom.collect(cell["n_align"], cell["train_sketch_len"], test_seed)
    cfg = train.TrainConfig.from_dict(dict(cell["config"], algo=cell["algo"], seed=seed))
    model = train.train(demos, cfg, progress=False)
    acc = evaluate.protocol(model, dom, cell["n_tasks"], seed, lengths=cell.get("test_lengths") or ())
    align_acc = evaluate.alignment_accuracy(model, test_demos)
    policy_stage = [h for h in model.info["history"] if h["stage"] == "policy"]
    out = dict(cell, config=None, **acc, **{f"align_{k}": v for k, v in align_acc.items()},
               epochs=len(model.info["history"]), seconds=model.info["seconds"],
               policy_epochs=len(policy_stage),
               best_held_out_loss=min(h["held_out_loss"] for h in policy_stage),
               train_loglik=model.info.get("train_loglik"))
    return out


def cell_key(cell):
    """SHA-256 of what determines a cell's figures: domain, algo, size, seed, sketch lengths,
    evaluation sizes and the full training config (data files are derived from these)."""
    fields = {k: cell.get(k) for k in ("domain", "algo", "size", "seed", "train_sketch_len",
                                        "n_tasks", "n_align", "test_lengths")}
    fields["config"] = asdict(train.TrainConfig.from_dict(dict(cell["config"], algo=cell["algo"],
                                                               seed=cell["seed"])))
    if fields["config"]["dtype"] == "float64":    # the default: keys from before the field stay valid
        del fields["config"]["dtype"]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def load(out_dir):
    """The results saved in out_dir/results.json, or [] when there are none."""
    path = os.path.join(out_dir, "results.json")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_all(cells, workers=2, progress=None, out_dir=None):
    """Run cells in parallel processes, each with one BLAS thread (`_single_threaded`); results
    in the order given. workers <= 1 runs the cells in this process, with its BLAS threads.
    With out_dir, the results finished so far are saved after every cell, so a long run that is stopped loses nothing,
    and a cell whose key (cell_key) already has a result there is not run again: a stopped
    grid resumes where it stopped."""
    results = [None] * len(cells)
    keys = [cell_key(c) for c in cells]
    saved = load(out_dir) if out_dir is not None else []
    done = {r.get("key"): r for r in saved}
    ours = set(keys)
    others = [r for r in saved if r.get("key") not in ours]    # other grids' cells stay
    for i, k in enumerate(keys):
        results[i] = done.get(k)
    todo = [i for i in range(len(cells)) if results[i] is None]

    def finished(i, result, n):
        results[i] = dict(result, key=keys[i])
        if out_dir is not None:
            save(others + [r for r in results if r is not None], out_dir)
        if progress:
            progress(len(cells) - len(todo) + n, len(cells), result)

    if workers <= 1:
        for n, i in enumerate(todo, 1):
            finished(i, run(cells[i]), n)
        return results
    with _single_threaded(), ProcessPoolExecutor(max_workers=workers,
                                                 mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run, cells[i]): i for i in todo}
        for n, fut in enumerate(as_completed(futures), 1):
            finished(futures[fut], fut.result(), n)
    return results


BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def _single_threaded():
    """Worker processes started meanwhile (spawned, so that their BLAS reads these variables
    when numpy loads) use one BLAS thread each: one cell per core. With OpenBLAS's default of a
    thread per core in every worker, the small products of a cell oversubscribe the cores: three
    TACO epochs on 400 Nav-World demonstrations took 14.1 s instead of 2.1 s while two other
    training processes ran. The thread count also changes float64 sums in the last bit, so a
    cell's figures are reproducible at a fixed count only. The caller's environment is restored
    afterwards."""
    saved = {v: os.environ.get(v) for v in BLAS_THREAD_VARS}
    os.environ.update({v: "1" for v in BLAS_THREAD_VARS})
    try:
        yield
    finally:
        for v, value in saved.items():
            if value is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = value


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
            if not rows:
                continue
            cells = []
            for k in keys:
                v = 100 * np.array([r[k] for r in rows])
                cells.append(f"{v.mean():.1f} ± {v.std():.1f}" if len(v) > 1 else f"{v.mean():.1f}")
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


def report(results):
    """The summary table, then task and alignment accuracy with every seed visible."""
    return "\n\n".join([table(results), seed_table(results, "task_accuracy", "task acc."),
                        seed_table(results, "align_forward_argmax", "align (fwd argmax)")])


def save(results, out_dir):
    """results.json (the record a stopped grid resumes from) and results.md, each written
    atomically: a grid killed while saving keeps the previous complete files."""
    os.makedirs(out_dir, exist_ok=True)
    files.write_bytes(os.path.join(out_dir, "results.json"), json.dumps(results, indent=1).encode())
    files.write_bytes(os.path.join(out_dir, "results.md"), (report(results) + "\n").encode())


def plot(results, path):
    """Task and alignment accuracy against dataset size, one line per algorithm (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    sizes = sorted({r["size"] for r in results})
    for algo in ALGOS:
        for ax, key in zip(axes, ("task_accuracy", "align_forward_argmax")):
            pts = {s: [r[key] for r in results if r["algo"] == algo and r["size"] == s] for s in sizes}
            pts = {s: p for s, p in pts.items() if p}       # sizes this algorithm has cells for
            if not pts:
                continue
            mean = [100 * np.mean(p) for p in pts.values()]
            std = [100 * np.std(p) for p in pts.values()]
            ax.errorbar(list(pts), mean, yerr=std, marker="o", capsize=3, label=LABELS[algo])
    axes[0].set_title("zero-shot task accuracy")
    axes[1].set_title("alignment accuracy (argmax of forward variables)")
    for ax in axes:
        ax.set_xlabel("demonstrations")
        ax.set_ylabel("%")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_lengths(results, path):
    """Task accuracy against the test sketch length L_test, one line per algorithm and dataset
    size, mean ± std over seeds (paper figure 8; PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for algo in ALGOS:
        for size in sorted({r["size"] for r in results}):
            rows = [r["task_accuracy_by_length"] for r in results
                    if r["algo"] == algo and r["size"] == size and r.get("task_accuracy_by_length")]
            if not rows:
                continue
            lengths = sorted(rows[0], key=int)
            acc = 100 * np.array([[row[L] for L in lengths] for row in rows])
            ax.errorbar([int(L) for L in lengths], acc.mean(0), yerr=acc.std(0), marker="o",
                        capsize=3, label=f"{LABELS[algo]} ({size})")
    ax.set_xlabel("test sketch length L_test")
    ax.set_ylabel("task accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
