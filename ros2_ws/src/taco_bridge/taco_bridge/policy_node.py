"""The TACO policy node: executes a sketch on a JACO arm with a taco_ref model's sub-policies.

Topic names are relative, so that `-r __ns:=/arm1` moves all of them (/arm1/taco/sketch, ...);
without a namespace they resolve to the names below.

Subscribes
  taco/sketch         std_msgs/String       "0 5 1 6" or "0,5,1,6" (names or ids of the model's
                                            vocabulary); "" or "stop" halts
  joint_states        sensor_msgs/JointState joints matched by name; implausible ones rejected
  dial/pressed        std_msgs/String       the keys a keypad registered (the sim node), if any
Publishes
  <command_topic>     std_msgs/Float64MultiArray  the command of command_interface in
                      command_joints order: effort, one torque (N m) per joint (9), default
                      topic effort_controller/commands (a ros2_control effort controller);
                      velocity, one velocity (rad/s) per arm joint (6), default topic
                      velocity_controller/commands (a JointGroupVelocityController). Only on
                      the control timer (at most `rate` messages per second): the policy's
                      action at every tick while a sketch runs; one message of zeros at the
                      first tick after a run ends (done, error, watchdog, "stop", a rejected
                      sketch), and one on shutdown. Nothing while idle: a forward command
                      controller holds the last command it got, which is then zeros (zero
                      torque on top of gravity compensation, or standing still).
  taco/status         std_msgs/String       JSON of taco_ref.runner.SketchRunner.status() plus
                      "joint_state_age" (s, or null) and "pressed" (the keys the keypad
                      registered in this run, or null without a keypad); on every change and
                      at status_rate

Everything that decides an action is in taco_ref.runner (parse_sketch, SketchRunner),
taco_sim.dial.observation_from_joints (forward kinematics on the project's MJCF) and
taco_bridge.keypad (the release step between repeated digits and the press rule: a sub-task's
STOP counts only once its key went down). Control runs on a wall-clock timer at `rate` Hz; a
new sketch is acted on at the next tick.

`done` means: with a keypad publishing on dial/pressed (the simulation), the keypad registered
exactly the sketch (checked within press_grace of the last STOP; a key off the sketch ends the
run at once); without one (a real arm), the policy's own claim that its last sub-task stopped.

Safety: parameters are checked at start-up (a bad one: `cannot start: ...`, exit 1); torques
clipped to torque_limits (at most the arm's peak torques), velocities to velocity_limits (at
most the arm's joint speed limits); joint states must name each joint
once, be finite, lie within the MJCF's joint ranges plus joint_limit_margin and, when stamped,
be younger than joint_state_timeout: others are rejected (an implausible one ends a run at
once); no accepted joint state fresher than joint_state_timeout while running ends the run in
error (zeros commanded; a sketch started before any fresh joint state gets
joint_state_timeout from its start); a sketch that does not parse is rejected with an error
status (the run in progress halts, the node keeps running; the warning is throttled);
max_subtask_time bounds each sub-task; an exception inside a callback ends the run in error
instead of killing the node.

Symbol | Shape | Meaning
J      |       | joints of the joint states, the model's observation order (9: six arm joints, 3 fingers)
A      |       | commanded joints: 9 (effort) or the 6 arm joints (velocity), the model's action order
K      |       | sub-tasks (digits)
D      |       | observation size = 39
"""
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.time import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

import taco_sim
from taco_ref import model as model_mod
from taco_ref import policy
from taco_ref.runner import SketchRunner, parse_sketch
from taco_sim import dial
from taco_sim.dial.env import load_model as load_arm

from taco_bridge import keypad
from taco_bridge.node_util import declare, number, run, topic, value


@dataclass(frozen=True)
class Interface:
    """A command interface of the policy node: what its model outputs and where it goes.

    Field     | Meaning
    domain    | taco_sim domain of its models ('dial': torques, 'dial-velocity': arm joint velocities)
    limits    | name of the parameter of its per-joint limits
    peak      | (A,) the arm's maxima those limits may not exceed (N m or rad/s)
    unit      | unit of the command
    topic     | default command topic: the ros2_control controller's (relative)
    """

    domain: str
    limits: str
    peak: np.ndarray
    unit: str
    topic: str

    @property
    def action_dim(self):
        return len(self.peak)

    @property
    def default_model(self):
        """The domain's shipped model, used when the model parameter is empty."""
        return taco_sim.get(self.domain).models['default']


