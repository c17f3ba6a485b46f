"""TACO and blank-free CTC alignment: log-likelihood, hand-derived gradients, decoders.

Implements spec/align.md; paper (Shiarlis et al., 2018) Sec. 3.3 and 4.2. Everything here
is plain NumPy in float64 log space: no autodiff, no scaling tricks (spec/align.md, section
"Numerics", says why).

The public functions take batched, padded arrays in the layout (B, T, L) and hand back the
same layout. Internally the lattice is stored time-major with the batch innermost,
(T, L + 1, B), so that the per-step work of the recursion is three ufunc calls on contiguous
blocks (a sentinel row of -inf makes the "previous sketch position" a contiguous slice).

Symbol | Shape     | Meaning
B      |           | batch size (trajectories)
T      |           | padded trajectory length; row b uses T_b = traj_len[b]
L      |           | padded sketch length; row b uses L_b = sketch_len[b]
K      |           | number of classes (CTC)
"""
from typing import NamedTuple

import numpy as np

LOGP_TOL = 1e-9
"""Largest log-probability accepted inside the valid region (rounding slack above 0)."""


class TacoResult(NamedTuple):
    """Output of :func:`taco_forward_backward`. Gradients are of ``loglik.sum()``."""

    loglik: np.ndarray        # (B,)      log p(tau, a | s) per row; -inf if impossible
    d_act: np.ndarray         # (B, T, L) d loglik / d log_act   = gamma_t(l), eq. (12)
    d_stop: np.ndarray        # (B, T, L) d loglik / d log_stop  = xi_t(l -> l+1), eq. (13)
    d_go: np.ndarray          # (B, T, L) d loglik / d log_go    = xi_t(l -> l), eq. (14)
    posterior: np.ndarray     # (B, T, L) P(sketch step l active at t | tau, a, s) (a copy of d_act)
    d_final_stop: np.ndarray  # (B, L)    d loglik / d log_final_stop, eq. (15)


class CtcResult(NamedTuple):
    """Output of :func:`ctc_forward_backward`. Gradients are of ``loglik.sum()``."""

    loglik: np.ndarray     # (B,)      log p(tau | rho) per row; -inf if impossible
    d_log_p: np.ndarray    # (B, T, K) d loglik / d log_p, eq. (18)
    posterior: np.ndarray  # (B, T, L) P(sketch step l active at t | tau, rho)


# ----------------------------------------------------------------------------------------
# Input checking: every error names the argument and what was expected (spec/align.md §7).
# ----------------------------------------------------------------------------------------

def _as_float_array(x, name, ndim):
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array of real numbers ({err})") from None
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    return arr


def _lengths(x, name, B, bound, symbol):
    """Validated per-row lengths (B,) int64 in [1, bound]; None means bound for every row."""
    if x is None:
        return np.full(B, bound, dtype=np.int64)
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.shape != (B,):
        raise ValueError(f"{name} must have shape (B,) = ({B},), got {arr.shape}")
    if B and (arr.min() < 1 or arr.max() > bound):
        raise ValueError(f"{name} must lie in [1, {symbol}] = [1, {bound}], "
                         f"got values in [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


def _valid_mask(traj_len, sketch_len, T, L):
    """(B, T, L) bool: True where t < T_b and l < L_b; None when every row is full."""
    if (traj_len == T).all() and (sketch_len == L).all():
        return None
    in_t = np.arange(T)[None, :, None] < traj_len[:, None, None]
    in_l = np.arange(L)[None, None, :] < sketch_len[:, None, None]
    return in_t & in_l


def _checked_logp(x, name, valid):
    """x with padding replaced by -inf; ValueError if the valid region holds NaN, +inf or > 0.

    valid is a boolean mask broadcastable to x, or None when nothing is padding.
    """
    if valid is not None:
        x = np.where(valid, x, -np.inf)
    bad = ~(x <= LOGP_TOL)  # NaN compares False, so it is caught here too
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} must hold log-probabilities (<= 0, not NaN) inside the valid "
                         f"region t < traj_len, l < sketch_len; {name}{list(idx)} = {x[idx]!r}")
    return x


# ----------------------------------------------------------------------------------------
# The lattice: eq. (3)-(4) of spec/align.md, with padding turned into identity steps (§5).
# ----------------------------------------------------------------------------------------

