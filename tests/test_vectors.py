"""taco_ref.align against the conformance vectors in spec/vectors/*.json (format: its README).

One test per case checks every expected field; two more check that the generator is
deterministic and that the committed files are what it produces now.
"""
import importlib.util
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from taco_ref import align

VECTORS = Path(__file__).resolve().parents[1] / "spec" / "vectors"
FORMAT = "taco_ref conformance vectors v1"
RTOL = ATOL = 1e-12
INT_FIELDS = {"traj_len", "sketch_len", "sketch", "forward_argmax", "posterior_argmax", "viterbi"}
DECODERS = ("forward_argmax", "posterior_argmax", "viterbi")
TACO_DECODERS = dict(zip(DECODERS, (align.align_forward_argmax, align.align_posterior_argmax,
                                    align.align_viterbi)))
CTC_DECODERS = dict(zip(DECODERS, (align.ctc_align_forward_argmax, align.ctc_align_posterior_argmax,
                                   align.ctc_align_viterbi)))


def decode(value):
    """JSON value -> Python numbers: the strings "-inf", "inf", "nan" become floats."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    return float(value) if isinstance(value, str) else value


def as_array(key, value):
    if value is None:
        return None
    return np.array(decode(value), dtype=np.int64 if key in INT_FIELDS else np.float64)


def vector_files():
    return sorted(VECTORS.glob("*.json"))


def load_cases():
    params = []
    for path in vector_files():
        doc = json.loads(path.read_text(encoding="utf-8"))
        for case in doc["cases"]:
            params.append(pytest.param(case, id=case["name"]))
    return params


CASES = load_cases()


def padding_mask(shape, traj_len, sketch_len, last_axis_is_sketch=True):
    """(B, T, X) bool, True where t >= T_b or (for sketch axes) l >= L_b."""
    B, T, X = shape
    T_b = np.full(B, T) if traj_len is None else traj_len
    pad = np.arange(T)[None, :, None] >= T_b[:, None, None]
    if last_axis_is_sketch:
        L_b = np.full(B, X) if sketch_len is None else sketch_len
        pad = pad | (np.arange(X)[None, None, :] >= L_b[:, None, None])
    return np.broadcast_to(pad, shape)


def run_taco(inp, fields):
    """Every output of taco_ref.align for a TACO case, keyed like the vector's "expected"."""
    args = (inp["log_act"], inp["log_stop"], inp["log_go"])
    lens = {"traj_len": inp["traj_len"], "sketch_len": inp["sketch_len"]}
    final = inp.get("log_final_stop")
    res = align.taco_forward_backward(*args, **lens, log_final_stop=final)
    got = {"loglik": res.loglik, "d_act": res.d_act, "d_stop": res.d_stop, "d_go": res.d_go,
           "posterior": res.posterior, "d_final_stop": res.d_final_stop,
           "loglik (taco_loglik)": align.taco_loglik(*args, **lens, log_final_stop=final)}
    if "viterbi" in fields:
        got.update({key: fn(*args, **lens) for key, fn in TACO_DECODERS.items()})
        _, score = align.align_viterbi(*args, **lens, return_score=True)
        if final is not None:  # the decoders take no terminal STOP; the vectors' score includes it
            B, L = final.shape
            L_b = np.full(B, L) if inp["sketch_len"] is None else inp["sketch_len"]
            score = score + final[np.arange(B), L_b - 1]
        got["viterbi_score"] = score
    return got


def run_ctc(inp, fields):
    """Every output of taco_ref.align for a CTC case, keyed like the vector's "expected"."""
    args = (inp["log_p"], inp["sketch"])
    lens = {"traj_len": inp["traj_len"], "sketch_len": inp["sketch_len"]}
    res = align.ctc_forward_backward(*args, **lens)
    got = {"loglik": res.loglik, "d_log_p": res.d_log_p, "posterior": res.posterior,
           "loglik (ctc_loglik)": align.ctc_loglik(*args, **lens)}
    if "viterbi" in fields:
        got.update({key: fn(*args, **lens) for key, fn in CTC_DECODERS.items()})
        got["viterbi_score"] = align.ctc_align_viterbi(*args, **lens, return_score=True)[1]
    return got


