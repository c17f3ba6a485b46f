"""Benchmark of one TACO training step: taco_ref against the same model in PyTorch, same run.

One step is what the trainer (taco_ref/train.py) does per minibatch: the sub-policies'
forward pass, the TACO alignment forward-backward, the backward pass through the
sub-policies, and an Adam update with the gradients divided by the number of valid steps.

Problem: B = 32 demonstrations, T = 200 (padded), L = 4 sketch steps of distinct sub-tasks drawn
from K = 10, D = 39 state dims, A = 9 continuous action dims, Gaussian actions with sigma = 1;
every sub-task has an action net and a STOP net, both [300, 200, 100] relu. Two batches:
"random T_b" (traj_len uniform in [150, 200]) and "full T_b" (traj_len = 200 everywhere).

What is timed (CPU; median wall time of N interleaved rounds after a warm-up round; the
median process CPU time of the same calls is printed beside it, as a figure that a busy,
shared machine disturbs less):

- taco_ref  ``objectives.taco(params, cfg, batch)`` + ``optim.Adam.step`` on grads / steps,
            with the nets in float64 and in float32 (TrainConfig.dtype; the alignment is
            float64 in both). A second, phased copy of the same step (policy.evaluate |
            align.taco_forward_backward | policy.backward | Adam) gives the breakdown; its loss
            is checked equal to objectives.taco's.
- torch     the same model in eager PyTorch with autograd, float64 and float32, two ways:
            "grouped": K separate nn.Sequential action/STOP nets (nn.ModuleList), each run once
              on the (b, t, l) entries of its sub-task gathered across the batch, exactly the
              grouping taco_ref uses (no padded rows are computed);
            "bmm":     stacked (K, in, out) weights gathered per (b, l) sketch step and applied
              with torch.baddbmm to all T steps of the trajectory (padded rows computed, then
              masked out by the recursion).
            Then the Gaussian log-density, F.logsigmoid for STOP/GO, the TACO forward recursion
            in log space (a loop over t, torch.logaddexp on (B, L), padding steps kept by
            torch.where), loss = -loglik.sum() / steps, loss.backward(), and
            torch.optim.Adam(fused=True) (the fastest of default / foreach / fused here).
            The ratio is taken against the faster of the two variants, per dtype.

Before timing, each float64 torch variant gets taco_ref's initial weights and must reproduce
taco_ref's loss (rtol 1e-10), every parameter gradient (allclose) and the parameters after one
Adam step; the float32 variants (torch and taco_ref) must match the loss to 1e-4 relative.

Also printed, in the same run: the CPU's vendor and model, NumPy's version and BLAS; per taco_ref
dtype, what one step sends into float32's subnormal range (spec/training.md eq. (12)): the float64
gradients w.r.t. the scores that would round to a float32 subnormal, and the subnormal operand
entries of every matrix product of the nets (nn.subnormal_census: 0 by construction; on Intel
cores each one costs a microcode assist, on AMD cores nothing); the machine's practical GEMM
limit (np.matmul of two 2000 x 2000 matrices, float32 and float64, 1 thread: the best call of
those taken at the start and of those interleaved with each batch's rounds, so that a VM's
drifting clock cannot set the limit in one minute and the step in another) and the nets'
useful GFLOP/s as a share of it; a profile of the taco_ref step per dtype (the phases; the
same GEMMs replayed alone, so the rest of the nets' time is the non-GEMM work; the functions
with the most self CPU time); and a
Nav-World-sized step (small nets [100], B = 10), whose fixed per-step cost (Python and NumPy
call overhead) is estimated from the same step at B = 1.

Targets, at 1 thread (other thread counts are reported, not judged), with taco_ref's float32
nets (the fast path; float64 when only it is timed): taco_ref / torch float32 <= 0.8 and
taco_ref / torch float64 <= 0.6 (the faster torch variant each); the float32 nets' useful
GFLOP/s >= 50 % of the float32 GEMM limit (float64's share is printed, not judged).

Threads: BLAS/OpenMP and torch run with 1 thread (the environment variables are overwritten,
not defaulted, so both sides always get the same count). --threads N also repeats the whole
measurement with N threads on both sides, in a child process (BLAS fixes its thread count
when numpy is imported).

Usage::

    python bench/bench_train.py            # full set
    python bench/bench_train.py --quick    # fewer repeats, for smoke testing
    python bench/bench_train.py --threads 2 --json out.json
    python bench/bench_train.py --quick --dtypes float64   # only float64 (e.g. an older tree)

The exit code is 0 whether or not the targets are met; the last line says which.
"""
import os
import sys

import _timing


def _worker_threads(argv):
    """The thread count of this process: --worker-threads N (set by the parent), else 1."""
    if "--worker-threads" in argv:
        return int(argv[argv.index("--worker-threads") + 1])
    return 1


# Same thread count for numpy's BLAS and torch: must be set before numpy (or torch) is imported.
THREADS = _worker_threads(sys.argv)
_timing.preamble(THREADS)

import argparse  # noqa: E402
import cProfile  # noqa: E402
import gc  # noqa: E402
import pstats  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from taco_ref import align, data, nn, objectives, optim, policy, train  # noqa: E402
from _timing import (GEMM_N, cpu_model, gemm_limit, gemm_probe, import_torch,  # noqa: E402
                     interleaved_medians, interleaved_times, numpy_blas_parts)

torch, TORCH_SKIP_REASON = import_torch(THREADS)
F = torch.nn.functional if torch is not None else None

