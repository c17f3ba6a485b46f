"""Tests of the ROS bridge's decisions without ROS (ros2_ws/src/taco_bridge/taco_bridge/control.py).

The policy node hands its Controller every joint state, sketch, press and timer tick with the
time it happened; here a clock of the test's own drives it, so timing properties are exact.

(a) the frozen simulator: in 100 of 100 trials (random start, freeze moment, tick phase, rate
    and joint_state_timeout) the zero command comes within one watchdog period of the last joint
    state, and no command is in force on a joint state older than that;
(b) runs and their outcomes: preemption, cancel, halt, a rejected sketch (whose status no longer
    shows the presses of the run before), the time limit, feedback and result, the counters;
(c) the control step on taco_sim's DialEnv: repeated digits are dialled through the release step
    and the press rule, and the velocity interface's shipped model dials PINs;
(d) the hand-over rule (keypad.Handover): a run that starts with the finger within reach of a
    key lifts off it first and never credits a press of that key registered meanwhile; targeted
    preemptions on DialEnv end done, where without the rule some end in a false error.
"""
import math
import re

import numpy as np
import pytest

import taco_sim
from taco_ref.model import Model, load
from taco_ref.policy import PolicyConfig, init_params, stop_probability
from taco_sim import dial

from taco_bridge import keypad
from taco_bridge.control import DELIVERY_MARGIN, OUTCOMES, Controller, joint_bounds, run_offline

PLAUSIBLE_Q = np.concatenate([dial.HOME, [1.2] * 3])      # (J,) home pose, fingers closed
LOW, HIGH = joint_bounds(0.25)                              # (J,), (J,)
KEY_POS = dial.key_positions(np.asarray(dial.STANDARD_LAYOUT))   # (K, 3)


def random_model(stop_bias=-50.0, act_bias=0.0, seed=0, action_dim=dial.ACTION_DIM):
    """A random Dial-sized model; the biases shift every STOP / action logit."""
    cfg = PolicyConfig(state_dim=dial.STATE_DIM, n_subtasks=dial.K, action_dim=action_dim,
                       act_hidden=[32], stop_hidden=[32])
    params = init_params(cfg, np.random.default_rng(seed))
    params["stop.b1"] = params["stop.b1"] + stop_bias                    # (K, 1)
    params["act.b1"] = params["act.b1"] + act_bias                       # (K, A)
    return Model(params, cfg, dial.VOCAB, "gtbc")


def controller(model=None, period=0.04, timeout=0.25, ended=None, limits=None, **kw):
    model = model or random_model(act_bias=1.0)
    limits = dial.TORQUE_LIMITS if limits is None else limits
    on_end = None if ended is None else ended.append
    args = dict(max_subtask_time=20.0, stop_threshold=0.5, press_grace=0.5)
    args.update(kw)
    return Controller(model, KEY_POS, limits, LOW, HIGH, period, timeout, on_end=on_end, **args)


# ----------------------------------------------------------------------------------------------
# (a) the frozen simulator
# ----------------------------------------------------------------------------------------------

def frozen_trial(seed):
    """One run against a simulator that freezes: joint states at 200 Hz (random latency), ticks
    at the control rate from a random phase, the sketch sent at a random moment, the simulator
    frozen at a random moment after it. Returns (timeout, period, last joint state time,
    commands [(t, (A,))], the runs that ended, the arrival time of the state behind each tick)."""
    rng = np.random.default_rng(seed)
    rate = float(rng.choice([25.0, 50.0, 100.0]))
    period = 1.0 / rate
    timeout = float(rng.choice([0.1, 0.25, 0.5]))
    ended = []
    ctl = controller(period=period, timeout=timeout, ended=ended)
    t0 = rng.uniform(0.0, 10.0)
    sketch_at = t0 + rng.uniform(0.0, 0.3)
    freeze_at = sketch_at + rng.uniform(0.05, 1.5)
    phase = rng.uniform(0.0, period)
    events = [(t0 + phase + k * period, "tick")
              for k in range(int((freeze_at - t0 + 2 * timeout) / period) + 2)]
    events += [(t0 + 0.005 * k + rng.uniform(0.0, 0.004), "joint_state")
               for k in range(int((freeze_at - t0) / 0.005))]
    events.append((sketch_at, "sketch"))
    commands, state_behind = [], []
    q = PLAUSIBLE_Q.copy()
    for t, kind in sorted(events):
        if kind == "joint_state":
            q = q + rng.normal(scale=1e-3, size=q.shape)                   # (J,) the arm moves
            ctl.joint_state(q, t)
        elif kind == "sketch":
            ctl.start([3, 1, 4, 1, 5], t)
        else:
            command = ctl.tick(t)
            if command is not None:
                commands.append((t, command))
                state_behind.append(ctl.qpos_time)
    last = max(t for t, kind in events if kind == "joint_state")
    return timeout, period, last, commands, ended, state_behind


