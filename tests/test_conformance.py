"""The conformance kit (taco_ref/conformance/__init__.py): taco_ref.align passes it, through the Python
API, `taco conformance` and `python -m taco_ref.conformance`; deliberately wrong implementations
fail it on the cases written to catch them, and the report names the rule they break."""
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import numpy as np
import pytest

from taco_ref import align, conformance
from taco_app import cli

LOADED = conformance.load()
RULES = LOADED[0][1]


def run(impl):
    """{(case, quantity): Result} for every case."""
    return {(r.case, r.quantity): r for case, _, q in LOADED for r in conformance.run_case(impl, case, q)}


def failed_cases(results):
    return {case for (case, _), r in results.items() if not r.passed}


@pytest.mark.slow
def test_taco_ref_passes_every_case():
    results = run(align)
    bad = [f"{r.case} {r.quantity}: {r.detail}" for r in results.values() if not r.passed]
    assert not bad, "\n".join(bad)
    names = {case for case, _ in results}
    assert len(names) == len(LOADED) and len(results) > 300
    assert {"long_random_T1000", "taco_never_read_garbage", "ctc_long_T1500"} <= names


def test_every_rule_and_equation_is_checked_by_some_case():
    """Each id in the vector files' rule table is named by at least one case."""
    named = {rule for case, _, _ in LOADED for rule in case["rules"]}
    assert set(RULES) == named, f"rules no case checks: {sorted(set(RULES) - named)}"


# ------------------------------------------------------------------------------ wrong implementations

def wrapped(**overrides):
    """A module-like object: taco_ref.align's functions, some replaced."""
    fns = {name: getattr(align, name) for name in dir(align) if not name.startswith("_")}
    fns.update(overrides)
    return types.SimpleNamespace(**fns)


def _with_inputs(change):
    """Wrap every TACO function so that its three log inputs pass through change() first."""
    def wrap(fn):
        def inner(log_act, log_stop, log_go, *args, **kwargs):
            return fn(*change(np.asarray(log_act, float), np.asarray(log_stop, float),
                              np.asarray(log_go, float)), *args, **kwargs)
        return inner
    names = ("taco_loglik", "taco_forward_backward", "align_forward_argmax",
             "align_posterior_argmax", "align_viterbi")
    return {name: wrap(getattr(align, name)) for name in names}


