"""Build the conformance vectors in spec/vectors/*.json from brute_force.py and exact.py.

Run from the repository root:  python spec/vectors/generate.py
It rewrites taco.json, ctc.json, long.json and blocks.json beside this file. The format, the
encoding of non-finite numbers and the tolerances are described in spec/vectors/README.md.

Short cases: loglik and gradients come from the path enumeration in brute_force.py, the
decoders, their margins and the log scale from exact.py, applied row by row to the valid part
(t < T_b, l < L_b) of each batch row; long and block cases come from exact.py alone. Padding in
the outputs is 0 for gradients and posteriors and -1 for decoders. Each case also records the
decoder elements a tie decides ("ties") and, where its log magnitudes call for it, its
tolerance. taco_ref is never imported here: the vectors must stay an independent statement of
the maths.

Determinism: each case has its own ``random.Random(seed)`` and uses only its
``random()`` method, whose sequence Python guarantees across versions. Inputs are
rounded to 9 decimal places, so a last-ulp difference in the platform's log/exp
cannot change them; only the computed outputs may differ across platforms, in
the last ulp (tests/test_vectors.py compares them with a tolerance).
"""
import json
import math
import random
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import brute_force as bf  # noqa: E402  (the ground truth lives beside this script)
import exact  # noqa: E402
import formula  # noqa: E402

FORMAT = "taco_ref conformance vectors v2"
RULES = {   # every rule and numbered equation of spec/align.md a case can name in "rules"
    "R1": "align.md §1 R1: log_act, log_stop, log_go are three independent inputs; "
          "exp(log_stop) + exp(log_go) need not be 1",
    "R2": "align.md §9 R2: log_act is any real or -inf; log_stop, log_go, log_final_stop, log_p "
          "are <= LOGP_TOL = 1e-9 and used as given (never clipped)",
    "R3": "align.md §4 R3: padding and never-read entries may hold anything and change no "
          "output; they, and read entries on no complete path, get gradient exactly 0",
    "R4": "align.md §5 R4: an impossible row has loglik -inf, every gradient and posterior "
          "exactly 0, decoders -1 (for the decoders: alpha_T(L_b) = 0)",
    "R5": "align.md §3 R5: f scales Z only; the decoders take no f; viterbi_score excludes f",
    "R6": "align.md §7 R6: exact ties go to the lower position (argmax) or to staying "
          "(Viterbi); true margins >= 1e-9 must be resolved",
    "R7": "align.md §8 R7: long rows (T up to 3000, |loglik| up to 5.4e4, every T from 9 to 200 "
          "on either side of a multiple of 16) meet each case's tolerance",
    "eq. (1)": "align.md eq. (1): the alignment paths",
    "eq. (2)": "align.md eq. (2): the probability of one path",
    "eq. (3)": "align.md eq. (3): alpha_1",
    "eq. (4)": "align.md eq. (4): the forward recursion",
    "eq. (5)": "align.md eq. (5): log Z = log alpha_T(L)",
    "eq. (8)": "align.md eq. (8): the terminal STOP factor f",
    "eq. (10)": "align.md eq. (10): padding steps are identity steps",
    "eq. (11)": "align.md eq. (11): posteriors sum to 1 per step",
    "eq. (12)": "align.md eq. (12): d loglik / d log_act = gamma",
    "eq. (13)": "align.md eq. (13): d loglik / d log_stop = xi(l -> l+1)",
    "eq. (14)": "align.md eq. (14): d loglik / d log_go = xi(l -> l)",
    "eq. (15)": "align.md eq. (15): d loglik / d log f = 1 at L_b",
    "eq. (16)": "align.md eq. (16): edge probabilities",
    "eq. (17)": "align.md eq. (17): backward smoothing",
    "eq. (18)": "align.md eq. (18): the blank-free CTC path probability",
    "eq. (19)": "align.md eq. (19): the CTC forward recursion",
    "eq. (20)": "align.md eq. (20): d loglik / d log_p sums over repeated classes",
    "eq. (21)": "align.md eq. (21): forward argmax",
    "eq. (22)": "align.md eq. (22): posterior argmax",
    "eq. (23)": "align.md eq. (23): Viterbi max-product",
    "eq. (24)": "align.md eq. (24): Viterbi back-tracking",
    "eq. (25)": "align.md eq. (25): recentring, taco_ref's way to meet R7 (rows across its "
                "block boundaries; dead rows shift by 0)",
}
QUANTITY_EQ = {  # the equation each expected field checks (the conformance kit cites it)
    "loglik": "eq. (5), (8)", "d_act": "eq. (12)", "d_stop": "eq. (13)", "d_go": "eq. (14)",
    "d_final_stop": "eq. (15)", "posterior": "eq. (12)", "d_log_p": "eq. (20)",
    "forward_argmax": "eq. (21)", "posterior_argmax": "eq. (22)", "viterbi": "eq. (23), (24)",
    "viterbi_score": "eq. (23)",
}
TIE_GAP = 1e-6   # decoders whose top two candidates are closer than this are redrawn
RTOL = ATOL = 1e-12  # the default tolerances (README "Tolerances")
SCALE_ATOL = 2.0 ** -47  # atol per unit of the case's largest |log alpha|, |log beta| (32 ulps)
MAX_DRAWS = 100  # give up (an error) if a case still has a near tie after this many draws
DECIMALS = 9     # inputs are rounded to this many decimal places
GARBAGE = [math.nan, math.inf, 7.5, -math.inf, 1e300, -3.25]  # padding in "garbage" cases
DECODERS = ("forward_argmax", "posterior_argmax", "viterbi")


# ----------------------------------------------------------------------------- draws

def q(x):
    """Round an input to DECIMALS places; -0.0 becomes 0.0."""
    return round(x, DECIMALS) + 0.0


def uniform(rng, lo, hi):
    return lo + (hi - lo) * rng.random()


def log_uniform_prob(rng, lo=0.02, hi=1.0):
    """log of a probability drawn uniformly from [lo, hi)."""
    return q(math.log(uniform(rng, lo, hi)))


def stop_go(rng, lo=0.03, hi=0.97):
    """(log p, log(1 - p)) for a STOP probability p drawn uniformly from [lo, hi)."""
    p = uniform(rng, lo, hi)
    return q(math.log(p)), q(math.log1p(-p))


def log_softmax(rng, K, scale=3.0):
    """A realistic row of class log-probabilities: log-softmax of uniform logits."""
    x = [uniform(rng, -scale, scale) for _ in range(K)]
    m = max(x)
    lse = m + math.log(sum(math.exp(v - m) for v in x))
    return [q(v - lse) for v in x]


def random_taco_row(rng, T, L):
    """(log_act, log_stop, log_go), each (T, L) as nested lists, with stop + go = 1."""
    act = [[log_uniform_prob(rng) for _ in range(L)] for _ in range(T)]
    stop, go = [[None] * L for _ in range(T)], [[None] * L for _ in range(T)]
    for t in range(T):
        for l in range(L):
            stop[t][l], go[t][l] = stop_go(rng)
    return act, stop, go


def random_sketch(rng, L, K):
    """L class ids in [0, K) with no id equal to its predecessor (repeats further apart allowed)."""
    sketch = []
    while len(sketch) < L:
        k = int(rng.random() * K)
        if not sketch or k != sketch[-1]:
            sketch.append(k)
    return sketch


# ----------------------------------------------------------------------------- references