@pytest.mark.slow
def test_frozen_simulator_zero_within_one_watchdog_period():
    """Issue: with the simulator frozen the node sent a torque after the last joint state and
    then nothing for ~1 s. Now, in 100 of 100 trials: a zero command sent at most
    joint_state_timeout - DELIVERY_MARGIN after the last joint state (so it arrives within one
    watchdog period), nothing but zeros after it, every non-zero command computed from a joint
    state that is still younger than joint_state_timeout when the next tick's command arrives,
    and the run ends in error by the watchdog."""
    latencies = []
    for seed in range(100):
        timeout, period, last, commands, ended, behind = frozen_trial(seed)
        zero_t = next(t for t, c in commands if t > last and not np.any(c))
        assert zero_t - last <= timeout - DELIVERY_MARGIN + 1e-12, (seed, zero_t - last, timeout)
        assert all(not np.any(c) for t, c in commands if t >= zero_t), seed
        for (t, c), qt in zip(commands, behind):
            if np.any(c):
                assert t + period + DELIVERY_MARGIN - qt <= timeout + 1e-12, (seed, t, qt)
        assert len(ended) == 1 and ended[0].outcome == "error", seed
        assert "no fresh joint state" in ended[0].message, ended[0].message
        latencies.append((zero_t - last) / timeout)
    print(f"\nfrozen simulator: zero command within one watchdog period in {len(latencies)} of 100 "
          f"trials (at {min(latencies):.2f}-{max(latencies):.2f} of joint_state_timeout after the last "
          "joint state)")


def test_a_sketch_before_any_joint_state_waits_one_timeout():
    ended = []
    ctl = controller(ended=ended)
    ctl.start([3], 10.0)
    assert not np.any(ctl.tick(10.0)) and ctl.runner.state == "running"     # zeros while waiting
    ctl.joint_state(PLAUSIBLE_Q, 10.1)
    assert np.any(ctl.tick(10.12))                                          # acts once it has one
    ctl2 = controller(ended=ended)
    ctl2.start([3], 10.0)
    for t in np.arange(10.0, 10.5, 0.04):
        ctl2.tick(t)
    assert ended[-1].outcome == "error" and "none received" in ended[-1].message


WATCHDOG = re.compile(r"no fresh joint state: the next command would arrive ([0-9.]+) s after "
                      r"(the last joint state|the start of the run), beyond joint_state_timeout "
                      r"([0-9.]+) s \((none received|the last one received ([0-9.]+) s ago)")


@pytest.mark.parametrize("seed", range(20))
def test_the_watchdog_message_agrees_with_its_figures(seed):
    """The watchdog's message read "no fresh joint state within 0.25 s (last 0.206 s ago)": the
    run ends when the next command would arrive after joint_state_timeout, which can be while
    the last joint state is younger than it. Now the message gives that arrival time, which
    exceeds the timeout and is the joint state's age plus one period plus DELIVERY_MARGIN."""
    timeout, period, last, commands, ended, _ = frozen_trial(seed)
    message = ended[0].message
    match = WATCHDOG.match(message)
    assert match, message
    note = f"seed {seed}: {message}"
    arrival, after, stated_timeout = float(match[1]), match[2], float(match[3])
    assert stated_timeout == pytest.approx(timeout) and arrival > timeout, note
    assert after == "the last joint state" and match[5] is not None, note
    age = float(match[5])
    assert arrival == pytest.approx(age + period + DELIVERY_MARGIN, abs=2e-3), note
    zero_t = next(t for t, c in commands if t > last and not np.any(c))
    assert age == pytest.approx(zero_t - last, abs=1e-3), note          # the age at the trip


