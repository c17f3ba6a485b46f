"""The policy node's decisions as plain Python, without ROS: runs, the watchdog, the keypad rules,
the action's feedback and result, and the control loop's counters for the diagnostics.

PolicyNode (policy_node.py) hands a Controller every joint state, sketch, key press and timer
tick together with the time it happened (time.monotonic() seconds) and publishes what comes back;
the tests drive it with a clock of their own (tests/test_bridge_control.py).

The control loop waits on nothing but its timer. A tick reads the latest joint state the
subscription stored, asks the sub-policies (a fixed-size network: bounded work) and returns one
command; it never waits for a joint state, a press or a client. Its bounds:

- **Joint-state staleness.** A command stays in force until the next tick, one control period
  later, and reaches the controller DELIVERY_MARGIN after it is sent at the latest (DDS on one
  machine takes 1-2 ms; on a 2-core machine at load 3-6, transport and a late timer together
  took up to 12 ms: bench/bench_bridge.py --frozen), so a joint state may drive a command only
  if it will still be younger than joint_state_timeout when the next tick's command arrives:
  age + period + DELIVERY_MARGIN <= timeout (`usable`). At the first tick where no such state
  exists the run ends (zeros): with ticks on time, the zero command is sent within
  joint_state_timeout - DELIVERY_MARGIN of the last joint state and arrives within
  joint_state_timeout, and no command is ever in force on a state older than that. A sketch
  that starts before any fresh joint state gets the same allowance from its start.
- **Inference.** One decision evaluates the active sub-policy's action and STOP nets (two on a
  hand-over, plus the release step's), whose cost is fixed by the model; the tick's duration is
  measured and reported (`Counters`), and a tick that comes later than 1.5 periods after the one
  before counts as an overrun.
- **Publishing.** At most one command per tick, decided here; zeros exactly once when a run ends.

Runs. A run is one sketch from `taco/sketch` or one goal of the `taco/execute_sketch` action;
there is one at a time, and a new one preempts the one in progress (which ends `preempted`).
It ends in one of the outcome states of OUTCOMES; `on_end(run)` is then called once, which the
node uses to finish the goal.

Symbol | Shape | Meaning
J      |       | joints of the joint states, the model's observation order (9)
A      |       | commanded joints: 9 (effort) or the 6 arm joints (velocity), the model's action order
K      |       | sub-tasks (digits)
D      |       | observation size = 39
L      |       | sketch length
"""
import math
from dataclasses import dataclass, field

import numpy as np

from taco_ref import evaluate, policy
from taco_ref.runner import SketchRunner
from taco_sim import dial
from taco_sim.dial.env import load_model as load_arm

from taco_bridge import keypad

CONTINUOUS_RANGE = (-2 * math.pi, 4 * math.pi)
"""rad: the range accepted for a joint the MJCF leaves unlimited (JACO2 joint 1 turns freely):
two turns around [0, 2 pi), the range the MJCF gives the continuous wrist joints 4-6."""
OUTCOMES = ('done', 'error', 'canceled', 'preempted', 'halted', 'deactivated')
"""How a run ends: done (the only success: every sub-task stopped and, with a keypad, the keypad
registered exactly the sketch), error (a safety rule, a keypad mismatch, the time limit, a
rejected sketch on the topic), canceled (the action's cancel), preempted (a newer run), halted
("stop" on the topic), deactivated (the node was deactivated or shut down)."""
DELIVERY_MARGIN = 0.02
"""s allowed for a command to reach the controller (module docstring)."""
OVERRUN_FACTOR = 1.5
"""A tick later than this many periods after the one before is an overrun."""


def joint_bounds(margin):
    """(low (J,), high (J,)) joint positions accepted, rad: the ranges of taco_sim.dial's MJCF of
    the arm (CONTINUOUS_RANGE for a joint it leaves unlimited) widened by margin, JOINTS order."""
    arm, _ = load_arm()
    low, high = np.empty(len(dial.JOINTS)), np.empty(len(dial.JOINTS))
    for j, name in enumerate(dial.JOINTS):
        joint = arm.joint(name).id
        low[j], high[j] = arm.jnt_range[joint] if arm.jnt_limited[joint] else CONTINUOUS_RANGE
    return low - margin, high + margin


