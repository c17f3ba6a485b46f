"""TACO and blank-free CTC alignment: log-likelihood, hand-derived gradients, decoders.

Implements spec/align.md; paper (Shiarlis et al., 2018) Sec. 3.3 and 4.2. Plain NumPy,
float64, no autodiff: the forward pass runs in log space, the backward pass on posteriors in
probability space (spec/align.md §8 says why both are exact).

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

from taco_ref.lengths import checked_lengths

LOGP_TOL = 1e-9
"""Largest log-probability accepted where it is read (rounding slack above 0, used as given:
nothing is clipped). Applies to log_stop, log_go, log_final_stop and log_p; log_act is a
log-density and has no upper bound (spec/align.md rule R2)."""


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
    d_log_p: np.ndarray    # (B, T, K) d loglik / d log_p, eq. (20)
    posterior: np.ndarray  # (B, T, L) P(sketch step l active at t | tau, rho)


# ----------------------------------------------------------------------------------------
# Input checking: every error names the argument and what was expected (spec/align.md §9).
# ----------------------------------------------------------------------------------------

def _as_float_array(x, name, ndim):
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array of real numbers ({err})") from None
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    return arr


def _checked(x, name, read, upper):
    """x with every entry outside `read` replaced by -inf; ValueError on a bad read entry.

    read is a boolean mask broadcastable to x (None: every entry is read). Read entries must
    not be NaN or +inf, and must be <= upper (spec/align.md §9, rule R2): upper is LOGP_TOL for
    probabilities and +inf for log_act, a log-density. Entries in (0, LOGP_TOL] are used as
    given, not clipped.
    """
    if read is not None:
        x = np.where(read, x, -np.inf)
    bad = ~(x <= upper) | (x == np.inf)  # NaN compares False, so it is caught here too
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        what = ("log-probabilities (<= 0, not NaN)" if upper < np.inf
                else "finite log-densities or -inf (not NaN, not +inf)")
        raise ValueError(f"{name} must hold {what} in the entries the recursion reads "
                         f"(spec/align.md rule R2); {name}{list(idx)} = {x[idx]!r}")
    return x


def _read_masks(traj_len, sketch_len, T, L):
    """(B, T, L) bool masks of the entries some path prefix reads, spec/align.md rule R3.

    0-based: act[t, l] is read iff l <= t; go[t, l] iff l < t; stop[t, l] iff l < t and
    l < L_b - 1; all three only for t < T_b and l < L_b. Every other entry (padding, stop and go
    at t = 0, stop at L_b - 1, cells no prefix reaches) may hold anything.
    """
    t = np.arange(T)[None, :, None]
    l = np.arange(L)[None, None, :]
    valid = (t < traj_len[:, None, None]) & (l < sketch_len[:, None, None])     # (B, T, L)
    act = valid & (l <= t)
    go = valid & (l < t)
    stop = go & (l < sketch_len[:, None, None] - 1)
    return act, stop, go


# ----------------------------------------------------------------------------------------
# The lattice: spec/align.md eq. (3)-(4); padding becomes identity steps (§4, eq. (10)).
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


RECENTRE_EVERY = 16
"""The forward pass subtracts the running maximum every this many steps (see _forward)."""


def _recentre(a_t, shift_t):
    """Subtract each row's largest log alpha_t(l) from a_t (L + 1, B), recording it in shift_t.

    A dead row (every log alpha_t(l) = -inf) is shifted by 0, spec/align.md eq. (25).
    """
    np.max(a_t[1:], axis=0, out=shift_t)
    shift_t[shift_t == -np.inf] = 0.0
    a_t[1:] -= shift_t


class _Forward(NamedTuple):
    log_alpha: np.ndarray  # (T, L + 1, B) log alpha_t(l) - c_t at index l + 1; index 0 is -inf
    shift: np.ndarray      # (T, B)        c_t - c_{t-1}: what was subtracted at step t


def _forward(lat):
    """Log forward variables, eq. (3)-(4), kept near 0 by subtracting a per-row constant c_t.

    Every RECENTRE_EVERY steps the largest log alpha_t(l) of each row is subtracted and recorded
    in shift, so log alpha_t(l) = log_alpha[t, l + 1] + sum_{s <= t} shift[s] (spec/align.md
    §8). Every state keeps its own exponent (log space), so nothing underflows; the recentring
    only keeps the stored logs small, which keeps their rounding error near 1e-16 absolute.
    """
    T, L, B = lat.stay.shape
    alpha = np.full((T, L + 1, B), -np.inf)                      # (T, L+1, B)
    shift = np.zeros((T, B))                                     # (T, B)
    alpha[0, 1] = lat.first
    from_same = np.empty((L, B))
    from_prev = np.empty((L, B))
    # iterate over per-step views (cheaper than indexing in the loop); a_prev is alpha_{t-1}
    steps = zip(range(1, T), alpha[:-1], alpha[1:], lat.stay[1:], lat.move[1:, :L], shift[1:])
    _recentre(alpha[0], shift[0])
    for t, a_prev, a_t, stay, move, shift_t in steps:
        np.add(a_prev[1:], stay, out=from_same)                 # alpha_{t-1}(l)   go act
        np.add(a_prev[:-1], move, out=from_prev)                # alpha_{t-1}(l-1) stop act
        np.logaddexp(from_same, from_prev, out=a_t[1:])
        if t % RECENTRE_EVERY == 0:
            _recentre(a_t, shift_t)
    return _Forward(alpha, shift)


def _loglik(lat, fwd):
    """log Z = log alpha_T(L) + end, eq. (5) and (8), read per row at its own L_b."""
    B = fwd.shift.shape[1]
    return fwd.log_alpha[-1, lat.sketch_len, np.arange(B)] + fwd.shift.sum(axis=0) + lat.end


def _edge_posteriors(lat, fwd):
    """P(z_{t-1} = l' | z_t = l, rho_1..t) for the two edges into (t, l), eq. (16), (T, L, B).

    r_same[t, l] is the probability that (t, l) was entered from (t-1, l), r_prev[t, l] from
    (t-1, l-1); they sum to 1 wherever alpha_t(l) > 0. Row t = 0 is unused (0).
    """
    T, L, B = lat.stay.shape
    a, c = fwd.log_alpha, fwd.shift[1:, None, :]                 # (T, L+1, B), (T-1, 1, B)
    r_same = np.zeros((T, L, B))
    r_prev = np.zeros((T, L + 1, B))                             # index L stays 0: a sentinel
    with np.errstate(invalid="ignore"):  # -inf - -inf on dead states: NaN, mapped to -inf below
        e = a[:-1, 1:] + lat.stay[1:]                            # log alpha_{t-1}(l) go act
        e -= c
        e -= a[1:, 1:]
        np.exp(np.fmax(e, -np.inf, out=e), out=r_same[1:])
        e = a[:-1, :-1] + lat.move[1:, :L]                       # log alpha_{t-1}(l-1) stop act
        e -= c
        e -= a[1:, 1:]
        np.exp(np.fmax(e, -np.inf, out=e), out=r_prev[1:, :L])
    return r_same, r_prev


def _posteriors(lat, fwd, loglik):
    """gamma, xi(l -> l+1), xi(l -> l) by backward smoothing, eq. (11)-(14) and (17).

    Runs the backward recursion on posteriors rather than on beta: gamma_{t-1}(l) =
    gamma_t(l) r_same[t, l] + gamma_t(l+1) r_prev[t, l+1]. Every quantity is a probability in
    [0, 1] and every update a sum of non-negative products, so it runs in probability space
    with no rescaling and no exponentials in the loop. Returns three (B, T, L) arrays; all are
    exactly 0 in padding and in impossible rows.
    """
    T, L, B = lat.stay.shape
    r_same, r_prev = _edge_posteriors(lat, fwd)
    gamma = np.zeros((T, L + 1, B))                              # index L stays 0: a sentinel
    xi_go = np.zeros((T, L, B))
    xi_stop = np.zeros((T, L, B))
    rows = np.nonzero(np.isfinite(loglik))[0]
    gamma[T - 1, lat.sketch_len[rows] - 1, rows] = 1.0           # every path ends at (T, L_b)
    steps = zip(gamma[:0:-1, :L], gamma[:0:-1, 1:], r_same[:0:-1], r_prev[:0:-1, 1:],
                xi_go[:0:-1], xi_stop[:0:-1], gamma[-2::-1, :L])
    for g_same, g_next, r_s, r_p, x_go, x_stop, g_prev in steps:    # t = T-1, ..., 1
        np.multiply(g_same, r_s, out=x_go)                       # P(z_{t-1} = l = z_t)
        np.multiply(g_next, r_p, out=x_stop)                     # P(z_{t-1} = l, z_t = l+1)
        np.add(x_go, x_stop, out=g_prev)                         # gamma_{t-1}(l)
    # padding steps are identity self-loops on (t, L_b - 1) with posterior 1; they are not
    # inputs, so they are zeroed (every other padding entry is 0 already)
    pad_t, pad_b = np.nonzero(np.arange(T)[:, None] >= lat.traj_len[None, :])
    gamma[pad_t, lat.sketch_len[pad_b] - 1, pad_b] = 0.0
    xi_go[pad_t, lat.sketch_len[pad_b] - 1, pad_b] = 0.0
    to_btl = (2, 0, 1)
    return (np.ascontiguousarray(gamma[:, :L].transpose(to_btl)),
            np.ascontiguousarray(xi_stop.transpose(to_btl)),
            np.ascontiguousarray(xi_go.transpose(to_btl)))


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
    traj_len = checked_lengths(traj_len, "traj_len", B, T, "T")
    sketch_len = checked_lengths(sketch_len, "sketch_len", B, L, "L")
    read_act, read_stop, read_go = _read_masks(traj_len, sketch_len, T, L)
    act = _checked(act, "log_act", read_act, np.inf)           # a log-density: any finite value
    stop = _checked(stop, "log_stop", read_stop, LOGP_TOL)
    go = _checked(go, "log_go", read_go, LOGP_TOL)
    final = None
    if log_final_stop is not None:
        final = _as_float_array(log_final_stop, "log_final_stop", 2)
        if final.shape != (B, L):
            raise ValueError(f"log_final_stop must have shape (B, L) = ({B}, {L}), got {final.shape}")
        read_final = np.arange(L)[None, :] == sketch_len[:, None] - 1                 # (B, L)
        final = _checked(final, "log_final_stop", read_final, LOGP_TOL)
    return _lattice(act, stop, go, traj_len, sketch_len, final)


def taco_loglik(log_act, log_stop, log_go, traj_len=None, sketch_len=None, log_final_stop=None):
    """log p(tau, a | s) per row: the forward recursion only.

    Implements spec/align.md eq. (3)-(5) (paper eq. for alpha_1, alpha_t and alpha_T(L)).

    Symbol         | Shape     | Meaning
    log_act        | (B, T, L) | log pi_{tau_l}(a_t | s_t); a log-density: any finite value or -inf
    log_stop       | (B, T, L) | log pi_{tau_l}(STOP | s_t), <= LOGP_TOL
    log_go         | (B, T, L) | log (1 - pi_{tau_l}(STOP | s_t)), <= LOGP_TOL; independent of
                   |           | log_stop (rule R1): their exps need not sum to 1
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

    Implements spec/align.md eq. (3)-(5) and (11)-(17): the gradient of log Z with respect
    to each log input is a posterior (occupancy gamma, transition posteriors xi), computed by
    backward smoothing in probability space. Arguments as in :func:`taco_loglik`. Returns a :class:`TacoResult`; gradients are exactly 0 in padding
    and in impossible rows.
    """
    lat = _taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, log_final_stop)
    fwd = _forward(lat)
    loglik = _loglik(lat, fwd)
    d_act, d_stop, d_go = _posteriors(lat, fwd, loglik)
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
    traj_len = checked_lengths(traj_len, "traj_len", B, T, "T")
    sketch_len = checked_lengths(sketch_len, "sketch_len", B, L, "L")
    in_sketch = np.arange(L)[None, :] < sketch_len[:, None]                  # (B, L)
    ids = np.where(in_sketch, sketch, 0)
    if ((ids < 0) | (ids >= K)).any():
        b, l = np.argwhere((ids < 0) | (ids >= K))[0]
        raise ValueError(f"sketch ids must lie in [0, K) = [0, {K}) for l < sketch_len; "
                         f"sketch[{b}, {l}] = {sketch[b, l]}")
    in_time = np.arange(T)[None, :, None] < traj_len[:, None, None]          # (B, T, 1)
    log_p = _checked(log_p, "log_p", in_time, LOGP_TOL)       # a classifier: every class is checked
    act = np.take_along_axis(log_p, ids[:, None, :], axis=2)                 # (B, T, L)
    act[~(in_time & in_sketch[:, None, :])] = -np.inf
    free = np.zeros_like(act)                                                # log stop = log go = 0
    return _lattice(act, free, free, traj_len, sketch_len, None), ids, K


def ctc_loglik(log_p, sketch, traj_len=None, sketch_len=None):
    """log p(tau | rho) of the blank-free CTC, spec/align.md eq. (18)-(19); paper Sec. 3.3.

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
    """Blank-free CTC log-likelihood and its gradient w.r.t. log_p, spec/align.md eq. (20).

    d loglik / d log_p[t, k] sums the occupancy gamma_t(l) over the sketch steps l whose class
    is k. Arguments as in :func:`ctc_loglik`. Returns a :class:`CtcResult`.
    """
    lat, ids, K = _ctc_lattice(log_p, sketch, traj_len, sketch_len)
    fwd = _forward(lat)
    loglik = _loglik(lat, fwd)
    posterior, _, _ = _posteriors(lat, fwd, loglik)                          # (B, T, L)
    B, T, L = posterior.shape
    d_log_p = np.zeros((B, T, K))
    rows = np.arange(B)
    for l in range(L):  # a class may occur at several sketch steps: accumulate
        d_log_p[rows, :, ids[:, l]] += posterior[:, :, l]
    return CtcResult(loglik, d_log_p, posterior)


# ----------------------------------------------------------------------------------------
# Decoders, spec/align.md §7: (B, T) sketch positions, -1 in padding and in impossible rows.
# ----------------------------------------------------------------------------------------

def _positions(best, lat, loglik):
    """(T, B) positions -> (B, T) with -1 where t >= T_b or the row is impossible (rule R4;
    the decoders' lattice has no terminal STOP, so f = 0 does not count, rule R5)."""
    out = best.T.astype(np.int64)                                            # (B, T)
    T = out.shape[1]
    out[np.arange(T)[None, :] >= lat.traj_len[:, None]] = -1
    out[~np.isfinite(loglik)] = -1
    return out


def _forward_argmax(lat):
    """The paper's alignment: argmax_l alpha_t(l) at each t, eq. (21)."""
    fwd = _forward(lat)
    return _positions(np.argmax(fwd.log_alpha[:, 1:], axis=1), lat, _loglik(lat, fwd))


def _posterior_argmax(lat):
    """argmax_l gamma_t(l), eq. (22)."""
    fwd = _forward(lat)
    loglik = _loglik(lat, fwd)
    gamma, _, _ = _posteriors(lat, fwd, loglik)                              # (B, T, L)
    return _positions(np.argmax(gamma, axis=2).T, lat, loglik)   # gamma itself, not log; R6


def _viterbi(lat):
    """The most probable single path, eq. (23)-(24). Returns ((B, T) positions, (B,) score)."""
    T, L, B = lat.stay.shape
    delta = np.full((T, L + 1, B), -np.inf)                                  # (T, L+1, B)
    delta[0, 1] = lat.first
    moved = np.zeros((T, L, B), dtype=bool)                                  # backpointers
    from_same = np.empty((L, B))
    from_prev = np.empty((L, B))
    for t in range(1, T):
        np.add(delta[t - 1, 1:], lat.stay[t], out=from_same)
        np.add(delta[t - 1, :-1], lat.move[t, :L], out=from_prev)
        np.greater(from_prev, from_same, out=moved[t])                       # ties: stay (R6)
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


def _forward_probabilities(lat):
    """Normalised forward variables alpha_t(l) / sum_l' alpha_t(l'), (B, T, L); 0 in padding."""
    T, L, B = lat.stay.shape
    a = _forward(lat).log_alpha[:, 1:]                                       # (T, L, B)
    with np.errstate(invalid="ignore"):  # rows with every state dead give NaN, zeroed below
        p = np.exp(a - np.logaddexp.reduce(a, axis=1, keepdims=True))
    p[~np.isfinite(p)] = 0.0
    p = np.ascontiguousarray(p.transpose(2, 0, 1))                           # (B, T, L)
    p[np.arange(T)[None, :] >= lat.traj_len[:, None]] = 0.0
    return p


def forward_probabilities(log_act, log_stop, log_go, traj_len=None, sketch_len=None):
    """p_t(l) = alpha_t(l) / sum_l' alpha_t(l'): the filtered distribution over sketch steps
    given the demonstration up to t, eq. (3)-(4) normalised. The paper plots it (its figure 3b)
    and decodes it by argmax (eq. (21)). Returns (B, T, L), 0 in padding."""
    return _forward_probabilities(_taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, None))


