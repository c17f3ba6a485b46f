"""Conformance kit: run an alignment implementation through the vectors in spec/vectors/.

    taco conformance MODULE [--vectors DIR] [--case SUBSTRING] [--verbose]
    python -m taco_ref.conformance MODULE ...

MODULE is an importable Python module (``taco_ref.align``, ``mypkg.align``) that provides the
functions of spec/vectors/README.md ("Function signatures") under the spec's names. Each
case's inputs are passed to them, and every expected quantity is compared with the case's
tolerance: pass or fail per case and quantity, the largest error, and for a failure the
equation the quantity implements and the rules the case checks (spec/align.md). A function the
module lacks fails the quantities it computes. Exit status 0 when everything passes, 1 when
something fails, 2 on bad arguments.

The vectors ship inside the installed package (setup.py copies them there); in a source
checkout they are read from spec/vectors/. This module reads the vectors and compares numbers;
it contains no alignment maths.
"""
import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

def _default_vectors():
    """The installed package's copy of the vectors, else the source checkout's spec/vectors."""
    here = Path(__file__).resolve().parent
    installed = here / "vectors"
    return installed if any(installed.glob("*.json")) else here.parent / "spec" / "vectors"


VECTORS = _default_vectors()
FORMATS = ("taco_ref conformance vectors v2",)
RTOL = ATOL = 1e-12
INT_FIELDS = {"traj_len", "sketch_len", "sketch", "forward_argmax", "posterior_argmax", "viterbi"}
DECODERS = ("forward_argmax", "posterior_argmax", "viterbi")
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
    max_error: float     # largest |got - expected| (inf: wrong shape, non-finite mismatch, error)
    rules: tuple         # what a failure breaks: the quantity's equation, then the case's rules
    detail: str          # why it failed ("" when it passed)


# ------------------------------------------------------------------------------ reading

def _formula_module(vectors):
    """spec/vectors/formula.py, which expands the compact inputs of long cases."""
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