def test_the_watchdog_message_without_any_joint_state():
    ended = []
    ctl = controller(ended=ended)
    ctl.start([3], 10.0)
    for t in np.arange(10.0, 10.5, 0.04):
        ctl.tick(t)
    match = WATCHDOG.match(ended[-1].message)
    assert match and match[2] == "the start of the run" and match[4] == "none received", ended[-1].message
    assert float(match[1]) > 0.25


def test_the_timeout_must_exceed_one_period():
    with pytest.raises(ValueError, match="must exceed one control period"):
        controller(period=0.04, timeout=0.045)


# ----------------------------------------------------------------------------------------------
# (b) runs, outcomes, feedback, result, counters
# ----------------------------------------------------------------------------------------------

def ticking(ctl, t_from, t_to, period=0.04):
    """Fresh joint states and ticks from t_from to t_to; returns the commands [(t, (A,))]."""
    out = []
    for t in np.arange(t_from, t_to, period):
        ctl.joint_state(PLAUSIBLE_Q, t)
        command = ctl.tick(t + 0.001)
        if command is not None:
            out.append((t, command))
    return out


def test_preempt_cancel_halt_and_results():
    ended = []
    ctl = controller(ended=ended)
    ticking(ctl, 0.0, 0.2)
    first = ctl.start([1, 2], 0.2, goal=b"a")
    ticking(ctl, 0.2, 0.6)
    second = ctl.start([3], 0.6, goal=b"b")
    assert ended == [first] and first.outcome == "preempted" and "newer goal" in first.message
    result = ctl.result(first)
    assert set(result) == {"success", "state", "completed", "stop_times", "keypad", "pressed",
                           "steps", "elapsed", "message"}
    assert result["success"] is False and result["steps"] == 10 and result["elapsed"] == pytest.approx(0.4)
    ticking(ctl, 0.6, 0.8)
    ctl.halt(0.8, "canceled")
    assert second.outcome == "canceled" and "canceled after 0 of 1 sub-tasks" in second.message
    assert not np.any(ctl.take_zeros()) and ctl.tick(0.84) is None          # zeros sent once, now
    ctl.start([4], 1.0)
    ctl.halt(1.1)
    assert ended[-1].outcome == "halted" and ended[-1].goal is None
    assert ctl.runner.state == "idle" and not np.any(ctl.tick(1.12))        # zeros at the next tick
    assert {r.outcome for r in ended} <= set(OUTCOMES)


def test_done_with_and_without_a_keypad():
    """Without a keypad, done is the policy's claim; with one, only once the keypad registered
    the sketch; a key off the sketch ends the run in error at once."""
    ended = []
    ctl = controller(model=random_model(stop_bias=50.0), ended=ended)
    ctl.press_rule = keypad.PressRule()
    ctl.start([3], 0.0)
    ctl.press_rule.pressed = True                       # as if key 3 went down
    ctl.press_rule.clear = True
    ctl.press_rule.digit = 3
    ctl.joint_state(PLAUSIBLE_Q, 0.0)
    ctl.tick(0.01)
    ctl.joint_state(PLAUSIBLE_Q, 0.04)
    ctl.tick(0.05)
    assert ended and ended[-1].outcome == "done" and ctl.result(ended[-1])["success"] is True
    run = ctl.start([3, 1], 1.0, keypad_present=True)
    ctl.press("3", 1.1)
    assert run.in_progress and ctl.status()["pressed"] == ["3"]
    ctl.press("7", 1.2)
    assert run.outcome == "error" and "registered 3 7, not the sketch 3 1" in run.message
    assert ctl.status()["state"] == "error"


def test_a_rejected_sketch_shows_no_presses_of_the_run_before():
    """Issue: after a rejected sketch the error status still showed the previous run's presses."""
    ended = []
    ctl = controller(ended=ended)
    ctl.start([3, 1], 0.0, keypad_present=True)
    ctl.press("3", 0.5)
    assert ctl.status()["pressed"] == ["3"]
    ctl.reject("sketch rejected: unknown sub-task 'x'", 0.6)
    status = ctl.status()
    assert status["state"] == "error" and status["error"].startswith("sketch rejected")
    assert status["pressed"] is None and status["sketch"] == []
    assert ended[-1].outcome == "error" and "rejected sketch" in ended[-1].message
    assert ctl.counters.rejected_sketches == 1 and not np.any(ctl.tick(0.7))


