"""Where does a model's STOP fire on demonstrations, sub-task by sub-task? Alignment ends and
STOP probabilities along held-out demonstrations, grouped by sub-task.

A test rollout fails at a key when the active sub-policy says STOP before its sub-task is done
(taco_ref.evaluate.classify_failure). Two causes look alike there: the model was trained on
an alignment that ends the sub-task too early (TACO learns its STOP labels from its own
alignment), or the alignment is right and the STOP net is eager anyway. On demonstrations the
two can be told apart, with the trained model's own alignment standing in for the ones it was
trained on. For every segment k of every held-out demonstration (the true labels'
steps t with labels[t] = k; the sub-policy of sketch[k] acts on each of them and should STOP on
the first step of segment k + 1):

  end offset    last step the decoder assigns to k minus the true last step (negative: the
                model's alignment ends the sub-task early), per decoder, segments before the
                sketch's last
  eager         share of segments where P(STOP | s_t) > threshold on a step the sub-policy
                should act on: a rollout through these very states would stop there
  on last       of the eager segments, the share whose first such step is the last acting
                step (the one whose action completes the sub-task, one step before the STOP)
  P at last     mean P(STOP) on the segment's last acting step (should be near 0)
  P at stop     mean P(STOP) on the step it should stop on, the next segment's first (near 1)
  target last   the STOP label TACO's objective gives the last acting step: the posterior
                xi_t(k -> k+1) / (xi_t(k -> k+1) + xi_t(k -> k)) of the model's own lattice
                (spec/align.md eq. (13)-(14)), mean over segments before the sketch's last;
                a TACO model is trained towards it (with the lattice of its training
                epochs, not its final one), a GT-BC model towards 0
  P(early end)  the posterior probability that the alignment leaves k on or before its last
                acting step, sum over t <= last of xi_t(k -> k+1): the share of TACO's STOP
                label mass for k that lies where the sub-policy should still act

taco_ref.evaluate.scores gives P(STOP) (the lattice's log_stop, by sketch position) and the
lattice that taco_ref.align's decoders read (as evaluate.lattice_alignments does), one pass of
the nets for both: the positions decoded on the TACO lattice of the model's sub-policies, for
TACO and GT-BC the alignment `taco align` reports (CTC-BC's reports its classifier's).

    python -m taco_app.analysis.stop_by_subtask --model RUN/model --data HELDOUT [--model RUN2/model ...]
"""
import argparse
import os
import sys
from typing import NamedTuple, Optional

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from taco_ref import align, data, evaluate, model as model_mod  # noqa: E402

DECODERS = ("forward_argmax", "viterbi")


class Segment(NamedTuple):
    """One segment's figures; those read at the stop step are None for the sketch's last."""

    subtask: int
    offsets: dict                   # {decoder: end offset, None for the sketch's last}
    eager: bool
    p_last: float                   # P(STOP) on the last acting step
    p_stop: Optional[float]         # P(STOP) on the stop step
    target_last: Optional[float]    # posterior STOP label on the last acting step (None: unreached)
    p_early: Optional[float]        # P(early end)
    eager_on_last: bool             # eager, first on the last acting step


def segment_rows(labels, traj_len, sketch, sketch_len, paths, log_stop, xi_stop, xi_go, threshold=0.5):
    """One Segment per segment of a batch, in order of demonstration and sketch position.

    Symbol    | Shape      | Meaning
    labels    | (B, T)     | true sketch position of each step
    traj_len  | (B,)       | steps of each demonstration
    sketch    | (B, L)     | sub-task ids
    sketch_len| (B,)       | sketch positions in use
    paths     | {d: (B, T)}| decoded sketch positions
    log_stop  | (B, T, L)  | log P(STOP | s_t) of the sub-policy at sketch position k
    xi_stop   | (B, T, L)  | posterior of the transition k -> k+1 at t (TacoResult.d_stop)
    xi_go     | (B, T, L)  | posterior of the transition k -> k at t (TacoResult.d_go)
    """
    rows = []
    for i in range(labels.shape[0]):
        T, L = int(traj_len[i]), int(sketch_len[i])
        lab = labels[i, :T]
        for k in range(L):
            steps = np.flatnonzero(lab == k)
            if steps.size == 0:
                raise ValueError(f"labels: demonstration {i} has no step at sketch position {k} "
                                 f"of {L}; expected every position of the sketch to be visited")
            last = int(steps[-1])
            p = np.exp(log_stop[i, steps, k])
            over = np.flatnonzero(p > threshold)
            offsets = {}
            for d, path in paths.items():
                decoded = np.flatnonzero(path[i, :T] == k)
                offsets[d] = int(decoded[-1]) - last if k < L - 1 and decoded.size else None
            at_stop = target = early = None
            if k < L - 1:
                at_stop = float(np.exp(log_stop[i, last + 1, k]))
                weight = xi_stop[i, last, k] + xi_go[i, last, k]     # P(z_{last-1} = k)
                target = float(xi_stop[i, last, k] / weight) if weight > 0 else None
                early = float(xi_stop[i, :last + 1, k].sum())
            rows.append(Segment(int(sketch[i, k]), offsets, bool(over.size), float(p[-1]), at_stop,
                                target, early, bool(over.size) and int(over[0]) == steps.size - 1))
    return rows


