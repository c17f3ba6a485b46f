"""taco_app.grid.cell: one real (tiny) cell end to end, cell records and files, the
migration of results.json, and the report's tables (the engine: tests/test_engine.py)."""
import importlib.metadata
import json
import os
import re

import numpy as np
import pytest

import taco_sim
from taco_ref import evaluate
from taco_ref.plumbing import provenance
from taco_app import report
from taco_app.grid import keys as cellkeys, store as cells, cell as experiment, legacy

TINY = dict(act_hidden=[16], stop_hidden=[16], ctc_hidden=[8], epochs=2, patience=2)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cell(algo, size=30, seed=0, **config):
    return dict(domain="navworld", algo=algo, size=size, seed=seed, train_sketch_len=3,
                n_tasks=3, n_align=5, test_lengths=None, config=dict(TINY, **config))


@pytest.mark.slow
@pytest.mark.parametrize("algo", report.ALGOS)
def test_a_real_cell_reports_every_metric_as_a_share(algo):
    out = experiment.run(cell(algo))
    for key in ("task_accuracy", "subtask_accuracy", "align_forward_argmax",
                "align_posterior_argmax", "align_viterbi"):
        assert 0.0 <= out[key] <= 1.0, key
    assert out["n_tasks"] == 3 and out["epochs"] >= 1


@pytest.mark.slow
def test_a_cell_record_holds_its_config_data_and_figures_and_data_given_equal_data_collected(tmp_path):
    """run_cell on data from collect(data_specs) gives the figures of run collecting its own;
    the record carries the key, the full config, the data's seeds and fingerprints."""
    c = dict(cell("gtbc", size=12), test_lengths=[2])
    train_spec, test_spec = experiment.data_specs(c)
    assert train_spec == ("navworld", 12, 3, 10_000, None) and test_spec == ("navworld", 5, 3, 20_000, None)
    demos, test_demos = experiment.collect(train_spec), experiment.collect(test_spec)
    assert experiment.collect(train_spec).fingerprint() == demos.fingerprint()   # deterministic
    record = experiment.run_cell(c, demos, test_demos)
    alone = experiment.run(c)
    alone.pop("train_seconds")
    assert alone.pop("train_earlier") == {"seconds": 0.0, "cpu_seconds": 0.0, "processes": 0}
    assert record["figures"] == alone
    assert record["processes"] == 1 and record["cpu_seconds"] > 0
    assert record["key"] == cellkeys.cell_key(c)
    assert record["versions"]["mujoco"] == importlib.metadata.version("mujoco")
    assert record["machine"]["cpu"] == provenance.machine()["cpu"]
    assert demos.meta["collected_on"]["cpu"] == record["machine"]["cpu"]
    assert record["config"]["act_hidden"] == [16] and record["config"]["algo"] == "gtbc"
    assert record["config"]["lr"] > 0                       # defaults included: the full config
    assert record["data"]["train"] == {"n": 12, "sketch_len": 3, "seed": 10_000,
                                       "fingerprint": demos.fingerprint()}
    assert set(record["figures"]["task_accuracy_by_length"]) == {"2"}
    path = cells.write_cell(tmp_path, record)
    assert path == str(tmp_path / "cells" / "navworld" / "gtbc" / "n12" / "seed0.json")
    assert cells.Store(tmp_path).finished(c) == record
    assert cells.Store(tmp_path).finished(dict(c, config=dict(TINY, lr=1e-4))) is None


def test_a_damaged_cell_file_is_never_reused(tmp_path):
    c = cell("taco")
    path = cells.cell_path(tmp_path, c)
    os.makedirs(os.path.dirname(path))
    for text in ("{not json", "[]", json.dumps({"key": cellkeys.cell_key(c)})):
        with open(path, "w") as f:
            f.write(text)
        assert cells.Store(tmp_path).finished(c) is None, text


def test_seed_table_marks_missing_seeds():
    rows = [dict(algo="taco", size=10, seed=0, task_accuracy=0.25),
            dict(algo="taco", size=10, seed=2, task_accuracy=0.75),
            dict(algo="gtbc", size=10, seed=1, task_accuracy=1.0)]
    text = report.seed_table(rows)
    assert "| TACO | 10 | 25.0 | - | 75.0 | 50.0 ± 25.0 |" in text
    assert "| GT-BC | 10 | - | 100.0 | - | 100.0 ± 0.0 |" in text


