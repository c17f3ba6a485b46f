"""Experiments: train every algorithm on a domain and compare them (paper Sec. 5).

A *cell* of a results table is (domain, algorithm, dataset size, seed): collect its data, train
one algorithm, and measure zero-shot task accuracy, sub-task accuracy and alignment accuracy on
held-out demonstrations (and, when asked, task accuracy against the test sketch length, paper
figure 8). `run` computes one cell's figures; `collect` and `run_cell` are the two kinds of
task the engine (taco_app/grid/engine.py) runs, locally or on a Dask cluster.

What a cell is and its key: taco_app.grid.keys; its file: taco_app.grid.store (the one place
that persists cells); results.md and the figures: taco_app.report (`taco report`).
Protocol: spec/evaluation.md §4-6.

Domains come from taco_sim's registry (taco_sim.get(name), the contract in taco_sim/domain.py);
the evaluation is taco_ref.evaluate.protocol, the same as `taco evaluate`'s.
"""
import importlib.metadata
import os
import platform
import sys
import time

import numpy as np

import taco_ref
import taco_sim
from taco_ref import data as data_mod, evaluate, train
from taco_ref.plumbing import checkpoints, provenance
from taco_app.grid import Cell, Record
from taco_app.grid.keys import CELL_FIELDS, KEY_VERSION, cell_fields, cell_key, full_config, split_of, tests_of

TRAIN_DATA_SEED, TEST_DATA_SEED, VALIDATION_DATA_SEED = 10_000, 20_000, 25_000
"""A cell of seed s trains on collect(size, L, 10_000 + s) and aligns collect(n_align, L, 20_000 + s);
a validation cell (split "validation") aligns collect(n_align, L, 25_000 + s) instead."""


def data_specs(cell):
    """(training set, held-out set) of a cell, each (domain, n, sketch_len, seed, expert): what
    `collect` needs, and the name under which the engine collects it once for every cell;
    expert is the cell's (None: the domain's only one). The held-out set is the split's: a
    validation cell never reads the demonstrations test cells align."""
    L, expert = cell["train_sketch_len"], cell.get("expert")
    held_out = VALIDATION_DATA_SEED if split_of(cell) == "validation" else TEST_DATA_SEED
    return ((cell["domain"], cell["size"], L, TRAIN_DATA_SEED + cell["seed"], expert),
            (cell["domain"], cell["n_align"], L, held_out + cell["seed"], expert))


def collect(spec, data_dir=None):
    """The data task: domain.collect(n, sketch_len, seed[, expert]) for spec = (domain, n,
    sketch_len, seed, expert), the expert named only when it is not None;
    deterministic on one kind of machine, so any worker of that kind (or a later run) collects
    the same Demos (same fingerprint); another CPU's BLAS kernels can round the Dial expert's
    arithmetic otherwise and collect other draws (taco_ref.plumbing.provenance).

    A domain whose data is larger than memory (Domain.streams: the image Dial) collects into
    the frame directory data_dir/<domain>-n<n>-L<sketch_len>-seed<seed> and the task returns
    the set read lazily from there (it pickles as its path: the cells must see data_dir, so on
    a Dask cluster OUT must be on a shared filesystem); a complete set already there, of the
    same spec, is reused, so a grid run again does not collect it again."""
    domain, n, sketch_len, seed, expert = spec
    dom = taco_sim.get(domain)
    chosen = {} if expert is None else {"expert": expert}
    if not dom.streams or data_dir is None:
        return dom.collect(n, sketch_len, seed, **chosen)
    directory = os.path.join(data_dir, f"{domain}-n{n}-L{sketch_len}-seed{seed}"
                             + ("" if expert is None else f"-{expert}"))
    found = collected(directory, spec)
    return found if found is not None else dom.collect(n, sketch_len, seed, out=directory, **chosen)


def collected(directory, spec):
    """The complete frame directory's set if it holds spec's data (domain, n, sketch length,
    seed and expert in its meta), else None."""
    domain, n, sketch_len, seed, expert = spec
    if not os.path.exists(os.path.join(directory, data_mod.INDEX)):
        return None
    try:
        demos = data_mod.load(directory)
    except data_mod.DataError:
        return None
    meta = demos.meta
    same = (meta.get("domain") == domain and demos.n == n and meta.get("sketch_len") == sketch_len
            and meta.get("seed") == seed and meta.get("expert") == expert)
    return demos if same else None


