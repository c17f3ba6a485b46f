"""taco_ref.app.experiment: one real (tiny) cell end to end, incremental saving, the results table."""
import json
import os

import pytest

import taco_sim
from taco_ref.app import experiment

TINY = dict(act_hidden=[16], stop_hidden=[16], ctc_hidden=[8], epochs=2, patience=2)


def cell(algo, size=30, seed=0):
    return dict(domain="navworld", algo=algo, size=size, seed=seed, train_sketch_len=3,
                n_tasks=3, n_align=5, config=TINY)


@pytest.mark.slow
@pytest.mark.parametrize("algo", experiment.ALGOS)
def test_a_real_cell_reports_every_metric_as_a_share(algo):
    out = experiment.run(cell(algo))
    for key in ("task_accuracy", "subtask_accuracy", "align_forward_argmax",
                "align_posterior_argmax", "align_viterbi"):
        assert 0.0 <= out[key] <= 1.0, key
    assert out["n_tasks"] == 3 and out["epochs"] >= 1 and out["algo"] == algo


def test_results_are_saved_after_every_cell(tmp_path, monkeypatch):
    seen = []

    def fake_run(c):
        # by the time a cell runs, every earlier cell is already on disk
        saved = tmp_path / "results.json"
        seen.append(len(json.loads(saved.read_text())) if saved.exists() else 0)
        return dict(c, config=None, task_accuracy=0.5, subtask_accuracy=0.75,
                    align_forward_argmax=0.9, align_posterior_argmax=0.95, align_viterbi=1.0)

    monkeypatch.setattr(experiment, "run", fake_run)
    cells = [cell(a, seed=s) for s in (0, 1) for a in ("taco", "gtbc")]
    results = experiment.run_all(cells, workers=1, out_dir=tmp_path)
    assert seen == [0, 1, 2, 3]
    assert [r["algo"] for r in results] == ["taco", "gtbc", "taco", "gtbc"]
    assert len(json.loads((tmp_path / "results.json").read_text())) == 4
    table = (tmp_path / "results.md").read_text()
    assert "| TACO | 30 | 2 | 50.0 ± 0.0 | 75.0 ± 0.0 | 90.0 ± 0.0 | 95.0 ± 0.0 | 100.0 ± 0.0 |" in table
    assert "| GT-BC | 30 | 2 |" in table
    assert "| task acc. | demos | seed 0 | seed 1 | mean ± std |" in table
    assert "| TACO | 30 | 50.0 | 50.0 | 50.0 ± 0.0 |" in table
    assert "| TACO | 30 | 90.0 | 90.0 | 90.0 ± 0.0 |" in table          # the alignment table


def test_seed_table_marks_missing_seeds():
    rows = [dict(algo="taco", size=10, seed=0, task_accuracy=0.25),
            dict(algo="taco", size=10, seed=2, task_accuracy=0.75),
            dict(algo="gtbc", size=10, seed=1, task_accuracy=1.0)]
    text = experiment.seed_table(rows)
    assert "| TACO | 10 | 25.0 | - | 75.0 | 50.0 ± 25.0 |" in text
    assert "| GT-BC | 10 | - | 100.0 | - | 100.0 ± 0.0 |" in text


def test_unknown_domain_is_named():
    with pytest.raises(ValueError, match="domain"):
        taco_sim.get("atari")


