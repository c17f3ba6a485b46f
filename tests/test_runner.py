"""Tests for taco_ref/runner.py (no ROS).

In three layers (an exact reference, properties, smoke and determinism):
(a) reference: a plain reading of the STOP rule (acted at least once, next sub-policy acts in
    the same state) on a scripted fake policy; and SketchRunner driven step by step in a
    Nav-World episode makes the same decisions as taco_ref.evaluate.execute (which runs it
    inside its env loop: same actions, same STOP steps, same progress and failure) for random
    models whose STOP nets fire at random points;
(b) hypothesis: parse_sketch round-trips any sketch written with any separators, and on any
    text either returns valid ids or raises ValueError (never another exception); every action
    returned lies within the limits; the status is JSON;
(c) safety rules: the per-sub-task time bound, non-finite actions, halt / fail / reject /
    preemption, bad construction arguments.

Symbols: L sketch length, K sub-tasks, D state dim, A action dim.
"""
import json

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from taco_ref import evaluate, runner
from taco_ref.model import Model
from taco_ref.policy import PolicyConfig, init_params
from taco_ref.runner import MAX_SKETCH_LEN, MAX_TEXT_LEN, SketchRunner, parse_sketch, parse_sketch_items
from taco_sim import navworld

DIAL_VOCAB = tuple(str(d) for d in range(10))


def random_model(seed, D=navworld.STATE_DIM, K=navworld.K, A=navworld.ACTION_DIM, stop_bias=0.0):
    """A random continuous model; stop_bias shifts every STOP logit (0: P(STOP) near 1/2)."""
    cfg = PolicyConfig(state_dim=D, n_subtasks=K, action_dim=A, act_hidden=[16], stop_hidden=[16])
    params = init_params(cfg, np.random.default_rng(seed))
    params["stop.b1"] = params["stop.b1"] + stop_bias                      # (K, 1)
    return Model(params, cfg, tuple(str(k) for k in range(K)), "gtbc")


class RecordingNavWorld(navworld.NavWorld):
    def reset(self, sketch, seed=None):
        self.actions = []
        return super().reset(sketch, seed)

    def step(self, action):
        self.actions.append(np.array(action, dtype=np.float64))
        return super().step(action)


def run_runner(model, sketch, seed, budget, stop_hold=1):
    """The loop a caller of SketchRunner writes, in a Nav-World episode (each STOP reported to
    env.stop(), which counts or fails the sub-task); returns (env, runner)."""
    env = RecordingNavWorld()
    obs = env.reset(sketch, seed=seed)
    r = SketchRunner(model.params, model.policy, model.vocab, stop_hold=stop_hold)
    r.start(sketch, now=0.0)
    steps = 0
    while steps < budget and not env.done and not env.failed:
        stops = len(r.stop_steps)
        action = r.step(obs, now=float(steps))
        if len(r.stop_steps) > stops:
            env.stop()
        if action is None:
            break
        obs = env.step(action)
        steps += 1
    return env, r


# ----------------------------------------------------------------------------------------------
# (a) the same decisions as evaluate.execute
# ----------------------------------------------------------------------------------------------

@given(seed=st.integers(0, 2 ** 31 - 1), bias=st.floats(-3.0, 3.0),
       sketch=st.lists(st.integers(0, navworld.K - 1), min_size=1, max_size=navworld.K, unique=True),
       budget=st.integers(1, 60), hold=st.integers(1, 3))
def test_runner_matches_execute(seed, bias, sketch, budget, hold):
    """evaluate.execute and a caller's own loop around SketchRunner make the same decisions,
    for any stop_hold (spec/evaluation.md eq. (9))."""
    model = random_model(seed, stop_bias=bias)
    env_ref = RecordingNavWorld()
    ref = evaluate.execute(model, env_ref, sketch, seed=seed, budget=budget, stop_hold=hold)
    env, r = run_runner(model, sketch, seed, budget, stop_hold=hold)
    note(f"reference stops {ref['stop_times']}, runner stops {r.stop_steps}")
    assert r.stop_steps == ref["stop_times"]
    assert len(env.actions) == len(env_ref.actions) == ref["steps"]
    for a, b in zip(env.actions, env_ref.actions):
        np.testing.assert_array_equal(a, b)
    assert (r.state == "done") == (len(r.stop_steps) == len(sketch))
    assert (env.progress, env.failed) == (env_ref.progress, env_ref.failed)