def joint_positions(msg, names, low, high):
    """(positions (J,) of names taken from a JointState by name, None) when the message is
    plausible, else (None, the reason): each name once in the message, a position for each,
    finite and within [low, high] (J,). Extra joints are ignored."""
    seen = set()
    for n in msg.name:
        if n in seen:
            return None, f'joint {n} named twice'
        seen.add(n)
    index = {n: i for i, n in enumerate(msg.name)}
    missing = [n for n in names if n not in index or index[n] >= len(msg.position)]
    if missing:
        return None, f'no position for {" ".join(missing)}'
    q = np.array([msg.position[index[n]] for n in names], dtype=np.float64)   # (J,)
    for j, n in enumerate(names):
        if not low[j] <= q[j] <= high[j]:                                  # NaN fails too
            return None, f'joint {n} at {q[j]:g} rad, outside [{low[j]:.3f}, {high[j]:.3f}]'
    return q, None


@dataclass
class Run:
    """One sketch being (or having been) executed.

    Field      | Meaning
    sketch     | (L,) sub-task ids
    started    | time it started (s, the controller's clock)
    goal       | the node's handle of the action goal; None for a sketch from the topic
    time_limit | s the whole run may take; 0: none
    keypad     | a keypad reports presses on dial/pressed during this run
    presses    | the names it registered in this run
    inherited  | the names it registered while this run lifted off the key the run before
               | was pressing (keypad.Handover): that run's, not in presses
    verdict    | the keypad's verdict on a finished run: None, 'done' or the mismatch text
    done_time  | time of the last STOP
    stop_probability | P(STOP | state) of the active sub-policy on the latest joint state it
               | was given (at the start, if a joint state was there, then at every control
               | step); 0 before any (the run waits, commanding zeros: no STOP can come)
    outcome    | None while in progress; then one of OUTCOMES
    message    | one line: what was done, or why it ended
    ended      | time it ended
    completed  | sub-task names whose STOP was honoured; stop_times, steps: the runner's
    """

    sketch: list
    started: float
    goal: object = None
    time_limit: float = 0.0
    keypad: bool = False
    presses: list = field(default_factory=list)
    inherited: list = field(default_factory=list)
    verdict: str = None
    done_time: float = None
    stop_probability: float = 0.0
    outcome: str = None
    message: str = ''
    ended: float = None
    completed: list = field(default_factory=list)
    stop_times: list = field(default_factory=list)
    steps: int = 0

    @property
    def in_progress(self):
        return self.outcome is None


@dataclass
class Counters:
    """The control loop's counters since start-up, and the tick timing of the current window
    (reset by `window`), for the node's diagnostics."""

    ticks: int = 0
    overruns: int = 0
    stale_joint_states: int = 0
    rejected_joint_states: int = 0
    rejected_sketches: int = 0
    watchdog_trips: int = 0
    inherited_presses: int = 0
    runs: int = 0
    runs_done: int = 0
    last_rejection: str = None
    window_ticks: int = 0
    window_start: float = None
    window_max_interval: float = 0.0
    window_max_duration: float = 0.0

    def window(self, now):
        """(ticks per second, largest interval between ticks (s), longest tick (s)) since the
        last call, and start a new window."""
        span = None if self.window_start is None else now - self.window_start
        rate = self.window_ticks / span if span else 0.0
        out = (rate, self.window_max_interval, self.window_max_duration)
        self.window_ticks, self.window_start = 0, now
        self.window_max_interval = self.window_max_duration = 0.0
        return out