def go_from_stop(act, stop, go):
    """Ignores log_go and uses log(1 - exp(log_stop)) (the "one STOP probability" shortcut)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return act, stop, np.log1p(-np.exp(stop))


def clip_to_zero(act, stop, go):
    """Clips every log input to <= 0 (treats log_act as a probability and LOGP_TOL as slack)."""
    with np.errstate(invalid="ignore"):
        return np.minimum(act, 0.0), np.minimum(stop, 0.0), np.minimum(go, 0.0)


def strict_taco_forward_backward(log_act, log_stop, log_go, traj_len=None, sketch_len=None,
                                 log_final_stop=None):
    """Rejects NaN or +inf anywhere in t < T_b, l < L_b, entries no path reads included."""
    B, T, L = np.shape(log_act)
    T_b = np.full(B, T) if traj_len is None else np.asarray(traj_len)
    L_b = np.full(B, L) if sketch_len is None else np.asarray(sketch_len)
    for b in range(B):
        for x in (log_act, log_stop, log_go):
            block = np.asarray(x)[b, :T_b[b], :L_b[b]]
            if np.any(np.isnan(block) | (block == np.inf)):
                raise ValueError("NaN or +inf inside the valid region")
    return align.taco_forward_backward(log_act, log_stop, log_go, traj_len, sketch_len, log_final_stop)


def _highest_on_ties(decoder):
    """An argmax decoder that breaks exact ties toward the higher position."""
    def inner(log_act, log_stop, log_go, traj_len=None, sketch_len=None):
        out = decoder(log_act, log_stop, log_go, traj_len, sketch_len)
        if decoder is align.align_forward_argmax:
            score = align.forward_probabilities(log_act, log_stop, log_go, traj_len, sketch_len)
        else:
            score = align.taco_forward_backward(log_act, log_stop, log_go, traj_len, sketch_len).posterior
        L = score.shape[2]
        high = L - 1 - np.argmax(score[:, :, ::-1], axis=2)                 # (B, T)
        return np.where(out >= 0, high, out)
    return inner


def viterbi_moving_on_ties(log_act, log_stop, log_go, traj_len=None, sketch_len=None,
                           return_score=False):
    """Viterbi whose back-pointer moves on when both candidates tie (rule R6 of spec/align.md says: stay)."""
    log_act, log_stop, log_go = (np.asarray(x, float) for x in (log_act, log_stop, log_go))
    path, score = align.align_viterbi(log_act, log_stop, log_go, traj_len, sketch_len, return_score=True)
    B, T, L = log_act.shape
    for b in range(B):
        T_b = T if traj_len is None else traj_len[b]
        L_b = L if sketch_len is None else sketch_len[b]
        if path[b, 0] < 0:
            continue
        act, stop, go = (x[b, :T_b, :L_b] for x in (log_act, log_stop, log_go))
        delta = np.full((T_b, L_b), -np.inf)                                 # (T_b, L_b)
        delta[0, 0] = act[0, 0]
        moved = np.zeros((T_b, L_b), bool)
        for t in range(1, T_b):
            same = delta[t - 1] + go[t]
            prev = np.full(L_b, -np.inf)
            prev[1:] = delta[t - 1, :-1] + stop[t, :-1]
            moved[t] = prev >= same
            delta[t] = act[t] + np.maximum(same, prev)
        z = L_b - 1
        for t in range(T_b - 1, 0, -1):
            path[b, t] = z
            z -= int(moved[t, z])
        path[b, 0] = z
    return (path, score) if return_score else path


def nan_in_impossible_rows(*args, **kwargs):
    """Divides by Z without guarding Z = 0: impossible rows get NaN gradients."""
    res = align.taco_forward_backward(*args, **kwargs)
    dead = ~np.isfinite(res.loglik)
    d_act = res.d_act.copy()
    d_act[dead] = np.nan
    return res._replace(d_act=d_act, posterior=d_act)


def probability_space_loglik(*args, **kwargs):
    """log of Z formed in float64 probability space: under- and overflows on long rows."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.log(np.exp(align.taco_loglik(*args, **kwargs)))


WRONG = {
    "go_from_stop": (wrapped(**_with_inputs(go_from_stop)), {"taco_stop_go_independent", "long_random_T1000"}),
    "clipping": (wrapped(**_with_inputs(clip_to_zero)), {"taco_logp_tol_as_given", "taco_log_act_density",
                                                         "long_density_T2000"}),
    "strict_never_read": (wrapped(taco_forward_backward=strict_taco_forward_backward),
                          {"taco_never_read_garbage"}),
    "argmax_ties_high": (wrapped(align_forward_argmax=_highest_on_ties(align.align_forward_argmax),
                                 align_posterior_argmax=_highest_on_ties(align.align_posterior_argmax)),
                         {"taco_ties_exact"}),
    "viterbi_moves_on_ties": (wrapped(align_viterbi=viterbi_moving_on_ties),
                              {"taco_ties_exact", "taco_ties_viterbi", "long_underflow_T202"}),
    "nan_in_impossible_rows": (wrapped(taco_forward_backward=nan_in_impossible_rows),
                               {"taco_L_greater_T", "taco_final_stop_zero", "long_dead_rows_T500"}),
    "probability_space": (wrapped(taco_loglik=probability_space_loglik),
                          {"long_random_T1000", "long_density_T2000", "long_L1_T3000"}),
}


