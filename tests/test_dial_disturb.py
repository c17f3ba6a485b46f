"""The Dial's harder test (taco_sim.dial.disturb, spec/dial.md §11, spec/evaluation.md §9): each
disturbance does what its docstring says and nothing else, the standard test is untouched, an
episode's disturbances are a function of its seed, and the protocol runs a named condition.
Symbols: A = 9 torques (6 velocities), L PIN length, D = 39."""
import dataclasses

import numpy as np
import pytest

import taco_sim
from taco_ref import evaluate, policy
from taco_sim.dial import disturb, expert, velocity
from taco_sim.dial.env import HOME_NOISE, TORQUE_LIMITS

D = disturb.Disturbance


@pytest.mark.parametrize("field, value", [("start", -0.1), ("noise", 1.5), ("delay", 1.5), ("push", "40"),
                                          ("push_steps", -1), ("noise", True)])
def test_a_disturbance_out_of_range_is_named(field, value):
    with pytest.raises(ValueError, match=f"Disturbance.{field}: expected"):
        D(**{field: value})


def test_a_delay_executes_the_decision_of_delay_steps_ago_after_holding():
    """delay 2: the first two control steps execute a zero action (hold), then each decision two
    steps late; noise 0 adds nothing."""
    episode = disturb.Episode(D(delay=2), seed=7, sketch_len=5, action_dim=9)
    decided = [np.full(9, float(t)) for t in range(1, 6)]
    executed, noise = zip(*[episode.command(a) for a in decided])
    assert all(n is None for n in noise)
    assert all(np.array_equal(e, np.zeros(9)) for e in executed[:2])
    assert all(np.array_equal(e, a) for e, a in zip(executed[2:], decided))


def test_noise_is_a_share_of_each_limit_and_a_function_of_the_seed():
    """noise 0.05: the motors' torque noise over many steps has std 5 % of each motor's peak
    torque, whatever the action (6 velocities too); the decided action passes unchanged; the
    same seed draws the same noise, another seed other noise."""
    def noise(seed, steps=4000, A=9):
        episode = disturb.Episode(D(noise=0.05), seed, 5, A)
        out = []
        for _ in range(steps):
            executed, torque_noise = episode.command(np.ones(A))
            assert np.array_equal(executed, np.ones(A))
            out.append(torque_noise)
        return np.array(out)                                                            # (steps, 9)
    a = noise(3)
    np.testing.assert_allclose(a.std(0) / TORQUE_LIMITS, 0.05, rtol=0.05)
    assert np.array_equal(a, noise(3)) and not np.array_equal(a, noise(4))
    assert np.array_equal(noise(3, 50, A=6), a[:50])


def test_velocity_torque_noise_is_added_to_the_loop_torque_at_every_physics_step(monkeypatch):
    """dial-velocity under noise: the motors receive the velocity loop's torque (spec/dial.md §7,
    re-evaluated each physics step) plus the step's noise, the same in every physics step of
    the control step; without noise, the loop's torque alone."""
    from taco_sim.dial.env import SUBSAMPLE
    seen = []
    for d in (None, D(noise=0.05)):
        task = velocity.DialVelocityTask("standard", d)
        task.reset([3, 1], seed=5)
        env = task.env
        applied, loop = [], []
        physics_step = env.physics_step
        monkeypatch.setattr(env, "physics_step", lambda torque, n=1: (applied.append(np.array(torque)),
                                                                       loop.append(env.velocity_torque(target)),
                                                                       physics_step(torque, n)))
        target = np.array([0.2, -0.1, 0.3, -0.4, 0.2, 0.1])
        task.step(target)
        seen.append(np.array(applied) - np.array(loop))                                  # (SUBSAMPLE, 9)
    assert seen[0].shape == (SUBSAMPLE, 9) and np.array_equal(seen[0], np.zeros_like(seen[0]))
    noise = seen[1]
    assert np.abs(noise).max() > 0 and np.allclose(noise, noise[0], atol=1e-12)
    expected = disturb.Episode(D(noise=0.05), 5, 2, 6).command(target)[1]
    np.testing.assert_allclose(noise[0], expected, atol=1e-12)


