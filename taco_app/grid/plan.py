"""A grid's plan: the cells of its runs, and where it may compute them.

plan.cells_of(run) is the product algos x sizes x seeds of one Run of the manifest, each a Cell
(taco_app.grid); cells_of_runs joins several runs, a cell named twice (the same key) once.
"""
import os
import subprocess
from typing import List

import taco_sim
from taco_app import config as config_mod
from taco_app.grid import Cell, Run, keys


def tracked_files(path):
    """How many files under path git tracks (0 outside a git work tree or without git)."""
    where = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        out = subprocess.run(["git", "-C", where, "ls-files", "--", os.path.abspath(path)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len(out.stdout.split()) if out.returncode == 0 else 0


def check_not_committed(out, todo, extend):
    """ValueError unless the grid may compute todo in out: a folder holding committed files (a
    grid of results/) takes new cells only with --extend-committed."""
    if todo and not extend and os.path.isdir(out) and tracked_files(out):
        raise ValueError(f"--out: {out} holds files committed to git (a published grid); computing "
                         f"{len(todo)} cells there would change it. Give another --out, or "
                         f"--extend-committed to add them on purpose")


def chosen_expert(dom, name):
    """The expert a grid's cells collect with: name, checked against the domain's experts, or
    the domain's default (None for a domain with one expert); ValueError naming --expert."""
    if name is None:
        return dom.default_expert
    if not dom.experts:
        raise ValueError(f"--expert: {dom.name} has one expert, which is not chosen; leave it out")
    if name not in dom.experts:
        raise ValueError(f"--expert: {dom.name}'s experts are {', '.join(dom.experts)}, "
                         f"got {' '.join(str(name).split())[:40]!r}")
    return name


def cells_of(run: Run) -> List[Cell]:
    """The Cells of a Run of the manifest: every size x seed x algorithm, in that order."""
    dom = taco_sim.get(run["domain"])
    base = config_mod.settings(run["domain"], run["config"], run["set"], protocol=run["protocol"])
    expert = chosen_expert(dom, run["expert"])
    return [dict(domain=run["domain"], algo=a, size=n, seed=s, train_sketch_len=dom.train_sketch_len,
                 n_tasks=run["n_tasks"], n_align=run["n_align"], config=base,
                 test_lengths=run["test_lengths"], expert=expert, split=run.get("split") or "test",
                 tests=list(run.get("tests") or []))
            for n in run["sizes"] for s in run["seeds"] for a in run["algos"]]


def cells_of_runs(runs: List[Run]) -> List[Cell]:
    """The Cells of every run, in order, each once: a cell two runs name (the same key) is kept
    where it first appears."""
    cells, seen = [], set()
    for run in runs:
        for cell in cells_of(run):
            key = keys.cell_key(cell)
            if key not in seen:
                seen.add(key)
                cells.append(cell)
    return cells
