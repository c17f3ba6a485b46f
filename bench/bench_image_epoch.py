"""Where one epoch of an image-Dial cell spends its CPU: each phase timed, its share, and its limit.

An image cell's epochs are most of its cost (bench/bench_image_cell.py adds the parts up). This
bench runs one training epoch of the real trainer (train._Run.epoch: the minibatch steps and
the held-out pass) on a frame directory with every phase wrapped, and reports each phase's
*exclusive* process CPU time (a phase's own time, its nested phases' taken out):

  read         files.read_npy_rows: frame rows copied out of the chunk files (page cache)
  gather       data.FrameStates.__getitem__: a batch's frames placed in their (b, t) slots
  normalise    policy.image_input: uint8 -> (x - m_c) / sigma_c in the nets' dtype
  conv fwd     nn.convnet_forward: the core (appendix A, table 2) on every frame of a batch
  conv bwd     nn.convnet_backward: its weight gradients
  nets fwd     policy.evaluate: the sub-policies' action and STOP nets (the core taken out)
  nets bwd     policy.backward: their gradients (the core's taken out)
  alignment    align.taco_forward_backward / ctc_forward_backward (TACO; GT-BC has none)
  optimiser    optim.Adam.step: the update of every trained parameter
  other        the rest of the epoch: batching, the objective's own arithmetic, bookkeeping

and each phase's own limit, measured in the same run on this machine:

- products (conv, nets): the useful FLOPs their matrix products made (counted at nn.matmul, the
  one place every product of the nets and the core goes through) at the float32 GEMM limit
  (bench/_timing.py: np.matmul of two 2000 x 2000 matrices, one thread);
- streaming phases (read, gather, normalise, optimiser): the bytes they must move at least
  (read and gather: the frames copied, read and written; normalise: 1 byte in and 4 out per
  pixel; Adam: p, g, m, v read and p, m, v written, 28 bytes per float32 parameter) at the
  memory bandwidth of a large np.copyto (one thread);
- alignment: no roofline of its own (exp and log bound): bench/bench_align.py compares it with
  torch's ctc_loss.

"x limit" is CPU time over the limit's time: 1.0 is at the limit, 2.0 twice as slow.

Usage::

    python bench/bench_image_epoch.py                      # 64 x 64 and 112 x 112, TACO and GT-BC
    python bench/bench_image_epoch.py --sizes 64 --algos gtbc --demos 24
    python bench/bench_image_epoch.py --data DIR --json out.json

The set: --data (a dial-image-small frame directory), else --demos demonstrations collected
once into ~/.cache/taco_ref/bench-image-epoch (about a second of CPU each, rendering with
MUJOCO_GL=egl or osmesa); 112 x 112 is that set scaled to the paper's size
(bench/bench_image_cell.py's paper-shape set, the same demonstrations). BLAS runs one thread.
"""
import os
import sys

import _timing

_timing.preamble(1)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from taco_ref import align, data, nn, optim, policy, train  # noqa: E402
from taco_ref.plumbing import files  # noqa: E402
from taco_ref.nn import layers as nn_layers  # noqa: E402
from taco_app import config as config_mod  # noqa: E402
from _timing import cpu_model, gemm_limit  # noqa: E402
from bench_image_cell import paper_shape_set  # noqa: E402

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "taco_ref", "bench-image-epoch")
PHASES = ("read", "gather", "normalise", "conv fwd", "conv bwd", "nets fwd", "nets bwd", "alignment",
          "optimiser", "other")
LIMIT_KIND = {"read": "bandwidth", "gather": "bandwidth", "normalise": "bandwidth", "optimiser": "bandwidth",
              "conv fwd": "GEMM", "conv bwd": "GEMM", "nets fwd": "GEMM", "nets bwd": "GEMM"}


class Phases:
    """Exclusive process CPU time, bytes and product FLOPs per phase, by wrapping functions."""

    def __init__(self):
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.flops = dict.fromkeys(PHASES, 0.0)
        self.bytes = dict.fromkeys(PHASES, 0.0)
        self.stack = []                  # [phase, children's CPU] of the calls in progress
        self.patched = []

    def wrap(self, owner, name, phase, moved=None):
        """Time owner.name as phase; moved(args, result) -> bytes it must move at least."""
        real = getattr(owner, name)

        def timed(*args, **kwargs):
            self.stack.append([phase, 0.0])
            start = time.process_time()
            try:
                out = real(*args, **kwargs)
            finally:
                spent = time.process_time() - start
                _, children = self.stack.pop()
                self.cpu[phase] += spent - children
                if self.stack:
                    self.stack[-1][1] += spent
            if moved is not None:
                self.bytes[phase] += moved(args, out)
            return out
        setattr(owner, name, timed)
        self.patched.append((owner, name, real))

    def add(self, a, b):
        """nn.matmul's census hook: 2 m k n FLOPs of a @ b, to the phase in progress."""
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 or b.ndim > 2 else ()
        m = a.shape[-2] if a.ndim > 1 else 1
        n = b.shape[-1] if b.ndim > 1 else 1
        self.flops[self.stack[-1][0] if self.stack else "other"] += 2.0 * np.prod(batch) * m * a.shape[-1] * n

    def __enter__(self):
        nbytes = lambda args, out: 2.0 * out.nbytes                     # noqa: E731  read + write
        self.wrap(files, "read_npy_rows", "read", nbytes)
        self.wrap(data.FrameStates, "__getitem__", "gather",
                  lambda args, out: 2.0 * out.nbytes if isinstance(out, np.ndarray) else 0.0)
        self.wrap(policy, "image_input", "normalise", lambda args, out: out.size * (1 + out.itemsize))
        self.wrap(nn, "convnet_forward", "conv fwd")
        self.wrap(nn, "convnet_backward", "conv bwd")
        self.wrap(policy, "evaluate", "nets fwd")
        self.wrap(policy, "backward", "nets bwd")
        for name in ("taco_forward_backward", "ctc_forward_backward"):
            self.wrap(align, name, "alignment")
        self.wrap(optim.Adam, "step", "optimiser",
                  lambda args, out: 28.0 * sum(g.size for g in args[2].values()))
        nn_layers._CENSUSES.append(self)
        return self

    def __exit__(self, *exc):
        nn_layers._CENSUSES.remove(self)
        for owner, name, real in reversed(self.patched):
            setattr(owner, name, real)


