"""Tests for taco_ref/align.py (maths and contract: spec/align.md).

In three layers (an exact reference, properties, smoke and determinism), plus bad input:
(a) exact references written plainly: brute-force path enumeration (spec/vectors/brute_force.py)
    for every T <= 8 and 1 <= L <= T (and some L > T), and a forward recursion differentiated by
    autograd;
(b) hypothesis properties over ragged batches whose padding holds NaN, +-inf and other garbage;
(c) numerics: T = 20000 against a plain log-space recursion, a row where scaled probabilities
    underflow, single-path rows;
(d) bad input raises ValueError naming the argument;
(e) determinism; inputs are never modified.

Symbols: B batch, T time, L sketch length, K classes; T_b, L_b the lengths of row b. 0-based.
"""
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from autograd import grad
from autograd.extend import defvjp, primitive
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from taco_ref import align

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spec" / "vectors"))
import brute_force as bf  # noqa: E402  (spec/vectors is not a package)

NEG_INF = -np.inf
TACO_DECODERS = (align.align_forward_argmax, align.align_posterior_argmax, align.align_viterbi)
CTC_DECODERS = (align.ctc_align_forward_argmax, align.ctc_align_posterior_argmax, align.ctc_align_viterbi)
GRAD_NAMES = ("d_act", "d_stop", "d_go")


# ----------------------------------------------------------------------------------------------
# Plain references, one row at a time (no batch axis, no padding)
# ----------------------------------------------------------------------------------------------

