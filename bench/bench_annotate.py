"""Speed and memory of `taco annotate` on Dial-length episodes, on one core.

Collects --n Dial demonstrations (PINs of length 4, mean T about 184 control steps, as the
paper's T ~ 200; cached in --data, collection is not timed), exports them, a quarter of them and
all of them repeated --replicate times with `taco export` to LeRobot v3 and robomimic, and
annotates each with the shipped Dial model
(sim/taco_sim/dial/models/dial, decoder viterbi). Each `taco annotate` runs as its own child
process pinned to one CPU (sched_setaffinity) with one BLAS thread, and is measured by its own
wall time, CPU time and peak resident set size (os.wait4's ru_maxrss for that child; forked
from a small launcher, as bench/bench_memory.py explains). Memory bounded by one chunk, not the
dataset, shows as a peak that does not grow with the number of episodes, and grows with
--chunk; `taco --help` is the floor every command starts from. The agreement of the labels
with the true ones is read from each report.

Usage::

    python bench/bench_annotate.py                       # 1000 episodes (and 250, 4000), chunks 16/64/256
    python bench/bench_annotate.py --n 100 --quick       # a smoke run
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "sim", "taco_sim", "dial", "models", "dial")

LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.sched_setaffinity(0, {int(sys.argv[1])})
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status), file=sys.stderr)
"""
"""Runs the command pinned to one CPU and prints its peak RSS (KiB), CPU seconds and exit code
on stderr (its own stdout passes through)."""


def run(argv, cpu):
    """(exit code, stdout, peak RSS MiB, CPU s, wall s) of argv on CPU cpu, one BLAS thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0 = time.time()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(cpu)] + argv, capture_output=True,
                          text=True, env=env)
    wall = time.time() - t0
    rss, cpu_s, code = done.stderr.strip().split("\n")[-1].split()
    return int(code), done.stdout, int(rss) / 1024, float(cpu_s), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="Dial episodes (the largest set)")
    ap.add_argument("--data", default=os.path.join(ROOT, "bench", "data", "dial-annotate.npz"),
                    help="cache of the collected demonstrations")
    ap.add_argument("--cpu", type=int, default=0, help="the CPU the measured commands run on")
    ap.add_argument("--quick", action="store_true", help="one chunk size, no subset")
    ap.add_argument("--replicate", type=int, default=4,
                    help="also a set of the --n episodes repeated this many times (chunk 64 only): "
                         "a dataset that many times larger, at the same chunk")
    args = ap.parse_args()
    from taco_ref import data
    import taco_sim
    if os.path.exists(args.data) and data.load(args.data).n >= args.n:
        demos = data.load(args.data)
    else:
        t0 = time.time()
        demos = taco_sim.get("dial").collect(args.n, 4, 21, workers=2)
        os.makedirs(os.path.dirname(args.data), exist_ok=True)
        data.save(demos, args.data)
        print(f"collected {args.n} Dial demonstrations in {time.time() - t0:.0f} s", file=sys.stderr)
    tmp = tempfile.mkdtemp(prefix="bench-annotate-")
    taco = [sys.executable, "-m", "taco_app.cli"]
    sizes = [args.n] if args.quick else sorted({max(1, args.n // 4), args.n})
    if not args.quick and args.replicate > 1:
        sizes.append(args.n * args.replicate)
    chunks = [64] if args.quick else [16, 64, 256]
    code, _, floor, _, _ = run(taco + ["--help"], args.cpu)
    print(f"taco --help (the floor): peak RSS {floor:.0f} MiB")
    print(f"{'format':<10} {'episodes':>8} {'frames':>8} {'MB of states+actions':>20} {'chunk':>5} "
          f"{'wall s':>7} {'CPU s':>7} {'ms/episode':>10} {'frames/s':>9} {'peak MiB':>8} {'agree %':>7}")
    for n in sizes:
        sub = demos.subset(np.arange(n) % demos.n)                  # beyond demos.n: repeated
        path = os.path.join(tmp, f"dial-{n}.npz")
        data.save(sub, path)
        frames = int(sub.traj_len.sum())
        payload = frames * (sub.states.shape[2] + sub.actions.shape[2]) * 4 / 1e6   # float32 as stored
        for fmt in ("lerobot", "robomimic"):
            out = os.path.join(tmp, f"dial-{n}-{fmt}" + (".hdf5" if fmt == "robomimic" else ""))
            t0 = time.time()
            subprocess.run(taco + ["export", path, "--format", fmt, "--out", out], check=True, capture_output=True)
            export_s = time.time() - t0
            for chunk in (chunks if n == args.n else [64]):
                dest = os.path.join(tmp, f"ann-{n}-{fmt}-{chunk}" + (".hdf5" if fmt == "robomimic" else ""))
                sk = (out[:-5] if fmt == "robomimic" else out) + ".sketches.yaml"
                code, stdout, rss, cpu_s, wall = run(taco + ["annotate", out, "--sketches", sk, "--model", MODEL,
                                                             "--out", dest, "--chunk", str(chunk)], args.cpu)
                if code != 0:
                    raise SystemExit(f"taco annotate failed ({code}) on {out}")
                agree = next((line.split(":")[1].split("%")[0].strip() for line in stdout.splitlines()
                              if line.startswith("agreement")), "?")
                print(f"{fmt:<10} {n:>8} {frames:>8} {payload:>20.1f} {chunk:>5} {wall:>7.1f} {cpu_s:>7.1f} "
                      f"{1000 * wall / n:>10.1f} {frames / wall:>9.0f} {rss:>8.0f} {agree:>7}")
            print(f"  (export of {n} episodes to {fmt}: {export_s:.1f} s)", file=sys.stderr)
    print(json.dumps({"cpu": args.cpu, "tmp": tmp}), file=sys.stderr)


if __name__ == "__main__":
    main()