def check_agree(name, bf_ref, ex_ref, gaps):
    """The two independent references agree: loglik and gradients to 1e-12, decoders exactly
    wherever the decoder has no near-tie (an error otherwise: a reference is wrong)."""
    for key in ("loglik", "d_act", "d_stop", "d_go", "d_log_p"):
        if key not in bf_ref:
            continue
        x, y = np.asarray(bf_ref[key], float), np.asarray(ex_ref[key], float)
        same_inf = np.isinf(x) == np.isinf(y)
        ok = same_inf.all() and np.allclose(x[~np.isinf(x)], y[~np.isinf(y)], rtol=1e-12, atol=1e-12)
        if not ok:
            raise RuntimeError(f"{name}: brute_force and exact disagree on {key}")
    if bf_ref["loglik"] > -math.inf:
        for key in DECODERS:
            if gaps[key] >= TIE_GAP and list(bf_ref[key]) != list(ex_ref[key]):
                raise RuntimeError(f"{name}: brute_force and exact disagree on {key}")


FROM_EXACT = DECODERS + ("viterbi_score", "margins", "log_scale")  # taken from exact.py


def taco_row(act, stop, go, final_stop=None, name=""):
    """Reference outputs for one TACO row (nested lists, valid part only).

    loglik and gradients come from the path enumeration (brute_force.py, with the terminal
    STOP); the decoders, the Viterbi score, the decoders' margins and the log scale from
    exact.py without it (rule R5), whose comparisons are exact and break ties by rule R6. The
    two references must agree.
    """
    ex = exact.taco_exact(act, stop, go)                      # decoders take no f (rule R5)
    a, s_, g = (np.array(x, dtype=float) for x in (act, stop, go))        # (T_b, L_b)
    fs = None if final_stop is None else np.array(final_stop, dtype=float)
    ref = bf.taco_reference(a, s_, g, fs)
    check_agree(name, bf.taco_reference(a, s_, g), ex, ex["gaps"])
    for key in FROM_EXACT:
        ref[key] = ex[key]
    return ref


def ctc_row(log_p, sketch, name=""):
    """Reference outputs for one CTC row (valid part only), as taco_row."""
    ex = exact.ctc_exact(log_p, list(sketch))
    ref = bf.ctc_reference(np.array(log_p, dtype=float), sketch)
    check_agree(name, ref, ex, ex["gaps"])
    for key in FROM_EXACT:
        ref[key] = ex[key]
    return ref


# ----------------------------------------------------------------------------- batching

def pad_source(rng, mode):
    """A callable giving the next padding value: realistic log-probs or garbage."""
    if mode == "random":
        return lambda: log_uniform_prob(rng)
    counter = iter(range(10 ** 9))
    return lambda: GARBAGE[next(counter) % len(GARBAGE)]


def batch(rows, shape, valid, pad):
    """Place per-row nested lists into a padded array.

    rows[b] holds the valid block of row b; valid(b, idx) says whether the index
    tuple idx lies in it; pad() supplies every other entry.
    """
    out = np.empty(shape)
    for idx in np.ndindex(*shape):
        if valid(idx[0], idx[1:]):
            v = rows[idx[0]]
            for i in idx[1:]:
                v = v[i]
            out[idx] = v
        else:
            out[idx] = pad()
    return out


def scatter(refs, key, shape, fill, dtype=float):
    """Stack per-row reference outputs (valid part) into a padded (B, ...) array."""
    out = np.full(shape, fill, dtype=dtype)
    for b, ref in enumerate(refs):
        v = np.asarray(ref[key])
        out[(b,) + tuple(slice(0, n) for n in v.shape)] = v
    return out


def expected_outputs(refs, T, L, family, K=None, decoders=DECODERS):
    """The "expected" dict of a case from its per-row references."""
    B = len(refs)
    exp = {"loglik": np.array([r["loglik"] for r in refs])}               # (B,)
    if family == "taco":
        for key in ("d_act", "d_stop", "d_go"):
            exp[key] = scatter(refs, key, (B, T, L), 0)                   # (B, T, L)
        exp["d_final_stop"] = scatter(refs, "d_final_stop", (B, L), 0)    # (B, L)
    else:
        exp["d_log_p"] = scatter(refs, "d_log_p", (B, T, K), 0)           # (B, T, K)
    exp["posterior"] = scatter(refs, "posterior", (B, T, L), 0)           # (B, T, L)
    for key in decoders:
        exp[key] = scatter(refs, key, (B, T), -1, np.int64)               # (B, T)
    if "viterbi" in decoders:
        exp["viterbi_score"] = np.array([r["viterbi_score"] for r in refs])  # (B,)
    return exp


def untied(refs, decoders, min_gap=None, exact_ties=()):
    """True when every margin of every listed decoder on every row is at least min_gap[decoder]
    (TIE_GAP by default), except the exact ties (margin 0) of the decoders in exact_ties: those
    are part of the case (rule R6), built so that float64 reproduces them in any evaluation
    order."""
    for ref in refs:
        for d in decoders:
            lo = (min_gap or {}).get(d, TIE_GAP)
            if not all(m >= lo or (m == 0 and d in exact_ties) for m in ref["margins"][d]):
                return False
    return True


def draw_until_untied(name, decoders, min_gap, exact_ties, attempt):
    """Call attempt() until untied() holds; attempt() returns a tuple whose last item is the
    list of per-row references."""
    for _ in range(MAX_DRAWS):
        out = attempt()
        if untied(out[-1], decoders, min_gap, exact_ties):
            return out
    raise RuntimeError(f"{name}: decoders still tied after {MAX_DRAWS} draws")


def ties(refs, decoders):
    """{decoder: [[b, t], ...]}: the elements a tie or near-tie decides (margin < TIE_GAP; rule
    R6), for the decoders the case stores; the conformance kit names R6 when one of them is
    wrong."""
    out = {}
    for d in decoders:
        at = [[b, t] for b, ref in enumerate(refs) for t, m in enumerate(ref["margins"][d])
              if m < TIE_GAP]
        if at:
            out[d] = at
    return out


def tolerance_for(refs):
    """The case's tolerance when it differs from the default: atol = max(ATOL, SCALE_ATOL *
    Lambda), Lambda the largest |log alpha_t(l)|, |log beta_t(l)| of any row (exact.py's
    log_scale), rounded up to two significant digits (README "Tolerances")."""
    atol = SCALE_ATOL * max(ref["log_scale"] for ref in refs)
    if atol <= ATOL:
        return None
    unit = 10.0 ** (math.floor(math.log10(atol)) - 1)
    return {"rtol": RTOL, "atol": float(f"{math.ceil(atol / unit) * unit:.2g}")}


def never_read_mask(Tb, Lb, T, L):
    """(B, T, L) bool per input: the valid entries no path prefix reads (rule R3), 0-based:
    act at l > t; go at l >= t; stop at l >= t or l = L_b - 1."""
    t = np.arange(T)[None, :, None]
    l = np.arange(L)[None, None, :]
    Tb, Lb = np.array(Tb)[:, None, None], np.array(Lb)[:, None, None]
    valid = (t < Tb) & (l < Lb)
    return {"log_act": valid & (l > t), "log_go": valid & (l >= t),
            "log_stop": valid & ((l >= t) | (l == Lb - 1))}