def summary(rows, decoders=DECODERS):
    """{sub-task id: figures} over rows of segment_rows, and "all" over every segment:
    segments, per decoder the mean end offset and the share of exact ends, eager share and the
    share of those first eager on the last acting step (None without eager segments), mean
    P(STOP) at the last and stop steps, mean posterior STOP label at the last step and mean
    P(early end)."""
    out = {}
    for sub in sorted({r.subtask for r in rows}) + ["all"]:
        mine = rows if sub == "all" else [r for r in rows if r.subtask == sub]
        eager = [r for r in mine if r.eager]
        fig = {"segments": len(mine), "eager": float(np.mean([r.eager for r in mine])),
               "eager_on_last": float(np.mean([r.eager_on_last for r in eager])) if eager else None,
               "p_last": float(np.mean([r.p_last for r in mine]))}
        for name in ("p_stop", "target_last", "p_early"):
            vals = [getattr(r, name) for r in mine if getattr(r, name) is not None]
            fig[name] = float(np.mean(vals)) if vals else None
        for d in decoders:
            off = np.array([r.offsets[d] for r in mine if r.offsets.get(d) is not None])
            fig[f"{d}_offset"] = float(off.mean()) if off.size else None
            fig[f"{d}_exact"] = float(np.mean(off == 0)) if off.size else None
        out[sub] = fig
    return out


def measure(model, demos, threshold=0.5, batch_size=16):
    """summary() of every held-out demonstration, a pass batch at a time."""
    evaluate.check_compatible(model, demos)
    rows = []
    for batch in data.batches(demos, data.pass_batch_size(demos, batch_size)):
        lattice = evaluate.scores(model, batch)           # one pass of the nets serves both
        paths = {d: align.DECODERS[d](*lattice, batch.traj_len, batch.sketch_len) for d in DECODERS}
        fb = align.taco_forward_backward(*lattice, batch.traj_len, batch.sketch_len)
        rows += segment_rows(batch.labels, batch.traj_len, batch.sketch, batch.sketch_len, paths,
                             lattice[1], fb.d_stop, fb.d_go, threshold)
    return summary(rows)


def table(name, figures, vocab):
    fmt = lambda v, f: "-" if v is None else f.format(v)
    lines = [f"| {name} | segments | end offset, fwd argmax (exact) | end offset, Viterbi (exact) "
             f"| eager (first on last step) | P(STOP) last step | P(STOP) stop step | posterior label last step | P(early end) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for sub, f in figures.items():
        lines.append(f"| {'all' if sub == 'all' else vocab[sub]} | {f['segments']} | "
                     + " | ".join(f"{fmt(f[d + '_offset'], '{:+.2f}')} ({fmt(f[d + '_exact'], '{:.0%}')})"
                                  for d in DECODERS)
                     + f" | {f['eager']:.0%} ({fmt(f['eager_on_last'], '{:.0%}')}) | {f['p_last']:.2f} | {fmt(f['p_stop'], '{:.2f}')}"
                     + f" | {fmt(f['target_last'], '{:.2f}')} | {fmt(f['p_early'], '{:.2f}')} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m taco_app.analysis.stop_by_subtask", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, action="append", help="a model directory (repeatable)")
    ap.add_argument("--data", required=True, help="held-out demonstrations (.npz or a frames directory)")
    ap.add_argument("--stop-threshold", type=float, default=0.5, metavar="P",
                    help="a sub-policy stops when P(STOP | state) exceeds P (as taco evaluate)")
    args = ap.parse_args(argv)
    if not 0.0 < args.stop_threshold < 1.0:
        ap.error(f"--stop-threshold must lie in (0, 1), got {args.stop_threshold}")
    demos = data.load(args.data)
    for path in args.model:
        model = model_mod.load(path)
        print(table(f"{model.algo}: {path}", measure(model, demos, args.stop_threshold), demos.vocab))
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