def test_time_limit_feedback_and_counters():
    ended = []
    ctl = controller(ended=ended)
    ticking(ctl, 0.0, 0.1)
    run = ctl.start([5, 6], 0.1, goal=b"g", time_limit=0.5)
    ticking(ctl, 0.1, 0.3)
    feedback = ctl.feedback(0.3)
    assert feedback["active"] == 0 and feedback["subtask"] == "5" and feedback["completed"] == []
    assert 0.0 <= feedback["stop_probability"] < 0.5 and feedback["elapsed"] == pytest.approx(0.2)
    ticking(ctl, 0.3, 0.8)
    assert run.outcome == "error" and "time limit of 0.5 s reached after 0 of 2 sub-tasks" in run.message
    # a late tick is an overrun; the watchdog counts its trips
    ctl.start([5], 1.0)
    ctl.joint_state(PLAUSIBLE_Q, 1.0)
    ctl.tick(1.0)
    ctl.counters.window(1.0)                             # a new window of tick statistics
    before = ctl.counters.overruns
    ctl.tick(1.04)
    ctl.tick(1.18)                                       # 3.5 periods late; the state still usable
    assert ctl.counters.overruns == before + 1 and ctl.counters.watchdog_trips == 0
    ctl.tick(1.3)
    assert ctl.counters.watchdog_trips == 1 and ended[-1].outcome == "error"
    rate, max_interval, _ = ctl.counters.window(1.5)
    assert max_interval == pytest.approx(0.14) and rate == pytest.approx(3 / 0.5)


def test_implausible_and_stale_joint_states():
    ended = []
    ctl = controller(ended=ended)
    ctl.start([3], 0.0)
    ctl.joint_state(None, 0.01, reason="stamped 3600 s ago", stale=True)
    assert ctl.runner.state == "running" and ctl.counters.stale_joint_states == 1
    ctl.joint_state(None, 0.02, reason="joint x named twice")
    assert ended[-1].outcome == "error" and "named twice" in ended[-1].message
    assert ctl.counters.rejected_joint_states == 1 and not np.any(ctl.tick(0.03))


# ----------------------------------------------------------------------------------------------
# (c) the control step on taco_sim's DialEnv
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sketch", [[7, 7, 2]] + [pytest.param(s, marks=pytest.mark.slow)
                                                   for s in ([5, 5, 1], [0, 0, 0], [3, 8, 2, 7, 4, 1, 5])])
@pytest.mark.slow
def test_repeated_digits_offline(sketch):
    """The controller's control step (release step + press rule) on taco_sim's DialEnv: every
    digit is pressed, repeats included; with the plain runner (no keypad rules) the second of two
    equal digits is not pressed."""
    model = load(taco_sim.get("dial").models["default"])
    for seed in (0, 1):
        ctl = controller(model=model, period=dial.CONTROL_DT)
        env = dial.DialEnv()
        env.reset(seed=seed, layout="standard")
        run = run_offline(ctl, env, sketch, env.step)
        assert run.outcome == "done" and env.presses == sketch, (seed, env.presses)
    if sketch[0] == sketch[1]:            # the plain runner, for contrast
        env = dial.DialEnv()
        env.reset(seed=0, layout="standard")
        ctl.runner.start(sketch, 0.0)
        for t in range(dial.budget(len(sketch))):
            action = ctl.runner.step(env.obs, t * dial.CONTROL_DT)
            if action is None:
                break
            env.step(action)
        assert env.presses[:2] != sketch[:2], "the plain runner dialled a repeat: test is moot"


@pytest.mark.slow
def test_velocity_interface_dials_offline():
    """The controller with the shipped velocity model, on taco_sim's DialEnv executing the
    commands with its velocity loop: 6 velocities within the limits and the keypad registers the
    PIN (a repeated digit included, through the release step)."""
    model = load(taco_sim.get("dial-velocity").models["default"])
    for sketch, seed in (([0, 5, 1, 6], 0), ([7, 7, 2], 1)):
        ctl = controller(model=model, period=dial.CONTROL_DT, limits=dial.VELOCITY_LIMITS)
        env = dial.DialEnv()
        env.reset(seed=seed, layout="standard")
        commands = []

        def step(command):
            commands.append(command)
            env.velocity_step(command)
        run = run_offline(ctl, env, sketch, step)
        assert run.outcome == "done" and env.presses == sketch, (sketch, env.presses)
        assert all(c.shape == (6,) and (np.abs(c) <= dial.VELOCITY_LIMITS + 1e-12).all() for c in commands)
        assert not math.isnan(ctl.result(run)["elapsed"])