class _Lattice(NamedTuple):
    first: np.ndarray     # (B,)          log alpha_1(1) = log act[1, 1], eq. (3)
    stay: np.ndarray      # (T, L, B)     log go[t, l] + log act[t, l]: edge (t-1, l) -> (t, l)
    move: np.ndarray      # (T, L + 1, B) at index l: log stop[t, l-1] + log act[t, l], edge
                          #               (t-1, l-1) -> (t, l); -inf at l = 0 and l = L
    end: np.ndarray       # (B,)          log weight of the end state: 0 or log_final_stop
    traj_len: np.ndarray  # (B,)
    sketch_len: np.ndarray  # (B,)


def _lattice(act, stop, go, traj_len, sketch_len, final_stop):
    """Build the lattice from checked (B, T, L) inputs whose padding is -inf.

    Padding becomes transparent (spec/align.md eq. (10)): after T_b the only edge left is the
    self-loop on the end state L_b - 1 with log weight 0, so alpha_T(L_b) = alpha_{T_b}(L_b) and
    beta_{T_b}(l) = [l = L_b] exactly, and one recursion serves every row.
    """
    B, T, L = act.shape
    to_tlb = (1, 2, 0)
    act_t = act.transpose(to_tlb)                                       # (T, L, B)
    stay = np.add(go.transpose(to_tlb), act_t)                          # (T, L, B)
    move = np.full((T, L + 1, B), -np.inf)                              # (T, L+1, B)
    np.add(stop.transpose(to_tlb)[:, :-1], act_t[:, 1:], out=move[:, 1:L])
    t_idx = np.arange(T)[:, None]
    pad_t = t_idx >= traj_len[None, :]                                  # (T, B)
    rows = np.nonzero(pad_t)
    stay[rows[0], sketch_len[rows[1]] - 1, rows[1]] = 0.0               # identity self-loop
    first = act[:, 0, 0].copy()
    end = np.zeros(B) if final_stop is None else final_stop[np.arange(B), sketch_len - 1]
    return _Lattice(first, stay, move, end, traj_len, sketch_len)


def _forward(lat):
    """Log forward variables, eq. (3)-(4). Returns (T, L + 1, B); row 0 of axis 1 is -inf."""
    T, L, B = lat.stay.shape
    alpha = np.full((T, L + 1, B), -np.inf)                     # (T, L+1, B); alpha[:, l+1] = log alpha(l)
    alpha[0, 1] = lat.first
    from_same = np.empty((L, B))
    from_prev = np.empty((L, B))
    for t in range(1, T):
        np.add(alpha[t - 1, 1:], lat.stay[t], out=from_same)   # alpha_{t-1}(l)   go act
        np.add(alpha[t - 1, :-1], lat.move[t, :L], out=from_prev)  # alpha_{t-1}(l-1) stop act
        np.logaddexp(from_same, from_prev, out=alpha[t, 1:])
    return alpha


def _backward(lat):
    """Log backward variables, eq. (6)-(7). Returns (T, L + 1, B); row L of axis 1 is -inf."""
    T, L, B = lat.stay.shape
    beta = np.full((T, L + 1, B), -np.inf)                      # (T, L+1, B); beta[:, l] = log beta(l)
    beta[T - 1, lat.sketch_len - 1, np.arange(B)] = lat.end
    to_same = np.empty((L, B))
    to_next = np.empty((L, B))
    for t in range(T - 1, 0, -1):
        np.add(beta[t, :L], lat.stay[t], out=to_same)           # go[t, l] act[t, l] beta_t(l)
        np.add(beta[t, 1:], lat.move[t, 1:], out=to_next)       # stop[t, l] act[t, l+1] beta_t(l+1)
        np.logaddexp(to_same, to_next, out=beta[t - 1, :L])
    return beta


def _loglik(lat, alpha):
    """log Z = log alpha_T(L) + end, eq. (5), read per row at its own L_b."""
    B = alpha.shape[2]
    return alpha[-1, lat.sketch_len, np.arange(B)] + lat.end


