"""Arbitrary-precision reference for spec/align.md, for rows too long to enumerate.

brute_force.py lists every path and is limited to T <= 10. This module evaluates the same
quantities for T in the thousands with Python's ``decimal`` at PREC significant digits, in
*probability space*: Decimal's exponent range (down to 10^-999999) holds e^-40000 and smaller,
so nothing underflows and nothing needs rescaling. It is a plain transcription of the
definitions, one row at a time, 0-based, with no batching, padding, recentring or log-space
tricks, and it never imports taco_ref:

    alpha (eq. 3-4), beta (eq. 6-7), Z = alpha_T(L) f (eq. 5, 8),
    gamma = alpha beta / Z (eq. 12), xi (eq. 13-14), delta (eq. 23), argmaxes (eq. 21-22, 24).

Inputs are float64 log-values (or -inf); exp() of each is taken in Decimal, so the only
float64 rounding in the outputs is the final conversion of each result to the nearest float.
The cost is O(T L) Decimal operations (about a second for T L = 10^5).

Decoder ambiguity: with the outputs the module reports, for every element a decoder returns,
the margin between the two candidates that decide it (spec/vectors/README.md, "Ties"):
log-space for the forward argmax and Viterbi, probability for the posterior argmax. Values
that differ by less than TIE_REL relative are equal: a true tie, such as two paths whose scores
are the same sum of dyadic inputs in another order, can differ in the 50th digit after Decimal
rounding, while distinct values built from float64 inputs differ far more. Such ties are broken
by rule R6 and reported with margin 0.

Scale: "log_scale" is the largest |log alpha_t(l)| and |log beta_t(l)| over the non-zero
forward and backward variables of the row, the magnitude a log-space implementation carries
(spec/vectors/README.md, "Tolerances").
"""
import decimal
import math
from decimal import Decimal

PREC = 50
CTX = decimal.Context(prec=PREC, Emin=-999_999_999, Emax=999_999_999)
ZERO, ONE = Decimal(0), Decimal(1)
TIE_REL = Decimal("1e-40")   # relative difference below which two values are a tie (docstring)


def dexp(x):
    """exp of a float log-value as a Decimal; exp(-inf) = 0."""
    if x == -math.inf:
        return ZERO
    return CTX.exp(Decimal(x))           # Decimal(float) is exact


def dlog(x):
    """Natural log of a non-negative Decimal as a float; log 0 = -inf."""
    return -math.inf if x == 0 else float(CTX.ln(x))


def _mul(*xs):
    out = ONE
    for x in xs:
        out = CTX.multiply(out, x)
    return out


def _tie(a, b):
    """a and b (non-negative Decimals) are equal up to Decimal rounding (TIE_REL)."""
    return a == b or abs(a - b) <= TIE_REL * max(a, b)


def _log_gap(a, b):
    """|log a - log b| for non-negative Decimals (inf when exactly one is 0, nan when both are,
    0 for a tie)."""
    if a == 0 and b == 0:
        return math.nan
    if a == 0 or b == 0:
        return math.inf
    return 0.0 if _tie(a, b) else abs(float(CTX.ln(CTX.divide(a, b))))


def _top_two_gap(values, log=True):
    """Margin between the two largest entries (inf when fewer than two are non-zero)."""
    nz = sorted((v for v in values if v > 0), reverse=True)
    if len(nz) < 2:
        return math.inf
    if _tie(nz[0], nz[1]):
        return 0.0
    return _log_gap(nz[0], nz[1]) if log else float(nz[0] - nz[1])


def _first_max(values):
    """The lowest index whose value ties with the maximum (rule R6)."""
    top = max(values)
    return next(i for i, v in enumerate(values) if _tie(v, top))


def _log_scale(*tables):
    """Largest |ln x| over the non-zero entries of the tables (lists of lists of Decimals)."""
    nz = [x for table in tables for row in table for x in row if x > 0]
    if not nz:
        return 0.0
    return max(abs(float(CTX.ln(max(nz)))), abs(float(CTX.ln(min(nz)))))