def case_dict(name, description, family, rules, inputs, refs, T, L, K=None, decoders=DECODERS):
    """One case: its inputs, the expected outputs built from the per-row references, the
    elements ties decide, and its tolerance when not the default."""
    case = {"name": name, "description": description, "family": family, "rules": list(rules),
            "inputs": inputs, "expected": expected_outputs(refs, T, L, family, K, decoders)}
    tie_at = ties(refs, decoders)
    if tie_at:
        case["ties"] = tie_at
    tolerance = tolerance_for(refs)
    if tolerance:
        case["tolerance"] = tolerance
    return case


def taco_case(name, seed, B, T, L, draw, description, rules, traj_len=None, sketch_len=None,
              pad="random", final_stop=None, decoders=DECODERS, min_gap=None, exact_ties=(),
              never_read=False):
    """Build one TACO case.

    draw(rng, b, T_b, L_b) -> (act, stop, go) nested lists of shape (T_b, L_b);
    final_stop(rng, b, L_b) -> list of length L_b, or None for no terminal STOP.
    The whole case is redrawn while a listed decoder has a margin below min_gap (default
    TIE_GAP) other than an exact tie of a decoder in exact_ties (untied()). never_read=True puts
    garbage in the valid entries no path reads (rule R3).
    """
    rng = random.Random(seed)
    Tb = traj_len if traj_len is not None else [T] * B
    Lb = sketch_len if sketch_len is not None else [L] * B
    def attempt():
        rows = [draw(rng, b, Tb[b], Lb[b]) for b in range(B)]
        fs_rows = None if final_stop is None else [final_stop(rng, b, Lb[b]) for b in range(B)]
        return rows, fs_rows, [taco_row(*rows[b], None if fs_rows is None else fs_rows[b], name)
                               for b in range(B)]

    rows, fs_rows, refs = draw_until_untied(name, decoders, min_gap, exact_ties, attempt)
    padder = pad_source(rng, pad)
    valid = lambda b, idx: idx[0] < Tb[b] and idx[1] < Lb[b]          # noqa: E731
    inputs = {name_: batch([r[i] for r in rows], (B, T, L), valid, padder)
              for i, name_ in enumerate(("log_act", "log_stop", "log_go"))}
    if never_read:
        junk = pad_source(rng, "garbage")
        for key, mask in never_read_mask(Tb, Lb, T, L).items():
            for idx in zip(*np.nonzero(mask)):
                inputs[key][idx] = junk()
    inputs["traj_len"] = None if traj_len is None else np.array(traj_len, dtype=np.int64)
    inputs["sketch_len"] = None if sketch_len is None else np.array(sketch_len, dtype=np.int64)
    if fs_rows is not None:
        read = lambda b, idx: idx[0] == Lb[b] - 1 if never_read else idx[0] < Lb[b]  # noqa: E731
        fs_pad = pad_source(rng, "garbage") if never_read else padder
        inputs["log_final_stop"] = batch(fs_rows, (B, L), read, fs_pad)
    return case_dict(name, description, "taco", rules, inputs, refs, T, L, decoders=decoders)


def ctc_case(name, seed, B, T, L, K, draw, description, rules, traj_len=None, sketch_len=None,
             pad="random", decoders=DECODERS, min_gap=None, exact_ties=()):
    """Build one CTC case; draw(rng, b, T_b, L_b) -> (log_p (T_b, K), sketch (L_b,)). Ties as
    in taco_case."""
    rng = random.Random(seed)
    Tb = traj_len if traj_len is not None else [T] * B
    Lb = sketch_len if sketch_len is not None else [L] * B
    def attempt():
        rows = [draw(rng, b, Tb[b], Lb[b]) for b in range(B)]
        return rows, [ctc_row(log_p, sketch, name) for log_p, sketch in rows]

    rows, refs = draw_until_untied(name, decoders, min_gap, exact_ties, attempt)
    padder = pad_source(rng, pad)
    log_p = batch([r[0] for r in rows], (B, T, K), lambda b, idx: idx[0] < Tb[b], padder)
    sketch = np.full((B, L), -1, dtype=np.int64)                          # (B, L), -1 in padding
    for b, (_, s) in enumerate(rows):
        sketch[b, :len(s)] = s
    inputs = {"log_p": log_p, "sketch": sketch,
              "traj_len": None if traj_len is None else np.array(traj_len, dtype=np.int64),
              "sketch_len": None if sketch_len is None else np.array(sketch_len, dtype=np.int64)}
    return case_dict(name, description, "ctc", rules, inputs, refs, T, L, K, decoders)


# ----------------------------------------------------------------------------- long cases
# Inputs are formula objects (formula.py); references come from exact.py row by row.

def fill(shape, seed, lo, hi, step=1 / 64, blocks=()):
    """A formula object (formula.py): dyadic values in [lo, hi], then the "set" blocks."""
    return {"formula": formula.NAME, "shape": list(shape), "seed": seed, "lo": lo, "hi": hi,
            "step": step, "set": [dict(block) for block in blocks]}


def block(value, b=None, t=None, l=None, shape=None):
    """A "set" block; a missing range means the whole axis of shape (B, T, L) or (B, L)."""
    axes = ("b", "t", "l") if len(shape) == 3 else ("b", "l")
    given = {"b": b, "t": t, "l": l}
    return {a: list(given[a]) if given[a] is not None else [0, shape[axes.index(a)]] for a in axes} \
        | {"value": value}


def sample_times(T, extra=(), spread=16):
    """The time steps at which long cases store gradients: the ends, `spread` spread, and extra."""
    spread = {round(k * (T - 1) / (spread - 1)) for k in range(spread)} if spread else set()
    return sorted(spread | {0, 1, 2, T - 3, T - 2, T - 1} | {t for t in extra if 0 <= t < T})


def padding_blocks(Tb, Lb, T, L, value=math.nan):
    """"set" blocks that fill the padding of every row with value (rule R3)."""
    out = []
    for b, (tb, lb) in enumerate(zip(Tb, Lb)):
        if tb < T:
            out.append(block(value, b=(b, b + 1), t=(tb, T), shape=(1, T, L)))
        if lb < L:
            out.append(block(value, b=(b, b + 1), l=(lb, L), shape=(1, T, L)))
    return out


def long_taco_case(name, description, rules, B, T, L, fields, traj_len=None, sketch_len=None,
                   final=None, decoders=DECODERS, min_gap=None, exact_ties=(), extra_t=(),
                   spread=16):
    """A long TACO case. fields(seed) -> {"log_act": formula object, ...} (and "log_final_stop"
    when final); the seed is advanced while a listed decoder has a near tie (untied())."""
    Tb = traj_len if traj_len is not None else [T] * B
    Lb = sketch_len if sketch_len is not None else [L] * B
    for attempt in range(MAX_DRAWS):
        objs = fields(attempt)
        arrays = {k: formula.expand(v) for k, v in objs.items()}
        refs = []
        for b in range(B):
            rows = [[r[:Lb[b]] for r in arrays[k][b][:Tb[b]]] for k in ("log_act", "log_stop", "log_go")]
            fs = arrays["log_final_stop"][b][:Lb[b]] if final else None
            ref = exact.taco_exact(*rows, fs)
            dec = exact.taco_exact(*rows) if final else ref          # decoders take no f (R5)
            for key in FROM_EXACT:
                ref[key] = dec[key]
            refs.append(ref)
        if untied(refs, decoders, min_gap, exact_ties):
            break
    else:
        raise RuntimeError(f"{name}: decoders still tied after {MAX_DRAWS} seeds")
    inputs = dict(objs)
    inputs["traj_len"] = None if traj_len is None else np.array(traj_len, dtype=np.int64)
    inputs["sketch_len"] = None if sketch_len is None else np.array(sketch_len, dtype=np.int64)
    return sampled(case_dict(name, description, "taco", rules, inputs, refs, T, L,
                             decoders=decoders), sample_times(T, extra_t, spread))