# slow tier: each runs the kit on a variant (~1 s of CPU); tests/test_mutations.py checks the
# kit's verdicts on many variants in process in the inner loop
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_implementation_fails_the_cases_meant_to_catch_it(name):
    impl, must_fail = WRONG[name]
    results = run(impl)
    missed = must_fail - failed_cases(results)
    assert not missed, f"{name} passes {sorted(missed)}"
    assert failed_cases(results) != set(r.case for r in results.values()), \
        f"{name} fails every case: the harness, not the cases, caught it"


def case_named(name):
    return next(c for c, _, _ in LOADED if c["name"] == name)


def test_go_from_stop_is_reported_with_the_rule_it_breaks():
    """The report names the equation the failing quantity implements, not every rule of the
    case, with the worst element's index, expected and got values."""
    impl, _ = WRONG["go_from_stop"]
    case = case_named("taco_stop_go_independent")
    results = conformance.run_case(impl, case, LOADED[0][2])
    bad = {r.quantity: r for r in results if not r.passed}
    assert {"loglik", "d_go"} <= set(bad)
    assert bad["d_go"].rule == "eq. (14)" and bad["loglik"].rule == "eq. (5), (8)"
    assert bad["loglik"].max_error > 1e-3
    r = bad["d_go"]
    b, t, l = r.index
    assert r.expected == case["expected"]["d_go"][b, t, l] and r.got != r.expected
    # the worst element: the largest error measured against its allowance
    got = impl.taco_forward_backward(case["inputs"]["log_act"], case["inputs"]["log_stop"],
                                     case["inputs"]["log_go"], traj_len=case["inputs"]["traj_len"],
                                     sketch_len=case["inputs"]["sketch_len"]).d_go
    err = np.abs(got - case["expected"]["d_go"])
    assert err[b, t, l] == err.max()
    out = io.StringIO()
    assert conformance.report(results, RULES, out=out) == 1
    text = out.getvalue()
    assert "FAIL  taco_stop_go_independent" in text
    assert "breaks eq. (14) (align.md eq. (14): d loglik / d log_go" in text
    assert f"at [{b}, {t}, {l}]: got {r.got!r}, expected {r.expected!r}" in text
    assert "R1" not in text and "R2" not in text     # the case's other rules are not listed


def test_an_exact_zero_violation_names_R3_or_R4_and_the_entry():
    """A gradient of 1e-13 where rule R3 or R4 promises exactly 0 fails (it is inside atol), and
    the report says which entry and why it must be 0."""
    def bumped(*args, **kwargs):
        res = align.taco_forward_backward(*args, **kwargs)
        d_stop = res.d_stop.copy()
        d_stop[0, 0, 0] += 1e-13         # stop at t = 0 is never read (row 0 is possible)
        d_act = res.d_act.copy()
        d_act[1, 2, 0] += 1e-13          # row 1 is impossible
        return res._replace(d_stop=d_stop, d_act=d_act, posterior=d_act)
    case = case_named("taco_exact_zeros")
    results = {r.quantity: r for r in conformance.run_case(wrapped(taco_forward_backward=bumped), case,
                                                             LOADED[0][2])}
    assert results["d_stop"].rule == "R3" and results["d_stop"].index == (0, 0, 0)
    assert "stop[0, 0] is never read" in results["d_stop"].detail
    assert "expected 0.0 exactly" in results["d_stop"].detail
    assert results["d_act"].rule == "R4" and results["d_act"].index == (1, 2, 0)
    assert results["d_go"].passed and results["loglik"].passed


def test_a_wrong_tie_break_names_R6_and_where_the_paths_part():
    """A decoder that breaks an exact tie the wrong way is reported under rule R6, at the step the
    tie decides (for Viterbi, the last step at which the back-tracked paths differ)."""
    impl, _ = WRONG["viterbi_moves_on_ties"]
    case = case_named("taco_ties_exact")
    r = next(r for r in conformance.run_case(impl, case, LOADED[0][2]) if r.quantity == "viterbi")
    assert not r.passed and r.rule == "R6" and r.index == (0, 1)
    assert (r.got, r.expected) == (0, 1)


