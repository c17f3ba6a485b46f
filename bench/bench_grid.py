"""Benchmark of the experiment grid's engine: what it adds to each cell (taco_app/grid/engine.py).

Problem: N = 8 tiny Nav-World cells (TACO and GT-BC, 20 demonstrations, seeds 0-3, 5 epochs, 4
test sketches, 5 held-out demonstrations): cells far shorter than real ones, so that the
engine's own cost is what shows.

What is timed (wall time, BLAS at one thread everywhere):

- direct   in this process, one after the other: for each cell, experiment.collect of its two
           data sets and experiment.run_cell, then cells.write_cell (what a cell needs
           without an engine); D seconds in all.
- engine   engine.run_grid over the same cells into a fresh OUT with P workers: E seconds.
           Local: the default (a spawn process pool, P = --workers); Dask: a cluster of P
           one-thread workers, `dask scheduler` and `dask worker` started here on 127.0.0.1
           (or --scheduler ADDRESS), when the `dist` extra is installed.

The overhead per cell is the worker time the engine adds to a cell: (P * E - D) / N, in
seconds. It is measured twice per engine: "cold" (a new pool, or a new client, so process start
and imports are in it) and "warm" (the same executor's second grid, --force into another OUT:
the steady cost of one more cell in a long grid). Target: under 1 s per cell (warm).

    python bench/bench_grid.py [--workers 2] [--scheduler tcp://HOST:PORT] [--no-dask]
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import _timing

_timing.preamble(1)      # before numpy loads: the same BLAS threads as the engine's workers

from _timing import numpy_blas_parts  # noqa: E402

from taco_app.grid import store as cells, engine, cell as experiment  # noqa: E402

TARGET = 1.0
CELLS = [dict(domain="navworld", algo=a, size=20, seed=s, train_sketch_len=3, n_tasks=4, n_align=5,
              test_lengths=None, config=dict(act_hidden=[16], stop_hidden=[16], epochs=5, patience=5))
         for s in range(4) for a in ("taco", "gtbc")]


def direct(out):
    start = time.perf_counter()
    for cell in CELLS:
        demos, test_demos = (experiment.collect(spec) for spec in experiment.data_specs(cell))
        cells.write_cell(out, experiment.run_cell(cell, demos, test_demos))
    return time.perf_counter() - start


def through(ex, out, force=False):
    start = time.perf_counter()
    grid = engine.run_grid(CELLS, ex, out_dir=out, force=force)
    assert grid.computed == len(CELLS) and not grid.failures, grid.failures
    return time.perf_counter() - start


def measure(name, make, workers, tmp, d):
    rows = []
    start = time.perf_counter()
    with make() as ex:
        through(ex, os.path.join(tmp, f"{name}-cold"))
        cold = time.perf_counter() - start                  # connecting, or starting the pool, included
        warm = through(ex, os.path.join(tmp, f"{name}-warm"), force=True)
    for label, e in (("cold", cold), ("warm", warm)):
        over = (workers * e - d) / len(CELLS)
        rows.append(f"{name:<6} {label:<5} P = {workers}: E = {e:6.2f} s, overhead {over:+6.3f} s per cell "
                    f"({'meets' if over < TARGET else 'misses'} the {TARGET:.0f} s target)")
    return rows


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(workers, log):
    """`dask scheduler` and `workers` one-thread `dask worker` processes on 127.0.0.1: (address, processes)."""
    import distributed
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    address = f"tcp://127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                               "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT)]
    procs += [subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                                "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT) for _ in range(workers)]
    with distributed.Client(address, timeout=60) as client:
        client.wait_for_workers(workers, timeout=120)
    return address, procs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scheduler", default=None, help="a running Dask cluster instead of one started here")
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args(argv)
    print("setup: " + "; ".join(numpy_blas_parts() + [f"{os.cpu_count()} CPUs", f"{len(CELLS)} cells"]))
    with tempfile.TemporaryDirectory() as tmp:
        direct(os.path.join(tmp, "warm-up"))                       # imports, first-call costs
        d = direct(os.path.join(tmp, "direct"))
        print(f"direct       D = {d:6.2f} s ({d / len(CELLS):.3f} s per cell)")
        for line in measure("local", lambda: engine.Local(args.workers), args.workers, tmp, d):
            print(line)
        if args.no_dask:
            return 0
        try:
            import distributed  # noqa: F401
        except ImportError:
            print("dask: skipped (the 'dist' extra is not installed: pip install -e '.[dist]')")
            return 0
        procs, log = [], open(os.path.join(tmp, "cluster.log"), "w")
        try:
            address = args.scheduler
            if address is None:
                address, procs = start_cluster(args.workers, log)
            for line in measure("dask", lambda: engine.Dask(address), args.workers, tmp, d):
                print(line)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
