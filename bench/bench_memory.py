"""Peak memory of the `taco` commands on the shipped Dial models, under an address-space limit.

Each command runs in a child process whose address space is limited (RLIMIT_AS, as `ulimit -v`
sets it; 1.5 GB by default, a small robot computer's share) and is measured by its own peak
resident set size (os.wait4's ru_maxrss for that child). The commands:

- model.load of each shipped model (sim/taco_sim/dial/models/dial, dial-velocity): what the ROS
  policy node does at start-up;
- taco evaluate on --n-tasks test PINs of each model's domain;
- taco align on --n-align demonstrations of each domain, collected here (seed 11);
- taco rollout of one PIN with the torque model (a contact sheet PNG; needs offscreen GL);
- taco train --resume: --n-train demonstrations of the Dial with the shipped model's config
  (dial: the paper's nets [300, 200, 100], augmentation), stopped after one epoch, resumed for
  the second;
- `taco --help`, the floor every command starts from (NumPy, MuJoCo, every domain imported).

With --image-data DIR (a frame directory of the image Dial, e.g. the paper-scale set the
experiment grid collected under results/dial-image/data), it measures instead, without an
address-space limit (the images are read by positioned reads into the process, and its
address space holds nothing of the 10 GB but the batch it copied): `taco train` of one TACO
epoch (no warm-up: the TACO stage, whose activations are the largest) and of one CTC-BC (GRU)
epoch, the classifier stage with its own core, each on the whole set with the domain's
config; target: peak RSS <= 4 GB.

Usage::

    python bench/bench_memory.py                 # 100 tasks, 100 aligned, 200 trained on
    python bench/bench_memory.py --quick         # 10, 20, 20
    python bench/bench_memory.py --image-data results/dial-image/data/dial-image-n1200-L4-seed10000
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "sim", "taco_sim", "dial", "models")


LAUNCHER = """
import os, resource, sys
limit = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""
"""Runs the command as its own child and prints that child's peak RSS (KiB) and exit code. Linux
counts in a process's peak the resident size of the process it was forked from (exec keeps
the larger high-water mark), so the command is forked from this small launcher (about 10 MiB),
never from the benchmark's own process, which holds the collected data."""


def measure(argv, limit):
    """(exit code, peak RSS in MiB, seconds, last stderr line) of argv under RLIMIT_AS = limit."""
    t0 = time.time()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(limit)] + argv, capture_output=True, text=True)
    rss, code = (int(x) for x in done.stdout.split())
    last = done.stderr.replace("\r", "\n").strip().split("\n")[-1] if done.stderr.strip() else ""
    return code, rss / 1024, time.time() - t0, last


IMAGE_TARGET_GB = 4.0


