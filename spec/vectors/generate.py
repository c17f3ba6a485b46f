"""Build the conformance vectors in spec/vectors/*.json from brute_force.py alone.

Run from the repository root:  python spec/vectors/generate.py
It rewrites taco.json and ctc.json beside this file. The format, the encoding of
non-finite numbers and the tolerances are described in spec/vectors/README.md.

Every expected value comes from the path enumeration in brute_force.py, applied
row by row to the valid part (t < T_b, l < L_b) of each batch row; padding in
the outputs is 0 for gradients and posteriors and -1 for decoders. taco_ref is
never imported here: the vectors must stay an independent statement of the maths.

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

FORMAT = "taco_ref conformance vectors v1"
TIE_GAP = 1e-6   # decoders whose top two candidates are closer than this are redrawn
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

def forward_alphas(log_act, log_stop, log_go):
    """alpha_t(l) (T, L) by enumeration of prefixes, as in brute_force.taco_reference."""
    T, L = log_act.shape
    return np.array([[bf._logsumexp([bf.path_logprob(z, log_act, log_stop, log_go)
                                     for z in bf.prefixes(t + 1, l)]) for l in range(L)]
                     for t in range(T)])                                  # (T, L)


def top_two_gap(values):
    """Gap between the two largest finite values (inf when fewer than two are finite)."""
    finite = sorted((v for v in values if v != -math.inf), reverse=True)
    return finite[0] - finite[1] if len(finite) >= 2 else math.inf


def decoder_gap(log_act, log_stop, log_go, ref):
    """Smallest top-two gap over every argmax the three decoders take on this row."""
    if ref["loglik"] == -math.inf:
        return math.inf   # impossible row: the decoders return -1, there is nothing to break
    T, L = log_act.shape
    gaps = [top_two_gap([bf.path_logprob(z, log_act, log_stop, log_go) for z in bf.paths(T, L)])]
    alpha = forward_alphas(log_act, log_stop, log_go)                    # (T, L)
    for t in range(T):
        gaps.append(top_two_gap(alpha[t]))
        gaps.append(top_two_gap(ref["posterior"][t]))
    return min(gaps)


def taco_row(act, stop, go, final_stop=None):
    """Brute-force reference plus decoder gap for one TACO row (nested lists, valid part only)."""
    act, stop, go = (np.array(x, dtype=float) for x in (act, stop, go))  # (T_b, L_b)
    fs = None if final_stop is None else np.array(final_stop, dtype=float)
    ref = bf.taco_reference(act, stop, go, fs)
    if act.shape[1] > act.shape[0]:
        return ref, math.inf
    return ref, decoder_gap(act, stop, go, ref)


def ctc_row(log_p, sketch):
    """Brute-force reference plus decoder gap for one CTC row (valid part only)."""
    log_p = np.array(log_p, dtype=float)                                  # (T_b, K)
    ref = bf.ctc_reference(log_p, sketch)
    if len(sketch) > log_p.shape[0]:
        return ref, math.inf
    act = log_p[:, list(sketch)]                                          # (T_b, L_b)
    zeros = np.zeros_like(act)
    return ref, decoder_gap(act, zeros, zeros, ref)


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


def expected_outputs(refs, T, L, family, K=None, decoders=True):
    """The "expected" dict of a case from its per-row brute-force references."""
    B = len(refs)
    exp = {"loglik": np.array([r["loglik"] for r in refs])}               # (B,)
    if family == "taco":
        for key in ("d_act", "d_stop", "d_go"):
            exp[key] = scatter(refs, key, (B, T, L), 0)                   # (B, T, L)
        exp["d_final_stop"] = scatter(refs, "d_final_stop", (B, L), 0)    # (B, L)
    else:
        exp["d_log_p"] = scatter(refs, "d_log_p", (B, T, K), 0)           # (B, T, K)
    exp["posterior"] = scatter(refs, "posterior", (B, T, L), 0)           # (B, T, L)
    if decoders:
        for key in DECODERS:
            exp[key] = scatter(refs, key, (B, T), -1, np.int64)       # (B, T)
        exp["viterbi_score"] = np.array([r["viterbi_score"] for r in refs])  # (B,)
    return exp


def draw_until_untied(name, decoders, attempt):
    """Call attempt() until no decoder has a near-tie (its last item: [(ref, gap), ...])."""
    for _ in range(MAX_DRAWS):
        out = attempt()
        if not decoders or min(gap for _, gap in out[-1]) >= TIE_GAP:
            return out
    raise RuntimeError(f"{name}: decoders still tied after {MAX_DRAWS} draws")


def taco_case(name, seed, B, T, L, draw, description, traj_len=None, sketch_len=None,
              pad="random", final_stop=None, decoders=True):
    """Build one TACO case.

    draw(rng, b, T_b, L_b) -> (act, stop, go) nested lists of shape (T_b, L_b);
    final_stop(rng, b, L_b) -> list of length L_b, or None for no terminal STOP.
    The whole case is redrawn while some decoder has a near tie (when decoders=True).
    """
    rng = random.Random(seed)
    Tb = traj_len if traj_len is not None else [T] * B
    Lb = sketch_len if sketch_len is not None else [L] * B
    def attempt():
        rows = [draw(rng, b, Tb[b], Lb[b]) for b in range(B)]
        fs_rows = None if final_stop is None else [final_stop(rng, b, Lb[b]) for b in range(B)]
        return rows, fs_rows, [taco_row(*rows[b], None if fs_rows is None else fs_rows[b])
                               for b in range(B)]

    rows, fs_rows, results = draw_until_untied(name, decoders, attempt)
    refs = [ref for ref, _ in results]
    padder = pad_source(rng, pad)
    valid = lambda b, idx: idx[0] < Tb[b] and idx[1] < Lb[b]          # noqa: E731
    inputs = {name_: batch([r[i] for r in rows], (B, T, L), valid, padder)
              for i, name_ in enumerate(("log_act", "log_stop", "log_go"))}
    inputs["traj_len"] = None if traj_len is None else np.array(traj_len, dtype=np.int64)
    inputs["sketch_len"] = None if sketch_len is None else np.array(sketch_len, dtype=np.int64)
    if fs_rows is not None:
        inputs["log_final_stop"] = batch(fs_rows, (B, L), lambda b, idx: idx[0] < Lb[b], padder)
    return {"name": name, "description": description, "family": "taco", "inputs": inputs,
            "expected": expected_outputs(refs, T, L, "taco", decoders=decoders)}


def ctc_case(name, seed, B, T, L, K, draw, description, traj_len=None, sketch_len=None,
             pad="random", decoders=True):
    """Build one CTC case; draw(rng, b, T_b, L_b) -> (log_p (T_b, K), sketch (L_b,))."""
    rng = random.Random(seed)
    Tb = traj_len if traj_len is not None else [T] * B
    Lb = sketch_len if sketch_len is not None else [L] * B
    def attempt():
        rows = [draw(rng, b, Tb[b], Lb[b]) for b in range(B)]
        return rows, [ctc_row(log_p, sketch) for log_p, sketch in rows]

    rows, results = draw_until_untied(name, decoders, attempt)
    refs = [ref for ref, _ in results]
    padder = pad_source(rng, pad)
    log_p = batch([r[0] for r in rows], (B, T, K), lambda b, idx: idx[0] < Tb[b], padder)
    sketch = np.full((B, L), -1, dtype=np.int64)                          # (B, L), -1 in padding
    for b, (_, s) in enumerate(rows):
        sketch[b, :len(s)] = s
    inputs = {"log_p": log_p, "sketch": sketch,
              "traj_len": None if traj_len is None else np.array(traj_len, dtype=np.int64),
              "sketch_len": None if sketch_len is None else np.array(sketch_len, dtype=np.int64)}
    return {"name": name, "description": description, "family": "ctc", "inputs": inputs,
            "expected": expected_outputs(refs, T, L, "ctc", K=K, decoders=decoders)}


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


def taco_cases():
    return [
        taco_case(
            "taco_L1", 101, B=2, T=5, L=1, draw=random_row, traj_len=[5, 1], sketch_len=[1, 1],
            description="L = 1: a single sub-task, one path; row 1 is the smallest row "
                        "(T_b = L_b = 1)."),
        taco_case(
            "taco_T_equals_L", 102, B=2, T=4, L=4, draw=random_row, traj_len=[4, 2], sketch_len=[4, 2],
            description="T_b = L_b: exactly one path (move on at every step); posterior one-hot."),
        taco_case(
            "taco_L_greater_T", 103, B=2, T=2, L=3, draw=random_row,
            description="Full-size arrays with L > T, lengths omitted: every row impossible "
                        "(loglik -inf, zero gradients, decoders -1)."),
        taco_case(
            "taco_mixed_padding_garbage", 104, B=4, T=6, L=4, draw=random_row,
            traj_len=[6, 3, 5, 2], sketch_len=[4, 2, 1, 3], pad="garbage",
            description="Mixed traj_len / sketch_len; padding cycles through NaN, +inf, 7.5, -inf, "
                        "1e300, -3.25 and must not influence anything. Row 3 has L_b > T_b "
                        "(impossible)."),
        taco_case(
            "taco_final_stop", 105, B=3, T=5, L=3, draw=random_row, traj_len=[5, 4, 3],
            sketch_len=[3, 2, 3], pad="garbage", final_stop=final_stop_row,
            description="Terminal STOP: log_final_stop[b, L_b - 1] is added to loglik and to "
                        "viterbi_score; d_final_stop is 1 there. Padding, including that of "
                        "log_final_stop, is garbage."),
        taco_case(
            "taco_final_stop_zero", 106, B=2, T=5, L=3, draw=random_row,
            final_stop=final_stop_zero_row, decoders=False,
            description="Terminal STOP with probability 0: row 0 has log_final_stop = -inf at "
                        "L_b - 1 (impossible); row 1 has -inf at l = 0 only (no effect). No decoder "
                        "fields: the decoders take no log_final_stop."),
        taco_case(
            "taco_neg_inf_inside", 107, B=4, T=6, L=3, draw=neg_inf_row, traj_len=[6, 6, 5, 4],
            sketch_len=[3, 3, 3, 2],
            description="-inf inside the valid region. Row 0: STOP probability 0 in places; row 1: "
                        "STOP probability 1 in places; row 2: action probability 0 at l = 1 on every "
                        "step (impossible); row 3: action probability 0 at (T_b - 1, L_b - 1) "
                        "(impossible)."),
        taco_case(
            "taco_extreme", 108, B=2, T=7, L=3, draw=extreme_row,
            description="Extreme log-probabilities. Row 0: every action and STOP log-probability "
                        "near -40 (loglik about -354); row 1: each entry near 0 or near -40, so "
                        "posteriors hold values near exp(-40)."),
        taco_case(
            "taco_uniform_ties", 109, B=2, T=6, L=3, draw=uniform_row, traj_len=[6, 4],
            sketch_len=[3, 3], decoders=False,
            description="All action probabilities 1/3, all STOP probabilities 1/2: every path has "
                        "the same probability, loglik = log C(T-1, L-1) + T log(1/3) + (T-1) "
                        "log(1/2). Ties are structural, so there are no decoder fields."),
        taco_case(
            "taco_random_full", 110, B=3, T=7, L=4, draw=random_row,
            description="General random values, full-length rows (traj_len and sketch_len omitted)."),
        taco_case(
            "taco_random_T8", 111, B=5, T=8, L=5, draw=random_row, traj_len=[8, 8, 6, 7, 3],
            sketch_len=[5, 3, 4, 1, 2],
            description="General random values up to T = 8, L = 5, mixed lengths."),
    ]


def ctc_cases():
    return [
        ctc_case(
            "ctc_L1", 201, B=2, T=4, L=1, K=3, draw=ctc_draw(3, [[2], [0]]), traj_len=[4, 2],
            sketch_len=[1, 1],
            description="L = 1: a single class for the whole trajectory."),
        ctc_case(
            "ctc_T_equals_L", 202, B=2, T=4, L=4, K=4, draw=ctc_draw(4, [[3, 1, 3, 0], [2, 1]]),
            traj_len=[4, 2], sketch_len=[4, 2],
            description="T_b = L_b: one path; row 0's sketch repeats a class non-adjacently."),
        ctc_case(
            "ctc_L_greater_T", 203, B=2, T=6, L=3, K=4, draw=ctc_draw(4, [[0, 1, 2], [3, 1]]),
            traj_len=[2, 6], sketch_len=[3, 2],
            description="Row 0 has L_b = 3 > T_b = 2 (impossible: loglik -inf, zero gradients, "
                        "decoders -1); row 1 is ordinary."),
        ctc_case(
            "ctc_repeated_ids_padding", 204, B=4, T=7, L=5, K=4,
            draw=ctc_draw(4, [[1, 3, 1, 0, 1], [2, 0, 2], [3], [0, 1, 0, 1]]),
            traj_len=[7, 5, 6, 4], sketch_len=[5, 3, 1, 4], pad="garbage",
            description="Sketches with non-adjacent repeated class ids (d_log_p sums over the "
                        "positions sharing a class); sketch padding is -1; log_p padding "
                        "(t >= T_b) is garbage (NaN, +inf, ...)."),
        ctc_case(
            "ctc_extreme", 205, B=3, T=6, L=3, K=4, draw=ctc_extreme_draw, traj_len=[6, 5, 4],
            sketch_len=[3, 3, 2],
            description="Peaked class distributions (log-probs down to about -40); row 1: a class "
                        "absent from the sketch has probability 0 everywhere; row 2: the first "
                        "sketch class has probability 0 at t = 0 (impossible)."),
        ctc_case(
            "ctc_adjacent_repeat_ties", 206, B=2, T=5, L=3, K=4, draw=ctc_draw(4, [[1, 1, 2], [0, 0]]),
            traj_len=[5, 4], sketch_len=[3, 2], decoders=False,
            description="Adjacent repeated class ids: paths that differ only in where they cross "
                        "the repeat have the same probability, so ties are structural and there "
                        "are no decoder fields."),
        ctc_case(
            "ctc_random_T8", 207, B=4, T=8, L=5, K=5, draw=ctc_draw(5), traj_len=[8, 7, 8, 5],
            sketch_len=[5, 4, 2, 3],
            description="General random values up to T = 8, K = 5, L = 5, random sketches (no "
                        "adjacent repeats), mixed lengths."),
        ctc_case(
            "ctc_random_full", 208, B=3, T=6, L=3, K=5, draw=ctc_draw(5),
            description="General random values, full-length rows (traj_len and sketch_len omitted)."),
    ]


FILES = {
    "taco.json": ("TACO alignment (spec/align.md): loglik, gradients, posterior, decoders.", taco_cases),
    "ctc.json": ("Blank-free CTC (spec/align.md): loglik, d_log_p, posterior, decoders.", ctc_cases),
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
        doc = {"format": FORMAT, "description": description, "cases": encode_cases(make())}
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
