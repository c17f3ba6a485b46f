"""Conformance kit: run an alignment implementation through the vectors in spec/vectors/.

    taco conformance MODULE [--vectors DIR] [--case SUBSTRING] [--verbose]
    python -m taco_ref.conformance MODULE ...

MODULE is an importable Python module (``taco_ref.align``, ``mypkg.align``) that provides the
functions of spec/vectors/README.md ("Function signatures") under the spec's names. Each
case's inputs are passed to them, and every expected quantity is compared with the case's
tolerance, and exactly where rules R3 and R4 of spec/align.md fix a gradient at 0. For each
failing case and quantity the report names the one rule or equation its worst element breaks,
that element's index, the value expected and the value got. A function the module lacks fails
the quantities it computes. Exit status 0 when everything passes, 1 when something fails, 2 on
bad arguments (a module that cannot be found, vectors that cannot be read, a --case that
selects no case).

The kit exists to run other people's code, so the command runs the implementation in a child
process (`run_isolated`): importing it and each case there, with a time limit per case
(--timeout). An implementation that raises or has a syntax error at import, exits (sys.exit,
os._exit) at import or inside a function, hangs, or crashes the interpreter is a failure with
one line saying which, never a traceback or a silent exit 0; a fresh child runs the cases after
the one that failed.

The vectors ship inside the installed package (setup.py copies them there); in a source
checkout they are read from spec/vectors/. This module reads the vectors and compares numbers;
it contains no alignment maths.
"""
import argparse
import functools
import importlib
import importlib.util
import json
import multiprocessing
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import NamedTuple

import numpy as np

from taco_ref.align import DECODER_NAMES


def _default_vectors():
    """The installed package's copy of the vectors, else the source checkout's spec/vectors."""
    here = Path(__file__).resolve().parent                              # taco_ref/conformance
    installed = here / "vectors"
    return installed if any(installed.glob("*.json")) else here.parent.parent / "spec" / "vectors"


VECTORS = _default_vectors()
FORMATS = ("taco_ref conformance vectors v2",)
RTOL = ATOL = 1e-12
DECODERS = DECODER_NAMES               # the vectors' decoder fields are the decoders' names
INT_FIELDS = {"traj_len", "sketch_len", "sketch", *DECODERS}
GRADIENTS = ("d_act", "d_stop", "d_go", "posterior", "d_log_p")   # (B, T, ...) fields
TACO_FUNCTIONS = {"loglik": "taco_forward_backward", "loglik (taco_loglik)": "taco_loglik",
                  "forward_argmax": "align_forward_argmax",
                  "posterior_argmax": "align_posterior_argmax", "viterbi": "align_viterbi",
                  "viterbi_score": "align_viterbi"}
CTC_FUNCTIONS = {"loglik": "ctc_forward_backward", "loglik (ctc_loglik)": "ctc_loglik",
                 "forward_argmax": "ctc_align_forward_argmax",
                 "posterior_argmax": "ctc_align_posterior_argmax", "viterbi": "ctc_align_viterbi",
                 "viterbi_score": "ctc_align_viterbi"}


class Result(NamedTuple):
    """One (case, quantity) comparison."""

    case: str
    quantity: str
    passed: bool
    max_error: float     # largest |got - expected| (inf: wrong shape, non-finite mismatch, error);
                         # for decoders the number of positions that differ
    rule: str            # the rule or equation the worst element breaks ("" when it passed)
    index: tuple         # that element's index (() for a whole-array failure or a pass)
    got: object          # its value as returned (None when there is none)
    expected: object     # its expected value
    detail: str          # the failure in words ("" when it passed)


# ------------------------------------------------------------------------------ reading