def test_a_model_with_views_decides_over_them_in_the_bridge():
    """A model whose config sets views = n decides over taco_sim.dial.augment.other_key_views
    of each state in the bridge, as `taco evaluate` does (spec/evaluation.md eq. (8)); without
    it, over the state alone."""
    from taco_sim.dial.augment import other_key_views
    plain = random_model(stop_bias=0.0, act_bias=1.0)
    viewed = Model(plain.params, plain.policy, plain.vocab, plain.algo, config={"views": 4})
    assert controller(plain).runner.views is None
    views = controller(viewed).runner.views
    state = dial.observe(PLAUSIBLE_Q, np.array([0.0, 0.5, 0.3]), KEY_POS)
    np.testing.assert_array_equal(views(3, state), other_key_views(3, state, 4))


@pytest.mark.slow
def test_bridge_offline_bench_counts_dialled_pins(tmp_path, capsys):
    """taco_bridge/offline.py runs this control step over the protocol's test PINs: the shipped
    velocity model dials the first ones; a model whose STOP never fires dials none (time-outs)."""
    import json
    from taco_ref.model import save
    from taco_bridge import offline as bench
    bench.main([taco_sim.get("dial-velocity").models["default"], "--interface", "velocity", "--n-tasks", "2"])
    report = json.loads(capsys.readouterr().out)
    assert (report["n_tasks"], report["dialled"], report["interface"]) == (2, 2, "velocity")
    assert (report["outcomes"], report["failures"]) == ("11", {})
    save(random_model(stop_bias=-50.0), str(tmp_path / "never-stops"))
    bench.main([str(tmp_path / "never-stops"), "--n-tasks", "1"])
    report = json.loads(capsys.readouterr().out)
    assert report["dialled"] == 0 and report["outcomes"] == "0" and sum(report["failures"].values()) == 1


def test_bridge_offline_names_what_went_wrong_with_a_pin_not_dialled():
    """offline.pin_failure: the run's outcome and how much of the PIN the keypad registered;
    a dialled PIN adds nothing to the list, a PIN the run called done whose keypad disagrees does."""
    from types import SimpleNamespace as Run
    from taco_bridge import offline as bench
    why = []
    assert bench._dialled(Run(outcome="done", message="dialled"), [1, 2, 3], [1, 2, 3], why) and why == []
    assert not bench._dialled(Run(outcome=None, message=""), [1, 2], [1, 2, 3], why)
    assert not bench._dialled(Run(outcome="done", message="dialled 1 2 3 in 4.2 s"), [1, 2, 2], [1, 2, 3], why)
    assert not bench._dialled(Run(outcome="error", message="sub-task 2 (position 1) did not stop within 20 s"),
                              [], [1, 2, 3], why)
    assert why == ["the step budget ran out; 2 of 3 digits registered", "done; another key registered",
                   "error: a sub-task did not stop within 20 s; 0 of 3 digits registered"]


def test_bridge_offline_runs_a_named_test_through_the_disturbed_arm(monkeypatch, capsys):
    """--test NAME: the named test's PINs (here 5-10 digits long) and its disturbed task
    environment, whose step the commands go through."""
    import json
    from taco_ref import evaluate
    from taco_bridge import offline as bench
    from taco_sim.dial import expert
    stepped = []
    step = expert.DialTask.step
    monkeypatch.setattr(expert.DialTask, "step",
                        lambda self, a: (stepped.append((self.disturbance, len(self.sketch))), step(self, a))[1])
    bench.main([taco_sim.get("dial").models["default"], "--test", "long", "--n-tasks", "2"])
    report = json.loads(capsys.readouterr().out)
    assert (report["test"], report["n_tasks"], report["dialled"]) == ("long", 2, 2)
    lengths = sorted({L for _, L in stepped})
    assert lengths == sorted(int((row >= 0).sum()) for row in evaluate.protocol_sketches(taco_sim.get("dial"), 2, test="long"))
    stepped.clear()
    bench.main([taco_sim.get("dial").models["default"], "--test", "noise-3", "--n-tasks", "1"])
    assert json.loads(capsys.readouterr().out)["test"] == "noise-3"
    assert stepped and all(d is not None and d.noise == 0.03 for d, _ in stepped)


# ----------------------------------------------------------------------------------------------
# (d) the hand-over rule
# ----------------------------------------------------------------------------------------------

