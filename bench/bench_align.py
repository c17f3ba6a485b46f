"""Benchmark of taco_ref.align against peers measured in the same run.

What is timed (everything single-threaded, float64, CPU; median of N repeats after a warm-up):

- taco_ref  ``taco_forward_backward``: TACO log-likelihood and the gradients w.r.t.
  log_act, log_stop, log_go (spec/align.md).
- peer 1    autograd's gradient of a plainly written log-space forward recursion (a loop
  over t, ``np.logaddexp`` on the (B, L) state). Its gradients are checked against
  taco_ref's before timing, so both sides compute the same thing. Target: speed-up
  (autograd / taco_ref) >= 25.
- peer 2    ``torch.nn.functional.ctc_loss`` forward + backward (K = L + 1 classes, blank 0),
  skipped with a reason when torch is missing. Target: taco_ref TACO / torch CTC <= 1.0.
  taco_ref ``ctc_forward_backward`` (blank-free) on the same log-probabilities and targets
  is timed beside it for information.

Usage::

    python bench/bench_align.py            # full set
    python bench/bench_align.py --quick    # fewer repeats, for smoke testing
    python bench/bench_align.py --json out.json

The exit code is 0 whether or not the targets are met; the last line says which.
"""
import os
import sys

import _timing

_timing.preamble(1, keep=True)   # single-threaded BLAS/OpenMP unless the environment says otherwise

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import autograd.numpy as anp  # noqa: E402
import numpy as np  # noqa: E402
from autograd import grad  # noqa: E402

from taco_ref import align  # noqa: E402
from _timing import import_torch, interleaved_medians, numpy_blas_parts  # noqa: E402

torch, TORCH_SKIP_REASON = import_torch(1)

SHAPES = [(32, 200, 4), (64, 1000, 10)]  # (B, T, L)
N_ACTIONS = 5  # A: actions the per-step log-probabilities are drawn over
SEED = 0
SPEEDUP_TARGET = 25.0  # autograd time / taco_ref time >= this
TORCH_RATIO_TARGET = 1.0  # taco_ref TACO time / torch CTC time <= this
NEG = -1e30  # finite stand-in for log 0 in the autograd peer (see autograd_loglik_sum)


# ---------------------------------------------------------------------------------------------
# setup report

def blas_summary():
    """One line on numpy's BLAS and the thread settings."""
    parts = numpy_blas_parts()
    try:
        from threadpoolctl import threadpool_info
        pools = [f"{p['internal_api']}:{p['num_threads']}" for p in threadpool_info()]
        parts.append("threadpoolctl " + (", ".join(pools) or "no pools"))
    except ImportError:
        parts.append("threadpoolctl not installed")
    if torch is not None:
        parts.append(f"torch threads {torch.get_num_threads()}/{torch.get_num_interop_threads()} "
                     "(intra/inter-op)")
    return " | ".join(parts)


# ---------------------------------------------------------------------------------------------
# inputs

def log_softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))


def log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def make_taco_inputs(B, T, L, rng):
    """Realistic TACO inputs: policy log-probabilities of sampled actions, stop/go from a sigmoid."""
    logits = 2.0 * rng.standard_normal((B, T, L, N_ACTIONS))  # (B, T, L, A)
    actions = rng.integers(0, N_ACTIONS, size=(B, T, 1, 1))  # (B, T, 1, 1)
    log_act = np.take_along_axis(log_softmax(logits), actions, axis=-1)[..., 0]  # (B, T, L)
    stop_logits = 2.0 * rng.standard_normal((B, T, L))  # (B, T, L)
    log_stop = log_sigmoid(stop_logits)  # (B, T, L)
    log_go = log_sigmoid(-stop_logits)  # (B, T, L); stop + go = 1
    return log_act, log_stop, log_go


def make_ctc_inputs(B, T, L, rng):
    """log-probabilities over K = L + 1 classes (class 0 = blank for torch) and targets in 1..K-1."""
    K = L + 1
    log_p = log_softmax(2.0 * rng.standard_normal((B, T, K)))  # (B, T, K)
    sketch = rng.integers(1, K, size=(B, L))  # (B, L)
    return log_p, sketch


