"""The conformance kit against one-bug variants of taco_ref.align (a mutation suite).

Each variant is built here, at test time, from taco_ref/align.py: either by editing its source
text (every edit must match exactly once, so a refactor of align.py fails loudly instead of
silently testing nothing) and executing the result as a fresh module, or by wrapping the
correct functions. Each is one mistake an implementer could make. A variant that changes a
value the spec documents must be rejected by the kit, on the case named for it, and the report
must name the rule or equation that case catches it by; a variant that preserves every
documented value (a different recentring period, another evaluation order, an independent
textbook implementation, changes within the tolerance, input validation, which the vectors do
not test) must pass. spec/vectors/README.md ("What the kit catches") lists both kinds.
"""
import ast
import types
from pathlib import Path

import numpy as np
import pytest

from taco_ref import align, conformance

SOURCE = Path(align.__file__).read_text(encoding="utf-8")
LOADED = conformance.load()
CASES = {case["name"]: (case, quantities) for case, _, quantities in LOADED}


def _function_source(name):
    """The source text of the module-level function `name` of taco_ref/align.py."""
    node = next(n for n in ast.parse(SOURCE).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return "\n".join(SOURCE.splitlines()[node.lineno - 1:node.end_lineno]) + "\n"


def edited(name, edits, append=""):
    """A module built from taco_ref/align.py with each (old, new) edit applied once, then
    `append` (code that may redefine functions) executed after it."""
    src = SOURCE
    for old, new in edits:
        assert src.count(old) == 1, f"{name}: {old!r} occurs {src.count(old)} times in taco_ref/align.py"
        src = src.replace(old, new)
    module = types.ModuleType(f"align_{name}")
    exec(compile(src + append, f"<align variant {name}>", "exec"), module.__dict__)
    return module


def ctc_only(name, function, old, new, public, private):
    """A variant whose CTC decoder `public` uses a copy of `function` with one edit (the TACO
    decoder keeps the correct one): a bug in a port that implements CTC separately."""
    body = _function_source(function)
    assert body.count(old) == 1, f"{name}: {old!r} occurs {body.count(old)} times in {function}"
    body = body.replace(old, new).replace(f"def {function}(", f"def {private}(", 1)
    wrapper = (f"def {public}(log_p, sketch, traj_len=None, sketch_len=None, **kw):\n"
               f"    out = {private}(_ctc_lattice(log_p, sketch, traj_len, sketch_len)[0])\n"
               f"    if isinstance(out, tuple):\n"
               f"        return out if kw.get('return_score') else out[0]\n"
               f"    return out\n")
    return edited(name, [], "\n" + body + "\n" + wrapper)


def wrapped(name, **functions):
    """taco_ref.align with some public functions replaced."""
    module = types.ModuleType(f"align_{name}")
    module.__dict__.update({k: getattr(align, k) for k in dir(align) if not k.startswith("__")})
    module.__dict__.update(functions)
    return module


# ------------------------------------------------------------------------------ wrapped bugs

def _lengths(shape, traj_len, sketch_len):
    B, T, L = shape
    return (np.full(B, T) if traj_len is None else np.asarray(traj_len),
            np.full(B, L) if sketch_len is None else np.asarray(sketch_len))


def _tiny_taco(where):
    """taco_forward_backward adding 1e-13 to d_act and posterior (or d_stop) where where(...)
    says: a gradient that should be exactly 0 but comes out of a sum of rounded terms."""
    def fb(log_act, log_stop, log_go, traj_len=None, sketch_len=None, log_final_stop=None):
        res = align.taco_forward_backward(log_act, log_stop, log_go, traj_len, sketch_len, log_final_stop)
        T_b, L_b = _lengths(np.shape(log_act), traj_len, sketch_len)
        key, mask = where(res, T_b, L_b)
        bumped = getattr(res, key) + 1e-13 * mask
        return res._replace(**{key: bumped}, **({"posterior": bumped} if key == "d_act" else {}))
    return fb


def _never_read_stop(res, T_b, L_b):
    """d_stop at t = 0 inside the valid block of possible rows: stop is never read there."""
    mask = np.zeros(res.d_stop.shape)
    for b in np.nonzero(np.isfinite(res.loglik))[0]:
        mask[b, 0, :L_b[b]] = 1
    return "d_stop", mask


def _impossible_rows(res, T_b, L_b):
    """d_act inside the valid block of impossible rows."""
    mask = np.zeros(res.d_act.shape)
    for b in np.nonzero(~np.isfinite(res.loglik))[0]:
        mask[b, :T_b[b], :L_b[b]] = 1
    return "d_act", mask


def _off_path(res, T_b, L_b):
    """d_act at read cells of possible rows from which (T_b, L_b) cannot be reached in time."""
    B, T, L = res.d_act.shape
    t, l = np.arange(T)[:, None], np.arange(L)[None, :]
    mask = np.zeros(res.d_act.shape)
    for b in np.nonzero(np.isfinite(res.loglik))[0]:
        mask[b] = (t < T_b[b]) & (l <= t) & (l < L_b[b] - (T_b[b] - t))
    return "d_act", mask


def _tiny_absent_class(log_p, sketch, traj_len=None, sketch_len=None):
    """ctc_forward_backward adding 1e-13 to d_log_p of classes absent from the sketch."""
    res = align.ctc_forward_backward(log_p, sketch, traj_len, sketch_len)
    T_b, L_b = _lengths(np.shape(log_p)[:2] + (np.shape(sketch)[1],), traj_len, sketch_len)
    d = res.d_log_p.copy()
    for b in np.nonzero(np.isfinite(res.loglik))[0]:
        absent = np.setdiff1d(np.arange(d.shape[2]), np.asarray(sketch)[b, :L_b[b]])
        d[b, :T_b[b], absent] += 1e-13
    return res._replace(d_log_p=d)


def _scaled_loglik(log_act, log_stop, log_go, traj_len=None, sketch_len=None, log_final_stop=None):
    """log Z by the scaled probability-space forward recursion of Graves et al. (the paper's
    choice): alpha_t renormalised to sum 1 at every step, log Z the sum of the log normalisers.
    A state below 2^-1074 of its row's largest is lost (spec/align.md §8)."""
    log_act, log_stop, log_go = (np.asarray(x, float) for x in (log_act, log_stop, log_go))
    B, T, L = log_act.shape
    T_b, L_b = _lengths(log_act.shape, traj_len, sketch_len)
    out = np.full(B, -np.inf)
    for b in range(B):
        Tb, Lb = T_b[b], L_b[b]
        if Lb > Tb:
            continue
        t, l = np.arange(Tb)[:, None], np.arange(Lb)[None, :]
        act = np.where(l <= t, np.exp(log_act[b, :Tb, :Lb]), 0.0)
        go = np.where(l < t, np.exp(log_go[b, :Tb, :Lb]), 0.0)
        stop = np.where((l < t) & (l < Lb - 1), np.exp(log_stop[b, :Tb, :Lb]), 0.0)
        alpha, total = np.zeros(Lb), 0.0
        alpha[0] = act[0, 0]
        for s in range(Tb):
            if s:
                alpha = act[s] * (alpha * go[s] + np.concatenate(([0.0], alpha[:-1] * stop[s, :-1])))
            norm = alpha.sum()
            if norm == 0:
                total = -np.inf
                break
            alpha, total = alpha / norm, total + np.log(norm)
        with np.errstate(divide="ignore"):
            out[b] = total + np.log(alpha[-1])
        if log_final_stop is not None:
            out[b] += log_final_stop[b][Lb - 1]
    return out


def _scaled_forward_backward(*args, **kwargs):
    return align.taco_forward_backward(*args, **kwargs)._replace(loglik=_scaled_loglik(*args, **kwargs))


def _within_tolerance(*args, **kwargs):
    """Every gradient and posterior scaled by 1 + 1e-13: inside rtol = 1e-12, zeros untouched."""
    res = align.taco_forward_backward(*args, **kwargs)
    scale = 1 + 1e-13
    return res._replace(d_act=res.d_act * scale, d_stop=res.d_stop * scale, d_go=res.d_go * scale,
                        posterior=res.posterior * scale)


# ------------------------------------------------------------------------------ an independent implementation

def _textbook_row(act, stop, go, T_b, L_b, log_f):
    """The textbook log-space forward-backward for one row: log alpha and log beta by (4) and
    (7) with logaddexp, no recentring, posteriors exp(log alpha + log beta - log Z)."""
    T, L = act.shape
    act, stop, go = act[:T_b, :L_b].copy(), stop[:T_b, :L_b].copy(), go[:T_b, :L_b].copy()
    t, l = np.arange(T_b)[:, None], np.arange(L_b)[None, :]
    act[l > t] = -np.inf                      # entries no path reads (R3) may hold anything
    go[(l >= t)] = -np.inf
    stop[(l >= t) | (l == L_b - 1)] = -np.inf
    a = np.full((T_b, L_b), -np.inf)
    a[0, 0] = act[0, 0]
    for s in range(1, T_b):
        prev = np.concatenate(([-np.inf], a[s - 1, :-1] + stop[s, :-1]))
        a[s] = act[s] + np.logaddexp(a[s - 1] + go[s], prev)
    b = np.full((T_b, L_b), -np.inf)
    b[-1, -1] = log_f
    for s in range(T_b - 1, 0, -1):
        nxt = np.concatenate((stop[s, :-1] + act[s, 1:] + b[s, 1:], [-np.inf]))
        b[s - 1] = np.logaddexp(go[s] + act[s] + b[s], nxt)
    log_z = a[-1, -1] + log_f
    grads = [np.zeros((T, L)) for _ in range(3)]
    if np.isfinite(log_z):
        with np.errstate(invalid="ignore"):    # -inf + inf never happens: no entry is +inf
            grads[0][:T_b, :L_b] = np.exp(a + b - log_z)
            grads[1][1:T_b, :L_b - 1] = np.exp(a[:-1, :-1] + stop[1:, :-1] + act[1:, 1:] + b[1:, 1:] - log_z)
            grads[2][1:T_b, :L_b] = np.exp(a[:-1] + go[1:] + act[1:] + b[1:] - log_z)
    return log_z, grads


def _textbook_forward_backward(log_act, log_stop, log_go, traj_len=None, sketch_len=None,
                               log_final_stop=None):
    log_act, log_stop, log_go = (np.asarray(x, float) for x in (log_act, log_stop, log_go))
    B, T, L = log_act.shape
    T_b, L_b = _lengths(log_act.shape, traj_len, sketch_len)
    loglik, d = np.zeros(B), [np.zeros((B, T, L)) for _ in range(3)]
    d_final = np.zeros((B, L))
    for b in range(B):
        log_f = 0.0 if log_final_stop is None else float(log_final_stop[b][L_b[b] - 1])
        if L_b[b] > T_b[b]:
            loglik[b] = -np.inf
            continue
        loglik[b], grads = _textbook_row(log_act[b], log_stop[b], log_go[b], T_b[b], L_b[b], log_f)
        for k in range(3):
            d[k][b] = grads[k]
        if log_final_stop is not None and np.isfinite(loglik[b]):
            d_final[b, L_b[b] - 1] = 1.0
    return align.TacoResult(loglik, d[0], d[1], d[2], d[0].copy(), d_final)


def _textbook_ctc(log_p, sketch, traj_len=None, sketch_len=None):
    log_p, sketch = np.asarray(log_p, float), np.asarray(sketch)
    B, T, K = log_p.shape
    T_b, L_b = _lengths((B, T, sketch.shape[1]), traj_len, sketch_len)
    ids = np.where(np.arange(sketch.shape[1])[None] < L_b[:, None], sketch, 0)
    act = np.take_along_axis(log_p, ids[:, None, :], axis=2)                 # (B, T, L)
    free = np.zeros_like(act)
    res = _textbook_forward_backward(act, free, free, traj_len, sketch_len)
    d = np.zeros((B, T, K))
    for b in range(B):
        for l in range(L_b[b]):
            d[b, :, ids[b, l]] += res.d_act[b, :, l]
    return align.CtcResult(res.loglik, d, res.posterior)


TEXTBOOK = wrapped("textbook", taco_forward_backward=_textbook_forward_backward,
                   taco_loglik=lambda *a, **k: _textbook_forward_backward(*a, **k).loglik,
                   ctc_forward_backward=_textbook_ctc,
                   ctc_loglik=lambda *a, **k: _textbook_ctc(*a, **k).loglik)


# ------------------------------------------------------------------------------ the variants

S = edited   # short names keep the table readable
BUGS = {
    # name: (variant, a case that must catch it, the rule or equation the report must name there)
    # --- input handling (rules R1, R2, R3)
    "unread_entries_validated": (S("a", [("        x = np.where(read, x, -np.inf)\n", "        pass\n")]),
                                 "taco_mixed_padding_garbage", "eq. (5), (8)"),
    "stop_read_at_last_position": (S("b", [("    stop = go & (l < sketch_len[:, None, None] - 1)", "    stop = go")]),
                                   "taco_never_read_garbage", "eq. (5), (8)"),
    "go_read_on_the_diagonal": (S("c", [("    go = valid & (l < t)", "    go = valid & (l <= t)")]),
                                "taco_never_read_garbage", "eq. (5), (8)"),
    "no_logp_tolerance": (S("d", [("LOGP_TOL = 1e-9\n", "LOGP_TOL = 0.0\n")]),
                          "taco_logp_tol_as_given", "eq. (5), (8)"),
    "stop_clipped_to_zero": (S("e", [('    stop = _checked(stop, "log_stop", read_stop, LOGP_TOL)',
                                      '    stop = np.minimum(_checked(stop, "log_stop", read_stop, LOGP_TOL), 0.0)')]),
                             "taco_logp_tol_as_given", "eq. (5), (8)"),
    "log_act_bounded_like_a_probability": (S("f", [('read_act, np.inf)', 'read_act, LOGP_TOL)')]),
                                           "taco_log_act_density", "eq. (5), (8)"),
    "go_derived_from_stop": (S("g", [('    go = _checked(go, "log_go", read_go, LOGP_TOL)',
                                      '    go = _checked(np.log1p(-np.exp(stop)), "log_go", read_go, LOGP_TOL)')]),
                             "taco_stop_go_independent", "eq. (14)"),
    # --- the lattice (eq. (2)-(4), (8), (10))
    "stop_and_go_swapped": (S("h", [("    stay = np.add(go.transpose(to_tlb), act_t)", "    stay = np.add(stop.transpose(to_tlb), act_t)"),
                                    ("    np.add(stop.transpose(to_tlb)[:, :-1], act_t", "    np.add(go.transpose(to_tlb)[:, :-1], act_t")]),
                            "taco_random_full", "eq. (5), (8)"),
    "stop_of_the_new_position": (S("i", [("stop.transpose(to_tlb)[:, :-1]", "stop.transpose(to_tlb)[:, 1:]")]),
                                 "taco_random_full", "eq. (5), (8)"),
    "move_uses_act_of_the_old_position": (S("j", [("act_t[:, 1:], out=move[:, 1:L]", "act_t[:, :-1], out=move[:, 1:L]")]),
                                          "taco_random_full", "eq. (5), (8)"),
    "stop_one_step_early": (S("k", [("    np.add(stop.transpose(to_tlb)[:, :-1]", "    np.add(np.roll(stop.transpose(to_tlb), 1, axis=0)[:, :-1]")]),
                            "taco_random_full", "eq. (5), (8)"),
    "go_one_step_early": (S("l", [("    stay = np.add(go.transpose(to_tlb), act_t)", "    stay = np.add(np.roll(go.transpose(to_tlb), 1, axis=0), act_t)")]),
                          "taco_random_full", "eq. (5), (8)"),
    "first_step_takes_a_go_factor": (S("m", [("    first = act[:, 0, 0].copy()", "    first = act[:, 0, 0] + go[:, 0, 0]")]),
                                     "taco_L1", "eq. (5), (8)"),
    "padding_self_loop_at_padded_L": (S("n", [("    stay[rows[0], sketch_len[rows[1]] - 1, rows[1]] = 0.0", "    stay[rows[0], -1, rows[1]] = 0.0")]),
                                      "taco_random_T8", "eq. (5), (8)"),
    "padding_not_transparent": (S("o", [("    stay[rows[0], sketch_len[rows[1]] - 1, rows[1]] = 0.0", "    stay[rows[0], sketch_len[rows[1]] - 1, rows[1]] += 0.0")]),
                                "taco_random_T8", "eq. (5), (8)"),
    "padding_starts_a_step_late": (S("p", [("    pad_t = t_idx >= traj_len[None, :]", "    pad_t = t_idx > traj_len[None, :]")]),
                                   "taco_random_T8", "eq. (5), (8)"),
    "final_stop_at_padded_L": (S("q", [("final_stop[np.arange(B), sketch_len - 1]", "final_stop[:, -1]")]),
                               "taco_final_stop", "eq. (5), (8)"),
    "final_stop_left_out_of_loglik": (S("r", [("    end = np.zeros(B) if final_stop is None else final_stop[np.arange(B), sketch_len - 1]",
                                               "    end = np.zeros(B)")]),
                                      "taco_final_stop", "eq. (5), (8)"),
    # --- the forward pass and its recentring (eq. (4), (5), (25); rule R7)
    "last_shift_dropped": (S("s", [("fwd.shift.sum(axis=0) + lat.end", "fwd.shift[:-1].sum(axis=0) + lat.end")]),
                           "taco_blocks_T17", "eq. (5), (8)"),
    "dead_row_shifted_by_minus_inf": (S("t", [("    shift_t[shift_t == -np.inf] = 0.0\n", "")]),
                                      "long_dead_rows_T500", "R4"),
    "recentring_adds_the_shift": (S("u", [("    a_t[1:] -= shift_t", "    a_t[1:] += shift_t")]),
                                  "taco_blocks_T17", "eq. (5), (8)"),
    "shift_misaligned_in_the_edge_probabilities": (S("v", [("fwd.shift[1:, None, :]", "fwd.shift[:-1, None, :]")]),
                                                   "taco_blocks_T17", "eq. (12)"),
    "forward_reads_the_same_position_twice": (S("w", [("np.add(a_prev[:-1], move, out=from_prev)", "np.add(a_prev[1:], move, out=from_prev)")]),
                                              "taco_random_full", "eq. (5), (8)"),
    "forward_max_instead_of_sum": (S("x", [("np.logaddexp(from_same, from_prev, out=a_t[1:])", "np.maximum(from_same, from_prev, out=a_t[1:])")]),
                                   "taco_random_full", "eq. (5), (8)"),
    "scaled_probability_space_forward": (wrapped("sc", taco_forward_backward=_scaled_forward_backward,
                                                 taco_loglik=_scaled_loglik),
                                         "long_underflow_T202", "eq. (5), (8)"),
    "loglik_read_at_padded_L": (S("y", [("fwd.log_alpha[-1, lat.sketch_len, np.arange(B)]", "fwd.log_alpha[-1, -1, np.arange(B)]")]),
                                "taco_random_T8", "eq. (5), (8)"),
    "loglik_read_at_T_b_with_every_shift": (S("z", [("fwd.log_alpha[-1, lat.sketch_len, np.arange(B)]",
                                                     "fwd.log_alpha[lat.traj_len - 1, lat.sketch_len, np.arange(B)]")]),
                                            "taco_blocks_T17", "eq. (5), (8)"),
    # --- the posteriors (eq. (11)-(17); rules R3, R4)
    "smoothing_starts_at_padded_L": (S("A", [("    gamma[T - 1, lat.sketch_len[rows] - 1, rows] = 1.0", "    gamma[T - 1, L - 1, rows] = 1.0")]),
                                     "taco_random_T8", "R3"),
    "smoothing_starts_in_impossible_rows": (S("B", [("    rows = np.nonzero(np.isfinite(loglik))[0]\n    gamma[T - 1",
                                                     "    rows = np.arange(B)\n    gamma[T - 1")]),
                                            "taco_L_greater_T", "R4"),
    "padding_posterior_left_at_1": (S("C", [("    gamma[pad_t, lat.sketch_len[pad_b] - 1, pad_b] = 0.0\n", "")]),
                                    "taco_random_T8", "R3"),
    "padding_go_posterior_left_at_1": (S("D", [("    xi_go[pad_t, lat.sketch_len[pad_b] - 1, pad_b] = 0.0\n", "")]),
                                       "taco_random_T8", "R3"),
    "stop_posterior_from_the_same_position": (S("E", [("np.multiply(g_next, r_p, out=x_stop)", "np.multiply(g_same, r_p, out=x_stop)")]),
                                              "taco_random_full", "eq. (13)"),
    "smoothing_one_step_off": (S("F", [("r_same[:0:-1], r_prev[:0:-1, 1:]", "r_same[-2::-1], r_prev[-2::-1, 1:]")]),
                               "taco_random_full", "eq. (14)"),
    "entry_probability_from_the_same_position": (S("G", [("        e = a[:-1, :-1] + lat.move[1:, :L]", "        e = a[:-1, 1:] + lat.move[1:, :L]")]),
                                                 "taco_random_full", "eq. (12)"),
    "d_final_stop_in_impossible_rows": (S("H", [("        rows = np.isfinite(loglik)\n        d_final", "        rows = np.ones(B, bool)\n        d_final")]),
                                        "taco_final_stop_zero", "R4"),
    "d_final_stop_at_padded_L": (S("I", [("d_final[rows, lat.sketch_len[rows] - 1] = 1.0", "d_final[rows, -1] = 1.0")]),
                                 "taco_final_stop", "R3"),
    "d_final_stop_without_a_terminal_stop": (S("J", [("    if log_final_stop is not None:\n        rows = np.isfinite(loglik)",
                                                      "    if True:\n        rows = np.isfinite(loglik)")]),
                                             "taco_random_full", "R3"),
    "tiny_gradient_on_a_never_read_entry": (wrapped("K", taco_forward_backward=_tiny_taco(_never_read_stop)),
                                            "taco_exact_zeros", "R3"),
    "tiny_gradient_in_an_impossible_row": (wrapped("L", taco_forward_backward=_tiny_taco(_impossible_rows)),
                                           "taco_exact_zeros", "R4"),
    "tiny_gradient_off_every_complete_path": (wrapped("M", taco_forward_backward=_tiny_taco(_off_path)),
                                              "taco_exact_zeros", "R3"),
    # --- the decoders (eq. (21)-(24); rules R4, R6)
    "viterbi_moves_on_ties": (S("N", [("np.greater(from_prev, from_same, out=moved[t])", "np.greater_equal(from_prev, from_same, out=moved[t])")]),
                              "taco_ties_exact", "R6"),
    "forward_argmax_ties_to_the_higher_position": (
        S("O", [("np.argmax(fwd.log_alpha[:, 1:], axis=1)", "fwd.log_alpha.shape[1] - 2 - np.argmax(fwd.log_alpha[:, :0:-1], axis=1)")]),
        "taco_ties_exact", "R6"),
    "posterior_argmax_ties_to_the_higher_position": (
        S("P", [("np.argmax(gamma, axis=2).T", "(gamma.shape[2] - 1 - np.argmax(gamma[:, :, ::-1], axis=2)).T")]),
        "taco_ties_exact", "R6"),
    "forward_argmax_restricted_to_reachable_positions": (
        S("Q", [("    return _positions(np.argmax(fwd.log_alpha[:, 1:], axis=1), lat, _loglik(lat, fwd))",
                 "    T, L, B = lat.stay.shape\n"
                 "    reach = np.arange(L)[None, :, None] >= (np.arange(T)[:, None, None]\n"
                 "                                            - (lat.traj_len - lat.sketch_len)[None, None, :])\n"
                 "    best = np.argmax(np.where(reach, fwd.log_alpha[:, 1:], -np.inf), axis=1)\n"
                 "    return _positions(best, lat, _loglik(lat, fwd))")]),
        "taco_unreachable_argmax", "eq. (21)"),
    "viterbi_starts_at_padded_L": (S("R", [("    pos = lat.sketch_len - 1\n", "    pos = np.full(B, L - 1)\n")]),
                                   "taco_random_T8", "eq. (23), (24)"),
    "viterbi_score_read_at_padded_L": (S("S", [("score = delta[-1, lat.sketch_len, rows] + lat.end", "score = delta[-1, -1, rows] + lat.end")]),
                                       "taco_random_T8", "eq. (23)"),
    "decoders_decode_the_padding": (S("T", [("    out[np.arange(T)[None, :] >= lat.traj_len[:, None]] = -1\n", "")]),
                                    "taco_random_T8", "eq. (21)"),
    "decoders_decode_impossible_rows": (S("U", [("    out[~np.isfinite(loglik)] = -1\n", "")]),
                                        "taco_L_greater_T", "R4"),
    # --- CTC (eq. (18)-(20); rules R3, R6)
    "ctc_repeated_classes_not_summed": (S("V", [("        d_log_p[rows, :, ids[:, l]] += posterior[:, :, l]", "        d_log_p[rows, :, ids[:, l]] = posterior[:, :, l]")]),
                                       "ctc_repeated_ids_padding", "eq. (20)"),
    "ctc_reads_one_step_of_padding": (S("W", [("    in_time = np.arange(T)[None, :, None] < traj_len[:, None, None]",
                                               "    in_time = np.arange(T)[None, :, None] <= traj_len[:, None, None]")]),
                                      "ctc_repeated_ids_padding", "eq. (5), (8)"),
    "ctc_tiny_gradient_for_absent_classes": (wrapped("X", ctc_forward_backward=_tiny_absent_class),
                                             "ctc_exact_zeros", "R3"),
    "ctc_viterbi_moves_on_ties": (ctc_only("Y", "_viterbi", "np.greater(from_prev", "np.greater_equal(from_prev",
                                           "ctc_align_viterbi", "_viterbi_ctc"),
                                  "ctc_ties_exact", "R6"),
    "ctc_forward_argmax_ties_to_the_higher_position": (
        ctc_only("Z", "_forward_argmax", "np.argmax(fwd.log_alpha[:, 1:], axis=1)",
                 "fwd.log_alpha.shape[1] - 2 - np.argmax(fwd.log_alpha[:, :0:-1], axis=1)",
                 "ctc_align_forward_argmax", "_forward_argmax_ctc"),
        "ctc_adjacent_repeat_ties", "R6"),
    "ctc_posterior_argmax_ties_to_the_higher_position": (
        ctc_only("AA", "_posterior_argmax", "np.argmax(gamma, axis=2).T",
                 "(gamma.shape[2] - 1 - np.argmax(gamma[:, :, ::-1], axis=2)).T",
                 "ctc_align_posterior_argmax", "_posterior_argmax_ctc"),
        "ctc_ties_exact", "R6"),
}

HARMLESS = {
    # name: a variant that preserves every documented value (within the tolerances)
    "recentre_every_step": S("p1", [("RECENTRE_EVERY = 16\n", "RECENTRE_EVERY = 1\n")]),
    "recentre_every_7_steps": S("p2", [("RECENTRE_EVERY = 16\n", "RECENTRE_EVERY = 7\n")]),
    "never_recentre": S("p3", [("RECENTRE_EVERY = 16\n", "RECENTRE_EVERY = 10 ** 9\n")]),
    "no_recentring_at_the_first_step": S("p4", [("    _recentre(alpha[0], shift[0])\n", "")]),
    "recentring_max_includes_the_sentinel": S("p5", [("    np.max(a_t[1:], axis=0, out=shift_t)", "    np.max(a_t, axis=0, out=shift_t)")]),
    "recentring_one_step_later": S("p6", [("if t % RECENTRE_EVERY == 0:", "if t % RECENTRE_EVERY == 1:")]),
    "logaddexp_arguments_swapped": S("p7", [("np.logaddexp(from_same, from_prev, out=a_t[1:])", "np.logaddexp(from_prev, from_same, out=a_t[1:])")]),
    "posterior_aliases_d_act": S("p8", [("d_act.copy(), d_final)", "d_act, d_final)")]),
    "viterbi_back_tracking_without_the_floor": S("p9", [("pos = np.maximum(pos - moved[t, pos, rows], 0)", "pos = pos - moved[t, pos, rows]")]),
    "posterior_argmax_on_log_gamma": S("p10", [("np.argmax(gamma, axis=2).T", "np.argmax(np.log(gamma, where=gamma > 0, out=np.full_like(gamma, -np.inf)), axis=2).T")]),
    "input_validation_removed": S("p11", [("    bad = ~(x <= upper) | (x == np.inf)", "    bad = np.zeros(x.shape, bool)")]),
    "gradients_within_tolerance": wrapped("p12", taco_forward_backward=_within_tolerance),
    "textbook_forward_backward": TEXTBOOK,
}


def failures(impl, names=None):
    """[Result] of the quantities impl fails, over the named cases (every case when None)."""
    out = []
    for name in names or CASES:
        case, quantities = CASES[name]
        out.extend(r for r in conformance.run_case(impl, case, quantities) if not r.passed)
    return out


@pytest.mark.slow
def test_the_variant_machinery_builds_a_correct_module_from_unedited_source():
    """With no edit, the rebuilt module passes every case: a rejection below is the edit's doing."""
    assert failures(edited("unedited", [])) == []


def test_the_suite_is_large_and_names_existing_cases():
    assert len(BUGS) >= 40 and len(HARMLESS) >= 10
    assert {case for _, case, _ in BUGS.values()} <= set(CASES)


def test_the_readme_lists_every_variant_and_the_counts():
    """spec/vectors/README.md ("What the kit catches") names every variant and states the
    counts of this suite."""
    text = (Path(__file__).resolve().parents[1] / "spec" / "vectors" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## What the kit catches"):text.index("## What these vectors are not")]
    missing = [name for name in list(BUGS) + list(HARMLESS) if f"`{name}`" not in section]
    assert not missing, f"not in spec/vectors/README.md: {missing}"
    assert f"{len(BUGS)} variants that changes a documented value" in section
    assert f"{len(HARMLESS)} value-preserving variants" in section


@pytest.mark.parametrize("name", sorted(BUGS))
def test_kit_rejects_every_value_changing_variant(name):
    """The variant fails the case named for it, and the report names the rule or equation the
    case catches it by (the worst element's, with its index, expected and got values)."""
    impl, case, rule = BUGS[name]
    failed = failures(impl, [case])
    assert failed, f"{name} passes {case}"
    named = {r.rule for r in failed}
    assert rule in named, f"{name} fails {case} on {sorted(named)}, expected {rule}"
    r = next(r for r in failed if r.rule == rule)
    assert r.detail, f"{name}: no detail in the report"
    if r.index:
        assert r.detail.startswith("at ["), r.detail
        assert r.got is not None and r.expected is not None


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HARMLESS))
def test_kit_passes_every_value_preserving_variant(name):
    """A variant that preserves every documented value passes every case: the kit does not
    demand taco_ref's own numerics (recentring period, evaluation order, its method)."""
    bad = [f"{r.case} {r.quantity}: {r.detail}" for r in failures(HARMLESS[name])]
    assert not bad, "\n".join(bad[:10])