def taco_exact(log_act, log_stop, log_go, log_final_stop=None):
    """Every quantity spec/align.md defines for one TACO row (nested lists (T, L) of floats).

    Returns a dict like brute_force.taco_reference (lists instead of arrays) plus
    "margins": {"forward_argmax", "posterior_argmax", "viterbi"} -> a list over t of the margin
    that decides element t of that decoder (inf where nothing competes; for Viterbi, element t
    is decided by the comparison of eq. (23) at t + 1 on the decoded path), "gaps": the smallest
    margin of each decoder, and "log_scale" (module docstring).
    Only the entries a path can read are looked at (spec/align.md rule R3).
    """
    T, L = len(log_act), len(log_act[0])
    # eq. (2)'s factors as Decimals, read only where some path prefix reads them
    act = [[dexp(log_act[t][l]) if l <= t else ZERO for l in range(L)] for t in range(T)]
    stop = [[dexp(log_stop[t][l]) if l < t and l < L - 1 else ZERO for l in range(L)] for t in range(T)]
    go = [[dexp(log_go[t][l]) if l < t else ZERO for l in range(L)] for t in range(T)]
    f = ONE if log_final_stop is None else dexp(log_final_stop[L - 1])

    # eq. (3)-(4): forward variables; delta: the same with max for sum, eq. (23)
    alpha = [[ZERO] * L for _ in range(T)]
    delta = [[ZERO] * L for _ in range(T)]
    alpha[0][0] = delta[0][0] = act[0][0]
    vit_gap = [[math.inf] * L for _ in range(T)]    # margin of the max in (23) at (t, l)
    moved = [[False] * L for _ in range(T)]         # m_t(l) of eq. (24): strictly greater
    for t in range(1, T):
        for l in range(L):
            same_a = _mul(alpha[t - 1][l], go[t][l])
            same_d = _mul(delta[t - 1][l], go[t][l])
            prev_a = _mul(alpha[t - 1][l - 1], stop[t][l - 1]) if l else ZERO
            prev_d = _mul(delta[t - 1][l - 1], stop[t][l - 1]) if l else ZERO
            alpha[t][l] = _mul(act[t][l], CTX.add(same_a, prev_a))
            delta[t][l] = _mul(act[t][l], max(same_d, prev_d))
            moved[t][l] = prev_d > same_d and not _tie(prev_d, same_d)   # ties: stay (R6)
            vit_gap[t][l] = _log_gap(same_d, prev_d)
    # eq. (6)-(7): backward variables
    beta = [[ZERO] * L for _ in range(T)]
    beta[T - 1][L - 1] = f
    for t in range(T - 1, 0, -1):
        for l in range(L):
            nxt = _mul(stop[t][l], act[t][l + 1], beta[t][l + 1]) if l + 1 < L else ZERO
            beta[t - 1][l] = CTX.add(_mul(go[t][l], act[t][l], beta[t][l]), nxt)
    Z = _mul(alpha[T - 1][L - 1], f)
    out = {"loglik": dlog(Z),
           "d_act": [[0.0] * L for _ in range(T)], "d_stop": [[0.0] * L for _ in range(T)],
           "d_go": [[0.0] * L for _ in range(T)], "d_final_stop": [0.0] * L,
           "forward_argmax": [-1] * T, "posterior_argmax": [-1] * T, "viterbi": [-1] * T,
           "viterbi_score": -math.inf, "log_scale": _log_scale(alpha, beta),
           "margins": {d: [math.inf] * T for d in ("forward_argmax", "posterior_argmax", "viterbi")}}
    out["gaps"] = {d: math.inf for d in out["margins"]}
    if Z > 0:
        for t in range(T):
            for l in range(L):
                # eq. (12)-(14): posteriors are the gradients
                out["d_act"][t][l] = float(CTX.divide(_mul(alpha[t][l], beta[t][l]), Z))
                if t:
                    out["d_go"][t][l] = float(CTX.divide(
                        _mul(alpha[t - 1][l], go[t][l], act[t][l], beta[t][l]), Z))
                    if l + 1 < L:
                        out["d_stop"][t][l] = float(CTX.divide(
                            _mul(alpha[t - 1][l], stop[t][l], act[t][l + 1], beta[t][l + 1]), Z))
        if log_final_stop is not None:
            out["d_final_stop"][L - 1] = 1.0                                    # eq. (15)
    out["posterior"] = out["d_act"]
    if alpha[T - 1][L - 1] == 0:     # the decoders take no f: impossible means alpha_T(L) = 0
        return out
    margins = out["margins"]
    for t in range(T):               # eq. (21), (22): first maximum = lowest position on ties
        a = alpha[t]
        out["forward_argmax"][t] = _first_max(a)
        margins["forward_argmax"][t] = _top_two_gap(a)
        g = [_mul(alpha[t][l], beta[t][l]) for l in range(L)]
        out["posterior_argmax"][t] = _first_max(g)
        margins["posterior_argmax"][t] = _top_two_gap([CTX.divide(x, Z) for x in g], log=False)
    z = L - 1                        # eq. (24): back-track, staying on ties
    out["viterbi_score"] = dlog(delta[T - 1][L - 1])
    for t in range(T - 1, 0, -1):
        out["viterbi"][t] = z
        margins["viterbi"][t - 1] = vit_gap[t][z]      # decides z_{t-1}
        z -= moved[t][z]
    out["viterbi"][0] = z
    out["gaps"] = {d: min(m) for d, m in margins.items()}
    return out


def ctc_exact(log_p, sketch):
    """Blank-free CTC for one row (eq. 18-20): TACO with act = log_p[:, sketch], stop = go = 0."""
    T, K = len(log_p), len(log_p[0])
    act = [[row[k] for k in sketch] for row in log_p]
    zeros = [[0.0] * len(sketch) for _ in range(T)]
    out = taco_exact(act, zeros, zeros)
    d_log_p = [[0.0] * K for _ in range(T)]
    for t in range(T):
        for l, k in enumerate(sketch):
            d_log_p[t][k] += out["d_act"][t][l]
    out["d_log_p"] = d_log_p
    for key in ("d_act", "d_stop", "d_go", "d_final_stop"):
        del out[key]
    return out