def logsumexp(x, axis):
    """log sum exp over axis, keepdims; an all -inf slice gives -inf."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def np_forward(act, stop, go, combine=np.logaddexp):
    """log alpha_t(l) for one row, (T, L): a per-step loop (spec/align.md forward recursion).

    combine=np.maximum gives the max-product (Viterbi) scores instead of the sums.
    """
    T, L = act.shape
    alpha = np.full((T, L), NEG_INF)                      # (T, L)
    alpha[0, 0] = act[0, 0]
    for t in range(1, T):
        move = np.full(L, NEG_INF)                        # (L,) arrive at l from l - 1
        move[1:] = alpha[t - 1, :-1] + stop[t, :-1]
        stay = alpha[t - 1] + go[t]                       # (L,) stay at l
        alpha[t] = act[t] + combine(move, stay)
    return alpha


def np_backward(act, stop, go):
    """log beta_t(l) for one row, (T, L): log mass of the suffixes t+1..T-1 from (t, l) to (T-1, L-1)."""
    T, L = act.shape
    beta = np.full((T, L), NEG_INF)                       # (T, L)
    beta[T - 1, L - 1] = 0.0
    for t in range(T - 1, 0, -1):
        nxt = act[t] + beta[t]                            # (L,) enter (t, l)
        move = np.full(L, NEG_INF)                        # (L,) from l at t-1 to l + 1 at t
        move[:-1] = stop[t, :-1] + nxt[1:]
        beta[t - 1] = np.logaddexp(go[t] + nxt, move)
    return beta


def np_forward_backward(act, stop, go):
    """loglik, d_act, d_stop, d_go for one row from alpha and beta.

    Node and edge posteriors are normalised per time step (each step holds exactly one position
    and, for t >= 1, exactly one transition); this keeps the rounding of the O(T)-sized log-values
    in alpha + beta - loglik out of them.
    """
    T, L = act.shape
    alpha = np_forward(act, stop, go)
    loglik = alpha[T - 1, L - 1]
    if loglik == NEG_INF:
        return loglik, np.zeros((T, L)), np.zeros((T, L)), np.zeros((T, L))
    beta = np_backward(act, stop, go)
    node = alpha + beta                                   # (T, L) log mass through (t, l)
    d_act = np.exp(node - logsumexp(node, axis=1))
    edge_go = alpha[:-1] + go[1:] + act[1:] + beta[1:]    # (T-1, L) stay at l between t-1 and t
    edge_stop = np.full((T - 1, L), NEG_INF)              # (T-1, L) move l -> l+1 between t-1 and t
    edge_stop[:, :-1] = alpha[:-1, :-1] + stop[1:, :-1] + act[1:, 1:] + beta[1:, 1:]
    norm = np.logaddexp(logsumexp(edge_go, 1), logsumexp(edge_stop, 1))  # (T-1, 1)
    d_go, d_stop = np.zeros((T, L)), np.zeros((T, L))
    d_go[1:] = np.exp(edge_go - norm)
    d_stop[1:] = np.exp(edge_stop - norm)
    return loglik, d_act, d_stop, d_go


@primitive
def logaddexp_ref(a, b):
    return np.logaddexp(a, b)


def _share(x, total):
    """d logaddexp / dx = exp(x - total), with weight 0 for a -inf term (autograd's own rule gives
    0 * nan there when both terms are -inf)."""
    return 0.0 if x == NEG_INF else np.exp(x - total)


defvjp(logaddexp_ref,
       lambda total, a, b: lambda g: g * _share(a, total),
       lambda total, a, b: lambda g: g * _share(b, total))


def ag_taco_loglik(act, stop, go, final_stop=None):
    """The TACO forward recursion for one row, written plainly for autograd (needs L <= T).

    alpha[l] = log alpha_t(l) for the positions l <= t reachable at time t:
    alpha_t(l) = act[t, l] + log(exp(alpha_{t-1}(l) + go[t, l]) + exp(alpha_{t-1}(l-1) + stop[t, l-1])).
    """
    T, L = act.shape
    alpha = [act[0, 0]]                                   # alpha_0: position 0 only
    for t in range(1, T):
        new = []
        for l in range(min(t + 1, L)):
            if l == 0:                                    # can only have stayed at 0
                into = alpha[0] + go[t, 0]
            elif l == len(alpha):                         # l == t: can only have just arrived
                into = alpha[l - 1] + stop[t, l - 1]
            else:
                into = logaddexp_ref(alpha[l] + go[t, l], alpha[l - 1] + stop[t, l - 1])
            new.append(act[t, l] + into)
        alpha = new
    loglik = alpha[L - 1]
    if final_stop is not None:
        loglik = loglik + final_stop[L - 1]
    return loglik


def ag_taco_row(act, stop, go, final_stop=None):
    """(loglik, [d_act, d_stop, d_go, d_final_stop]) for one (T_b, L_b) row via autograd."""
    T, L = act.shape
    args = (act, stop, go) if final_stop is None else (act, stop, go, final_stop)
    zeros = [np.zeros((T, L)), np.zeros((T, L)), np.zeros((T, L)), np.zeros(L)]
    if L > T:
        return NEG_INF, zeros

    def f(p):
        return ag_taco_loglik(*p)

    loglik = float(f(args))
    if loglik == NEG_INF:
        return loglik, zeros
    grads = list(grad(f)(args))
    return loglik, grads + zeros[len(grads):]


def ag_ctc_row(log_p, sketch):
    """(loglik, d_log_p) for one CTC row: TACO with act = log_p[:, sketch] and stop = go = 0."""
    T, L = log_p.shape[0], len(sketch)
    zeros = np.zeros((T, L))

    def f(lp):
        return ag_taco_loglik(lp[:, sketch], zeros, zeros)

    if L > T:
        return NEG_INF, np.zeros_like(log_p)
    loglik = float(f(log_p))
    if loglik == NEG_INF:
        return loglik, np.zeros_like(log_p)
    return loglik, grad(f)(log_p)


def bf_alpha(act, stop, go):
    """alpha_t(l) by enumerating the prefixes that end at (t, l) (brute_force.prefixes)."""
    T, L = act.shape
    alpha = np.full((T, L), NEG_INF)
    for t in range(T):
        for l in range(L):
            scores = [bf.path_logprob(z, act, stop, go) for z in bf.prefixes(t + 1, l)]
            scores = [s for s in scores if s != NEG_INF]
            if scores:
                m = max(scores)
                alpha[t, l] = m + math.log(sum(math.exp(s - m) for s in scores))
    return alpha


def brute_max(act, stop, go):
    """The largest path log-probability, by enumeration (-inf when there is no path)."""
    return max((bf.path_logprob(z, act, stop, go) for z in bf.paths(*act.shape)), default=NEG_INF)


# ----------------------------------------------------------------------------------------------
# Checks shared by the layers
# ----------------------------------------------------------------------------------------------

def valid_mask(traj_len, sketch_len, T, L):
    """(B, T, L) True where t < T_b and l < L_b."""
    t = np.arange(T)[None, :, None]
    l = np.arange(L)[None, None, :]
    return (t < np.asarray(traj_len)[:, None, None]) & (l < np.asarray(sketch_len)[:, None, None])


def assert_zero_outside(x, T_b, L_b, name):
    """x (T, L) or (L,): exactly 0 outside the valid block."""
    pad = np.ones(x.shape, bool)
    pad[(slice(None, T_b), slice(None, L_b))[-x.ndim:]] = False
    assert np.all(x[pad] == 0.0), f"{name} is not exactly 0 in the padding: {x[pad]}"


def assert_loglik_close(got, expected, rtol=1e-12, atol=1e-12):
    if expected == NEG_INF:
        assert got == NEG_INF, f"loglik {got}, expected -inf"
    else:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg="loglik")


def assert_valid_path(z, L_b):
    """z (T_b,): monotone, steps of 0 or 1, from position 0 to position L_b - 1."""
    z = np.asarray(z)
    assert z[0] == 0 and z[-1] == L_b - 1, f"path {z} does not run from 0 to {L_b - 1}"
    assert set(np.diff(z).tolist()) <= {0, 1}, f"path {z} is not monotone with unit steps"


def clear_winners(values, margin=1e-9):
    """(T,) True where the row maximum beats the runner-up by more than margin (no near-tie)."""
    if values.shape[1] == 1:
        return np.ones(values.shape[0], bool)
    top2 = np.sort(values, axis=1)[:, -2:]
    with np.errstate(invalid="ignore"):
        return (top2[:, 1] - top2[:, 0]) > margin         # -inf vs -inf gives nan -> False


def check_row_against_brute_force(res, b, ref, T_b, L_b, final_given):
    """Row b of a TacoResult against brute_force.taco_reference on its valid block; 0 elsewhere."""
    assert_loglik_close(res.loglik[b], ref["loglik"])
    for name in GRAD_NAMES + ("posterior",):
        got = getattr(res, name)[b]
        np.testing.assert_allclose(got[:T_b, :L_b], ref[name], rtol=0, atol=1e-12, err_msg=name)
        assert_zero_outside(got, T_b, L_b, name)
    expected = np.zeros(res.d_final_stop.shape[1])
    if final_given:
        expected[:L_b] = ref["d_final_stop"]
    np.testing.assert_array_equal(res.d_final_stop[b], expected, err_msg="d_final_stop")


def check_decoders_against_brute_force(fwd, post, vit, ref, act, stop, go):
    """(T,) decoder rows against the enumeration; act/stop/go are the valid (T_b, L_b) block.

    Viterbi is compared by the score of the returned path (ties may pick any best path); the
    argmax decoders exactly wherever the brute-force maximum has no near-tie.
    """
    T_b, L_b = act.shape
    for name, dec in (("forward", fwd), ("posterior", post), ("viterbi", vit)):
        assert dec.dtype == np.int64, name
        assert np.all(dec[T_b:] == -1), f"{name} decoder not -1 for t >= T_b: {dec}"
        if ref["loglik"] == NEG_INF:
            assert np.all(dec == -1), f"{name} decoder not -1 on an impossible row: {dec}"
    if ref["loglik"] == NEG_INF:
        return
    assert_valid_path(vit[:T_b], L_b)
    score = bf.path_logprob(tuple(vit[:T_b]), act, stop, go)
    np.testing.assert_allclose(score, ref["viterbi_score"], rtol=1e-12, atol=1e-12, err_msg="viterbi score")
    clear = clear_winners(ref["posterior"])
    assert clear[0], "t = 0 always has a clear winner (position 0)"
    np.testing.assert_array_equal(post[:T_b][clear], ref["posterior_argmax"][clear], err_msg="posterior argmax")
    clear = clear_winners(bf_alpha(act, stop, go))
    assert clear[0]
    np.testing.assert_array_equal(fwd[:T_b][clear], ref["forward_argmax"][clear], err_msg="forward argmax")


def check_decoder_properties(fwd, post, vit, act, stop, go, posterior, possible):
    """Tie-robust decoder properties on (T,) rows; act/stop/go/posterior are the (T_b, L_b) block."""
    T_b, L_b = act.shape
    for name, dec in (("forward", fwd), ("posterior", post), ("viterbi", vit)):
        assert dec.dtype == np.int64, name
        assert np.all(dec[T_b:] == -1), f"{name} decoder not -1 for t >= T_b: {dec}"
        if not possible:
            assert np.all(dec == -1), f"{name} decoder not -1 on an impossible row: {dec}"
        else:
            assert np.all((dec[:T_b] >= 0) & (dec[:T_b] < L_b)), f"{name} decoder out of [0, L_b): {dec}"
    if not possible:
        return
    t = np.arange(T_b)
    assert_valid_path(vit[:T_b], L_b)
    score = bf.path_logprob(tuple(vit[:T_b]), act, stop, go)
    best = brute_max(act, stop, go)
    np.testing.assert_allclose(score, best, rtol=1e-12, atol=1e-9, err_msg="viterbi score vs brute-force max")
    chosen = posterior[t, post[:T_b]]
    assert np.all(chosen >= posterior.max(axis=1) - 1e-12), "posterior argmax does not attain the max"
    alpha = np_forward(act, stop, go)
    top = alpha.max(axis=1)
    chosen = alpha[t, fwd[:T_b]]
    assert np.all(chosen >= top - 1e-12 * (1.0 + np.abs(top))), "forward argmax does not attain max alpha"


def gather(log_p, sketch):
    """(B, T, L) log_act for the TACO form of CTC: log_p[b, t, sketch[b, l]] (padding ids -> 0)."""
    B, T, K = log_p.shape
    safe = np.where((sketch >= 0) & (sketch < K), sketch, 0)            # (B, L)
    index = np.broadcast_to(safe[:, None, :], (B, T, safe.shape[1]))     # (B, T, L)
    return np.take_along_axis(log_p, index, axis=2)


def run_taco(case):
    """TacoResult and the three decoders (B, T) for a case dict."""
    res = align.taco_forward_backward(**case)
    no_final = {k: v for k, v in case.items() if k != "log_final_stop"}
    return res, tuple(dec(**no_final) for dec in TACO_DECODERS)


def run_ctc(case):
    res = align.ctc_forward_backward(**case)
    return res, tuple(dec(**case) for dec in CTC_DECODERS)


# ----------------------------------------------------------------------------------------------
# (a) exact references: brute-force enumeration and autograd
# ----------------------------------------------------------------------------------------------

SMALL = [(T, L) for T in range(1, 9) for L in range(1, T + 1)] + [(1, 2), (2, 3), (3, 5), (4, 6), (6, 8)]


@pytest.mark.parametrize("T, L", SMALL)
def test_taco_matches_brute_force(T, L):
    """Checks spec/align.md eq. (1), (2), (3), (5), (8), (21), (22)."""
    rng = np.random.default_rng([1, T, L])
    act, stop, go = rng.uniform(-4.0, 0.0, size=(3, T, L))   # each (T, L)
    final = rng.uniform(-4.0, 0.0, size=L)                   # (L,)
    for log_final_stop in (None, final):
        ref = bf.taco_reference(act, stop, go, log_final_stop)
        batch_final = None if log_final_stop is None else log_final_stop[None]
        res = align.taco_forward_backward(act[None], stop[None], go[None], log_final_stop=batch_final)
        check_row_against_brute_force(res, 0, ref, T, L, final_given=log_final_stop is not None)
        loglik = align.taco_loglik(act[None], stop[None], go[None], log_final_stop=batch_final)
        assert_loglik_close(loglik[0], ref["loglik"])
    ref = bf.taco_reference(act, stop, go)
    fwd, post, vit = (dec(act[None], stop[None], go[None])[0] for dec in TACO_DECODERS)
    check_decoders_against_brute_force(fwd, post, vit, ref, act, stop, go)


def _neg_inf_cases():
    """Rows with -inf inside the valid region: (name, act, stop, go, final)."""
    rng = np.random.default_rng(5)
    cases = []

    def fresh(T, L):
        return [x.copy() for x in rng.uniform(-4.0, 0.0, size=(3, T, L))] + [rng.uniform(-4.0, 0.0, L)]

    act, stop, go, final = fresh(7, 3)                    # some paths blocked, others survive
    act[2, 0] = go[4, 2] = stop[3, 1] = act[5, 1] = NEG_INF
    cases.append(("holes", act, stop, go, final))
    act, stop, go, final = fresh(4, 2)                    # the start is impossible
    act[0, 0] = NEG_INF
    cases.append(("start_blocked", act, stop, go, final))
    act, stop, go, final = fresh(5, 3)                    # can never leave position 0
    stop[:, 0] = NEG_INF
    cases.append(("cannot_move", act, stop, go, final))
    act, stop, go, final = fresh(6, 3)                    # position 1 can never be active
    act[:, 1] = NEG_INF
    cases.append(("position_blocked", act, stop, go, final))
    act, stop, go, final = fresh(6, 3)                    # only z = (0, 0, 1, 1, 2, 2) survives
    stop[:, 0] = NEG_INF
    stop[:, 1] = NEG_INF
    stop[2, 0] = stop[4, 1] = 0.0
    cases.append(("single_survivor", act, stop, go, final))
    act, stop, go, final = fresh(5, 3)                    # -inf only where no path looks
    stop[0] = go[0] = stop[:, 2] = NEG_INF
    cases.append(("unused_entries", act, stop, go, final))
    act, stop, go, final = fresh(5, 2)                    # possible, but the terminal STOP is impossible
    final[1] = NEG_INF
    cases.append(("final_stop_blocked", act, stop, go, final))
    return cases


NEG_INF_CASES = _neg_inf_cases()


@pytest.mark.parametrize("name, act, stop, go, final", NEG_INF_CASES, ids=[c[0] for c in NEG_INF_CASES])
def test_taco_with_neg_inf_matches_brute_force(name, act, stop, go, final):
    T, L = act.shape
    for log_final_stop in (None, final):
        ref = bf.taco_reference(act, stop, go, log_final_stop)
        res = align.taco_forward_backward(act[None], stop[None], go[None],
                                          log_final_stop=None if log_final_stop is None else final[None])
        check_row_against_brute_force(res, 0, ref, T, L, final_given=log_final_stop is not None)
    ref = bf.taco_reference(act, stop, go)
    fwd, post, vit = (dec(act[None], stop[None], go[None])[0] for dec in TACO_DECODERS)
    check_decoders_against_brute_force(fwd, post, vit, ref, act, stop, go)
    expect_possible = name in ("holes", "single_survivor", "unused_entries", "final_stop_blocked")
    assert (ref["loglik"] > NEG_INF) == expect_possible     # the cases test what their names say


def test_taco_packed_ragged_batch_matches_brute_force():
    """Every SMALL case as one row of a single padded batch (NaN / +inf padding, int32 lengths).
    Checks spec/align.md eq. (10)."""
    B, T, L = len(SMALL), max(t for t, _ in SMALL), max(l for _, l in SMALL)
    rng = np.random.default_rng(2)
    values = np.where(rng.random((3, B, T, L)) < 0.5, np.nan, np.inf)    # (3, B, T, L) garbage
    final = np.full((B, L), np.nan)                                      # (B, L)
    rows = []
    for b, (T_b, L_b) in enumerate(SMALL):
        values[:, b, :T_b, :L_b] = rng.uniform(-4.0, 0.0, size=(3, T_b, L_b))
        final[b, :L_b] = rng.uniform(-4.0, 0.0, size=L_b)
        rows.append((T_b, L_b))
    traj_len = np.array([r[0] for r in rows], dtype=np.int32)
    sketch_len = np.array([r[1] for r in rows], dtype=np.int32)
    res = align.taco_forward_backward(*values, traj_len, sketch_len, log_final_stop=final)
    decs = [dec(*values, traj_len, sketch_len) for dec in TACO_DECODERS]
    for b, (T_b, L_b) in enumerate(rows):
        act, stop, go = (x[b, :T_b, :L_b] for x in values)
        check_row_against_brute_force(res, b, bf.taco_reference(act, stop, go, final[b, :L_b]), T_b, L_b, True)
        check_decoders_against_brute_force(*(d[b] for d in decs), bf.taco_reference(act, stop, go), act, stop, go)


@pytest.mark.parametrize("T, L", SMALL)
def test_ctc_matches_brute_force(T, L):
    """Checks spec/align.md eq. (18), (19)."""
    rng = np.random.default_rng([3, T, L])
    K = 3
    log_p = rng.uniform(-4.0, 0.0, size=(T, K))           # (T, K)
    sketch = rng.integers(0, K, size=L)                    # (L,) repeats allowed
    ref = bf.ctc_reference(log_p, sketch)
    res = align.ctc_forward_backward(log_p[None], sketch[None])
    assert_loglik_close(res.loglik[0], ref["loglik"])
    assert_loglik_close(align.ctc_loglik(log_p[None], sketch[None])[0], ref["loglik"])
    np.testing.assert_allclose(res.d_log_p[0], ref["d_log_p"], rtol=0, atol=1e-12, err_msg="d_log_p")
    np.testing.assert_allclose(res.posterior[0], ref["posterior"], rtol=0, atol=1e-12, err_msg="posterior")
    fwd, post, vit = (dec(log_p[None], sketch[None])[0] for dec in CTC_DECODERS)
    zeros = np.zeros((T, L))
    check_decoders_against_brute_force(fwd, post, vit, ref, log_p[:, sketch], zeros, zeros)


def test_ctc_packed_ragged_batch_matches_brute_force():
    """Checks spec/align.md eq. (18)."""
    B, T, L, K = len(SMALL), max(t for t, _ in SMALL), max(l for _, l in SMALL), 4
    rng = np.random.default_rng(4)
    log_p = np.full((B, T, K), np.nan)                     # (B, T, K)
    sketch = np.full((B, L), -1)                           # (B, L) padding ids out of range
    for b, (T_b, L_b) in enumerate(SMALL):
        log_p[b, :T_b] = rng.uniform(-4.0, 0.0, size=(T_b, K))
        sketch[b, :L_b] = rng.integers(0, K, size=L_b)
    traj_len = np.array([r[0] for r in SMALL])
    sketch_len = np.array([r[1] for r in SMALL])
    res = align.ctc_forward_backward(log_p, sketch, traj_len, sketch_len)
    decs = [dec(log_p, sketch, traj_len, sketch_len) for dec in CTC_DECODERS]
    for b, (T_b, L_b) in enumerate(SMALL):
        lp, sk = log_p[b, :T_b], sketch[b, :L_b]
        ref = bf.ctc_reference(lp, sk)
        assert_loglik_close(res.loglik[b], ref["loglik"])
        np.testing.assert_allclose(res.d_log_p[b, :T_b], ref["d_log_p"], rtol=0, atol=1e-12)
        assert np.all(res.d_log_p[b, T_b:] == 0.0)
        np.testing.assert_allclose(res.posterior[b, :T_b, :L_b], ref["posterior"], rtol=0, atol=1e-12)
        assert_zero_outside(res.posterior[b], T_b, L_b, "posterior")
        zeros = np.zeros((T_b, L_b))
        check_decoders_against_brute_force(*(d[b] for d in decs), ref, lp[:, sk], zeros, zeros)


def test_argmax_ties_go_to_lowest_position():
    """All-zero log-probabilities, T = 3, L = 2: at t = 1 both positions tie exactly.
    Checks spec/align.md eq. (21), (22)."""
    z = np.zeros((1, 3, 2))
    # alpha_1 = (0, 0), alpha_2 = (0, log 2); posterior_1 = (1/2, 1/2), posterior_2 = (0, 1)
    assert align.align_forward_argmax(z, z, z)[0].tolist() == [0, 0, 1]
    assert align.align_posterior_argmax(z, z, z)[0].tolist() == [0, 0, 1]
    log_p, sketch = np.zeros((1, 3, 1)), np.zeros((1, 2), dtype=np.int64)
    assert align.ctc_align_forward_argmax(log_p, sketch)[0].tolist() == [0, 0, 1]
    assert align.ctc_align_posterior_argmax(log_p, sketch)[0].tolist() == [0, 0, 1]


def _padded_taco_batch(seed, B, T, L, traj_len, sketch_len, low=-6.0):
    """Random valid block in [low, 0], garbage (NaN, +-inf, 5.0) in the padding."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(low, 0.0, size=(3, B, T, L))                       # (3, B, T, L)
    garbage = rng.choice([np.nan, np.inf, NEG_INF, 5.0], size=values.shape)
    values = np.where(valid_mask(traj_len, sketch_len, T, L), values, garbage)
    final = rng.uniform(low, 0.0, size=(B, L))                              # (B, L)
    final = np.where(np.arange(L)[None] < np.asarray(sketch_len)[:, None], final, np.nan)
    return dict(log_act=values[0], log_stop=values[1], log_go=values[2],
                traj_len=np.asarray(traj_len), sketch_len=np.asarray(sketch_len), log_final_stop=final)


