"""docs/claims.md (taco_app/claims.py): the page is what the committed cells give, and each
verdict rule does what its docstring says on rows written out here."""
import os

import pytest

from taco_app import claims, cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_the_claims_page_is_the_generated_one():
    """docs/claims.md equals taco_app.claims.page() of the committed cells (regenerate with
    `taco report --claims docs/claims.md` from the repository root)."""
    with open(os.path.join(ROOT, "docs", "claims.md"), encoding="utf-8") as f:
        assert f.read() == claims.page(ROOT)


def cell(algo, seed, acc, outcomes=None, size=100, **more):
    n = len(outcomes) if outcomes else 100
    return dict(domain="navworld", algo=algo, size=size, seed=seed, task_accuracy=acc, n_tasks=n,
                subtask_accuracy=acc, align_forward_argmax=acc, outcomes=outcomes, **more)


def claim(rule, first="taco", second="gtbc", **kw):
    return claims.Claim("navworld", "here", "a claim", rule, first, second, 100, **kw)


@pytest.mark.parametrize("gaps, better, matches", [
    ((10, 12, 8), "holds", "holds"),          # TACO 8-12 points ahead on every seed
    ((-10, -12, -8), "fails", "fails"),       # 8-12 behind: below -5 as well
    ((-2, 1, -1), "undecided", "holds"),      # level within a point or two
    ((-30, 20, 5), "undecided", "undecided"), # the seeds disagree
    ((1, 1, 1), "undecided", "holds"),        # one task ahead on every seed: the t interval alone
])                                            # is [+1, +1], but 3 tasks in 300 cannot show a lead
def test_better_and_matches_read_the_interval_over_seeds_of_paired_differences(gaps, better, matches):
    """better holds when the interval lies above 0, matches when it lies above -5 points; each
    fails below its bound and is undecided across it. The interval is never narrower than the
    seeds' tasks pooled allow (taco_app.stats.seeds_difference_interval)."""
    rows = []
    for s, gap in enumerate(gaps):
        ours = "1" * (50 + gap) + "0" * (50 - gap)
        rows += [cell("taco", s, (50 + gap) / 100, ours), cell("gtbc", s, 0.5, "1" * 50 + "0" * 50)]
    assert claims.judge(claim("better"), rows)[1] == better
    assert claims.judge(claim("matches"), rows)[1] == matches
    assert claims.judge(claim("better"), rows[:2])[1] == "undecided"            # one seed
    assert claims.judge(claim("better"), [r for r in rows if r["algo"] == "taco"])[1] == "no cells"


def test_none_most_value_and_slower():
    """none pools completions with a Wilson interval (holds below 5 %); most needs sub-task
    accuracy above 50 %; value compares our mean with the paper's figure within 5 points;
    slower compares per-seed slopes against L_test and is undecided when GT-BC does not degrade."""
    zero = [cell("ctcbc-mlp", s, 0.0, "0" * 500) for s in range(3)]
    assert claims.judge(claim("none", "ctcbc-mlp", None), zero)[1] == "holds"
    some = [cell("ctcbc-mlp", s, 0.06, "1" * 30 + "0" * 470) for s in range(3)]
    assert claims.judge(claim("none", "ctcbc-mlp", None), some)[1] == "fails"
    assert claims.judge(claim("most", "taco", None), [cell("taco", s, 0.9) for s in range(3)])[1] == "holds"
    assert claims.judge(claim("most", "taco", None), [cell("taco", s, v) for s, v in
                                                      enumerate((0.2, 0.3, 0.25))])[1] == "fails"
    value = claim("value", "taco", None, figure="align_forward_argmax", paper=(("table 1", 95.0),))
    assert claims.judge(value, [cell("taco", s, 0.93 + 0.01 * s) for s in range(3)])[1] == "holds"
    assert claims.judge(value, [cell("taco", s, 0.80) for s in range(3)])[1] == "fails"
    flat = {"3": 0.9, "4": 0.9, "5": 0.9}
    rows = []
    for s in range(3):
        rows += [cell("taco", s, 0.9, task_accuracy_by_length={"3": 0.9, "4": 0.85 - 0.01 * s, "5": 0.8}),
                 cell("gtbc", s, 0.9, task_accuracy_by_length={"3": 0.9, "4": 0.7 + 0.01 * s, "5": 0.5})]
    assert claims.judge(claim("slower"), rows)[1] == "holds"
    flat_rows = [dict(r, task_accuracy_by_length=flat) for r in rows]
    assert claims.judge(claim("slower"), flat_rows)[1:3] == ("undecided", "GT-BC does not degrade with L_test here")


def test_claims_from_the_command_line(tmp_path, monkeypatch):
    """`taco report --claims FILE` writes the page from the repository root and refuses OUT
    directories beside it or a directory without results/."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "claims.md"
    assert cli.main(["report", "--claims", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == claims.page(ROOT)
    assert cli.main(["report", "--claims", str(out), "results/navworld"]) == 2
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--claims", str(out)]) == 2


def test_the_protocol_is_read_from_the_cells_recorded_configs():
    """Each grid's protocol comes from the configs its cell files record: the equal-budget grids
    say which, the grids before them "TACO pre-stage only"."""
    grids = claims._Grids(ROOT)
    assert grids.protocol("results/navworld-paper") == "paper"
    assert grids.protocol("results/navworld-recipe") == "recipe"
    assert grids.protocol("results/navworld") == "TACO pre-stage only"
    record = lambda algo, **cfg: {"cell": {"algo": algo}, "config": cfg}          # noqa: E731
    assert claims.protocol([record("taco", warmup_epochs=0), record("gtbc", warmup_epochs=5, prestage="all")]) \
        == "paper + recipe"
    assert claims.protocol([record("compile", warmup_epochs=5)]) == "-"


def test_a_grid_without_cells_names_the_protocol_its_manifest_will_run(tmp_path):
    """An equal-budget grid defined but not yet run says its manifest's protocol, marked as
    having no cells; a folder without a manifest says "-"."""
    from taco_app import grids as grids_mod
    run = dict(domain="dial", algos=["taco", "gtbc"], sizes=[1200], seeds=[0], n_tasks=500, n_align=100,
               expert=None, test_lengths=None, config=None, set=[], protocol="recipe")
    grids_mod.record(str(tmp_path / "results" / "planned"), [run])
    (tmp_path / "results" / "empty").mkdir()
    grids = claims._Grids(str(tmp_path))
    assert grids.planned("results/planned") == "recipe (no cells yet)"
    assert grids.planned("results/empty") == "-"