def bandwidth(repeats=5, mib=256):
    """Bytes per CPU second of np.copyto between two float32 arrays of mib MiB (read + write),
    the best of repeats (a limit: one slow copy on a shared machine must not lower it)."""
    src = np.ones(mib * 2 ** 18, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        np.copyto(dst, src)
        best = min(best, time.process_time() - start)
    return 2.0 * src.nbytes / best


def small_set(n, source=None):
    """A dial-image-small frame directory of n demonstrations (collected once into CACHE)."""
    if source:
        return source
    out = os.path.join(CACHE, f"dial-image-small-n{n}-seed10000")
    if not os.path.exists(os.path.join(out, data.INDEX)):
        import taco_sim
        print(f"collecting {n} demonstrations into {out} (once)", file=sys.stderr, flush=True)
        dom = taco_sim.get("dial-image-small")
        dom.collect(n, dom.train_sketch_len, 10_000, out=out)
    return out


def epoch_phases(demos, algo, overrides):
    """One training epoch of algo on demos with every phase wrapped: (Phases, epoch CPU s,
    training frames, config)."""
    domain = demos.meta.get("domain")
    settings = ["warmup_epochs=0", "epochs=1", *overrides] if algo == "taco" else ["epochs=1", *overrides]
    cfg = config_mod.load(domain, None, settings, algo=algo, seed=0)
    run = train._Run(demos, cfg, 0, None)
    while run.stage_done():
        run.next_stage()
    run.epoch()                                          # warm: first-touch pages, caches
    warm, run = run, train._Run(demos, cfg, 0, None)
    run.workspace = warm.workspace                       # as in a cell's later epochs: the steps'
    while run.stage_done():                              # memory already mapped (nn.workspace)
        run.next_stage()
    with Phases() as phases:
        start = time.process_time()
        run.epoch()
        total = time.process_time() - start
    phases.cpu["other"] += total - sum(phases.cpu.values())
    return phases, total, int(demos.traj_len.sum()), cfg


def table(name, phases, total, frames, gemm, bw):
    rows = [f"### {name}: one epoch, {total:.2f} s CPU ({1e3 * total / frames:.3f} ms a frame of the set)", "",
            "| phase | CPU s | share | ms / frame | limit | limit s | x limit |", "|---|---:|---:|---:|---|---:|---:|"]
    out = {}
    for p in PHASES:
        cpu = phases.cpu[p]
        kind = LIMIT_KIND.get(p)
        limit = (phases.flops[p] / gemm if kind == "GEMM" else phases.bytes[p] / bw if kind == "bandwidth"
                 else None)
        detail = (f"{phases.flops[p] / 1e9:.2f} GFLOP" if kind == "GEMM" else
                  f"{phases.bytes[p] / 2 ** 20:.0f} MiB" if kind == "bandwidth" else "n/a")
        ratio = cpu / limit if limit else None
        rows.append(f"| {p} | {cpu:.3f} | {100 * cpu / total:.1f} % | {1e3 * cpu / frames:.3f} | {detail} | "
                    f"{'' if limit is None else f'{limit:.3f}'} | {'' if ratio is None else f'{ratio:.1f}'} |")
        out[p] = dict(cpu_s=cpu, share=cpu / total, flops=phases.flops[p], bytes=phases.bytes[p],
                      limit_s=limit, x_limit=ratio)
    return "\n".join(rows), out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python bench/bench_image_epoch.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="a dial-image-small frame directory (default: collect --demos)")
    ap.add_argument("--demos", type=int, default=48, help="demonstrations to collect when --data is not given")
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 112], choices=[64, 112],
                    help="image sizes: 64 (the set as collected), 112 (scaled to the paper's)")
    ap.add_argument("--algos", nargs="+", default=["taco", "gtbc"], choices=["taco", "gtbc"])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args(argv)

    source = small_set(args.demos, args.data)
    gemm, bw = 1e9 * gemm_limit(np.float32, 5)[1], bandwidth()
    print(f"machine: {cpu_model()} | numpy {np.__version__} | 1 thread | float32 GEMM limit "
          f"{gemm / 1e9:.1f} GFLOP/s | copy bandwidth {bw / 1e9:.1f} GB/s | load average {os.getloadavg()[0]:.2f}\n")
    results = {"gemm_flops": gemm, "bandwidth": bw, "machine": cpu_model(), "runs": {}}
    for size in args.sizes:
        directory = source
        if size == 112:
            directory = source.rstrip("/") + "-112"
            small = data.load(source)
            paper_shape_set(source, directory, n=small.n)
        demos = data.load(directory)
        for algo in args.algos:
            phases, total, frames, cfg = epoch_phases(demos, algo, args.set)
            name = f"{algo}, {size} x {size}, {demos.n} demonstrations, batch {cfg.batch_size}, {cfg.dtype}"
            text, figures = table(name, phases, total, frames, gemm, bw)
            print(text + "\n", flush=True)
            results["runs"][f"{algo}-{size}"] = dict(epoch_cpu_s=total, frames=frames, phases=figures)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