def check_row_against_autograd(res, case, b):
    """Row b of a TacoResult against ag_taco_row on its valid block; exactly 0 elsewhere."""
    T_b, L_b = case["traj_len"][b], case["sketch_len"][b]
    block = [case[k][b, :T_b, :L_b] for k in ("log_act", "log_stop", "log_go")]
    final = None if case.get("log_final_stop") is None else case["log_final_stop"][b, :L_b]
    loglik, grads = ag_taco_row(*block, final)
    assert_loglik_close(res.loglik[b], loglik, rtol=1e-12, atol=1e-10)
    for name, g in zip(GRAD_NAMES, grads):
        got = getattr(res, name)[b]
        np.testing.assert_allclose(got[:T_b, :L_b], g, rtol=1e-9, atol=1e-10, err_msg=name)
        assert_zero_outside(got, T_b, L_b, name)
    np.testing.assert_allclose(res.d_final_stop[b, :L_b], grads[3], rtol=1e-9, atol=1e-10, err_msg="d_final_stop")
    assert_zero_outside(res.d_final_stop[b], T_b, L_b, "d_final_stop")
    return loglik


def test_taco_gradients_match_autograd_on_padded_batch():
    # rows: full, shorter, impossible (L_b = 4 > T_b = 3), single-position sketch
    """Checks spec/align.md eq. (12), (13), (14), (15)."""
    case = _padded_taco_batch(6, 4, 9, 4, traj_len=[9, 5, 3, 7], sketch_len=[4, 2, 4, 1])
    res = align.taco_forward_backward(**case)
    logliks = [check_row_against_autograd(res, case, b) for b in range(4)]
    assert np.isfinite(logliks).tolist() == [True, True, False, True]
    no_final = dict(case, log_final_stop=None)
    res = align.taco_forward_backward(**no_final)
    for b in range(4):
        check_row_against_autograd(res, no_final, b)
        assert np.all(res.d_final_stop[b] == 0.0)


def test_ctc_gradients_match_autograd_on_padded_batch():
    """Checks spec/align.md eq. (20)."""
    B, T, L, K = 4, 9, 4, 5
    rng = np.random.default_rng(7)
    traj_len, sketch_len = np.array([9, 5, 3, 7]), np.array([4, 2, 4, 1])
    log_p = rng.uniform(-6.0, 0.0, size=(B, T, K))                          # (B, T, K)
    log_p[np.arange(T)[None, :] >= traj_len[:, None]] = np.nan
    sketch = rng.integers(0, K, size=(B, L))                                # (B, L)
    sketch[np.arange(L)[None, :] >= sketch_len[:, None]] = -1
    sketch[0, 1] = sketch[0, 2]                                             # a repeated class id
    res = align.ctc_forward_backward(log_p, sketch, traj_len, sketch_len)
    for b in range(B):
        T_b, L_b = traj_len[b], sketch_len[b]
        loglik, d_log_p = ag_ctc_row(log_p[b, :T_b], sketch[b, :L_b])
        assert_loglik_close(res.loglik[b], loglik)
        np.testing.assert_allclose(res.d_log_p[b, :T_b], d_log_p, rtol=1e-9, atol=1e-10, err_msg="d_log_p")
        assert np.all(res.d_log_p[b, T_b:] == 0.0), "d_log_p not 0 for t >= T_b"
    assert np.isfinite(res.loglik).tolist() == [True, True, False, True]


