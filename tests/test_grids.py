"""taco_app.grid.manifest: a grid's definition (OUT/grid.yaml), what `taco experiment` records there and
what `--rerun` runs again; the generated command blocks."""
import itertools
import json
import os
import re

import pytest
from hypothesis import given, strategies as st

from taco_app import cli, report

from taco_app.grid import manifest as grids

BASE = dict(domain="navworld", algos=["taco"], sizes=[50], seeds=[0], n_tasks=100, n_align=100, expert=None,
            test_lengths=None, config=None, set=[], protocol=None, split=None, tests=None)


def cells(runs):
    """{(settings, algo, size, seed)} of runs: what they ask to compute."""
    return {(tuple(str(r[k]) for k in grids.SETTINGS), a, n, s)
            for r in runs for a, n, s in itertools.product(r["algos"], r["sizes"], r["seeds"])}


runs_st = st.lists(st.builds(
    lambda algos, sizes, seeds, n_tasks: dict(BASE, algos=algos, sizes=sizes, seeds=seeds, n_tasks=n_tasks),
    st.lists(st.sampled_from(["taco", "gtbc", "ctcbc-mlp"]), min_size=1, max_size=3, unique=True),
    st.lists(st.sampled_from([50, 200, 400]), min_size=1, max_size=3, unique=True),
    st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
    st.sampled_from([100, 200])), min_size=1, max_size=6)


@given(runs_st)
def test_merging_runs_keeps_exactly_their_cells_and_leaves_no_two_mergeable(runs):
    merged = grids.merge(runs)
    assert cells(merged) == cells(runs)
    assert grids.merge(merged) == merged
    for a, b in itertools.combinations(merged, 2):
        same = all(a[k] == b[k] for k in grids.SETTINGS)
        assert not same or sum(set(a[k]) != set(b[k]) for k in grids.AXES) >= 2
        assert not same or not any(all(set(x[k]) <= set(y[k]) for k in grids.AXES) for x, y in ((a, b), (b, a)))


def test_a_grid_grown_seed_by_seed_and_algorithm_by_algorithm_is_one_run():
    runs = [dict(BASE, algos=["gtbc", "taco"], seeds=[0]), dict(BASE, algos=["ctcbc-mlp"], seeds=[0]),
            dict(BASE, algos=["ctcbc-mlp"], seeds=[2, 1]), dict(BASE, algos=["taco", "gtbc"], seeds=[1, 2])]
    assert grids.merge(runs) == [dict(BASE, algos=["taco", "gtbc", "ctcbc-mlp"], seeds=[0, 1, 2])]
    other = dict(BASE, n_tasks=200)
    assert len(grids.merge([BASE, other])) == 2                # other settings: other runs


def test_a_part_of_a_grid_run_again_leaves_its_manifest_as_it_was(tmp_path):
    """One cell of a defined grid computed by a command of its own (one algorithm, one seed:
    two axes narrower) adds no run to the manifest."""
    grid = dict(BASE, algos=["taco", "gtbc"], seeds=[0, 1, 2, 3, 4], protocol="paper")
    grids.record(tmp_path, [grid])
    assert grids.record(tmp_path, [dict(grid, algos=["taco"], seeds=[0])]) == [grid]
    assert grids.load(tmp_path) == [grid]


def test_the_manifest_reads_back_as_written(tmp_path):
    runs = [dict(BASE, set=["dtype=float64", "lr=1e-3"], test_lengths=[3, 4], expert="features", domain="craft"),
            dict(BASE, sizes=[400, 800], protocol="paper", config="sim/taco_sim/configs/navworld.yaml")]
    grids.record(tmp_path, runs)
    assert grids.load(tmp_path) == grids.merge(runs)
    before = os.stat(grids.path(tmp_path)).st_mtime_ns
    assert grids.record(tmp_path, [dict(runs[1], sizes=[800])]) == grids.merge(runs)   # nothing new
    assert os.stat(grids.path(tmp_path)).st_mtime_ns == before
    assert not [f for f in os.listdir(tmp_path) if f != grids.MANIFEST]              # no temp file left


FULL = ("domain: navworld, algos: [taco], sizes: [5], seeds: [0], n_tasks: 1, n_align: 1, expert: null, "
        "test_lengths: null, config: null, set: [], protocol: null")
"""One run with every field (a manifest names them all)."""


def run_with(**changes):
    """A manifest of one run: FULL with fields replaced (or added), values as YAML text."""
    fields = dict(part.split(": ", 1) for part in FULL.split(", ") if ": " in part)
    fields.update(changes)
    return "runs:\n  - {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}\n"