INTERFACES = {
    'effort': Interface('dial', 'torque_limits', dial.TORQUE_LIMITS, 'N m', 'effort_controller/commands'),
    'velocity': Interface('dial-velocity', 'velocity_limits', dial.VELOCITY_LIMITS, 'rad/s',
                          'velocity_controller/commands'),
}
"""command_interface -> Interface."""
DEFAULT_MODEL = INTERFACES['effort'].default_model
"""The shipped Dial (torque) model, used when the model parameter is empty (effort)."""
HALT_WORDS = ('', 'stop')
CONTINUOUS_RANGE = (-2 * math.pi, 4 * math.pi)
"""rad: the range accepted for a joint the MJCF leaves unlimited (JACO2 joint 1 turns freely):
two turns around [0, 2 pi), the range the MJCF gives the continuous wrist joints 4-6."""
MAX_KEY_DISTANCE = 1.5
"""m: key positions farther than this from the arm's base are a typo (the JACO2 reaches 0.9 m)."""
WARN_PERIOD = 5.0
"""s between two warnings of one kind (rejected sketches, rejected joint states)."""

PARAMETERS = {
    # name: (default, description); None: an optional array, unset by default
    'model': ('', 'taco_ref model directory; empty: the shipped Dial model of command_interface'),
    'command_interface': ('effort', 'effort: joint torques (N m) on top of gravity compensation; '
                                    'velocity: arm joint velocities (rad/s); the model must match'),
    'rate': (1.0 / dial.CONTROL_DT, 'control rate (Hz), (0, 500]; the policies were trained at 25 Hz'),
    'joint_names': (list(dial.JOINTS), 'robot joint names in the model action order'),
    'command_joints': (None, 'joint order of the command; unset: joint_names (effort), its first '
                             'six, the arm joints (velocity)'),
    'torque_limits': ([float(x) for x in dial.TORQUE_LIMITS],
                      'per-joint torque limits (N m), joint_names order, each in [0, the arm\'s peak] '
                      '(effort)'),
    'velocity_limits': ([float(x) for x in dial.VELOCITY_LIMITS],
                        'arm joint velocity limits (rad/s), joint_names order, each in [0, the '
                        'arm\'s maximum] (velocity)'),
    'layout': ([int(x) for x in dial.STANDARD_LAYOUT],
               'keypad slot of each digit 0..9 (taco_sim.dial); used unless key_positions is set'),
    'key_positions': (None, 'world (x, y, z) of each digit key top, 30 numbers (m), digit order'),
    'joint_state_timeout': (0.25, 'watchdog: seconds without a joint state before zero torque, (0, 2]'),
    'joint_limit_margin': (0.25, 'rad beyond the MJCF joint ranges a joint state may report, [0, 0.5]'),
    'max_subtask_time': (20.0, 'seconds one sub-task may stay active before an error, (0, 600]'),
    'stop_threshold': (0.5, 'a sub-policy stops when P(STOP) exceeds this, (0, 1)'),
    'press_grace': (0.5, 'seconds after the last STOP for the keypad to report the last key, (0, 5]'),
    'status_rate': (1.0, 'Hz of the periodic status message (also sent on every change), (0, 100]'),
    'command_topic': ('', 'topic of the command; empty: effort_controller/commands (effort) or '
                          'velocity_controller/commands (velocity)'),
}
OPTIONAL_TYPES = {'command_joints': Parameter.Type.STRING_ARRAY,
                  'key_positions': Parameter.Type.DOUBLE_ARRAY}


def dial_model(path, interface='effort'):
    """Load and check a model for the Dial domain of command interface (a key of INTERFACES);
    ModelError / ValueError with the reason."""
    iface = INTERFACES[interface]
    path = path or iface.default_model
    if not os.path.isdir(path):
        hint = (f' (the shipped {iface.domain} model has not been installed)'
                if path == iface.default_model else '')
        raise model_mod.ModelError(f'model directory {path} does not exist{hint}')
    model = model_mod.load(path)
    cfg = model.policy
    A = iface.action_dim
    if (cfg.state_dim, cfg.action_dim, cfg.discrete) != (dial.STATE_DIM, A, False):
        raise ValueError(f'{path}: a model for command_interface {interface} ({iface.domain}) has '
                         f'D={dial.STATE_DIM}, A={A} continuous actions ({iface.unit}); this one '
                         f'D={cfg.state_dim}, A={cfg.action_dim}, discrete={cfg.discrete}')
    if list(model.vocab) != list(dial.VOCAB):
        raise ValueError(f'{path}: a Dial model names the digits {" ".join(dial.VOCAB)}; '
                         f'this one {" ".join(model.vocab)}')
    return model, path


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