# ----------------------------------------------------------------------------------------------
# (b) hypothesis properties
# ----------------------------------------------------------------------------------------------

GARBAGE = [np.nan, np.inf, NEG_INF, 1e300, -1e300, 3.0, 0.0]
LOG_PROB = st.floats(min_value=-40.0, max_value=0.0)


def _describe(case):
    with np.printoptions(precision=17, threshold=100000):
        return "\n".join(f"{k} = {v!r}" for k, v in case.items())


def sizes(n):
    """1..n, spread evenly (st.integers favours the small end), shrinking towards 1."""
    return st.sampled_from(range(1, n + 1))


def lengths(B, n):
    """(B,) int64 lengths in [1, n]; often the full n, the usual case in a batch."""
    return st.lists(st.one_of(st.just(n), sizes(n)), min_size=B, max_size=B).map(
        lambda x: np.array(x, dtype=np.int64))


@st.composite
def taco_batches(draw, max_B=4, max_T=12, max_L=6, act=LOG_PROB):
    """A ragged TACO batch: values in [-40, 0] (log_act from `act`; a few -inf) in the valid
    block, garbage elsewhere."""
    B, T, L = (draw(sizes(n)) for n in (max_B, max_T, max_L))
    traj_len, sketch_len = draw(lengths(B, T)), draw(lengths(B, L))
    values = draw(hnp.arrays(np.float64, (3, B, T, L), elements=LOG_PROB))             # (3, B, T, L)
    values[0] = draw(hnp.arrays(np.float64, (B, T, L), elements=act))                  # (B, T, L)
    holes = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, B - 1),
                                    st.integers(0, T - 1), st.integers(0, L - 1)), max_size=3))
    for index in holes:
        values[index] = NEG_INF
    garbage = draw(hnp.arrays(np.float64, (3, B, T, L), elements=st.sampled_from(GARBAGE)))
    values = np.where(valid_mask(traj_len, sketch_len, T, L), values, garbage)
    final = None
    if draw(st.booleans()):
        final = draw(hnp.arrays(np.float64, (B, L), elements=LOG_PROB))                # (B, L)
        pad = draw(hnp.arrays(np.float64, (B, L), elements=st.sampled_from(GARBAGE)))
        final = np.where(np.arange(L)[None] < sketch_len[:, None], final, pad)
    case = dict(log_act=values[0], log_stop=values[1], log_go=values[2],
                traj_len=traj_len, sketch_len=sketch_len, log_final_stop=final)
    note(_describe(case))
    return case


@st.composite
def ctc_batches(draw, max_B=4, max_T=12, max_L=6, max_K=5):
    """A ragged CTC batch: log_p in [-40, 0] (a few -inf) for t < T_b; garbage ids and values in the padding."""
    B, T, L = (draw(sizes(n)) for n in (max_B, max_T, max_L))
    K = draw(sizes(max_K))
    traj_len, sketch_len = draw(lengths(B, T)), draw(lengths(B, L))
    log_p = draw(hnp.arrays(np.float64, (B, T, K), elements=LOG_PROB))                 # (B, T, K)
    for index in draw(st.lists(st.tuples(st.integers(0, B - 1), st.integers(0, T - 1),
                                         st.integers(0, K - 1)), max_size=2)):
        log_p[index] = NEG_INF
    garbage = draw(hnp.arrays(np.float64, (B, T, K), elements=st.sampled_from(GARBAGE)))
    log_p = np.where(np.arange(T)[None, :, None] < traj_len[:, None, None], log_p, garbage)
    sketch = draw(hnp.arrays(np.int64, (B, L), elements=st.integers(0, K - 1)))        # (B, L)
    bad_ids = draw(hnp.arrays(np.int64, (B, L), elements=st.sampled_from([-1, K, 10**6, -(10**6)])))
    sketch = np.where(np.arange(L)[None] < sketch_len[:, None], sketch, bad_ids)
    case = dict(log_p=log_p, sketch=sketch, traj_len=traj_len, sketch_len=sketch_len)
    note(_describe(case))
    return case


def _rows(case):
    """(b, T_b, L_b) for every row."""
    return [(b, int(case["traj_len"][b]), int(case["sketch_len"][b])) for b in range(len(case["traj_len"]))]


def _zero_padding(case):
    """The same case with every padding entry replaced by 0 (sketch padding by class 0)."""
    out = dict(case)
    if "log_act" in case:
        T, L = case["log_act"].shape[1:]
        valid = valid_mask(case["traj_len"], case["sketch_len"], T, L)
        for k in ("log_act", "log_stop", "log_go"):
            out[k] = np.where(valid, case[k], 0.0)
        if case["log_final_stop"] is not None:
            out["log_final_stop"] = np.where(valid[:, 0], case["log_final_stop"], 0.0)
    else:
        T, L = case["log_p"].shape[1], case["sketch"].shape[1]
        out["log_p"] = np.where(np.arange(T)[None, :, None] < case["traj_len"][:, None, None], case["log_p"], 0.0)
        out["sketch"] = np.where(np.arange(L)[None] < case["sketch_len"][:, None], case["sketch"], 0)
    return out


def _assert_same_outputs(a, b):
    """Outputs of run_taco / run_ctc are bit-identical."""
    (res_a, decs_a), (res_b, decs_b) = a, b
    for field in res_a._fields:
        np.testing.assert_array_equal(getattr(res_a, field), getattr(res_b, field), err_msg=field)
    for da, db in zip(decs_a, decs_b):
        np.testing.assert_array_equal(da, db)


@given(case=taco_batches())
def test_prop_gradients_match_autograd(case):
    """Checks spec/align.md eq. (4), (12), (13), (14)."""
    res = align.taco_forward_backward(**case)
    for b, _, _ in _rows(case):
        check_row_against_autograd(res, case, b)
    np.testing.assert_allclose(align.taco_loglik(**case), res.loglik, rtol=1e-13, atol=0)


LOG_DENSITY = st.floats(min_value=-40.0, max_value=40.0)


@given(case=taco_batches(act=LOG_DENSITY))
def test_prop_log_act_density_matches_autograd(case):
    """Rule R2 (spec/align.md §9): log_act is a log-density, positive values included."""
    res = align.taco_forward_backward(**case)
    for b, _, _ in _rows(case):
        check_row_against_autograd(res, case, b)


@given(case=taco_batches(act=LOG_DENSITY), c=st.floats(min_value=-50.0, max_value=50.0))
def test_prop_adding_c_to_log_act_shifts_loglik_by_T_c(case, c):
    """Rule R2: log_act + c on every entry shifts row b's loglik by T_b c; gradients do not move;
    the decoders do not move wherever the unshifted row has a clear winner."""
    shifted = dict(case, log_act=case["log_act"] + c)   # -inf stays -inf; garbage stays padding
    (res, decs), (res_c, decs_c) = run_taco(case), run_taco(shifted)
    for b, T_b, L_b in _rows(case):
        if not np.isfinite(res.loglik[b]):
            assert res_c.loglik[b] == NEG_INF
            continue
        np.testing.assert_allclose(res_c.loglik[b], res.loglik[b] + T_b * c, rtol=1e-12, atol=1e-9)
        for name in GRAD_NAMES + ("posterior", "d_final_stop"):
            np.testing.assert_allclose(getattr(res_c, name)[b], getattr(res, name)[b], rtol=0, atol=1e-9,
                                       err_msg=name)
        block = [case[k][b, :T_b, :L_b] for k in ("log_act", "log_stop", "log_go")]
        clear = {0: clear_winners(np_forward(*block), margin=1e-6),
                 1: clear_winners(res.posterior[b, :T_b, :L_b], margin=1e-6)}
        for i in (0, 1):
            np.testing.assert_array_equal(decs_c[i][b, :T_b][clear[i]], decs[i][b, :T_b][clear[i]])
        score = bf.path_logprob(tuple(decs_c[2][b, :T_b]), *block)   # Viterbi: still a best path
        best = np_forward(*block, combine=np.maximum)[T_b - 1, L_b - 1]
        np.testing.assert_allclose(score, best, rtol=1e-12, atol=1e-8)


def never_read(traj_len, sketch_len, T, L):
    """(B, T, L) masks of the valid entries no path prefix reads, spec/align.md rule R3 (0-based):
    act at l > t, go at l >= t, stop at l >= t or l = L_b - 1."""
    t, l = np.arange(T)[None, :, None], np.arange(L)[None, None, :]
    valid = valid_mask(traj_len, sketch_len, T, L)
    last = np.asarray(sketch_len)[:, None, None] - 1
    return {"log_act": valid & (l > t), "log_go": valid & (l >= t),
            "log_stop": valid & ((l >= t) | (l == last))}


@given(case=taco_batches(), data=st.data())
def test_prop_never_read_entries_are_irrelevant(case, data):
    """Rule R3: garbage in the entries no path reads (and in log_final_stop off L_b) changes no
    output bit, and their gradients are exactly 0."""
    T, L = case["log_act"].shape[1:]
    dirty = dict(case)
    masks = never_read(case["traj_len"], case["sketch_len"], T, L)
    for key, mask in masks.items():
        junk = data.draw(hnp.arrays(np.float64, mask.shape, elements=st.sampled_from(GARBAGE)))
        dirty[key] = np.where(mask, junk, case[key])
    if case["log_final_stop"] is not None:
        off = np.arange(L)[None] != case["sketch_len"][:, None] - 1
        dirty["log_final_stop"] = np.where(off, np.nan, case["log_final_stop"])
    got = run_taco(dirty)
    _assert_same_outputs(got, run_taco(case))
    for key, name in (("log_act", "d_act"), ("log_stop", "d_stop"), ("log_go", "d_go")):
        assert np.all(getattr(got[0], name)[masks[key]] == 0.0), name


