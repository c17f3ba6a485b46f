"""taco_ref.evaluate.execute: the execution rules of spec/evaluation.md on scripted envs."""
import types

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from taco_ref import evaluate, policy
from taco_sim import navworld


class ScriptedModel:
    """A one-dimensional model whose sub-policies STOP when the state is 1 (progress just counted)."""

    def __init__(self, K=3):
        cfg = policy.PolicyConfig(state_dim=1, n_subtasks=K, action_dim=1, act_hidden=[2],
                                  stop_hidden=[2])
        params = policy.init_params(cfg, np.random.default_rng(0))
        for name in params:
            params[name][...] = 0.0
        params["norm.std"][...] = 1.0
        # STOP logit = 100 * relu(s) - 50 through the first hidden unit: > 0.5 iff s > 0.5
        params["stop.W0"][:, 0, 0] = 100.0
        params["stop.b1"][:] = -50.0
        params["stop.W1"][:, 0, 0] = 1.0
        self.params, self.policy, self.vocab = params, cfg, tuple(str(k) for k in range(K))


class CounterEnv:
    """State = 1 at every third step, else 0; fails (like a wrong key) at step fail_at.

    judge_stops=False: progress rises by itself at every third step and stop() only records env.t
    (like the Dial keypad). judge_stops=True: progress rises only on stop() in a state 1, and a
    stop() anywhere else fails the task (like Nav-World). stops: env.t at each stop() call.
    """

    subtask_budget = None

    def __init__(self, fail_at=None, judge_stops=False):
        self.fail_at, self.judge_stops = fail_at, judge_stops

    def reset(self, sketch, seed=None):
        self.sketch, self.t, self.progress, self.failed = list(sketch), 0, 0, False
        self.stops = []
        return np.zeros(1)

    def stop(self):
        self.stops.append(self.t)
        if self.judge_stops and not self.done and not self.failed:
            if self.t > 0 and self.t % 3 == 0:
                self.progress += 1
            else:
                self.failed = True

    def budget(self, L):
        return 10 * L

    @property
    def done(self):
        return self.progress == len(self.sketch)

    def step(self, action):
        self.t += 1
        if self.t % 3 == 0 and not self.judge_stops:
            self.progress += 1
        self.failed = self.failed or (self.fail_at is not None and self.t >= self.fail_at)
        return np.array([float(self.t % 3 == 0)])


def test_a_failed_env_ends_the_episode_and_the_observer_sees_every_step():
    """Execution rule: env.failed ends the episode (spec/evaluation.md §1, rule 4)."""
    seen = []
    out = evaluate.execute(ScriptedModel(), CounterEnv(fail_at=4), [0, 1, 2], seed=0,
                           observer=lambda env, active: seen.append((env.t, active)))
    assert out["steps"] == 4 and not out["success"]
    assert [t for t, _ in seen] == [0, 1, 2, 3, 4]


def test_without_failure_the_sketch_completes():
    """Execution rule: success is the env's verdict; an env whose stop() does nothing (Dial)
    completes the sketch without the last sub-policy's STOP (spec/evaluation.md §1)."""
    env = CounterEnv()
    out = evaluate.execute(ScriptedModel(), env, [0, 1, 2], seed=0)
    assert out["success"] and out["progress"] == 3 and out["steps"] == 9
    assert out["stop_times"] == [3, 6]          # the last sub-policy never needs to stop
    assert env.stops == [3, 6]


def test_env_stop_is_called_exactly_at_the_stop_steps():
    """Execution rule: every STOP, the last sub-policy's included, is reported by env.stop() in
    the state where it was decided, before that step's action (spec/evaluation.md §1, rule 3)."""
    env = CounterEnv(judge_stops=True)
    out = evaluate.execute(ScriptedModel(), env, [0, 1, 2], seed=0)
    assert out["stop_times"] == [3, 6, 9] and env.stops == out["stop_times"]
    assert out["success"] and out["progress"] == 3 and out["steps"] == 9 and env.t == 9


def test_a_subtask_budget_forces_a_stop_the_env_judges():
    """Execution rule: a sub-policy that has acted env.subtask_budget times is stopped by force
    (taco_sim.domain's contract), and the env judges that STOP like its own."""
    env = CounterEnv(judge_stops=True)
    env.subtask_budget = 2                  # ScriptedModel would stop at 3, 6, 9: forced at 2
    out = evaluate.execute(ScriptedModel(), env, [0, 1, 2], seed=0)
    assert out["stop_times"] == [2] and env.stops == [2]
    assert env.failed and not out["success"]
    env = CounterEnv(judge_stops=True)
    env.subtask_budget = 3                  # forced exactly where the model stops: same run
    out = evaluate.execute(ScriptedModel(), env, [0, 1, 2], seed=0)
    assert out["stop_times"] == [3, 6, 9] and out["success"]