def checked_parameters(p):
    """The policy node's parameters p (name: value) checked; returns the derived values as a
    dict, or raises ValueError naming the first bad parameter and what was expected."""
    J, K = dial.ACTION_DIM, dial.K
    interface = p['command_interface']
    if interface not in INTERFACES:
        raise ValueError(f'parameter command_interface: expected one of {", ".join(INTERFACES)}, '
                         f'got {interface!r}')
    iface = INTERFACES[interface]
    A = iface.action_dim
    out = {'interface': interface,
           'rate': number(p, 'rate', 0, 500),
           'timeout': number(p, 'joint_state_timeout', 0, 2),
           'margin': number(p, 'joint_limit_margin', 0, 0.5, low_open=False),
           'max_subtask_time': number(p, 'max_subtask_time', 0, 600),
           'stop_threshold': number(p, 'stop_threshold', 0, 1, high_open=True),
           'press_grace': number(p, 'press_grace', 0, 5),
           'status_rate': number(p, 'status_rate', 0, 100),
           'command_topic': topic(dict(p, command_topic=p['command_topic'] or iface.topic),
                                  'command_topic')}
    names = list(p['joint_names'])
    if len(names) != J or len(set(names)) != J or not all(names):
        raise ValueError(f'parameter joint_names: expected {J} distinct names, got {names}')
    out['joint_names'] = names
    commanded = names[:A]                      # effort: all J joints; velocity: the six arm joints
    command = list(p['command_joints'] or commanded)
    if sorted(command) != sorted(commanded):
        raise ValueError(f'parameter command_joints: expected a permutation of '
                         f'{"joint_names" if A == J else f"the first {A} joint_names"} {commanded}, '
                         f'got {command}')
    out['command_joints'] = command
    for name, peak, unit in (('torque_limits', dial.TORQUE_LIMITS, 'N m'),
                             ('velocity_limits', dial.VELOCITY_LIMITS, 'rad/s')):
        limits = np.asarray(p[name], dtype=np.float64)                         # (A,) of its interface
        if limits.shape != peak.shape or not np.all((limits >= 0) & (limits <= peak)):
            raise ValueError(f'parameter {name}: expected {len(peak)} numbers ({unit}) each between 0 '
                             f'and the arm\'s maximum {[round(x, 4) for x in peak.tolist()]}, got '
                             f'{limits.tolist()}')
        if name == iface.limits:
            out['limits'] = limits
    if p['key_positions'] is not None:
        key_pos = np.asarray(p['key_positions'], dtype=np.float64)
        if key_pos.shape != (3 * K,) or not np.isfinite(key_pos).all():
            raise ValueError(f'parameter key_positions: expected {3 * K} finite numbers, '
                             f'got {key_pos.tolist()}')
        key_pos = key_pos.reshape(K, 3)                                         # (K, 3)
        if np.linalg.norm(key_pos, axis=1).max() > MAX_KEY_DISTANCE:
            raise ValueError(f'parameter key_positions: a key farther than {MAX_KEY_DISTANCE} m '
                             f'from the arm\'s base: {key_pos.tolist()}')
        out['key_pos'] = key_pos
    else:
        try:
            out['key_pos'] = dial.key_positions(np.asarray(p['layout'], dtype=np.int64))  # (K, 3)
        except ValueError as err:
            raise ValueError(f'parameter {err}') from None
    return out