def script_policy(monkeypatch, stops):
    """Fake policy.stops and policy.action: sub-task k in state s stops iff stops[k][s[0]]; its
    action is (k, s[0])."""
    monkeypatch.setattr(runner.policy, "stops",
                        lambda params, cfg, k, state, stop_threshold=0.5: bool(stops[k][int(state[0])]))
    monkeypatch.setattr(runner.policy, "action",
                        lambda params, cfg, k, state, rng=None: np.array([k, int(state[0])], dtype=np.float64))


def test_stop_rule_on_scripted_policy(monkeypatch):
    # sub-task 0 wants to stop at once (t = 0) but must act first; it stops at t = 1, where
    # sub-task 1 acts in the same state; sub-task 1 stops at t = 3; sub-task 2 stops at t = 3
    # too, but it has not acted yet, so it acts at t = 3 and stops at t = 4.
    stops = {0: [True, True, True, True, True], 1: [False] * 3 + [True, True],
             2: [False, False, False, True, True]}
    script_policy(monkeypatch, stops)
    cfg = PolicyConfig(state_dim=1, n_subtasks=3, action_dim=2)
    r = SketchRunner({}, cfg, ("a", "b", "c"))
    r.start([0, 1, 2], now=0.0)
    actions = []
    for t in range(5):
        a = r.step(np.array([t]), now=10.0 * t)
        actions.append(None if a is None else a.tolist())
    assert actions == [[0, 0], [1, 1], [1, 2], [2, 3], None]
    assert r.stop_steps == [1, 3, 4]
    assert r.stop_times == [10.0, 30.0, 40.0]
    assert r.state == "done" and r.status()["active"] is None


def test_stop_hold_stops_after_h_consecutive_decisions(monkeypatch):
    """spec/evaluation.md eq. (9): with stop_hold = 2 sub-task 0, above the threshold at t = 1,
    below at t = 2, above at t = 3 and 4, stops at t = 4; sub-task 1 takes over in that state,
    acts, and stops at t = 6, its second decision above the threshold. With stop_hold = 1 the
    same script stops at t = 1 and t = 2."""
    script = {0: [True, True, False, True, True, True, True, True],
              1: [True] * 8}
    script_policy(monkeypatch, script)
    cfg = PolicyConfig(state_dim=1, n_subtasks=2, action_dim=2)
    stops = {}
    for hold in (1, 2):
        r = SketchRunner({}, cfg, ("a", "b"), stop_hold=hold)
        r.start([0, 1], now=0.0)
        t = 0
        while r.state == "running" and t < 8:
            r.step(np.array([t]), now=float(t))
            t += 1
        stops[hold] = r.stop_steps
        assert r.state == "done"
    assert stops == {1: [1, 2], 2: [4, 6]}


def hold_reference(decisions, hold):
    """The step of the first STOP of one sub-policy under the hold rule, read plainly: decisions[t] is
    whether P(STOP | s_t) clears the threshold; t = 0 is its first state, where it must act.
    None when it never stops."""
    for t in range(1, len(decisions)):
        if t >= hold and all(decisions[t - hold + 1:t + 1]):
            return t
    return None


@given(decisions=st.lists(st.booleans(), min_size=1, max_size=30), hold=st.integers(1, 5))
def test_stop_hold_is_a_plain_reading_of_the_rule(decisions, hold):
    """spec/evaluation.md eq. (9): SketchRunner's first STOP is where the rule read plainly puts
    it, for any sequence of STOP decisions and any hold."""
    cfg = PolicyConfig(state_dim=1, n_subtasks=2, action_dim=2)
    r = SketchRunner({}, cfg, ("a", "b"), stop_hold=hold)
    r.start([0, 1], now=0.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner.policy, "stops",
                   lambda params, cfg, k, state, stop_threshold=0.5: decisions[int(state[0])])
        mp.setattr(runner.policy, "action", lambda params, cfg, k, state, rng=None: np.zeros(2))
        for t in range(len(decisions)):
            r.step(np.array([t]), now=float(t))
    expected = hold_reference(decisions, hold)
    note(f"stops {r.stop_steps}, expected first {expected}")
    assert (r.stop_steps[:1] or [None])[0] == expected