def row(algo, seed, acc, align, **more):
    return dict(domain="dial", algo=algo, size=400, seed=seed, task_accuracy=acc, subtask_accuracy=acc,
                align_forward_argmax=align, align_posterior_argmax=align, align_viterbi=align, **more)


def test_the_report_gives_every_success_rule_and_its_lengths():
    """The Dial's rules (spec/evaluation.md eq. (10), (11)) in results.md and in the compact
    table a README shows: keypad, strict and paper task and sub-task accuracy per (algo, size),
    task accuracy by L_test under each rule, and "keypad / paper rule / align" per cell."""
    def rules(strict, paper, by_length=None):
        return {"strict": {"task_accuracy": strict, "subtask_accuracy": strict, "outcomes": "",
                           **({"task_accuracy_by_length": by_length} if by_length else {})},
                "paper": {"task_accuracy": paper, "subtask_accuracy": 1.0, "outcomes": ""}}
    rows = [row("taco", 0, 0.5, 0.98, rules=rules(0.25, 1.0, {"3": 0.5})),
            row("taco", 1, 0.75, 0.96, rules=rules(0.75, 1.0, {"3": 1.0}))]
    text = report.report(rows)
    assert ("| TACO | 400 | 2 | 62.5 ± 12.5 | 100.0 ± 0.0 | 50.0 ± 25.0 | 62.5 ± 12.5 | 100.0 ± 0.0 "
            "| 50.0 ± 25.0 |") in text
    assert "| task acc. by L_test, strict rule | demos | seeds | L = 3 |" in text
    assert "| TACO | 400 | 2 | 75.0 ± 25.0 |" in text
    assert "task acc. by L_test, paper rule" not in text           # not measured by length
    compact = report.compact_table(rows)
    assert "| task acc. keypad / paper rule / align (%) | 400 demos | seeds |" in compact
    assert "| TACO | 62.5 / 100.0 / 97.0 | 2 |" in compact
    mixed = report.compact_table(rows[:1] + [row("gtbc", 0, 0.5, 0.97)])   # one cell without rules
    assert "paper rule" not in mixed and "| TACO | 50.0 / 98.0 | 1 |" in mixed
    sizes = report.compact_table(rows + [dict(row("taco", s, 1.0, 0.99), size=1200) for s in range(5)])
    assert sizes.endswith("| 2, 5 |")                    # 2 seeds at 400, 5 at 1200: never one "5"


def test_the_report_shows_every_seed_lengths_and_the_papers_alignment():
    rows = [row("taco", 0, 0.5, 0.98, task_accuracy_by_length={"3": 0.75, "4": 0.5}),
            row("taco", 1, 0.25, 0.96, task_accuracy_by_length={"3": 0.25, "4": 0.5}),
            row("ctcbc-mlp", 0, 0.0, 0.3)]
    failure = {"cell": dict(domain="dial", algo="gtbc", size=400, seed=0), "error": "DivergedError: boom"}
    text = report.report(rows, [failure])
    assert "| TACO | 400 | 2 | 37.5 ± 12.5 | 37.5 ± 12.5 | 97.0 ± 1.0 |" in text
    assert "| TACO | 400 | 50.0 | 25.0 | 37.5 ± 12.5 |" in text            # every seed visible
    assert "| TACO | 400 | 2 | 50.0 ± 25.0 | 50.0 ± 0.0 |" in text          # by L_test
    # the paper's Dial figures of its Sec. 5 table and its appendix B table
    assert "| TACO | 99.8 | 98.9 | 97.0 ± 1.0 |" in text
    assert "| CTC-BC (MLP) | 90.1 | 31.4 | 30.0 |" in text
    assert "- dial gtbc n400 seed 0: DivergedError: boom" in text


