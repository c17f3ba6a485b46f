"""Smoke tests of the `taco` command line (taco_app/cli.py), run in a temporary directory.

(c), the smoke layer: the journey collect -> train -> evaluate -> align through
cli.main, interrupted training continued with --resume ending where an uninterrupted run ends,
bad input answered with exit code 2 and one line on stderr (no traceback), and the installed
console script.
"""
import importlib.util
import json
import os
import subprocess
import sysconfig

import numpy as np
import pytest

import taco_sim
from taco_ref import data, model as model_mod
from taco_app import cli

SMALL = ["--set", "epochs=2", "--set", "act_hidden=[8]", "--set", "stop_hidden=[8]",
         "--set", "ctc_hidden=[8]", "--set", "patience=100"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Training and test demonstrations written by `taco collect`."""
    d = tmp_path_factory.mktemp("cli")
    for name, n, seed in (("nav.npz", 30, 1), ("test.npz", 8, 2)):
        assert cli.main(["collect", "navworld", "--n", str(n), "--sketch-len", "2", "--seed",
                         str(seed), "--out", str(d / name)]) == 0
    return d


@pytest.fixture(scope="module")
def trained(files):
    """A TACO run directory made by `taco train`."""
    assert cli.main(["train", "--data", str(files / "nav.npz"), "--out", str(files / "run"),
                     "--seed", "0"] + SMALL) == 0
    return files / "run"


def one_line_error(capsys, command):
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"taco {command}: "), err
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_collect_writes_a_valid_demonstration_file(files, capsys):
    demos = data.load(files / "nav.npz")
    assert demos.n == 30 and demos.meta["domain"] == "navworld" and demos.meta["seed"] == 1
    assert (demos.sketch_len == 2).all()
    assert cli.main(["collect", "navworld", "--n", "3", "--out", str(files / "three.npz")]) == 0
    assert "wrote 3 demonstrations" in capsys.readouterr().out


@pytest.mark.slow
def test_train_writes_a_loadable_model(trained, capsys):
    model = model_mod.load(trained / "model")
    assert model.algo == "taco" and model.policy.act_hidden == [8]
    assert len([h for h in model.info["history"] if h["stage"] == "policy"]) == 2
    assert model.config["epochs"] == 2


@pytest.mark.slow
def test_train_gtbc_and_ctcbc(files, capsys):
    for algo in ("gtbc", "ctcbc-mlp"):
        out = files / f"run-{algo}"
        assert cli.main(["train", "--algo", algo, "--data", str(files / "nav.npz"), "--out", str(out)]
                        + SMALL) == 0
        assert f"trained {algo}" in capsys.readouterr().out
        assert model_mod.load(out / "model").algo == algo


def test_evaluate_prints_task_and_alignment_accuracy(trained, files, capsys):
    assert cli.main(["evaluate", "--model", str(trained / "model"), "--n-tasks", "2",
                     "--data", str(files / "test.npz")]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["n_tasks"] == 2
    for key in ("task_accuracy", "subtask_accuracy", "align_forward_argmax", "align_posterior_argmax",
                "align_viterbi"):
        assert 0.0 <= result[key] <= 1.0, key
    reached = sum(r for _, r in result["subtask_success"].values())
    assert reached >= 2 and "sub-task success, completed / reached" in captured.err


def test_evaluate_task_accuracy_against_sketch_length(trained, capsys):
    assert cli.main(["evaluate", "--model", str(trained / "model"), "--n-tasks", "2",
                     "--lengths", "1", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["task_accuracy_by_length"]) == {"1", "3"}
    assert all(0.0 <= v <= 1.0 for v in result["task_accuracy_by_length"].values())


def test_evaluate_stop_threshold_reaches_every_stop_decision(trained, capsys, monkeypatch):
    """--stop-threshold P: every STOP decision of the rollouts compares against P; a value
    outside (0, 1) is a usage error naming the option."""
    from taco_ref import policy
    seen = set()
    stops = policy.stops

    def recording(params, cfg, subtask, state, stop_threshold=0.5):
        seen.add(stop_threshold)
        return stops(params, cfg, subtask, state, stop_threshold)

    monkeypatch.setattr(policy, "stops", recording)
    assert cli.main(["evaluate", "--model", str(trained / "model"), "--n-tasks", "2",
                     "--stop-threshold", "0.8"]) == 0
    assert seen == {0.8}
    capsys.readouterr()
    for bad in ("1", "0", "x"):
        assert cli.main(["evaluate", "--model", str(trained / "model"), "--stop-threshold", bad]) == 2
        assert "--stop-threshold" in capsys.readouterr().err


def test_evaluate_rejects_a_model_of_another_domain(trained, capsys):
    assert cli.main(["evaluate", "--model", str(trained / "model"), "--domain", "dial",
                     "--n-tasks", "1"]) == 2
    assert "vocabulary" in one_line_error(capsys, "evaluate")


@pytest.mark.slow
def test_collect_gives_the_same_data_for_any_workers(files, capsys):
    """The domain contract: collection is deterministic by seed whatever --workers is (the
    Dial's collect runs worker processes); a domain that collects in one process refuses
    --workers > 1 instead of ignoring it, and 0 workers is refused everywhere."""
    for w in (1, 2):
        assert cli.main(["collect", "dial", "--n", "2", "--sketch-len", "1", "--workers", str(w),
                         "--out", str(files / f"w{w}.npz")]) == 0
    assert data.load(files / "w1.npz").fingerprint() == data.load(files / "w2.npz").fingerprint()
    capsys.readouterr()
    for domain, w in (("navworld", "0"), ("navworld", "2"), ("craft", "2"), ("dial", "0")):
        assert cli.main(["collect", domain, "--n", "3", "--workers", w,
                         "--out", str(files / "never.npz")]) == 2
        assert "--workers" in one_line_error(capsys, "collect")
    assert not (files / "never.npz").exists()


def test_align_prints_accuracies(trained, files, capsys):
    assert cli.main(["align", "--model", str(trained / "model"), "--data", str(files / "test.npz")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(")")[0] for line in lines] == [
        "alignment accuracy (forward_argmax", "alignment accuracy (posterior_argmax",
        "alignment accuracy (viterbi"]


@pytest.mark.slow        # matplotlib renders a figure
def test_align_plot(trained, files, capsys):
    png = files / "alignment.png"
    code = cli.main(["align", "--model", str(trained / "model"), "--data", str(files / "test.npz"),
                     "--plot", str(png)])
    if importlib.util.find_spec("matplotlib") is not None:
        assert code == 0 and png.exists() and png.stat().st_size > 0
    else:
        assert code == 1
        assert "--plot needs matplotlib" in capsys.readouterr().err
        assert not png.exists()


@pytest.mark.slow        # training runs
def test_train_stop_after_then_resume_matches_an_uninterrupted_run(files, capsys):
    args = ["train", "--data", str(files / "nav.npz"), "--seed", "3"] + SMALL + ["--set", "epochs=3"]
    assert cli.main(args + ["--out", str(files / "whole")]) == 0
    part = str(files / "part")
    assert cli.main(args + ["--out", part, "--stop-after", "1"]) == 0
    assert f"continue with --resume --out {part}" in capsys.readouterr().out
    assert not (files / "part" / "model").exists()
    assert cli.main(args + ["--out", part, "--resume"]) == 0
    whole, resumed = model_mod.load(files / "whole" / "model"), model_mod.load(files / "part" / "model")
    for name in whole.params:
        np.testing.assert_array_equal(resumed.params[name], whole.params[name], err_msg=name)


@pytest.mark.slow
def test_a_run_is_never_overwritten_without_asking(files, capsys):
    """Issue 11: training into a directory that holds a run, without --resume, overwrote it."""
    args = ["train", "--data", str(files / "nav.npz"), "--seed", "3"] + SMALL + ["--set", "epochs=2"]
    out = files / "kept"
    assert cli.main(args + ["--out", str(out), "--stop-after", "1"]) == 0
    before = (out / "checkpoint.json").read_bytes()
    capsys.readouterr()
    assert cli.main(args + ["--out", str(out)]) == 2
    assert "--resume" in one_line_error(capsys, "train") and (out / "checkpoint.json").read_bytes() == before
    assert cli.main(args + ["--out", str(out), "--overwrite"]) == 0
    assert (out / "model" / "model.json").exists()
    capsys.readouterr()
    assert cli.main(args + ["--out", str(out)]) == 2                 # a finished model is a run too
    assert "already holds a training run" in one_line_error(capsys, "train")


@pytest.mark.slow        # training runs
def test_stop_after_zero_leaves_a_checkpoint_to_resume_from(files, capsys):
    args = ["train", "--data", str(files / "nav.npz"), "--seed", "3"] + SMALL + ["--set", "epochs=2"]
    out = files / "zero"
    assert cli.main(args + ["--out", str(out), "--stop-after", "0"]) == 0
    assert (out / "checkpoint.json").exists()
    assert cli.main(args + ["--out", str(out), "--resume"]) == 0
    assert cli.main(args + ["--out", str(files / "zero-whole")]) == 0
    a, b = model_mod.load(out / "model"), model_mod.load(files / "zero-whole" / "model")
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)


# ----------------------------------------------------------------------------------------------
# Bad input: exit code 2, one line on stderr
# ----------------------------------------------------------------------------------------------

def test_out_that_is_a_file_is_refused_before_training(files, tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("x")
    assert cli.main(["train", "--data", str(files / "nav.npz"), "--out", str(target)] + SMALL) == 2
    assert "is not a directory" in one_line_error(capsys, "train")


def test_a_diverging_run_stops_with_one_line_and_saves_no_model(files, tmp_path, capsys):
    out = tmp_path / "diverged"
    assert cli.main(["train", "--data", str(files / "nav.npz"), "--out", str(out)] + SMALL
                    + ["--set", "lr=1e10", "--set", "epochs=5"]) == cli.EXIT_DIVERGED == 4
    assert "diverged" in one_line_error(capsys, "train")
    assert not (out / "model").exists()


def test_a_tampered_checkpoint_is_refused(files, tmp_path, capsys):
    args = ["train", "--data", str(files / "nav.npz"), "--seed", "3"] + SMALL + ["--set", "epochs=2"]
    out = tmp_path / "tampered"
    assert cli.main(args + ["--out", str(out), "--stop-after", "1"]) == 0
    meta = json.loads((out / "checkpoint.json").read_text())
    for field, value in (("stage", 7), ("stage", "policy"), ("epoch", -1)):
        (out / "checkpoint.json").write_text(json.dumps(dict(meta, **{field: value})))
        capsys.readouterr()
        assert cli.main(args + ["--out", str(out), "--resume"]) == 2
        assert "cannot resume" in one_line_error(capsys, "train")
    del meta["rng"]
    (out / "checkpoint.json").write_text(json.dumps(meta))
    assert cli.main(args + ["--out", str(out), "--resume"]) == 2
    assert "'rng' missing" in one_line_error(capsys, "train")

@pytest.mark.slow
def test_demo_runs_the_chosen_algorithms_with_overrides_and_keeps_its_results(tmp_path, capsys, monkeypatch):
    """taco demo --algos/--set: the table has one row per algorithm asked for; it writes its
    results.md and picture to taco-demo, a second demo to taco-demo-2 (nothing replaced), and an
    --out that holds anything is refused."""
    monkeypatch.chdir(tmp_path)
    args = ["demo", "--n", "12", "--n-tasks", "2", "--workers", "1", "--algos", "taco", "gtbc"] + SMALL
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "| TACO | 12 | 1 |" in out and "| GT-BC | 12 | 1 |" in out and "| CTC-BC" not in out
    assert all(line in out for line in cli.DEMO_LEGEND)                  # units and what each row is
    assert (tmp_path / "taco-demo" / "results.md").read_text().startswith("| algorithm |")
    assert (tmp_path / "taco-demo" / "accuracy.png").stat().st_size > 1000
    assert cli.main(args) == 0 and (tmp_path / "taco-demo-2" / "results.md").exists()
    assert cli.main(args + ["--out", "taco-demo"]) == 2


def test_nonexistent_data_file(tmp_path, capsys):
    assert cli.main(["train", "--data", str(tmp_path / "missing.npz"), "--out", str(tmp_path / "r")]) == 2
    assert "missing.npz" in one_line_error(capsys, "train")


def test_bad_set_key(files, tmp_path, capsys):
    assert cli.main(["train", "--data", str(files / "nav.npz"), "--out", str(tmp_path / "r"),
                     "--set", "colour=red"]) == 2
    assert "unknown config keys ['colour']" in one_line_error(capsys, "train")


def test_bad_set_value(files, tmp_path, capsys):
    assert cli.main(["train", "--data", str(files / "nav.npz"), "--out", str(tmp_path / "r"),
                     "--set", "stop_dropout=1.0"]) == 2
    assert "stop_dropout must lie in [0, 1)" in one_line_error(capsys, "train")


@pytest.mark.parametrize("corruption", ["truncated", "text"])
def test_corrupt_data_file(files, tmp_path, capsys, corruption):
    bad = tmp_path / "bad.npz"
    if corruption == "truncated":
        blob = (files / "nav.npz").read_bytes()
        bad.write_bytes(blob[: len(blob) // 2])
    else:
        bad.write_text("this is not a demonstration file\n")
    assert cli.main(["train", "--data", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "not a readable taco_ref demonstration file" in one_line_error(capsys, "train")


def test_resume_without_checkpoint(files, tmp_path, capsys):
    assert cli.main(["train", "--data", str(files / "nav.npz"), "--out", str(tmp_path / "empty"),
                     "--resume"] + SMALL) == 2
    assert "no checkpoint" in one_line_error(capsys, "train")


def test_evaluate_a_directory_that_is_not_a_model(tmp_path, capsys):
    assert cli.main(["evaluate", "--model", str(tmp_path), "--n-tasks", "1"]) == 2
    assert "not a taco_ref model directory" in one_line_error(capsys, "evaluate")


@pytest.mark.slow        # a fresh process of the installed script
def test_console_script_is_installed():
    """The installed distribution declares the `taco` console script, and the script pip wrote
    beside this interpreter (its scripts directory, whatever the caller's PATH) runs."""
    from importlib.metadata import entry_points
    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts.get("taco") == "taco_app.cli:main", "pip install -e . declares no `taco` script"
    exe = os.path.join(sysconfig.get_path("scripts"), "taco")
    assert os.path.isfile(exe), f"the `taco` console script is not in {sysconfig.get_path('scripts')}"
    res = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    for command in ("collect", "train", "evaluate", "align", "demo", "experiment"):
        assert command in res.stdout


@pytest.mark.slow
def test_dial_collect_in_parallel_then_rollout_draws_a_contact_sheet(tmp_path, capsys, offscreen_gl):
    """The Dial journey on a tiny scale: collect with 2 workers, train for one epoch, draw a
    rollout. An untrained model does not dial, so rollout exits 1 and says so; the sheet exists."""
    pytest.importorskip("matplotlib")
    demos = tmp_path / "dial.npz"
    assert cli.main(["collect", "dial", "--n", "4", "--workers", "2", "--out", str(demos)]) == 0
    out = capsys.readouterr().out
    assert "wrote 4 demonstrations" in out and "demonstrations/s" in out
    assert data.load(demos).meta["domain"] == "dial" and (data.load(demos).sketch_len == 4).all()
    assert cli.main(["train", "--data", str(demos), "--out", str(tmp_path / "run"), "--set",
                     "epochs=1", "--set", "act_hidden=[8]", "--set", "stop_hidden=[8]"]) == 0
    capsys.readouterr()
    png, gif = tmp_path / "rollout.png", tmp_path / "rollout.gif"
    code = cli.main(["rollout", "--model", str(tmp_path / "run" / "model"), "--sketch", "1",
                     "--every", "40", "--out", str(png), "--gif", str(gif)])
    out = capsys.readouterr().out
    assert (code == 1 and out.startswith("did not finish '1'")) or (code == 0 and out.startswith("completed"))
    assert png.stat().st_size > 0 and gif.stat().st_size > 0


def test_rollout_rejects_an_unknown_sub_task(trained, tmp_path, capsys):
    assert cli.main(["rollout", "--model", str(trained / "model"), "--domain", "navworld",
                     "--sketch", "purple", "--out", str(tmp_path / "x.png")]) == 2
    assert "purple" in one_line_error(capsys, "rollout")



@pytest.mark.slow        # matplotlib renders a figure
@pytest.mark.parametrize("sizes", [[1200], [200, 400, 800, 1200]])
def test_accuracy_plot_keeps_each_size_s_points_together(sizes, tmp_path, monkeypatch):
    """With one dataset size matplotlib's own limits put the algorithms' points at the two edges
    of the axes; the plot's x range keeps each size's points within a third of it."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from taco_app import plots
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    results = [{"algo": a, "size": s, "seed": 0, "task_accuracy": 0.5, "align_forward_argmax": 0.9}
               for a in ("taco", "gtbc", "ctcbc-mlp") for s in sizes]
    plots.plot(results, tmp_path / "accuracy.png")
    for ax in figures[0].axes:
        low, high = np.log10(ax.get_xlim())
        for s in sizes:
            x = np.log10(s) + plots._spread(3, 0.04)
            assert low < x.min() and x.max() < high and (x.max() - x.min()) <= (high - low) / 3, (s, low, high)


def test_evaluate_writes_every_figure_to_json_and_a_summary_to_the_reader(trained, files, tmp_path, capsys):
    """--json FILE: the JSON there and a summary (task accuracy with its interval, alignment)
    on stdout; without it, stdout not a terminal: the JSON on stdout, the summary on stderr."""
    out = tmp_path / "eval.json"
    args = ["evaluate", "--model", str(trained / "model"), "--n-tasks", "3", "--data", str(files / "test.npz")]
    assert cli.main(args + ["--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert figures["n_tasks"] == 3 and "align_forward_argmax" in figures
    assert "executed 3 test sketches; task accuracy" in stdout and "(95 % Wilson)" in stdout
    assert "alignment accuracy on the --data demonstrations" in stdout and f"wrote every figure to {out}" in stdout
    assert not stdout.lstrip().startswith("{")
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == figures
    assert "executed 3 test sketches" in captured.err


def test_every_option_has_a_help_line_and_shows_its_default(capsys):
    """Every argument of every command explains itself, and `--help` shows each default."""
    import argparse
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in commands.items():
        for action in sub._actions:
            assert action.help, (name, action.option_strings or action.dest)
    assert cli.main(["experiment", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 50 200 400 1000)" in text and "(default: 0 1 2 3 4)" in text
    assert "(default: 100)" in text


def test_a_mistyped_command_or_option_gets_a_did_you_mean(capsys):
    assert cli.main(["trian"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'train'?" in err and err.count("\n") == 1
    assert cli.main(["evaluate", "--model", "m", "--n-taks", "3"]) == 2
    err = capsys.readouterr().err
    assert "did you mean --n-tasks for --n-taks?" in err and err.count("\n") == 1
    assert cli.main(["qwertyuiop"]) == 2
    assert "did you mean" not in capsys.readouterr().err


@pytest.mark.slow
def test_a_shipped_model_is_named_by_name_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", "--model", "dial", "--domain", "dial", "--n-tasks", "1",
                     "--json", "e.json"]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["n_tasks"] == 1
    capsys.readouterr()
    assert cli.main(["evaluate", "--model", "dail", "--domain", "dial"]) == 2
    assert "shipped: dial, dial-velocity" in one_line_error(capsys, "evaluate")


def test_evaluate_and_rollout_take_the_domain_from_the_model(trained, capsys):
    """`taco evaluate --model dial` failed ("not domain navworld's") where `taco rollout --model
    dial` worked: both now execute a model in the domain it was trained in unless told
    --domain; a run folder gets the hint to add /model; --expert asks for its domain."""
    assert cli.main(["evaluate", "--model", str(trained / "model"), "--n-tasks", "2", "--seed", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["n_tasks"] == 2
    shipped = taco_sim.shipped_models()
    for name in ("dial", "dial-velocity"):
        assert cli.model_domain(model_mod.load(shipped[name]), None) == name
        assert cli.model_domain(model_mod.load(shipped[name]), "navworld") == "navworld"   # as told
    nav = model_mod.load(trained / "model")
    nav.info = {k: v for k, v in nav.info.items() if k != "data"}     # an old model: no data record
    assert cli.model_domain(nav, None) == "navworld"                    # the one vocabulary that fits
    dial = model_mod.load(shipped["dial"])
    dial.info = {}
    with pytest.raises(ValueError, match=r"^--domain: .*fits dial and .*dial-velocity.*; give --domain$"):
        cli.model_domain(dial, None)
    for argv, needle in ((["--model", str(trained)], f"--model: '{trained}' is a run folder; its model is"),
                         (["--expert"], "--expert: give --domain, the domain whose expert is executed")):
        assert cli.main(["evaluate"] + argv) == 2
        assert needle in one_line_error(capsys, "evaluate")


def test_rollout_and_align_pictures_never_replace_an_existing_file(trained, files, tmp_path, capsys):
    """`taco rollout --out` and `taco align --plot` wrote over an existing picture: they refuse,
    before any work, unless --overwrite."""
    picture = tmp_path / "old.png"
    picture.write_bytes(b"not yours to replace")
    for argv in (["rollout", "--model", str(trained / "model"), "--sketch", "red", "--out", str(picture)],
                 ["rollout", "--model", str(trained / "model"), "--sketch", "red", "--out", str(tmp_path / "new.png"),
                  "--gif", str(picture)],
                 ["align", "--model", str(trained / "model"), "--data", str(files / "test.npz"), "--plot", str(picture)]):
        assert cli.main(argv) == 2, argv
        assert "exists; choose a new file, or give --overwrite to replace it" in one_line_error(capsys, argv[0])
    assert picture.read_bytes() == b"not yours to replace"


def test_evaluate_runs_a_domains_expert_through_the_protocol(capsys):
    """taco evaluate --expert [NAME]: the same JSON a model's evaluation prints; the planner
    by name; a model's settings or a domain without a choice of expert refused by name."""
    assert cli.main(["evaluate", "--expert", "--domain", "craft", "--n-tasks", "20", "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_tasks"] == 20 and 0.5 <= out["task_accuracy"] <= 1.0 and "failures" in out
    assert cli.main(["evaluate", "--expert", "planner", "--domain", "craft", "--n-tasks", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["task_accuracy"] >= 0.9
    for argv, needle in ((["--expert", "oracle", "--domain", "craft"], "--expert: craft's experts are"),
                         (["--expert", "--domain", "navworld"], "--expert: domain navworld has no expert"),
                         (["--expert", "--domain", "craft", "--stop-hold", "2"], "--stop-hold: a model's setting"),
                         (["--domain", "craft"], "--model: give a model directory")):
        assert cli.main(["evaluate"] + argv) == 2
        assert needle in one_line_error(capsys, "evaluate")


def test_collect_and_evaluate_never_replace_an_existing_file(tmp_path, capsys):
    """`taco collect ... --out data/nav.npz` over a 200-demonstration set wrote 10 in its place,
    and `taco evaluate --json` replaced an earlier evaluation: both now refuse in one line, and
    the file keeps its bytes."""
    data_file = tmp_path / "nav.npz"
    assert cli.main(["collect", "navworld", "--n", "12", "--sketch-len", "3", "--out", str(data_file)]) == 0
    before = data_file.read_bytes()
    assert cli.main(["collect", "navworld", "--n", "3", "--sketch-len", "3", "--out", str(data_file)]) == 2
    assert data_file.read_bytes() == before
    report = tmp_path / "eval.json"
    report.write_text("{}")
    assert cli.main(["evaluate", "--expert", "--domain", "craft", "--n-tasks", "2", "--json", str(report)]) == 2
    assert report.read_text() == "{}"
    err = capsys.readouterr().err
    assert f"--out: {data_file} exists" in err and f"--json: {report} exists" in err
    assert "give --overwrite to replace it" in err
    # told --overwrite, each replaces its file
    assert cli.main(["collect", "navworld", "--n", "3", "--sketch-len", "3", "--out", str(data_file),
                     "--overwrite"]) == 0
    assert data.load(data_file).n == 3
    assert cli.main(["evaluate", "--expert", "--domain", "craft", "--n-tasks", "2", "--json", str(report),
                     "--overwrite"]) == 0
    assert json.loads(report.read_text())["n_tasks"] == 2