@pytest.mark.parametrize("text, named", [
    ("runs: []\n", "non-empty list 'runs'"),
    (run_with(domain="atlantis"), "runs[0].domain"),
    (run_with(sizes="[0]"), "runs[0].sizes"),
    (run_with(algos="[nope]"), "runs[0].algos"),
    (run_with(set="[x]"), "runs[0].set"),
    ("runs:\n  - {" + FULL + ", colour: red}\n", "unknown field(s) colour"),
    ("runs: [\n", "not valid YAML"),
    # what an outside tester tried (the manifests' fault cases)
    ("a: &a [1, 1]\nb: &b [*a, *a]\nruns: [{" + FULL + "}]\n", "YAML aliases (*name) are not accepted in a grid manifest"),
    (run_with(seeds=str(list(range(2000)))), "runs[0].seeds"),
    (run_with(n_tasks="1000000000000"), "runs[0].n_tasks"),
    (run_with(sizes=str(list(range(1, 12))), seeds=str(list(range(1000)))), "cells (algos x sizes x seeds)"),
    ("runs:\n  - {" + FULL.split(", set:")[0] + "}\n", "missing field(s) set, protocol (a truncated grid.yaml?)"),
    ("runs:\n  - {" + FULL + ", 1: 2}\n", "unknown field(s) 1"),
    ("runs:\n  - {" + FULL + "}\n  - {" + FULL + "}\nruns: []\n", "the key 'runs' appears twice"),
    (run_with(tests="[sideways]"), "runs[0].tests"),
])
def test_a_bad_manifest_is_refused_naming_the_field(tmp_path, text, named):
    """Manifests load with the guards of the config loader (no aliases, a bounded file, no key
    twice), every field required and bounded (axes of at most MAX_AXIS values, n_tasks as the
    protocol allows, MAX_CELLS cells a run), each refusal one line naming the field."""
    (tmp_path / grids.MANIFEST).write_text(text)
    with pytest.raises(grids.ManifestError, match=re.escape(named)):
        grids.load(tmp_path)


def test_a_manifest_that_is_a_loop_of_links_says_so(tmp_path):
    os.symlink(tmp_path / "b.yaml", tmp_path / "a.yaml")
    os.symlink(tmp_path / "a.yaml", tmp_path / "b.yaml")
    os.symlink(tmp_path / "a.yaml", tmp_path / grids.MANIFEST)
    with pytest.raises(grids.ManifestError, match="a symbolic link to nothing"):
        grids.load(tmp_path)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / grids.MANIFEST).write_text("runs: []\n" + "#" * (grids.MAX_MANIFEST_BYTES + 1))
    with pytest.raises(grids.ManifestError, match="grid.yaml"):
        grids.load(tmp_path / "big")


GRID = ["navworld", "--sizes", "10", "--seeds", "0", "--algos", "gtbc", "--n-tasks", "3", "--n-align", "3",
        "--set", "epochs=1", "--workers", "1"]


@pytest.mark.slow
def test_experiment_records_its_grid_and_rerun_computes_only_what_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "write_report", lambda dirs, dest=None: ("", [], None))   # no figures: not tested here
    out, elsewhere = str(tmp_path / "grid"), str(tmp_path / "again")
    assert cli.main(["experiment", *GRID, "--out", out]) == 0
    [run] = grids.load(out)
    assert run == dict(BASE, algos=["gtbc"], sizes=[10], n_tasks=3, n_align=3, set=["epochs=1"])
    capsys.readouterr()
    assert cli.main(["experiment", "--rerun", out, "--workers", "1"]) == 0
    assert "0 cells computed, 1 reused" in capsys.readouterr().err
    assert cli.main(["experiment", "--rerun", out, "--workers", "1", "--out", elsewhere]) == 0
    assert "1 cells computed, 0 reused" in capsys.readouterr().err
    assert grids.load(elsewhere) == grids.load(out)
    first, second = (json.load(open(os.path.join(d, "cells", "navworld", "gtbc", "n10", "seed0.json")))
                     for d in (out, elsewhere))
    assert first["figures"] == second["figures"] and first["key"] == second["key"]
    # a second run of another seed joins the first: one run, seeds 0 and 1
    grids.record(out, [dict(run, seeds=[1])])
    assert grids.load(out) == [dict(run, seeds=[0, 1])]