B, T, L, K, D, A = 32, 200, 4, 10, 39, 9
HIDDEN = [300, 200, 100]  # action and STOP nets alike
SIGMA = 1.0
LR = 1e-3
TRAJ_LEN_RANGE = (150, 200)  # inclusive, for the "random T_b" batch
CASES = ("random T_b", "full T_b")
SEED = 0
RATIO_TARGETS = {"float32": 0.8, "float64": 0.6}  # taco_ref (JUDGED_DTYPE) / torch <= this
GEMM_TARGET = 0.5  # the judged dtype's useful GFLOP/s / its GEMM limit >= this
DEFAULT_DTYPE = getattr(train.TrainConfig(), "dtype", "float64")
JUDGED_DTYPE = "float32"  # the taco_ref precision the ratio targets judge, when timed
NAV = dict(B=10, T=77, L=3, K=4, D=8, A=2, hidden=[100], sigma=0.5, dropout=0.3)
"""A Nav-World minibatch (sim/taco_sim/configs/navworld.yaml, 400 demonstrations: padded T 77)."""
NEG = -1e30  # finite log 0 in the torch recursion: logaddexp's backward is NaN at -inf, -inf


# ---------------------------------------------------------------------------------------------
# setup report

def blas_summary():
    """One line on numpy's BLAS, torch's BLAS and the thread settings."""
    parts = numpy_blas_parts()
    if torch is not None:
        blas = "MKL" if torch.backends.mkl.is_available() else "non-MKL"
        parts.append(f"torch BLAS {blas}, threads {torch.get_num_threads()}/"
                     f"{torch.get_num_interop_threads()} (intra/inter-op)")
    return " | ".join(parts)


# ---------------------------------------------------------------------------------------------
# inputs

