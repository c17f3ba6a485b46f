"""taco_ref.align against the conformance vectors in spec/vectors/*.json (format: its README).

One test per case runs it through the conformance kit (taco_ref/conformance.py) and checks every
expected field; the others check the files' form, the coverage table in spec/README.md, the
generator's independence from taco_ref, its determinism, and that the committed files are what
it produces now.
"""
import importlib.util
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from taco_ref import align, conformance

VECTORS = Path(__file__).resolve().parents[1] / "spec" / "vectors"
FORMAT = "taco_ref conformance vectors v2"
RTOL = 1e-12
LOADED = {case["name"]: (case, quantities) for case, _, quantities in conformance.load(VECTORS)}


def vector_files():
    return sorted(VECTORS.glob("*.json"))


@pytest.mark.parametrize("name", sorted(LOADED))
def test_vector(name):
    """taco_ref.align through the conformance kit: every quantity of the case, padding exactly 0."""
    case, quantities = LOADED[name]
    failures = [f"{r.quantity}: {r.detail} (max error {r.max_error:.3g}; breaks {r.rules})"
                for r in conformance.run_case(align, case, quantities) if not r.passed]
    assert not failures, "\n".join(failures)


def test_vector_files_are_well_formed():
    names = []
    readme = (VECTORS / "README.md").read_text(encoding="utf-8")
    for path in vector_files():
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["format"] == FORMAT, path.name
        assert doc["cases"], path.name
        for case in doc["cases"]:
            assert case["family"] in ("taco", "ctc"), case["name"]
            assert case["rules"] and set(case["rules"]) <= set(doc["rules"]), case["name"]
            assert f"`{case['name']}`" in readme, f"{case['name']} is not listed in README.md"
            names.append(case["name"])
    assert len(names) == len(set(names)), "case names must be unique"
    assert sum(p.stat().st_size for p in vector_files()) < 1_000_000


def test_spec_readme_coverage_table_lists_every_rule():
    """spec/README.md's coverage table has a row for every rule and equation the vectors name."""
    text = (VECTORS.parent / "README.md").read_text(encoding="utf-8")
    rules = json.loads(vector_files()[0].read_text(encoding="utf-8"))["rules"]
    for rule in rules:
        assert f"| {rule} |" in text, f"{rule} is missing from the coverage table in spec/README.md"


def test_log_act_density_case_shifts_loglik_by_T_c():
    """taco_log_act_density: row 1 is row 0 with 1.75 added to log_act, row 2 with 700 (rule R2):
    loglik moves by T_b c, gradients and decoders do not move."""
    exp = LOADED["taco_log_act_density"][0]["expected"]
    T = exp["d_act"].shape[1]
    for b, c in ((1, 1.75), (2, 700.0)):
        np.testing.assert_allclose(exp["loglik"][b], exp["loglik"][0] + T * c, rtol=1e-12)
        for key in ("d_act", "d_stop", "d_go", "forward_argmax", "posterior_argmax", "viterbi"):
            np.testing.assert_allclose(exp[key][b], exp[key][0], rtol=0, atol=1e-9, err_msg=key)


def test_generator_never_imports_taco_ref():
    """The vectors are an independent statement of the maths: generate.py, brute_force.py,
    exact.py and formula.py run with taco_ref made unimportable."""
    code = ("import sys; sys.modules['taco_ref'] = None; sys.path.insert(0, sys.argv[1]); "
            "import generate; generate.build()")
    proc = subprocess.run([sys.executable, "-c", code, str(VECTORS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


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