def cell_name(cell):
    """A cell's name in logs and task names: <domain>-<algo>-n<size>-seed<seed>."""
    return f"{cell['domain']}-{cell['algo']}-n{cell['size']}-seed{cell['seed']}"


EPOCHS_DIR_ENV = "TACO_EPOCHS_DIR"
"""A folder where each running cell keeps its last epoch (one small file a cell, written by
_epoch_file), for the local engine's progress line to read: set by engine.Local."""


def _epoch_file(cell, folder):
    """train's progress for a cell the local engine runs: after every epoch, "<algo> n<size>
    s<seed>: [<algo> <stage>] epoch <e>" replaces the cell's file in folder (written whole,
    then renamed, so a reader never sees half a line)."""
    path = os.path.join(folder, cell_name(cell))
    label = f"{cell['algo']} n{cell['size']} s{cell['seed']}"

    def write(line):
        text = f"{label}: {line.split('  train')[0].strip()}"
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError:                # the folder went with the grid: progress is best effort
            pass
    return write


def _training_progress(cell, run_dir):
    """What train reports its epochs to: lines on stderr for a cell of hours (run_dir), the
    local engine's epochs folder when it set one, else nothing."""
    if run_dir is not None:
        return _epoch_lines(cell)
    folder = os.environ.get(EPOCHS_DIR_ENV)
    return _epoch_file(cell, folder) if folder and os.path.isdir(folder) else False


def _epoch_lines(cell):
    """train's progress for a cell of hours (one with a run directory): a line on stderr after
    every epoch, named by the cell, so a log shows how far each running cell has got."""
    name = cell_name(cell)
    return lambda line: print(f"{name}: {line}", file=sys.stderr, flush=True)


def run(cell: Cell, demos=None, test_demos=None, run_dir=None) -> dict:
    """One cell's figures (a dict): task_accuracy, subtask_accuracy, n_tasks, align_<decoder>
    for every decoder, task_accuracy_by_length (with test_lengths), tests {name: the protocol's
    figures on that named condition} (with tests), epochs, policy_epochs,
    best_held_out_loss, train_loglik, train_seconds (every process's), train_earlier (what the
    processes before this one spent: checkpoints.NO_TIME's fields).

    cell: the CELL_FIELDS and config (TrainConfig settings; algo and seed are the cell's).
    demos, test_demos: the cell's training and held-out data (`collect(data_specs(cell)[i])`);
    collected here when not given. run_dir: train there, with a checkpoint after every epoch,
    continuing the checkpoint found there (`run_dir_of`: the image Dial's cells, hours long,
    survive an interruption at the last epoch instead of starting again), and a line on stderr
    after every epoch.
    """
    dom = taco_sim.get(cell["domain"])
    train_spec, test_spec = data_specs(cell)
    demos = collect(train_spec) if demos is None else demos
    test_demos = collect(test_spec) if test_demos is None else test_demos
    cfg = train.TrainConfig.from_dict(dict(cell["config"], algo=cell["algo"], seed=cell["seed"]))
    validate = (evaluate.validation_rollouts(dom, cfg.select_tasks, cell["seed"], cell["train_sketch_len"])
                if cfg.select == "rollouts" else None)
    resume = run_dir is not None and os.path.exists(os.path.join(run_dir, checkpoints.CHECKPOINT_META))
    model = train.train(demos, cfg, progress=_training_progress(cell, run_dir),
                        validate=validate, out_dir=run_dir, resume=resume, augment=dom.augment)
    acc = evaluate.protocol(model, dom, cell["n_tasks"], cell["seed"], lengths=cell.get("test_lengths") or (),
                            views=cfg.views, stop_hold=cfg.stop_hold, split=split_of(cell))
    if tests_of(cell):            # the named conditions (the Dial's harder test), on the same seeds
        acc["tests"] = {name: evaluate.protocol(model, dom, cell["n_tasks"], cell["seed"], views=cfg.views,
                                                stop_hold=cfg.stop_hold, split=split_of(cell), test=name)
                        for name in tests_of(cell)}
    both = evaluate.alignment_accuracies(model, test_demos)
    align_acc, by_subtask = both["position"], both["subtask"]
    policy_stage = [h for h in model.info["history"] if h["stage"] == "policy"]
    return dict(acc, **{f"align_{k}": v for k, v in align_acc.items()},
                **{f"align_subtask_{k}": v for k, v in by_subtask.items()},
                epochs=len(model.info["history"]), policy_epochs=len(policy_stage),
                best_held_out_loss=min(h["held_out_loss"] for h in policy_stage),
                train_loglik=model.info.get("train_loglik"), train_seconds=model.info["seconds"],
                train_earlier=model.info["earlier"])