def test_the_push_starts_after_the_middle_digit_and_lasts_its_steps():
    """A PIN of 5: the push waits for 3 digits (ceil(5 / 2)), starts within PUSH_JITTER steps of
    that and acts for push_steps control steps, horizontally, with push newtons."""
    episode = disturb.Episode(D(push=40.0, push_steps=3), seed=11, sketch_len=5, action_dim=9)
    forces = [episode.force(t, progress=0 if t < 20 else 3) for t in range(60)]
    on = [t for t, f in enumerate(forces) if f is not None]
    assert len(on) == 3 and on == list(range(on[0], on[0] + 3)) and 20 <= on[0] < 20 + disturb.PUSH_JITTER
    f = forces[on[0]]
    assert f[2] == 0.0 and np.linalg.norm(f) == pytest.approx(40.0)


def test_the_standard_arm_is_untouched_and_a_disturbed_arm_departs_from_it():
    """DialTask with no disturbance, or with Disturbance() (the standard's own values), steps
    exactly as before the disturbances existed; the torque noise moves the trajectory, and the
    wider start the first state, along the standard start's own draw."""
    pin, seed = [3, 1, 4, 1, 5], 21
    rollout = {}
    for name, d in (("none", None), ("default", D()), ("noise", D(noise=0.05)), ("start", D(start=0.1))):
        task = expert.DialTask("standard", d)
        obs = [task.reset(pin, seed)]
        for t in range(40):
            obs.append(task.step(expert.expert_torque(task.env, pin[min(task.progress, 4)])))
        rollout[name] = np.array(obs)                                                     # (41, D)
    assert np.array_equal(rollout["none"], rollout["default"])
    assert not np.allclose(rollout["noise"][1:], rollout["none"][1:])
    assert not np.allclose(rollout["start"][0], rollout["none"][0])
    direction = rollout["start"][0][:9] - expert.DialTask("standard").reset(pin, seed)[:9]
    reference = expert.DialTask("standard").reset(pin, seed)[:9] - np.concatenate([expert.HOME, np.full(3, 1.2)])
    np.testing.assert_allclose(direction, reference * (0.1 / HOME_NOISE - 1), atol=1e-12)   # same draws, wider


def test_a_push_acts_on_the_forearm_only_during_its_steps(monkeypatch):
    task = expert.DialTask("standard", D(push=40.0, push_steps=2))
    task.reset([3, 1], seed=5)
    body = task.env.model.body(disturb.PUSH_BODY).id
    seen = []
    real = task.env.step

    def step(action):
        seen.append(task.env.data.xfrc_applied[body, :3].copy())
        return real(action)
    monkeypatch.setattr(task.env, "step", step)
    task._episode.push_from = 3
    for _ in range(7):
        task.step(np.zeros(9))
    pushed = [t for t, f in enumerate(seen) if np.linalg.norm(f) > 0]
    assert pushed == [3, 4] and np.linalg.norm(seen[3]) == pytest.approx(40.0)
    assert np.array_equal(task.env.data.xfrc_applied[body, :3], np.zeros(3))


def test_a_conditions_pins_have_its_lengths_and_follow_the_seed():
    condition = disturb.TestCondition("x", D(), lengths=tuple(range(5, 11)))
    pins = condition.sketches(300, np.random.default_rng(0))
    lengths = (pins >= 0).sum(1)
    assert pins.shape == (300, 10) and set(lengths) == set(range(5, 11))
    assert all((row[:L] >= 0).all() and (row[L:] == -1).all() and (np.diff(row[:L]) != 0).all()
               for row, L in zip(pins, lengths))
    assert np.array_equal(pins, condition.sketches(300, np.random.default_rng(0)))