def test_may_stop_vetoes_the_policys_stop_but_not_a_forced_one(monkeypatch):
    """may_stop=False (the ROS bridge's press rule) keeps a sub-policy that wants to stop acting;
    a forced STOP (max_subtask_steps) still happens."""
    script_policy(monkeypatch, {0: [True] * 6, 1: [False] * 6})
    cfg = PolicyConfig(state_dim=1, n_subtasks=2, action_dim=2)
    r = SketchRunner({}, cfg, ("a", "b"))
    r.start([0, 1], now=0.0)
    for t in range(3):
        r.step(np.array([t]), now=float(t), may_stop=False)
    assert r.stop_steps == [] and r.active == 0
    r.step(np.array([3]), now=3.0)
    assert r.stop_steps == [3] and r.active == 1
    forced = SketchRunner({}, cfg, ("a", "b"), max_subtask_steps=2)
    forced.start([1, 0], now=0.0)
    for t in range(3):
        forced.step(np.array([t]), now=float(t), may_stop=False)
    assert forced.stop_steps == [2]


# ----------------------------------------------------------------------------------------------
# (b) parsing and properties
# ----------------------------------------------------------------------------------------------

separators = st.lists(st.sampled_from([" ", ",", ", ", "\t", "  ,", "\n"]), min_size=1, max_size=3).map("".join)


@given(ids=st.lists(st.integers(0, 9), min_size=1, max_size=MAX_SKETCH_LEN), data=st.data())
def test_parse_round_trip(ids, data):
    seps = [data.draw(separators) for _ in ids]
    text = data.draw(st.sampled_from(["", " ", ","])) + "".join(
        str(k) + sep for k, sep in zip(ids, seps))
    note(repr(text))
    assert parse_sketch(text, DIAL_VOCAB) == ids


def test_parse_names_and_ids():
    vocab = navworld.VOCAB
    assert parse_sketch("black, red 2", vocab) == [0, 3, 2]
    assert parse_sketch("0,5,1,6", DIAL_VOCAB) == [0, 5, 1, 6]


@pytest.mark.parametrize("text,words", [
    ("", "empty sketch"), (" ,, \n", "empty sketch"),
    ("0 5 x 6", "unknown sub-task 'x' at position 2"),
    ("0 10", "unknown sub-task '10' at position 1"),
    ("-1", "unknown sub-task '-1'"),
    ("٣", "unknown sub-task"),                       # an Arabic-Indic digit is not an id
    ("0 " * (MAX_SKETCH_LEN + 1), f"at most {MAX_SKETCH_LEN}"),
    ("0" * (MAX_TEXT_LEN + 1), f"at most {MAX_TEXT_LEN}"),
])
def test_parse_errors_name_the_problem(text, words):
    with pytest.raises(ValueError, match=words):
        parse_sketch(text, DIAL_VOCAB)


@pytest.mark.parametrize("items,words", [
    ([], "empty sketch"), ("0 5", "a list of sub-task names"), ([0, 5], "a list of sub-task names"),
    (["0", "x"], "unknown sub-task 'x' at position 1"), (["0 5"], "unknown sub-task '0 5' at position 0"),
    ([""], "unknown sub-task '' at position 0"), (["0"] * (MAX_SKETCH_LEN + 1), f"at most {MAX_SKETCH_LEN}"),
    (["0" * (MAX_TEXT_LEN + 1)], f"at most {MAX_TEXT_LEN}"),
])
def test_parse_items_errors_name_the_problem(items, words):
    """A sketch as a list of names (the ROS action's goal): each item exactly one sub-task."""
    with pytest.raises(ValueError, match=words):
        parse_sketch_items(items, DIAL_VOCAB)


