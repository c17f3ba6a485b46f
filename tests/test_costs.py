"""taco_app.grid.costs: the cost `taco experiment` announces, held to the committed cells it was
measured on; and the guard that keeps a grid out of a committed folder."""
import glob
import json
import os
import subprocess

import numpy as np
import pytest

from taco_app.grid import costs, plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("domain,algo", sorted(costs.COSTS))
def test_each_cost_is_its_grids_median_of_seconds_per_demonstration_pass(domain, algo):
    per_pass, grid = costs.COSTS[(domain, algo)]
    rates = []
    for path in glob.glob(os.path.join(ROOT, "results", grid, "cells", domain, algo, "*", "*.json")):
        record = json.load(open(path))
        seconds = record.get("cpu_seconds") or record.get("seconds")
        rates.append(seconds / costs.demonstration_passes(dict(record["cell"], config=record["config"])))
    assert rates, f"results/{grid} has no {domain} {algo} cell"
    assert np.median(rates) == pytest.approx(per_pass, rel=0.25)


def test_a_cells_cost_follows_what_its_training_reads():
    """Nav-World's epoch_size makes every size up to 400 read the same 108 000 demonstrations in
    300 epochs (the taco demo at 400 was announced at 1 min of CPU by a per-demonstration rate,
    and took 3): the cost is per demonstration read."""
    base = dict(domain="navworld", algo="taco", seed=0, config={"epochs": 300, "epoch_size": 360})
    passes = {n: costs.demonstration_passes(dict(base, size=n)) for n in (50, 200, 400, 1000)}
    assert passes == {50: 300 * 8 * 45, 200: 300 * 2 * 180, 400: 300 * 360, 1000: 300 * 900}
    assert costs.cell_seconds(dict(base, size=400)) == pytest.approx(7.01e-4 * 108_000)


def test_the_announcement_counts_cells_and_scales_the_cost_by_what_training_reads():
    cell = dict(domain="dial-velocity", algo="taco", size=1200, config={"epochs": 30})
    assert costs.cell_seconds(cell) == pytest.approx(0.0343 * 30 * 1080)       # 120 held out
    assert costs.cell_seconds(dict(cell, domain="nowhere")) is None
    line = costs.announce([cell] * 3, [cell] * 2, workers=2)
    assert line.startswith("3 cells: 1 already finished in --out, 2 to compute: about 37 min of CPU, 19 min on 2 workers")
    assert costs.announce([cell], [], 2) == "1 cell: 1 already finished in --out, 0 to compute"
    tiny = dict(cell, size=2)
    assert "about under a minute" not in costs.announce([tiny], [tiny], 1)
    assert costs.announce([tiny], [tiny], 1).endswith("to compute: under a minute of CPU, under a minute on 1 worker "
                                                      "(measured on committed grids; early stopping ends some sooner)")


def test_a_grid_computes_in_a_committed_folder_only_when_asked(tmp_path):
    repo = tmp_path / "repo"
    (repo / "results" / "grid").mkdir(parents=True)
    (repo / "results" / "grid" / "README.md").write_text("a published grid\n")
    (repo / "scratch").mkdir()
    git = ["git", "-C", str(repo)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "results"], check=True)
    committed, scratch = str(repo / "results" / "grid"), str(repo / "scratch")
    with pytest.raises(ValueError, match="--out: .* holds files committed to git.*--extend-committed"):
        plan.check_not_committed(committed, ["a cell"], extend=False)
    plan.check_not_committed(committed, ["a cell"], extend=True)
    plan.check_not_committed(committed, [], extend=False)                 # nothing to compute
    plan.check_not_committed(scratch, ["a cell"], extend=False)
    plan.check_not_committed(str(tmp_path / "new"), ["a cell"], extend=False)


def test_a_grids_wall_time_packs_the_longest_cells_first_on_the_workers(monkeypatch):
    """costs.wall_seconds: the measured cells on the local workers, the longest first, each on the
    first free one (the demo's ETA before its first cell); None when a cell has no measured cost."""
    monkeypatch.setattr(costs, "cell_seconds", lambda cell: cell["s"])
    assert costs.wall_seconds([{"s": 5.0}, {"s": 10.0}, {"s": 5.0}], 2) == 10.0
    assert costs.wall_seconds([{"s": 5.0}, {"s": 10.0}, {"s": 5.0}], 1) == 20.0
    assert costs.wall_seconds([{"s": 5.0}, {"s": None}], 2) is None


def test_the_eta_before_the_first_cell_is_the_expected_wall_time():
    """The demo sat at "ETA ?" until its first cell finished (12 min): with expected wall seconds
    the first progress line counts down from them."""
    from taco_app import config as config_mod
    from taco_app.grid import engine
    cell = dict(domain="navworld", algo="gtbc", size=12, seed=0, train_sketch_len=3, n_tasks=2, n_align=3,
                config=config_mod.settings("navworld", None, ["epochs=1", "epoch_size=0"]), expert=None)
    seen = []
    with engine.Local(1) as ex:
        engine.run_grid([cell], ex, progress=seen.append, expected=600.0)
    assert seen[0]["done"] == 0 and 590.0 < seen[0]["eta"] <= 600.0
    assert engine.progress_line(seen[0]).endswith(f"ETA {engine._clock(seen[0]['eta'])}")
