"""Experiments: train every algorithm on a domain and compare them (paper Sec. 5).

`run` is one cell of a results table: collect (or reuse) data, train one algorithm, and measure
zero-shot task accuracy, sub-task accuracy and alignment accuracy on held-out demonstrations.
`table` formats many cells; `plot` draws accuracy against dataset size when matplotlib exists.
Cells run in parallel worker processes (one per core), each single-threaded.
"""
import json
import os
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np

from taco_ref import evaluate, train

ALGOS = ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru")
LABELS = {"taco": "TACO", "gtbc": "GT-BC", "ctcbc-mlp": "CTC-BC (MLP)", "ctcbc-gru": "CTC-BC (GRU)"}


def domain(name):
    """The domain module (taco_sim.<name>): VOCAB, collect, NavWorld-like env class, sketches."""
    if name == "navworld":
        from taco_sim import navworld
        return navworld
    raise ValueError(f"domain must be one of ('navworld',), got {name!r}")


def make_env(name):
    mod = domain(name)
    return mod.NavWorld()


def run(cell):
    """One (domain, algo, size, seed) cell; returns a dict of measured figures."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mod = domain(cell["domain"])
    seed, size = cell["seed"], cell["size"]
    demos = mod.collect(size, cell["train_sketch_len"], seed=10_000 + seed)
    test_demos = mod.collect(cell["n_align"], cell["train_sketch_len"], seed=20_000 + seed)
    cfg = train.TrainConfig.from_dict(dict(cell["config"], algo=cell["algo"], seed=seed))
    model = train.train(demos, cfg, progress=False)
    sketches = mod.zero_shot_sketches(cell["n_tasks"], np.random.default_rng(30_000 + seed))
    acc = evaluate.task_accuracy(model, mod.NavWorld, sketches, seed=40_000 + seed)
    align_acc = evaluate.alignment_accuracy(model, test_demos)
    epochs = [h["epoch"] for h in model.info["history"]]
    return dict(cell, config=None, **acc, **{f"align_{k}": v for k, v in align_acc.items()},
                epochs=len(epochs), seconds=model.info["seconds"])


def run_all(cells, workers=2, progress=None, out_dir=None):
    """Run cells in parallel processes; results in the order given. With out_dir, the results
    finished so far are saved after every cell, so a long run that is stopped loses nothing."""
    results = [None] * len(cells)

    def finished(i, result, n):
        results[i] = result
        if out_dir is not None:
            save([r for r in results if r is not None], out_dir)
        if progress:
            progress(n, len(cells), result)

    if workers <= 1:
        for i, c in enumerate(cells):
            finished(i, run(c), i + 1)
        return results
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run, c): i for i, c in enumerate(cells)}
        for n, fut in enumerate(as_completed(futures), 1):
            finished(futures[fut], fut.result(), n)
    return results


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


def save(results, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write(table(results) + "\n")


def plot(results, path):
    """Task and alignment accuracy against dataset size, one line per algorithm (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    sizes = sorted({r["size"] for r in results})
    for algo in ALGOS:
        for ax, key in zip(axes, ("task_accuracy", "align_forward_argmax")):
            pts = [[r[key] for r in results if r["algo"] == algo and r["size"] == s] for s in sizes]
            if not all(pts):
                continue
            mean = [100 * np.mean(p) for p in pts]
            std = [100 * np.std(p) for p in pts]
            ax.errorbar(sizes, mean, yerr=std, marker="o", capsize=3, label=LABELS[algo])
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
