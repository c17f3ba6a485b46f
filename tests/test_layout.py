"""The package boundaries of README's Layout section (imports run downward), checked on the source
(no imports run).

core (taco_ref/, the algorithms included) imports the standard library, numpy and core modules only;
app  (taco_app/)          anything below plus yaml, scipy (the report's t quantiles), and
                          matplotlib/PIL (optional, `plot` extra)
                          and Dask's distributed (optional, `dist` extra); its interop/ package
                          also pyarrow and h5py (optional, `interop` extra), and only it;
domains (sim/taco_sim/)   the standard library, numpy, scipy, mujoco, yaml, taco_sim and, of
                          taco_ref, only the data format (taco_ref.data: Demos, assemble,
                          MAX_SKETCH_LEN);
and setup.py's install_requires are exactly the third-party packages the code imports.
"""
import ast
import functools
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STDLIB = set(sys.stdlib_module_names)


def modules(folder, recursive=True):
    base = os.path.join(ROOT, folder)
    for dirpath, dirnames, filenames in os.walk(base):
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(dirpath, name), ROOT)
        if not recursive:
            break


@functools.lru_cache(maxsize=None)
def imports(path):
    """Every module name imported anywhere in the file (also inside functions); parsed once."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def third_party(names):
    return {n.split(".")[0] for n in names} - STDLIB - {"taco_ref", "taco_app", "taco_sim", "taco_bridge"}


CORE = list(modules("taco_ref"))
APP = list(modules("taco_app"))
DOMAINS = list(modules(os.path.join("sim", "taco_sim")))


def test_the_layout_has_the_three_layers():
    assert "taco_ref/align.py" in CORE and "taco_ref/algorithms/compile.py" in CORE
    assert "taco_app/cli.py" in APP
    assert "sim/taco_sim/domain.py" in DOMAINS and len(DOMAINS) >= 4


@pytest.mark.parametrize("path", CORE)
def test_the_core_imports_numpy_and_itself_only(path):
    names = imports(path)
    assert third_party(names) <= {"numpy"}, path
    assert not any(n.startswith(("taco_app", "taco_sim")) for n in names), path


INTEROP = os.path.join("taco_app", "interop")


@pytest.mark.parametrize("path", APP)
def test_the_applications_import_nothing_unexpected(path):
    allowed = {"numpy", "scipy", "yaml", "matplotlib", "PIL", "distributed"}
    if path.startswith(INTEROP + os.sep):
        allowed |= {"pyarrow", "h5py"}                     # the `interop` extra, in its own package
    assert third_party(imports(path)) <= allowed, path


@pytest.mark.parametrize("path", DOMAINS)
def test_domains_use_only_the_data_container_of_taco_ref(path):
    names = imports(path)
    assert third_party(names) <= {"numpy", "scipy", "mujoco", "yaml"}, path
    of_taco_ref = {n for n in names if n.split(".")[0] == "taco_ref"}
    assert {n.split(".")[1] for n in of_taco_ref} <= {"data"}, path      # the data format only


@pytest.mark.slow
def test_the_dataset_formats_are_imported_only_on_demand():
    """`taco` and its commands load without the interop extra: importing the command line, the
    interop package and its numpy-only modules imports neither pyarrow nor h5py (the format
    modules do, when a dataset of their format is opened)."""
    code = ("import sys, taco_app.cli, taco_app.interop, taco_app.interop.labels; "
            "print(sorted(m for m in ('pyarrow', 'h5py', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_install_requires_is_what_the_code_imports():
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        setup_text = f.read()
    block = re.search(r"install_requires=\[(.*?)\]", setup_text, re.S).group(1)
    required = {re.split(r"[<>=\[ ]", r)[0].lower() for r in re.findall(r'"([^"]+)"', block)}
    used = set()
    for path in CORE + APP + DOMAINS:
        used |= third_party(imports(path))
    used -= {"matplotlib", "PIL", "distributed", "pyarrow", "h5py"}   # the `plot`, `dist`, `interop` extras
    used -= {"mujoco", "scipy"}                                         # the `dial` extra, below
    pypi = {"yaml": "pyyaml"}
    assert required == {pypi.get(n, n).lower() for n in used}


def test_the_dial_extra_is_imported_only_by_the_dial_and_the_t_quantile():
    """MuJoCo and SciPy (the `dial` extra) are imported by the Dial's package, whose first
    statement checks for them (taco_sim.domain.requires), and by taco_app.stats inside the
    function that needs SciPy; nothing else of the core install imports them."""
    dial = os.path.join("sim", "taco_sim", "dial") + os.sep
    users = [p for p in CORE + APP + DOMAINS if third_party(imports(p)) & {"mujoco", "scipy"}]
    assert any(p.startswith(dial) for p in users) and os.path.join("taco_app", "stats.py") in users
    assert [p for p in users if not p.startswith(dial) and p != os.path.join("taco_app", "stats.py")] == []


def _module_name(path):
    """taco_ref/algorithms/ctcbc.py -> taco_ref.algorithms.ctcbc; a package's __init__ -> the package."""
    name = path[:-3].replace(os.sep, ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def _registers(init_path):
    """Whether a package's __init__ imports its own modules by name at run time (a registry:
    pkgutil), which the import statements do not show."""
    with open(os.path.join(ROOT, init_path), encoding="utf-8") as f:
        text = f.read()
    return "pkgutil" in text


def test_taco_ref_has_no_import_cycle():
    """No import cycle among taco_ref's modules, counting imports inside functions (which hide
    a loop rather than cut it). A package importing its own modules to register them, and those
    modules importing the package's contract, is the one pattern allowed (taco_ref.algorithms); a
    package that only holds modules (taco_ref.plumbing) imports none of them."""
    known = {_module_name(p) for p in CORE}
    graph = {}
    for path in CORE:
        me = _module_name(path)
        targets = set()
        for name in imports(path):
            parts = name.split(".")
            for k in range(len(parts), 0, -1):             # the longest prefix that is a module of ours
                if ".".join(parts[:k]) in known:
                    targets.add(".".join(parts[:k]))
                    break
        graph[me] = {t for t in targets if t != me and not me.startswith(t + ".")}   # a module -> its package: allowed
    registries = {_module_name(p) for p in CORE if p.endswith("__init__.py") and _registers(p)}
    for me in known:                     # a registry package imports its modules (by pkgutil)
        for package in registries:
            if me.startswith(package + "."):
                graph.setdefault(package, set()).add(me)
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"
    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == [], [" -> ".join(c) for c in cycles]