def test_vectors_are_found_inside_an_installed_package(tmp_path):
    """An installed copy reads the vectors beside it (the package's vectors folder, where
    setup.py puts them); a source checkout reads spec/vectors."""
    assert conformance.VECTORS == Path(conformance.__file__).resolve().parents[2] / "spec" / "vectors"
    package = tmp_path / "site" / "taco_ref" / "conformance"
    (package / "vectors").mkdir(parents=True)
    (package / "__init__.py").write_text(Path(conformance.__file__).read_text(encoding="utf-8"),
                                         encoding="utf-8")
    (package / "vectors" / "taco.json").write_text("{}", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("installed_conformance", package / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.VECTORS == (package / "vectors").resolve()


@pytest.mark.slow
def test_viterbi_tie_breaking_is_caught_only_where_ties_are_exact():
    impl, _ = WRONG["viterbi_moves_on_ties"]
    results = run(impl)
    assert not results[("taco_ties_viterbi", "viterbi")].passed
    assert results[("taco_ties_viterbi", "viterbi_score")].passed      # same score, other path
    assert results[("taco_random_T8", "viterbi")].passed               # no ties there


@pytest.mark.slow
def test_missing_function_fails_its_quantities():
    impl = wrapped()
    del impl.align_viterbi
    results = run(impl)
    r = results[("taco_random_T8", "viterbi")]
    assert not r.passed and "AttributeError" in r.detail
    assert results[("taco_random_T8", "loglik")].passed


# ------------------------------------------------------------------------------ entry points

@pytest.mark.slow
def test_cli_subcommand_and_module_entry_point(capsys):
    assert cli.main(["conformance", "taco_ref.align", "--case", "taco_ties"]) == 0
    assert "cases pass" in capsys.readouterr().out
    assert conformance.main(["no_such_module_xyz"]) == 2
    proc = subprocess.run([sys.executable, "-m", "taco_ref.conformance", "taco_ref.align", "--case", "ctc_L1"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "quantities pass" in proc.stdout


@pytest.mark.slow
def test_failing_module_exits_1(tmp_path, monkeypatch, capsys):
    (tmp_path / "bad_align.py").write_text(
        "from taco_ref.align import *\n"
        "import numpy as np\n"
        "def taco_loglik(*a, **k):\n"
        "    from taco_ref import align\n"
        "    return align.taco_loglik(*a, **k) + 1e-6\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert conformance.main(["bad_align", "--case", "taco_L1"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "loglik (taco_loglik)" in out and "eq. (5), (8)" in out


# ------------------------------------------------------------------------------ isolation

HOSTILE = {
    # module: (source, expected exit status, the one line or the failure detail)
    "cf_exit_import": ("import sys\nsys.exit(0)\n", 1, "called sys.exit(0) while being imported"),
    "cf_osexit_import": ("import os\nos._exit(0)\n", 1, "exited with code 0 while being imported"),
    "cf_raise_import": ("raise RuntimeError('boom')\n", 1,
                        "raised RuntimeError: boom (cf_raise_import.py, line 1) while being imported"),
    "cf_syntax": ("def f(:\n", 1, "raised SyntaxError: invalid syntax (cf_syntax.py, line 1)"),
    "cf_hang": ("from taco_ref.align import *\nimport time\n"
                "def taco_forward_backward(*a, **k):\n    time.sleep(100)\n", 1, "did not return within 2 s"),
    "cf_osexit_call": ("from taco_ref.align import *\nimport os\n"
                       "def taco_forward_backward(*a, **k):\n    os._exit(0)\n", 1, "exited with code 0 in this case"),
    "cf_sysexit_call": ("from taco_ref.align import *\nimport sys\n"
                        "def taco_loglik(*a, **k):\n    sys.exit(0)\n", 1, "called sys.exit(0) in this case"),
    "cf_crash": ("from taco_ref.align import *\nimport ctypes\n"
                 "def ctc_loglik(*a, **k):\n    ctypes.string_at(0)\n", 1, "crashed the interpreter (SIGSEGV)"),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n != "cf_exit_import"
                                  else n for n in HOSTILE])
@pytest.mark.slow
def test_an_implementation_that_exits_hangs_or_crashes_fails_with_one_line(name, tmp_path):
    """`taco conformance` runs the implementation in a child process with a time limit per case:
    exiting, raising or a syntax error at import, hanging, exiting or crashing inside a function
    are failures (exit 1) named in one line, never a traceback, a hang or a silent exit 0; the
    cases after a failing one still run (in a fresh child)."""
    source, status, text = HOSTILE[name]
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "taco_ref.conformance", name, "--case", "L1", "--timeout", "2"],
                          capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == status and text in out and "Traceback" not in out, out
    if "in this case" in text:          # the other L1 cases ran and passed
        assert "quantities pass; 1/3 cases pass" in out or "2/3 cases pass" in out, out


def test_a_selection_of_no_case_or_unreadable_vectors_is_an_error(tmp_path, capsys):
    assert conformance.main(["taco_ref.align", "--case", "zzz"]) == 2
    assert "--case 'zzz' selects no case" in capsys.readouterr().err
    shutil.copy(conformance.VECTORS / "formula.py", tmp_path / "formula.py")
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000, encoding="utf-8")
    assert conformance.main(["taco_ref.align", "--vectors", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--vectors" in err and "RecursionError" in err and len(err.strip().splitlines()) == 1
    assert conformance.main(["taco_ref.align", "--timeout", "0"]) == 2


# ------------------------------------------------------------------------------ installed

def _checkout_copy(root, dest):
    """The checkout's files (tracked and new, not ignored) copied to dest, so that a build there
    leaves nothing behind in the checkout."""
    if (root / ".git").exists() and shutil.which("git"):
        names = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root,
                               capture_output=True, check=True).stdout.decode().split("\0")
        for name in filter(None, names):
            if (root / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / name, dest / name)
    else:
        shutil.copytree(root, dest, ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "runs"))


@pytest.mark.slow
def test_installed_package_runs_the_kit_from_any_directory(tmp_path):
    """`pip install --no-deps .` (not editable) into a fresh virtual environment, then
    `taco conformance taco_ref.align` in an empty directory: the vectors ship inside the package.
    The run-time dependencies come from this environment through a .pth file (nothing is
    downloaded for them); the fresh install comes first on the path."""
    import mujoco
    import scipy
    import yaml
    root = Path(__file__).resolve().parents[1]
    src, venv, elsewhere = tmp_path / "src", tmp_path / "venv", tmp_path / "elsewhere"
    _checkout_copy(root, src)
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    scripts = Path(sysconfig.get_path("scripts", vars={"base": str(venv), "platbase": str(venv)}))
    python = scripts / ("python.exe" if os.name == "nt" else "python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = sorted({str(Path(m.__file__).resolve().parents[1]) for m in (np, scipy, yaml, mujoco)})
    Path(purelib, "_taco_test_deps.pth").write_text("\n".join(deps) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    install = [str(python), "-m", "pip", "install", "--no-deps", "--quiet", str(src)]
    proc = subprocess.run(install, capture_output=True, text=True, env=env, cwd=elsewhere)
    if proc.returncode != 0:   # no index to fetch the build backend from: build with this one's
        proc = subprocess.run(install + ["--no-build-isolation"], capture_output=True, text=True,
                              env=env, cwd=elsewhere)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    where = subprocess.run([str(python), "-c", "import taco_ref.conformance as c; print(c.__file__); print(c.VECTORS)"],
                           capture_output=True, text=True, env=env, cwd=elsewhere, check=True).stdout.split()
    assert all(Path(w).resolve().is_relative_to(venv.resolve()) for w in where), where
    taco = scripts / ("taco.exe" if os.name == "nt" else "taco")
    proc = subprocess.run([str(taco), "conformance", "taco_ref.align"], capture_output=True, text=True,
                          env=env, cwd=elsewhere)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(LOADED)
    assert f"{n}/{n} cases pass" in proc.stdout


def _kit(tmp_path, name, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-m", "taco_ref.conformance", name, *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow
def test_the_kit_imports_nothing_of_the_implementation_in_its_own_process(tmp_path):
    """A package whose __init__ ends the process: in the child it is a failure named in one line,
    never the kit's own silent exit 0 (finding the module imported the package in the kit's
    process before); a module that does not exist is exit 2."""
    (tmp_path / "cf_pkg").mkdir()
    (tmp_path / "cf_pkg" / "__init__.py").write_text("import os\nos._exit(0)\n")
    (tmp_path / "cf_pkg" / "align.py").write_text("from taco_ref.align import *\n")
    proc = _kit(tmp_path, "cf_pkg.align", "--case", "L1")
    assert proc.returncode == 1 and "exited with code 0 while being imported" in proc.stderr, proc.stderr
    proc = _kit(tmp_path, "cf_nowhere.align", "--case", "L1")
    assert proc.returncode == 2 and "cannot find the module" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_function_that_never_returns_costs_one_timeout_and_the_budget_bounds_the_run(tmp_path):
    """taco_loglik sleeps for ever: the first case that calls it fails after --timeout naming it,
    every later case meets it failing at once (the other functions still checked), so the run
    costs one timeout, not one per case; with --budget the cases left unrun fail as such."""
    import time
    (tmp_path / "cf_forever.py").write_text("from taco_ref.align import *\nimport time\n"
                                            "def taco_loglik(*a, **k):\n    time.sleep(10 ** 6)\n")
    start = time.monotonic()
    proc = _kit(tmp_path, "cf_forever", "--case", "taco", "--timeout", "3")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "did not return within 3 s (in taco_loglik)" in out, out
    assert "taco_loglik did not return in an earlier case" in out and time.monotonic() - start < 60, out
    proc = _kit(tmp_path, "cf_forever", "--case", "taco", "--timeout", "3", "--budget", "2")
    assert proc.returncode == 1 and "not run: the kit's time budget of 2 s ran out" in proc.stdout + proc.stderr
    # a budget that runs out while the module is still being imported (a slow import, or a busy
    # machine) fails the cases unrun: the kit stopped the child, it did not crash
    (tmp_path / "cf_slow_import.py").write_text("import time\ntime.sleep(30)\nfrom taco_ref.align import *\n")
    proc = _kit(tmp_path, "cf_slow_import", "--case", "taco", "--budget", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "not run: the kit's time budget of 2 s ran out" in out, out
    assert "crashed" not in out, out


@pytest.mark.slow
def test_what_the_implementation_forks_or_prints_does_not_outlive_or_flood_the_kit(tmp_path):
    """A module that forks a long sleeper in every call and prints 20 MB at import: when the kit
    ends, no process it forked is left (the child's process group is killed), and the kit's own
    output stays a report."""
    pids = tmp_path / "pids"
    (tmp_path / "cf_forks.py").write_text(
        "from taco_ref.align import *\nfrom taco_ref import align as _a\nimport os, sys, time\n"
        "print('x' * 20_000_000)\n"
        "def taco_loglik(*a, **k):\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(600); os._exit(0)\n"
        "    return _a.taco_loglik(*a, **k)\n")
    proc = _kit(tmp_path, "cf_forks", "--case", "L1")
    assert proc.returncode == 0 and len(proc.stdout) + len(proc.stderr) < 100_000, proc.stderr[-300:]
    forked = [int(p) for p in pids.read_text().split()]
    assert forked

    def alive(pid):                      # a killed process may linger as a zombie until reaped
        try:
            with open(f"/proc/{pid}/status") as f:
                return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
        except FileNotFoundError:
            return False
    assert not [pid for pid in forked if alive(pid)]