def _formula_module(vectors):
    """formula.py beside the vectors, which expands the compact inputs of long cases."""
    spec = importlib.util.spec_from_file_location("taco_vectors_formula", Path(vectors) / "formula.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _decode(value):
    """JSON value -> Python numbers: "-inf", "inf", "nan" become floats."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return float(value) if isinstance(value, str) else value


def _array(key, value, formula):
    if value is None:
        return None
    if isinstance(value, dict):
        value = formula.expand(value)
    return np.array(_decode(value), dtype=np.int64 if key in INT_FIELDS else np.float64)


def load(vectors=None):
    """[(case dict with arrays, {rule id: text}, {quantity: equation})] from every vector file.

    Expanding the formula inputs takes about a second, so the cases are kept for later calls
    (until a file changes): treat them as read-only.
    """
    vectors = Path(VECTORS if vectors is None else vectors)
    files = sorted(vectors.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no *.json vector files in {vectors}")
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    return list(_load(vectors.resolve(), stamp))


@functools.lru_cache(maxsize=4)
def _load(vectors, stamp):
    formula = _formula_module(vectors)
    out = []
    for path in sorted(vectors.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") not in FORMATS:
            raise ValueError(f"{path.name}: format {doc.get('format')!r}, expected one of {FORMATS}")
        for case in doc["cases"]:
            case = dict(case)
            case["inputs"] = {k: _array(k, v, formula) for k, v in case["inputs"].items()}
            case["expected"] = {k: _array(k, v, formula) for k, v in case["expected"].items()}
            out.append((case, doc["rules"], doc["quantities"]))
    return tuple(out)


# ------------------------------------------------------------------------------ running

def _field(res, name):
    """A result field by attribute (named tuple, object) or key (dict)."""
    return res[name] if isinstance(res, dict) else getattr(res, name)


class _Family(NamedTuple):
    """What a case of one family ("taco" or "ctc") calls on the implementation: {family}_forward_backward
    and {family}_loglik on the inputs, then the decoders its expected fields name."""

    inputs: tuple       # the positional inputs, by name
    optional: tuple     # keyword inputs passed to forward_backward and loglik (None when absent)
    grads: tuple        # the fields of forward_backward's result
    decoders: str       # the decoders' prefix: {decoders}forward_argmax, ...posterior_argmax, ...viterbi


_FAMILIES = {
    "taco": _Family(("log_act", "log_stop", "log_go"), ("log_final_stop",),
                    ("loglik", "d_act", "d_stop", "d_go", "posterior", "d_final_stop"), "align_"),
    "ctc": _Family(("log_p", "sketch"), (), ("loglik", "d_log_p", "posterior"), "ctc_align_"),
}


def _call(impl, family, inp, fields):
    """{quantity: array or exception} for a case of family."""
    spec = _FAMILIES[family]
    args = tuple(inp[k] for k in spec.inputs)
    lens = {"traj_len": inp["traj_len"], "sketch_len": inp["sketch_len"]}
    extra = {k: inp.get(k) for k in spec.optional}
    got = {}

    def attempt(keys, fn):
        try:
            values = fn()
        except Exception as err:  # any failure of the implementation is a result, not a crash
            values = {k: err for k in keys}
        got.update(values)

    fb, loglik = f"{family}_forward_backward", f"{family}_loglik"
    attempt(spec.grads, lambda: {k: _field(getattr(impl, fb)(*args, **lens, **extra), k) for k in spec.grads})
    attempt([f"loglik ({loglik})"], lambda: {f"loglik ({loglik})": getattr(impl, loglik)(*args, **lens, **extra)})
    for key in ("forward_argmax", "posterior_argmax"):
        if key in fields:
            attempt([key], lambda key=key: {key: getattr(impl, spec.decoders + key)(*args, **lens)})
    if "viterbi" in fields:
        viterbi = spec.decoders + "viterbi"
        attempt(["viterbi", "viterbi_score"], lambda: dict(zip(
            ("viterbi", "viterbi_score"), getattr(impl, viterbi)(*args, **lens, return_score=True))))
    return got


# ------------------------------------------------------------------------------ what must be 0

class _Layout(NamedTuple):
    """Where each entry of a case lies (spec/align.md §4, rules R3 and R4), full time axis."""

    T_b: np.ndarray        # (B,)
    L_b: np.ndarray        # (B,)
    possible: np.ndarray   # (B,) bool: expected loglik > -inf (rule R4 otherwise)
    padding: np.ndarray    # (B, T, L) bool: t >= T_b or l >= L_b
    read: dict             # {"act", "stop", "go": (B, T, L) bool}: entries some path prefix reads
    on_path: dict          # {"act", "stop", "go": (B, T, L) bool}: entries some complete path uses


def layout(case):
    """The _Layout of a case, from its lengths and expected loglik (0-based, spec/align.md R3).

    act[t, l] is read for l <= t, go[t, l] for l < t, stop[t, l] for l < t and l < L_b - 1 (all
    for t < T_b, l < L_b). A read entry is on a complete path when its cell can still reach
    (T_b - 1, L_b - 1): l >= t - (T_b - L_b) (for stop, l + 1 >= t - (T_b - L_b)); no entry of
    an impossible row is.
    """
    inp = case["inputs"]
    shaped = inp["log_act"] if case["family"] == "taco" else inp["log_p"]
    B, T = shaped.shape[:2]
    L = inp["log_act"].shape[2] if case["family"] == "taco" else inp["sketch"].shape[1]
    T_b = np.full(B, T) if inp["traj_len"] is None else np.asarray(inp["traj_len"])
    L_b = np.full(B, L) if inp["sketch_len"] is None else np.asarray(inp["sketch_len"])
    possible = np.asarray(case["expected"]["loglik"]) > -np.inf
    t = np.arange(T)[None, :, None]
    l = np.arange(L)[None, None, :]
    Tb, Lb = T_b[:, None, None], L_b[:, None, None]
    valid = (t < Tb) & (l < Lb)                                               # (B, T, L)
    read = {"act": valid & (l <= t), "go": valid & (l < t)}
    read["stop"] = read["go"] & (l < Lb - 1)
    reach = possible[:, None, None] & (l >= t - (Tb - Lb))                    # can end at L_b
    on_path = {"act": read["act"] & reach, "go": read["go"] & reach,
               "stop": read["stop"] & possible[:, None, None] & (l + 1 >= t - (Tb - Lb))}
    return _Layout(T_b, L_b, possible, ~valid, read, on_path)


def zero_masks(case):
    """{quantity: bool array shaped like its expected field}: the entries rules R3 and R4 of
    spec/align.md fix at exactly 0 (padding, entries no path reads, read entries on no complete
    path, every entry of an impossible row, d_final_stop off L_b - 1 or when no terminal STOP is
    given; for CTC, d_log_p of a class whose sketch positions are all off every complete path
    at that step, classes absent from the sketch included)."""
    lay = layout(case)
    exp = case["expected"]
    masks = {}
    if case["family"] == "taco":
        for key, entry in (("d_act", "act"), ("posterior", "act"), ("d_stop", "stop"), ("d_go", "go")):
            masks[key] = ~lay.on_path[entry]
        B, L = lay.padding.shape[0], lay.padding.shape[2]
        final = np.zeros((B, L), bool)
        if "log_final_stop" in case["inputs"]:
            final[np.arange(B), lay.L_b - 1] = lay.possible
        masks["d_final_stop"] = ~final
    else:
        masks["posterior"] = ~lay.on_path["act"]
        sketch = case["inputs"]["sketch"]                                     # (B, L)
        K = case["inputs"]["log_p"].shape[2]
        hit = np.zeros(lay.padding.shape[:2] + (K,), bool)                    # (B, T, K)
        for b in range(sketch.shape[0]):
            for l in range(lay.L_b[b]):
                hit[b, :, sketch[b, l]] |= lay.on_path["act"][b, :, l]
        masks["d_log_p"] = ~hit
    sample_t = case.get("sample_t")
    if sample_t is not None:
        masks = {k: m[:, sample_t] if k in GRADIENTS else m for k, m in masks.items()}
    return {k: m for k, m in masks.items() if k in exp}


def _zero_reason(case, key, idx):
    """Why rule R3 or R4 fixes entry idx of quantity key at 0, in words."""
    lay = layout(case)
    b = idx[0]
    if not lay.possible[b]:
        return "R4", "an impossible row: every gradient and posterior is exactly 0"
    if key == "d_final_stop":
        return "R3", f"d_final_stop off L_b - 1 = {lay.L_b[b] - 1} or without a terminal STOP is exactly 0"
    t = idx[1] if case.get("sample_t") is None else case["sample_t"][idx[1]]
    if t >= lay.T_b[b] or (key != "d_log_p" and idx[2] >= lay.L_b[b]):
        return "R3", "padding: its gradient is exactly 0"
    if key == "d_log_p":
        return "R3", "a class none of whose sketch positions is on a complete path at this step"
    entry = {"d_stop": "stop", "d_go": "go"}.get(key, "act")
    if not lay.read[entry][b, t, idx[2]]:
        return "R3", f"{entry}[{t}, {idx[2]}] is never read: its gradient is exactly 0"
    return "R3", f"{entry}[{t}, {idx[2]}] is read but on no complete path: its gradient is exactly 0"


# ------------------------------------------------------------------------------ comparing

def compare(key, have, want, rtol, atol, zero=None):
    """(passed, max_error, index of the worst element or None, detail) for one quantity.

    Floats pass where |have - want| <= atol + rtol |want| (non-finite values must match
    exactly) and, where the bool mask zero is set, where have is exactly 0. The worst element
    is the one furthest outside its allowance, an exact-zero violation counting as infinitely
    far; integers (decoders) must be equal, and the worst element is reported by the caller.
    """
    if isinstance(have, Exception):
        return False, np.inf, None, f"raised {type(have).__name__}: {have}"
    have = np.asarray(have)
    if have.shape != want.shape:
        return False, np.inf, None, f"shape {have.shape}, expected {want.shape}"
    if key in INT_FIELDS:
        if have.dtype.kind not in "iu":
            return False, np.inf, None, f"dtype {have.dtype}, expected integers"
        wrong = int(np.sum(have != want))
        return wrong == 0, float(wrong), None, ""
    have = have.astype(np.float64)
    same_nonfinite = (np.isnan(have) == np.isnan(want)) & (np.isinf(have) == np.isinf(want)) \
        & (np.sign(np.where(np.isinf(want), want, 0)) == np.sign(np.where(np.isinf(have), have, 0)))
    finite = np.isfinite(want) & np.isfinite(have)
    with np.errstate(invalid="ignore"):   # inf - inf where both are non-finite: masked below
        err = np.where(finite, np.abs(have - want), np.where(same_nonfinite, 0.0, np.inf))
    allowed = atol + rtol * np.where(finite, np.abs(want), 0.0)
    if zero is not None:
        allowed = np.where(zero, 0.0, allowed)
    bad = err > allowed
    max_err = float(err.max()) if err.size else 0.0
    if not bad.any():
        return True, max_err, None, ""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(bad, err / allowed, 0.0)          # x / 0 = inf: an exact-0 violation
    order = np.lexsort((-np.arange(err.size), err.ravel(), ratio.ravel()))    # first on ties
    worst = np.unravel_index(order[-1], err.shape)
    return False, max_err, tuple(int(i) for i in worst), f"{int(bad.sum())} of {bad.size} elements fail"


def _decoder_worst(key, have, want):
    """The element that shows a decoder's mistake: the first differing one, except for Viterbi,
    where it is the last differing step of the first differing row (where the back-tracked
    paths part)."""
    diff = np.argwhere(np.asarray(have) != want)
    if key != "viterbi":
        return tuple(int(i) for i in diff[0])
    b = diff[0][0]
    return int(b), int(diff[diff[:, 0] == b][-1][1])


def _element_rule(case, key, idx, eq, zero):
    """(rule id, note) for the failing element idx of quantity key."""
    exp = case["expected"]
    if key.startswith("loglik") or key == "viterbi_score":
        return ("R4", "an impossible row: -inf") if exp[key.split(" ")[0]][idx[0]] == -np.inf else (eq, "")
    if key in DECODERS:
        if [idx[0], idx[1]] in case.get("ties", {}).get(key, []):
            return "R6", "this step is decided by a tie or a near-tie"
        if np.all(exp[key][idx[0]] == -1):
            return "R4", "alpha_T(L_b) = 0: -1 at every step"
        return eq, ""
    if zero is not None and zero[idx]:
        return _zero_reason(case, key, idx)
    return eq, ""


def run_case(impl, case, quantities):
    """[Result] for one case."""
    inp, exp = case["inputs"], dict(case["expected"])
    family = "taco" if case["family"] == "taco" else "ctc"
    got = _call(impl, family, inp, exp)
    exp[f"loglik ({family}_loglik)"] = exp["loglik"]
    tol = case.get("tolerance", {})
    rtol, atol = tol.get("rtol", RTOL), tol.get("atol", ATOL)
    sample_t = case.get("sample_t")
    zeros = zero_masks(case)
    results = []
    for key, want in exp.items():
        have = got[key]
        if key in GRADIENTS and sample_t is not None and not isinstance(have, Exception):
            have = np.asarray(have)
            if have.ndim == 3:
                have = have[:, sample_t]
        passed, max_err, idx, detail = compare(key, have, want, rtol, atol, zeros.get(key))
        eq = quantities.get(key.split(" ")[0], "")
        rule, got_v, want_v, index = "", None, None, ()
        if not passed:
            rule = eq
            if key in DECODERS and not detail:
                idx = _decoder_worst(key, have, want)
                detail = f"{int(max_err)} positions differ"
            if idx is not None:
                index = idx
                rule, note = _element_rule(case, key, idx, eq, zeros.get(key))
                got_v, want_v = np.asarray(have)[idx].item(), want[idx].item()
                must = " exactly" if zeros.get(key) is not None and zeros[key][idx] else ""
                where = list(idx)
                if sample_t is not None and key in GRADIENTS:
                    where[1] = sample_t[idx[1]]
                detail = (f"at {where}: got {got_v!r}, expected {want_v!r}{must}"
                          + (f" ({note})" if note else "") + f"; {detail}")
        results.append(Result(case["name"], key, passed, max_err, rule, index, got_v, want_v, detail))
    return results


def run(module, vectors=None, select=None):
    """[Result] for every case (whose name contains select, when given) of every vector file.

    module is a module object or an importable name.
    """
    impl = importlib.import_module(module) if isinstance(module, str) else module
    results = []
    for case, _, quantities in load(vectors):
        if select is None or select in case["name"]:
            results.extend(run_case(impl, case, quantities))
    return results


def _rule_ids(label):
    """The ids of the rules table a label names: "eq. (5), (8)" -> ["eq. (5)", "eq. (8)"]."""
    if label.startswith("eq."):
        return [f"eq. ({n})" for n in re.findall(r"\((\d+)\)", label)]
    return [label]


def report(results, rules, verbose=False, out=None):
    """Print one line per failure (per result with verbose) and a summary; return the exit status.

    A failure's second line names the rule or equation its worst element breaks (with the rule's
    text from the vector files) and the element: index (time steps on the full axis), got,
    expected.
    """
    out = out or sys.stdout
    for r in results:
        if r.passed and not verbose:
            continue
        status = "pass" if r.passed else "FAIL"
        line = f"{status}  {r.case:32s} {r.quantity:22s} max error {r.max_error:.3g}"
        if not r.passed:
            text = "; ".join(rules[x] for x in _rule_ids(r.rule) if x in rules)
            line += f"\n      breaks {r.rule}" + (f" ({text})" if text else "")
            line += f"\n      {r.detail}"
        print(line, file=out)
    failed = [r for r in results if not r.passed]
    cases = {r.case for r in results}
    bad_cases = {r.case for r in failed}
    print(f"{len(results) - len(failed)}/{len(results)} quantities pass; "
          f"{len(cases) - len(bad_cases)}/{len(cases)} cases pass", file=out)
    return 1 if failed else 0


# ------------------------------------------------------------------------------ isolation

CASE_TIMEOUT = 60.0
"""s a case may take in the child (the largest vector case takes about 0.1 s with taco_ref.align)."""
IMPORT_TIMEOUT = 120.0
"""s the child may take to import the implementation."""
BUDGET = 600.0
"""s the whole run may take (--budget): the cases left when it runs out fail, unrun."""
NAME_BYTES = 64
"""Room for the name of the function the child is in (the spec's longest is 26 characters)."""


class _Calls:
    """The implementation as the child calls it: each function of the spec's writes its name to
    a shared buffer while it runs (so the parent, when a case times out, knows which function did
    not return) and a function that did not return in an earlier case raises at once instead of
    hanging again."""

    def __init__(self, impl, current, hung):
        self._impl, self._current, self._hung = impl, current, set(hung)

    def __getattr__(self, name):
        fn = getattr(self._impl, name)
        if name in self._hung:
            def skipped(*args, **kwargs):
                raise RuntimeError(f"{name} did not return in an earlier case; not called again")
            return skipped

        def called(*args, **kwargs):
            self._current.value = name.encode()[:NAME_BYTES - 1]
            try:
                return fn(*args, **kwargs)
            finally:
                self._current.value = b""
        return called


def _result_json(r):
    """A Result as JSON (numbers as Python floats; non-finite ones as strings)."""
    def num(x):
        if x is None or isinstance(x, (bool, str)):
            return x
        x = float(x)
        return x if np.isfinite(x) else repr(x)
    return {"case": r.case, "quantity": r.quantity, "passed": bool(r.passed), "max_error": num(r.max_error),
            "rule": r.rule, "index": [int(i) for i in r.index], "got": num(r.got),
            "expected": num(r.expected), "detail": r.detail}


def _result_from_json(d):
    def num(x):
        return float(x) if isinstance(x, str) else x
    return Result(d["case"], d["quantity"], d["passed"], num(d["max_error"]), d["rule"], tuple(d["index"]),
                  num(d["got"]), num(d["expected"]), d["detail"])


def _one_line(err):
    return " ".join(f"{type(err).__name__}: {err}".split())


def _child(conn, path, module, vectors, current):
    """The child process: import module, then run the cases whose requests arrive on conn
    ({"index", "hung": functions not to call again}), answering each with its results (JSON); a
    case that raises SystemExit answers so. It leads a process group of its own (the parent kills
    the group: whatever the implementation forks dies with it), and what the implementation
    prints goes nowhere (the kit reports; a flood of output costs nothing)."""
    import os
    os.setsid()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.path[:] = path
    signal.signal(signal.SIGINT, signal.SIG_IGN)           # the parent handles Ctrl-C
    try:
        impl = importlib.import_module(module)
    except ModuleNotFoundError as err:
        found = err.name is not None and (module == err.name or module.startswith(err.name + "."))
        if found:                                          # the module itself, or its package
            conn.send_bytes(json.dumps({"not_found": _one_line(err)}).encode())
            return
        conn.send_bytes(json.dumps({"error": f"raised {_one_line(err)} while being imported"}).encode())
        return
    except SystemExit as err:
        conn.send_bytes(json.dumps({"error": f"called sys.exit({err.code!r}) while being imported"}).encode())
        return
    except BaseException as err:  # noqa: BLE001 - whatever the import does is reported
        if isinstance(err, SyntaxError):
            at = f" ({Path(err.filename or '?').name}, line {err.lineno})"
            err = SyntaxError(err.msg)
        else:
            where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
            at = f" ({Path(where.filename).name}, line {where.lineno})" if where else ""
        conn.send_bytes(json.dumps({"error": f"raised {_one_line(err)}{at} while being imported"}).encode())
        return
    loaded = load(vectors)
    conn.send_bytes(b'{"ready": true}')
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except EOFError:
            return
        case, _, quantities = loaded[request["index"]]
        try:
            calls = _Calls(impl, current, request["hung"])
            answer = {"results": [_result_json(r) for r in run_case(calls, case, quantities)]}
        except SystemExit as err:
            answer = {"error": f"called sys.exit({err.code!r})"}
        except BaseException as err:  # noqa: BLE001 - e.g. KeyboardInterrupt raised by the module
            answer = {"error": f"raised {_one_line(err)} outside the functions' calls"}
        conn.send_bytes(json.dumps(answer).encode())


def _ended(proc):
    """Why the child ended, in words."""
    code = proc.exitcode
    if code is None:
        return "did not answer"
    if code < 0:
        try:
            return f"crashed the interpreter ({signal.Signals(-code).name})"
        except ValueError:
            return f"crashed the interpreter (signal {-code})"
    return f"exited with code {code}"


class NotFound(Exception):
    """The module to test does not exist (the child could not find it)."""


class _Child:
    """One child process running module; started lazily, replaced after a failure."""

    def __init__(self, module, vectors):
        self.module, self.vectors, self.proc, self.conn = module, str(vectors), None, None
        self.timed_out = False                                       # the last receive stopped a hung child
        ctx = multiprocessing.get_context("spawn")
        self.current = ctx.Array("c", NAME_BYTES, lock=False)        # the function the child is in

    def start(self, timeout=IMPORT_TIMEOUT):
        """None when the module imported, else why not (one line); NotFound when there is no
        such module."""
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=_child, args=(child_conn, list(sys.path), self.module, self.vectors,
                                                     self.current), daemon=True)
        self.proc.start()
        child_conn.close()
        answer = self.receive(timeout)
        if answer is None:
            self.stop()
            if self.timed_out:          # stopped by the kit, not crashed: say so
                return f"did not finish being imported within {timeout:g} s"
            return f"{_ended(self.proc)} while being imported"
        if "not_found" in answer:
            self.stop()
            raise NotFound(answer["not_found"])
        if "error" in answer:
            self.stop()
            return answer["error"]
        return None

    def receive(self, timeout):
        """The child's next answer (a dict), or None when it ended or did not answer in time
        (then timed_out is set: the kit stopped it)."""
        self.timed_out = False
        closed = False
        try:
            if self.conn.poll(timeout):
                return json.loads(self.conn.recv_bytes())
        except (EOFError, OSError):       # the pipe closed: the child is ending; let it end
            closed = True                 # before judging how (its exit code, not our kill)
            self.proc.join(5)
        if self.proc.is_alive():          # hung: stop it, so that _ended says so
            self.timed_out = not closed
            self.stop()
            return None
        self.proc.join()
        return None

    def stop(self):
        """Kill the child's whole process group (what the implementation forked dies too)."""
        import os
        if self.proc is not None and self.proc.pid is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
        if self.conn is not None:
            self.conn.close()


