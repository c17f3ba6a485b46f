"""The selection log (taco_app/selection.py, spec/selection.md): every setting chosen on validation
tasks by one rule, the same search for every method, the page generated from the cells, and each
config held to its study's choice."""
import os

import pytest

from taco_app import selection

from taco_app.grid import store as cells, manifest as grids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = dict(domain="navworld", algos=["taco", "gtbc"], sizes=[400], seeds=[0, 1], n_tasks=200, n_align=100,
           expert=None, test_lengths=None, config=None, set=[], protocol="recipe", split="validation", tests=None)


def write_candidate(study, value, accuracies, split="validation"):
    """A candidate grid of study: grid.yaml (--set sigma=value) and one cell file per
    {(algo, seed): task accuracy}."""
    folder = study / value
    algos = [a for a in ("taco", "gtbc") if any(x == a for x, _ in accuracies)]
    grids.record(folder, [dict(RUN, set=[f"sigma={value}"], split=split, algos=algos,
                               seeds=sorted({s for _, s in accuracies}))])
    for (algo, seed), acc in accuracies.items():
        cell = dict(domain="navworld", algo=algo, size=400, seed=seed, train_sketch_len=3, n_tasks=200,
                    n_align=100, test_lengths=None, **({"split": split} if split != "test" else {}))
        cells.write_cell(folder, {"key": f"{algo}{seed}", "cell": cell,
                                  "figures": {"task_accuracy": acc, "subtask_accuracy": acc}})


def write_study(tmp_path, before="0.5"):
    study = tmp_path / "results" / "selection" / "navworld-sigma"
    study.mkdir(parents=True)
    (study / "study.yaml").write_text(
        "setting: sigma\nabout: The action head's width.\nconfig: sim/taco_sim/configs/navworld.yaml\n"
        f"before: \"{before}\"\nwhy: chosen on test tasks\n")
    return study


def test_the_choice_is_the_best_mean_over_the_methods_not_one_methods_best(tmp_path):
    """0.7 is GT-BC's best and 0.5 TACO's; the rule scores each candidate by the mean over the
    methods (0.5: (90 + 70) / 2 = 80; 0.7: (40 + 95) / 2 = 67.5) and says each method's own best."""
    study = write_study(tmp_path)
    write_candidate(study, "0.5", {("taco", 0): 0.9, ("taco", 1): 0.9, ("gtbc", 0): 0.7, ("gtbc", 1): 0.7})
    write_candidate(study, "0.7", {("taco", 0): 0.4, ("taco", 1): 0.4, ("gtbc", 0): 0.95, ("gtbc", 1): 0.95})
    lines, _, choice, _ = selection.study_section(str(study), "navworld-sigma")
    assert choice == "0.5"
    text = "\n".join(lines)
    assert "| **0.5** | 90.0 [90.0, 90.0] | 70.0 [70.0, 70.0] | **80.0** |" in text
    assert "| 0.7 | 40.0 [40.0, 40.0] | 95.0 [95.0, 95.0] | 67.5 |" in text
    assert "Each method's own best: TACO 0.5, GT-BC 0.7." in text
    assert "0.5 − 0.7, paired over the 4 (method, seed) runs: +12.5 points" in text


def test_a_tie_keeps_the_value_in_use_and_only_runs_every_candidate_has_count(tmp_path):
    table = {"0.3": {"taco": {0: 80.0, 1: 60.0}, "gtbc": {0: 70.0}},
             "0.5": {"taco": {0: 70.0}, "gtbc": {0: 80.0}}}
    choice, scores, common = selection.choose(table, before="0.5")
    assert common == [("gtbc", 0), ("taco", 0)]                  # taco seed 1: only 0.3 has it
    assert scores == {"0.3": 75.0, "0.5": 75.0} and choice == "0.5"
    assert selection.choose(table, before="0.9")[0] == "0.3"     # no value in use among the tied


def test_a_study_in_progress_has_no_choice_yet(tmp_path):
    """GT-BC's seed 1 of 0.7 is not computed: the page says which candidate is ahead on the runs
    every candidate has, and check_config holds nothing to it."""
    study = write_study(tmp_path)
    write_candidate(study, "0.5", {("taco", 0): 0.4, ("taco", 1): 0.4})
    write_candidate(study, "0.7", {("taco", 0): 0.9})
    grids.record(study / "0.7", [dict(RUN, set=["sigma=0.7"], algos=["taco"], seeds=[0, 1])])
    lines, _, choice, _ = selection.study_section(str(study), "navworld-sigma")
    text = "\n".join(lines)
    assert choice is None and "**in progress**: 1 of 4 runs not computed yet" in text
    assert "**Ahead so far: sigma = 0.7**" in text
    assert selection.check_config(str(study), ROOT) is None


