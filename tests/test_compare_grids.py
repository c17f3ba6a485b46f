"""taco_app/analysis/compare_grids.py: the paired difference of two grids' cells and its mean over seeds
are computed from the cells' own outcomes, and cells of other data are flagged."""
import copy
import os
import shutil

import numpy as np
import pytest

from taco_app import report

from taco_app.grid import store as cells_mod
from taco_ref import evaluate
from taco_app.analysis import compare_grids

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID = os.path.join(REPO, "results", "dial-image-small")


def test_a_grid_against_itself_differs_by_nothing():
    m = compare_grids
    rows, means = m.compare(GRID, GRID)
    assert len(rows) == len(cells_mod.load_cells(GRID)) == 12
    for algo, size, seed, ta, tb, (d, lo, hi), aa, ab, same in rows:
        assert ta == tb and aa == ab and d == 0.0 and lo <= 0.0 <= hi and same
    assert all(mean == 0.0 for _, _, mean, _, _, _ in means)


def test_differences_are_paired_on_the_same_tasks_and_averaged_over_seeds(tmp_path):
    """One grid's TACO cells of seeds 0 and 1 changed task by task: each row's difference is
    the paired interval of the two outcome strings, the PINs counted as their distinct key moves
    (the image Dial's 100 test PINs share one keypad, spec/evaluation.md eq. (14)), the mean is
    over the seeds with its t interval, and a cell whose data fingerprint differs is marked."""
    m = compare_grids
    other = tmp_path / "other"
    shutil.copytree(os.path.join(GRID, "cells"), other / "cells")
    changed = {}
    for record in cells_mod.load_cells(GRID):
        cell = record["cell"]
        if cell["algo"] != "taco" or cell["seed"] == 2:
            continue
        new = copy.deepcopy(record)
        flips = 7 if cell["seed"] == 0 else 3
        outcomes = "1" * flips + record["figures"]["outcomes"][flips:]
        new["figures"]["outcomes"] = outcomes
        new["figures"]["task_accuracy"] = outcomes.count("1") / len(outcomes)
        if cell["seed"] == 1:
            new["data"]["train"]["fingerprint"] = "0" * 64
        cells_mod.write_cell(str(other), new)
        changed[cell["seed"]] = (outcomes, record["figures"]["outcomes"])
    rows, means = m.compare(str(other), GRID)
    taco = {r[2]: r for r in rows if r[0] == "taco"}
    diffs = []
    moves = {r["cell"]["seed"]: report.effective_tasks(cells_mod.flat(r)) for r in cells_mod.load_cells(GRID)}
    assert all(90 <= m <= 100 for m in moves.values())       # 100 PINs of 5 digits make 99-100 moves
    for seed, (a, b) in changed.items():
        expect = evaluate.paired_difference_interval(a, b, effective=moves[seed])
        np.testing.assert_allclose(taco[seed][5], [100 * x for x in expect])
        assert taco[seed][8] == (seed != 1)
        diffs.append(100 * expect[0])
    assert taco[2][5][0] == 0.0
    mean = next(x for x in means if x[0] == "taco")
    assert mean[5] == 3 and mean[2] == pytest.approx(sum(diffs) / 3)
    text = m.markdown(rows, means, ("a", "b"))
    assert "| TACO | 200 | 1 (other data) |" in text and "(3 seeds)" in text


def test_grids_with_other_test_tasks_are_refused(tmp_path):
    m = compare_grids
    other = tmp_path / "other"
    shutil.copytree(os.path.join(GRID, "cells"), other / "cells")
    record = next(r for r in cells_mod.load_cells(GRID) if r["cell"]["algo"] == "gtbc")
    record = copy.deepcopy(record)
    record["figures"]["outcomes"] = record["figures"]["outcomes"][:25]
    cells_mod.write_cell(str(other), record)
    with pytest.raises(ValueError, match="100 test tasks in .*, 25 in .*: not the same tasks"):
        m.compare(GRID, str(other))