def test_a_stop_the_env_rejects_ends_the_episode():
    """Execution rule: a STOP the env judges wrong (Nav-World: away from the destination) sets
    failed, and the episode ends after that step's action (spec/evaluation.md §1, rule 4)."""

    class EarlyStopEnv(CounterEnv):
        def step(self, action):                # state 1 at step 2, where a STOP is rejected
            obs = super().step(action)
            return np.array([1.0]) if self.t == 2 else obs

    env = EarlyStopEnv(judge_stops=True)
    out = evaluate.execute(ScriptedModel(), env, [0, 1, 2], seed=0)
    assert env.stops == out["stop_times"] == [2] and env.failed
    assert not out["success"] and out["progress"] == 0 and out["steps"] == 3 == env.t


def test_alignment_accuracy_by_position_and_by_subtask(monkeypatch):
    """spec/evaluation.md eq. (2), (3) on a sketch that repeats a sub-task (3 5 3): a step
    decoded at position 2 whose truth is position 0 counts for (3) only; an impossible row's -1
    counts for neither; padding beyond T_b is not counted."""
    from taco_ref.data import Demos
    T = 6
    demos = Demos(states=np.zeros((2, T, 1)), actions=np.zeros((2, T, 1)),
                  traj_len=np.array([5, 3]), sketch=np.array([[3, 5, 3], [1, 2, -1]]),
                  sketch_len=np.array([3, 2]),
                  labels=np.array([[0, 0, 0, 1, 2, -1], [0, 1, 1, -1, -1, -1]]),
                  final_state=np.zeros((2, 1)), vocab=tuple(str(k) for k in range(6)),
                  meta={"action_type": "continuous"})
    decoded = np.array([[0, 1, 2, 2, 2, 2], [-1, -1, -1, -1, -1, -1]])
    monkeypatch.setattr(evaluate, "alignments", lambda model, batch, decoders: {d: decoded[:, :batch.labels.shape[1]] for d in decoders})
    model = ScriptedModel(K=6)
    by_position = evaluate.alignment_accuracy(model, demos, ("viterbi",))["viterbi"]
    by_subtask = evaluate.alignment_accuracy(model, demos, ("viterbi",), by="subtask")["viterbi"]
    assert by_position == 2 / 8 and by_subtask == 3 / 8
    with np.testing.assert_raises(ValueError):
        evaluate.alignment_accuracy(model, demos, by="id")


def test_task_and_subtask_accuracy_count_whole_tasks_and_completed_subtasks():
    """Three sketches of lengths 3, 2, 1 on scripted envs: the first fails at step 4 (one
    sub-task done), the second completes, the third fails at step 1 (none done): task accuracy
    1/3, sub-task accuracy (1 + 2 + 0) / (3 + 2 + 1).
    Checks spec/evaluation.md eq. (1)."""
    envs = iter([CounterEnv(fail_at=4), CounterEnv(), CounterEnv(fail_at=1)])
    out = evaluate.task_accuracy(ScriptedModel(), lambda: next(envs), [[0, 1, 2], [0, 1], [2]], seed=0)
    assert {k: out[k] for k in ("task_accuracy", "subtask_accuracy", "n_tasks")} == {
        "task_accuracy": 1 / 3, "subtask_accuracy": 3 / 6, "n_tasks": 3}
    assert out["outcomes"] == "010"
    assert out["failures"] == {"wrong outcome": 2} and out["failure_details"] == {}


class VerdictEnv(CounterEnv):
    """CounterEnv with another success rule (as the Dial's subtask_verdicts): "odd" counts the
    sketch positions whose STOP came at an odd step."""

    def subtask_verdicts(self):
        counted = [t % 2 == 1 for t in self.stops[:len(self.sketch)]]
        return {"odd": counted + [False] * (len(self.sketch) - len(counted))}