def make_batch(case, rng):
    """A validated taco_ref Demos batch: random states and actions, zero beyond traj_len;
    sketches of L distinct sub-tasks out of K; labels an even split (unused by TACO)."""
    if case == "random T_b":
        traj_len = rng.integers(TRAJ_LEN_RANGE[0], TRAJ_LEN_RANGE[1] + 1, size=B)  # (B,)
    else:
        traj_len = np.full(B, T)                                                 # (B,)
    pad = np.arange(T)[None, :] >= traj_len[:, None]                             # (B, T)
    states = rng.standard_normal((B, T, D))                                      # (B, T, D)
    actions = rng.standard_normal((B, T, A))                                     # (B, T, A)
    states[pad] = 0.0
    actions[pad] = 0.0
    sketch = np.stack([rng.choice(K, size=L, replace=False) for _ in range(B)])  # (B, L)
    labels = np.minimum(np.arange(T)[None, :] * L // traj_len[:, None], L - 1)   # (B, T)
    labels[pad] = -1
    return data.Demos(states=states, actions=actions, traj_len=traj_len, sketch=sketch,
                      sketch_len=np.full(B, L), labels=labels,
                      final_state=rng.standard_normal((B, D)),
                      vocab=tuple(f"subtask{k}" for k in range(K))).validate()


def policy_config():
    return policy.PolicyConfig(state_dim=D, n_subtasks=K, action_dim=A, discrete=False,
                               act_hidden=list(HIDDEN), stop_hidden=list(HIDDEN), sigma=SIGMA,
                               activation="relu")


def net_gflop(batch):
    """Useful floating-point work of the nets in one step (GFLOP): 2 n in out per layer forward,
    the same for dW and for dx (but no dx into the states) backward; n = scored (b, t, l)."""
    n = int((batch.traj_len * batch.sketch_len).sum())
    sizes = [D] + HIDDEN
    flops = 0
    for out in (A, 1):  # action head, STOP head
        layers = list(zip(sizes, sizes[1:] + [out]))
        fwd = sum(2 * n * i * o for i, o in layers)
        flops += fwd + fwd + sum(2 * n * i * o for i, o in layers[1:])
    return flops / 1e9


# ---------------------------------------------------------------------------------------------
# taco_ref

def as_dtype(params, dtype):
    """A copy of params with the trainable arrays in dtype, as train._Job makes them."""
    return {n: v.astype(dtype) if n in policy.trainable(params) else v.copy()
            for n, v in params.items()}


def make_taco_ref_step(params, cfg, batch, stop_dropout=None):
    """One training step as taco_ref/train.py takes it; returns (run, adam). run() -> loss/steps."""
    names = policy.trainable(params)
    adam = optim.adam_for(params, names, LR)

    def run():
        steps = int(batch.traj_len.sum())
        loss, grads = objectives.taco(params, cfg, batch, stop_dropout=stop_dropout)
        for g in grads.values():
            g /= steps
        adam.step(params, grads)
        return loss / steps

    return run, adam


def taco_ref_phased_step(params, cfg, batch, adam):
    """The body of objectives.taco (terminal_stop off, as in the trainer's default) and the Adam
    step, with a process CPU-time stamp between phases (steadier than wall time on a shared
    machine). Returns (loss / steps, {phase: CPU seconds})."""
    t0 = time.process_time()
    steps = int(batch.traj_len.sum())
    scores, cache = policy.evaluate(params, cfg, batch, objectives.valid_mask(batch))
    t1 = time.process_time()
    res = align.taco_forward_backward(scores["log_act"], scores["log_stop"], scores["log_go"],
                                      batch.traj_len, batch.sketch_len)
    d = {"log_act": -res.d_act, "log_stop": -res.d_stop, "log_go": -res.d_go}
    t2 = time.process_time()
    grads = policy.backward(d, cache)
    t3 = time.process_time()
    for g in grads.values():
        g /= steps
    adam.step(params, grads)
    t4 = time.process_time()
    phases = {"policy forward": t1 - t0, "align fwd-bwd": t2 - t1, "policy backward": t3 - t2,
              "Adam (incl. g / steps)": t4 - t3}
    return -res.loglik.sum() / steps, phases


def subnormal_line(params, cfg, batch, dtype):
    """What one training step (spec/training.md eq. (12)) sends into float32's subnormal range:
    the float64 gradients w.r.t. the scores that round to a float32 subnormal (where the nets
    would first see them without the flush), and the subnormal operand entries of every matrix
    product of the nets (nn.subnormal_census; "n/a" in a tree without it)."""
    p = as_dtype(params, dtype)
    scores, cache = policy.evaluate(p, cfg, batch, objectives.valid_mask(batch))
    res = align.taco_forward_backward(scores["log_act"], scores["log_stop"], scores["log_go"],
                                      batch.traj_len, batch.sketch_len)
    d = np.concatenate([res.d_act.ravel(), res.d_stop.ravel(), res.d_go.ravel()])
    rounded = np.abs(d.astype(np.float32))
    source = int(np.count_nonzero((rounded > 0) & (rounded < np.finfo(np.float32).tiny)))
    line = f"score gradients in float32's subnormal range {source} of {d.size} per step"
    if not hasattr(nn, "subnormal_census"):
        return line + "; GEMM operand census n/a (no nn.subnormal_census in this tree)"
    run, _ = make_taco_ref_step(p, cfg, batch)
    with nn.subnormal_census() as census:
        run()
    return (line + f"; subnormal GEMM operand entries {census.subnormal} of {census.entries} "
            f"in {census.products} products per step")


def net_gemms(cfg, batch, dtype, rng):
    """The matrix products of one policy forward + backward on batch (no repeated sub-tasks, no
    terminal STOP: the bench's batches), as zero-argument callables on arrays of their shapes."""
    valid = objectives.valid_mask(batch)
    calls = []

    def mm(m, k, n, transposed=False):
        x = rng.standard_normal((k, m) if transposed else (m, k)).astype(dtype)
        w = rng.standard_normal((k, n)).astype(dtype)
        calls.append((lambda x=x, w=w: x.T @ w) if transposed else (lambda x=x, w=w: x @ w))

    D_in = cfg.state_dim
    sizes = {"act": [D_in] + cfg.act_hidden + [cfg.action_dim], "stop": [D_in] + cfg.stop_hidden + [1]}
    for k in range(cfg.n_subtasks):
        n = int((valid & (batch.sketch == k)[:, None, :]).sum())
        if not n:
            continue
        H0 = sizes["act"][1] + sizes["stop"][1]
        mm(n, D_in, H0)                                # fused first layers, forward
        mm(D_in, n, H0, transposed=True)               # fused first layers, dW = x^T dz
        for widths in sizes.values():
            for i, o in zip(widths[1:-1], widths[2:]):
                mm(n, i, o)                            # forward
                mm(i, n, o, transposed=True)           # dW = h^T d
                mm(n, o, i)                            # dx = d W^T
    return calls


def gemm_only_ms(calls, repeats):
    """Median ms of running every call once (the nets' GEMMs alone)."""
    for c in calls:
        c()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for c in calls:
            c()
        times.append(time.process_time() - start)
    return 1e3 * float(np.median(times))


def cprofile_top(run, steps=2, top=12):
    """[(function, calls per step, self CPU ms per step, cumulative CPU ms per step)] of run(),
    the `top` functions by self time; matrix products count in the function that calls them."""
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    for _ in range(steps):
        run()
    prof.disable()
    stats = pstats.Stats(prof).stats
    rows = []
    for (filename, line, name), (_, calls, self_t, cum_t, _) in stats.items():
        where = (f"{Path(filename).parent.name}/{Path(filename).name}:{name}"
                 if filename != "~" else name)
        rows.append((where, calls / steps, 1e3 * self_t / steps, 1e3 * cum_t / steps))
    return sorted(rows, key=lambda r: -r[2])[:top]


def nav_problem(B_nav, rng):
    """(params float64, PolicyConfig, batch) of a Nav-World-sized TACO step with B_nav rows."""
    n = NAV
    cfg = policy.PolicyConfig(state_dim=n["D"], n_subtasks=n["K"], action_dim=n["A"],
                              act_hidden=list(n["hidden"]), stop_hidden=list(n["hidden"]),
                              sigma=n["sigma"])
    traj_len = rng.integers(n["T"] // 2, n["T"] + 1, size=B_nav)
    traj_len[0] = n["T"]
    pad = np.arange(n["T"])[None, :] >= traj_len[:, None]
    states = rng.standard_normal((B_nav, n["T"], n["D"]))
    actions = rng.standard_normal((B_nav, n["T"], n["A"]))
    states[pad] = actions[pad] = 0.0
    sketch = np.stack([rng.choice(n["K"], size=n["L"], replace=False) for _ in range(B_nav)])
    labels = np.minimum(np.arange(n["T"])[None, :] * n["L"] // traj_len[:, None], n["L"] - 1)
    labels[pad] = -1
    batch = data.Demos(states=states, actions=actions, traj_len=traj_len, sketch=sketch,
                       sketch_len=np.full(B_nav, n["L"]), labels=labels,
                       final_state=rng.standard_normal((B_nav, n["D"])),
                       vocab=tuple(f"subtask{k}" for k in range(n["K"]))).validate()
    return policy.init_params(cfg, rng), cfg, batch


def bench_navworld(dtypes, repeats):
    """ms/step of a Nav-World-sized step (with STOP dropout) at B = 10 and B = 1 per dtype; the
    fixed per-step cost c solves t(B) = c + B w from the two, and its share is c / t(10)."""
    fns, labels = [], []
    for dtype in dtypes:
        for B_nav in (NAV["B"], 1):
            rng = np.random.default_rng(SEED)
            params, cfg, batch = nav_problem(B_nav, rng)
            dropout = nn.Dropout(NAV["dropout"], np.random.default_rng(SEED))
            run, _ = make_taco_ref_step(as_dtype(params, dtype), cfg, batch, dropout)
            fns.append(run)
            labels.append((dtype, B_nav))
    times, cpu = interleaved_medians(fns, repeats)
    out = {}
    for dtype in dtypes:
        t = {b: (times[labels.index((dtype, b))], cpu[labels.index((dtype, b))]) for b in (NAV["B"], 1)}
        fixed = [(NAV["B"] * t[1][i] - t[NAV["B"]][i]) / (NAV["B"] - 1) for i in (0, 1)]
        out[dtype] = dict(ms=1e3 * t[NAV["B"]][0], cpu_ms=1e3 * t[NAV["B"]][1],
                          ms_b1=1e3 * t[1][0], fixed_ms=1e3 * fixed[0],
                          fixed_share=fixed[0] / t[NAV["B"]][0],
                          fixed_share_cpu=fixed[1] / t[NAV["B"]][1])
    return out


# ---------------------------------------------------------------------------------------------
# torch: the same model, two implementations of the sub-policies

def torch_batch(batch, dtype):
    return dict(states=torch.tensor(batch.states, dtype=dtype),              # (B, T, D)
                actions=torch.tensor(batch.actions, dtype=dtype),            # (B, T, A)
                traj_len=torch.tensor(batch.traj_len),                       # (B,)
                sketch=torch.tensor(batch.sketch),                           # (B, L)
                sketch_len=torch.tensor(batch.sketch_len))                   # (B,)


def torch_taco_loglik(log_act, log_stop, log_go, traj_len, sketch_len):
    """log p(tau, a | s) per row (B,): spec/align.md eq. (3)-(5) in log space, autograd-able.

    alpha_t(l) = act[t,l] + logaddexp(alpha_{t-1}(l-1) + stop[t,l-1], alpha_{t-1}(l) + go[t,l]);
    for t >= T_b the row keeps alpha (padding is transparent), and the result is alpha(L_b - 1).
    """
    Bn, Tn, _ = log_act.shape
    act, stop, go = log_act.unbind(1), log_stop[:, :, :-1].unbind(1), log_go.unbind(1)  # (B, L)
    live = (torch.arange(Tn)[None, :] < traj_len[:, None]).unbind(1)                     # (B,)
    alpha = F.pad(act[0][:, :1], (0, L - 1), value=NEG)                                  # (B, L)
    for t in range(1, Tn):
        moved = F.pad(alpha[:, :-1] + stop[t], (1, 0), value=NEG)    # from (t-1, l-1): STOP
        stayed = alpha + go[t]                                       # from (t-1, l): GO
        new = torch.logaddexp(moved, stayed) + act[t]                # (B, L)
        alpha = torch.where(live[t][:, None], new, alpha)            # (B, L)
    return alpha.gather(1, (sketch_len - 1)[:, None])[:, 0]          # (B,)


def gaussian_logpdf(mu, a):
    """log N(a; mu, sigma^2 I) over the last axis."""
    return (-0.5 * ((a - mu) ** 2).sum(-1) / SIGMA ** 2
            - A * np.log(SIGMA) - 0.5 * A * np.log(2.0 * np.pi))


def _normalise(params_np, states):
    mean = torch.tensor(params_np["norm.mean"], dtype=states.dtype)
    std = torch.tensor(params_np["norm.std"], dtype=states.dtype)
    return lambda: (states - mean) / std                                 # (B, T, D)


def _mlp(layers_np, dtype):
    """nn.Sequential of Linear/ReLU with the weights of taco_ref's [(W (in, out), b), ...]."""
    mods = []
    for i, (W, b) in enumerate(layers_np):
        lin = torch.nn.Linear(W.shape[0], W.shape[1], dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(torch.tensor(W.T))
            lin.bias.copy_(torch.tensor(b))
        mods += [lin] if i == len(layers_np) - 1 else [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


class TorchGrouped:
    """K separate sub-policies (nn.ModuleList); each runs once on its sub-task's scored entries
    gathered across the batch, as taco_ref.policy.evaluate does."""

    name = "grouped"

    def __init__(self, params_np, batch, dtype):
        def layers(head, k):
            return [(params_np[f"{head}.W{i}"][k], params_np[f"{head}.b{i}"][k])
                    for i in range(len(HIDDEN) + 1)]

        self.act = torch.nn.ModuleList([_mlp(layers("act", k), dtype) for k in range(K)])
        self.stop = torch.nn.ModuleList([_mlp(layers("stop", k), dtype) for k in range(K)])
        self.x = torch_batch(batch, dtype)
        self.normalised = _normalise(params_np, self.x["states"])
        self.opt = torch.optim.Adam(list(self.act.parameters()) + list(self.stop.parameters()),
                                    lr=LR, fused=True)

    def loss(self):
        x = self.x
        s = self.normalised()                                                # (B, T, D)
        valid = ((torch.arange(T)[None, :, None] < x["traj_len"][:, None, None])
                 & (torch.arange(L)[None, None, :] < x["sketch_len"][:, None, None]))  # (B, T, L)
        idx, vals_act, vals_stop, vals_go = [], [], [], []
        for k in torch.unique(x["sketch"][valid.any(dim=1)]).tolist():
            b, t, l = torch.nonzero(valid & (x["sketch"] == k)[:, None, :], as_tuple=True)  # (n,)
            xs = s[b, t]                                                     # (n, D)
            vals_act.append(gaussian_logpdf(self.act[k](xs), x["actions"][b, t]))  # (n,)
            g = self.stop[k](xs)[:, 0]                                       # (n,)
            vals_stop.append(F.logsigmoid(g))
            vals_go.append(F.logsigmoid(-g))
            idx.append((b * T + t) * L + l)
        idx = (torch.cat(idx),)
        zeros = torch.zeros(B * T * L, dtype=s.dtype)
        log_act, log_stop, log_go = (zeros.index_put(idx, torch.cat(v)).view(B, T, L)
                                     for v in (vals_act, vals_stop, vals_go))  # (B, T, L)
        loglik = torch_taco_loglik(log_act, log_stop, log_go, x["traj_len"], x["sketch_len"])
        return -loglik.sum() / x["traj_len"].sum()

    def _stacked(self, read):
        """{"act.W0": (K, in, out), "act.b0": (K, out), ...} of read(tensor) (taco_ref's layout)."""
        out = {}
        for head, nets in (("act", self.act), ("stop", self.stop)):
            lins = [[m for m in net if isinstance(m, torch.nn.Linear)] for net in nets]
            for i in range(len(lins[0])):
                out[f"{head}.W{i}"] = np.stack([read(ls[i].weight).T for ls in lins])
                out[f"{head}.b{i}"] = np.stack([read(ls[i].bias) for ls in lins])
        return out

    def stacked_grads(self):
        return self._stacked(_grad)

    def stacked_params(self):
        return self._stacked(_value)


def _grad(p):
    """p.grad as float64 numpy; zeros for a sub-task absent from the batch (grad None)."""
    return np.zeros(tuple(p.shape)) if p.grad is None else p.grad.numpy().astype(np.float64)


def _value(p):
    return p.detach().numpy().astype(np.float64)


class TorchBmm:
    """Stacked (K, in, out) weights gathered per (b, l) sketch step, applied with baddbmm to all
    T steps of each trajectory; the recursion masks the padded steps out."""

    name = "bmm"

    def __init__(self, params_np, batch, dtype):
        self.params = {n: torch.tensor(params_np[n], dtype=dtype, requires_grad=True)
                       for n in policy.trainable(params_np)}
        self.x = torch_batch(batch, dtype)
        self.normalised = _normalise(params_np, self.x["states"])
        self.opt = torch.optim.Adam(list(self.params.values()), lr=LR, fused=True)

    def _net(self, head, h):
        """h (B*L, T, in) -> (B*L, T, out) through the gathered nets of head."""
        n_layers = len(HIDDEN) + 1
        sk = self.x["sketch"].clamp(min=0).reshape(-1)                      # (B*L,) padding -> 0
        for i in range(n_layers):
            W = self.params[f"{head}.W{i}"][sk]                              # (B*L, in, out)
            b = self.params[f"{head}.b{i}"][sk][:, None, :]                  # (B*L, 1, out)
            h = torch.baddbmm(b, h, W)                                       # (B*L, T, out)
            if i < n_layers - 1:
                h = torch.relu(h)
        return h

    def loss(self):
        x = self.x
        s = self.normalised()                                                # (B, T, D)
        h0 = s[:, None].expand(B, L, T, D).reshape(B * L, T, D)              # (B*L, T, D)
        mu = self._net("act", h0).view(B, L, T, A)                           # (B, L, T, A)
        log_act = gaussian_logpdf(mu, x["actions"][:, None]).transpose(1, 2)  # (B, T, L)
        g = self._net("stop", h0).view(B, L, T).transpose(1, 2)              # (B, T, L)
        loglik = torch_taco_loglik(log_act, F.logsigmoid(g), F.logsigmoid(-g), x["traj_len"],
                                   x["sketch_len"])
        return -loglik.sum() / x["traj_len"].sum()

    def stacked_grads(self):
        return {n: _grad(p) for n, p in self.params.items()}

    def stacked_params(self):
        return {n: _value(p) for n, p in self.params.items()}


def make_torch_step(model):
    def run():
        loss = model.loss()
        loss.backward()
        model.opt.step()
        model.opt.zero_grad(set_to_none=True)
        return loss

    return run


def taco_ref_reference(params, cfg, batch):
    """taco_ref's loss / steps, grads / steps and parameters after one Adam step, from params
    (left untouched): what every torch model is checked against."""
    after = {n: v.copy() for n, v in params.items()}
    steps = int(batch.traj_len.sum())
    loss, grads = objectives.taco(after, cfg, batch)
    grads = {n: g / steps for n, g in grads.items()}
    names = policy.trainable(after)
    optim.adam_for(after, names, LR).step(after, grads)
    return dict(loss=loss / steps, grads=grads, after=after)


def check_torch_agrees(model, ref, dtype):
    """The torch model computes what taco_ref computes, at taco_ref's weights: loss, gradients,
    and (float64) the parameters after one Adam step. Leaves the model one step further."""
    loss = model.loss()
    loss.backward()
    got = model.stacked_grads()
    if dtype == torch.float64:
        np.testing.assert_allclose(loss.item(), ref["loss"], rtol=1e-10,
                                   err_msg=f"torch {model.name} float64 loss vs taco_ref")
        for n, g in ref["grads"].items():
            np.testing.assert_allclose(got[n], g, rtol=1e-7, atol=1e-12,
                                       err_msg=f"torch {model.name} float64 d {n} vs taco_ref")
    else:
        np.testing.assert_allclose(loss.item(), ref["loss"], rtol=1e-4,
                                   err_msg=f"torch {model.name} float32 loss vs taco_ref")
    grad_err = max(float(np.abs(got[n] - g).max() / np.abs(g).max())
                   for n, g in ref["grads"].items())
    model.opt.step()
    model.opt.zero_grad(set_to_none=True)
    if dtype == torch.float64:
        after = model.stacked_params()
        for n in ref["grads"]:
            np.testing.assert_allclose(after[n], ref["after"][n], rtol=1e-9, atol=1e-9 * LR,
                                       err_msg=f"torch {model.name} params after Adam")
    return dict(loss_rel_err=abs(loss.item() - ref["loss"]) / abs(ref["loss"]),
                grad_rel_err=grad_err)


# ---------------------------------------------------------------------------------------------
# timing

def phase_medians(params, cfg, batch, adam, repeats):
    """Median seconds of each taco_ref phase over `repeats` phased steps (after one warm-up)."""
    taco_ref_phased_step(params, cfg, batch, adam)
    gc.collect()
    gc.disable()
    try:
        runs = [taco_ref_phased_step(params, cfg, batch, adam)[1] for _ in range(repeats)]
    finally:
        gc.enable()
    return {k: float(np.median([r[k] for r in runs])) for k in runs[0]}


def bench_case(case, cfg_run, rng, dtypes, limits):
    """Rows for one batch: taco_ref per dtype, then every torch variant and dtype; and the
    profile of each taco_ref dtype (phases, GEMMs alone, top functions)."""
    cfg = policy_config()
    batch = make_batch(case, rng)
    params = policy.init_params(cfg, rng)
    gflop = net_gflop(batch)
    ref = taco_ref_reference(params, cfg, batch)
    names = policy.trainable(params)
    checks, fns, labels, steps = [], [], [], {}
    for dtype in dtypes:
        p = as_dtype(params, dtype)
        phased_loss, _ = taco_ref_phased_step(p, cfg, batch, optim.adam_for(p, names, LR))
        np.testing.assert_allclose(phased_loss, ref["loss"], rtol=1e-12 if dtype == "float64" else 1e-4,
                                   err_msg=f"phased taco_ref {dtype} step vs objectives.taco float64")
        if dtype != "float64":
            got = taco_ref_reference(as_dtype(params, dtype), cfg, batch)
            grad_err = max(float(np.abs(got["grads"][n] - g).max() / np.abs(g).max())
                           for n, g in ref["grads"].items())
            checks.append(f"{case}: taco_ref {dtype}: loss rel err "
                          f"{abs(got['loss'] - ref['loss']) / abs(ref['loss']):.1e}, max grad err "
                          f"/ max |grad| {grad_err:.1e} (against taco_ref float64)")
        run, adam = make_taco_ref_step(as_dtype(params, dtype), cfg, batch)
        checks.append(f"{case}: taco_ref {dtype}: {subnormal_line(params, cfg, batch, dtype)}")
        steps[dtype] = (run, adam)
        fns.append(run)
        labels.append(("taco_ref", dtype))
    if torch is not None:
        for tdtype in (torch.float64, torch.float32):
            for variant in (TorchGrouped, TorchBmm):
                model = variant(params, batch, tdtype)
                err = check_torch_agrees(model, ref, tdtype)
                dname = str(tdtype).replace("torch.", "")
                checks.append(f"{case}: torch {model.name} {dname}: loss rel err "
                              f"{err['loss_rel_err']:.1e}, max grad err / max |grad| "
                              f"{err['grad_rel_err']:.1e}")
                fns.append(make_torch_step(model))
                labels.append((f"torch {model.name}", dname))
    # the GEMM-limit probes run in the same rounds as the steps, so that the limit and the step
    # are measured in the same spell of the machine (a VM's clock moves by 10 % between minutes);
    # the case's limit is the best of its probes and of the probes taken at the start
    probes = [gemm_probe(d) for d in ("float32", "float64")]
    wall, cpu_all = interleaved_times(fns + [probe for probe, _ in probes], cfg_run["repeats"])
    times = [float(np.median(t)) for t in wall[:len(fns)]]
    cpu = [float(np.median(t)) for t in cpu_all[:len(fns)]]
    limits = {d: (max(limits[d][0], flop / min(w) / 1e9), max(limits[d][1], flop / min(c) / 1e9))
              for d, (_, flop), w, c in zip(("float32", "float64"), probes, wall[len(fns):],
                                             cpu_all[len(fns):])}
    ref_dtype = JUDGED_DTYPE if JUDGED_DTYPE in dtypes else dtypes[0]
    i_ref = labels.index(("taco_ref", ref_dtype))
    t_ref, c_ref = times[i_ref], cpu[i_ref]
    base = dict(threads=THREADS, case=case, steps=int(batch.traj_len.sum()), gflop=gflop,
                repeats=cfg_run["repeats"], limits={d: v[0] for d, v in limits.items()})
    rows = []
    for (side, dname), t, c in zip(labels, times, cpu):
        own = side == "taco_ref"
        rows.append(dict(base, side=side, dtype=dname, ms=1e3 * t, cpu_ms=1e3 * c,
                         ratio=None if own else t_ref / t, cpu_ratio=None if own else c_ref / c,
                         gflops=gflop / t, gemm_share=gflop / t / limits[dname][0],
                         cpu_gemm_share=gflop / c / limits[dname][1], ref_dtype=ref_dtype))
    profiles = []
    for dtype in dtypes:
        p = as_dtype(params, dtype)
        adam = optim.adam_for(p, names, LR)
        phases = phase_medians(p, cfg, batch, adam, cfg_run["phase_repeats"])
        gemm_ms = gemm_only_ms(net_gemms(cfg, batch, dtype, np.random.default_rng(SEED)),
                               cfg_run["phase_repeats"])
        top = cprofile_top(lambda: taco_ref_phased_step(p, cfg, batch, adam))
        t_dtype = times[labels.index(("taco_ref", dtype))]
        profiles.append(dict(base, dtype=dtype, total_ms=1e3 * t_dtype,
                             phases_ms={k: 1e3 * v for k, v in phases.items()},
                             gemm_ms=gemm_ms, top=top))
    return rows, checks, profiles


def verdicts(rows):
    """Per (threads, case, taco_ref dtype, torch dtype): taco_ref / the faster torch variant.

    Only the 1-thread ratios of taco_ref in JUDGED_DTYPE are judged (met True/False);
    the rest is information (met None): on a shared machine, oversubscribed BLAS/OpenMP threads
    wait on each other, and which side suffers more says little about either implementation.
    """
    out = []
    own = [r for r in rows if r["side"] == "taco_ref"]
    for r in own:
        for tdtype in ("float32", "float64"):
            peers = [p for p in rows if (p["threads"], p["case"], p["dtype"]) ==
                     (r["threads"], r["case"], tdtype) and p["side"] != "taco_ref"]
            if not peers:
                continue
            best = min(peers, key=lambda p: p["ms"])
            ratio = r["ms"] / best["ms"]
            judged = r["threads"] == 1 and r["dtype"] == r["ref_dtype"]
            out.append(dict(threads=r["threads"], case=r["case"], dtype=r["dtype"], peer_dtype=tdtype,
                            peer=best["side"], ratio=ratio, cpu_ratio=r["cpu_ms"] / best["cpu_ms"],
                            target=RATIO_TARGETS[tdtype],
                            met=ratio <= RATIO_TARGETS[tdtype] if judged else None))
    return out


def gemm_verdicts(rows):
    """The nets' useful GFLOP/s of each taco_ref dtype against GEMM_TARGET x the GEMM limit of
    its dtype; judged (met True/False) at 1 thread for JUDGED_DTYPE, information otherwise."""
    return [dict(threads=r["threads"], case=r["case"], dtype=r["dtype"], share=r["gemm_share"],
                 cpu_share=r["cpu_gemm_share"],
                 met=(r["gemm_share"] >= GEMM_TARGET
                      if r["threads"] == 1 and r["dtype"] == r["ref_dtype"] else None))
            for r in rows if r["side"] == "taco_ref"]


# ---------------------------------------------------------------------------------------------
# report

def print_table(rows):
    header = (f"{'thr':>3}  {'batch':<11} {'steps':>5}  {'side':<14} {'dtype':<8} "
              f"{'ms/step':>8} {'reps':>4}  {'GFLOP/s':>7} {'% GEMM':>6}  {'taco_ref / side':>15}  "
              f"{'CPU ms':>7} {'CPU ratio':>9} {'CPU % GEMM':>10}")
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        cpu_ratio = "" if r["cpu_ratio"] is None else f"{r['cpu_ratio']:.2f}"
        print(f"{r['threads']:>3}  {r['case']:<11} {r['steps']:>5}  {r['side']:<14} "
              f"{r['dtype']:<8} {r['ms']:8.1f} {r['repeats']:>4}  {r['gflops']:7.1f} "
              f"{100 * r['gemm_share']:5.0f}%  {ratio:>15}  {r['cpu_ms']:7.1f} {cpu_ratio:>9} "
              f"{100 * r['cpu_gemm_share']:9.0f}%")
    seen = {}
    for r in rows:
        seen.setdefault((r["threads"], r["case"]), r.get("limits"))
    print("GEMM limit of each batch's rows (best probe call, at the start or in its rounds): "
          + "; ".join(f"{t} thr {c}: float32 {lim['float32']:.1f}, float64 {lim['float64']:.1f} GFLOP/s"
                      for (t, c), lim in seen.items() if lim))
    print("ms/step: median wall time (the targets use it); GFLOP/s: the nets' useful work "
          "(net_gflop) / ms/step, one numerator for all sides; % GEMM: GFLOP/s / the GEMM limit "
          "of the row's dtype; taco_ref / side: taco_ref with its nets in "
          f"{rows[0]['ref_dtype']}; CPU ms: median process CPU time of the same calls, "
          "CPU ratio = taco_ref / side on it, CPU % GEMM = the same share on CPU times")


def print_profiles(profiles, phase_repeats):
    print(f"taco_ref profile: median CPU ms of each phase over {phase_repeats} phased steps (% of "
          "their sum); GEMMs alone = the nets' matrix products (same shapes and dtype) replayed "
          "without anything else; non-GEMM = policy forward + backward - GEMMs alone")
    names = list(profiles[0]["phases_ms"])
    header = (f"{'thr':>3}  {'batch':<11} {'dtype':<8} " + " ".join(f"{n:>24}" for n in names)
              + f" {'sum':>7} {'GEMMs alone':>11} {'non-GEMM':>15}")
    print(header)
    print("-" * len(header))
    for pr in profiles:
        total = sum(pr["phases_ms"].values())
        cells = " ".join(f"{f'{v:.1f} ({100 * v / total:.1f}%)':>24}"
                         for v in pr["phases_ms"].values())
        nets = pr["phases_ms"]["policy forward"] + pr["phases_ms"]["policy backward"]
        rest = nets - pr["gemm_ms"]
        print(f"{pr['threads']:>3}  {pr['case']:<11} {pr['dtype']:<8} {cells} {total:7.1f} "
              f"{pr['gemm_ms']:11.1f} {f'{rest:.1f} ({100 * rest / total:.0f}%)':>15}")
    for pr in profiles:
        print(f"top functions by self CPU time, {pr['threads']} thr, {pr['case']}, {pr['dtype']} "
              "(ms per step; matrix products count in their caller):")
        for where, calls, self_ms, cum_ms in pr["top"]:
            print(f"    {self_ms:8.1f} self {cum_ms:8.1f} cum {calls:7.0f} calls  {where}")


def print_navworld(nav):
    n = NAV
    print(f"Nav-World-sized step (B={n['B']} T={n['T']} L={n['L']} K={n['K']} D={n['D']} "
          f"A={n['A']}, nets {n['hidden']}, STOP dropout {n['dropout']}; TACO + Adam): median "
          "ms/step; fixed cost c from t(B) = c + B w at B = 10 and B = 1 (Python and NumPy call "
          "overhead, independent of the data size)")
    for dtype, r in nav.items():
        print(f"  {dtype:<8} {r['ms']:6.2f} ms/step (CPU {r['cpu_ms']:6.2f}), B=1 {r['ms_b1']:6.2f}; "
              f"fixed {r['fixed_ms']:5.2f} ms = {100 * r['fixed_share']:.0f} % of the step "
              f"({100 * r['fixed_share_cpu']:.0f} % on CPU time)")


def run_child(threads, quick, dtypes):
    """The same measurement with `threads` threads on both sides, in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "child.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker-threads", str(threads),
               "--json", str(out), "--dtypes", *dtypes] + (["--quick"] if quick else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"--threads {threads} child failed:\n{proc.stdout}\n{proc.stderr}")
        result = json.loads(out.read_text())
    thread_line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("threads:")), "")
    return result, thread_line


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke test)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="also measure both sides with N threads (in a child process)")
    parser.add_argument("--dtypes", nargs="+", choices=("float64", "float32"),
                        default=["float64", "float32"], help="taco_ref's net precisions to time")
    parser.add_argument("--worker-threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cfg_run = (dict(repeats=3, phase_repeats=2) if args.quick
               else dict(repeats=11, phase_repeats=5))

    machine = dict(processor=cpu_model(), cpu_count=os.cpu_count(),
                   python=platform.python_version(), numpy=np.__version__,
                   torch=torch.__version__ if torch is not None else None,
                   load_avg_start=os.getloadavg()[0])
    print(f"machine: {machine['processor']}, {machine['cpu_count']} CPUs | python "
          f"{machine['python']} | numpy {machine['numpy']} | torch "
          f"{machine['torch'] or 'not available'} | 1-min load average at start "
          f"{machine['load_avg_start']:.2f}")
    print(f"threads: {blas_summary()}")
    print(f"mode: {'quick' if args.quick else 'full'}; seed {SEED}; median wall time of one "
          f"training step; all sides interleaved, reps rounds after one warm-up round")
    print(f"problem: B={B} T={T} L={L} K={K} D={D} A={A}; action and STOP nets {HIDDEN} relu, "
          f"Gaussian sigma {SIGMA:g}; Adam lr {LR:g}; batches: random T_b in "
          f"[{TRAJ_LEN_RANGE[0]}, {TRAJ_LEN_RANGE[1]}], full T_b = {T}; taco_ref nets in "
          f"{', '.join(args.dtypes)} (training default {DEFAULT_DTYPE}; targets judge "
          f"{JUDGED_DTYPE}), alignment float64")
    if torch is None:
        print(f"torch sides skipped: {TORCH_SKIP_REASON}")
    else:
        print("torch: eager autograd; 'grouped' = K nn.Sequential nets on gathered entries per "
              "sub-task, 'bmm' = stacked weights gathered per (b, l) + baddbmm over all T; "
              "Adam(fused=True)")
    # as the trainer does (nn.workspace.keep_freed_memory; absent in older trees): freed arrays are
    # reused, not zero-filled again; process-wide, so the torch sides get it too
    kept = (getattr(getattr(nn, "workspace", None), "keep_freed_memory", None)
            or getattr(train, "keep_freed_memory", lambda: False))()
    print(f"allocator: freed memory kept for reuse (nn.workspace.keep_freed_memory): {kept}")
    limits = {d: gemm_limit(d, cfg_run["phase_repeats"] + 3) for d in ("float32", "float64")}
    print(f"GEMM limit at the start ({THREADS} thread(s), np.matmul ({GEMM_N}, {GEMM_N}) @ ({GEMM_N}, {GEMM_N}), "
          f"best of {cfg_run['phase_repeats'] + 3}): float32 {limits['float32'][0]:.1f} GFLOP/s, float64 {limits['float64'][0]:.1f} "
          f"GFLOP/s (on CPU time: {limits['float32'][1]:.1f}, {limits['float64'][1]:.1f})")

    rng = np.random.default_rng(SEED)
    rows, checks, profiles = [], [], []
    for case in CASES:
        case_rows, case_checks, case_profiles = bench_case(case, cfg_run, rng, args.dtypes, limits)
        rows += case_rows
        checks += case_checks
        profiles += case_profiles
    nav = bench_navworld(args.dtypes, 5 * cfg_run["repeats"])
    if checks:
        print("checks passed (float64: loss rtol 1e-10, grads allclose rtol 1e-7, params after one "
              "Adam step; float32: loss rtol 1e-4):")
        for line in checks:
            print(f"  {line}")
    if args.threads and args.threads != THREADS:
        child, thread_line = run_child(args.threads, args.quick, args.dtypes)
        print(f"--threads {args.threads}: {thread_line}")
        rows += child["rows"]
        profiles += child["profiles"]
    print()
    print_table(rows)
    print()
    print_profiles(profiles, cfg_run["phase_repeats"])
    print()
    print_navworld(nav)
    machine["load_avg_end"] = os.getloadavg()[0]
    print(f"1-min load average: {machine['load_avg_start']:.2f} at start, "
          f"{machine['load_avg_end']:.2f} at end (this run adds about its thread count)")
    if machine["load_avg_start"] > 0.5:
        print(f"note: other processes were using the CPUs ({machine['load_avg_start']:.2f} on "
              f"{machine['cpu_count']} CPUs before the first step): absolute times are inflated; "
              "interleaving keeps the 1-thread ratios fair, multi-thread figures are unreliable")

    ratios = verdicts(rows)
    shares = gemm_verdicts(rows)
    print()
    for v in ratios:
        verdict = ("info (not judged)" if v["met"] is None
                   else f"target <= {v['target']:g}  {'ok' if v['met'] else 'MISS'}")
        print(f"  {v['threads']} thr, {v['case']:<11} taco_ref {v['dtype']:<7} / torch "
              f"{v['peer_dtype']:<7} (faster variant: {v['peer']:<13}) = {v['ratio']:5.2f} "
              f"(CPU time {v['cpu_ratio']:4.2f})  {verdict}")
    for v in shares:
        verdict = ("info (not judged)" if v["met"] is None
                   else f"target >= {100 * GEMM_TARGET:.0f} %  {'ok' if v['met'] else 'MISS'}")
        print(f"  {v['threads']} thr, {v['case']:<11} taco_ref {v['dtype']:<7} nets at "
              f"{100 * v['share']:3.0f} % of the {v['dtype']} GEMM limit (CPU time "
              f"{100 * v['cpu_share']:3.0f} %)  {verdict}")
    judged = [v for v in ratios + shares if v["met"] is not None]
    missed = [f"{v['threads']} thr {v['case']} taco_ref {v['dtype']} "
              + (f"vs torch {v['peer_dtype']} = {v['ratio']:.2f}" if "ratio" in v
                 else f"GEMM share {100 * v['share']:.0f} %")
              for v in judged if not v["met"]]
    print()
    if missed:
        print(f"FAIL vs targets ({len(judged) - len(missed)}/{len(judged)} met): " + "; ".join(missed))
    else:
        print(f"PASS vs targets ({len(judged)}/{len(judged)} met"
              + (f"; torch not available: {TORCH_SKIP_REASON})" if torch is None else ")"))

    if args.json:
        report = dict(machine=machine, mode="quick" if args.quick else "full", limits=limits,
                      rows=rows, profiles=profiles, navworld=nav, verdicts=ratios,
                      gemm_verdicts=shares, checks=checks)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