def load(vectors=VECTORS):
    """[(case dict with arrays, {rule id: text}, {quantity: equation})] from every vector file."""
    vectors = Path(vectors)
    files = sorted(vectors.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no *.json vector files in {vectors}")
    formula = _formula_module(vectors)
    out = []
    for path in files:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") not in FORMATS:
            raise ValueError(f"{path.name}: format {doc.get('format')!r}, expected one of {FORMATS}")
        for case in doc["cases"]:
            case = dict(case)
            case["inputs"] = {k: _array(k, v, formula) for k, v in case["inputs"].items()}
            case["expected"] = {k: _array(k, v, formula) for k, v in case["expected"].items()}
            out.append((case, doc["rules"], doc["quantities"]))
    return out


# ------------------------------------------------------------------------------ running

def _field(res, name):
    """A result field by attribute (named tuple, object) or key (dict)."""
    return res[name] if isinstance(res, dict) else getattr(res, name)


def _call_taco(impl, inp, fields):
    """{quantity: array or exception} for a TACO case."""
    args = (inp["log_act"], inp["log_stop"], inp["log_go"])
    lens = {"traj_len": inp["traj_len"], "sketch_len": inp["sketch_len"]}
    final = inp.get("log_final_stop")
    got = {}

    def attempt(keys, fn):
        try:
            values = fn()
        except Exception as err:  # any failure of the implementation is a result, not a crash
            values = {k: err for k in keys}
        got.update(values)

    grads = ("loglik", "d_act", "d_stop", "d_go", "posterior", "d_final_stop")
    attempt(grads, lambda: {k: _field(impl.taco_forward_backward(*args, **lens, log_final_stop=final), k)
                            for k in grads})
    attempt(["loglik (taco_loglik)"],
            lambda: {"loglik (taco_loglik)": impl.taco_loglik(*args, **lens, log_final_stop=final)})
    for key, name in (("forward_argmax", "align_forward_argmax"),
                      ("posterior_argmax", "align_posterior_argmax")):
        if key in fields:
            attempt([key], lambda name=name, key=key: {key: getattr(impl, name)(*args, **lens)})
    if "viterbi" in fields:
        attempt(["viterbi", "viterbi_score"], lambda: dict(zip(
            ("viterbi", "viterbi_score"), impl.align_viterbi(*args, **lens, return_score=True))))
    return got


def _call_ctc(impl, inp, fields):
    args = (inp["log_p"], inp["sketch"])
    lens = {"traj_len": inp["traj_len"], "sketch_len": inp["sketch_len"]}
    got = {}

    def attempt(keys, fn):
        try:
            got.update(fn())
        except Exception as err:
            got.update({k: err for k in keys})

    grads = ("loglik", "d_log_p", "posterior")
    attempt(grads, lambda: {k: _field(impl.ctc_forward_backward(*args, **lens), k) for k in grads})
    attempt(["loglik (ctc_loglik)"], lambda: {"loglik (ctc_loglik)": impl.ctc_loglik(*args, **lens)})
    for key, name in (("forward_argmax", "ctc_align_forward_argmax"),
                      ("posterior_argmax", "ctc_align_posterior_argmax")):
        if key in fields:
            attempt([key], lambda name=name, key=key: {key: getattr(impl, name)(*args, **lens)})
    if "viterbi" in fields:
        attempt(["viterbi", "viterbi_score"], lambda: dict(zip(
            ("viterbi", "viterbi_score"), impl.ctc_align_viterbi(*args, **lens, return_score=True))))
    return got


def _padding(shape, traj_len, sketch_len, sketch_axis):
    """(B, T, X) bool: True at t >= T_b, and (sketch_axis) at l >= L_b."""
    B, T, X = shape
    T_b = np.full(B, T) if traj_len is None else traj_len
    pad = np.arange(T)[None, :, None] >= T_b[:, None, None]
    if sketch_axis:
        L_b = np.full(B, X) if sketch_len is None else sketch_len
        pad = pad | (np.arange(X)[None, None, :] >= L_b[:, None, None])
    return np.broadcast_to(pad, shape)


def compare(key, have, want, rtol, atol, pad=None):
    """(passed, max_error, detail) for one quantity."""
    if isinstance(have, Exception):
        return False, np.inf, f"raised {type(have).__name__}: {have}"
    have = np.asarray(have)
    if have.shape != want.shape:
        return False, np.inf, f"shape {have.shape}, expected {want.shape}"
    if key in INT_FIELDS:
        if have.dtype.kind not in "iu":
            return False, np.inf, f"dtype {have.dtype}, expected integers"
        wrong = int(np.sum(have != want))
        return wrong == 0, float(wrong), f"{wrong} positions differ" if wrong else ""
    have = have.astype(np.float64)
    same_nonfinite = (np.isnan(have) == np.isnan(want)) & (np.isinf(have) == np.isinf(want)) \
        & (np.sign(np.where(np.isinf(want), want, 0)) == np.sign(np.where(np.isinf(have), have, 0)))
    finite = np.isfinite(want) & np.isfinite(have)
    with np.errstate(invalid="ignore"):   # inf - inf where both are non-finite: masked below
        err = np.where(finite, np.abs(have - want), np.where(same_nonfinite, 0.0, np.inf))
    max_err = float(err.max()) if err.size else 0.0
    bad = err > atol + rtol * np.where(finite, np.abs(want), 0.0)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return False, max_err, f"at {list(idx)}: {have[idx]!r}, expected {want[idx]!r}"
    if pad is not None and np.any(have[pad] != 0.0):
        return False, max_err, "not exactly 0 in the padding (rule R3)"
    return True, max_err, ""


def run_case(impl, case, quantities):
    """[Result] for one case."""
    inp, exp = case["inputs"], dict(case["expected"])
    family = case["family"]
    got = (_call_taco if family == "taco" else _call_ctc)(impl, inp, exp)
    exp["loglik (taco_loglik)" if family == "taco" else "loglik (ctc_loglik)"] = exp["loglik"]
    tol = case.get("tolerance", {})
    rtol, atol = tol.get("rtol", RTOL), tol.get("atol", ATOL)
    sample_t = case.get("sample_t")
    results = []
    for key, want in exp.items():
        have = got[key]
        pad = None
        if key in ("d_act", "d_stop", "d_go", "posterior", "d_log_p") and not isinstance(have, Exception):
            have = np.asarray(have)
            if sample_t is not None and have.ndim == 3:
                have = have[:, sample_t]
            if have.shape == want.shape:
                T_b = inp["traj_len"]
                if sample_t is not None:   # the stored times: padding where t >= T_b
                    T_full = np.full(want.shape[0], inp["log_act" if family == "taco" else "log_p"].shape[1])
                    T_b = T_full if T_b is None else T_b
                    T_b = np.searchsorted(np.asarray(sample_t), T_b)
                pad = _padding(want.shape, T_b, inp["sketch_len"], key != "d_log_p")
        passed, max_err, detail = compare(key, have, want, rtol, atol, pad)
        eq = quantities.get(key.split(" ")[0], "")
        results.append(Result(case["name"], key, passed, max_err, (eq, *case["rules"]), detail))
    return results


def run(module, vectors=VECTORS, select=None):
    """[Result] for every case (whose name contains select, when given) of every vector file.

    module is a module object or an importable name.
    """
    impl = importlib.import_module(module) if isinstance(module, str) else module
    results = []
    for case, _, quantities in load(vectors):
        if select is None or select in case["name"]:
            results.extend(run_case(impl, case, quantities))
    return results


def report(results, rules, verbose=False, out=None):
    """Print one line per failure (per result with verbose) and a summary; return the exit status."""
    out = out or sys.stdout
    for r in results:
        if r.passed and not verbose:
            continue
        status = "pass" if r.passed else "FAIL"
        line = f"{status}  {r.case:32s} {r.quantity:22s} max error {r.max_error:.3g}"
        if not r.passed:
            broken = "; ".join(rules.get(x, x) for x in r.rules if x)
            line += f"\n      {r.detail}\n      breaks: {broken}"
        print(line, file=out)
    failed = [r for r in results if not r.passed]
    cases = {r.case for r in results}
    bad_cases = {r.case for r in failed}
    print(f"{len(results) - len(failed)}/{len(results)} quantities pass; "
          f"{len(cases) - len(bad_cases)}/{len(cases)} cases pass", file=out)
    return 1 if failed else 0


def build_parser(parser=None):
    parser = parser or argparse.ArgumentParser(
        prog="taco conformance", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", help="importable module with the spec's functions, e.g. taco_ref.align")
    parser.add_argument("--vectors", default=str(VECTORS), help="directory of *.json vector files")
    parser.add_argument("--case", default=None, metavar="SUBSTRING", help="only cases whose name contains it")
    parser.add_argument("--verbose", action="store_true", help="a line for every quantity, passed or not")
    return parser


def run_args(args):
    """Run the kit for parsed arguments; the exit status."""
    try:
        impl = importlib.import_module(args.module)
        loaded = load(args.vectors)
    except (ImportError, FileNotFoundError, ValueError) as err:
        print(f"taco conformance: {err}", file=sys.stderr)
        return 2
    rules = {k: v for _, r, _ in loaded for k, v in r.items()}
    results = []
    for case, _, quantities in loaded:
        if args.case is None or args.case in case["name"]:
            results.extend(run_case(impl, case, quantities))
    return report(results, rules, args.verbose)


def main(argv=None):
    return run_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