def ctc_forward_probabilities(log_p, sketch, traj_len=None, sketch_len=None):
    """Normalised CTC forward variables p_t(l) (B, T, L): the weights of the alpha-weighted
    CTC-BC (paper appendix C)."""
    return _forward_probabilities(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])


def align_forward_argmax(log_act, log_stop, log_go, traj_len=None, sketch_len=None):
    """TACO alignment by the paper's rule: argmax_l of the forward variables, eq. (21).

    Arguments as in :func:`taco_loglik`. Returns (B, T) int64 sketch positions; -1 for
    t >= T_b and for rows with no alignment. Not necessarily monotone (see spec).
    """
    return _forward_argmax(_taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, None))


def align_posterior_argmax(log_act, log_stop, log_go, traj_len=None, sketch_len=None):
    """TACO alignment: argmax_l of the posterior gamma_t(l), eq. (22). Returns (B, T) int64."""
    return _posterior_argmax(_taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, None))


def align_viterbi(log_act, log_stop, log_go, traj_len=None, sketch_len=None, return_score=False):
    """TACO alignment: the single most probable path, eq. (23)-(24); monotone by construction.

    Returns (B, T) int64 positions, and with return_score=True also its (B,) log-probability
    (the terminal STOP is not part of the score: it scales every complete path alike, rule R5).
    """
    path, score = _viterbi(_taco_lattice(log_act, log_stop, log_go, traj_len, sketch_len, None))
    return (path, score) if return_score else path