def finger_at(digit, height, dx=0.0):
    """An observation whose fingertip is `height` m above key digit's top and dx m beside it."""
    fingertip = KEY_POS[digit] + np.array([dx, 0.0, height])                 # (3,)
    return np.concatenate([PLAUSIBLE_Q, (KEY_POS - fingertip).ravel()])      # (D,)


def test_key_in_reach_and_the_handover_rule():
    assert keypad.key_in_reach(finger_at(5, 0.03)) == 5
    assert keypad.key_in_reach(finger_at(5, -0.01, dx=0.02)) == 5
    assert keypad.key_in_reach(finger_at(5, keypad.REACH_HEIGHT + 0.001)) is None
    assert keypad.key_in_reach(finger_at(5, 0.0, dx=keypad.REACH_RADIUS + 0.001)) != 5
    rule = keypad.Handover()
    rule.begin(finger_at(8, 0.02))
    assert rule.lifting and rule.inherits(8) and not rule.inherits(6)
    assert rule.update(finger_at(8, 0.04)) and rule.inherits(8)              # still within reach
    assert not rule.update(finger_at(8, keypad.REACH_HEIGHT + 1e-4)) and not rule.inherits(8)
    assert not rule.update(finger_at(8, 0.0))      # back down later: the run's own press
    rule.begin(None)                               # no joint state yet: the first update decides
    assert not rule.lifting and rule.update(finger_at(2, 0.01)) and rule.inherits(2)


def test_a_press_registered_while_lifting_belongs_to_the_run_before():
    """The controller, clocked by hand: a sketch starts with the finger 1 cm above key 8 (the
    old run was pressing it); the keypad's 8 that follows is not the new run's (no error, not in
    its presses, counted as inherited); the release step commands while the finger is within
    reach; once it is out of reach the same key's press counts."""
    ended = []
    ctl = controller(model=random_model(stop_bias=-50.0, act_bias=1.0), ended=ended)
    q_at = {}

    def at(obs):                       # joint state whose observation is obs: patch the kinematics
        q = PLAUSIBLE_Q + 1e-3 * len(q_at)
        q_at[q.tobytes()] = obs
        return q
    real = dial.observation_from_joints
    dial.observation_from_joints = lambda q, key_pos: q_at.get(np.asarray(q).tobytes(), real(q, key_pos))
    try:
        ctl.joint_state(at(finger_at(8, 0.01)), 0.0)
        run = ctl.start([6, 9, 3], 0.0, keypad_present=True)
        assert ctl.handover.inherits(8)
        ctl.press("8", 0.01)
        assert run.presses == [] and run.inherited == ["8"] and ctl.counters.inherited_presses == 1
        assert np.any(ctl.tick(0.02)) and run.in_progress and ctl.runner.steps == 0   # lifting
        ctl.joint_state(at(finger_at(8, 0.06)), 0.05)
        ctl.tick(0.06)
        assert not ctl.handover.lifting and ctl.runner.steps == 1
        ctl.press("8", 0.07)                        # now a press of 8 is this run's: an error
        assert not run.in_progress and run.outcome == "error" and run.presses == ["8"]
    finally:
        dial.observation_from_joints = real


def test_feedback_stop_probability_is_a_probability_from_the_first_message():
    """The first feedback messages of a goal carried stop_probability NaN: the run's P(STOP) was
    only computed at the end of a control step that reached the sub-policies. Now it is a number
    in [0, 1] in every feedback: P(STOP) of the active sub-task on the latest joint state from the
    start (before the first tick), 0 while there is none (the run waits, commanding zeros, and
    cannot stop), on the hand-over's release steps too, and 0 once no sub-task is active."""
    ended = []
    model = random_model(stop_bias=-2.0, act_bias=1.0)
    ctl = controller(model=model, ended=ended)

    def p_stop(k, q):
        return float(stop_probability(model.params, model.policy, k,
                                      dial.observation_from_joints(q, KEY_POS)))

    ctl.joint_state(PLAUSIBLE_Q, 0.0)
    ctl.start([6, 9], 0.0)
    first = ctl.feedback(0.0)                                   # before any tick
    assert first["active"] == 0 and first["stop_probability"] == pytest.approx(p_stop(6, PLAUSIBLE_Q))
    assert 0.0 < first["stop_probability"] < 1.0
    for t, _ in ticking(ctl, 0.04, 0.4):
        f = ctl.feedback(t)
        assert math.isfinite(f["stop_probability"]) and 0.0 <= f["stop_probability"] <= 1.0, f
    waiting = controller(model=model)                           # no joint state yet
    waiting.start([6], 1.0)
    assert waiting.feedback(1.0)["stop_probability"] == 0.0
    assert not np.any(waiting.tick(1.04)) and waiting.feedback(1.04)["stop_probability"] == 0.0
    waiting.joint_state(PLAUSIBLE_Q, 1.05)
    waiting.tick(1.08)
    assert waiting.feedback(1.08)["stop_probability"] == pytest.approx(p_stop(6, PLAUSIBLE_Q))
    ctl.halt(0.5)
    assert ctl.feedback(0.5)["active"] == -1 and ctl.feedback(0.5)["stop_probability"] == 0.0