def long_ctc_case(name, description, rules, B, T, K, sketches, field, traj_len=None, extra_t=(),
                  spread=16):
    """A long CTC case: log_p from the formula object field(seed), sketches given (lists)."""
    L = max(len(s) for s in sketches)
    Tb = traj_len if traj_len is not None else [T] * B
    for attempt in range(MAX_DRAWS):
        obj = field(attempt)
        log_p = formula.expand(obj)
        refs = [exact.ctc_exact(log_p[b][:Tb[b]], sketches[b]) for b in range(B)]
        if untied(refs, DECODERS):
            break
    else:
        raise RuntimeError(f"{name}: decoders still tied after {MAX_DRAWS} seeds")
    sketch = np.full((B, L), -1, dtype=np.int64)
    for b, sk in enumerate(sketches):
        sketch[b, :len(sk)] = sk
    inputs = {"log_p": obj, "sketch": sketch,
              "traj_len": None if traj_len is None else np.array(traj_len, dtype=np.int64),
              "sketch_len": np.array([len(sk) for sk in sketches], dtype=np.int64)}
    return sampled(case_dict(name, description, "ctc", rules, inputs, refs, T, L, K),
                   sample_times(T, extra_t, spread))


def sampled(case, times):
    """Keep the (B, T, ...) gradient and posterior fields only at the given time steps."""
    case["sample_t"] = list(times)
    for key in ("d_act", "d_stop", "d_go", "posterior", "d_log_p"):
        if key in case["expected"]:
            case["expected"][key] = case["expected"][key][:, times]
    return case


# ----------------------------------------------------------------------------- the cases
# A draw is draw(rng, b, T_b, L_b) -> the valid block of row b.

def random_row(rng, b, T, L):
    return random_taco_row(rng, T, L)


def neg_inf_row(rng, b, T, L):
    """Row 0: STOP probability 0 in places; row 1: STOP probability 1 in places;
    row 2: an action of probability 0 on every step at position 1 (no path survives);
    row 3: the final action has probability 0 (no path survives)."""
    act, stop, go = random_taco_row(rng, T, L)
    if b == 0:
        for t, l in ((1, 0), (2, 0), (3, 1), (4, 1)):
            stop[t][l], go[t][l] = -math.inf, 0.0
    elif b == 1:
        for t, l in ((2, 0), (4, 1), (5, 0)):
            stop[t][l], go[t][l] = 0.0, -math.inf
    elif b == 2:
        for t in range(T):
            act[t][1] = -math.inf
    else:
        act[T - 1][L - 1] = -math.inf
    return act, stop, go


def extreme_row(rng, b, T, L):
    """Row 0: every action and STOP log-probability near -40 (GO near 0);
    row 1: each entry either near 0 or near -40."""
    act, stop, go = random_taco_row(rng, T, L)
    for t in range(T):
        for l in range(L):
            if b == 0 or rng.random() < 0.5:
                act[t][l] = q(uniform(rng, -42.0, -38.0))
            if b == 0 or rng.random() < 0.5:
                s = uniform(rng, -42.0, -38.0)
                stop[t][l], go[t][l] = q(s), q(math.log1p(-math.exp(s)))
            elif rng.random() < 0.5:
                g = uniform(rng, -42.0, -38.0)
                stop[t][l], go[t][l] = q(math.log1p(-math.exp(g))), q(g)
    return act, stop, go


def uniform_row(rng, b, T, L):
    """Every action probability 1/3, every STOP probability 1/2: all paths tie."""
    a, h = q(math.log(1 / 3)), q(math.log(0.5))
    return [[a] * L for _ in range(T)], [[h] * L for _ in range(T)], [[h] * L for _ in range(T)]


def final_stop_row(rng, b, L):
    return [log_uniform_prob(rng, 0.05, 1.0) for _ in range(L)]


def final_stop_zero_row(rng, b, L):
    """Row 0: STOP impossible after the last sub-task (row impossible);
    row 1: STOP impossible after the first sub-task only (row unaffected)."""
    fs = final_stop_row(rng, b, L)
    fs[L - 1 if b == 0 else 0] = -math.inf
    return fs


def ctc_draw(K, sketches=None, scale=3.0):
    """CTC rows: log-softmax class log-probs; sketches[b] fixed, or random when None."""
    def draw(rng, b, T, L):
        log_p = [log_softmax(rng, K, scale) for _ in range(T)]
        return log_p, (random_sketch(rng, L, K) if sketches is None else sketches[b])
    return draw


def ctc_extreme_draw(rng, b, T, L):
    """Peaked log-softmax (some classes near -40); row 1: class 3 (not in the sketch) has
    probability 0 on every step; row 2: the first sketch class has probability 0 at t = 0."""
    log_p, sketch = ctc_draw(4, [[2, 0, 3], [1, 2, 1], [0, 3]], scale=20.0)(rng, b, T, L)
    if b == 1:
        for t in range(T):
            log_p[t][3] = -math.inf
    elif b == 2:
        log_p[0][0] = -math.inf
    return log_p, sketch


def independent_row(rng, b, T, L):
    """stop and go drawn independently (rule R1): row 0 uniform, so the sum spreads over
    (0.06, 1.94); row 1 both near 1 (sum near 2); row 2 both small (sum near 0.1)."""
    act, _, _ = random_taco_row(rng, T, L)
    lo, hi = ((0.03, 0.97), (0.8, 0.99), (0.02, 0.08))[b]
    stop = [[log_uniform_prob(rng, lo, hi) for _ in range(L)] for _ in range(T)]
    go = [[log_uniform_prob(rng, lo, hi) for _ in range(L)] for _ in range(T)]
    return act, stop, go


def tolerance_row(rng, b, T, L):
    """Read entries above 0 by at most LOGP_TOL = 1e-9 (rule R2: used as given, not clipped).
    Row 0: every stop and go is 1e-9; row 1: random, with 5e-10 and 1e-9 in places."""
    act, stop, go = random_taco_row(rng, T, L)
    if b == 0:
        return act, [[1e-9] * L for _ in range(T)], [[1e-9] * L for _ in range(T)]
    for t, l in ((1, 0), (3, 1), (4, 0)):
        stop[t][l], go[t][l + 1] = 5e-10, 1e-9
    return act, stop, go


def density_rows(c=1.75, big=700.0):
    """log_act as a log-density (rule R2, issue: continuous actions). Row 0: log_act in
    [-2, 3]; row 1: row 0 with c added to every log_act (loglik + T_b c, the same gradients
    and decoders); row 2: row 0's stop and go with log_act near 700 (exp overflows)."""
    first = {}

    def draw(rng, b, T, L):
        if b == 0:
            act, stop, go = random_taco_row(rng, T, L)
            act = [[q(uniform(rng, -2.0, 3.0)) for _ in range(L)] for _ in range(T)]
            first["row"] = act, stop, go
            return act, stop, go
        act, stop, go = first["row"]
        shift = c if b == 1 else big
        return [[v + shift for v in r] for r in act], stop, go
    return draw


def constant_row(value):
    """Every log input equal to value (dyadic): path scores tie exactly (rule R6)."""
    def draw(rng, b, T, L):
        v = value[b] if isinstance(value, (list, tuple)) else value
        return [[[v] * L for _ in range(T)] for _ in range(3)]
    return draw