@given(case=taco_batches())
def test_prop_posterior_is_a_distribution_equal_to_d_act(case):
    """Checks spec/align.md eq. (11)."""
    res = align.taco_forward_backward(**case)
    np.testing.assert_array_equal(res.posterior, res.d_act)
    for b, T_b, L_b in _rows(case):
        post = res.posterior[b, :T_b, :L_b]
        assert np.all((post >= 0.0) & (post <= 1.0 + 1e-12))
        if np.isfinite(res.loglik[b]):
            np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=0, atol=1e-10, err_msg=f"row {b}")
        else:
            has_neg_inf = any(np.any(case[k][b, :T_b, :L_b] == NEG_INF) for k in ("log_act", "log_stop", "log_go"))
            assert L_b > T_b or has_neg_inf, "loglik is -inf although every valid input is finite and L_b <= T_b"
            assert np.all(post == 0.0)


@given(case=taco_batches())
def test_prop_posterior_is_the_flow_through_transitions(case):
    """For 1 <= t < T_b: gamma_t(l) = d_go[t, l] + d_stop[t, l-1] (in-flow) and
    gamma_{t-1}(l) = d_go[t, l] + d_stop[t, l] (out-flow). Transitions no path uses (t = 0, moving
    on from L_b - 1) get exactly 0.
    Checks spec/align.md eq. (11)."""
    res = align.taco_forward_backward(**case)
    for b, T_b, L_b in _rows(case):
        post, d_go, d_stop = (x[b, :T_b, :L_b] for x in (res.posterior, res.d_go, res.d_stop))
        inflow = d_go[1:].copy()
        inflow[:, 1:] += d_stop[1:, :-1]
        np.testing.assert_allclose(post[1:], inflow, rtol=0, atol=1e-10, err_msg="in-flow")
        np.testing.assert_allclose(post[:-1], d_go[1:] + d_stop[1:], rtol=0, atol=1e-10, err_msg="out-flow")
        assert np.all(d_go[0] == 0.0) and np.all(d_stop[0] == 0.0) and np.all(d_stop[:, L_b - 1] == 0.0)


@pytest.mark.parametrize("T, L", [(1, 1), (4, 2), (6, 3), (7, 7), (8, 4)])
def test_alpha_times_beta_splits_every_path_at_every_step(T, L):
    """alpha and beta written plainly (np_forward, np_backward, with beta_T(L) = f) against
    enumeration of every path: alpha_t(l) beta_t(l) is the mass of the paths through (t, l), so
    their sum over l is Z at every t, and alpha beta / Z, the edge products / Z are taco_ref's
    posteriors and gradients.
    Checks spec/align.md eq. (3), (4), (6), (7), (9), (12), (13), (14)."""
    rng = np.random.default_rng([9, T, L])
    act, stop, go = rng.uniform(-4.0, 0.0, size=(3, T, L))   # each (T, L)
    log_f = rng.uniform(-4.0, 0.0, size=L)                    # (L,) terminal STOP, read at L
    alpha = np_forward(act, stop, go)                         # (T, L) eq. (3), (4)
    np.testing.assert_allclose(alpha, bf_alpha(act, stop, go), rtol=1e-13, atol=1e-13, err_msg="alpha")
    beta = np_backward(act, stop, go) + log_f[L - 1]          # (T, L) eq. (6) with f, (7)
    through = np.full((T, L), NEG_INF)                        # (T, L) log mass of the paths through (t, l)
    for z in bf.paths(T, L):
        score = bf.path_logprob(z, act, stop, go) + log_f[L - 1]
        through[np.arange(T), list(z)] = np.logaddexp(through[np.arange(T), list(z)], score)
    np.testing.assert_allclose(alpha + beta, through, rtol=1e-13, atol=1e-13, err_msg="alpha beta")
    res = align.taco_forward_backward(act[None], stop[None], go[None], log_final_stop=log_f[None])
    log_z = res.loglik[0]
    np.testing.assert_allclose(logsumexp(alpha + beta, axis=1)[:, 0], log_z, rtol=1e-13,
                               err_msg="eq. (9) at some t")
    np.testing.assert_allclose(res.d_act[0], np.exp(alpha + beta - log_z), rtol=0, atol=1e-12, err_msg="(12)")
    d_stop, d_go = np.zeros((T, L)), np.zeros((T, L))
    d_stop[1:, :-1] = np.exp(alpha[:-1, :-1] + stop[1:, :-1] + act[1:, 1:] + beta[1:, 1:] - log_z)
    d_go[1:] = np.exp(alpha[:-1] + go[1:] + act[1:] + beta[1:] - log_z)
    np.testing.assert_allclose(res.d_stop[0], d_stop, rtol=0, atol=1e-12, err_msg="(13)")
    np.testing.assert_allclose(res.d_go[0], d_go, rtol=0, atol=1e-12, err_msg="(14)")


@given(case=taco_batches())
def test_prop_posteriors_are_smoothed_back_through_the_entry_probabilities(case):
    """r_same and r_prev from alpha written plainly (np_forward): they sum to 1 wherever alpha > 0,
    taco_ref's edge posteriors are gamma times them, and gamma runs backwards from
    gamma_T = [l = L_b] by the smoothing recursion.
    Checks spec/align.md eq. (16), (17)."""
    res = align.taco_forward_backward(**case)
    for b, T_b, L_b in _rows(case):
        if not np.isfinite(res.loglik[b]):
            continue
        act, stop, go = (case[k][b, :T_b, :L_b] for k in ("log_act", "log_stop", "log_go"))
        alpha = np_forward(act, stop, go)                     # (T_b, L_b)
        r_same, r_prev = np.zeros((T_b, L_b)), np.zeros((T_b, L_b))
        with np.errstate(invalid="ignore"):                   # -inf - (-inf) where alpha_t(l) = 0
            r_same[1:] = np.exp(alpha[:-1] + go[1:] + act[1:] - alpha[1:])
            r_prev[1:, 1:] = np.exp(alpha[:-1, :-1] + stop[1:, :-1] + act[1:, 1:] - alpha[1:, 1:])
        r_same, r_prev = np.nan_to_num(r_same, nan=0.0), np.nan_to_num(r_prev, nan=0.0)
        alive = alpha[1:] > NEG_INF
        np.testing.assert_allclose((r_same + r_prev)[1:][alive], 1.0, rtol=0, atol=1e-12, err_msg="r sum")
        gamma = res.posterior[b, :T_b, :L_b]
        np.testing.assert_allclose(res.d_go[b, 1:T_b, :L_b], gamma[1:] * r_same[1:], rtol=0, atol=1e-10)
        np.testing.assert_allclose(res.d_stop[b, 1:T_b, :L_b - 1], gamma[1:, 1:] * r_prev[1:, 1:],
                                   rtol=0, atol=1e-10)
        np.testing.assert_allclose(gamma[T_b - 1], np.eye(L_b)[L_b - 1], rtol=0, atol=1e-12)
        smoothed = gamma[1:] * r_same[1:]                     # (T_b - 1, L_b) gamma_{t-1} by (17)
        smoothed[:, :-1] += gamma[1:, 1:] * r_prev[1:, 1:]
        np.testing.assert_allclose(gamma[:-1], smoothed, rtol=0, atol=1e-10, err_msg="(17)")


@given(case=taco_batches())
def test_prop_padding_content_is_irrelevant_and_gets_zero_gradient(case):
    """Checks spec/align.md eq. (10), (15)."""
    got = run_taco(case)
    _assert_same_outputs(got, run_taco(_zero_padding(case)))
    res = got[0]
    for b, T_b, L_b in _rows(case):
        for name in GRAD_NAMES + ("posterior",):
            assert_zero_outside(getattr(res, name)[b], T_b, L_b, name)
        expected = np.zeros(res.d_final_stop.shape[1])
        if case["log_final_stop"] is not None and np.isfinite(res.loglik[b]):
            expected[L_b - 1] = 1.0
        np.testing.assert_array_equal(res.d_final_stop[b], expected)


@given(case=taco_batches())
def test_prop_decoders(case):
    """Viterbi scores the brute-force maximum (<= loglik) on a valid path; the argmax decoders
    attain their maxima; -1 in the padding and on impossible rows.
    Checks spec/align.md eq. (21), (22), (23), (24)."""
    res, (fwd, post, vit) = run_taco(case)
    loglik = align.taco_loglik(**dict(case, log_final_stop=None))
    for b, T_b, L_b in _rows(case):
        block = [case[k][b, :T_b, :L_b] for k in ("log_act", "log_stop", "log_go")]
        possible = bool(np.isfinite(loglik[b]))
        check_decoder_properties(fwd[b], post[b], vit[b], *block, res.posterior[b, :T_b, :L_b], possible)
        if possible:
            score = bf.path_logprob(tuple(vit[b, :T_b]), *block)
            assert score <= loglik[b] + 1e-9 * (1.0 + abs(loglik[b]))