@pytest.mark.slow
def test_prepare_data_collects_each_set_once_and_cells_load_it(tmp_path):
    cells = [cell(a, size=12) for a in ("taco", "gtbc")]
    ready = experiment.prepare_data(cells, tmp_path)
    assert ready[0]["data"] == ready[1]["data"] and ready[0]["test_data"] == ready[1]["test_data"]
    stamp = [os.stat(p).st_mtime_ns for p in (ready[0]["data"], ready[0]["test_data"])]
    again = experiment.prepare_data(cells, tmp_path)              # reused, not collected again
    assert [os.stat(p).st_mtime_ns for p in (again[0]["data"], again[0]["test_data"])] == stamp
    from taco_ref import data
    demos = data.load(ready[0]["data"])
    assert demos.n == 12 and demos.meta["seed"] == 10_000         # the seed run() would use
    loaded = experiment.run(dict(ready[1], test_lengths=[2]))
    collected = experiment.run(dict(cells[1], test_lengths=[2]))
    for key in ("task_accuracy", "align_forward_argmax", "task_accuracy_by_length"):
        assert loaded[key] == collected[key], key
    assert set(loaded["task_accuracy_by_length"]) == {"2"}


def test_a_stopped_grid_resumes_and_a_changed_config_runs_again(tmp_path, monkeypatch):
    """run_all with out_dir skips every cell whose key (cell_key) already has a result there;
    a cell whose config differs in any field has another key and runs."""
    ran = []

    def fake_run(c):
        ran.append((c["algo"], c["seed"], c["config"].get("lr")))
        return dict(c, config=None, task_accuracy=0.5, subtask_accuracy=0.75,
                    align_forward_argmax=0.9, align_posterior_argmax=0.95, align_viterbi=1.0)

    monkeypatch.setattr(experiment, "run", fake_run)
    cells = [cell(a, seed=s) for s in (0, 1) for a in ("taco", "gtbc")]
    experiment.run_all(cells[:3], workers=1, out_dir=tmp_path)          # stopped after 3 cells
    assert len(ran) == 3
    results = experiment.run_all(cells, workers=1, out_dir=tmp_path)
    assert ran[3:] == [("gtbc", 1, None)]                                # only the missing cell
    assert [r["key"] for r in results] == [experiment.cell_key(c) for c in cells]
    changed = dict(cells[0], config=dict(TINY, lr=1e-3))
    assert experiment.cell_key(changed) != experiment.cell_key(cells[0])
    experiment.run_all([changed], workers=1, out_dir=tmp_path)
    assert ran[4:] == [("taco", 0, 1e-3)]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved) == 5                                  # a new grid keeps the earlier cells


@pytest.mark.slow
def test_parallel_cells_run_in_single_threaded_worker_processes(monkeypatch):
    """Worker processes started under _single_threaded see one BLAS thread (numpy reads it when it
    loads there); the caller's environment is restored; real tiny cells run in such workers."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    with experiment._single_threaded(), \
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert os.environ["OMP_NUM_THREADS"] == "1"
        assert pool.submit(os.getenv, "OPENBLAS_NUM_THREADS").result() == "1"
    assert os.environ["OPENBLAS_NUM_THREADS"] == "7"
    cells = [cell("gtbc", size=12), cell("taco", size=12)]
    parallel = experiment.run_all(cells, workers=2)
    for got, c in zip(parallel, cells):
        assert got["algo"] == c["algo"] and 0.0 <= got["align_forward_argmax"] <= 1.0


def test_cell_keys_of_committed_results_survive_the_dtype_field():
    """The default dtype (float64) leaves a cell's key as it was before the field existed, so
    committed cells are not run again; float32 is a different cell."""
    from pathlib import Path

    from taco_ref.app import config as config_mod
    saved = json.loads((Path(__file__).resolve().parents[1] / "results/navworld/results.json").read_text())
    cell = next(c for c in saved if c["algo"] == "taco" and c["size"] == 400 and c["seed"] == 0)
    ours = {k: cell[k] for k in ("domain", "algo", "size", "seed", "train_sketch_len", "n_tasks",
                                 "n_align", "test_lengths")}
    ours["config"] = config_mod.settings("navworld", None, [])
    assert experiment.cell_key(ours) == cell["key"]
    assert experiment.cell_key(dict(ours, config=dict(ours["config"], dtype="float64"))) == cell["key"]
    assert experiment.cell_key(dict(ours, config=dict(ours["config"], dtype="float32"))) != cell["key"]
