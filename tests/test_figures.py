"""The paper's figures from the cells (taco_app/figures.py, docs/figures/): every plotted number is
the committed cells' (figures.json, compared without reading pixels), the bands are 95 % t
intervals over seeds, and `taco report --figures` writes them from the repository root."""
import json
import os

import pytest

from taco_app import cli, figures, stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_committed_figures_are_the_cells_figures():
    """docs/figures/figures.json equals what the committed cells give (regenerate with
    `taco report --figures docs/figures`), and every figure's picture is there."""
    with open(os.path.join(ROOT, "docs", "figures", "figures.json"), encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(figures.data(ROOT)))
    for figure in figures.FIGURES:
        assert os.path.getsize(os.path.join(ROOT, "docs", "figures", f"{figure.name}.png")) > 10_000


def test_a_band_is_the_t_interval_over_seeds_clipped_to_a_share():
    mean, lo, hi = figures._band([0.9, 0.95, 1.0])
    t = stats.t_interval([90.0, 95.0, 100.0])
    assert (mean, lo) == pytest.approx(t[:2]) and hi == 100.0 < t[2]
    assert figures._band([0.5]) == (50.0, None, None)


def test_every_line_takes_its_grids_cells(tmp_path):
    """Craft's figure draws the recipe grid's TACO at 500 demonstrations from exactly its seeds'
    task accuracies, and CTC-BC from the grid before equal budgets."""
    from taco_app.grid.store import load_results
    rows = [r for r in load_results(os.path.join(ROOT, "results", "craft-recipe"))
            if r["algo"] == "taco" and r["size"] == 500]
    lines = figures.points(figures.FIGURES[1], ROOT)
    line = lines["TACO (recipe protocol)"]
    assert line["grid"] == "results/craft-recipe" and rows
    assert sorted(line["points"]["500"]["seeds"]) == sorted(100 * r["task_accuracy"] for r in rows)
    assert lines["CTC-BC (MLP) (craft, before equal budgets)"]["grid"] == "results/craft"


@pytest.mark.slow
def test_figures_from_the_command_line(tmp_path, monkeypatch):
    """`taco report --figures DIR` from the repository root writes figures.json and the PNGs;
    it refuses OUT directories beside it and a directory without results/."""
    monkeypatch.chdir(ROOT)
    assert cli.main(["report", "--figures", str(tmp_path / "f")]) == 0
    assert json.loads((tmp_path / "f" / "figures.json").read_text()) == json.loads(json.dumps(figures.data(ROOT)))
    assert cli.main(["report", "--figures", str(tmp_path / "f"), "results/navworld"]) == 2
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--figures", str(tmp_path / "f")]) == 2
