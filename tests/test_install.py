"""The core install: `pip install .` brings NumPy and PyYAML only; Nav-World, Craft, the CLI and
the conformance kit run from it; a Dial command says which extra installs MuJoCo.

The fast tests hide MuJoCo and SciPy from a child Python (sys.modules[name] = None: an import
raises ModuleNotFoundError and importlib.util.find_spec answers None, as when the package is
not installed); the slow one installs the checkout into a fresh venv without extras."""
import ast
import os
import subprocess
import sys
import venv

import pytest

import taco_sim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDDEN = ("mujoco", "scipy")


def run_without(args, cwd, hidden=HIDDEN):
    """`taco ARGS` in a child Python where the hidden packages cannot be imported."""
    code = ("import sys\n"
            f"for name in {list(hidden)!r}:\n"
            "    sys.modules[name] = None\n"
            "from taco_app import cli\n"
            f"code = cli.main({list(args)!r})\n"
            f"leaked = [m for m in sys.modules if m.split('.')[0] in {list(hidden)!r} and sys.modules[m] is not None]\n"
            "assert not leaked, leaked\n"
            "sys.exit(code)\n")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_dial_lists_the_domains_it_registers():
    """taco_sim.dial.DOMAINS (what requires() notes when MuJoCo is missing) are exactly the
    domains the package registers when it is there."""
    from taco_sim import dial
    registered = {name for name in taco_sim.available_names() if taco_sim.get(name).collect.__module__
                  .startswith("taco_sim.dial")}
    assert set(dial.DOMAINS) == registered


def test_setup_requires_numpy_and_pyyaml_only():
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    requires = next(k.value for k in call.keywords if k.arg == "install_requires")
    names = sorted(ast.literal_eval(requires))
    assert [n.split(">")[0] for n in names] == ["numpy", "pyyaml"]


@pytest.mark.slow
def test_without_mujoco_a_dial_command_names_the_extra(tmp_path):
    out = run_without(["evaluate", "--expert", "--domain", "dial", "--n-tasks", "1"], tmp_path)
    assert out.returncode == 3, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "'mujoco'" in lines[0] and "pip install 'taco_ref[dial]'" in lines[0], lines


@pytest.mark.slow
def test_without_mujoco_and_scipy_navworld_and_conformance_run(tmp_path):
    """Collect, train, evaluate on Nav-World and the conformance kit, with neither package
    importable (the child asserts none of their modules was loaded)."""
    steps = [["collect", "navworld", "--n", "8", "--sketch-len", "2", "--out", "nav.npz"],
             ["train", "--algo", "taco", "--data", "nav.npz", "--out", "run", "--set", "epochs=1",
              "--set", "warmup_epochs=0"],
             ["evaluate", "--model", "run/model", "--n-tasks", "2"],
             ["conformance", "taco_ref.align", "--case", "tiny"]]
    for args in steps:
        out = run_without(args, tmp_path)
        assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    help_out = run_without(["evaluate", "--help"], tmp_path)
    assert help_out.returncode == 0 and "dial" in help_out.stdout        # listed, with what to install


@pytest.mark.slow
def test_pip_install_without_extras(tmp_path):
    """`pip install .` into a fresh venv: no MuJoCo, no SciPy; `taco conformance` and a
    Nav-World run work from it (outside the checkout)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    install = subprocess.run([py, "-m", "pip", "install", "--quiet", ROOT], capture_output=True, text=True,
                             timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run([py, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True).stdout
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert not installed & {"mujoco", "scipy", "glfw", "pyopengl"}, installed
    taco = str(env_dir / "bin" / "taco")
    work = tmp_path / "work"
    work.mkdir()
    for args in (["conformance", "taco_ref.align"],
                 ["demo", "--n", "20", "--n-tasks", "10", "--set", "epochs=1", "--set", "warmup_epochs=0"],
                 ["evaluate", "--expert", "--domain", "dial", "--n-tasks", "1"]):
        out = subprocess.run([taco, *args], cwd=work, capture_output=True, text=True, timeout=900)
        expected = 3 if "dial" in args else 0
        assert out.returncode == expected, (args, out.stdout[-2000:], out.stderr[-2000:])