def run_isolated(module, vectors, loaded, indices, timeout=CASE_TIMEOUT, budget=BUDGET, progress=None):
    """[Result] for the cases loaded[i] (loaded = load(vectors)), i in indices, of module (an
    importable name) run in a child process, a case at most timeout s, the whole run at most
    budget s (the cases left then fail unrun): (results, None), or (results so far, why) when
    the module could not be imported in the child; NotFound when there is no such module. A
    function that does not return fails that case, and the later cases meet it failing at once
    instead of waiting again. progress(done, total), if given, after each case."""
    import time
    child = _Child(module, vectors)
    results, hung, start = [], [], time.monotonic()
    try:
        for done, index in enumerate(indices):
            case = loaded[index][0]
            left = budget - (time.monotonic() - start)
            if left <= 0:
                results.append(Result(case["name"], "(the case)", False, float("inf"), "", (), None, None,
                                      f"not run: the kit's time budget of {budget:g} s ran out"))
                continue
            if child.proc is None or not child.proc.is_alive():
                limit = min(IMPORT_TIMEOUT, left)
                why = child.start(limit)
                if why is not None and child.timed_out and limit < IMPORT_TIMEOUT:
                    # the budget ran out while the module was still importing: this case and the
                    # rest fail unrun, as when it runs out between cases
                    results.append(Result(case["name"], "(the case)", False, float("inf"), "", (), None, None,
                                          f"not run: the kit's time budget of {budget:g} s ran out"))
                    continue
                if why is not None:
                    return results, why
            child.conn.send_bytes(json.dumps({"index": index, "hung": hung}).encode())
            answer = child.receive(min(timeout, max(left, 0.001)))
            if answer is None:
                inside = child.current.value.decode(errors="replace")
                if child.proc.exitcode == -signal.SIGKILL:
                    why = f"did not return within {min(timeout, left):g} s" + (f" (in {inside})" if inside else "")
                    if inside:
                        hung.append(inside)
                else:
                    why = _ended(child.proc)
                results.append(Result(case["name"], "(the case)", False, float("inf"), "", (), None, None,
                                      f"the implementation {why} in this case"))
                child.stop()
                child.proc = None
            elif "error" in answer:
                results.append(Result(case["name"], "(the case)", False, float("inf"), "", (), None, None,
                                      f"the implementation {answer['error']} in this case"))
            else:
                results.extend(_result_from_json(r) for r in answer["results"])
            if progress:
                progress(done + 1, len(indices))
    finally:
        child.stop()
    return results, None