def test_rule_figures_count_a_sketch_when_every_position_counts():
    """spec/evaluation.md eq. (10), (11) aggregated: under an env's other rule a sketch succeeds
    when every position counts and sub-task accuracy is the share of positions that count;
    task_accuracy collects the env's verdicts per sketch into `rules`."""
    fig = evaluate.rule_figures([[True, True], [True, False], [False]])
    assert fig == {"task_accuracy": 1 / 3, "subtask_accuracy": 3 / 5, "outcomes": "100"}
    with pytest.raises(ValueError, match="verdicts"):
        evaluate.rule_figures([])
    with pytest.raises(ValueError, match="verdicts"):
        evaluate.rule_figures([[True], []])
    made = [VerdictEnv(), VerdictEnv(fail_at=4)]
    envs = iter(made)
    out = evaluate.task_accuracy(ScriptedModel(), lambda: next(envs), [[0, 1], [0, 1, 2]], seed=0)
    assert made[0].stops == made[1].stops == [3]     # the first ends done at 6, the second fails at 4
    assert out["rules"] == {"odd": evaluate.rule_figures([[True, False], [True, False, False]])}
    assert out["rules"]["odd"]["outcomes"] == "00" and out["rules"]["odd"]["subtask_accuracy"] == 2 / 5
    assert "rules" not in evaluate.task_accuracy(ScriptedModel(), CounterEnv, [[0]], seed=0)
    assert evaluate.rule_lines(dict(out))[2].split()[0] == "odd"


def test_subtask_success_counts_the_positions_each_sketch_reached_and_completed():
    """The three scripted sketches of the test above (progress 1, 2, 0): sub-task 0 reached and
    completed twice; 1 reached twice (position 1 of the first two), completed once; 2 reached
    once (the third sketch's only position; the first never got to its position 2), never
    completed. Checks spec/evaluation.md eq. (7)."""
    envs = iter([CounterEnv(fail_at=4), CounterEnv(), CounterEnv(fail_at=1)])
    sketches = [[0, 1, 2], [0, 1], [2]]
    out = evaluate.task_accuracy(ScriptedModel(), lambda: next(envs), sketches, seed=0)
    assert out["task_progress"] == [1, 2, 0]
    assert out["subtask_success"] == {"0": [2, 2], "1": [1, 2], "2": [0, 1]}
    assert evaluate.subtask_lines(out, ["a", "b", "c"])[2].split()[:2] == ["b", "50.0"]
    for bad in ([1, 2], [4, 2, 0], [-1, 2, 0]):
        with pytest.raises(ValueError, match="task_progress"):
            evaluate.subtask_success(sketches, bad)


@settings(deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=20), st.data())
def test_subtask_success_adds_up_to_progress_and_reached_positions(sketches, data):
    """Summed over sub-tasks, completed = the sketches' progress and reached = min(progress + 1,
    length) each; padding (-1) counts nowhere. Checks spec/evaluation.md eq. (7)."""
    progress = [data.draw(st.integers(0, len(s))) for s in sketches]
    width = max(map(len, sketches))
    padded = np.array([s + [-1] * (width - len(s)) for s in sketches])
    got = evaluate.subtask_success(padded, progress)
    assert sum(c for c, _ in got.values()) == sum(progress)
    assert sum(r for _, r in got.values()) == sum(min(p + 1, len(s)) for p, s in zip(progress, sketches))
    assert all(0 <= c <= r for c, r in got.values()) and list(got) == sorted(got, key=int)


def test_alignment_accuracy_pools_the_valid_steps_of_every_demonstration(monkeypatch):
    """Stand-in alignments: "forward_argmax" is wrong at the first step of every demonstration,
    "viterbi" right everywhere but holds garbage in the padding. Batches of 2 are pooled: the
    share is over all valid steps (not a mean of per-batch shares), and padding never counts.
    Checks spec/evaluation.md eq. (2)."""
    demos = navworld.collect(5, 2, seed=1)

    def alignments(model, batch, decoders):
        wrong_first = batch.labels.copy()
        wrong_first[:, 0] = 1                                # label 0 at t = 1 in every demonstration
        garbage = np.where(batch.labels >= 0, batch.labels, 7)
        return {"forward_argmax": wrong_first, "viterbi": garbage}

    monkeypatch.setattr(evaluate, "alignments", alignments)
    model = types.SimpleNamespace(vocab=demos.vocab, policy=policy.PolicyConfig(
        state_dim=demos.states.shape[2], n_subtasks=len(demos.vocab), action_dim=demos.actions.shape[2]))
    got = evaluate.alignment_accuracy(model, demos, decoders=("forward_argmax", "viterbi"), batch_size=2)
    steps = int(demos.traj_len.sum())
    assert got == {"forward_argmax": (steps - demos.n) / steps, "viterbi": 1.0}
    assert len(set(demos.traj_len.tolist())) > 1             # ragged: pooling differs from a mean of means