def test_paper_alignment_values_are_the_papers():
    """PAPER_ALIGNMENT (each algorithm's declaration) holds the two tables of alignment accuracy
    of the paper's text, for exactly the paper's algorithms."""
    tex = "/work/shared/paper/taco-icml2018.tex"
    if not os.path.exists(tex):
        pytest.skip("the paper's text is not on this machine")
    tex_text = open(tex, encoding="utf-8").read()
    blocks = [b for b in re.findall(r"\\begin\{table\}.*?\\end\{table\}", tex_text, re.S)
              if "tab:seq_alignment" in b]
    assert len(blocks) == 2                       # the Sec. 5 table and the appendix B table
    algo = {"TACO": "taco", "CTC-BC (MLP)": "ctcbc-mlp", "CTC-BC (GRU)": "ctcbc-gru"}
    tables = []
    for block in blocks:
        rows = re.findall(r"^\s*(TACO|CTC-BC \(MLP\)|CTC-BC \(GRU\)|GT-BC[^&]*)\s*&([^\n]*)", block, re.M)
        tables.append({algo.get(name.strip(), "gtbc"): [float(v) for v in re.findall(r"\d+\.\d", values)]
                       for name, values in rows})
    assert {a for a in report.ALGOS if report.PAPER_ALIGNMENT["navworld"].get(a)} == set(tables[0])
    for a in tables[0]:                           # the paper's algorithms (CompILE came later)
        for t in (0, 1):
            nav, craft, dial = tables[t][a][:3]
            assert report.PAPER_ALIGNMENT["navworld"][a][t] == nav
            assert report.PAPER_ALIGNMENT["craft"][a][t] == craft
            assert report.PAPER_ALIGNMENT["dial"][a][t] == dial


def legacy_entry(c, **figures):
    base = dict(task_accuracy=0.5, subtask_accuracy=0.75, align_forward_argmax=0.9,
                align_posterior_argmax=0.95, align_viterbi=1.0, epochs=3, seconds=12.5)
    return dict(c, config=None, data="old/path.npz", key=legacy.cell_key_v1(c), **dict(base, **figures))


def test_results_json_cells_of_the_same_config_become_cell_files(tmp_path):
    same, other = cell("taco", seed=0), cell("taco", seed=1)
    changed = dict(other, config=dict(TINY, lr=1e-4))             # recorded with another config
    entries = [legacy_entry(same), legacy_entry(changed, task_accuracy=0.25)]
    (tmp_path / "results.json").write_text(json.dumps(entries))
    before = cells.load_results(tmp_path)                    # not migrated: still reported
    assert sorted(r["task_accuracy"] for r in before) == [0.25, 0.5] and all(r["legacy"] for r in before)
    store = cells.Store(tmp_path)
    assert [store.finished(c) is not None for c in (same, other)] == [True, False]
    assert store.migrated == 1                                    # the other config matches no key
    record = cells.Store(tmp_path).finished(same)
    assert record["migrated"] == "results.json" and record["config"]["act_hidden"] == [16]
    assert record["figures"]["task_accuracy"] == 0.5 and "data" not in record["figures"]
    assert record["data"]["train"]["seed"] == 10_000 and record["data"]["train"]["fingerprint"] is None
    assert cells.Store(tmp_path).finished(other) is None
    again = cells.Store(tmp_path)
    assert again.finished(same) == record and again.migrated == 0   # once: now a cell file
    rows = cells.load_results(tmp_path)
    assert len(rows) == 2 and [r.get("legacy") for r in rows] == [None, True]


@pytest.mark.slow
def test_the_report_of_the_committed_nav_world_cells_is_their_results_md(tmp_path):
    """results/navworld's cell files give its committed results.md, table for table (README's
    table is checked in tests/test_results.py)."""
    text, written, _ = report.write_report([os.path.join(REPO, "results", "navworld")], tmp_path)
    committed = open(os.path.join(REPO, "results", "navworld", "results.md"), encoding="utf-8").read()
    assert committed.strip() == text.strip()
    assert written[0] == str(tmp_path / "results.md")


def test_unknown_domain_is_named():
    with pytest.raises(ValueError, match="domain"):
        taco_sim.get("atari")