class Controller:
    """The decisions of the policy node; see the module docstring.

    Symbol           | Shape  | Meaning
    model            |        | taco_ref.model.Model of the Dial domain (its interface's); with
                     |        | views > 1 in its config, every decision is over that many views
                     |        | of the state (taco_sim.dial.augment.other_key_views), and with
                     |        | stop_hold > 1 a STOP must hold that many ticks, as in
                     |        | `taco evaluate`
    key_pos          | (K, 3) | key top positions (m), base frame
    limits           | (A,)   | action limits (N m or rad/s)
    low, high        | (J,)   | joint positions accepted (joint_bounds)
    period           |        | s between ticks (1 / rate)
    timeout          |        | joint_state_timeout (s), > period + DELIVERY_MARGIN
    max_subtask_time |        | s one sub-task may stay active
    stop_threshold   |        | a sub-policy stops when P(STOP) exceeds it
    press_grace      |        | s after the last STOP for the keypad to report the last key
    on_end           |        | called with the Run when it ends (once per run)
    """

    def __init__(self, model, key_pos, limits, low, high, period, timeout, max_subtask_time,
                 stop_threshold, press_grace, on_end=None):
        if not timeout > period + DELIVERY_MARGIN:
            raise ValueError(f'joint_state_timeout {timeout:g} s must exceed one control period '
                             f'{period:g} s + {DELIVERY_MARGIN:g} s')
        self.model, self.key_pos, self.low, self.high = model, key_pos, low, high
        self.period, self.timeout, self.press_grace = period, timeout, press_grace
        n_views = int((model.config or {}).get("views", 1))   # the model's execution settings
        stop_hold = int((model.config or {}).get("stop_hold", 1))
        self.runner = SketchRunner(model.params, model.policy, model.vocab, limits=limits,
                                   max_subtask_time=max_subtask_time, stop_threshold=stop_threshold,
                                   views=evaluate.state_views(dial.DOMAIN, n_views), stop_hold=stop_hold)
        self.on_end = on_end
        self.press_rule = keypad.PressRule()
        self.handover = keypad.Handover()
        self.run = None                   # the Run in progress, or the last one
        self.qpos = None                  # (J,) latest accepted joint positions, model order
        self.qpos_time = None             # time of its arrival
        self.js_rejected = None           # why the latest joint state was rejected, or None
        self.zeros_due = False            # a run ended outside a tick: zeros at the next tick
        self.last_tick = None
        self.counters = Counters()

    # ----- inputs -----------------------------------------------------------------------------

    def joint_state(self, q, now, reason=None, stale=False):
        """A joint state arrived at now: positions q (J,), or None with the reason it was
        rejected. An implausible one ends a run at once; a stale one (stale=True: stamped too long
        ago) is only not used, so the watchdog ends the run."""
        if q is None:
            self.js_rejected = f'joint state rejected: {reason}'
            if stale:
                self.counters.stale_joint_states += 1
            else:
                self.counters.rejected_joint_states += 1
                self.fail(self.js_rejected, now)
            return
        self.qpos, self.qpos_time, self.js_rejected = q, now, None

    def start(self, sketch, now, goal=None, time_limit=0.0, keypad_present=False):
        """Begin a run of sketch (L,) sub-task ids; the run in progress, if any, ends preempted.
        Returns the new Run."""
        if self.run is not None and self.run.in_progress:
            self.end('preempted', f'preempted by a newer {"goal" if goal is not None else "sketch"} '
                     f'after {self.summary()}', now)
        self.runner.start(sketch, now)
        self.press_rule = keypad.PressRule()
        self.handover.begin(None if self.qpos is None
                            else dial.observation_from_joints(self.qpos, self.key_pos))
        self.run = Run(sketch=list(sketch), started=now, goal=goal, time_limit=float(time_limit),
                       keypad=keypad_present)
        if self.qpos is not None:          # the first feedback, before any tick, has a real P(STOP)
            self.update_stop_probability(dial.observation_from_joints(self.qpos, self.key_pos))
        self.counters.runs += 1
        return self.run

    def halt(self, now, outcome='halted', message=None):
        """Stop whatever runs ("stop" on the topic, cancel, deactivation): back to idle, one zero
        command due at the next tick (`take_zeros` takes it now instead)."""
        if self.run is not None and self.run.in_progress:
            what = {'halted': 'halted by "stop"', 'canceled': 'canceled',
                    'deactivated': 'the node was deactivated'}.get(outcome, outcome)
            self.end(outcome, message or f'{what} after {self.summary()}', now)
        self.runner.halt()
        self.zeros_due = True

    def take_zeros(self):
        """The zero command due, to publish now rather than at the next tick (cancel: the arm
        halts at once); the next tick then sends nothing more."""
        self.zeros_due = False
        return self.zeros()

    def reject(self, reason, now):
        """A sketch on the topic that could not be parsed: whatever ran halts (its run ends in
        error), the status shows the reason and nothing of the run before (no sketch, no
        presses); zeros at the next tick."""
        self.counters.rejected_sketches += 1
        self.counters.last_rejection = reason
        if self.run is not None and self.run.in_progress:
            self.end('error', f'a rejected sketch on taco/sketch halted it after {self.summary()}', now)
        self.runner.reject(reason)
        self.run = None
        self.zeros_due = True

    def rejected_goal(self, reason):
        """A goal of the action refused: counted; the run in progress goes on."""
        self.counters.rejected_sketches += 1
        self.counters.last_rejection = reason

    def press(self, name, now):
        """The keypad registered key `name` at now. While the run lifts off the key it
        inherited, a press of that key belongs to the run before (keypad.Handover): counted in
        the run's `inherited`, not in its presses."""
        run = self.run
        if run is None or self.runner.state not in ('running', 'done') or run.verdict is not None:
            return
        if name in self.model.vocab and self.handover.inherits(self.model.vocab.index(name)):
            run.inherited.append(name)
            self.counters.inherited_presses += 1
            return
        run.keypad = True
        run.presses.append(name)
        self.check_keypad(now)

    def fail(self, reason, now):
        """End a running sketch in error from outside the control tick; zeros at the next tick."""
        if self.runner.state == 'running':
            self.runner.fail(reason)
            self.zeros_due = True
            self.end('error', reason, now)

    # ----- the control tick -------------------------------------------------------------------

    def usable(self, now):
        """True when the latest joint state may drive a command at now: it will still be younger
        than timeout when the next tick's command arrives (module docstring)."""
        return (self.qpos is not None
                and now - self.qpos_time + self.period + DELIVERY_MARGIN <= self.timeout)

    def tick(self, now, duration_of_last=None):
        """One control step at now: the (A,) command to publish (zeros when a run ended or
        waits), or None when nothing is to be sent (idle: the controller holds the last zeros).
        duration_of_last: how long the previous tick took (s), for the counters."""
        c = self.counters
        c.ticks += 1
        c.window_ticks += 1
        if self.last_tick is not None:
            interval = now - self.last_tick
            c.window_max_interval = max(c.window_max_interval, interval)
            if interval > OVERRUN_FACTOR * self.period:
                c.overruns += 1
        if duration_of_last is not None:
            c.window_max_duration = max(c.window_max_duration, duration_of_last)
        self.last_tick = now
        command = None
        if self.runner.state == 'running':
            try:
                action = self.control_step(now)
            except Exception as err:  # a bug or bad data must not kill the node holding the arm
                self.runner.fail(f'control step failed: {type(err).__name__}: {err}')
                action = None
            if action is None and self.runner.state == 'done' and self.run.done_time is None:
                self.run.done_time = now
            command = self.zeros() if action is None else action
            self.sync_run(now)
        elif self.zeros_due:
            command = self.zeros()
        self.zeros_due = False
        self.check_keypad(now)
        return command

    def control_step(self, now):
        """The (A,) action to command now, or None (zeros); applies the watchdog, the time limit
        and the keypad rules (taco_bridge.keypad: release step, press rule)."""
        run = self.run
        if run.time_limit and now - run.started > run.time_limit:
            self.runner.fail(f'time limit of {run.time_limit:g} s reached after {self.summary()}')
            return None
        if not self.usable(now):
            fresh = self.qpos is not None and self.qpos_time >= self.runner.started
            since = now - (self.qpos_time if fresh else self.runner.started)
            if since + self.period + DELIVERY_MARGIN > self.timeout:
                self.counters.watchdog_trips += 1
                self.runner.fail(self.watchdog_message(now, since, fresh))
            return None                           # waits for the first joint state: zeros
        obs = dial.observation_from_joints(self.qpos, self.key_pos)              # (D,)
        if self.handover.update(obs):                  # lift off the key the run before pressed
            action = self.release_action(obs, self.handover.digit)
        else:
            action = self.decide(obs, now)
        self.update_stop_probability(obs)
        return action

    def watchdog_message(self, now, since, fresh):
        """Why the watchdog ends the run at now: the next command would arrive period +
        DELIVERY_MARGIN from now, which is since + period + DELIVERY_MARGIN after the last joint
        state (fresh) or, with none since the run started, after its start; beyond timeout."""
        arrival = since + self.period + DELIVERY_MARGIN
        after = 'the last joint state' if fresh else 'the start of the run'
        if self.qpos is None:
            detail = 'none received'
        else:
            detail = (f'the last one received {now - self.qpos_time:.3f} s ago'
                      + ('' if fresh else ', before the run started'))
        last = f'; {self.js_rejected}' if self.js_rejected else ''
        return (f'no fresh joint state: the next command would arrive {arrival:.3f} s after {after}, '
                f'beyond joint_state_timeout {self.timeout:g} s ({detail}{last})')

    def decide(self, obs, now):
        """The (A,) action of the sketch's sub-policies on obs (D,) at now, or None (zeros),
        under the keypad's press rule (keypad.PressRule)."""
        active = self.runner.active
        if self.press_rule.digit is None:
            self.press_rule.begin(obs, self.runner.sketch[active])
        pressed = self.press_rule.update(obs)
        if self.press_rule.releasing:
            action = self.release_action(obs, self.press_rule.digit)
        else:
            # the active sub-policy's STOP counts only once its key went down (keypad.PressRule)
            action = self.runner.step(obs, now, may_stop=pressed)
            if self.runner.state == 'running' and self.runner.active != active:
                if self.press_rule.begin(obs, self.runner.sketch[self.runner.active]):
                    # the same key again: lift off it first
                    action = self.release_action(obs, self.press_rule.digit)
        return action

    def update_stop_probability(self, obs):
        """The run's stop_probability: the active sub-policy's P(STOP | obs), obs (D,)."""
        if self.runner.state == 'running':
            k = self.runner.sketch[self.runner.active]
            self.run.stop_probability = float(policy.stop_probability(self.model.params,
                                                                      self.model.policy, k, obs))

    def release_action(self, obs, key):
        """(A,) action of the release step off key: the sub-policy of keypad.release_digit,
        clipped."""
        digit = keypad.release_digit(obs, key)
        action = np.asarray(policy.action(self.model.params, self.model.policy, digit, obs),
                            dtype=np.float64)                                   # (A,)
        if not np.isfinite(action).all():
            self.runner.fail(f'the release step (sub-task {self.model.vocab[digit]}) produced a '
                             'non-finite action')
            return None
        return np.clip(action, -self.runner.limits, self.runner.limits)

    def check_keypad(self, now):
        """Compare the keypad's presses with the sketch: a press off the sketch ends the run;
        a finished run is done once the keypad has registered the whole sketch, and an error if
        it has not press_grace after the last STOP."""
        run = self.run
        if run is None or not run.in_progress:
            return
        if run.keypad and run.verdict is None and self.runner.state in ('running', 'done'):
            sketch = [self.model.vocab[k] for k in run.sketch]
            wrong = keypad.check_presses(run.presses, sketch)
            if wrong is not None:
                run.verdict = wrong
                if self.runner.state == 'running':
                    self.runner.fail(wrong)
                    self.zeros_due = True
            elif self.runner.state == 'done' and run.presses == sketch:
                run.verdict = 'done'
            elif self.runner.state == 'done' and now - run.done_time > self.press_grace:
                run.verdict = (f'the policy stopped its last sub-task, but within '
                               f'{self.press_grace:g} s the keypad registered '
                               f'{" ".join(run.presses) or "nothing"}, not the sketch '
                               f'{" ".join(sketch)}: the PIN was not dialled')
        self.sync_run(now)

    def sync_run(self, now):
        """End the run when the runner (and the keypad, if any) have decided."""
        run = self.run
        if run is None or not run.in_progress:
            return
        if self.runner.state == 'error':
            self.end('error', self.runner.error, now)
        elif self.runner.state == 'done':
            if not run.keypad or run.verdict == 'done':
                checked = ', the keypad registered it' if run.keypad else ''
                self.end('done', f'dialled {" ".join(self.names(run.sketch))} in '
                         f'{now - run.started:.2f} s{checked}', now)
            elif run.verdict is not None:
                self.end('error', run.verdict, now)

    def end(self, outcome, message, now):
        """Record the run's outcome (once) and call on_end."""
        run = self.run
        if run is None or not run.in_progress:
            return
        assert outcome in OUTCOMES, outcome
        r = self.runner
        run.completed = self.names(r.sketch[:len(r.stop_times)])
        run.stop_times, run.steps = list(r.stop_times), r.steps
        run.outcome, run.message, run.ended = outcome, ' '.join(str(message).split()), now
        if outcome == 'done':
            self.counters.runs_done += 1
        if self.on_end is not None:
            self.on_end(run)

    # ----- outputs ----------------------------------------------------------------------------

    def zeros(self):
        return np.zeros(self.runner.cfg.action_dim)                              # (A,)

    def names(self, ids):
        return [self.model.vocab[k] for k in ids]

    def summary(self):
        """What the run in progress has done so far, e.g. '2 of 4 sub-tasks (0 5)'."""
        r = self.runner
        done = self.names(r.sketch[:len(r.stop_times)])
        return (f'{len(done)} of {len(r.sketch)} sub-tasks'
                + (f' ({" ".join(done)})' if done else ''))

    def status(self):
        """The runner's status with the keypad's verdict: a finished run with a keypad is
        `running` (active null) until the keypad has registered the sketch, then `done`, or
        `error` when it registered something else; plus `pressed` (null without a keypad)."""
        status = self.runner.status()
        run = self.run
        keypad_on = run is not None and run.keypad
        if keypad_on and status['state'] in ('running', 'done'):
            if run.verdict is None and status['state'] == 'done':
                status['state'] = 'running'
            elif run.verdict is not None and run.verdict != 'done':
                status['state'], status['error'], status['active'] = 'error', run.verdict, None
        status['pressed'] = list(run.presses) if keypad_on else None
        return status

    def feedback(self, now):
        """The action's feedback of the run in progress, as a dict (ExecuteSketch.Feedback)."""
        run, r = self.run, self.runner
        active = r.active if r.state == 'running' else -1
        return {'active': active,
                'subtask': self.model.vocab[r.sketch[active]] if active >= 0 else '',
                'stop_probability': run.stop_probability if active >= 0 else 0.0,
                'elapsed': now - run.started,
                'completed': self.names(r.sketch[:len(r.stop_times)]),
                'pressed': list(run.presses)}

    def result(self, run):
        """The action's result of an ended run, as a dict (ExecuteSketch.Result)."""
        return {'success': run.outcome == 'done', 'state': run.outcome,
                'completed': list(run.completed), 'stop_times': [float(t) for t in run.stop_times],
                'keypad': run.keypad, 'pressed': list(run.presses), 'steps': int(run.steps),
                'elapsed': float(run.ended - run.started), 'message': run.message}


