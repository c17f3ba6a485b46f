"""What one experiment cell of the image Dial costs, measured on its parts and added up.

A cell of `taco experiment dial-image-small` (or dial-image) trains for tens of epochs, then
executes its test PINs and aligns its held-out demonstrations. Running a whole cell to time it
takes an hour or more of CPU; this bench runs each part once or twice on the real data and
extrapolates, saying so. Measured (process CPU time, the cost on one core whatever else shares
the machine; wall time beside it):

- setup: loading the frame directory's index, the split, the per-channel image statistics
  (a read of every training frame), the parameters' initialisation;
- --epochs epochs of the training run, each timed on its own, with the stage it belongs to
  (TACO: warm-up epochs of behaviour cloning, then the TACO stage; pass --set warmup_epochs=1
  to time one of each);
- the pass over the training set that the finished TACO model records (train_loglik);
- --rollouts test PINs of the domain's protocol, executed by the partly trained policy: each
  renders one camera image per control step and runs the core on it; a policy that has not
  learnt to STOP runs to the step limit, so the figure per PIN is near the most a PIN can cost;
- alignment (every decoder) of --align held-out demonstrations;
- the process's peak resident memory (all of the above on the whole set).

The estimate of a cell: setup + warm-up epochs x the warm-up epoch's CPU + policy epochs x the
policy epoch's CPU + train_loglik + n_tasks x the PIN's CPU + n_align x the alignment's CPU per
demonstration. The epoch counts are the config's (epochs; warmup_epochs for TACO): with early
stopping (patience < epochs) a cell may stop sooner, so the estimate is the most it costs.

Cheaper, for a set too costly to train on here (--steps K): instead of whole epochs, K training
steps on the K minibatches of the stage with the most frames and one batch of a whole-set pass
(data.MAX_BATCH_FRAMES frames); an epoch is then estimated from the CPU per frame of those
steps times the training set's frames, plus the held-out pass. The peak resident memory is that
of the largest batches, which is what bounds a whole run's.

--paper-shape DIR builds, from a reduced-scale set (--data), a set of the paper's shape to run
on: every image scaled to 112 x 112 (nearest neighbour), the demonstrations repeated to 1200
(the repeats' chunk files are hard links of the first copy's, so the 10 GB set takes 1.6 GB of
disk; reads go through the page cache as for any frame directory). Its images are not the
camera's, so it measures cost and memory, never accuracy.

Usage::

    python bench/bench_image_cell.py --data results/dial-image-small/data/dial-image-small-n200-L4-seed10000 \\
        --set warmup_epochs=1 --epochs 2 --rollouts 2 --align 4
    python bench/bench_image_cell.py --data DIR --json out.json
    python bench/bench_image_cell.py --data results/dial-image-small/data/dial-image-small-n200-L4-seed10000 \
        --paper-shape /tmp/dial-image-paper-shape --set warmup_epochs=0 --steps 3 --rollouts 0 --align 0

BLAS and OpenMP run with 1 thread, as the `taco` command runs them.
"""
import os
import sys

import _timing

_timing.preamble(1, sim=True)

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import taco_sim  # noqa: E402
from taco_ref import data, evaluate, train  # noqa: E402
from taco_ref.plumbing import files  # noqa: E402
from taco_app import config as config_mod  # noqa: E402
from _timing import cpu_model  # noqa: E402


class Clock:
    """Process CPU seconds and wall seconds of each timed part, in order."""

    def __init__(self):
        self.parts = []

    def time(self, label, fn):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
        self.parts.append(dict(part=label, cpu_s=cpu, wall_s=wall))
        print(f"  {label:<34} CPU {cpu:8.1f} s   wall {wall:8.1f} s", flush=True)
        return out


PAPER_SIZE, PAPER_N = 112, 1200