@pytest.mark.slow
def test_every_value_changing_variant_fails_on_the_full_vectors():
    """Over every case, each bug variant fails somewhere and not everywhere (the cases, not the
    harness, catch it); the counts are the figures quoted in spec/vectors/README.md."""
    for name, (impl, _, _) in BUGS.items():
        failed_cases = {r.case for r in failures(impl)}
        assert failed_cases, name
        assert failed_cases != set(CASES), f"{name} fails every case"


def allowance_used(impl):
    """{"loglik", "gradients"}: the largest |got - expected| / (atol + rtol |expected|) over the
    finite expected values of every case (1 = at the tolerance)."""
    worst = {"loglik": 0.0, "gradients": 0.0}
    for name, (case, _) in CASES.items():
        tol = case.get("tolerance", {})
        rtol, atol = tol.get("rtol", conformance.RTOL), tol.get("atol", conformance.ATOL)
        got = conformance._call(impl, case["family"], case["inputs"], case["expected"])
        for key, want in case["expected"].items():
            if key in conformance.INT_FIELDS:
                continue
            have = np.asarray(got[key], float)
            if key in conformance.GRADIENTS and "sample_t" in case:
                have = have[:, case["sample_t"]]
            finite = np.isfinite(want)
            if finite.any():
                used = np.max(np.abs(have[finite] - want[finite]) / (atol + rtol * np.abs(want[finite])))
                group = "loglik" if key in ("loglik", "viterbi_score") else "gradients"
                worst[group] = max(worst[group], float(used))
    return worst


@pytest.mark.slow
def test_the_tolerances_admit_the_textbook_method():
    """Rule R7's tolerances are met with room by any float64 method exact in log space: the
    textbook forward-backward without recentring uses under 25 % of the allowance (19 % when
    measured), taco_ref under 2 % (1 %)."""
    textbook, ours = allowance_used(TEXTBOOK), allowance_used(align)
    assert max(textbook.values()) < 0.25, textbook
    assert max(ours.values()) < 0.02, ours
