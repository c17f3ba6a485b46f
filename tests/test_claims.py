"""docs/claims.md (taco_app/claims.py): the page is what the committed cells give, and each
verdict rule does what its docstring says on rows written out here."""
import os

import pytest

from taco_app import claims, cli, stats

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
    ((10, 12, 8), "holds", "holds"),              # TACO 8-12 points ahead on every seed
    ((-10, -12, -8), "contradicted", "contradicted"),  # 8-12 behind: below -5 as well
    ((-2, 1, -1), "level", "holds"),              # within a point or two: inside +-5
    ((-30, 20, 5), "undecided", "undecided"),     # the seeds disagree
    ((1, 1, 1), "level", "holds"),                # one task ahead on every seed: the t interval alone
])                                                # is [+1, +1], but 3 tasks in 300 cannot show a lead
def test_better_and_matches_read_the_interval_over_seeds_of_paired_differences(gaps, better, matches):
    """better holds when the interval lies above 0, is contradicted below 0 and level within
    +-5 points; matches holds above -5 points and is contradicted below; each is undecided across
    its bound. The interval is never narrower than the seeds' tasks pooled allow
    (taco_app.stats.seeds_difference_interval)."""
    rows = []
    for s, gap in enumerate(gaps):
        ours = "1" * (50 + gap) + "0" * (50 - gap)
        rows += [cell("taco", s, (50 + gap) / 100, ours), cell("gtbc", s, 0.5, "1" * 50 + "0" * 50)]
    assert claims.judge(claim("better"), rows)[1] == better
    assert claims.judge(claim("matches"), rows)[1] == matches
    assert claims.judge(claim("better"), rows[:2])[1] == "undecided"            # one seed
    assert claims.judge(claim("better"), [r for r in rows if r["algo"] == "taco"])[1] == "no cells"


def test_an_undecided_verdict_says_how_many_seeds_would_decide_it():
    """The seeds disagree (differences -30, +20, +5): at their mean and spread, the smallest n
    whose t interval is narrower than the distance to the nearest deciding bound."""
    rows = []
    for s, gap in enumerate((-30, 20, 5)):
        rows += [cell("taco", s, (50 + gap) / 100, "1" * (50 + gap) + "0" * (50 - gap)),
                 cell("gtbc", s, 0.5, "1" * 50 + "0" * 50)]
    _, verdict, why, _ = claims.judge(claim("matches"), rows)
    n = stats.seeds_to_decide([-30, 20, 5], abs(-5 / 3 + 5))
    assert verdict == "undecided" and f"about {n} seeds would decide it" in why and n > 3


def test_collapsed_seeds_decide_by_their_rate_not_a_t_interval_over_bimodal_outcomes():
    """TACO completes nothing on 6 of 10 seeds where GT-BC completes 90 %: the paired collapse
    rates exclude 0, so "TACO approaches GT-BC" is contradicted whatever the t interval says;
    with 1 collapse in 5 the rates do not separate and the claim is undecided, with the seeds
    that would decide it."""
    def grid(collapsed, n):
        rows = []
        for s in range(n):
            acc = 0.0 if s < collapsed else 0.9
            rows += [cell("taco", s, acc, "1" * round(100 * acc) + "0" * round(100 * (1 - acc))),
                     cell("gtbc", s, 0.9, "1" * 90 + "0" * 10)]
        return rows
    text, verdict, why, _ = claims.judge(claim("matches"), grid(6, 10))
    assert verdict == "contradicted" and "TACO collapses on 6 of 10 seeds" in text and "collapses more often" in why
    text, verdict, why, _ = claims.judge(claim("matches"), grid(1, 5))
    assert verdict == "undecided" and why.startswith("bimodal") and "seeds would decide it" in why


def test_none_most_value_and_slower():
    """none pools completions with a Wilson interval (holds below 5 %, contradicted at 5 % or
    more); most needs sub-task accuracy above 50 %; value is one-sided as the paper's sentence:
    "at least" is never contradicted by a figure better than the paper's, "at most" mirrors it;
    slower compares per-seed slopes against L_test, level when neither degrades."""
    zero = [cell("ctcbc-mlp", s, 0.0, "0" * 500) for s in range(3)]
    assert claims.judge(claim("none", "ctcbc-mlp", None), zero)[1] == "holds"
    some = [cell("ctcbc-mlp", s, 0.06, "1" * 30 + "0" * 470) for s in range(3)]
    assert claims.judge(claim("none", "ctcbc-mlp", None), some)[1] == "undecided"     # [4.9, 7.3] %
    many = [cell("ctcbc-mlp", s, 0.1, "1" * 50 + "0" * 450) for s in range(3)]
    assert claims.judge(claim("none", "ctcbc-mlp", None), many)[1] == "contradicted"
    assert claims.judge(claim("most", "taco", None), [cell("taco", s, 0.9) for s in range(3)])[1] == "holds"
    assert claims.judge(claim("most", "taco", None), [cell("taco", s, v) for s, v in
                                                      enumerate((0.2, 0.3, 0.25))])[1] == "contradicted"
    value = claim("value", "taco", None, figure="align_forward_argmax", paper=(("table 1", 95.0),))
    assert claims.judge(value, [cell("taco", s, 0.93 + 0.01 * s) for s in range(3)])[1] == "holds"
    assert claims.judge(value, [cell("taco", s, 0.80) for s in range(3)])[1] == "contradicted"
    assert claims.judge(value, [cell("taco", s, 0.999) for s in range(3)])[1] == "holds"     # better: not against it
    at_most = claim("value", "ctcbc-gru", None, figure="align_forward_argmax", paper=(("table 1", 50.0),),
                    side="at most")
    assert claims.judge(at_most, [cell("ctcbc-gru", s, 0.30) for s in range(3)])[1] == "holds"
    assert claims.judge(at_most, [cell("ctcbc-gru", s, 0.80) for s in range(3)])[1] == "contradicted"
    flat = {"3": 0.9, "4": 0.9, "5": 0.9}
    rows = []
    for s in range(3):
        rows += [cell("taco", s, 0.9, task_accuracy_by_length={"3": 0.9, "4": 0.85 - 0.01 * s, "5": 0.8}),
                 cell("gtbc", s, 0.9, task_accuracy_by_length={"3": 0.9, "4": 0.7 + 0.01 * s, "5": 0.5})]
    assert claims.judge(claim("slower"), rows)[1] == "holds"
    flat_rows = [dict(r, task_accuracy_by_length=flat) for r in rows]
    assert claims.judge(claim("slower"), flat_rows)[1:3] == ("level", "the interval lies within ±1 points per digit")