def run_offline(ctl, env, sketch, step):
    """Run the controller ctl's control step on a taco_sim DialEnv, without ROS, until the run
    ends or the PIN's step budget is spent: joint state, tick, then step(command) (env.step for
    torques, env.velocity_step for velocities). Returns the run."""
    run = ctl.start(sketch, 0.0)
    for t in range(dial.budget(len(sketch))):
        now = t * dial.CONTROL_DT
        ctl.joint_state(env.qpos, now)
        command = ctl.tick(now)
        if not run.in_progress:
            break
        step(command)
    return run


def keypad_offline(ctl, env, runs, step, steps=None):
    """Runs on a taco_sim DialEnv without ROS, with its keypad: runs is [(control step, sketch)],
    each sketch started at its step (before that step's tick: it arrived during the step
    before), preempting the one before; every control step hands ctl the joint state, ticks,
    applies the command with step(command) and hands ctl each press the simulation registered
    (at the end of the step). Stops when the last run has ended or after `steps` steps (default:
    the last run's start plus its sketch's step budget).

    Returns (the Runs in the order of runs, the presses [(control step, digit)]).
    """
    starts = dict(runs)
    if steps is None:
        last, sketch = runs[-1]
        steps = last + dial.budget(len(sketch))
    out, presses = [], []
    for t in range(steps):
        now = t * dial.CONTROL_DT
        if t in starts:
            out.append(ctl.start(starts[t], now, keypad_present=True))
        ctl.joint_state(env.qpos, now)
        command = ctl.tick(now)
        if len(out) == len(runs) and not out[-1].in_progress:
            break
        step(ctl.zeros() if command is None else command)
        for digit in env.new_presses():
            presses.append((t, int(digit)))
            ctl.press(ctl.model.vocab[digit], now + dial.CONTROL_DT)
    return out, presses
