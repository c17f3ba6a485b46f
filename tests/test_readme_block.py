"""README.md's command-line block, run line by line as a user would (the slow tier): in order,
after its `cd` in a scratch folder outside the checkout, in this venv (which has the extras the
block's `pip install` line names; that line is checked, not run)."""
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def block():
    """The lines of the code block under "## The command line", comments stripped."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("\n## The command line\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```\n(.*?)```", section, re.S).group(1)
    return [re.sub(r"\s+# .*$", "", line).strip() for line in code.splitlines() if line.strip()]


@pytest.mark.slow
def test_every_line_of_the_readme_block_runs_as_written(tmp_path):
    lines = block()
    assert lines[0].startswith("pip install -e \".[") and lines[1] == 'cd "$(mktemp -d)"'
    extras = re.search(r"\[(.*)\]", lines[0]).group(1).split(",")
    modules = {"plot": "matplotlib", "interop": "pyarrow", "dial": "mujoco"}
    for extra in extras:
        assert importlib.util.find_spec(modules[extra]), f"the {extra} extra is not installed here"
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    for line in lines[2:]:
        argv = shlex.split(line)
        assert argv[0] == "taco", line
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    for made in ("data/nav.npz", "runs/nav-taco/model/model.json", "eval.json", "alignment.png", "dial.png",
                 "grid/results.md", "nav-labelled"):
        assert (tmp_path / made).exists(), made
    assert not os.path.exists(os.path.join(ROOT, "grid")) and not os.path.exists(os.path.join(ROOT, "eval.json"))


def test_taco_help_shows_the_readme_block():
    """`taco --help`'s examples are the README block's commands (one list to keep right)."""
    from taco_app import cli
    examples = [line.strip().split("  #")[0].strip() for line in cli.__doc__.splitlines()
                if line.strip().startswith("taco ") and not line.strip().startswith("taco demo")]
    assert examples == [line for line in block() if line.startswith("taco ")]


def test_the_readme_states_the_inner_loops_test_count(request):
    """README's "about N tests" for `pytest -m "not slow"` stayed at 1640 while the suite grew:
    checked against the tests this session collected, when it collected the whole suite."""
    config = request.config
    given = {os.path.abspath(a) for a in config.args}
    if not given <= {ROOT, os.path.join(ROOT, "tests")} or getattr(config.option, "lf", False):
        pytest.skip("the count is checked when the whole suite is collected (pytest, with any -m or -k)")
    quick = config.taco_quick_tests             # conftest.py: counted before -m and -k select
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    stated = int(re.search(r'`python -m pytest -m "not slow"`: about (\d+) tests', text).group(1))
    assert abs(stated - quick) <= 0.05 * quick, f"README says about {stated} tests; the inner loop has {quick}"


def test_the_readme_quotes_the_demos_figures_from_the_committed_cells():
    """The demo's cells are results/navworld-recipe's at its size and seed: the figures README
    quotes for it are read from those cell files, so they cannot drift from them."""
    import json
    from taco_app import cli
    args = cli.build_parser().parse_args(["demo"])
    assert (args.protocol, args.n_tasks) == ("recipe", 1000)
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    quoted = re.search(r"collects (\d+) Nav-World demonstrations.*?TACO completes ([\d.]+) % of them, "
                       r"GT-BC, told every boundary, ([\d.]+) %, CTC-BC none", text)
    assert quoted and int(quoted.group(1)) == args.n
    for algo, figure in (("taco", quoted.group(2)), ("gtbc", quoted.group(3)), ("ctcbc-mlp", "0.0")):
        path = os.path.join(ROOT, "results", "navworld-recipe", "cells", "navworld", algo, f"n{args.n}",
                            f"seed{args.seed}.json")
        cell = json.load(open(path))
        assert cell["cell"]["n_tasks"] == args.n_tasks
        assert f"{100 * cell['figures']['task_accuracy']:.1f}" == figure, algo