def _gradients(lat, alpha, beta, loglik):
    """Posteriors = gradients w.r.t. the log inputs, eq. (12)-(14), each returned as (B, T, L).

    Returns (gamma, xi_stop, xi_go). gamma_t(l) for t >= 2 is assembled from the transition
    posteriors by eq. (11), gamma_t(l) = xi_t(l -> l) + xi_t(l-1 -> l), which saves one pass
    of exponentials over the lattice; gamma_1 is computed directly from eq. (12).
    """
    T, L, B = lat.stay.shape
    # An impossible row has alpha_t(l) beta_t(l) = 0 everywhere, so any finite stand-in for
    # log Z gives the documented zero gradient instead of exp(-inf - -inf) = NaN.
    log_z = np.where(np.isfinite(loglik), loglik, 0.0)                   # (B,)
    xi_stop = np.zeros((B, T, L))
    xi_go = np.zeros((B, T, L))
    gamma = np.empty((B, T, L))
    gamma[:, 0] = np.exp(alpha[0, 1:] + beta[0, :L] - log_z).T          # gamma_1(l), eq. (12)
    if T > 1:
        alpha_z = alpha[:-1, 1:] - log_z                                 # (T-1, L, B) alpha_{t-1}(l) / Z
        # xi_t(l -> l)   = alpha_{t-1}(l) go[t, l] act[t, l] beta_t(l) / Z,        eq. (14)
        np.exp(alpha_z + lat.stay[1:] + beta[1:, :L], out=xi_go[:, 1:].transpose(1, 2, 0))
        # xi_t(l -> l+1) = alpha_{t-1}(l) stop[t, l] act[t, l+1] beta_t(l+1) / Z, eq. (13)
        alpha_z += lat.move[1:, 1:]
        alpha_z += beta[1:, 1:]
        np.exp(alpha_z, out=xi_stop[:, 1:].transpose(1, 2, 0))
        # padding steps are identity self-loops on (t, L_b - 1) with posterior 1; they are not
        # inputs, so they are zeroed (every other padding entry is exp(-inf) = 0 already)
        pad_t, pad_b = np.nonzero(np.arange(T)[:, None] >= lat.traj_len[None, :])
        xi_go[pad_b, pad_t, lat.sketch_len[pad_b] - 1] = 0.0
        np.add(xi_go[:, 1:], 0.0, out=gamma[:, 1:])                      # eq. (11)
        gamma[:, 1:, 1:] += xi_stop[:, 1:, :-1]
    return gamma, xi_stop, xi_go


# ----------------------------------------------------------------------------------------
# TACO
# ----------------------------------------------------------------------------------------

def _taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, log_final_stop):
    act = _as_float_array(log_act, "log_act", 3)
    B, T, L = act.shape
    if T < 1 or L < 1:
        raise ValueError(f"log_act must have T >= 1 and L >= 1, got shape {act.shape}")
    stop = _as_float_array(log_stop, "log_stop", 3)
    go = _as_float_array(log_go, "log_go", 3)
    for name, arr in (("log_stop", stop), ("log_go", go)):
        if arr.shape != act.shape:
            raise ValueError(f"{name} must have the shape of log_act (B, T, L) = {act.shape}, "
                             f"got {arr.shape}")
    traj_len = _lengths(traj_len, "traj_len", B, T, "T")
    sketch_len = _lengths(sketch_len, "sketch_len", B, L, "L")
    valid = _valid_mask(traj_len, sketch_len, T, L)
    act = _checked_logp(act, "log_act", valid)
    stop = _checked_logp(stop, "log_stop", valid)
    go = _checked_logp(go, "log_go", valid)
    final = None
    if log_final_stop is not None:
        final = _as_float_array(log_final_stop, "log_final_stop", 2)
        if final.shape != (B, L):
            raise ValueError(f"log_final_stop must have shape (B, L) = ({B}, {L}), got {final.shape}")
        final = _checked_logp(final, "log_final_stop", None if valid is None else valid[:, 0, :])
    return _lattice(act, stop, go, traj_len, sketch_len, final)


def taco_loglik(log_act, log_stop, log_go, traj_len=None, sketch_len=None, log_final_stop=None):
    """log p(tau, a | s) per row: the forward recursion only.

    Implements spec/align.md eq. (3)-(5) (paper eq. for alpha_1, alpha_t and alpha_T(L)).

    Symbol         | Shape     | Meaning
    log_act        | (B, T, L) | log pi_{tau_l}(a_t | s_t)
    log_stop       | (B, T, L) | log pi_{tau_l}(STOP | s_t)
    log_go         | (B, T, L) | log (1 - pi_{tau_l}(STOP | s_t))
    traj_len       | (B,) int  | T_b in [1, T]; None means T
    sketch_len     | (B,) int  | L_b in [1, L]; None means L
    log_final_stop | (B, L)    | optional terminal STOP, eq. (8): log pi_{tau_l}(STOP | s_final)
    returns        | (B,)      | loglik; -inf where no alignment exists (L_b > T_b)
    """
    lat = _taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, log_final_stop)
    return _loglik(lat, _forward(lat))