def test_epoch_size_enters_a_cell_key_only_where_it_adds_passes():
    """A cell whose training set already holds epoch_size demonstrations trains exactly as
    without the field (one pass per epoch), so its key, and its committed file, stay valid;
    where it adds passes the key changes. spec/training.md eq. (11), spec/evaluation.md §3."""
    def cell(size, epoch_size):
        return {"domain": "navworld", "algo": "taco", "size": size, "seed": 0, "train_sketch_len": 3,
                "n_tasks": 10, "n_align": 10, "test_lengths": None,
                "config": {"epochs": 3, "epoch_size": epoch_size}}
    # size 400: 40 held out, 360 trained on; size 200: 180
    assert cellkeys.cell_key(cell(400, 360)) == cellkeys.cell_key(cell(400, 0))
    assert cellkeys.cell_key(cell(400, 361)) != cellkeys.cell_key(cell(400, 0))
    assert cellkeys.cell_key(cell(200, 360)) != cellkeys.cell_key(cell(200, 0))
    assert cellkeys.cell_key(cell(200, 360)) != cellkeys.cell_key(cell(200, 540))   # 2 and 3 passes


def test_version_1_cell_keys_of_committed_results_survive_the_dtype_field():
    """The frozen version-1 key (taco_app.grid.legacy): dtype float64 (the default before float32 became it, and the precision of every
    committed cell) leaves a cell's key as it was before the field existed, so committed cells
    are found again with `--set dtype=float64`; float32 (the default) is a different cell."""
    from pathlib import Path

    from taco_app import config as config_mod
    saved = json.loads((Path(__file__).resolve().parents[1] / "results/navworld/results.json").read_text())
    cell = next(c for c in saved if c["algo"] == "taco" and c["size"] == 400 and c["seed"] == 0)
    ours = {k: cell[k] for k in ("domain", "algo", "size", "seed", "train_sketch_len", "n_tasks",
                                 "n_align", "test_lengths")}
    # the committed cells were trained at a constant rate (lr_decay none, the field's default) and
    # sigma 0.5 (the config's before spec/selection.md chose 0.3)
    ours["config"] = config_mod.settings("navworld", None, ["lr_decay=none", "dtype=float64", "sigma=0.5"])
    assert legacy.cell_key_v1(ours) == cell["key"]
    assert legacy.cell_key_v1(dict(ours, config=dict(ours["config"], dtype="float32"))) != cell["key"]


def test_the_report_gives_intervals_paired_differences_and_failure_kinds():
    """taco report: every cell's task accuracy with its Wilson interval; TACO - GT-BC per seed
    on the same tasks with the paired interval, and the mean over seeds with a t interval; the
    failure kinds summed over seeds (the report of the statistics in spec/evaluation.md §2)."""
    taco0, gtbc0 = "1" * 60 + "0" * 40, "1" * 50 + "0" * 50
    taco1, gtbc1 = "1" * 40 + "0" * 60, "1" * 45 + "0" * 55
    fails = {"stopped late": 30, "stopped early": 10}
    rows = [row("taco", 0, 0.6, 0.98, n_tasks=100, outcomes=taco0, failures=fails,
                failure_details={"stopped late: pressed its key again": 28}),
            row("gtbc", 0, 0.5, 0.98, n_tasks=100, outcomes=gtbc0, failures={"stopped late": 50}),
            row("taco", 1, 0.4, 0.98, n_tasks=100, outcomes=taco1, failures={"stopped late": 60}),
            row("gtbc", 1, 0.45, 0.98, n_tasks=100, outcomes=gtbc1, failures={"stopped late": 55})]
    text = report.report(rows)
    lo, hi = (100 * x for x in evaluate.wilson_interval(60, 100))
    assert f"| TACO | 400 | 100 | 60.0 [{lo:.1f}, {hi:.1f}] | 40.0 [" in text
    d, lo, hi = evaluate.paired_difference_interval(taco0, gtbc0)
    assert f"seed 0: {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]" in text and "+10.0" in text
    assert "seed 1: -5.0 [" in text and "| +2.5 [" in text and "(2 seeds) |" in text
    assert "| TACO | 400 | 100 / 200 | 10 % | 90 % |" in text       # early 10, late 30 + 60
    assert "| TACO: stopped late: pressed its key again | 400 | 28 |" in text