@pytest.mark.parametrize("argv, named", [
    (["--rerun", "G", "navworld"], "leave out the domain"),
    (["--rerun", "G", "--sizes", "5", "--algos", "taco"], "leave out --sizes and --algos"),
    ([], "give the grid's domain"),
    (["navworld"], "--out: give the results directory"),
    (["--rerun", "nowhere"], "--rerun: nowhere/grid.yaml does not exist"),
])
def test_experiment_arguments_that_cannot_define_a_grid_are_named(argv, named, tmp_path, capsys):
    assert cli.main(["experiment", *argv]) == 2
    assert named in capsys.readouterr().err


def test_experiment_compares_the_papers_algorithms_by_default_and_the_demo_all_but_the_gru():
    """A grid runs every algorithm with figures in the paper; the demo, the first thing a user
    runs, leaves out the bi-GRU's CTC-BC (two thirds of its time), which --algos adds."""
    parser = cli.build_parser()
    args = parser.parse_args(["experiment", "navworld", "--out", "x"])
    [run], _ = cli.experiment_runs(args)
    assert run["algos"] == ["taco", "gtbc", "ctcbc-mlp", "ctcbc-gru"]
    assert parser.parse_args(["demo"]).algos == ["taco", "gtbc", "ctcbc-mlp"]


def test_command_blocks_are_written_from_the_manifest(tmp_path):
    grid = tmp_path / "results" / "g"
    grids.record(grid, [BASE, dict(BASE, algos=["compile"], sizes=[20], set=["dtype=float64"])])
    text = "x\n<!-- commands: results/g -->\nstale\n<!-- end of commands -->\n<!-- commands: results/g rerun -->\n" \
           "<!-- end of commands -->\n"
    filled = grids.fill_commands(text, grid)          # found from the grid's own folder upwards
    assert filled == grids.fill_commands(text, tmp_path)
    assert filled == ("x\n<!-- commands: results/g -->\n```\ntaco experiment --rerun results/g\n"
                      "# which runs, run by run:\n"
                      "taco experiment navworld --sizes 50 --seeds 0 --algos taco --n-tasks 100 --out results/g\n"
                      "taco experiment navworld --sizes 20 --seeds 0 --algos compile --n-tasks 100 "
                      "--set dtype=float64 --out results/g\n```\n<!-- end of commands -->\n"
                      "<!-- commands: results/g rerun -->\n```\ntaco experiment --rerun results/g\n```\n"
                      "<!-- end of commands -->\n")
    with pytest.raises(grids.ManifestError, match="results/h"):
        grids.fill_commands("<!-- commands: results/h -->\n<!-- end of commands -->", tmp_path)


def test_the_results_index_names_a_folder_it_does_not_list_and_an_archive_without_its_replacement(tmp_path):
    for d in ("a", "b", "archive/old"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / grids.INDEX).write_text("current: [{grid: a, about: x}]\nbaselines: []\nstudies: []\n"
                                        "archive: [{grid: archive/old, replaced_by: a, why: y}]\n")
    with pytest.raises(grids.ManifestError, match="folders not listed: b"):
        grids.index_page(tmp_path)
    (tmp_path / grids.INDEX).write_text("current: [{grid: a, about: x}, {grid: b, about: z}]\nbaselines: []\nstudies: []\n"
                                        "archive: [{grid: archive/old, replaced_by: gone, why: y}]\n")
    with pytest.raises(grids.ManifestError, match=r"archive/old.replaced_by: expected a listed folder, got 'gone'"):
        grids.index_page(tmp_path)
    (tmp_path / grids.INDEX).write_text("current: [{grid: a, about: x}, {grid: b, about: z}]\nbaselines: []\nstudies: []\n"
                                        "archive: [{grid: archive/old, replaced_by: a, why: y}]\n")
    page = grids.index_page(tmp_path)
    assert "| [archive/old](archive/old/README.md) | [a](a/README.md) | y |" in page


def test_a_validation_grid_records_its_split_and_a_test_grid_writes_none(tmp_path):
    """split is a setting of the run (another split: another run), written to grid.yaml and the
    command only when given, so the manifests of test grids read as before."""
    valid = dict(BASE, split="validation")
    grids.record(tmp_path / "v", [valid])
    assert grids.load(tmp_path / "v") == [valid]
    assert "split: validation" in (tmp_path / "v" / grids.MANIFEST).read_text()
    assert grids.argv(valid, "out")[-4:] == ["--split", "validation", "--out", "out"]
    grids.record(tmp_path / "t", [BASE])
    assert "split" not in (tmp_path / "t" / grids.MANIFEST).read_text()
    assert len(grids.merge([BASE, valid])) == 2