@given(ids=st.lists(st.integers(0, 9), min_size=1, max_size=MAX_SKETCH_LEN), data=st.data())
def test_parse_items_agrees_with_parse_sketch(ids, data):
    """Items given as names or ids parse to the ids that the same tokens in one text give."""
    items = [data.draw(st.sampled_from([DIAL_VOCAB[k], str(k)])) for k in ids]
    assert parse_sketch_items(items, DIAL_VOCAB) == parse_sketch(" ".join(items), DIAL_VOCAB) == ids
    assert parse_sketch_items(["black", "red"], navworld.VOCAB) == [0, 3]


@given(text=st.text(max_size=200) | st.binary(max_size=50).map(lambda b: b.decode("latin-1")))
def test_parse_any_text(text):
    try:
        ids = parse_sketch(text, DIAL_VOCAB)
    except ValueError as err:
        assert str(err)
    else:
        assert 1 <= len(ids) <= MAX_SKETCH_LEN and all(0 <= k < 10 for k in ids)


@given(seed=st.integers(0, 2 ** 31 - 1), scale=st.floats(0.0, 2.0),
       states=st.lists(st.lists(st.floats(-50, 50), min_size=8, max_size=8), min_size=1, max_size=20))
def test_actions_within_limits(seed, scale, states):
    model = random_model(seed, stop_bias=-2.0)
    limits = scale * np.array([0.5, 1.0])                                  # (A,)
    r = SketchRunner(model.params, model.policy, model.vocab, limits=limits)
    r.start([0, 1, 2, 3], now=0.0)
    for t, s in enumerate(states):
        a = r.step(np.array(s), now=float(t))
        if a is None:
            assert r.state == "done"
            break
        assert a.shape == (2,) and (np.abs(a) <= limits).all()
    status = json.loads(r.status_json())
    assert status["state"] in runner.STATES and status["sketch"] == ["0", "1", "2", "3"]


# ----------------------------------------------------------------------------------------------
# (c) safety rules
# ----------------------------------------------------------------------------------------------

def test_subtask_time_bound():
    model = random_model(0, stop_bias=-50.0)                               # never stops
    r = SketchRunner(model.params, model.policy, model.vocab, max_subtask_time=1.0)
    r.start([1, 2], now=100.0)
    s = np.zeros(navworld.STATE_DIM)
    assert r.step(s, now=100.0) is not None
    assert r.step(s, now=101.0) is not None                                # exactly at the bound
    assert r.step(s, now=101.01) is None
    status = r.status()
    assert status["state"] == "error" and "sub-task 1 (position 0)" in status["error"]
    assert r.step(s, now=101.02) is None                                   # stays in error


def test_time_bound_restarts_per_subtask(monkeypatch):
    stops = {0: [False, True, True], 1: [False, False, False]}
    script_policy(monkeypatch, stops)
    cfg = PolicyConfig(state_dim=1, n_subtasks=2, action_dim=2)
    r = SketchRunner({}, cfg, ("a", "b"), max_subtask_time=1.5)
    r.start([0, 1], now=0.0)
    assert r.step(np.array([0]), now=0.0) is not None
    assert r.step(np.array([1]), now=1.0) is not None                      # 0 stops, 1 acts
    assert r.step(np.array([2]), now=2.4) is not None                      # 1.4 s into sub-task 1
    assert r.state == "running" and r.status()["active"] == 1
    assert r.step(np.array([2]), now=2.6) is None and r.state == "error"


def test_non_finite_action_is_an_error():
    model = random_model(0, stop_bias=-50.0)
    model.params["act.b1"][:] = np.nan
    r = SketchRunner(model.params, model.policy, model.vocab, limits=np.ones(2))
    r.start([0], now=0.0)
    assert r.step(np.zeros(navworld.STATE_DIM), now=0.0) is None
    assert r.state == "error" and "non-finite" in r.status()["error"]