def test_the_report_tables_keep_their_shape_when_no_task_failed():
    """Every line of a report's tables has as many cells as its header (a Markdown table whose
    rows or delimiter differ from its header is not drawn), also when no task failed and with one
    seed, where the difference names one seed."""
    rows = [row("taco", 0, 1.0, 1.0, n_tasks=4, outcomes="1111", failures={}),
            row("gtbc", 0, 1.0, 1.0, n_tasks=4, outcomes="1111", failures={})]
    text = report.report(rows)
    assert "| TACO | 400 | 0 / 4 |" in text.splitlines() and "(1 seed) |" in text
    for table in text.split("\n\n"):
        lines = [ln for ln in table.splitlines() if ln.startswith("|")]
        widths = {ln.strip().strip("|").count("|") for ln in lines}
        assert len(widths) <= 1, table


@pytest.mark.slow
def test_a_streaming_domain_collects_into_the_data_directory_once(tmp_path, monkeypatch):
    """Data too large for memory (the image Dial) goes to a frame directory under OUT/data,
    passed on as a path; a grid run again reuses a complete directory of the same spec instead
    of collecting it again, and collects again where the spec differs."""
    import dataclasses
    from taco_ref import data
    real = taco_sim.get("dial-image-small")
    calls = []

    def counted(n, sketch_len, seed, **kw):
        calls.append((n, seed, kw.get("out")))
        return real.collect(n, 1, seed, **kw)           # one-digit PINs: quick
    dom = dataclasses.replace(real, collect=counted)
    monkeypatch.setattr(experiment.taco_sim, "get", lambda name: dom)
    spec = ("dial-image-small", 1, 1, 10_000, None)
    first = experiment.collect(spec, str(tmp_path))
    assert isinstance(first.states, data.FrameStates) and len(calls) == 1
    assert calls[0][2] == os.path.join(str(tmp_path), "dial-image-small-n1-L1-seed10000")
    again = experiment.collect(spec, str(tmp_path))
    assert len(calls) == 1 and again.fingerprint() == first.fingerprint()
    experiment.collect(("dial-image-small", 1, 1, 10_001, None), str(tmp_path))
    assert len(calls) == 2
    os.unlink(os.path.join(calls[0][2], data.INDEX))          # an interrupted collection is redone
    experiment.collect(spec, str(tmp_path))
    assert len(calls) == 3


def test_the_report_gives_the_first_25_test_tasks_beside_all_of_them():
    """The image Dial's figure reports 25 test tasks: the report gives task and sub-task
    accuracy over each cell's first 25 (from its per-task progress) beside all 100."""
    progress = [5] * 10 + [2] * 15 + [5] * 50 + [0] * 25
    row = dict(domain="dial-image-small", algo="taco", size=200, seed=0, n_tasks=100,
               outcomes="".join("1" if p == 5 else "0" for p in progress), task_progress=progress,
               task_lengths=[5] * 100, task_accuracy=0.6, subtask_accuracy=sum(progress) / 500)
    table = report.prefix_table([row, dict(row, seed=1)])
    line = [l for l in table.split("\n") if l.startswith("| TACO")][0]
    assert line == "| TACO | 200 | 2 | 40.0 ± 0.0 | 64.0 ± 0.0 | 60.0 ± 0.0 | 66.0 ± 0.0 |"
    assert report.prefix_table([dict(row, n_tasks=25)]) == ""


def test_the_report_rebuilds_a_cells_subtask_success_from_its_progress_and_the_protocol():
    """A cell without subtask_success (recorded before it existed) but with task_progress gets it
    from the protocol's test sketches of its seed, the same as task_accuracy would have recorded;
    a cell whose task_lengths do not match those sketches gets none. The table bolds each row's
    lowest sub-task and gives the task accuracy of independent sub-tasks (the mean over the
    sketches of their shares' product). Checks spec/evaluation.md eq. (7)."""
    import taco_sim
    from taco_ref import evaluate
    sketches = evaluate.protocol_sketches(taco_sim.get("navworld"), 30, 1)
    lengths = [len(evaluate.unpad(s)) for s in sketches]
    progress = [i % (n + 1) for i, n in enumerate(lengths)]
    row = dict(domain="navworld", algo="taco", size=10, seed=1, n_tasks=30, task_progress=progress,
               task_lengths=lengths, task_accuracy=0.5)
    want = evaluate.subtask_success(sketches, progress)
    assert report.cell_subtask_success(row) == want
    assert report.cell_subtask_success(dict(row, seed=2)) in (None, evaluate.subtask_success(
        evaluate.protocol_sketches(taco_sim.get("navworld"), 30, 2), progress))
    assert report.cell_subtask_success(dict(row, task_lengths=[9] * 30)) is None
    assert report.cell_subtask_success(dict(row, subtask_success={"0": [1, 1]})) == {"0": [1, 1]}
    line = report.subtask_table([row], "navworld").split("\n")[2]
    shares = {k: 100 * c / r for k, (c, r) in want.items()}
    low = min(shares, key=shares.get)
    product = np.mean([np.prod([shares[str(k)] / 100 for k in evaluate.unpad(s)]) for s in sketches])
    assert line.startswith(f"| TACO | 10 | 1 | 50.0 | {100 * product:.1f} |") and f"**{shares[low]:.0f}**" in line
    assert report.subtask_table([dict(row, task_progress=None)], "navworld") == ""