def test_on_one_keypad_the_pooled_tasks_count_as_their_distinct_key_moves():
    """The Dial's test PINs share the standard keypad: 500 PINs of 5 digits make only the 100
    moves START -> d and d -> d' (spec/evaluation.md eq. (14)), so the interval of two cells
    that complete every PIN is as wide as 100 tasks allow, not 500; Nav-World's tasks each draw
    a layout and count one by one."""
    import taco_sim
    from taco_ref import evaluate
    dial = taco_sim.get("dial")
    sketches = evaluate.protocol_sketches(dial, 500, 0)
    assert stats.effective_tasks(dial, sketches) == 100
    assert stats.effective_tasks(taco_sim.get("navworld"), sketches) == 500
    assert stats.effective_tasks(dial, [[0, 1], [1, 0], [0, 1]]) == 3           # never more than the tasks
    full = "1" * 500
    _, lo, hi = evaluate.paired_difference_interval(full, full, effective=100)
    assert (lo, hi) == pytest.approx(evaluate.paired_difference_interval("1" * 100, "1" * 100)[1:])
    assert hi > 2 * evaluate.paired_difference_interval(full, full)[2]
    rows = []
    for s in range(3):
        rows += [dict(cell("taco", s, 1.0, full, size=1200), domain="dial", task_lengths=[5] * 500),
                 dict(cell("gtbc", s, 1.0, full, size=1200), domain="dial", task_lengths=[5] * 500)]
    dial_claim = claims.Claim("dial", "here", "a claim", "better", "taco", "gtbc", 1200)
    text, verdict, _, _ = claims.judge(dial_claim, rows)
    wide = 100 * evaluate.paired_difference_interval("1" * 300, "1" * 300)[2]
    assert verdict == "level" and f"[{-wide:+.1f}, {wide:+.1f}]" in text


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
    assert grids.protocol("results/archive/navworld-paper-sigma05") == "paper"
    assert grids.protocol("results/archive/navworld-recipe-sigma05") == "recipe"
    assert grids.protocol("results/navworld") == "TACO pre-stage only"
    record = lambda algo, **cfg: {"cell": {"algo": algo}, "config": cfg}          # noqa: E731
    assert claims.protocol([record("taco", warmup_epochs=0), record("gtbc", warmup_epochs=5, prestage="all")]) \
        == "paper + recipe"
    assert claims.protocol([record("compile", warmup_epochs=5)]) == "-"


def test_a_grid_without_cells_names_the_protocol_its_manifest_will_run(tmp_path):
    """An equal-budget grid defined but not yet run says its manifest's protocol, marked as
    having no cells; a folder without a manifest says "-"."""
    from taco_app.grid import manifest as grids_mod
    run = dict(domain="dial", algos=["taco", "gtbc"], sizes=[1200], seeds=[0], n_tasks=500, n_align=100,
               expert=None, test_lengths=None, config=None, set=[], protocol="recipe")
    grids_mod.record(str(tmp_path / "results" / "planned"), [run])
    (tmp_path / "results" / "empty").mkdir()
    grids = claims._Grids(str(tmp_path))
    assert grids.planned("results/planned") == "recipe (no cells yet)"
    assert grids.planned("results/empty") == "-"


def test_a_claim_on_a_named_condition_reads_that_conditions_figures_and_its_lengths():
    """Claim.test: the rows' tests[NAME] figures stand in for the standard test's (a cell without
    them is left out), and the condition's mixed PIN lengths give the slope of task accuracy
    against length that "slower" reads."""
    def row(algo, seed, standard, outcomes, lengths):
        return dict(cell(algo, seed, standard, "1" * 100), tests={"harder": {
            "task_accuracy": outcomes.count("1") / len(outcomes), "subtask_accuracy": 0.9,
            "outcomes": outcomes, "task_lengths": lengths, "n_tasks": len(outcomes)}})
    lengths = [5] * 50 + [10] * 50
    rows = []
    for s in range(3):
        rows += [row("taco", s, 1.0, "1" * 50 + "1" * 40 + "0" * 10, lengths),
                 row("gtbc", s, 1.0, "1" * 50 + "1" * 10 + "0" * 40, lengths)]
    harder = claims.Claim("navworld", "here", "a claim", "better", "taco", "gtbc", 100, test="harder")
    text, verdict, _, _ = claims.judge(harder, rows)
    assert verdict == "holds" and text.startswith("+30.0 points")
    assert claims.judge(claims.Claim("navworld", "here", "c", "better", "taco", "gtbc", 100), rows)[1] == "level"
    slower = claims.Claim("navworld", "here", "c", "slower", "taco", "gtbc", 100, test="harder")
    text, verdict, _, _ = claims.judge(slower, rows)
    assert verdict == "holds" and text.startswith("+12.0 points per digit")       # -4 against -16 per digit
    assert claims.on_test([cell("taco", 0, 1.0, "1" * 100)], "harder") == []