# ---------------------------------------------------------------------------------------------
# peer 1: autograd on the plain recursion

def autograd_loglik_sum(log_act, log_stop, log_go):
    """sum_b log alpha_{T-1}(L-1): the forward recursion of spec/align.md written plainly.

    alpha_t(l) = act[t,l] * (alpha_{t-1}(l-1) * stop[t,l-1] + alpha_{t-1}(l) * go[t,l]),
    in log-space. log 0 is NEG (finite), not -inf: autograd's logaddexp VJP is
    g * exp(x - ans), which is NaN when x = ans = -inf. exp(NEG - finite) is exactly 0,
    so unreachable states get exactly zero gradient and do not change the result.
    """
    B, T, L = log_act.shape
    floor = anp.full((B, 1), NEG)  # (B, 1)
    alpha = anp.concatenate([log_act[:, 0, :1], anp.full((B, L - 1), NEG)], axis=1)  # (B, L)
    for t in range(1, T):
        moved = anp.concatenate([floor, alpha[:, :-1] + log_stop[:, t, :-1]], axis=1)  # (B, L)
        stayed = alpha + log_go[:, t]  # (B, L)
        alpha = anp.logaddexp(moved, stayed) + log_act[:, t]  # (B, L)
    return anp.sum(alpha[:, L - 1])


autograd_grads = grad(autograd_loglik_sum, argnum=(0, 1, 2))  # -> (d_act, d_stop, d_go)


def check_autograd_agrees(inputs):
    """Both sides must compute the same gradients before we compare their times."""
    ref = align.taco_forward_backward(*inputs)
    loglik_sum = autograd_loglik_sum(*inputs)
    d_act, d_stop, d_go = autograd_grads(*inputs)  # each (B, T, L)
    np.testing.assert_allclose(loglik_sum, ref.loglik.sum(), rtol=1e-9, atol=1e-9)
    for name, ours, theirs in (("d_act", ref.d_act, d_act), ("d_stop", ref.d_stop, d_stop),
                               ("d_go", ref.d_go, d_go)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-9,
                                   err_msg=f"{name}: taco_ref vs autograd")


# ---------------------------------------------------------------------------------------------
# peer 2: torch CTC

def make_torch_ctc_peer(log_p, sketch):
    """A closure running torch ctc_loss forward + backward on (T, B, K) log-probabilities."""
    B, T, K = log_p.shape
    L = sketch.shape[1]
    log_probs = torch.tensor(log_p.transpose(1, 0, 2), dtype=torch.float64,
                             requires_grad=True)  # (T, B, K)
    targets = torch.tensor(sketch, dtype=torch.long)  # (B, L)
    input_lengths = torch.full((B,), T, dtype=torch.long)  # (B,)
    target_lengths = torch.full((B,), L, dtype=torch.long)  # (B,)

    def run():
        loss = torch.nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths,
                                            blank=0, reduction="sum")
        (d_log_probs,) = torch.autograd.grad(loss, log_probs)  # (T, B, K)
        return loss, d_log_probs

    loss, d_log_probs = run()
    assert torch.isfinite(loss) and torch.isfinite(d_log_probs).all(), "torch CTC not finite"
    return run


# ---------------------------------------------------------------------------------------------
# timing