def dyadic_row(rng, b, T, L):
    """Values in {-1, -1.5, -2}: sums are exact in float64, so equal path scores tie exactly
    and Viterbi must break the ties by eq. (24) (rule R6)."""
    pick = lambda: -1.0 - 0.5 * int(rng.random() * 3)             # noqa: E731
    return [[[pick() for _ in range(L)] for _ in range(T)] for _ in range(3)]


def near_tie_row(rng, b, T, L):
    """T = 3, L = 2, all log inputs 0 except one entry set to -eps: the decoders' two
    candidates at t = 1 differ by about eps (rule R6: margins >= 1e-9 must be resolved).
    Row 0: act[1][0] = -1e-8 (the argmax decoders must choose position 1, against the tie
    direction); row 1: act[1][1] = -1e-8 (Viterbi must stay, z = [0, 0, 1]); row 2: as row 0
    with eps = 3e-9."""
    act, stop, go = constant_row(0.0)(rng, b, T, L)
    t, l, eps = ((1, 0, 1e-8), (1, 1, 1e-8), (1, 0, 3e-9))[b]
    act[t][l] = -eps
    return act, stop, go


def tiny_final(rng, b, L):
    """Terminal STOP for taco_tiny_rows: row 3 has log f = 1e-9 (rule R2), row 0 log f = 0."""
    fs = final_stop_row(rng, b, L)
    if b == 0:
        fs[L - 1] = 0.0
    if b == 3:
        fs[L - 1] = 1e-9
    return fs


def zeros_row(rng, b, T, L):
    """taco_exact_zeros: row 1 has action probability 0 at position 1 on every step (alpha is
    positive at position 0, yet no complete path survives); the other rows are random (row 2
    has L_b > T_b, row 3 is cut by f = 0 alone, see zeros_final)."""
    act, stop, go = random_taco_row(rng, T, L)
    if b == 1:
        for t in range(T):
            act[t][1] = -math.inf
    return act, stop, go


def zeros_final(rng, b, L):
    """taco_exact_zeros: row 3's terminal STOP has probability 0 (impossible through f only)."""
    fs = final_stop_row(rng, b, L)
    if b == 3:
        fs[L - 1] = -math.inf
    return fs


def unreachable_row(rng, b, T, L):
    """taco_unreachable_argmax: action probability 1 at position 0 on every step, below e^-2
    elsewhere, so alpha_t(0) leads at every t, including the last steps, from which position 0
    cannot reach L_b in time (rule R3: those entries are read, but their gradients are 0)."""
    act, stop, go = random_taco_row(rng, T, L)
    for t in range(T):
        act[t][0] = 0.0
        for l in range(1, L):
            act[t][l] = q(uniform(rng, -4.0, -2.0))
    return act, stop, go


def ctc_zeros_draw(rng, b, T, L):
    """ctc_exact_zeros: sketches using 3, 2 and 3 of K = 6 classes; row 2's first sketch class
    has probability 0 at t = 0 (impossible)."""
    log_p, sketch = ctc_draw(6, [[4, 1, 4], [2, 5], [0, 3, 1]])(rng, b, T, L)
    if b == 2:
        log_p[0][0] = -math.inf
    return log_p, sketch


def ctc_constant_draw(sketches, value):
    """Every log_p equal to value[b] (dyadic): all paths tie exactly (rule R6)."""
    def draw(rng, b, T, L):
        K = 1 + max(max(sk) for sk in sketches)
        return [[value[b]] * K for _ in range(T)], sketches[b]
    return draw