def test_a_candidate_grid_of_test_tasks_is_refused(tmp_path):
    study = write_study(tmp_path)
    write_candidate(study, "0.5", {("taco", 0): 0.9})
    write_candidate(study, "0.7", {("taco", 0): 0.4}, split="test")
    with pytest.raises(selection.StudyError, match=r"0\.7: a candidate grid runs on the validation split only"):
        selection.study_section(str(study), "navworld-sigma")


def test_a_study_file_missing_a_field_is_named(tmp_path):
    study = write_study(tmp_path)
    (study / "study.yaml").write_text("setting: sigma\nabout: x\nconfig: c\nbefore: '0.5'\n")
    with pytest.raises(selection.StudyError, match=r"study\.yaml\.why: expected a non-empty string"):
        selection.load_study(str(study))


def test_a_config_that_disagrees_with_its_study_is_named(tmp_path):
    """navworld.yaml holds sigma 0.3; a study that chose 0.7 fails the check, naming both."""
    study = write_study(tmp_path, before="0.3")
    write_candidate(study, "0.3", {("taco", 0): 0.4, ("gtbc", 0): 0.4})
    write_candidate(study, "0.7", {("taco", 0): 0.9, ("gtbc", 0): 0.9})
    with pytest.raises(selection.StudyError, match=r"chose sigma = 0\.7, but .* holds sigma = 0\.3 \(chosen 0\.7\)"):
        selection.check_config(str(study), ROOT)


def test_the_committed_selection_log_is_the_generated_one_and_every_config_holds_its_choice():
    """spec/selection.md is page() of the committed cells (regenerate with `python -m
    taco_app.selection`), and each study's config file holds the value its study chose."""
    text = open(os.path.join(ROOT, "spec", "selection.md"), encoding="utf-8").read()
    assert selection.page(ROOT) == text
    folder = os.path.join(ROOT, selection.SELECTION)
    studies = [d for d in sorted(os.listdir(folder)) if os.path.isdir(os.path.join(folder, d))]
    assert studies, "no study in results/selection"
    for name in studies:
        selection.check_config(os.path.join(folder, name), ROOT)


def test_a_choice_at_the_edge_of_its_search_is_not_applied(tmp_path):
    """0.3 wins among 0.3, 0.5, 0.7: the search has not bracketed the best value, so the page
    says the study goes on and check_config refuses it; two candidates have no inside."""
    study = write_study(tmp_path)
    for value, acc in (("0.3", 0.9), ("0.5", 0.8), ("0.7", 0.7)):
        write_candidate(study, value, {("taco", 0): acc, ("gtbc", 0): acc})
    lines, _, choice, grids_of = selection.study_section(str(study), "navworld-sigma")
    assert choice == "0.3" and "0.3 is the edge of the search" in "\n".join(lines)
    with pytest.raises(selection.StudyError, match=r"0\.3 is the edge of the search \(0\.3, 0\.5, 0\.7\)"):
        selection.check_config(str(study), ROOT)
    assert not selection.at_edge({"0.5": None, "0.7": None}, "0.5")
    assert not selection.at_edge({"relu": None, "tanh": None, "gelu": None}, "relu")


def test_every_study_readme_gives_each_candidates_command():
    """Each study folder's README.md has the generated command block of every candidate grid
    (`python -m taco_app.report` fills them), so each can be run again as committed."""
    folder = os.path.join(ROOT, selection.SELECTION)
    for name in sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d))):
        text = open(os.path.join(folder, name, "README.md"), encoding="utf-8").read()
        assert grids.fill_commands(text, os.path.join(folder, name)) == text, name
        values = [d for d in os.listdir(os.path.join(folder, name)) if os.path.isdir(os.path.join(folder, name, d))]
        for value in values:
            assert f"<!-- commands: results/selection/{name}/{value} -->" in text, (name, value)


def test_a_limit_that_ends_the_range_by_its_meaning_is_no_edge(tmp_path):
    """Patience 300 with 300 epochs is no early stopping at all: nothing lies beyond it, so the
    study's limit exempts it from the edge rule (and only it)."""
    grids_of = {"30": None, "100": None, "300": None}
    assert selection.at_edge(grids_of, "300") and not selection.at_edge(grids_of, "300", limit="300")
    assert selection.at_edge(grids_of, "30", limit="300")
    study = write_study(tmp_path)
    (study / "study.yaml").write_text((study / "study.yaml").read_text() + "limit: 300\n")
    with pytest.raises(selection.StudyError, match=r"study\.yaml\.limit: expected a candidate's name"):
        selection.load_study(str(study))