def test_halt_fail_reject_preempt():
    model = random_model(0, stop_bias=-50.0)
    r = SketchRunner(model.params, model.policy, model.vocab)
    s = np.zeros(navworld.STATE_DIM)
    assert r.step(s, now=0.0) is None and r.state == "idle"               # idle: nothing to do
    r.start([0, 1], now=0.0)
    r.step(s, now=0.0)
    r.start([3], now=1.0)                                                  # preempts
    assert r.status() == {"state": "running", "sketch": ["3"], "active": 0, "stop_times": [],
                          "stop_steps": [], "steps": 0, "error": None}
    r.halt()
    assert r.state == "idle" and r.step(s, now=2.0) is None
    r.fail("ignored when not running")
    assert r.state == "idle" and r.error is None
    r.start([2], now=3.0)
    r.fail("no fresh joint state for 0.3 s")
    assert r.status()["state"] == "error" and r.status()["error"] == "no fresh joint state for 0.3 s"
    r.start([2], now=4.0)
    r.reject("unknown sub-task 'x'")
    assert r.status()["state"] == "error" and r.status()["sketch"] == []
    assert r.step(s, now=5.0) is None
    r.halt()                                                               # clears an error
    assert r.status()["state"] == "idle" and r.status()["error"] is None


def test_bad_arguments():
    model = random_model(0)
    with pytest.raises(ValueError, match="limits must have shape"):
        SketchRunner(model.params, model.policy, model.vocab, limits=np.ones(3))
    with pytest.raises(ValueError, match="finite and non-negative"):
        SketchRunner(model.params, model.policy, model.vocab, limits=np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="max_subtask_time"):
        SketchRunner(model.params, model.policy, model.vocab, max_subtask_time=0)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="stop_hold must be a positive integer"):
            SketchRunner(model.params, model.policy, model.vocab, stop_hold=bad)
    with pytest.raises(ValueError, match="vocab has 2 names"):
        SketchRunner(model.params, model.policy, ("a", "b"))
    r = SketchRunner(model.params, model.policy, model.vocab)
    with pytest.raises(ValueError, match="outside 0..3"):
        r.start([4], now=0.0)
    with pytest.raises(ValueError, match="empty sketch"):
        r.start([], now=0.0)


@given(st.integers(0, 2**31 - 1), st.floats(-3.0, 3.0), st.integers(1, 6))
def test_views_average_stop_probability_and_action(seed, bias, n):
    """spec/evaluation.md eq. (8): over views (n, D) the decision is the mean of the per-view
    P(STOP | v) (against the threshold) and the mean of the action means; a single view of the
    state itself decides exactly as the runner without views (same STOP steps, same actions)."""
    from taco_ref import policy
    model = random_model(seed, stop_bias=bias)
    rng = np.random.default_rng(seed)
    views = rng.normal(size=(n, navworld.STATE_DIM))
    k = int(rng.integers(navworld.K))
    p, a = policy.view_decision(model.params, model.policy, k, views)
    assert p == pytest.approx(np.mean([policy.stop_probability(model.params, model.policy, k, v) for v in views]),
                              rel=1e-12)
    np.testing.assert_allclose(a, np.mean([policy.action(model.params, model.policy, k, v) for v in views], axis=0),
                               rtol=1e-12, atol=1e-15)
    env_a, plain = run_runner(model, [0, 2, 1], seed, 60)
    actions = env_a.actions

    def run_with(views_fn):
        env = RecordingNavWorld()
        obs = env.reset([0, 2, 1], seed=seed)
        r = SketchRunner(model.params, model.policy, model.vocab, views=views_fn)
        r.start([0, 2, 1], now=0)
        while r.steps < 60 and not env.done and not env.failed:
            stops = len(r.stop_steps)
            action = r.step(obs, now=r.steps)
            if len(r.stop_steps) > stops:
                env.stop()
            if action is None:
                break
            obs = env.step(action)
        return env, r

    env_b, same = run_with(lambda k, s: np.asarray(s, dtype=np.float64)[None])
    assert same.stop_steps == plain.stop_steps and len(env_b.actions) == len(actions)
    for x, y in zip(env_b.actions, actions):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="views"):
        policy.view_decision(model.params, model.policy, k, views[:, :3])


def test_views_refuse_discrete_policies():
    cfg = PolicyConfig(state_dim=4, n_subtasks=2, action_dim=3, discrete=True, act_hidden=[4], stop_hidden=[4])
    params = init_params(cfg, np.random.default_rng(0))
    with pytest.raises(ValueError, match="views: only for state vectors with continuous actions"):
        SketchRunner(params, cfg, ("a", "b"), views=lambda k, s: s[None])
