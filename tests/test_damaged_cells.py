"""A damaged cell never changes what a report or the claims page says without a word
(taco_app.grid.store.load_results, check_reportable): `taco report` and `taco report --claims` stop
with exit code 2 and one line naming the file, for every kind of damage tried on a copy of a
committed grid."""
import json
import os
import shutil

import pytest

from taco_app import cli

from taco_app.grid import store as cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELL = os.path.join("cells", "navworld", "taco", "n1000", "seed0.json")


def damage(path, how):
    """Damage the cell file at path: its text replaced, or a figure or cell field changed."""
    if how == "zero bytes":
        open(path, "w").close()
        return
    if how == "not JSON":
        with open(path, "w") as f:
            f.write("{\"key\": ")
        return
    record = json.load(open(path))
    if how == "NaN alignment":
        record["figures"]["align_forward_argmax"] = float("nan")
    elif how == "infinite accuracy":
        record["figures"]["task_accuracy"] = float("inf")
    elif how == "accuracy above 1":
        record["figures"]["task_accuracy"] = 1.5
    elif how == "no domain":
        del record["cell"]["domain"]
    elif how == "no task accuracy":
        del record["figures"]["task_accuracy"]
    elif how == "string size":
        record["cell"]["size"] = "1000"
    elif how == "figure relabels the algorithm":
        record["figures"]["algo"] = "gtbc"
    elif how == "outcomes disagree":
        record["figures"]["task_accuracy"] = 0.5
    elif how == "cell is a list":
        record["cell"] = [1]
    with open(path, "w") as f:
        json.dump(record, f)


KINDS = ("zero bytes", "not JSON", "NaN alignment", "infinite accuracy", "accuracy above 1", "no domain",
         "no task accuracy", "string size", "figure relabels the algorithm", "outcomes disagree",
         "cell is a list")


@pytest.mark.parametrize("how", KINDS)
def test_taco_report_names_the_damaged_cell_in_one_line(how, tmp_path, capsys):
    grid = tmp_path / "navworld-paper"
    shutil.copytree(os.path.join(ROOT, "results", "archive", "navworld-paper-sigma05", "cells"), grid / "cells")
    damage(str(grid / CELL), how)
    assert cli.main(["report", str(grid), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(grid / CELL) in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "out" / "results.md").exists()


@pytest.mark.parametrize("how", ("NaN alignment", "zero bytes", "no domain"))
def test_the_claims_page_is_not_written_from_a_damaged_cell(how, tmp_path, monkeypatch, capsys):
    """A NaN alignment once turned "TACO aligns 95.3 %" into "fails" with "+nan points", and a
    zero-byte cell made the page take an older results.json figure: now neither page is written."""
    root = tmp_path / "root"
    shutil.copytree(os.path.join(ROOT, "results"), root / "results",
                    ignore=shutil.ignore_patterns("*.png", "runs", "ablation"))
    damage(str(root / "results" / "navworld" / CELL), how)
    monkeypatch.chdir(root)
    assert cli.main(["report", "--claims", str(tmp_path / "claims.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and os.path.join("results", "navworld", CELL) in err[0], err
    assert not (tmp_path / "claims.md").exists()


def test_a_grid_run_still_recomputes_a_damaged_cell_instead_of_stopping(tmp_path):
    """The engine's reading is lenient on purpose: a damaged file is a cell not finished."""
    grid = tmp_path / "g"
    shutil.copytree(os.path.join(ROOT, "results", "archive", "navworld-paper-sigma05", "cells"), grid / "cells")
    damage(str(grid / CELL), "zero bytes")
    assert len(cells.load_cells(str(grid))) == 9
    with pytest.raises(cells.CellError, match="seed0.json"):
        cells.load_cells(str(grid), strict=True)


def test_two_files_of_one_cell_are_refused(tmp_path):
    grid = tmp_path / "g"
    shutil.copytree(os.path.join(ROOT, "results", "archive", "navworld-paper-sigma05", "cells"), grid / "cells")
    os.makedirs(grid / "cells" / "navworld" / "taco" / "n1000b")
    shutil.copy(grid / CELL, grid / "cells" / "navworld" / "taco" / "n1000b" / "seed0.json")
    with pytest.raises(cells.CellError, match="the same cell as"):
        cells.load_results(str(grid))
