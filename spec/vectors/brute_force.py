"""Brute-force reference for spec/align.md: enumerate every alignment path.

This module is the plainest possible statement of what the recursions in
``taco_ref/align.py`` compute. It never uses a dynamic programme: it lists all
paths, scores each one, and sums. It is exponential in T and meant for T <= 10.
The conformance vectors (``generate.py``) and the tests use it as ground truth.

One row (no batch axis, no padding): arrays have shape (T, L), 0-based indices.

A *path* z = (z_0, ..., z_{T-1}) assigns a sketch position to every time step:
z_0 = 0, z_{T-1} = L - 1, and z_t - z_{t-1} is 0 (stay) or 1 (move on).
Its log-probability (spec/align.md eq. 2) is

    sum_t log_act[t, z_t]
  + sum_{t>=1} (log_go[t, z_t]  if z_t == z_{t-1}  else  log_stop[t, z_{t-1}])
  + log_final_stop[L - 1]      (only when the terminal STOP option is used)
"""
import itertools
import math

import numpy as np


def paths(T, L):
    """Every monotone path of length T from position 0 to position L - 1."""
    if L > T:
        return
    # choose the L - 1 time steps (among 1..T-1) at which the path moves on
    for moves in itertools.combinations(range(1, T), L - 1):
        z, pos = [], 0
        for t in range(T):
            if t in moves:
                pos += 1
            z.append(pos)
        yield tuple(z)


def prefixes(t, l):
    """Every monotone prefix (z_0, ..., z_{t-1}) with z_0 = 0 and z_{t-1} = l."""
    return paths(t, l + 1)


def path_logprob(z, log_act, log_stop, log_go, log_final_stop=None):
    """Log-probability of one path (or prefix) z; eq. 2 of spec/align.md."""
    s = log_act[0, z[0]]
    for t in range(1, len(z)):
        if z[t] == z[t - 1]:
            s += log_go[t, z[t]]
        else:
            s += log_stop[t, z[t - 1]]
        s += log_act[t, z[t]]
    if log_final_stop is not None:
        s += log_final_stop[z[-1]]
    return float(s)


def _logsumexp(values):
    values = [v for v in values if v != -math.inf]
    if not values:
        return -math.inf
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def taco_reference(log_act, log_stop, log_go, log_final_stop=None):
    """Everything spec/align.md defines for one TACO row, by enumeration.

    Returns a dict with loglik, d_act, d_stop, d_go, d_final_stop, posterior,
    forward_argmax, posterior_argmax, viterbi, viterbi_score. When no path
    has non-zero probability, loglik is -inf, every gradient is 0 and every
    decoder returns -1 at every step (spec/align.md, "impossible rows").
    """
    log_act, log_stop, log_go = (np.asarray(x, dtype=float) for x in (log_act, log_stop, log_go))
    T, L = log_act.shape
    scored = [(z, path_logprob(z, log_act, log_stop, log_go, log_final_stop)) for z in paths(T, L)]
    loglik = _logsumexp([s for _, s in scored])
    out = {
        "loglik": loglik,
        "d_act": np.zeros((T, L)),
        "d_stop": np.zeros((T, L)),
        "d_go": np.zeros((T, L)),
        "d_final_stop": np.zeros(L),
        "viterbi_score": -math.inf,
        "forward_argmax": np.full(T, -1),
        "posterior_argmax": np.full(T, -1),
        "viterbi": np.full(T, -1),
    }
    if loglik == -math.inf:
        out["posterior"] = out["d_act"]
        return out
    for z, s in scored:
        w = math.exp(s - loglik)  # posterior probability of this path
        for t in range(T):
            out["d_act"][t, z[t]] += w
            if t >= 1 and z[t] == z[t - 1]:
                out["d_go"][t, z[t]] += w
            elif t >= 1:
                out["d_stop"][t, z[t - 1]] += w
    if log_final_stop is not None:
        out["d_final_stop"][L - 1] = 1.0
    out["posterior"] = out["d_act"]
    z_best, s_best = max(scored, key=lambda zs: zs[1])
    out["viterbi"] = np.array(z_best)
    out["viterbi_score"] = s_best
    out["posterior_argmax"] = np.argmax(out["d_act"], axis=1)
    # forward variables alpha_t(l): the sum over prefixes ending at (t, l), no end constraint
    for t in range(T):
        alpha = [_logsumexp([path_logprob(z, log_act, log_stop, log_go) for z in prefixes(t + 1, l)])
                 for l in range(L)]
        out["forward_argmax"][t] = int(np.argmax(alpha))
    return out


def ctc_reference(log_p, sketch):
    """Blank-free CTC for one row by enumeration: log p(sketch | rho) and its gradient.

    log_p (T, K) per-step class log-probabilities, sketch (L,) class ids.
    A path's probability is prod_t p[t, sketch[z_t]] over the same monotone
    paths as TACO (no transition weights). d_log_p[t, k] sums the posterior
    of every sketch position l with sketch[l] == k.
    """
    log_p = np.asarray(log_p, dtype=float)
    T, K = log_p.shape
    L = len(sketch)
    log_act = log_p[:, list(sketch)]
    zeros = np.zeros((T, L))
    ref = taco_reference(log_act, zeros, zeros)
    d_log_p = np.zeros((T, K))
    for l, k in enumerate(sketch):
        d_log_p[:, k] += ref["d_act"][:, l]
    ref["d_log_p"] = d_log_p
    for key in ("d_act", "d_stop", "d_go", "d_final_stop"):
        del ref[key]
    return ref