@pytest.mark.parametrize("case", CASES)
def test_vector(case):
    inp = {key: as_array(key, value) for key, value in case["inputs"].items()}
    exp = {key: as_array(key, value) for key, value in case["expected"].items()}
    run = {"taco": run_taco, "ctc": run_ctc}[case["family"]]
    got = run(inp, exp)
    exp["loglik (taco_loglik)" if case["family"] == "taco" else "loglik (ctc_loglik)"] = exp["loglik"]
    for key, want in exp.items():
        have = np.asarray(got[key])
        assert have.shape == want.shape, f"{key}: shape {have.shape}, expected {want.shape}"
        if key in INT_FIELDS:
            assert have.dtype.kind in "iu", f"{key}: dtype {have.dtype}, expected integers"
            np.testing.assert_array_equal(have, want, err_msg=key)
        else:
            np.testing.assert_allclose(have, want, rtol=RTOL, atol=ATOL, err_msg=key)
    # padding of gradients and posteriors is exactly 0, not merely within atol
    for key in ("d_act", "d_stop", "d_go", "posterior", "d_log_p"):
        if key in got:
            pad = padding_mask(got[key].shape, inp["traj_len"], inp["sketch_len"],
                               last_axis_is_sketch=key != "d_log_p")
            assert np.all(got[key][pad] == 0.0), f"{key}: non-zero padding"


def test_vector_files_are_well_formed():
    names = []
    readme = (VECTORS / "README.md").read_text(encoding="utf-8")
    for path in vector_files():
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["format"] == FORMAT, path.name
        assert doc["cases"], path.name
        for case in doc["cases"]:
            assert case["family"] in ("taco", "ctc"), case["name"]
            assert f"`{case['name']}`" in readme, f"{case['name']} is not listed in README.md"
            names.append(case["name"])
    assert len(names) == len(set(names)), "case names must be unique"
    assert sum(p.stat().st_size for p in vector_files()) < 1_000_000


# ------------------------------------------------------------------------------ freshness

def load_generator():
    spec = importlib.util.spec_from_file_location("taco_vectors_generate", VECTORS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_same(fresh, committed, where, computed=False):
    """Exact equality, except floats under "expected": rtol 1e-12 (libm may differ by an ulp)."""
    assert type(fresh) is type(committed), f"{where}: {fresh!r} != {committed!r}"
    if isinstance(fresh, dict):
        assert fresh.keys() == committed.keys(), f"{where}: keys {list(fresh)} != {list(committed)}"
        for key in fresh:
            assert_same(fresh[key], committed[key], f"{where}.{key}", computed or key == "expected")
    elif isinstance(fresh, list):
        assert len(fresh) == len(committed), f"{where}: length {len(fresh)} != {len(committed)}"
        for i, (a, b) in enumerate(zip(fresh, committed)):
            assert_same(a, b, f"{where}[{i}]", computed)
    elif isinstance(fresh, float) and computed:
        assert math.isclose(fresh, committed, rel_tol=RTOL, abs_tol=1e-300), \
            f"{where}: {fresh!r} != {committed!r}"
    else:
        assert fresh == committed, f"{where}: {fresh!r} != {committed!r}"


def test_generator_is_deterministic():
    generator = load_generator()
    first = generator.build()
    random.seed(12345)          # the generator must not depend on global random state
    np.random.seed(12345)
    random.random()
    np.random.random()
    assert generator.build() == first


def test_committed_vectors_are_up_to_date(tmp_path):
    load_generator().main(tmp_path)
    fresh = sorted(p.name for p in tmp_path.glob("*.json"))
    assert fresh == [p.name for p in vector_files()], "run: python spec/vectors/generate.py"
    for name in fresh:
        new_text = (tmp_path / name).read_text(encoding="utf-8")
        old_text = (VECTORS / name).read_text(encoding="utf-8")
        if new_text != old_text:  # tolerate last-ulp platform differences in computed floats only
            assert_same(json.loads(new_text), json.loads(old_text), name)