@given(case=taco_batches())
def test_prop_batch_rows_are_independent(case):
    """Checks spec/align.md eq. (10)."""
    batch = run_taco(case)
    for b, T_b, L_b in _rows(case):
        alone = {k: (None if v is None else v[b:b + 1]) for k, v in case.items()}
        single = run_taco(alone)
        _assert_same_outputs(single, (type(batch[0])(*(x[b:b + 1] for x in batch[0])),
                                      tuple(d[b:b + 1] for d in batch[1])))
        # the row cropped to its own (T_b, L_b) with no lengths at all
        crop = {k: case[k][b:b + 1, :T_b, :L_b] for k in ("log_act", "log_stop", "log_go")}
        if case["log_final_stop"] is not None:
            crop["log_final_stop"] = case["log_final_stop"][b:b + 1, :L_b]
        res = align.taco_forward_backward(**crop)
        assert_loglik_close(res.loglik[0], batch[0].loglik[b])
        for name in GRAD_NAMES + ("posterior",):
            np.testing.assert_allclose(getattr(res, name)[0], getattr(batch[0], name)[b, :T_b, :L_b],
                                       rtol=0, atol=1e-12, err_msg=name)


@given(case=ctc_batches())
def test_prop_ctc_is_taco_on_gathered_log_act(case):
    """Checks spec/align.md eq. (19), (20)."""
    res, (fwd, post, vit) = run_ctc(case)
    log_act = gather(case["log_p"], case["sketch"])                                  # (B, T, L)
    zeros = np.zeros_like(log_act)
    taco = align.taco_forward_backward(log_act, zeros, zeros, case["traj_len"], case["sketch_len"])
    B, T, K = case["log_p"].shape
    for b, T_b, L_b in _rows(case):
        assert_loglik_close(res.loglik[b], taco.loglik[b])
        np.testing.assert_allclose(res.posterior[b], taco.posterior[b], rtol=0, atol=1e-12)
        expected = np.zeros((T, K))                       # d log p / d log_p[t, k] = sum over l with sketch[l] == k
        np.add.at(expected, (slice(None), case["sketch"][b, :L_b]), taco.d_act[b, :, :L_b])
        np.testing.assert_allclose(res.d_log_p[b], expected, rtol=0, atol=1e-12, err_msg="d_log_p")
        assert np.all(res.d_log_p[b, T_b:] == 0.0)
        block = log_act[b, :T_b, :L_b]
        z = np.zeros_like(block)
        check_decoder_properties(fwd[b], post[b], vit[b], block, z, z, res.posterior[b, :T_b, :L_b],
                                 bool(np.isfinite(res.loglik[b])))
    np.testing.assert_allclose(align.ctc_loglik(**case), res.loglik, rtol=1e-13, atol=0)
    _assert_same_outputs((res, (fwd, post, vit)), run_ctc(_zero_padding(case)))