def taco_forward_backward(log_act, log_stop, log_go, traj_len=None, sketch_len=None,
                          log_final_stop=None):
    """Log-likelihood and its exact gradients from the forward-backward recursion.

    Implements spec/align.md eq. (3)-(7) and (12)-(15): the gradient of log Z with respect
    to each log input is a posterior (occupancy gamma, transition posteriors xi). Arguments as
    in :func:`taco_loglik`. Returns a :class:`TacoResult`; gradients are exactly 0 in padding
    and in impossible rows.
    """
    lat = _taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, log_final_stop)
    alpha, beta = _forward(lat), _backward(lat)
    loglik = _loglik(lat, alpha)
    d_act, d_stop, d_go = _gradients(lat, alpha, beta, loglik)
    B, L = loglik.shape[0], d_act.shape[2]
    d_final = np.zeros((B, L))
    if log_final_stop is not None:
        rows = np.isfinite(loglik)
        d_final[rows, lat.sketch_len[rows] - 1] = 1.0
    return TacoResult(loglik, d_act, d_stop, d_go, d_act.copy(), d_final)


# ----------------------------------------------------------------------------------------
# Blank-free CTC: TACO's lattice with log_act gathered from log_p and free transitions.
# ----------------------------------------------------------------------------------------

def _ctc_lattice(log_p, sketch, traj_len, sketch_len):
    log_p = _as_float_array(log_p, "log_p", 3)
    B, T, K = log_p.shape
    if T < 1 or K < 1:
        raise ValueError(f"log_p must have T >= 1 and K >= 1, got shape {log_p.shape}")
    sketch = np.asarray(sketch)
    if sketch.dtype.kind not in "iu":
        raise ValueError(f"sketch must hold integer class ids, got dtype {sketch.dtype}")
    if sketch.ndim != 2 or sketch.shape[0] != B or sketch.shape[1] < 1:
        raise ValueError(f"sketch must have shape (B, L) with B = {B} and L >= 1, got {sketch.shape}")
    L = sketch.shape[1]
    traj_len = _lengths(traj_len, "traj_len", B, T, "T")
    sketch_len = _lengths(sketch_len, "sketch_len", B, L, "L")
    in_sketch = np.arange(L)[None, :] < sketch_len[:, None]                  # (B, L)
    ids = np.where(in_sketch, sketch, 0)
    if ((ids < 0) | (ids >= K)).any():
        b, l = np.argwhere((ids < 0) | (ids >= K))[0]
        raise ValueError(f"sketch ids must lie in [0, K) = [0, {K}) for l < sketch_len; "
                         f"sketch[{b}, {l}] = {sketch[b, l]}")
    in_time = np.arange(T)[None, :, None] < traj_len[:, None, None]          # (B, T, 1)
    log_p = _checked_logp(log_p, "log_p", in_time)
    act = np.take_along_axis(log_p, ids[:, None, :], axis=2)                 # (B, T, L)
    act[~(in_time & in_sketch[:, None, :])] = -np.inf
    free = np.zeros_like(act)                                                # log stop = log go = 0
    return _lattice(act, free, free, traj_len, sketch_len, None), ids, K


def ctc_loglik(log_p, sketch, traj_len=None, sketch_len=None):
    """log p(tau | rho) of the blank-free CTC, spec/align.md eq. (16)-(17); paper Sec. 3.3.

    Symbol     | Shape     | Meaning
    log_p      | (B, T, K) | log p(class k | rho_t) per step
    sketch     | (B, L)    | class id of each sketch step (padding may hold anything)
    traj_len   | (B,) int  | T_b in [1, T]; None means T
    sketch_len | (B,) int  | L_b in [1, L]; None means L
    returns    | (B,)      | loglik; -inf where no alignment exists (L_b > T_b)
    """
    lat, _, _ = _ctc_lattice(log_p, sketch, traj_len, sketch_len)
    return _loglik(lat, _forward(lat))


def ctc_forward_backward(log_p, sketch, traj_len=None, sketch_len=None):
    """Blank-free CTC log-likelihood and its gradient w.r.t. log_p, spec/align.md eq. (18).

    d loglik / d log_p[t, k] sums the occupancy gamma_t(l) over the sketch steps l whose class
    is k. Arguments as in :func:`ctc_loglik`. Returns a :class:`CtcResult`.
    """
    lat, ids, K = _ctc_lattice(log_p, sketch, traj_len, sketch_len)
    alpha, beta = _forward(lat), _backward(lat)
    loglik = _loglik(lat, alpha)
    posterior, _, _ = _gradients(lat, alpha, beta, loglik)                   # (B, T, L)
    B, T, L = posterior.shape
    d_log_p = np.zeros((B, T, K))
    rows = np.arange(B)
    for l in range(L):  # a class may occur at several sketch steps: accumulate
        d_log_p[rows, :, ids[:, l]] += posterior[:, :, l]
    return CtcResult(loglik, d_log_p, posterior)