def taco_cases():
    return [
        taco_case(
            "taco_L1", 101, B=2, T=5, L=1, draw=random_row, traj_len=[5, 1], sketch_len=[1, 1],
            rules=["eq. (1)", "eq. (2)", "eq. (5)", "eq. (12)", "eq. (14)"],
            description="L = 1: a single sub-task, one path; row 1 is the smallest row "
                        "(T_b = L_b = 1)."),
        taco_case(
            "taco_T_equals_L", 102, B=2, T=4, L=4, draw=random_row, traj_len=[4, 2], sketch_len=[4, 2],
            rules=["eq. (1)", "eq. (2)", "eq. (13)", "eq. (24)"],
            description="T_b = L_b: exactly one path (move on at every step); posterior one-hot."),
        taco_case(
            "taco_L_greater_T", 103, B=2, T=2, L=3, draw=random_row,
            rules=["eq. (1)", "R4"],
            description="Full-size arrays with L > T, lengths omitted: every row impossible "
                        "(loglik -inf, zero gradients, decoders -1)."),
        taco_case(
            "taco_mixed_padding_garbage", 104, B=4, T=6, L=4, draw=random_row,
            traj_len=[6, 3, 5, 2], sketch_len=[4, 2, 1, 3], pad="garbage",
            rules=["R3", "R4", "eq. (10)"],
            description="Mixed traj_len / sketch_len; padding cycles through NaN, +inf, 7.5, -inf, "
                        "1e300, -3.25 and must not influence anything. Row 3 has L_b > T_b "
                        "(impossible)."),
        taco_case(
            "taco_final_stop", 105, B=3, T=5, L=3, draw=random_row, traj_len=[5, 4, 3],
            sketch_len=[3, 2, 3], pad="garbage", final_stop=final_stop_row,
            rules=["eq. (8)", "eq. (15)", "R3", "R5"],
            description="Terminal STOP: log_final_stop[b, L_b - 1] is added to loglik and to "
                        "viterbi_score; d_final_stop is 1 there. Padding, including that of "
                        "log_final_stop, is garbage."),
        taco_case(
            "taco_final_stop_zero", 106, B=2, T=5, L=3, draw=random_row,
            final_stop=final_stop_zero_row,
            rules=["eq. (8)", "R4", "R5"],
            description="Terminal STOP with probability 0: row 0 has log_final_stop = -inf at "
                        "L_b - 1 (loglik -inf and zero gradients, but the decoders, which take "
                        "no f, decode it normally); row 1 has -inf at l = 0 only (no effect)."),
        taco_case(
            "taco_neg_inf_inside", 107, B=4, T=6, L=3, draw=neg_inf_row, traj_len=[6, 6, 5, 4],
            sketch_len=[3, 3, 3, 2],
            rules=["R2", "R4", "eq. (4)"],
            description="-inf inside the valid region. Row 0: STOP probability 0 in places; row 1: "
                        "STOP probability 1 in places; row 2: action probability 0 at l = 1 on every "
                        "step (impossible); row 3: action probability 0 at (T_b - 1, L_b - 1) "
                        "(impossible)."),
        taco_case(
            "taco_extreme", 108, B=2, T=7, L=3, draw=extreme_row,
            rules=["eq. (4)", "eq. (16)", "eq. (17)"],
            description="Extreme log-probabilities. Row 0: every action and STOP log-probability "
                        "near -40 (loglik about -354); row 1: each entry near 0 or near -40, so "
                        "posteriors hold values near exp(-40)."),
        taco_case(
            "taco_uniform_ties", 109, B=2, T=6, L=3, draw=uniform_row, traj_len=[6, 4],
            sketch_len=[3, 3], decoders=(),
            rules=["eq. (1)", "eq. (5)", "eq. (11)"],
            description="All action probabilities 1/3, all STOP probabilities 1/2: every path has "
                        "the same probability, loglik = log C(T-1, L-1) + T log(1/3) + (T-1) "
                        "log(1/2). Ties are structural, so there are no decoder fields."),
        taco_case(
            "taco_random_full", 110, B=3, T=7, L=4, draw=random_row,
            rules=["eq. (3)", "eq. (4)", "eq. (5)", "eq. (12)", "eq. (13)", "eq. (14)", "eq. (21)", "eq. (22)", "eq. (23)", "eq. (24)"],
            description="General random values, full-length rows (traj_len and sketch_len omitted)."),
        taco_case(
            "taco_random_T8", 111, B=5, T=8, L=5, draw=random_row, traj_len=[8, 8, 6, 7, 3],
            sketch_len=[5, 3, 4, 1, 2],
            rules=["eq. (4)", "eq. (10)", "eq. (12)", "eq. (13)", "eq. (14)", "eq. (21)", "eq. (22)", "eq. (23)", "eq. (24)"],
            description="General random values up to T = 8, L = 5, mixed lengths."),
        taco_case(
            "taco_stop_go_independent", 112, B=3, T=6, L=3, draw=independent_row,
            traj_len=[6, 6, 5], sketch_len=[3, 3, 2], rules=["R1", "eq. (13)", "eq. (14)"],
            description="exp(log_stop) + exp(log_go) != 1: row 0 sums spread over (0.06, 1.94), "
                        "row 1 near 2, row 2 near 0.1. Deriving go from stop fails loglik, d_go."),
        taco_case(
            "taco_logp_tol_as_given", 113, B=2, T=5, L=3, draw=tolerance_row,
            final_stop=lambda rng, b, L: [1e-9] * L, rules=["R2", "eq. (8)"],
            description="Read entries of log_stop, log_go, log_final_stop in (0, LOGP_TOL]: used "
                        "as given. Row 0: every stop and go is 1e-9 (clipping to 0 moves loglik "
                        "by 4e-9); row 1: 5e-10 and 1e-9 in places."),
        taco_case(
            "taco_log_act_density", 114, B=3, T=6, L=3, draw=density_rows(), traj_len=[6, 6, 6],
            sketch_len=[3, 3, 3], final_stop=lambda rng, b, L: [-0.25 * (l + 1) for l in range(L)],
            rules=["R2", "eq. (2)", "eq. (5)"],
            description="log_act is a log-density, any finite value. Row 0: log_act in [-2, 3]; "
                        "row 1: row 0 + 1.75 in every log_act (loglik + 6 * 1.75, the same "
                        "gradients and decoders); row 2: row 0 + 700 (probabilities overflow)."),
        taco_case(
            "taco_never_read_garbage", 115, B=3, T=6, L=4, draw=random_row, traj_len=[6, 5, 4],
            sketch_len=[4, 3, 2], pad="garbage", final_stop=final_stop_row, never_read=True,
            rules=["R3", "eq. (3)", "eq. (15)"],
            description="Garbage (NaN, +inf, 7.5, -inf, 1e300) in the valid entries no path reads: "
                        "stop and go at t = 0, act at l > t, go at l >= t, stop at l >= t and at "
                        "l = L_b - 1, log_final_stop at l != L_b - 1; and in the padding."),
        taco_case(
            "taco_tiny_rows", 116, B=4, T=3, L=3, draw=random_row, traj_len=[1, 2, 1, 3],
            sketch_len=[1, 2, 3, 1], pad="garbage", final_stop=tiny_final,
            rules=["eq. (1)", "eq. (3)", "eq. (8)", "eq. (15)", "R2", "R4"],
            description="Empty-ish rows: T_b = L_b = 1 (log f = 0), T_b = L_b = 2, T_b = 1 < L_b "
                        "= 3 with f given (impossible: d_final_stop 0), T_b = 3, L_b = 1 (log f = "
                        "1e-9)."),
        taco_case(
            "taco_ties_exact", 117, B=2, T=3, L=2, draw=constant_row([0.0, -0.25]),
            exact_ties=DECODERS, rules=["R6", "eq. (21)", "eq. (22)", "eq. (24)"],
            description="Exact ties in every decoder (all log inputs 0, or all -0.25): at t = 1 "
                        "both positions tie; argmax takes the lower position [0, 0, 1], Viterbi "
                        "stays when going back [0, 1, 1]."),
        taco_case(
            "taco_ties_viterbi", 118, B=3, T=7, L=3, draw=dyadic_row, decoders=("viterbi",),
            exact_ties=("viterbi",), rules=["R6", "eq. (23)", "eq. (24)"],
            description="Values in {-1, -1.5, -2}: many paths tie exactly in float64; Viterbi "
                        "must return the one eq. (24) back-tracks to (stay unless moving is "
                        "strictly better). Only viterbi and viterbi_score are given."),
        taco_case(
            "taco_near_ties", 119, B=3, T=3, L=2, draw=near_tie_row,
            min_gap={d: 1e-9 for d in DECODERS}, rules=["R6", "eq. (21)", "eq. (22)", "eq. (24)"],
            description="Near-ties of 1e-8 and 3e-9 at t = 1, against the tie direction in rows 0 "
                        "and 2 (argmax decoders choose position 1) and row 1 (Viterbi stays)."),
        taco_case(
            "taco_exact_zeros", 120, B=5, T=7, L=4, draw=zeros_row, traj_len=[7, 6, 2, 7, 7],
            sketch_len=[4, 3, 4, 4, 2], pad="garbage", final_stop=zeros_final, never_read=True,
            rules=["R3", "R4", "eq. (15)"],
            description="Every kind of gradient that is exactly 0. Row 0: never-read entries "
                        "(garbage) and read entries on no complete path (act at l < t - (T_b - "
                        "L_b), near the end); row 1: impossible through an action of probability 0 "
                        "at l = 1 on every step, although alpha is positive at l = 0; row 2: L_b > "
                        "T_b; row 3: impossible through f = 0 only (its decoders decode, rule R5); "
                        "row 4: L_b = 2 with wide padding. Every gradient, posterior and "
                        "d_final_stop entry that rule R3 or R4 fixes must be exactly 0."),
        taco_case(
            "taco_unreachable_argmax", 121, B=2, T=6, L=3, draw=unreachable_row, traj_len=[6, 5],
            sketch_len=[3, 3], rules=["eq. (21)", "R3"],
            description="Position 0 explains every action best, so the forward argmax stays at 0 "
                        "up to the last step, where position 0 can no longer reach L_b - 1 (eq. "
                        "(21) has no end constraint); those read entries lie on no complete path: "
                        "their gradients are exactly 0 and the posterior argmax moves on."),
    ]