class PolicyNode(Node):
    """Sketch in, torques out; see the module docstring."""

    def __init__(self, **kwargs):
        super().__init__('taco_policy', **kwargs)
        declare(self, PARAMETERS, OPTIONAL_TYPES)
        p = {name: value(self, name) for name in PARAMETERS}
        c = checked_parameters(p)
        self.interface = c['interface']
        self.model, self.model_path = dial_model(p['model'], self.interface)
        self.rate, self.timeout, self.press_grace = c['rate'], c['timeout'], c['press_grace']
        self.joint_names, self.command_joints = c['joint_names'], c['command_joints']
        self.to_command = np.array([self.joint_names.index(n) for n in self.command_joints])  # (A,)
        self.key_pos = c['key_pos']                                             # (K, 3)
        self.low, self.high = joint_bounds(c['margin'])                         # (J,), (J,)
        self.stop_threshold = c['stop_threshold']
        self.runner = SketchRunner(self.model.params, self.model.policy, self.model.vocab,
                                   limits=c['limits'], max_subtask_time=c['max_subtask_time'],
                                   stop_threshold=self.stop_threshold)
        self.press_rule = keypad.PressRule()
        self.qpos = None                  # (J,) latest accepted joint positions, model order
        self.qpos_time = None             # time.monotonic() of their arrival
        self.rejected = None              # why the latest joint state was rejected, or None
        self.zeros_due = False            # a run ended outside a tick: zeros at the next tick
        self.keypad = False               # a keypad publishes on dial/pressed in this run
        self.presses = []                 # names the keypad registered in this run
        self.verdict = None               # the keypad's verdict on a finished run: None, 'done', error text
        self.done_time = None             # time.monotonic() of the run's last STOP
        self.last_status = None

        self.command_pub = self.create_publisher(Float64MultiArray, c['command_topic'], 10)
        self.status_pub = self.create_publisher(String, 'taco/status', 10)
        self.create_subscription(String, 'taco/sketch', self.on_sketch, 10)
        self.create_subscription(JointState, 'joint_states', self.on_joint_state, 10)
        self.pressed_sub = self.create_subscription(String, 'dial/pressed', self.on_press, 10)
        self.create_timer(1.0 / self.rate, self.on_tick)
        self.create_timer(1.0 / c['status_rate'], lambda: self.publish_status(force=True))
        self.get_logger().info(
            f'model {self.model_path} (vocabulary {" ".join(self.model.vocab)}), {self.rate:g} Hz, '
            f'{self.interface} commands ({INTERFACES[self.interface].unit}) on '
            f'{self.command_pub.topic_name} for {self.command_joints}')
        self.publish_status(force=True)

    # ----- callbacks --------------------------------------------------------------------------

    def on_joint_state(self, msg):
        """Accept a plausible joint state; an implausible one ends a run at once, a stale one
        (stamped, older than joint_state_timeout or as far in the future) is left to the watchdog."""
        q, reason = joint_positions(msg, self.joint_names, self.low, self.high)
        stamp = msg.header.stamp
        if q is not None and (stamp.sec or stamp.nanosec):
            age = (self.get_clock().now() - Time.from_msg(stamp)).nanoseconds * 1e-9
            if abs(age) > self.timeout:
                q, reason = None, f'stamped {age:.3f} s ago, beyond joint_state_timeout {self.timeout:g} s'
        if q is None:
            self.rejected = f'joint state rejected: {reason}'
            self.get_logger().warning(self.rejected, throttle_duration_sec=WARN_PERIOD)
            if not reason.startswith('stamped'):
                self.end_run(self.rejected)
            return
        self.qpos, self.qpos_time, self.rejected = q, time.monotonic(), None

    def on_sketch(self, msg):
        text = msg.data
        if text.strip().lower() in HALT_WORDS:
            self.runner.halt()
            self.zeros_due = True
        else:
            try:
                sketch = parse_sketch(text, self.model.vocab)
            except ValueError as err:
                self.runner.reject(f'sketch rejected: {err}')
                self.zeros_due = True
                self.get_logger().warning(self.runner.error, throttle_duration_sec=WARN_PERIOD)
            else:
                self.runner.start(sketch, time.monotonic())
                self.press_rule = keypad.PressRule()
                self.keypad = self.count_publishers(self.pressed_sub.topic_name) > 0
                self.presses, self.verdict, self.done_time = [], None, None
        self.publish_status()

    def on_press(self, msg):
        if self.runner.state not in ('running', 'done') or self.verdict is not None:
            return
        self.keypad = True
        self.presses.append(msg.data)
        self.check_keypad(time.monotonic())

    def on_tick(self):
        now = time.monotonic()
        if self.runner.state == 'running':
            try:
                action = self.control_step(now)
            except Exception as err:  # a bug or bad data must not kill the node holding the arm
                self.runner.fail(f'control step failed: {type(err).__name__}: {err}')
                action = None
            if action is None and self.runner.state == 'done':
                self.done_time = now
            self.publish_command(action)    # None (this tick ended the run): zeros
        elif self.zeros_due:
            self.publish_command(None)
        self.zeros_due = False
        self.check_keypad(now)
        self.publish_status()

    def control_step(self, now):
        """The (A,) action to command now (torques or velocities), or None (zeros); applies the
        watchdog and the keypad rules (taco_bridge.keypad: release step, press rule).

        A joint state is fresh when it is younger than joint_state_timeout. Without a fresh one
        the run waits (zeros) until joint_state_timeout has passed since the later of the last
        joint state and the start of the sketch, then ends in error: a sketch sent right after
        start-up, before the first joint state has arrived, is not failed at once.
        """
        if self.runner.state != 'running':
            return None
        if self.qpos is None or now - self.qpos_time > self.timeout:
            since = now - max(self.runner.started, self.qpos_time or self.runner.started)
            if since > self.timeout:
                age = 'none received' if self.qpos is None else f'last {now - self.qpos_time:.3f} s ago'
                last = f'; {self.rejected}' if self.rejected else ''
                self.runner.fail(f'no fresh joint state within {self.timeout:g} s ({age}{last})')
            return None
        obs = dial.observation_from_joints(self.qpos, self.key_pos)              # (D,)
        active = self.runner.active
        if self.press_rule.digit is None:
            self.press_rule.begin(obs, self.runner.sketch[active])
        pressed = self.press_rule.update(obs)
        if self.press_rule.releasing:
            return self.release_action(obs)
        # the active sub-policy's STOP counts only once its key went down (keypad.PressRule)
        action = self.runner.step(obs, now, may_stop=pressed)
        if self.runner.state == 'running' and self.runner.active != active:
            if self.press_rule.begin(obs, self.runner.sketch[self.runner.active]):
                return self.release_action(obs)     # same key again: lift off it first
        return action

    def release_action(self, obs):
        """(A,) action of the release step: the sub-policy of keypad.release_digit, clipped."""
        digit = keypad.release_digit(obs, self.press_rule.digit)
        _, action = policy.act(self.model.params, self.model.policy, digit, obs)
        action = np.asarray(action, dtype=np.float64)                           # (A,)
        if not np.isfinite(action).all():
            self.runner.fail(f'the release step (sub-task {self.model.vocab[digit]}) produced a '
                             'non-finite action')
            return None
        return np.clip(action, -self.runner.limits, self.runner.limits)

    def end_run(self, reason):
        """End a running sketch from outside the control tick; zeros at the next tick."""
        if self.runner.state == 'running':
            self.runner.fail(reason)
            self.zeros_due = True
            self.publish_status()

    def check_keypad(self, now):
        """Compare the keypad's presses with the sketch: a press off the sketch ends the run;
        a finished run is done once the keypad has registered the whole sketch, and an error if
        it has not press_grace after the last STOP."""
        if not self.keypad or self.verdict is not None or self.runner.state not in ('running', 'done'):
            return
        sketch = [self.model.vocab[k] for k in self.runner.sketch]
        wrong = keypad.check_presses(self.presses, sketch)
        if wrong is not None:
            self.end_run(wrong)
            self.verdict = wrong
        elif self.runner.state == 'done' and self.presses == sketch:
            self.verdict = 'done'
        elif self.runner.state == 'done' and now - self.done_time > self.press_grace:
            self.verdict = (f'the policy stopped its last sub-task, but within {self.press_grace:g} s '
                            f'the keypad registered {" ".join(self.presses) or "nothing"}, not the '
                            f'sketch {" ".join(sketch)}: the PIN was not dialled')
        if self.verdict is not None:
            self.publish_status()

    # ----- output -----------------------------------------------------------------------------

    def publish_command(self, action):
        """The action (A,) in model order, or None for zeros; sent in command_joints order."""
        command = np.zeros(len(self.to_command)) if action is None else action  # (A,)
        self.command_pub.publish(Float64MultiArray(data=[float(x) for x in command[self.to_command]]))

    def status(self):
        """The runner's status with the keypad's verdict: a finished run with a keypad is
        `running` (active null) until the keypad has registered the sketch, then `done`, or
        `error` when it registered something else."""
        status = self.runner.status()
        if self.keypad and status['state'] in ('running', 'done'):
            if self.verdict is None and status['state'] == 'done':
                status['state'] = 'running'
            elif self.verdict is not None and self.verdict != 'done':
                status['state'], status['error'], status['active'] = 'error', self.verdict, None
        status['pressed'] = list(self.presses) if self.keypad else None
        return status

    def publish_status(self, force=False):
        status = self.status()
        text = json.dumps(status, sort_keys=True)
        if force or text != self.last_status:
            self.last_status = text
            age = None if self.qpos_time is None else round(time.monotonic() - self.qpos_time, 4)
            self.status_pub.publish(String(data=json.dumps(dict(status, joint_state_age=age),
                                                           sort_keys=True)))


def _halt(node):
    node.runner.halt()
    node.publish_command(None)          # leave the controller holding zeros


def main(args=None):
    return run(PolicyNode, 'taco_policy', args, on_exit=_halt)


if __name__ == '__main__':
    sys.exit(main())