def versions():
    """The software a figure was computed with (mujoco and scipy: the domains' physics and the
    Dial expert's inverse kinematics, which decide the demonstrations' bits)."""
    found = {}
    for package in ("scipy", "mujoco"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return {"taco_ref": taco_ref.__version__, "numpy": np.__version__,
            "python": platform.python_version(), **found}


BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def run_dir_of(out_dir, cell):
    """Where a cell trains with checkpoints, or None: OUT/runs/<domain>/<algo>/n<size>/seed<seed>-
    <first 16 hex digits of its key> for a domain whose data streams (Domain.streams, the image
    Dial: cells of hours), None otherwise and without out_dir. The key in the name keeps a cell
    of another config from resuming its checkpoint."""
    if out_dir is None or not taco_sim.get(cell["domain"]).streams:
        return None
    return os.path.join(os.path.abspath(out_dir), "runs", cell["domain"], cell["algo"], f"n{cell['size']}",
                        f"seed{cell['seed']}-{cell_key(cell)[:16]}")


class UnpairedData(ValueError):
    """A cell's data differ from the data its partner cells trained on (check_paired)."""


def check_paired(cell, demos, test_demos):
    """UnpairedData, one line naming the partner and both fingerprints, when cell["partners"]
    (cells.partner_data: the finished cells of the same domain, size and seed) trained or were
    tested on other demonstrations than demos and test_demos: a paired comparison would compare
    two methods on two data sets. The Dial's sets follow the BLAS kernels of the machine that
    collects them unless pinned (taco_sim.dial.blas); a partner collected under other kernels is
    matched by collecting under its kernels (OPENBLAS_CORETYPE) or recomputing the partner."""
    for name, d in (("train", demos), ("test", test_demos)):
        want = (cell.get("partners") or {}).get(name)
        if want and d.fingerprint() != want["fingerprint"]:
            raise UnpairedData(
                f"{cell_name(cell)}: its {name} data are {d.fingerprint()[:12]}… (collected on "
                f"{(d.meta.get('collected_on') or {}).get('blas')}), its partner {want['partner']} trained on "
                f"{want['fingerprint'][:12]}…: the pair would compare two methods on two data sets; collect "
                f"under the partner's OpenBLAS kernels (OPENBLAS_CORETYPE, its cell file's machine.blas) or "
                f"recompute the partner")


def run_cell(cell: Cell, demos, test_demos, run_dir=None) -> Record:
    """The cell task: `run` plus what makes its result a record (the contents of its cell file):
    key, cell, config (full), data (seeds, sizes, fingerprints), figures, seconds (wall time of
    the cell where it ran), cpu_seconds (its CPU time: the cost on one core, whatever else
    shared the machine), processes (how many worked on it: a cell with a run directory resumed
    after an interruption counts the earlier ones' time, to their last checkpoint, in both),
    train_seconds, versions, the BLAS thread variables it ran with (the thread count
    changes float64 sums in the last bit: engine._single_threaded) and the machine it ran on
    (taco_ref.plumbing.provenance.machine: the CPU and the BLAS kernels, which change them too; the
    machine that collected each data set is in that set's meta, collected_on)."""
    start, start_cpu = time.time(), time.process_time()
    check_paired(cell, demos, test_demos)
    figures = run(cell, demos, test_demos, run_dir)
    train_seconds = figures.pop("train_seconds")          # timings are not figures: they vary
    earlier = figures.pop("train_earlier")
    data = {}
    for name, spec, d in zip(("train", "test"), data_specs(cell), (demos, test_demos)):
        data[name] = {"n": spec[1], "sketch_len": spec[2], "seed": spec[3], "fingerprint": d.fingerprint()}
        if spec[4] is not None:
            data[name]["expert"] = spec[4]
    return {"key": cell_key(cell), "key_version": KEY_VERSION, "cell": cell_fields(cell),
            "config": full_config(cell), "data": data, "figures": figures,
            "seconds": earlier["seconds"] + time.time() - start,
            "cpu_seconds": earlier["cpu_seconds"] + time.process_time() - start_cpu,
            "processes": earlier["processes"] + 1, "train_seconds": train_seconds, "versions": versions(),
            "threads": {v: os.environ.get(v) for v in BLAS_THREAD_VARS}, "machine": provenance.machine()}