def test_sketches_of_mixed_lengths_are_unpadded():
    """Test sketches of mixed lengths come padded with -1 (a domain's test_sketches, e.g.
    Craft's ten tasks); each is executed at its own length, and sub-task accuracy counts only
    real sub-tasks. Checks spec/evaluation.md eq. (1)."""
    assert evaluate.unpad(np.array([2, 0, -1, -1])) == [2, 0]
    envs = iter([CounterEnv(), CounterEnv()])
    out = evaluate.task_accuracy(ScriptedModel(), lambda: next(envs), np.array([[0, 1, 2], [2, -1, -1]]), seed=0)
    assert {k: out[k] for k in ("task_accuracy", "subtask_accuracy", "n_tasks", "outcomes", "failures")} == {
        "task_accuracy": 1.0, "subtask_accuracy": 1.0, "n_tasks": 2, "outcomes": "11", "failures": {}}
    for bad in ([0, -1, 1], [-1, -1]):
        with np.testing.assert_raises(ValueError):
            evaluate.unpad(bad)


def test_discrete_actions_are_drawn_from_a_generator_seeded_by_the_episode():
    """Discrete policies act by sampling pi_k(a | s) with default_rng([seed, ACTION_STREAM]): an
    episode is a function of its seed; sample=False takes the argmax (spec/evaluation.md §1)."""
    model = ScriptedModel()
    model.policy = policy.PolicyConfig(state_dim=1, n_subtasks=3, action_dim=4, discrete=True,
                                       act_hidden=[2], stop_hidden=[2])
    model.params["act.W1"] = np.zeros((3, 2, 4))             # uniform over the 4 actions
    model.params["act.b1"] = np.zeros((3, 4))

    class RecordingEnv(CounterEnv):
        def step(self, action):
            self.actions.append(action)
            return super().step(action)

        def reset(self, sketch, seed=None):
            self.actions = []
            return super().reset(sketch, seed)

    def actions(seed, **kw):
        env = RecordingEnv()
        evaluate.execute(model, env, [0, 1, 2], seed=seed, **kw)
        return env.actions

    first = actions(5)
    assert len(first) == 9 and actions(5) == first
    assert actions(6) != first
    rng = np.random.default_rng([5, evaluate.ACTION_STREAM])
    assert first == [int(rng.choice(4, p=np.full(4, 0.25))) for _ in range(9)]
    assert actions(5, sample=False) == [0] * 9               # ties: the first action


@pytest.mark.parametrize("L, progress, stops, failed, error, expected", [
    (3, 3, 2, False, False, None),                              # success, the last never stopped
    (3, 3, 3, False, False, None),
    (3, 1, 2, False, False, ("stopped early", 1)),              # sub-policy 1 stopped, its task not done
    (3, 0, 3, False, False, ("stopped early", 0)),              # every one stopped, none counted
    (3, 2, 1, True, False, ("stopped late", 1)),                # task 1 counted, sub-policy 1 went on
    (3, 3 - 1, 0, False, False, ("stopped late", 0)),
    (3, 1, 1, True, False, ("wrong outcome", 1)),
    (3, 1, 1, False, False, ("timed out", 1)),
    (3, 1, 1, False, True, ("non-finite action", 1)),
])
def test_a_failed_sketch_is_classified_by_stops_against_progress(L, progress, stops, failed, error, expected):
    """spec/evaluation.md eq. (4): the kind and sketch position of a failure from the number of
    STOPs against the number of sub-tasks the env counted."""
    assert evaluate.classify_failure(L, progress, stops, failed, error) == expected