def image_training(directory):
    """Peak RSS of one TACO epoch and one CTC-BC (GRU) classifier epoch on an image frame
    directory, each its own process, no address-space limit."""
    from taco_ref import data
    demos = data.load(directory)
    domain = demos.meta.get("domain")
    taco = [sys.executable, "-m", "taco_app.cli"]
    tmp = tempfile.mkdtemp(prefix="bench-memory-images-")
    frames = int(demos.traj_len.sum())
    print(f"{directory}: {demos.n} demonstrations, {frames} frames of {'x'.join(map(str, demos.image_shape))} "
          f"({frames * int(np.prod(demos.image_shape)) / 1e9:.1f} GB of images), domain {domain}; "
          f"no address-space limit\n")
    print("| command | peak RSS (MiB) | exit | s |")
    print("|---|---:|---:|---:|")
    worst = 0.0
    for label, algo, extra in (("taco train, 1 TACO epoch (no warm-up)", "taco", ["--set", "warmup_epochs=0"]),
                               ("taco train, 1 CTC-BC (GRU) classifier epoch", "ctcbc-gru", [])):
        argv = taco + ["train", "--algo", algo, "--data", directory, "--out", os.path.join(tmp, algo),
                       "--stop-after", "1"] + extra
        code, rss, seconds, last = measure(argv, 0)
        worst = max(worst, rss)
        print(f"| {label} | {rss:.0f} | {code} | {seconds:.0f} |" + (f" {last}" if code else ""))
    print(f"\nlargest peak RSS {worst / 1024:.2f} GiB; target <= {IMAGE_TARGET_GB:g} GB: "
          f"{'ok' if worst * 2 ** 20 <= IMAGE_TARGET_GB * 1e9 else 'MISS'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--image-data", default=None, metavar="DIR",
                    help="measure training on this image frame directory instead (see the docstring)")
    ap.add_argument("--limit-mb", type=float, default=1500.0, help="address-space limit, 10^6 bytes")
    ap.add_argument("--n-tasks", type=int, default=None)
    ap.add_argument("--n-align", type=int, default=None)
    ap.add_argument("--n-train", type=int, default=None)
    args = ap.parse_args()
    if args.image_data:
        image_training(args.image_data)
        return
    n_tasks = args.n_tasks or (10 if args.quick else 100)
    n_align = args.n_align or (20 if args.quick else 100)
    n_train = args.n_train or (20 if args.quick else 200)
    limit = int(args.limit_mb * 1e6)
    taco = [sys.executable, "-m", "taco_app.cli"]
    tmp = tempfile.mkdtemp(prefix="bench-memory-")
    from taco_ref import data
    import taco_sim
    for domain in ("dial", "dial-velocity"):
        t0 = time.time()
        data.save(taco_sim.get(domain).collect(max(n_align, n_train), 4, 11), os.path.join(tmp, f"{domain}.npz"))
        print(f"collected {max(n_align, n_train)} {domain} demonstrations in {time.time() - t0:.0f} s",
              file=sys.stderr)
    train_data = os.path.join(tmp, "train.npz")
    data.save(data.load(os.path.join(tmp, "dial.npz")).subset(range(n_train)), train_data)
    run = os.path.join(tmp, "run")
    shipped = ["--config", "dial", "--set", "epochs=2"]
    subprocess.run(taco + ["train", "--data", train_data, "--out", run, "--stop-after", "1"] + shipped,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    commands = [("taco --help (the floor: NumPy, MuJoCo, every domain)", taco + ["--help"])]
    for name, domain in (("dial", "dial"), ("dial-velocity", "dial-velocity")):
        model = os.path.join(MODELS, name)
        aligned = os.path.join(tmp, f"{domain}-align.npz")
        data.save(data.load(os.path.join(tmp, f"{domain}.npz")).subset(range(n_align)), aligned)
        commands += [
            (f"model.load {name}", [sys.executable, "-c", f"from taco_ref import model; model.load({model!r})"]),
            (f"taco evaluate {name}, {n_tasks} tasks", taco + ["evaluate", "--model", model, "--domain", domain,
                                                             "--n-tasks", str(n_tasks)]),
            (f"taco align {name}, {n_align} demonstrations", taco + ["align", "--model", model, "--data", aligned]),
        ]
    commands += [
        ("taco rollout dial, PIN 0 5 1 6", taco + ["rollout", "--model", os.path.join(MODELS, "dial"), "--domain",
                                                  "dial", "--sketch", "0 5 1 6", "--out", os.path.join(tmp, "r.png")]),
        (f"taco train --resume, {n_train} Dial demonstrations (dial), 1 epoch",
         taco + ["train", "--data", train_data, "--out", run, "--resume"] + shipped),
    ]
    print(f"address-space limit {limit / 1e9:g} GB; peak RSS of each command (its own process, "
          f"forked from a small launcher)\n")
    print("| command | peak RSS (MiB) | exit | s |")
    print("|---|---:|---:|---:|")
    for label, argv in commands:
        code, rss, seconds, last = measure(argv, limit)
        print(f"| {label} | {rss:.0f} | {code} | {seconds:.1f} |" + (f" {last}" if code not in (0, 1) else ""))


if __name__ == "__main__":
    main()