def ctc_cases():
    return [
        ctc_case(
            "ctc_L1", 201, B=2, T=4, L=1, K=3, draw=ctc_draw(3, [[2], [0]]), traj_len=[4, 2],
            sketch_len=[1, 1],
            rules=["eq. (18)", "eq. (19)"],
            description="L = 1: a single class for the whole trajectory."),
        ctc_case(
            "ctc_T_equals_L", 202, B=2, T=4, L=4, K=4, draw=ctc_draw(4, [[3, 1, 3, 0], [2, 1]]),
            traj_len=[4, 2], sketch_len=[4, 2],
            rules=["eq. (18)", "eq. (20)"],
            description="T_b = L_b: one path; row 0's sketch repeats a class non-adjacently."),
        ctc_case(
            "ctc_L_greater_T", 203, B=2, T=6, L=3, K=4, draw=ctc_draw(4, [[0, 1, 2], [3, 1]]),
            traj_len=[2, 6], sketch_len=[3, 2],
            rules=["R4"],
            description="Row 0 has L_b = 3 > T_b = 2 (impossible: loglik -inf, zero gradients, "
                        "decoders -1); row 1 is ordinary."),
        ctc_case(
            "ctc_repeated_ids_padding", 204, B=4, T=7, L=5, K=4,
            draw=ctc_draw(4, [[1, 3, 1, 0, 1], [2, 0, 2], [3], [0, 1, 0, 1]]),
            traj_len=[7, 5, 6, 4], sketch_len=[5, 3, 1, 4], pad="garbage",
            rules=["eq. (20)", "R3"],
            description="Sketches with non-adjacent repeated class ids (d_log_p sums over the "
                        "positions sharing a class); sketch padding is -1; log_p padding "
                        "(t >= T_b) is garbage (NaN, +inf, ...)."),
        ctc_case(
            "ctc_extreme", 205, B=3, T=6, L=3, K=4, draw=ctc_extreme_draw, traj_len=[6, 5, 4],
            sketch_len=[3, 3, 2],
            rules=["R2", "R4", "eq. (19)"],
            description="Peaked class distributions (log-probs down to about -40); row 1: a class "
                        "absent from the sketch has probability 0 everywhere; row 2: the first "
                        "sketch class has probability 0 at t = 0 (impossible)."),
        ctc_case(
            "ctc_adjacent_repeat_ties", 206, B=2, T=5, L=3, K=4, draw=ctc_draw(4, [[1, 1, 2], [0, 0]]),
            traj_len=[5, 4], sketch_len=[3, 2],
            exact_ties=("forward_argmax", "viterbi"),
            rules=["eq. (18)", "eq. (20)", "R6", "eq. (21)", "eq. (22)", "eq. (24)"],
            description="Adjacent repeated class ids: paths that differ only in where they cross "
                        "the repeat have the same probability. The structural ties are exact in "
                        "float64 in any evaluation order: the forward argmax at t = 1 (alpha_1(0) "
                        "= alpha_1(1), the same product) goes to position 0, and Viterbi stays on "
                        "every tied step of the repeat; the posterior argmax has margins above "
                        "1e-6."),
        ctc_case(
            "ctc_random_T8", 207, B=4, T=8, L=5, K=5, draw=ctc_draw(5), traj_len=[8, 7, 8, 5],
            sketch_len=[5, 4, 2, 3],
            rules=["eq. (19)", "eq. (20)", "eq. (21)", "eq. (22)", "eq. (23)"],
            description="General random values up to T = 8, K = 5, L = 5, random sketches (no "
                        "adjacent repeats), mixed lengths."),
        ctc_case(
            "ctc_random_full", 208, B=3, T=6, L=3, K=5, draw=ctc_draw(5),
            rules=["eq. (19)", "eq. (20)", "eq. (21)", "eq. (22)", "eq. (23)"],
            description="General random values, full-length rows (traj_len and sketch_len omitted)."),
        ctc_case(
            "ctc_exact_zeros", 209, B=3, T=6, L=3, K=6, draw=ctc_zeros_draw, traj_len=[6, 4, 6],
            sketch_len=[3, 2, 3], pad="garbage", rules=["R3", "R4", "eq. (20)"],
            description="d_log_p entries that are exactly 0: classes absent from the sketch (3 of "
                        "6 in row 0), a class whose only sketch position is off every complete "
                        "path at that step (class 1 at t = 0 and t = 5 in row 0), padding "
                        "(garbage, row 1), and row 2, impossible (its first class has probability "
                        "0 at t = 0)."),
        ctc_case(
            "ctc_ties_exact", 210, B=2, T=3, L=2, K=3,
            draw=ctc_constant_draw([[0, 1], [2, 0]], [0.0, -0.25]), exact_ties=DECODERS,
            rules=["R6", "eq. (21)", "eq. (22)", "eq. (24)"],
            description="Exact ties in every CTC decoder (every log_p 0, or every log_p -0.25): at "
                        "t = 1 both positions tie; the argmax decoders take the lower position "
                        "[0, 0, 1], Viterbi stays when going back [0, 1, 1]."),
    ]


def long_cases():
    def random_fields(B, T, L, act=(-40.0, 2.0), stopgo=(-30.0, 0.0), final=False, pad=()):
        def fields(k):
            out = {"log_act": fill((B, T, L), 1000 + k, *act, blocks=pad),
                   "log_stop": fill((B, T, L), 2000 + k, *stopgo, blocks=pad),
                   "log_go": fill((B, T, L), 3000 + k, *stopgo, blocks=pad)}
            if final:
                out["log_final_stop"] = fill((B, L), 4000 + k, -8.0, 0.0)
            return out
        return fields

    def underflow(k):
        """spec/align.md §8's example: two alignments of probability e^-1000 each."""
        shape = (1, 202, 2)
        return {"log_act": fill(shape, 0, 0.0, 0.0, blocks=[
                    block(-10.0, t=(1, 101), l=(1, 2), shape=shape),
                    block(-10.0, t=(101, 202), l=(0, 1), shape=shape)]),
                "log_stop": fill(shape, 0, 0.0, 0.0, blocks=[
                    block("-inf", shape=shape), block(0.0, t=(1, 2), l=(0, 1), shape=shape),
                    block(0.0, t=(201, 202), l=(0, 1), shape=shape)]),
                "log_go": fill(shape, 0, 0.0, 0.0)}

    def dead(k):
        shape = (3, 500, 4)
        fields = random_fields(3, 500, 4, act=(-12.0, 0.0), stopgo=(-6.0, 0.0))(k)
        fields["log_act"]["set"] = [block("-inf", b=(0, 1), t=(300, 301), shape=shape),
                                    block("-inf", b=(1, 2), t=(0, 1), l=(0, 1), shape=shape),
                                    block("-inf", b=(2, 3), t=(100, 400), l=(1, 2), shape=shape)]
        return fields

    pad = padding_blocks([1000, 641], [6, 4], 1000, 6)
    sketches = [[0, 3, 1, 5, 2, 4, 0, 2, 5, 1, 3, 4], [2, 5, 0, 3, 1, 4, 2]]
    return [
        long_taco_case(
            "long_random_T1000", "T = 1000, L = 6, log_act in [-40, 2], log_stop and log_go "
            "independent in [-30, 0], terminal STOP; row 1 (T_b = 641, L_b = 4) has NaN padding. "
            "|loglik| is about 2e4.", ["R7", "R1", "R3", "eq. (4)", "eq. (8)", "eq. (17)", "eq. (25)"],
            B=2, T=1000, L=6, fields=random_fields(2, 1000, 6, final=True, pad=pad),
            traj_len=[1000, 641], sketch_len=[6, 4], final=True, extra_t=(639, 640, 641)),
        long_taco_case(
            "long_underflow_T202", "spec/align.md §8's example: two alignments of probability "
            "e^-1000 each whose forward masses differ by e^-1000 at t = 100; loglik = log 2 - "
            "1000. Exact ties in the forward argmax (t = 200) and Viterbi (both paths score "
            "-1000).", ["R7", "R6", "eq. (4)", "eq. (25)"],
            B=1, T=202, L=2, fields=underflow, decoders=("forward_argmax", "viterbi"),
            exact_ties=("forward_argmax", "viterbi"), extra_t=(1, 100, 101, 200, 201)),
        long_taco_case(
            "long_density_T2000", "T = 2000, L = 5, log_act in [0, 6] (a density above 1 "
            "everywhere): loglik grows to about +4000; log_stop, log_go in [-2, 0].",
            ["R7", "R2", "eq. (25)"], B=1, T=2000, L=5,
            fields=random_fields(1, 2000, 5, act=(0.0, 6.0), stopgo=(-2.0, 0.0))),
        long_taco_case(
            "long_dead_rows_T500", "Rows that die: row 0 has no possible action at t = 300 "
            "(every state -inf from then on), row 1 from t = 0; row 2 is possible but position "
            "1 is blocked for t in [100, 400).", ["R4", "R7", "eq. (25)"],
            B=3, T=500, L=4, fields=dead, extra_t=(99, 100, 299, 300, 399, 400)),
        long_taco_case(
            "long_L1_T3000", "L = 1, T = 3000: one path, loglik is the plain sum of log_act "
            "and log_go (about -5e4); gradients are exact 0s and 1s.", ["R7", "eq. (1)", "eq. (2)"],
            B=1, T=3000, L=1, fields=random_fields(1, 3000, 1, act=(-30.0, 0.0), stopgo=(-6.0, 0.0))),
        long_ctc_case(
            "ctc_long_T1500", "Blank-free CTC, T = 1500, K = 6, sketches of 12 and 7 classes "
            "(repeats allowed, none adjacent); row 1 has T_b = 900.", ["R7", "eq. (19)", "eq. (20)"],
            B=2, T=1500, K=6, sketches=sketches, traj_len=[1500, 900],
            field=lambda k: fill((2, 1500, 6), 5000 + k, -12.0, 0.0)),
    ]