# ----------------------------------------------------------------------------------------
# Decoders, spec/align.md §6: (B, T) sketch positions, -1 in padding and in impossible rows.
# ----------------------------------------------------------------------------------------

def _positions(best, lat, loglik):
    """(T, B) positions -> (B, T) with -1 where t >= T_b or the row is impossible."""
    out = best.T.astype(np.int64)                                            # (B, T)
    T = out.shape[1]
    out[np.arange(T)[None, :] >= lat.traj_len[:, None]] = -1
    out[~np.isfinite(loglik)] = -1
    return out


def _forward_argmax(lat):
    """The paper's alignment: argmax_l alpha_t(l) at each t, eq. (19)."""
    alpha = _forward(lat)
    return _positions(np.argmax(alpha[:, 1:], axis=1), lat, _loglik(lat, alpha))


def _posterior_argmax(lat):
    """argmax_l gamma_t(l), eq. (20); compared in log space (alpha beta), no exponentials."""
    alpha, beta = _forward(lat), _backward(lat)
    L = lat.stay.shape[1]
    return _positions(np.argmax(alpha[:, 1:] + beta[:, :L], axis=1), lat, _loglik(lat, alpha))


def _viterbi(lat):
    """The most probable single path, eq. (21)-(22). Returns ((B, T) positions, (B,) score)."""
    T, L, B = lat.stay.shape
    delta = np.full((T, L + 1, B), -np.inf)                                  # (T, L+1, B)
    delta[0, 1] = lat.first
    moved = np.zeros((T, L, B), dtype=bool)                                  # backpointers
    from_same = np.empty((L, B))
    from_prev = np.empty((L, B))
    for t in range(1, T):
        np.add(delta[t - 1, 1:], lat.stay[t], out=from_same)
        np.add(delta[t - 1, :-1], lat.move[t, :L], out=from_prev)
        np.greater(from_prev, from_same, out=moved[t])                       # ties: stay
        np.maximum(from_same, from_prev, out=delta[t, 1:])
    rows = np.arange(B)
    score = delta[-1, lat.sketch_len, rows] + lat.end
    path = np.empty((T, B), dtype=np.int64)
    pos = lat.sketch_len - 1
    for t in range(T - 1, 0, -1):
        path[t] = pos
        pos = np.maximum(pos - moved[t, pos, rows], 0)  # the floor only matters in impossible rows
    path[0] = pos
    return _positions(path, lat, score), score


def align_forward_argmax(log_act, log_stop, log_go, traj_len=None, sketch_len=None):
    """TACO alignment by the paper's rule: argmax_l of the forward variables, eq. (19).

    Arguments as in :func:`taco_loglik`. Returns (B, T) int64 sketch positions; -1 for
    t >= T_b and for rows with no alignment. Not necessarily monotone (see spec).
    """
    return _forward_argmax(_taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, None))


def align_posterior_argmax(log_act, log_stop, log_go, traj_len=None, sketch_len=None):
    """TACO alignment: argmax_l of the posterior gamma_t(l), eq. (20). Returns (B, T) int64."""
    return _posterior_argmax(_taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, None))


def align_viterbi(log_act, log_stop, log_go, traj_len=None, sketch_len=None, return_score=False):
    """TACO alignment: the single most probable path, eq. (21)-(22); monotone by construction.

    Returns (B, T) int64 positions, and with return_score=True also its (B,) log-probability
    (the terminal STOP is not part of the score: it scales every complete path alike).
    """
    path, score = _viterbi(_taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, None))
    return (path, score) if return_score else path


def ctc_align_forward_argmax(log_p, sketch, traj_len=None, sketch_len=None):
    """CTC alignment by argmax of the CTC forward variables, eq. (19) on the CTC lattice."""
    return _forward_argmax(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])


def ctc_align_posterior_argmax(log_p, sketch, traj_len=None, sketch_len=None):
    """CTC alignment by argmax of the CTC posterior, eq. (20) on the CTC lattice."""
    return _posterior_argmax(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])


def ctc_align_viterbi(log_p, sketch, traj_len=None, sketch_len=None, return_score=False):
    """CTC alignment: the single most probable path, eq. (21)-(22) on the CTC lattice."""
    path, score = _viterbi(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])
    return (path, score) if return_score else path
