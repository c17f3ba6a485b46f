"""Tests for sim/taco_sim/navworld.py (taco_sim.navworld): the Nav-World domain of paper Sec. 5.1.

In three layers (an exact reference, properties, smoke and determinism):
(a) plain references: the observation rebuilt from positions; expert actions recomputed at the
    recorded states; labels and dynamics checked step by step against RADIUS, MAX_SPEED and DT;
    the STOP rule (a sub-task counts only on stop() within RADIUS of the current target, a stop()
    anywhere else fails the task, moving counts nothing) on scripted flights;
(b) hypothesis properties: any distinct-destination sketch and seed, the noise-free expert that
    calls stop() at each arrival completes the sketch within budget, one target at a time, landing
    exactly on each target it comes within one step of;
(c) smoke runs and determinism: DART-noisy expert success rate, same seed => same episode and
    same Demos, collection speed.
Symbols: N demonstrations, T steps, L sketch length, K = 4 destinations, D = 8, A = 2. 0-based.
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from taco_ref.plumbing import provenance
from taco_ref.data import Demos, DataError
from taco_sim import navworld

K = navworld.K


def run_expert(sketch, seed, dart_sigma):
    """Drive a NavWorld with the expert plus N(0, dart_sigma^2) noise, calling stop() whenever the
    agent is within RADIUS of the current target (the expert's STOP), until done, failed or budget.

    Returns (env, observations (T + 1, D), progress before each step (T,)).
    """
    env = navworld.NavWorld()
    obs = [env.reset(sketch, seed=seed)]
    noise = np.random.default_rng([seed, 1])
    before = []
    while True:
        if env.at_target:
            env.stop()
        if env.done or env.failed or env.t >= env.budget(len(sketch)):
            break
        before.append(env.progress)
        obs.append(env.step(navworld.expert_action(env) + dart_sigma * noise.standard_normal(2)))
    return env, np.array(obs), np.array(before)


def drive_to(env, k, stop):
    """Fly env's agent noise-free onto destination k (landing on it); then stop() if stop."""
    for _ in range(200):
        if np.linalg.norm(env.dests[k] - env.agent) < 1e-9:
            break
        env.step(navworld.expert_velocity(env.dests[k] - env.agent))
    else:
        raise AssertionError(f"could not reach destination {k}")
    if stop:
        env.stop()


@pytest.fixture(scope="module")
def demos():
    return navworld.collect(300, 3, seed=7)


# ----------------------------------------------------------------------------------------------
# Observations and the environment
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sketch", [(0,), (2, 0, 3), (3, 1, 0, 2)])
def test_observation_shape_finite_and_layout(sketch):
    env = navworld.NavWorld()
    obs = env.reset(sketch, seed=3)
    assert obs.shape == (navworld.STATE_DIM,) == (env.state_dim,) == (8,)
    assert env.action_dim == 2 and env.vocab == ("black", "green", "yellow", "red")
    assert np.isfinite(obs).all()
    np.testing.assert_array_equal(obs, (env.dests - env.agent).reshape(-1))   # d_k - p, VOCAB order
    assert env.progress == 0 and env.t == 0 and not env.done and not env.failed
    assert env.target == sketch[0] and not env.at_target
    for _ in range(5):
        obs = env.step(np.array([0.3, -2.0]))                                 # -2 is clipped to -1
    assert obs.shape == (8,) and np.isfinite(obs).all() and env.t == 5
    np.testing.assert_allclose(env.agent, env.dests[0] - obs[:2])
    np.testing.assert_allclose(obs, env.obs)


def test_layouts_stay_near_their_centres_and_apart():
    agent, dests = navworld.sample_layout(np.random.default_rng(0), 5000)     # (N, 2), (N, K, 2)
    pts = np.concatenate([agent[:, None], dests], axis=1)                     # (N, K + 1, 2)
    gap = np.linalg.norm(pts[:, :, None] - pts[:, None], axis=-1)
    gap[:, np.arange(K + 1), np.arange(K + 1)] = np.inf
    assert gap.min() >= navworld.MIN_SEPARATION > 2 * navworld.RADIUS
    nearest = np.linalg.norm(dests[:, :, None] - navworld.DEST_CENTRES[None, None], axis=-1).argmin(-1)
    np.testing.assert_array_equal(nearest, np.broadcast_to(np.arange(K), nearest.shape))
    np.testing.assert_allclose(dests.mean(0), navworld.DEST_CENTRES, atol=0.1)
    np.testing.assert_allclose(agent.std(0), navworld.AGENT_STD, atol=0.1)


def test_constants_keep_stop_sharp():
    """Rule: RADIUS = 0.25, half an expert step, so the switch state is a landing point; one state
    is within RADIUS of at most one destination (MIN_SEPARATION > 2 RADIUS); the expert's
    unsaturated action lands on the target (EXPERT_GAIN = 1 / DT)."""
    assert navworld.RADIUS == 0.25 == navworld.MAX_SPEED * navworld.DT / 2
    assert navworld.MIN_SEPARATION > 2 * navworld.RADIUS
    assert navworld.EXPERT_GAIN == 1.0 / navworld.DT


def test_stop_counts_only_at_the_current_target_in_order():
    """Rule: stop() within RADIUS of the current target counts it (progress + 1, the next sketch
    destination becomes the target; done when all are counted); after done, step() only moves
    and stop() does nothing."""
    env = navworld.NavWorld()
    env.reset((1, 2, 0), seed=11)
    drive_to(env, 1, stop=True)
    assert env.progress == 1 and env.target == 2 and not env.failed
    drive_to(env, 2, stop=True)
    drive_to(env, 0, stop=True)
    assert env.progress == 3 and env.done and not env.failed and env.target is None
    np.testing.assert_array_equal(navworld.expert_action(env), np.zeros(2))
    start = env.agent.copy()
    env.step(np.ones(2))
    env.stop()
    assert env.progress == 3 and env.done and not env.failed
    np.testing.assert_allclose(env.agent - start, np.ones(2) * navworld.DT)


def test_passing_through_destinations_without_stop_counts_nothing():
    """Rule: step() only moves; landing on, resting on or passing through every sketch destination
    in order counts nothing without stop()."""
    env = navworld.NavWorld()
    env.reset((1, 2, 0), seed=11)
    for k in (1, 2, 0):
        drive_to(env, k, stop=False)
        assert env.progress == 0 and env.target == 1 and not env.failed
        for _ in range(3):
            env.step(np.zeros(2))                                          # rest on it
        assert env.progress == 0 and not env.failed
    drive_to(env, 1, stop=True)                                            # the target still waits
    assert env.progress == 1 and not env.failed


@pytest.mark.parametrize("where", ["start", "other sketch destination", "not in sketch",
                                   "just outside RADIUS"])
def test_stop_outside_radius_fails_and_progress_stays(where):
    """Rule: stop() anywhere but within RADIUS of the current target fails the task (failed =
    True, progress stays, target None); afterwards step() only moves and stop() does nothing;
    reset clears failed."""
    env = navworld.NavWorld()
    env.reset((1, 2, 0), seed=11)
    drive_to(env, 1, stop=True)                                            # progress 1, target 2
    if where == "start":
        env.reset((1, 2, 0), seed=11)
    elif where == "other sketch destination":
        drive_to(env, 0, stop=False)                                       # the 3rd before the 2nd
    elif where == "not in sketch":
        drive_to(env, 3, stop=False)
    else:
        env.agent = env.dests[2] + np.array([0.6, 0.8]) * (navworld.RADIUS + 1e-9)
    progress = env.progress
    assert not env.at_target
    env.stop()
    assert env.failed and env.progress == progress and not env.done and env.target is None
    drive_to(env, 2, stop=True)
    assert env.failed and env.progress == progress
    env.reset((1, 2, 0), seed=11)
    assert not env.failed and env.progress == 0


def test_stop_on_the_radius_counts():
    """Rule: the tolerance is inclusive: stop() at distance exactly RADIUS of the current target
    counts it."""
    env = navworld.NavWorld()
    env.reset((2,), seed=4)
    env.dests[2] = np.array([4.0, -4.0])
    env.agent = np.array([4.0 + navworld.RADIUS, -4.0])                     # exact in binary
    assert np.linalg.norm(env.dests[2] - env.agent) == navworld.RADIUS and env.at_target
    env.stop()
    assert env.done and env.progress == 1 and not env.failed


def test_actions_are_clipped_per_component():
    env = navworld.NavWorld()
    env.reset((0,), seed=0)
    start = env.agent.copy()
    env.step(np.array([5.0, -0.25]))
    np.testing.assert_allclose(env.agent - start, np.array([navworld.MAX_SPEED, -0.25]) * navworld.DT)


def test_bad_sketches_and_actions_raise():
    env = navworld.NavWorld()
    for sketch in ([0, 1, 0], [4], [-1, 2], []):
        with pytest.raises(ValueError, match="sketch"):
            env.reset(sketch, seed=0)
    env.reset([0, 1], seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="sketches"):
        navworld.collect(2, 3, seed=0, sketches=[[0, 1], [1, 2]])


# ----------------------------------------------------------------------------------------------
# Determinism
# ----------------------------------------------------------------------------------------------

def test_same_seed_same_episode():
    _, obs_a, prog_a = run_expert((3, 0, 2), seed=5, dart_sigma=0.3)
    _, obs_b, prog_b = run_expert((3, 0, 2), seed=5, dart_sigma=0.3)
    _, obs_c, _ = run_expert((3, 0, 2), seed=6, dart_sigma=0.3)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(prog_a, prog_b)
    assert obs_a.shape != obs_c.shape or not np.array_equal(obs_a, obs_c)


def test_same_seed_same_demos():
    a = navworld.collect(40, 3, seed=123)
    b = navworld.collect(40, 3, seed=123)
    c = navworld.collect(40, 3, seed=124)
    for name in ("states", "actions", "traj_len", "sketch", "sketch_len", "labels", "final_state"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.meta == b.meta and a.vocab == b.vocab
    assert a.states.shape != c.states.shape or not np.array_equal(a.states, c.states)


# ----------------------------------------------------------------------------------------------
# The expert
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sketch_len", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_noisy_expert_completes_random_sketches_within_budget(sketch_len):
    """Rule: the DART-noisy expert that calls stop() at each arrival (first state within RADIUS)
    completes >= 99 % of sketches within budget and never fails."""
    rng = np.random.default_rng(sketch_len)
    sketches = navworld.sample_sketches(200, sketch_len, rng)
    results = [run_expert(s, seed=int(i), dart_sigma=navworld.DART_SIGMA) for i, s in enumerate(sketches)]
    done = np.array([env.done for env, _, _ in results])
    assert done.mean() >= 0.99 and not any(env.failed for env, _, _ in results)
    assert all(env.t <= navworld.budget(sketch_len) for env, _, _ in results)


@given(sketch=st.integers(1, K).flatmap(
           lambda L: st.permutations(range(K)).map(lambda p: tuple(p[:L]))),
       seed=st.integers(0, 2**32 - 1))
def test_clean_expert_lands_on_each_target_and_completes_the_sketch(sketch, seed):
    """Rules: an expert that calls stop() at each arrival completes every sketch within budget,
    one target at a time; without noise, a step from within MAX_SPEED * DT of the target lands
    on it (distance ~0 after it), so each switch state is at distance < 1e-9 unless a full step
    brought the agent within RADIUS."""
    env, obs, before = run_expert(sketch, seed, dart_sigma=0.0)
    note(f"t = {env.t}, progress = {env.progress}, agent = {env.agent}, dests = {env.dests.tolist()}")
    assert env.done and not env.failed and env.t <= env.budget(len(sketch))
    assert before[0] == 0 and (np.diff(before) >= 0).all() and (np.diff(before) <= 1).all()
    # straight flight at full speed: each step moves MAX_SPEED * DT, except possibly the last of a leg
    step = navworld.MAX_SPEED * navworld.DT
    moves = np.linalg.norm(np.diff(obs[:, :2], axis=0), axis=1)
    assert (moves <= step + 1e-12).all()
    assert np.sum(moves < step - 1e-9) <= len(sketch)
    # distance to the active target before (t) and after (t + 1) each step t
    active = np.array(sketch)[before]                                       # (T,)
    dist_before = np.linalg.norm(navworld.target_offset(obs[:-1], active), axis=1)
    dist_after = np.linalg.norm(navworld.target_offset(obs[1:], active), axis=1)
    assert (dist_before > navworld.RADIUS).all()                            # stopped on arrival
    assert (dist_after[dist_before <= step] < 1e-9).all()                   # the landing step
    arrived = np.append(np.diff(before) == 1, True)                         # step t reaches its target
    landed = dist_after[arrived] < 1e-9
    full_step = dist_before[arrived] > step
    assert (landed | full_step).all() and (dist_after[arrived] <= navworld.RADIUS).all()


def test_expert_velocity_saturates_and_points_at_the_target():
    offsets = np.random.default_rng(0).normal(scale=4.0, size=(1000, 2))
    v = navworld.expert_velocity(offsets)
    speed = np.linalg.norm(v, axis=1)
    far = np.linalg.norm(offsets, axis=1) > navworld.MAX_SPEED / navworld.EXPERT_GAIN
    np.testing.assert_allclose(speed[far], navworld.MAX_SPEED)
    np.testing.assert_allclose(v[~far], navworld.EXPERT_GAIN * offsets[~far])
    np.testing.assert_allclose(v[:, 0] * offsets[:, 1] - v[:, 1] * offsets[:, 0], 0.0, atol=1e-12)  # parallel
    assert (np.sum(v * offsets, axis=1) > 0).all()
    np.testing.assert_array_equal(navworld.clip_action(v), v)


# ----------------------------------------------------------------------------------------------
# Collected demonstrations
# ----------------------------------------------------------------------------------------------

def test_collected_demos_are_valid(demos):
    assert isinstance(demos, Demos) and demos.validate() is demos
    assert demos.states.shape[::2] == (300, 8) and demos.actions.shape[::2] == (300, 2)
    assert demos.sketch.shape == (300, 3) and (demos.sketch_len == 3).all()
    assert demos.vocab == navworld.VOCAB and not demos.discrete
    meta = dict(demos.meta)
    assert meta.pop("collected_on")["cpu"] == provenance.machine()["cpu"]
    assert meta == {"domain": "navworld", "action_type": "continuous", "sketch_len": 3,
                    "dart_sigma": navworld.DART_SIGMA, "seed": 7, "discarded": 0}
    assert all(len(set(s)) == 3 for s in demos.sketch.tolist())
    assert len({tuple(s) for s in demos.sketch.tolist()}) == 24      # every ordered 3-of-4 sketch drawn
    assert (demos.traj_len <= navworld.budget(3)).all()
    bad = Demos(demos.states, demos.actions, demos.traj_len, demos.sketch, demos.sketch_len,
                np.where(demos.labels == 2, 1, demos.labels), demos.final_state, demos.vocab, demos.meta)
    with pytest.raises(DataError, match="labels"):
        bad.validate()


def test_labels_advance_exactly_on_arrival(demos):
    """Rule (data switch, spec/data.md §8): the label rises exactly at the first state within
    RADIUS = 0.25 of the current target (the expert's STOP), and final_state is within RADIUS of
    the last destination."""
    r = navworld.RADIUS
    assert r == 0.25
    for n in range(demos.n):
        T, sketch = demos.traj_len[n], demos.sketch[n]
        lab, s = demos.labels[n, :T], demos.states[n, :T]                   # (T,), (T, D)
        assert lab[0] == 0 and lab[-1] == 2 and set(np.diff(lab)) <= {0, 1}
        assert (demos.labels[n, T:] == -1).all()
        dist = np.linalg.norm(navworld.target_offset(s, sketch[lab]), axis=1)  # to the active target
        assert (dist > r).all()                                             # never there while active
        for t in np.nonzero(np.diff(lab))[0] + 1:                           # label rises at step t
            assert np.linalg.norm(navworld.target_offset(s[t], sketch[lab[t - 1]])) <= r
        assert np.linalg.norm(navworld.target_offset(demos.final_state[n], sketch[-1])) <= r


def test_noise_free_demos_switch_on_the_destination():
    """Rule (data switch with the landing step, spec/data.md §8): without noise every switch state
    (a label rise, and final_state) is at distance < 1e-9 from the target it completes, unless a
    full step from farther than MAX_SPEED * DT brought the agent within RADIUS."""
    d = navworld.collect(200, 3, seed=2, dart_sigma=0.0)
    step = navworld.MAX_SPEED * navworld.DT
    landed = 0
    for n in range(d.n):
        T, sketch = d.traj_len[n], d.sketch[n]
        s = np.concatenate([d.states[n, :T], d.final_state[n][None]])       # (T + 1, D)
        lab = d.labels[n, :T]
        for t in np.append(np.nonzero(np.diff(lab))[0] + 1, T):             # switch states
            target = sketch[lab[t - 1]]
            after = np.linalg.norm(navworld.target_offset(s[t], target))
            before = np.linalg.norm(navworld.target_offset(s[t - 1], target))
            assert after <= navworld.RADIUS and (after < 1e-9 or before > step)
            landed += after < 1e-9
    assert landed > d.n                                                     # most legs land


def test_noisy_landing_steps_mostly_end_within_radius(demos):
    """Rule (navworld.RADIUS docstring): with DART noise a step from within one expert step of the
    target ends within RADIUS about 4 times in 5 (else another short step corrects it)."""
    step = navworld.MAX_SPEED * navworld.DT
    landing = arrived = 0
    for n in range(demos.n):
        T, sketch = demos.traj_len[n], demos.sketch[n]
        lab, s = demos.labels[n, :T], demos.states[n, :T]                   # (T,), (T, D)
        dist = np.linalg.norm(navworld.target_offset(s, sketch[lab]), axis=1)
        rises = np.append(np.diff(lab) == 1, True)                          # step t reaches its target
        landing += int((dist <= step).sum())
        arrived += int((rises & (dist <= step)).sum())
    assert 0.65 <= arrived / landing <= 0.9, f"{arrived} of {landing} landing steps arrive"


def test_recorded_actions_are_clean_expert_actions(demos):
    valid = np.arange(demos.states.shape[1])[None] < demos.traj_len[:, None]        # (N, T)
    targets = np.take_along_axis(demos.sketch, np.maximum(demos.labels, 0), axis=1)  # (N, T)
    expected = navworld.expert_velocity(navworld.target_offset(demos.states, targets))
    np.testing.assert_allclose(demos.actions[valid], expected[valid], rtol=0, atol=1e-12)
    assert (demos.actions[~valid] == 0).all() and (demos.states[~valid] == 0).all()


def test_visited_states_follow_noisy_clipped_dynamics(demos):
    for n in range(demos.n):
        T = demos.traj_len[n]
        s = np.concatenate([demos.states[n, :T], demos.final_state[n][None]])  # (T + 1, D)
        shift = -np.diff(s, axis=0).reshape(T, K, 2)                            # agent moves
        np.testing.assert_allclose(shift, np.broadcast_to(shift[:, :1], shift.shape), atol=1e-12)
        assert (np.abs(shift) <= navworld.MAX_SPEED * navworld.DT + 1e-12).all()
        executed = shift[:, 0] / navworld.DT
        assert not np.allclose(executed, demos.actions[n, :T])                  # DART noise was applied


def test_given_sketches_progress_callback_and_discards(monkeypatch):
    sketches = navworld.sample_sketches(300, 3, np.random.default_rng(0))
    calls = []
    monkeypatch.setattr(navworld, "STEPS_PER_SUBTASK", 22)          # budget 66: about half fail
    d = navworld.collect(300, 3, seed=1, sketches=sketches, progress=lambda i, n: calls.append((i, n)))
    np.testing.assert_array_equal(d.sketch, sketches)
    assert d.meta["discarded"] > 0 and (d.traj_len <= 66).all()
    assert calls[-1] == (300, 300) and [i for i, _ in calls] == sorted(i for i, _ in calls)


def test_collected_episodes_stay_well_within_budget():
    """Smoke: 1000 L = 3 demonstrations, all well within budget (measured with the landing step:
    mean T 66.6, longest 87 of 150, none discarded). Speed is a benchmark matter, not a test's."""
    d = navworld.collect(1000, 3, seed=0)
    assert d.n == 1000
    assert 30 <= d.traj_len.mean() <= 80
    assert d.traj_len.max() <= 0.7 * navworld.budget(3) and d.meta["discarded"] == 0


# ----------------------------------------------------------------------------------------------
# Sketches
# ----------------------------------------------------------------------------------------------

def test_sample_sketches_distinct_uniform_and_excluding():
    rng = np.random.default_rng(0)
    s = navworld.sample_sketches(4800, 3, rng)
    assert s.shape == (4800, 3) and s.dtype == np.int64
    assert all(len(set(row)) == 3 for row in s.tolist())
    counts = np.unique(s, axis=0, return_counts=True)[1]
    assert len(counts) == 24 and counts.min() > 130 and counts.max() < 270   # ~200 each
    excluded = [(0, 1, 2), (3, 2, 1)]
    s = navworld.sample_sketches(2000, 3, rng, exclude=excluded)
    assert not {tuple(row) for row in s.tolist()} & set(excluded)
    with pytest.raises(ValueError, match="excluded"):
        navworld.sample_sketches(1, 1, rng, exclude=[(k,) for k in range(K)])


def test_zero_shot_sketches_are_unseen_in_training():
    rng = np.random.default_rng(0)
    test = navworld.zero_shot_sketches(500, rng)
    train = {tuple(row) for row in navworld.sample_sketches(2000, 3, rng).tolist()}
    assert test.shape == (500, 4)
    assert all(sorted(row) == [0, 1, 2, 3] for row in test.tolist())
    assert not {tuple(row) for row in test.tolist()} & train
    assert set(itertools.permutations(range(K), 3)) == train
    assert len({tuple(row) for row in test.tolist()}) == 24