BLOCK = 16   # taco_ref's recentring period (spec/align.md eq. (25)), a constant here: the
             # generator never imports taco_ref. Other periods that divide it are covered too.
BLOCK_T = [9, 15] + [t for k in range(1, 13) for t in (BLOCK * k, BLOCK * k + 1)] + [200]


def boundary_times(T):
    """The steps on either side of every multiple of BLOCK below T (recentring boundaries)."""
    return [t + d for t in range(BLOCK, T, BLOCK) for d in (-1, 0, 1)]


def block_cases():
    """T from 9 to 200 on both sides of every multiple of BLOCK (rule R7): one TACO and one CTC
    case per T, each batching rows of lengths T, T - 1 and T - 8, so that both an
    implementation that recentres on the padded time axis and one that works row by row meets
    a row whose last step is a block boundary and one whose last step is just before it."""
    cases = []
    for T in BLOCK_T:
        Tb = [T, T - 1, T - 8] if T > 8 else [T, T - 1]
        B, L = len(Tb), 4
        Lb = [4, 3, min(2, Tb[-1])][:B]
        shape = (B, T, L)
        pad = padding_blocks(Tb, Lb, T, L)

        def fields(k, T=T, B=B, shape=shape, pad=pad):
            seed = 100_000 * (k + 1) + 100 * T
            return {"log_act": fill(shape, seed + 1, -6.0, 1.0, step=2.0 ** -16, blocks=pad),
                    "log_stop": fill(shape, seed + 2, -4.0, 0.0, step=2.0 ** -16, blocks=pad),
                    "log_go": fill(shape, seed + 3, -4.0, 0.0, step=2.0 ** -16, blocks=pad),
                    "log_final_stop": fill((B, L), seed + 4, -4.0, 0.0, step=2.0 ** -16)}
        cases.append(long_taco_case(
            f"taco_blocks_T{T}", f"T = {T}: rows of length {', '.join(map(str, Tb))} (L_b = "
            f"{', '.join(map(str, Lb))}) across the recentring blocks of {BLOCK} steps; log_act in "
            "[-6, 1], independent log_stop and log_go in [-4, 0], terminal STOP, NaN padding. "
            "Gradients are stored on both sides of every block boundary.",
            ["R7", "eq. (25)", "eq. (4)", "eq. (17)"], B=B, T=T, L=L, fields=fields,
            traj_len=Tb, sketch_len=Lb, final=True, extra_t=boundary_times(T) + [t - 1 for t in Tb],
            spread=0))

        sketches = [sk[:lb] for sk, lb in zip([[1, 3, 0, 3], [4, 2, 1], [2, 0]], Lb)]
        ctc_pad = [block("nan", b=(b, b + 1), t=(tb, T), shape=(B, T, 5)) for b, tb in enumerate(Tb)
                   if tb < T]

        def field(k, T=T, B=B, ctc_pad=ctc_pad):
            return fill((B, T, 5), 100_000 * (k + 1) + 100 * T + 5, -6.0, 0.0, step=2.0 ** -16,
                        blocks=ctc_pad)
        cases.append(long_ctc_case(
            f"ctc_blocks_T{T}", f"Blank-free CTC, T = {T}: rows of length {', '.join(map(str, Tb))}, "
            f"K = 5, sketches {sketches} (a non-adjacent repeat), NaN padding, across the "
            f"recentring blocks of {BLOCK} steps.", ["R7", "eq. (25)", "eq. (19)", "eq. (20)"],
            B=B, T=T, K=5, sketches=sketches, field=field,
            traj_len=Tb, extra_t=boundary_times(T) + [t - 1 for t in Tb], spread=0))
    return cases


FILES = {
    "taco.json": ("TACO alignment (spec/align.md): loglik, gradients, posterior, decoders.", taco_cases),
    "ctc.json": ("Blank-free CTC (spec/align.md): loglik, d_log_p, posterior, decoders.", ctc_cases),
    "long.json": ("Long rows (spec/align.md rule R7): formula inputs, references from exact.py.",
                  long_cases),
    "blocks.json": ("T from 9 to 200 on both sides of every recentring block boundary (spec/align.md "
                    "rule R7): formula inputs, references from exact.py.", block_cases),
}


# ----------------------------------------------------------------------------- writing

def encode(x):
    """Arrays and numbers to JSON-ready values; non-finite floats become "-inf", "inf", "nan"."""
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, dict):
        return {k: encode(v) for k, v in x.items()}
    a = np.asarray(x)
    if a.dtype.kind in "iu":
        return a.tolist()
    if a.ndim:
        return [encode(v) for v in a]
    v = float(a)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def dumps(value, indent=0):
    """JSON text: objects one key per line, arrays one innermost vector per line."""
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and isinstance(value[0], (list, dict)):
        return "[\n" + ",\n".join(inner + dumps(v, indent + 1) for v in value) + "\n" + pad + "]"
    return json.dumps(value, allow_nan=False)   # floats use repr: shortest round-trip form


def build():
    """{file name: JSON text} for every vector file."""
    texts = {}
    for fname, (description, make) in FILES.items():
        cases = encode_cases(make())
        for case in cases:
            unknown = set(case["rules"]) - set(RULES)
            if unknown:
                raise RuntimeError(f"{case['name']}: unknown rules {sorted(unknown)}")
        doc = {"format": FORMAT, "description": description, "rules": RULES,
               "quantities": QUANTITY_EQ, "cases": cases}
        texts[fname] = dumps(doc) + "\n"
    return texts


def encode_cases(cases):
    return [encode(case) for case in cases]


def main(out_dir=HERE):
    out_dir = Path(out_dir)
    for fname, text in build().items():
        (out_dir / fname).write_text(text, encoding="utf-8")
        print(f"wrote {out_dir / fname} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