def autograd_repeats(one_run_s, max_repeats, budget_s):
    """Fewer rounds when autograd is slow (at least 3, so the median means something)."""
    return int(max(3, min(max_repeats, budget_s // max(one_run_s, 1e-9))))


def bench_shape(B, T, L, cfg, rng):
    rows = []
    shape = f"({B}, {T}, {L})"
    n = cfg["repeats"]
    inputs = make_taco_inputs(B, T, L, rng)
    taco = lambda: align.taco_forward_backward(*inputs)  # noqa: E731

    start = time.perf_counter()
    check_autograd_agrees(inputs)  # also serves as autograd's warm-up
    n_ag = autograd_repeats(time.perf_counter() - start, n, cfg["autograd_budget_s"])
    (t_taco, t_ag), _ = interleaved_medians([taco, lambda: autograd_grads(*inputs)], n_ag)
    rows.append(dict(shape=shape, peer="autograd (grad check passed)", ours="taco_ref TACO fwd+bwd",
                     ours_ms=1e3 * t_taco, peer_ms=1e3 * t_ag, repeats=n_ag,
                     ratio_name="speed-up = autograd / taco_ref", ratio=t_ag / t_taco,
                     target=f">= {SPEEDUP_TARGET:g}", met=t_ag / t_taco >= SPEEDUP_TARGET))

    if torch is None:
        return rows
    log_p, sketch = make_ctc_inputs(B, T, L, rng)
    torch_ctc = make_torch_ctc_peer(log_p, sketch)
    ctc = lambda: align.ctc_forward_backward(log_p, sketch)  # noqa: E731
    (t_taco, t_ctc, t_torch), _ = interleaved_medians([taco, ctc, torch_ctc], n)
    rows.append(dict(shape=shape, peer="torch ctc_loss fwd+bwd", ours="taco_ref TACO fwd+bwd",
                     ours_ms=1e3 * t_taco, peer_ms=1e3 * t_torch, repeats=n,
                     ratio_name="taco_ref TACO / torch CTC", ratio=t_taco / t_torch,
                     target=f"<= {TORCH_RATIO_TARGET:g}", met=t_taco / t_torch <= TORCH_RATIO_TARGET))
    rows.append(dict(shape=shape, peer="torch ctc_loss fwd+bwd", ours="taco_ref CTC fwd+bwd",
                     ours_ms=1e3 * t_ctc, peer_ms=1e3 * t_torch, repeats=n,
                     ratio_name="taco_ref CTC / torch CTC", ratio=t_ctc / t_torch,
                     target="info", met=None))
    return rows


# ---------------------------------------------------------------------------------------------
# report

def print_table(rows):
    header = (f"{'shape (B, T, L)':<16} {'taco_ref':<22} {'peer':<29} {'ours ms':>9} {'peer ms':>9} "
              f"{'reps':>5}  {'ratio':>7}  {'target':<7} {'':4} ratio meaning")
    print(header)
    print("-" * len(header))
    for r in rows:
        verdict = "" if r["met"] is None else ("ok" if r["met"] else "MISS")
        print(f"{r['shape']:<16} {r['ours']:<22} {r['peer']:<29} {r['ours_ms']:9.2f} "
              f"{r['peer_ms']:9.2f} {r['repeats']:>5}  {r['ratio']:7.2f}  {r['target']:<7} "
              f"{verdict:4} {r['ratio_name']}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke test)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    cfg = (dict(repeats=3, autograd_budget_s=5.0) if args.quick
           else dict(repeats=21, autograd_budget_s=60.0))  # taco_ref/torch repeats; autograd budget

    machine = dict(processor=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
                   python=platform.python_version(), numpy=np.__version__,
                   torch=torch.__version__ if torch is not None else None)
    print(f"machine: {machine['processor']}, {machine['cpu_count']} CPUs | python {machine['python']} "
          f"| numpy {machine['numpy']} | torch {machine['torch'] or 'not available'}")
    print(f"threads: {blas_summary()}")
    print(f"mode: {'quick' if args.quick else 'full'}; float64, seed {SEED}; median wall time; "
          f"taco_ref and peer calls interleaved, reps rounds")
    if torch is None:
        print(f"peer 2 (torch ctc_loss) skipped: {TORCH_SKIP_REASON}")
    print()

    rng = np.random.default_rng(SEED)
    rows = []
    for B, T, L in SHAPES:
        rows += bench_shape(B, T, L, cfg, rng)
    print_table(rows)

    judged = [r for r in rows if r["met"] is not None]
    missed = [f"{r['shape']} {r['ratio_name']} = {r['ratio']:.2f} (target {r['target']})"
              for r in judged if not r["met"]]
    print()
    if missed:
        print(f"FAIL vs targets ({len(judged) - len(missed)}/{len(judged)} met): " + "; ".join(missed))
    else:
        print(f"PASS vs targets ({len(judged)}/{len(judged)} met)")

    if args.json:
        Path(args.json).write_text(json.dumps(dict(machine=machine, mode="quick" if args.quick
                                                   else "full", rows=rows), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