def paper_shape_set(source_dir, out_dir, n=PAPER_N):
    """A frame directory of the paper's shape at out_dir: n demonstrations (or the few more that
    complete a chunk) of PAPER_SIZE^2 images, made from the reduced-scale set at source_dir (the
    module's docstring); reused when complete."""
    if os.path.exists(os.path.join(out_dir, data.INDEX)):
        return data.load(out_dir)
    small = data.load(source_dir)
    H = small.image_shape[0]
    rows = np.arange(PAPER_SIZE) * H // PAPER_SIZE                   # nearest-neighbour scaling
    scale = lambda imgs: np.ascontiguousarray(imgs[..., rows, :, :][..., rows, :])   # noqa: E731
    z = np.load(os.path.join(source_dir, data.INDEX), allow_pickle=False)
    arrays = {k: z[k] for k in z.files}
    chunk = arrays["chunk"]
    n_chunks = int(chunk.max()) + 1
    shape = (PAPER_SIZE, PAPER_SIZE, small.image_shape[2])
    writer = data.FrameWriter(out_dir, shape)
    for i in range(n_chunks):                  # the first copy, scaled
        members = np.flatnonzero(chunk == i)
        writer.write_chunk(i, [scale(small.states.frames(int(m))) for m in members])
    copies = -(-n // small.n)
    for k in range(1, copies):                 # the repeats: hard links of the first copy's chunks
        for i in range(n_chunks):
            os.link(os.path.join(out_dir, f"frames-{i:05d}.npy"),
                    os.path.join(out_dir, f"frames-{k * n_chunks + i:05d}.npy"))
    all_chunks = np.concatenate([chunk + k * n_chunks for k in range(copies)])   # (copies N,)
    ends = np.flatnonzero(np.diff(np.append(all_chunks, -1)) != 0) + 1          # demos at each chunk's end
    n = int(ends[np.searchsorted(ends, n)])      # whole chunks: at least n demonstrations
    keep = np.arange(n) % small.n                                                # (n,)
    final = scale(np.asarray(small.final_state))[keep]
    files.atomic_write(os.path.join(out_dir, data.FINAL), lambda f: np.save(f, final))
    digests = np.concatenate([writer.chunks[i]["digests"] for i in range(n_chunks)])
    out = {name: np.concatenate([arrays[name]] * copies)[:n]
           for name in ("actions", "traj_len", "sketch", "sketch_len", "labels")}
    out["chunk"] = all_chunks[:n]
    used = int(out["chunk"][-1]) + 1
    for j in range(used, copies * n_chunks):   # chunks past the last demonstration
        os.unlink(os.path.join(out_dir, f"frames-{j:05d}.npy"))
    out["digests"] = np.concatenate([digests] * copies)[:n]
    out["vocab"] = arrays["vocab"]
    meta = json.loads(str(arrays["meta"]))
    meta.update(domain="dial-image", image_size=PAPER_SIZE, note="bench paper-shape set: scaled, repeated")
    meta["frames"] = dict(meta["frames"], image_shape=list(shape), chunks=used)
    out["meta"] = np.array(json.dumps(meta, sort_keys=True))
    files.atomic_write(os.path.join(out_dir, data.INDEX), lambda f: np.savez_compressed(f, **out))
    return data.load(out_dir)


def largest_steps(run, clock, steps):
    """CPU per frame of `steps` training steps on the stage's minibatches with the most frames,
    and of one whole-set-pass batch; (train frames per epoch, CPU per train frame, held-out
    frames, CPU per pass frame)."""
    job, stage = run.job, run.stage
    train_set, held = job.stage_sets(stage, run.train_set, run.held_out)
    batches = list(data.batches(train_set, run.cfg.batch_size, run.rng))
    frames = np.array([int(b.traj_len.sum()) for b in batches])
    cpu, done = 0.0, 0
    for i in np.argsort(-frames, kind="stable")[:steps]:
        def step(batch=batches[i]):
            n = int(batch.traj_len.sum())
            _, grads = job.loss(stage, batch, run.rng, 0, train=True)
            for g in grads.values():
                g /= n
            run.adam.step(job.params, grads)
        clock.time(f"step of stage {stage}, {frames[i]} frames", step)
        cpu, done = cpu + clock.parts[-1]["cpu_s"], done + frames[i]
    per = data.pass_batch_size(held, 64)
    pass_batch = held.subset(np.arange(min(per, held.n)))
    clock.time(f"pass batch, {int(pass_batch.traj_len.sum())} frames",
               lambda: job.loss(stage, pass_batch, None, 0, train=False))
    return (int(frames.sum()), cpu / done, int(held.traj_len.sum()),
            clock.parts[-1]["cpu_s"] / int(pass_batch.traj_len.sum()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="the cell's training set (a frame directory or .npz)")
    ap.add_argument("--algo", default="taco", choices=train.ALGOS)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value of the domain's config (repeatable)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs to time")
    ap.add_argument("--steps", type=int, default=0,
                    help="time this many of the largest training steps instead of whole epochs")
    ap.add_argument("--paper-shape", default=None, metavar="DIR",
                    help="build (or reuse) a paper-shape set from --data at DIR and run on it")
    ap.add_argument("--paper-n", type=int, default=PAPER_N, help="demonstrations of the paper-shape set")
    ap.add_argument("--rollouts", type=int, default=2, help="test PINs to time")
    ap.add_argument("--align", type=int, default=4, help="held-out demonstrations to align")
    ap.add_argument("--n-tasks", type=int, default=100, help="test PINs of a cell (the estimate)")
    ap.add_argument("--n-align", type=int, default=100, help="aligned demonstrations of a cell")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs | numpy {np.__version__} | nice "
          f"{os.nice(0)} | 1-min load average at start {os.getloadavg()[0]:.2f}")
    clock = Clock()
    source = args.data
    if args.paper_shape:
        clock.time("build the paper-shape set", lambda: paper_shape_set(args.data, args.paper_shape, args.paper_n))
        source = args.paper_shape
    demos = clock.time("load the index", lambda: data.load(source))
    domain = demos.meta.get("domain")
    dom = taco_sim.get(domain)
    cfg = config_mod.load(domain, None, args.set, algo=args.algo, seed=0)
    cell_cfg = config_mod.load(domain, None, [], algo=args.algo, seed=0)
    print(f"data: {domain}, {demos.n} demonstrations, states {tuple(demos.states.shape)}, "
          f"{int(demos.traj_len.sum())} frames | config: {cfg.algo}, batch {cfg.batch_size}, nets "
          f"{cfg.act_hidden} / {cfg.stop_hidden}, core {cfg.conv_channels} {cfg.conv_kernels} "
          f"{cfg.conv_strides}, dtype {cfg.dtype} | overrides {args.set or 'none'}")
    run = clock.time("setup (split, statistics, init)", lambda: train._Run(demos, cfg, 0, None))
    epoch_cpu = {}
    if args.steps:
        while run.stage_done():
            run.next_stage()
        n_train, per_train, n_held, per_pass = largest_steps(run, clock, args.steps)
        epoch_cpu[run.stage] = [n_train * per_train + n_held * per_pass]
        print(f"  an epoch of stage {run.stage}, estimated: {n_train} training frames at "
              f"{1e3 * per_train:.2f} ms + {n_held} held-out frames at {1e3 * per_pass:.2f} ms = "
              f"{epoch_cpu[run.stage][0]:.0f} s CPU")
    for _ in range(0 if args.steps else args.epochs):
        while run.stage_done():
            run.next_stage()
        stage, epoch = run.stage, run.state["epoch"] + 1
        clock.time(f"epoch {epoch} of stage {stage}", run.epoch)
        epoch_cpu.setdefault(stage, []).append(clock.parts[-1]["cpu_s"])
    per_pin = per_align = 0.0
    if args.steps:          # the train_loglik pass is a pass over the training set
        loglik = n_train * per_pass if cfg.algo == "taco" else 0.0
    else:
        clock.time("model (train_loglik pass)" if cfg.algo == "taco" else "model", run.model)
        loglik = clock.parts[-1]["cpu_s"]
    model = run.job.model({"history": run.state["history"]})     # the parameters as trained here
    if args.rollouts:
        evaluation = clock.time(f"{args.rollouts} test PINs", lambda: evaluate.protocol(model, dom, args.rollouts, 0))
        per_pin = clock.parts[-1]["cpu_s"] / args.rollouts
        print(f"(the PINs: {evaluation['outcomes']} done, sub-task accuracy "
              f"{100 * evaluation['subtask_accuracy']:.0f} %; an untrained policy runs to the step limit)")
    if args.align:
        aligned = run.held_out.subset(np.arange(min(args.align, run.held_out.n)))
        clock.time(f"align {aligned.n} held-out demonstrations",
                   lambda: evaluate.alignment_accuracies(model, aligned))
        per_align = clock.parts[-1]["cpu_s"] / max(1, aligned.n)

    part = {p["part"]: p["cpu_s"] for p in clock.parts}
    setup = part["load the index"] + part["setup (split, statistics, init)"]
    counts = {"warmup": cell_cfg.warmup_epochs if cell_cfg.algo == "taco" else 0,
              "ctc": cell_cfg.epochs if cell_cfg.ctc_kind else 0, "policy": cell_cfg.epochs}
    print()
    print(f"estimate of one {cell_cfg.algo} cell of the config as shipped ({domain}: "
          f"{counts['warmup']} warm-up epochs, {cell_cfg.epochs} epochs per stage, patience "
          f"{cell_cfg.patience}; {args.n_tasks} test PINs; {args.n_align} aligned):")
    total, missing = setup, []
    for stage, n in counts.items():
        if not n:
            continue
        timed, upper = stage, ""
        if stage not in epoch_cpu and stage == "warmup" and "policy" in epoch_cpu:
            timed, upper = "policy", " (counted at the TACO epoch's cost: more than it is)"
        elif stage not in epoch_cpu:
            missing.append(stage)
            continue
        each = float(np.mean(epoch_cpu[timed]))
        total += n * each
        print(f"  {n:3d} x {stage:<7} epoch at {each:7.1f} s CPU = {n * each / 60:6.1f} min{upper}")
    total += loglik + args.n_tasks * per_pin + args.n_align * per_align
    if not args.rollouts or not args.align:
        note_parts = [p for p, n in (("test PINs", args.rollouts), ("alignment", args.align)) if not n]
        print(f"  not timed, counted as 0: {', '.join(note_parts)}")
    print(f"  setup {setup:.1f} s, train_loglik {loglik:.1f} s, {args.n_tasks} PINs at {per_pin:.1f} s = "
          f"{args.n_tasks * per_pin / 60:.1f} min, {args.n_align} alignments at {per_align:.2f} s = "
          f"{args.n_align * per_align / 60:.1f} min")
    note = (f"; stages not timed (add epochs or --set warmup_epochs=1): {', '.join(missing)}"
            if missing else "")
    print(f"  total, an extrapolation from the parts above: {total / 3600:.2f} h of CPU on one core"
          f"{note}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20       # KiB -> GiB
    print(f"peak resident memory of this process: {peak:.2f} GiB | 1-min load average at end "
          f"{os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(parts=clock.parts, epoch_cpu=epoch_cpu, counts=counts,
                                                   estimate_cpu_s=total, missing=missing, peak_rss_gib=peak,
                                                   overrides=args.set, data=args.data), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