def build_parser(parser=None):
    parser = parser or argparse.ArgumentParser(
        prog="taco conformance", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", help="importable module with the spec's functions, e.g. taco_ref.align")
    parser.add_argument("--vectors", default=str(VECTORS), help="directory of *.json vector files")
    parser.add_argument("--case", default=None, metavar="SUBSTRING", help="only cases whose name contains it")
    parser.add_argument("--timeout", type=float, default=CASE_TIMEOUT, metavar="S",
                        help="seconds one case may take before it fails as hung")
    parser.add_argument("--budget", type=float, default=BUDGET, metavar="S",
                        help="seconds the whole run may take; the cases left then fail unrun")
    parser.add_argument("--verbose", action="store_true", help="a line for every quantity, passed or not")
    return parser


def run_args(args):
    """Run the kit for parsed arguments, the implementation in a child process; the exit status."""
    name = args.module           # never imported here: the implementation's code runs in the child only
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name or ""):
        print(f"taco conformance: {name!r}: expected an importable module name (e.g. mypkg.align)", file=sys.stderr)
        return 2
    for option in ("timeout", "budget"):
        value = getattr(args, option, None)
        if value is None and option == "budget":
            continue
        if not (isinstance(value, float) and 0 < value < float("inf")):
            print(f"taco conformance: --{option}: expected a positive number of seconds, got {value!r}",
                  file=sys.stderr)
            return 2
    try:
        loaded = load(args.vectors)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError,
            SyntaxError) as err:
        print(f"taco conformance: --vectors {args.vectors}: {_one_line(err)}", file=sys.stderr)
        return 2
    indices = [i for i, (case, _, _) in enumerate(loaded) if args.case is None or args.case in case["name"]]
    if not indices:
        print(f"taco conformance: --case {args.case!r} selects no case (the {len(loaded)} cases are named "
              f"{', '.join(sorted({c['name'] for c, _, _ in loaded})[:6])}, ...)", file=sys.stderr)
        return 2
    rules = {k: v for _, r, _ in loaded for k, v in r.items()}

    def progress(done, total):
        print(f"\rtaco conformance: {done}/{total} cases", end="\n" if done == total else "",
              file=sys.stderr, flush=True)
    try:
        results, why = run_isolated(name, args.vectors, loaded, indices, args.timeout,
                                    getattr(args, "budget", None) or BUDGET,
                                    progress if sys.stderr.isatty() else None)
    except NotFound as err:
        print(f"taco conformance: {name}: cannot find the module ({err})", file=sys.stderr)
        return 2
    if why is not None:
        print(f"taco conformance: {name}: the implementation {why}", file=sys.stderr)
        return 1
    return report(results, rules, args.verbose)


def main(argv=None):
    return run_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