def test_execute_reports_the_failure_kind_position_detail_and_progress_times():
    """spec/evaluation.md eq. (4) through execute: an env that fails at step 4 (one sub-task done
    at step 3, sub-policy 1 active) is a wrong outcome at position 1; a Nav-World-like STOP
    rejected at step 2 is stopped early at 0; a sketch that never ends times out; the env's
    failure_detail gets the failing sub-policy's steps."""
    calls = []

    class Explaining(CounterEnv):
        def failure_detail(self, kind, position, start, end):
            calls.append((kind, position, start, end))
            return "because"

    out = evaluate.execute(ScriptedModel(), Explaining(fail_at=4), [0, 1, 2], seed=0)
    assert out["progress_times"] == [3] and out["stop_times"] == [3]
    assert out["failure"] == {"kind": "wrong outcome", "position": 1, "detail": "because"}
    assert calls == [("wrong outcome", 1, 3, 4)]

    class EarlyStopEnv(CounterEnv):
        def step(self, action):
            obs = super().step(action)
            return np.array([1.0]) if self.t == 2 else obs

    out = evaluate.execute(ScriptedModel(), EarlyStopEnv(judge_stops=True), [0, 1, 2], seed=0)
    assert out["failure"] == {"kind": "stopped early", "position": 0, "detail": ""}

    class Never(CounterEnv):                     # state never 1: nothing stops, nothing counts
        def step(self, action):
            self.t += 1
            return np.zeros(1)

    out = evaluate.execute(ScriptedModel(), Never(), [0, 1], seed=0)
    assert out["failure"]["kind"] == "timed out" and out["steps"] == 20 and out["progress_times"] == []
    out = evaluate.execute(ScriptedModel(), CounterEnv(), [0, 1, 2], seed=0)
    assert out["failure"] is None and out["progress_times"] == [3, 6, 9]


def test_failure_table_lists_kinds_with_shares_and_details():
    """The table `taco evaluate` prints: every kind seen, its count and share of the failures,
    its details below it (spec/evaluation.md §2a)."""
    result = {"n_tasks": 10, "failures": {"stopped late": 3, "stopped early": 1},
              "failure_details": {"stopped late: pressed its key again": 2,
                                  "stopped late: pressed another key": 1}}
    lines = evaluate.failure_table(result)
    assert lines[0] == "6 of 10 sketches completed; 4 failed:"
    assert lines[1].split()[:3] == ["stopped", "early", "1"] and "25.0 %" in lines[1]
    assert lines[2].split()[:3] == ["stopped", "late", "3"] and "75.0 %" in lines[2]
    assert lines[3].split()[-1] == "2" and "pressed its key again" in lines[3]
    assert "pressed another key" in lines[4] and len(lines) == 5


def test_wilson_interval_against_published_values():
    """spec/evaluation.md eq. (5): Newcombe (1998, single proportion) gives 0.2553-0.3662 for
    81 of 263 and 0-0.2775 for 0 of 10; the interval stays in [0, 1] and holds its point."""
    lo, hi = evaluate.wilson_interval(81, 263)
    assert (round(lo, 4), round(hi, 4)) == (0.2553, 0.3662)
    lo, hi = evaluate.wilson_interval(0, 10)
    assert lo == 0.0 and round(hi, 4) == 0.2775
    assert evaluate.wilson_interval(10, 10)[1] == pytest.approx(1.0)
    for bad in ((11, 10), (-1, 10), (0, 0)):
        with pytest.raises(ValueError):
            evaluate.wilson_interval(*bad)


def test_paired_difference_interval_covers_and_mirrors():
    """spec/evaluation.md eq. (6): the paired interval holds its difference, mirrors when the
    two models swap, is exactly 0 wide only in the limit, and covers the true difference in
    about 95 % of simulated pairs of correlated models on 500 tasks."""
    rng = np.random.default_rng(0)
    a = rng.random(500) < 0.6
    b = np.where(rng.random(500) < 0.7, a, rng.random(500) < 0.5)
    d, lo, hi = evaluate.paired_difference_interval(a.astype(int), b.astype(int))
    assert lo < d < hi and -1 <= lo and hi <= 1
    assert d == pytest.approx(a.mean() - b.mean())
    d2, lo2, hi2 = evaluate.paired_difference_interval("".join("1" if x else "0" for x in b),
                                                       "".join("1" if x else "0" for x in a))
    assert (d2, lo2, hi2) == pytest.approx((-d, -hi, -lo))
    d0, lo0, hi0 = evaluate.paired_difference_interval(a.astype(int), a.astype(int))
    assert d0 == 0 and lo0 < 0 < hi0 and hi0 - lo0 < 0.02
    covered, truth = 0, 0.65 - 0.55
    for _ in range(400):
        u = rng.random(500)
        x = u < 0.65                                   # shared draws: correlated outcomes
        y = (u + 0.1 * rng.standard_normal(500)) < 0.55
        _, l, h = evaluate.paired_difference_interval(x.astype(int), y.astype(int))
        covered += l <= truth <= h
    assert 0.90 <= covered / 400 <= 0.99
    with pytest.raises(ValueError):
        evaluate.paired_difference_interval("011", "01")


