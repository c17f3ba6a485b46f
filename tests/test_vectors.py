"""taco_ref.align against the conformance vectors in spec/vectors/*.json (format: its README).

One test per case runs it through the conformance kit (taco_ref/conformance/__init__.py) and checks every
expected field; the others check the files' form, the coverage table in spec/README.md, that the
vectors hold what the kit promises to check (exact zeros, every recentring block boundary, the
ties), the generator's independence from taco_ref, its determinism, and that the committed files
are what it produces now (those three regenerate the vectors: slow).
"""
import ast
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
    failures = [f"{r.quantity}: breaks {r.rule}, {r.detail} (max error {r.max_error:.3g})"
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
    assert sum(p.stat().st_size for p in vector_files()) < 3_000_000


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


def test_expected_values_are_exactly_zero_where_the_kit_demands_it():
    """Every entry the kit holds to exactly 0 (rules R3 and R4: padding, never-read entries,
    entries on no complete path, impossible rows) is exactly 0 in the vectors, and the vectors
    hold every kind: never-read, off-path and padding entries in possible rows, and impossible
    rows."""
    kinds = set()
    for name, (case, _) in LOADED.items():
        masks = conformance.zero_masks(case)
        lay = conformance.layout(case)
        for key, mask in masks.items():
            values = case["expected"][key]
            assert np.all(values[mask] == 0.0), f"{name} {key}: non-zero where R3/R4 say 0"
        kinds |= {"impossible"} if not lay.possible.all() else set()
        for entry in ("act", "stop", "go"):
            valid = ~lay.padding & lay.possible[:, None, None]
            if np.any(valid & ~lay.read[entry]):
                kinds.add(f"{entry} never read")
            if np.any(lay.read[entry] & ~lay.on_path[entry] & lay.possible[:, None, None]):
                kinds.add(f"{entry} off path")
    assert kinds >= {"impossible", "act never read", "stop never read", "go never read",
                     "act off path", "stop off path", "go off path"}, kinds


def test_rows_cross_every_recentring_block_boundary_from_9_to_200():
    """Rule R7: for both families, a case of full length T for every T from 9 to 200 that sits on
    either side of a multiple of 16 (T = 16k and 16k + 1), with rows whose own last step is on
    either side too; every T = 1 (mod 16) below 200 is among them."""
    for family in ("taco", "ctc"):
        full = {case["inputs"]["log_act" if family == "taco" else "log_p"].shape[1]
                for case, _ in LOADED.values() if case["family"] == family and case["name"].startswith(f"{family}_blocks_")}
        wanted = {9, 200} | {t for k in range(1, 13) for t in (16 * k, 16 * k + 1)}
        assert wanted <= full, f"{family}: no case of length {sorted(wanted - full)}"
        assert {t for t in range(9, 201) if t % 16 == 1} <= full
        rows = {int(t) for case, _ in LOADED.values() if case["name"].startswith(f"{family}_blocks_")
                for t in case["inputs"]["traj_len"]}
        assert {16 * k for k in range(1, 13)} | {16 * k + 1 for k in range(1, 13)} <= rows


def test_ties_are_stored_for_every_decoder_in_both_families():
    """Rule R6: exact ties of all three decoders occur in TACO and in CTC cases, and each case's
    "ties" names only decoders it stores and elements inside its rows."""
    tied = {("taco", d): False for d in conformance.DECODERS} | {("ctc", d): False for d in conformance.DECODERS}
    for name, (case, _) in LOADED.items():
        for decoder, where in case.get("ties", {}).items():
            assert decoder in case["expected"], f"{name}: ties for {decoder}, which it does not store"
            B, T = case["expected"][decoder].shape
            assert all(0 <= b < B and 0 <= t < T for b, t in where), name
            tied[(case["family"], decoder)] = True
    assert all(tied.values()), [k for k, v in tied.items() if not v]


def test_generator_imports_nothing_from_taco_ref():
    """The vectors are an independent statement of the maths: no module of the generator imports
    taco_ref (read as syntax trees; the slow test below runs it with taco_ref unimportable)."""
    for path in ("generate.py", "brute_force.py", "exact.py", "formula.py"):
        tree = ast.parse((VECTORS / path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "taco_ref" for n in names), f"{path} imports {names}"


@pytest.mark.slow
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


@pytest.mark.slow
def test_generator_is_deterministic():
    generator = load_generator()
    first = generator.build()
    random.seed(12345)          # the generator must not depend on global random state
    np.random.seed(12345)
    random.random()
    np.random.random()
    assert generator.build() == first


@pytest.mark.slow
def test_committed_vectors_are_up_to_date(tmp_path):
    load_generator().main(tmp_path)
    fresh = sorted(p.name for p in tmp_path.glob("*.json"))
    assert fresh == [p.name for p in vector_files()], "run: python spec/vectors/generate.py"
    for name in fresh:
        new_text = (tmp_path / name).read_text(encoding="utf-8")
        old_text = (VECTORS / name).read_text(encoding="utf-8")
        if new_text != old_text:  # tolerate last-ulp platform differences in computed floats only
            assert_same(json.loads(new_text), json.loads(old_text), name)