def test_the_protocol_runs_a_named_condition_in_its_environment_on_its_pins(monkeypatch):
    """protocol(test=NAME) executes the condition's PINs (drawn from the split's sketch seed) in
    its task environment, with its STOP hold where it names one; an unknown name, or lengths
    with a condition, is refused naming test."""
    made, calls = [], []
    condition = disturb.NamedTest("a push", lambda: made.append(1) or "env",
                                  lambda n, rng: np.tile([[1, 2, 3]], (n, 1)), stop_hold=1)
    dom = dataclasses.replace(taco_sim.get("dial"), tests={"pushed": condition})

    def fake(model, make_env, sketches, seed=0, stop_hold=None, **kwargs):
        calls.append((make_env(), np.asarray(sketches).tolist(), seed, stop_hold))
        return {"task_accuracy": 1.0, "rules": {}}
    monkeypatch.setattr(evaluate, "task_accuracy", fake)
    monkeypatch.setattr(evaluate, "check_vocab", lambda *a, **k: None)
    evaluate.protocol(None, dom, 4, 2, test="pushed", stop_hold=2)
    assert calls == [("env", [[1, 2, 3]] * 4, evaluate.EPISODE_SEED + 2, 1)]
    with pytest.raises(ValueError, match="test: domain dial has no test condition 'harder-still'"):
        evaluate.protocol(None, dom, 4, 2, test="harder-still")
    with pytest.raises(ValueError, match="test: pushed draws its own sketch lengths"):
        evaluate.protocol(None, dom, 4, 2, test="pushed", lengths=(3,))


def test_the_expert_on_the_protocol_dials_and_stops_after_each_press():
    """disturb.DialExpert, the levels' yardstick: it completes standard PINs, torque and velocity."""
    for task, A in ((expert.DialTask, 9), (velocity.DialVelocityTask, 6)):
        cfg = policy.PolicyConfig(state_dim=39, n_subtasks=10, action_dim=A)
        agent = evaluate.Expert("expert", tuple(map(str, range(10))), cfg, disturb.DialExpert)
        res = evaluate.task_accuracy(agent, lambda: task("standard"), [[3, 1, 4], [0, 9]], seed=1)
        assert res["task_accuracy"] == 1.0, res


def test_the_report_gives_each_condition_beside_the_standard_test_paired_and_by_length():
    """taco report's tests_table: task accuracy on the standard test and on each named condition
    per (algo, size), TACO - GT-BC paired on the condition's tasks, and accuracy by PIN length
    within a condition of mixed lengths (rows of a domain whose tasks are independent)."""
    from taco_app import report

    def row(algo, seed, std, outcomes, lengths):
        return dict(domain="navworld", algo=algo, size=1000, seed=seed, n_tasks=4, task_accuracy=std,
                    tests={"harder": {"task_accuracy": outcomes.count("1") / 4, "subtask_accuracy": 0.5,
                                      "outcomes": outcomes, "task_lengths": lengths}})
    rows = [row("taco", 0, 1.0, "1101", [5, 5, 10, 10]), row("gtbc", 0, 1.0, "1000", [5, 5, 10, 10]),
            row("taco", 1, 1.0, "1111", [5, 10, 5, 10]), row("gtbc", 1, 0.75, "0101", [5, 10, 5, 10])]
    text = report.tests_table(rows)
    assert "| TACO | 1000 | 2 | 100.0 ± 0.0 | 87.5 ± 12.5 |" in text
    assert "| GT-BC | 1000 | 2 | 87.5 ± 12.5 | 37.5 ± 12.5 |" in text
    assert "TACO − GT-BC, task acc. on harder (points)" in text and "seed 0: +50.0" in text
    assert "| TACO | 1000 | 2 | 100.0 | 75.0 |" in text                      # L = 5: 2/2, 2/2; L = 10: 1/2, 2/2
    assert report.tests_table([dict(r, tests=None) for r in rows]) == ""


def test_every_named_condition_was_set_with_the_expert_on_validation_pins():
    """Each of TESTS (its disturbance and PIN lengths) has a row in the committed levels
    (results/dial-harder-levels/levels.json, taco_app/analysis/dial_harder_levels.py) for the
    torque and the velocity variant, on at least 400 validation PINs, where the expert completes
    at least 99 % of them: the harder test is hard for a policy, not for the task."""
    import json
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = json.load(open(os.path.join(root, "results", "dial-harder-levels", "levels.json")))
    for name, condition in disturb.TESTS.items():
        for variant in ("dial", "dial-velocity"):
            found = [r for r in rows if r["variant"] == variant and r["disturbance"] == condition.disturbance.__dict__
                     and r["lengths"] == list(condition.lengths)]
            assert found, f"{name} ({variant}): no level row for {condition.disturbance}, lengths {condition.lengths}"
            assert all(r["n"] >= 400 and r["completed"] >= 0.99 * r["n"] for r in found), (name, variant, found)