def test_a_cell_interrupted_mid_training_continues_from_its_checkpoint(tmp_path, capsys):
    """A cell of the image Dial trains for hours: with a run directory it checkpoints every
    epoch, and run again after an interruption it continues there and gives the figures of an
    uninterrupted cell, with a line on stderr, named by the cell, for each epoch it runs. Only
    streaming domains get one, named by the cell's key."""
    from taco_ref import train
    from taco_ref.plumbing import checkpoints
    c = cell("taco", size=12)
    demos, test_demos = (experiment.collect(s) for s in experiment.data_specs(c))
    whole = experiment.run(c, demos, test_demos)
    run_dir = tmp_path / "run"
    cfg = train.TrainConfig.from_dict(dict(c["config"], algo="taco", seed=0))
    assert train.train(demos, cfg, out_dir=run_dir, stop_after=1, progress=False) is None   # "killed"
    capsys.readouterr()
    first = json.loads((run_dir / checkpoints.CHECKPOINT_META).read_text())["spent"]
    assert first["processes"] == 1 and first["cpu_seconds"] > 0 and first["seconds"] > 0
    record = experiment.run_cell(c, demos, test_demos, run_dir=str(run_dir))
    resumed = record["figures"]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("navworld-taco-n12-seed0: [taco ")]
    assert lines and len(lines) == resumed["epochs"] - 1 and " epoch " in lines[-1]   # all but the first
    whole.pop("train_seconds"), whole.pop("train_earlier")
    assert resumed == whole
    # the cell's cost counts the interrupted process's time (to its checkpoint) and this one's
    assert record["processes"] == 2
    assert record["cpu_seconds"] > first["cpu_seconds"] and record["seconds"] > first["seconds"]
    assert record["train_seconds"] > first["seconds"]
    assert experiment.run_dir_of(str(tmp_path), c) is None                   # navworld: no checkpoints
    image_cell = dict(c, domain="dial-image-small", train_sketch_len=4)
    path = experiment.run_dir_of(str(tmp_path), image_cell)
    assert path.endswith(f"seed0-{experiment.cell_key(image_cell)[:16]}") and "runs/dial-image-small/taco" in path


def test_grids_collect_the_standard_dial_data_only(monkeypatch, capsys):
    """A grid's data task calls the domain's collect with the demonstrations' count, length,
    seed and expert only: no motor noise or disturbance reaches a grid's data (spec/dial.md
    §12), and `taco experiment` refuses the collection-only options instead of ignoring them."""
    from taco_app import cli
    from taco_app.grid import cell
    from types import SimpleNamespace
    seen = []
    stand_in = SimpleNamespace(streams=False, collect=lambda *a, **kw: seen.append((a, kw)) or "demos")
    monkeypatch.setattr(cell.taco_sim, "get", lambda name: stand_in if name == "dial" else None)
    assert cell.collect(("dial", 3, 4, 10000, None)) == "demos"
    assert seen == [((3, 4, 10000), {})]
    for option in ("--motor-noise", "--disturbance"):
        rc = cli.main(["experiment", "dial", "--sizes", "3", "--seeds", "0", "--algos", "taco", option, "0.1"])
        assert rc == 2 and f"unrecognized arguments: {option}" in capsys.readouterr().err