def ctc_align_forward_argmax(log_p, sketch, traj_len=None, sketch_len=None):
    """CTC alignment by argmax of the CTC forward variables, eq. (21) on the CTC lattice."""
    return _forward_argmax(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])


def ctc_align_posterior_argmax(log_p, sketch, traj_len=None, sketch_len=None):
    """CTC alignment by argmax of the CTC posterior, eq. (22) on the CTC lattice."""
    return _posterior_argmax(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])


def ctc_align_viterbi(log_p, sketch, traj_len=None, sketch_len=None, return_score=False):
    """CTC alignment: the single most probable path, eq. (23)-(24) on the CTC lattice."""
    path, score = _viterbi(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])
    return (path, score) if return_score else path


DECODER_NAMES = ("forward_argmax", "posterior_argmax", "viterbi")
"""The decoders, the one list (spec/align.md §7): the paper's argmax of the forward variables,
the posterior argmax and Viterbi. Tables, the CTC-BC config and the conformance kit read it."""
DECODER_LABELS = {"forward_argmax": "fwd argmax", "posterior_argmax": "posterior", "viterbi": "Viterbi"}
"""How tables name each decoder."""
DECODERS = dict(zip(DECODER_NAMES, (align_forward_argmax, align_posterior_argmax, align_viterbi)))
"""The TACO lattice's decoders by name."""
CTC_DECODERS = dict(zip(DECODER_NAMES, (ctc_align_forward_argmax, ctc_align_posterior_argmax,
                                        ctc_align_viterbi)))
"""The CTC lattice's decoders by name."""