def test_feedback_stop_probability_during_the_handover():
    """While the run lifts off the key the run before pressed (release steps, no decision of its
    own sub-policy), its P(STOP) is still reported, on the state of that step."""
    model = random_model(stop_bias=-2.0, act_bias=1.0)
    ctl = controller(model=model)
    obs = finger_at(8, 0.01)
    real = dial.observation_from_joints
    dial.observation_from_joints = lambda q, key_pos: obs
    try:
        ctl.joint_state(PLAUSIBLE_Q, 0.0)
        ctl.start([6, 9, 3], 0.0, keypad_present=True)
        assert ctl.handover.lifting
        assert np.any(ctl.tick(0.02)) and ctl.handover.lifting and ctl.runner.steps == 0
        p = ctl.feedback(0.02)["stop_probability"]
        assert p == pytest.approx(float(stop_probability(model.params, model.policy, 6, obs))), p
    finally:
        dial.observation_from_joints = real


@pytest.mark.slow
def test_targeted_preemptions_never_end_in_a_false_error():
    """The hardest case of taco_bridge/offline.py --preempt (the new sketch one control step
    before the old key registers, lead 0), on the shipped model: every new run ends done; with the
    rule off, some of the same trials end in error ("the keypad registered 6, not the sketch
    2 5 0 6"), so the trials do reach the case."""
    from taco_bridge import offline as bench
    model = load(taco_sim.get("dial").models["default"])
    seeds = (12, 21, 30, 52, 65, 72, 81, 98, 0, 1)
    trials = [bench.preemption_trial(model, seed, lead=0) for seed in seeds]
    assert [t["outcome"] for t in trials] == ["done"] * len(seeds), [t for t in trials if t["outcome"] != "done"]
    assert sum(bool(t["inherited"]) for t in trials) >= 3
    saved = keypad.key_in_reach
    keypad.key_in_reach = lambda obs: None
    try:
        off = [bench.preemption_trial(model, seed, lead=0)["outcome"] for seed in seeds[:4]]
    finally:
        keypad.key_in_reach = saved
    assert off.count("error") >= 1, off


@pytest.mark.slow
def test_a_finger_within_reach_needs_several_steps_to_press(tmp_path, capsys):
    """The hand-over rule's premise (keypad.REACH_HEIGHT, REACH_RADIUS): in expert
    demonstrations and in the shipped model's rollouts, a finger that comes within reach of a
    key takes several control steps to press it, so a new run's sub-policy can turn away;
    the fingertip is under the key's top at the pressing step. With reach set far too small,
    the analysis sees presses begin from out of reach, so the figure can fail."""
    import json
    from taco_app.analysis import dial_approach_heights as heights
    out = tmp_path / "heights.json"
    heights.main(["--demos", "8", "--n-tasks", "2", "--model", taco_sim.get("dial").models["default"],
                  "--out", str(out)])
    capsys.readouterr()
    figures = json.loads(out.read_text())["sources"]
    assert len(figures) == 2
    for s in figures.values():
        assert s["n_presses"] >= 8 and s["steps_in_reach"]["min"] >= 5, s["steps_in_reach"]
        assert s["height"][0][2] < 0 < s["height"][5][2]                   # medians, mm
    real = keypad.REACH_HEIGHT
    keypad.REACH_HEIGHT = 0.005
    try:
        assert heights.summary(heights.demo_approaches(heights.timing.instrumented_demos(2, 1)))[
            "steps_in_reach"]["min"] <= 2
    finally:
        keypad.REACH_HEIGHT = real