def test_state_views_need_a_domain_that_has_them():
    """spec/evaluation.md eq. (8): views = 1 is the state alone (no function); more views need the
    domain's state_views, else a ValueError naming views."""
    import taco_sim
    assert evaluate.state_views(taco_sim.get("navworld"), 1) is None
    with pytest.raises(ValueError, match="views: domain navworld has no state views"):
        evaluate.state_views(taco_sim.get("navworld"), 4)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="views: expected an integer"):
            evaluate.state_views(taco_sim.get("navworld"), bad)
    views = evaluate.state_views(taco_sim.get("dial"), 3)
    state = np.arange(39, dtype=np.float64)
    assert views(4, state).shape == (3, 39)


def test_action_accuracy_counts_the_argmax_of_the_true_subtasks_net():
    """spec/evaluation.md eq. (12) against a step-by-step loop over a padded batch of mixed
    lengths; a continuous model is refused by name."""
    from taco_ref import data, model as model_mod
    rng = np.random.default_rng(4)
    K, A, D = 3, 4, 5
    cfg = policy.PolicyConfig(state_dim=D, n_subtasks=K, action_dim=A, discrete=True,
                              act_hidden=[6], stop_hidden=[6])
    params = policy.init_params(cfg, rng)
    m = model_mod.Model(params=params, policy=cfg, vocab=tuple("abc"), algo="gtbc")
    states, actions, labels, sketches = [], [], [], []
    for T, L in ((7, 2), (4, 3), (9, 1)):
        states.append(rng.standard_normal((T, D)))
        actions.append(rng.integers(A, size=T))
        labels.append(np.sort(rng.integers(L, size=T)))
        sketches.append(rng.integers(K, size=L))
    demos = data.assemble(states, actions, labels, [s[-1] for s in states], sketches, tuple("abc"),
                          {"action_type": "discrete", "n_actions": A})
    hits = total = 0
    for s, a, y, b in zip(states, actions, labels, sketches):
        for t in range(len(a)):
            k = int(b[y[t]])
            logits = policy.action_head(params, cfg, k, s[t:t + 1])[0]
            hits += int(np.argmax(logits) == a[t])
            total += 1
    assert evaluate.action_accuracy(m, demos) == pytest.approx(hits / total)
    continuous = model_mod.Model(params=params, policy=policy.PolicyConfig(
        state_dim=D, n_subtasks=K, action_dim=A, act_hidden=[6], stop_hidden=[6]), vocab=tuple("abc"),
        algo="gtbc")
    with pytest.raises(ValueError, match="action accuracy"):
        evaluate.action_accuracy(continuous, demos)


def test_the_validation_split_draws_the_protocols_tasks_from_seeds_of_its_own(monkeypatch):
    """evaluate.validation is the test protocol (same domain tasks, lengths, environment) on
    sketches and episodes drawn from the validation offsets: for seeds 0-9, no validation
    sketch list or episode seed is any test one, and protocol(split="validation") is the same
    call."""
    import taco_sim
    calls = []

    def fake(model, make_env, sketches, seed=0, **kwargs):
        calls.append((np.asarray(sketches).tolist(), seed, make_env))
        return {"task_accuracy": 0.0, "rules": {}}
    monkeypatch.setattr(evaluate, "task_accuracy", fake)
    monkeypatch.setattr(evaluate, "check_vocab", lambda *a, **k: None)
    dom = taco_sim.get("navworld")
    for seed in range(10):
        evaluate.protocol(None, dom, 50, seed, lengths=(3,))
        evaluate.validation(None, dom, 50, seed, lengths=(3,))
    test = [c for i, c in enumerate(calls) if (i // 2) % 2 == 0]
    valid = [c for i, c in enumerate(calls) if (i // 2) % 2 == 1]
    assert {s for _, s, _ in test}.isdisjoint({s for _, s, _ in valid})
    assert not any(v[0] == t[0] for v in valid for t in test)
    assert all(v[2] is dom.task_env and len(v[0][0]) == len(t[0][0]) for v, t in zip(valid, test))
    calls.clear()
    evaluate.protocol(None, dom, 50, 3, split="validation")
    evaluate.validation(None, dom, 50, 3)
    assert calls[0][:2] == calls[1][:2]
    assert evaluate.protocol_sketches(dom, 50, 3, split="validation").tolist() == calls[0][0]
    with pytest.raises(ValueError, match="split: expected one of test, validation"):
        evaluate.protocol(None, dom, 50, 3, split="train")