@given(case=ctc_batches())
def test_prop_ctc_gradients_match_autograd(case):
    """Checks spec/align.md eq. (20)."""
    res = align.ctc_forward_backward(**case)
    for b, T_b, L_b in _rows(case):
        loglik, d_log_p = ag_ctc_row(case["log_p"][b, :T_b], case["sketch"][b, :L_b])
        assert_loglik_close(res.loglik[b], loglik, rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(res.d_log_p[b, :T_b], d_log_p, rtol=1e-9, atol=1e-10, err_msg="d_log_p")
        alone = run_ctc({k: v[b:b + 1] for k, v in case.items()})
        np.testing.assert_array_equal(alone[0].loglik[0], res.loglik[b])
        np.testing.assert_array_equal(alone[0].d_log_p[0], res.d_log_p[b])


# ----------------------------------------------------------------------------------------------
# (c) numerics
# ----------------------------------------------------------------------------------------------

# Gradients of a T = 20000 row are compared with an absolute tolerance: their small entries
# depend on differences of log-values of size ~ |loglik| ~ 8e5, whose float64 rounding over T
# steps gives relative errors ~ 1e-8 in any float64 implementation (measured against an
# extended-precision run). Absolute errors stay near 1e-10 when posteriors are normalised per
# step (as in np_forward_backward) or smoothed backwards; forming them as
# exp(alpha + beta - loglik) costs ~ 7e-9, which this tolerance rejects.
LONG_GRAD_ATOL = 1e-9


@pytest.mark.slow
def test_long_trajectory_matches_plain_log_space_recursion():
    """Checks spec/align.md eq. (17), (25)."""
    B, T, L = 2, 20000, 50
    traj_len, sketch_len = np.array([T, 15001]), np.array([L, 37])
    rng = np.random.default_rng(20000)
    values = rng.uniform(-40.0, 0.0, size=(3, B, T, L))                     # (3, B, T, L)
    values[:, ~valid_mask(traj_len, sketch_len, T, L)] = np.nan
    res = align.taco_forward_backward(*values, traj_len, sketch_len)
    fwd = align.align_forward_argmax(*values, traj_len, sketch_len)
    vit = align.align_viterbi(*values, traj_len, sketch_len)
    for name in GRAD_NAMES + ("posterior",):
        assert np.all(np.isfinite(getattr(res, name))), name
    for b in range(B):
        T_b, L_b = traj_len[b], sketch_len[b]
        act, stop, go = (x[b, :T_b, :L_b] for x in values)
        loglik, *grads = np_forward_backward(act, stop, go)
        assert np.isfinite(res.loglik[b])
        np.testing.assert_allclose(res.loglik[b], loglik, rtol=1e-12)
        for name, g in zip(GRAD_NAMES, grads):
            np.testing.assert_allclose(getattr(res, name)[b, :T_b, :L_b], g, rtol=1e-9, atol=LONG_GRAD_ATOL,
                                       err_msg=name)
            assert_zero_outside(getattr(res, name)[b], T_b, L_b, name)
        np.testing.assert_allclose(res.posterior[b, :T_b, :L_b].sum(axis=1), 1.0, rtol=0, atol=LONG_GRAD_ATOL)
        assert_valid_path(vit[b, :T_b], L_b)
        best = np_forward(act, stop, go, combine=np.maximum)[T_b - 1, L_b - 1]
        np.testing.assert_allclose(bf.path_logprob(tuple(vit[b, :T_b]), act, stop, go), best, rtol=1e-12)
        assert best <= res.loglik[b]
        alpha = np_forward(act, stop, go)
        chosen = alpha[np.arange(T_b), fwd[b, :T_b]]
        top = alpha.max(axis=1)
        assert np.all(chosen >= top - 1e-12 * np.abs(top)), "forward argmax does not attain max alpha"
        assert np.all(fwd[b, T_b:] == -1) and np.all(vit[b, T_b:] == -1)


@pytest.mark.slow
@given(case=taco_batches(max_T=48))
def test_prop_longer_rows_match_numpy_reference(case):
    """Rows up to T = 48 (dead rows, -inf holes, impossible rows, ragged padding) against the
    plain log-space recursion; decoders against its max-product version.
    Checks spec/align.md eq. (4), (5), (6), (7), (23)."""
    res, (fwd, post, vit) = run_taco(case)
    for b, T_b, L_b in _rows(case):
        block = [case[k][b, :T_b, :L_b] for k in ("log_act", "log_stop", "log_go")]
        loglik, *grads = np_forward_backward(*block) if L_b <= T_b else (NEG_INF, 0, 0, 0)
        possible = loglik > NEG_INF
        final = case["log_final_stop"]
        if final is not None and possible:
            loglik = loglik + final[b, L_b - 1]
        assert_loglik_close(res.loglik[b], loglik, rtol=1e-12, atol=1e-10)
        for name, g in zip(GRAD_NAMES, grads):
            got = getattr(res, name)[b]
            np.testing.assert_allclose(got[:T_b, :L_b], g, rtol=1e-9, atol=1e-10, err_msg=name)
            assert_zero_outside(got, T_b, L_b, name)
        for name, dec in (("forward", fwd), ("posterior", post), ("viterbi", vit)):
            assert np.all(dec[b, T_b:] == -1), name
            if not possible:
                assert np.all(dec[b] == -1), name
        if possible:
            assert_valid_path(vit[b, :T_b], L_b)
            best = np_forward(*block, combine=np.maximum)[T_b - 1, L_b - 1]
            np.testing.assert_allclose(bf.path_logprob(tuple(vit[b, :T_b]), *block), best, rtol=1e-12, atol=1e-9)
            alpha = np_forward(*block)
            top = alpha.max(axis=1)
            chosen = alpha[np.arange(T_b), fwd[b, :T_b]]
            assert np.all(chosen >= top - 1e-12 * (1.0 + np.abs(top))), "forward argmax does not attain max alpha"


def scaled_forward_loglik(act, stop, go):
    """Probability-space forward with per-step normalisation (Graves et al. 2006), one row.

    Only here to show that the row below defeats it; taco_ref must not work this way.
    """
    T, L = act.shape
    alpha = np.zeros(L)                                   # (L,) alpha_t / (its sum)
    alpha[0] = np.exp(act[0, 0])
    log_scale = 0.0
    for t in range(T):
        if t > 0:
            moved = np.concatenate(([0.0], alpha[:-1] * np.exp(stop[t, :-1])))
            alpha = np.exp(act[t]) * (alpha * np.exp(go[t]) + moved)
        c = alpha.sum()
        log_scale += np.log(c)
        alpha = alpha / c
    with np.errstate(divide="ignore"):
        return log_scale + np.log(alpha[L - 1])


def test_exact_where_scaled_probabilities_underflow():
    """Two alignments, each with total log-probability -1000; at t = 100 their forward masses
    differ by a factor e^-1000 (below the smallest float64, ~e^-745), so a scaled forward loses
    one of them. The answer is log 2 - 1000 with posterior 1/2 on each alignment.

    T = 202, L = 2; moving on is only possible at t = 1 (path A) or t = 201 (path B).
    Path A pays -10 at l = 1 for t = 1..100; path B pays -10 at l = 0 for t = 101..200.
    """
    T, L = 202, 2
    act, go = np.zeros((T, L)), np.zeros((T, L))
    stop = np.full((T, L), NEG_INF)
    stop[1, 0] = stop[201, 0] = 0.0
    act[1:101, 1] = -10.0
    act[101:201, 0] = -10.0
    act[201, 0] = -10.0
    alpha = np_forward(act, stop, go)
    assert alpha[100, 0] - alpha[100, 1] == 1000.0 and np.exp(alpha[100, 1] - alpha[100, 0]) == 0.0
    expected = math.log(2.0) - 1000.0
    assert abs(scaled_forward_loglik(act, stop, go) - expected) > 0.5   # the scaled forward fails here

    res = align.taco_forward_backward(act[None], stop[None], go[None])
    np.testing.assert_allclose(res.loglik[0], expected, rtol=1e-14)
    d_act, d_stop, d_go = np.zeros((T, L)), np.zeros((T, L)), np.zeros((T, L))
    d_act[0, 0] = d_act[201, 1] = 1.0
    d_act[1:201] = 0.5
    d_stop[1, 0] = d_stop[201, 0] = 0.5
    d_go[1:201, 0] = 0.5                                  # path B stays at 0 for t = 1..200
    d_go[2:202, 1] = 0.5                                  # path A stays at 1 for t = 2..201
    for name, expected_grad in zip(GRAD_NAMES, (d_act, d_stop, d_go)):
        np.testing.assert_allclose(getattr(res, name)[0], expected_grad, rtol=0, atol=1e-12, err_msg=name)
    vit = align.align_viterbi(act[None], stop[None], go[None])[0]
    assert bf.path_logprob(tuple(vit), act, stop, go) == -1000.0
    fwd = align.align_forward_argmax(act[None], stop[None], go[None])[0]
    assert np.all(fwd[:200] == 0) and fwd[201] == 1     # alpha_t(0) > alpha_t(1) until t = 200 (tie)


@pytest.mark.parametrize("T, L", [(1, 1), (2000, 1), (2, 2), (40, 40)])
def test_single_path_rows_sum_the_path(T, L):
    """L = 1 (always stay) and T = L (move every step) have one path: loglik is its plain sum.
    Checks spec/align.md eq. (1), (2), (8), (24)."""
    rng = np.random.default_rng([8, T, L])
    act, stop, go = rng.uniform(-40.0, 0.0, size=(3, T, L))
    final = rng.uniform(-40.0, 0.0, size=L)
    z = np.zeros(T, dtype=np.int64) if L == 1 else np.arange(T)
    t = np.arange(1, T)
    steps = go[t, 0] if L == 1 else stop[t, t - 1]
    expected = math.fsum([*act[np.arange(T), z], *steps, final[L - 1]])
    res = align.taco_forward_backward(act[None], stop[None], go[None], log_final_stop=final[None])
    np.testing.assert_allclose(res.loglik[0], expected, rtol=1e-13)
    one_hot = np.zeros((T, L))
    one_hot[np.arange(T), z] = 1.0
    np.testing.assert_allclose(res.d_act[0], one_hot, rtol=0, atol=1e-12)
    transition = np.zeros((T, L))
    transition[t, z[t - 1]] = 1.0
    used, unused = (res.d_stop[0], res.d_go[0]) if L > 1 else (res.d_go[0], res.d_stop[0])
    np.testing.assert_allclose(used, transition, rtol=0, atol=1e-12)
    np.testing.assert_allclose(unused, 0.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(res.d_final_stop[0], one_hot[-1])
    np.testing.assert_array_equal(align.align_viterbi(act[None], stop[None], go[None])[0], z)
    np.testing.assert_array_equal(align.align_posterior_argmax(act[None], stop[None], go[None])[0], z)
    if L == 1:
        np.testing.assert_array_equal(align.align_forward_argmax(act[None], stop[None], go[None])[0], z)


# ----------------------------------------------------------------------------------------------
# (d) bad input
# ----------------------------------------------------------------------------------------------

TACO_FNS = ("taco_loglik", "taco_forward_backward", "align_forward_argmax", "align_posterior_argmax",
            "align_viterbi")
TACO_FINAL_FNS = ("taco_loglik", "taco_forward_backward")
CTC_FNS = ("ctc_loglik", "ctc_forward_backward", "ctc_align_forward_argmax", "ctc_align_posterior_argmax",
           "ctc_align_viterbi")
B0, T0, L0, K0 = 2, 5, 3, 4
# row 1 has T_b = 4, L_b = 2: its padding is t = 4 and l = 2


def good_taco(final=False):
    rng = np.random.default_rng(0)
    act, stop, go = rng.uniform(-3.0, 0.0, size=(3, B0, T0, L0))
    kwargs = dict(log_act=act, log_stop=stop, log_go=go, traj_len=np.array([5, 4]), sketch_len=np.array([3, 2]))
    if final:
        kwargs["log_final_stop"] = rng.uniform(-3.0, 0.0, size=(B0, L0))
    return kwargs


def good_ctc():
    rng = np.random.default_rng(0)
    return dict(log_p=rng.uniform(-3.0, 0.0, size=(B0, T0, K0)), sketch=np.array([[0, 3, 1], [2, 2, -1]]),
                traj_len=np.array([5, 4]), sketch_len=np.array([3, 2]))


def _outputs(x):
    """Every array a public function returned (all fields of a result tuple)."""
    return list(x) if isinstance(x, tuple) else [x]


def _assert_same(x, y):
    for a, b in zip(_outputs(x), _outputs(y), strict=True):
        np.testing.assert_array_equal(a, b)


def test_good_inputs_are_accepted():
    """The baseline every bad-input test perturbs is itself valid (every row possible)."""
    for fn in TACO_FNS:
        assert all(np.all(np.isfinite(x)) for x in _outputs(getattr(align, fn)(**good_taco())))
    for fn in TACO_FINAL_FNS:
        assert all(np.all(np.isfinite(x)) for x in _outputs(getattr(align, fn)(**good_taco(final=True))))
    for fn in CTC_FNS:
        assert all(np.all(np.isfinite(x)) for x in _outputs(getattr(align, fn)(**good_ctc())))


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("arg", ["log_act", "log_stop", "log_go"])
def test_rejects_wrong_ndim(fn, arg):
    kwargs = good_taco()
    kwargs[arg] = kwargs[arg][0]                          # (T, L): batch axis missing
    with pytest.raises(ValueError, match=arg):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("arg", ["log_stop", "log_go"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_rejects_mismatched_shapes(fn, arg, axis):
    kwargs = good_taco()
    kwargs[arg] = np.delete(kwargs[arg], 0, axis=axis)
    with pytest.raises(ValueError, match=arg):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", TACO_FINAL_FNS)
@pytest.mark.parametrize("shape", [(B0, L0 + 1), (L0,), (B0 + 1, L0), (B0, T0, L0)])
def test_rejects_log_final_stop_of_wrong_shape(fn, shape):
    kwargs = good_taco()
    kwargs["log_final_stop"] = np.full(shape, -1.0)
    with pytest.raises(ValueError, match="log_final_stop"):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("arg, bad", [("traj_len", [0, 4]), ("traj_len", [5, T0 + 1]), ("traj_len", [-1, 4]),
                                      ("sketch_len", [0, 2]), ("sketch_len", [3, L0 + 1]), ("sketch_len", [3, -2])])
def test_rejects_lengths_out_of_range(fn, arg, bad):
    kwargs = good_taco()
    kwargs[arg] = np.array(bad)
    with pytest.raises(ValueError, match=arg):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("arg", ["traj_len", "sketch_len"])
@pytest.mark.parametrize("bad", [[2.5, 2.0], np.array([3.0, 2.0])], ids=["fractional", "float_dtype"])
def test_rejects_non_integer_lengths(fn, arg, bad):
    kwargs = good_taco()
    kwargs[arg] = bad
    with pytest.raises(ValueError, match=arg):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("arg", ["traj_len", "sketch_len"])
@pytest.mark.parametrize("shape", [(B0 + 1,), (B0 - 1,), (B0, 1)])
def test_rejects_lengths_of_wrong_shape(fn, arg, shape):
    kwargs = good_taco()
    kwargs[arg] = np.full(shape, 2)
    with pytest.raises(ValueError, match=arg):
        getattr(align, fn)(**kwargs)


# entries every path of row 1 (T_b = 4, L_b = 2) can use, and their padding neighbours
USED = {"log_act": (1, 3, 1), "log_stop": (1, 1, 0), "log_go": (1, 3, 1)}
PADDING = {"log_act": [(1, 4, 1), (1, 3, 2)], "log_stop": [(1, 4, 0), (1, 1, 2)], "log_go": [(1, 4, 1), (1, 3, 2)]}


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("arg, bad", [(a, b) for a in ("log_act", "log_stop", "log_go") for b in (np.nan, np.inf)]
                         + [(a, b) for a in ("log_stop", "log_go") for b in (1e-3, 1e-6)])
def test_rejects_bad_value_inside_valid_region(fn, arg, bad):
    """Rule R2: NaN and +inf in a read entry are errors; above LOGP_TOL too for stop and go."""
    kwargs = good_taco()
    kwargs[arg][USED[arg]] = bad
    with pytest.raises(ValueError, match=arg):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", TACO_FINAL_FNS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e-3], ids=["nan", "plus_inf", "1e-3"])
def test_rejects_bad_value_in_log_final_stop(fn, bad):
    kwargs = good_taco(final=True)
    kwargs["log_final_stop"][1, 1] = bad                  # [b, L_b - 1]
    with pytest.raises(ValueError, match="log_final_stop"):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("arg", ["log_act", "log_stop", "log_go"])
def test_accepts_bad_values_just_inside_the_padding(fn, arg):
    kwargs, clean = good_taco(), good_taco()
    for i, index in enumerate(PADDING[arg]):
        kwargs[arg][index] = (np.nan, np.inf)[i]
    _assert_same(getattr(align, fn)(**kwargs), getattr(align, fn)(**clean))


@pytest.mark.parametrize("fn", TACO_FNS)
@pytest.mark.parametrize("value", [1e-3, 0.5, 50.0, 700.0])
def test_accepts_positive_log_act(fn, value):
    """Rule R2: log_act is a log-density; positive values are valid and give finite results."""
    kwargs = good_taco()
    kwargs["log_act"][USED["log_act"]] = value
    assert all(np.all(np.isfinite(x)) for x in _outputs(getattr(align, fn)(**kwargs)))


def test_values_within_tolerance_are_used_as_given():
    """Rule R2: a read log_go or log_final_stop in (0, LOGP_TOL] is used as given, not clipped.
    L = 1: the single path's loglik is the plain sum, so it moves by exactly the added values."""
    rng = np.random.default_rng(12)
    act = rng.uniform(-3.0, 0.0, size=(1, 5, 1))
    zeros = np.zeros((1, 5, 1))
    tol = np.full((1, 5, 1), align.LOGP_TOL)
    base = align.taco_loglik(act, zeros, zeros, log_final_stop=np.zeros((1, 1)))[0]
    raised = align.taco_loglik(act, tol, tol, log_final_stop=np.full((1, 1), 5e-10))[0]
    np.testing.assert_allclose(raised - base, 4 * align.LOGP_TOL + 5e-10, rtol=1e-6, atol=0)


def test_recentring_shifts_a_dead_row_by_zero():
    """spec/align.md eq. (25): c_t is the row maximum when finite and 0 for a dead row."""
    a_t = np.array([[-np.inf, -np.inf, -np.inf], [-3.0, -np.inf, 5.0], [-7.0, -np.inf, -1.0]])  # (L+1, B)
    shift = np.empty(3)
    align._recentre(a_t, shift)
    np.testing.assert_array_equal(shift, [-3.0, 0.0, 5.0])
    np.testing.assert_array_equal(a_t[1:], [[0.0, -np.inf, 0.0], [-4.0, -np.inf, -6.0]])
    dead = np.full((1, 40, 2), -1.0)
    dead[0, 20] = NEG_INF                                  # every state dies at t = 20
    with np.errstate(invalid="raise"):
        res = align.taco_forward_backward(dead, dead, dead)
    assert res.loglik[0] == NEG_INF and not np.any(res.d_act) and not np.any(np.isnan(res.d_go))


@pytest.mark.parametrize("arg", ["log_act", "log_stop", "log_go", "log_final_stop"])
def test_accepts_values_within_tolerance_above_zero(arg):
    kwargs, clean = good_taco(final=True), good_taco(final=True)
    kwargs[arg][...] = 1e-12
    clean[arg][...] = 0.0
    got, ref = align.taco_forward_backward(**kwargs), align.taco_forward_backward(**clean)
    assert np.all(np.isfinite(got.loglik))
    np.testing.assert_allclose(got.loglik, ref.loglik, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.d_act, ref.d_act, rtol=0, atol=1e-10)
    for dec in TACO_DECODERS:
        path = dec(**{k: v for k, v in kwargs.items() if k != "log_final_stop"})
        assert np.all(path[0] >= 0)                       # row 0 is full length and possible


@pytest.mark.parametrize("fn", CTC_FNS)
@pytest.mark.parametrize("bad_id", [K0, -1, 10**6])
def test_ctc_rejects_sketch_id_out_of_range(fn, bad_id):
    kwargs = good_ctc()
    kwargs["sketch"][1, 1] = bad_id                       # [b, L_b - 1]: inside the valid region
    with pytest.raises(ValueError, match="sketch"):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", CTC_FNS)
def test_ctc_accepts_any_sketch_id_in_the_padding(fn):
    kwargs, clean = good_ctc(), good_ctc()
    kwargs["sketch"][1, 2] = 10**6                        # l = L_b: padding
    clean["sketch"][1, 2] = 0
    _assert_same(getattr(align, fn)(**kwargs), getattr(align, fn)(**clean))


@pytest.mark.parametrize("fn", CTC_FNS)
@pytest.mark.parametrize("bad", [np.array([[0.0, 3.0, 1.0], [2.0, 2.0, 0.0]]), np.array([[0.5, 3, 1], [2, 2, 0]])],
                         ids=["float_dtype", "fractional"])
def test_ctc_rejects_non_integer_sketch(fn, bad):
    kwargs = good_ctc()
    kwargs["sketch"] = bad
    with pytest.raises(ValueError, match="sketch"):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", CTC_FNS)
@pytest.mark.parametrize("arg, change", [
    ("log_p", lambda kw: kw["log_p"][0]),                                       # (T, K)
    ("sketch", lambda kw: kw["sketch"][0]),                                     # (L,)
    ("sketch", lambda kw: np.concatenate([kw["sketch"], kw["sketch"][:1]])),    # (B + 1, L)
    ("traj_len", lambda kw: np.array([5, T0 + 1])),
    ("sketch_len", lambda kw: np.array([3, L0 + 1])),
    ("traj_len", lambda kw: np.array([5, 4, 3])),
], ids=["log_p_ndim", "sketch_ndim", "sketch_batch", "traj_len_range", "sketch_len_range", "traj_len_shape"])
def test_ctc_rejects_shape_mismatch(fn, arg, change):
    kwargs = good_ctc()
    kwargs[arg] = change(kwargs)
    with pytest.raises(ValueError, match=arg):
        getattr(align, fn)(**kwargs)


@pytest.mark.parametrize("fn", CTC_FNS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e-3], ids=["nan", "plus_inf", "1e-3"])
def test_ctc_rejects_bad_log_p_inside_valid_region(fn, bad):
    kwargs = good_ctc()
    kwargs["log_p"][1, 3, 2] = bad                        # t = T_b - 1, class 2 (used by row 1)
    with pytest.raises(ValueError, match="log_p"):
        getattr(align, fn)(**kwargs)


# ----------------------------------------------------------------------------------------------
# (e) determinism and smoke
# ----------------------------------------------------------------------------------------------

def _all_outputs(taco, ctc):
    out = {}
    res = align.taco_forward_backward(**taco)
    out.update({f"taco.{f}": getattr(res, f) for f in res._fields})
    out["taco_loglik"] = align.taco_loglik(**taco)
    no_final = {k: v for k, v in taco.items() if k != "log_final_stop"}
    out.update({dec.__name__: dec(**no_final) for dec in TACO_DECODERS})
    res = align.ctc_forward_backward(**ctc)
    out.update({f"ctc.{f}": getattr(res, f) for f in res._fields})
    out["ctc_loglik"] = align.ctc_loglik(**ctc)
    out.update({dec.__name__: dec(**ctc) for dec in CTC_DECODERS})
    return out


def _padded_ctc_batch():
    case = good_ctc()
    case["log_p"][1, 4] = np.nan                           # t = T_b: padding
    return case


def test_outputs_are_bit_identical_across_calls():
    taco = _padded_taco_batch(9, 3, 10, 4, traj_len=[10, 6, 2], sketch_len=[4, 3, 3])
    first, second = _all_outputs(taco, _padded_ctc_batch()), _all_outputs(taco, _padded_ctc_batch())
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_inputs_are_not_modified():
    taco = _padded_taco_batch(10, 3, 10, 4, traj_len=[10, 6, 2], sketch_len=[4, 3, 3])
    ctc = _padded_ctc_batch()
    copies = {k: np.copy(v) for k, v in {**taco, **ctc}.items()}
    for v in (*taco.values(), *ctc.values()):
        v.flags.writeable = False                          # an in-place write would raise
    _all_outputs(taco, ctc)
    for k, v in {**taco, **ctc}.items():
        np.testing.assert_array_equal(v, copies[k], err_msg=k)
        assert v.dtype == copies[k].dtype


def test_output_shapes_dtypes_and_default_lengths():
    B, T, L = 3, 7, 4
    taco = _padded_taco_batch(11, B, T, L, traj_len=[T, T, T], sketch_len=[L, L, L])
    out = _all_outputs(taco, good_ctc())
    assert out["taco.loglik"].shape == (B,) and out["taco.loglik"].dtype == np.float64
    for f in ("d_act", "d_stop", "d_go", "posterior"):
        assert out[f"taco.{f}"].shape == (B, T, L) and out[f"taco.{f}"].dtype == np.float64
    assert out["taco.d_final_stop"].shape == (B, L)
    assert out["ctc.loglik"].shape == (B0,)
    assert out["ctc.d_log_p"].shape == (B0, T0, K0) and out["ctc.posterior"].shape == (B0, T0, L0)
    for dec in TACO_DECODERS:
        assert out[dec.__name__].shape == (B, T) and out[dec.__name__].dtype == np.int64
    for dec in CTC_DECODERS:
        assert out[dec.__name__].shape == (B0, T0) and out[dec.__name__].dtype == np.int64
    # traj_len = sketch_len = None means full length
    defaults = dict(taco, traj_len=None, sketch_len=None)
    res = align.taco_forward_backward(**defaults)
    for f in res._fields:
        np.testing.assert_array_equal(getattr(res, f), out[f"taco.{f}"], err_msg=f)
