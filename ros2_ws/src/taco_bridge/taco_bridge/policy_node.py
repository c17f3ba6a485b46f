"""The TACO policy node: executes a sketch on a JACO arm with a taco_ref model's sub-policies.

A managed (lifecycle) node, `taco_policy`. Its transitions (`ros2 lifecycle set /taco_policy
<transition>`; the launch file drives the first two itself):

  configure   load and check the model; create the topics
  activate    start commanding: the control timer runs, sketches and goals are accepted
  deactivate  halt whatever runs (its goal ends `deactivated`), one zero command, stop the timer
  cleanup     free the model and the topics (back to unconfigured)
  shutdown    from any state: as deactivate and cleanup together; then the process exits (0)

The action server lives as long as the process: a goal sent in any state gets an answer at once,
rejected with the reason unless the node is active.

Every parameter is checked when the node is made, before any transition (a bad one: `cannot
start: ...`, exit 1). With the parameter `autostart` the node configures and activates itself
(`taco-bridge-dial` and the tests use it); a model it cannot load then also ends it with one
`cannot start:` line and exit code 1. On SIGINT, SIGTERM or SIGHUP, and when the process that
started it exits (`ros2 launch` killed), it deactivates (zeros) and shuts down.

Topic and action names are relative, so that `-r __ns:=/arm1` moves all of them
(/arm1/taco/sketch, ...); without a namespace they resolve to the names below.

Action server
  taco/execute_sketch taco_bridge_msgs/action/ExecuteSketch: goal = sketch (names or ids, one
                      per item) and an optional time limit; rejected (with the reason in the
                      log, on taco/status and in the diagnostics) when the node is not active or
                      the goal does not parse; feedback (5 Hz, and on every change of the active
                      sub-task, the completed ones or the keys pressed) = active position and
                      sub-task, its P(STOP), elapsed time, completed sub-tasks, keys pressed;
                      result = success, how it ended (taco_bridge.control.OUTCOMES), completed
                      sub-tasks, stop times, keys pressed, a message. Cancel halts the arm at once
                      (one zero command in the cancel callback). One goal at a time: a newly
                      accepted goal, or a sketch on taco/sketch, preempts the one running, which
                      ends ABORTED with state `preempted`. A rejected goal leaves the run in
                      progress alone.
Subscribes
  taco/sketch         std_msgs/String       the convenience topic, on the same code path: "0 5 1
                      6" or "0,5,1,6"; "" or "stop" halts whatever runs (a goal ends `halted`);
                      a sketch that does not parse halts it too (fire and forget has no other
                      way to say "not that")
  joint_states        sensor_msgs/JointState joints matched by name; implausible ones rejected
  dial/pressed        std_msgs/String       the keys a keypad registered (the sim node), if any
Publishes
  <command_topic>     std_msgs/Float64MultiArray  (a lifecycle publisher: only while active) the
                      command of command_interface in command_joints order: effort, one torque
                      (N m) per joint (9), default topic effort_controller/commands (a
                      ros2_control effort controller); velocity, one velocity (rad/s) per arm
                      joint (6), default topic velocity_controller/commands (a
                      JointGroupVelocityController). On the control timer, at most one per tick:
                      the policy's action at every tick while a sketch runs; one message of zeros
                      at the first tick after a run ends (done, error, watchdog, "stop", a
                      rejected sketch); at once on cancel and on deactivation. Nothing while
                      idle: a forward command controller holds the last command it got, which is
                      then zeros (zero torque on top of gravity compensation, or standing still).
  taco/status         std_msgs/String       JSON: taco_bridge.control.Controller.status() plus
                      "lifecycle", "joint_state_age" (s, or null), "goal" (the action goal's id,
                      null for a sketch from the topic) and "rejected" (the latest rejected
                      sketch or goal and why, or null); on every change and at status_rate
  /diagnostics        diagnostic_msgs/DiagnosticArray  once a second, one status named
                      "<node's full name>: control loop": control rate achieved against the
                      target, largest tick interval and tick duration, overruns, stale and
                      rejected joint states, watchdog trips, rejected sketches, runs

Everything that decides an action is in taco_bridge.control (runs, the watchdog, keypad rules,
feedback and result; no ROS), taco_ref.runner (parse_sketch, SketchRunner),
taco_sim.dial.observation_from_joints (forward kinematics on the project's MJCF) and
taco_bridge.keypad. The control loop waits on nothing but its timer (control.py: a joint state
is used only while it will still be younger than joint_state_timeout when the next tick's
command arrives, so the zero command arrives within joint_state_timeout of the last joint state).
Publishing is bounded too: the node keeps Fast DDS to UDP (node_util.no_shared_memory_transport),
since a stopped subscriber can block a shared-memory publish for as long as it is stopped.

`done` means: with a keypad publishing on dial/pressed (the simulation), the keypad registered
exactly the sketch (checked within press_grace of the last STOP; a key off the sketch ends the
run at once); without one (a real arm), the policy's own claim that its last sub-task stopped.

Safety: torques clipped to torque_limits (at most the arm's peak torques), velocities to
velocity_limits (at most the arm's joint speed limits); joint states must name each joint once,
be finite, lie within the MJCF's joint ranges plus joint_limit_margin and, when stamped, be
younger than joint_state_timeout: others are rejected (an implausible one ends a run at once);
max_subtask_time bounds each sub-task and a goal's time_limit the whole run; an exception inside
a callback ends the run in error instead of killing the node.

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
from collections import deque
from dataclasses import dataclass

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.duration import Duration
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.task import Future
from rclpy.time import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

import taco_sim
from taco_ref import model as model_mod
from taco_ref.runner import parse_sketch, parse_sketch_items
from taco_sim import dial

from taco_bridge.control import DELIVERY_MARGIN, Controller, joint_bounds, joint_positions
from taco_bridge.node_util import (declare, no_shared_memory_transport, number, run,
                                   shared_memory_forced, stop_pending, topic, value)

try:
    from taco_bridge_msgs.action import ExecuteSketch
except ImportError:          # the interface package is not built, or its install is not sourced
    ExecuteSketch = None

MSGS_MISSING = ('the interface package taco_bridge_msgs is not importable: build ros2_ws (colcon '
                'build; with the PyPI wheels taco-bridge-build) and source its install/setup.bash')


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
MAX_KEY_DISTANCE = 1.5
"""m: key positions farther than this from the arm's base are a typo (the JACO2 reaches 0.9 m)."""
MAX_TIME_LIMIT = 3600.0
"""s: the largest time limit a goal may ask for."""
WARN_PERIOD = 5.0
"""s between two warnings of one kind (rejected sketches, rejected joint states)."""
FEEDBACK_PERIOD = 0.2
"""s between two feedback messages of a goal when nothing but the time and P(STOP) changed."""
DIAGNOSTICS_PERIOD = 1.0
"""s between two /diagnostics messages (diagnostic_updater's default)."""
RATE_WARN = 0.9
"""The diagnostics warn when the control rate achieved falls below this fraction of the target."""
ZERO_ACK_TIMEOUT = 0.5
"""s: on deactivation, shutdown and exit the zero command is published and then waited for
until every reliable subscriber still matched has acknowledged it (or this long), before the
publisher is deactivated or destroyed: destroyed at once, its last message can be dropped unsent
(seen once in six SIGTERMs: the arm kept its last torque)."""
ACK_POLL = 0.02
"""s: while waiting for the acknowledgements, how often the subscribers still matched are
counted (wait_acknowledged)."""
ACK_HISTORY = 1.0
"""s: a subscriber of the command that was matched this recently and has gone since may have
left the acknowledgement state unsettled (wait_acknowledged): no warning then."""

PARAMETERS = {
    # name: (default, description); None: derived from the parameters above it (derive_default)
    'command_interface': ('effort', 'effort: joint torques (N m) on top of gravity compensation; '
                                    'velocity: arm joint velocities (rad/s); the model must match'),
    'model': ('', 'taco_ref model directory; empty: the shipped Dial model of command_interface '
                  '(its path is then the value, so that a dump shows the model in use)'),
    'rate': (1.0 / dial.CONTROL_DT, 'control rate (Hz), (0, 500]; the policies were trained at 25 Hz'),
    'joint_names': (list(dial.JOINTS), 'robot joint names in the model action order'),
    'command_joints': (None, 'joint order of the command; default joint_names (effort), its first '
                             'six, the arm joints (velocity)'),
    'torque_limits': ([float(x) for x in dial.TORQUE_LIMITS],
                      'per-joint torque limits (N m), joint_names order, each in [0, the arm\'s peak] '
                      '(effort)'),
    'velocity_limits': ([float(x) for x in dial.VELOCITY_LIMITS],
                        'arm joint velocity limits (rad/s), joint_names order, each in [0, the '
                        'arm\'s maximum] (velocity)'),
    'layout': ([int(x) for x in dial.STANDARD_LAYOUT],
               'keypad slot of each digit 0..9 (taco_sim.dial); gives key_positions\' default'),
    'key_positions': (None, 'world (x, y, z) of each digit key top, 30 numbers (m), digit order; '
                            'default: the simulated keypad\'s for layout'),
    'joint_state_timeout': (0.25, 'watchdog: seconds without a joint state before zero torque, '
                                  '(1 / rate + 0.02, 2]'),
    'joint_limit_margin': (0.25, 'rad beyond the MJCF joint ranges a joint state may report, [0, 0.5]'),
    'max_subtask_time': (20.0, 'seconds one sub-task may stay active before an error, (0, 600]'),
    'stop_threshold': (0.5, 'a sub-policy stops when P(STOP) exceeds this, (0, 1)'),
    'press_grace': (0.5, 'seconds after the last STOP for the keypad to report the last key, (0, 5]'),
    'status_rate': (1.0, 'Hz of the periodic status message (also sent on every change), (0, 100]'),
    'command_topic': ('', 'topic of the command; empty: effort_controller/commands (effort) or '
                          'velocity_controller/commands (velocity)'),
    'autostart': (False, 'configure and activate at start-up (without: ros2 lifecycle set, or the '
                         'launch file, drives the transitions)'),
}


def derive_default(name, p):
    """The default of a parameter whose PARAMETERS default is None, from the values p of those
    declared before it; `ros2 param dump` then shows the value in use."""
    if name == 'command_joints':
        iface = INTERFACES.get(p['command_interface'])
        names = list(p['joint_names'])
        return names[:iface.action_dim] if iface is not None else names
    if name == 'key_positions':
        try:
            return [float(x) for x in dial.key_positions(np.asarray(p['layout'], dtype=np.int64)).ravel()]
        except (ValueError, TypeError) as err:
            raise ValueError(f'parameter {err}') from None
    raise KeyError(name)


def resolve_empty(name, p):
    """The value an empty parameter takes (node_util.declare): model, the shipped model of
    command_interface; None for the others (and for an unknown interface, refused later)."""
    if name == 'model' and p.get('command_interface') in INTERFACES:
        return INTERFACES[p['command_interface']].default_model
    return None


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
    command = list(p['command_joints'])
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
    key_pos = np.asarray(p['key_positions'], dtype=np.float64)
    if key_pos.shape != (3 * K,) or not np.isfinite(key_pos).all():
        raise ValueError(f'parameter key_positions: expected {3 * K} finite numbers, '
                         f'got {key_pos.tolist()}')
    key_pos = key_pos.reshape(K, 3)                                             # (K, 3)
    if np.linalg.norm(key_pos, axis=1).max() > MAX_KEY_DISTANCE:
        raise ValueError(f'parameter key_positions: a key farther than {MAX_KEY_DISTANCE} m '
                         f'from the arm\'s base: {key_pos.tolist()}')
    out['key_pos'] = key_pos
    least = 1.0 / out['rate'] + DELIVERY_MARGIN
    if not out['timeout'] > least:
        raise ValueError(f'parameter joint_state_timeout: expected more than one control period '
                         f'and the delivery margin (1 / rate + {DELIVERY_MARGIN:g} = {least:g} s), got '
                         f'{out["timeout"]!r}')
    return out


@dataclass
class Goal:
    """An accepted goal of the action: its handle, the future its execute callback awaits (set
    to the result when the run ends) and what feedback it got last."""

    handle: object
    done: Future
    feedback_time: float = -math.inf
    feedback_key: tuple = None


class PolicyNode(LifecycleNode):
    """Sketch in (action or topic), commands out; a managed node. See the module docstring."""

    def __init__(self, clock=time.monotonic, **kwargs):
        super().__init__('taco_policy', **kwargs)
        if ExecuteSketch is None:
            raise ValueError(MSGS_MISSING)
        declare(self, PARAMETERS, derive_default, resolve_empty)
        self.p = {name: value(self, name) for name in PARAMETERS}
        self.c = checked_parameters(self.p)
        self.clock = clock                # s, monotonic: every time the controller sees
        self.ctl = None                   # the Controller, from configure to cleanup
        self.lifecycle = 'unconfigured'
        self.goals = {}                   # goal id (bytes) -> Goal
        self.rejected = None              # {'sketch': ..., 'reason': ...} of the latest refusal
        self.problem = None               # why the latest transition failed
        self.starting = False             # autostart is running the first transitions
        self.entities, self.command_pub, self.control_timer = [], None, None
        self.command_subscribers = deque()   # (time, subscribers matched) at each command publish
        self.publishing = False           # inside publish_command (on_stop_signal defers its zero)
        self.zero_due = False             # a stop signal's zero, to follow the command going out
        self.zero_last = False            # the last command out is the stop signal's zero
        self.finished = False             # after the shutdown transition: the process exits
        self.stop_signals = []            # node_util.run's record of stop signals (SIGINT ...)
        self.parent_pid = None            # node_util.run's: the parent at start (stop_pending)
        self.tick_duration = None
        self.last_status = None
        self.last_counters = None
        self.status_pub = self.create_publisher(String, 'taco/status', 10)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_timer(1.0 / self.c['status_rate'], lambda: self.publish_status(force=True))
        self.create_timer(DIAGNOSTICS_PERIOD, self.publish_diagnostics)
        # the action server lives from the start to the end of the process, so that a goal always
        # gets an answer: rejected with the reason unless active (on_goal)
        self.action_server = ActionServer(
            self, ExecuteSketch, 'taco/execute_sketch', execute_callback=self.execute_goal,
            goal_callback=self.on_goal, handle_accepted_callback=self.on_goal_accepted,
            cancel_callback=self.on_cancel)
        self.publish_status(force=True)

    # ----- lifecycle --------------------------------------------------------------------------

    def on_configure(self, state):
        """Load and check the model, make the controller, the topics and the action server."""
        c = self.c
        try:
            model, path = dial_model(self.p['model'], c['interface'])
            low, high = joint_bounds(c['margin'])                               # (J,), (J,)
            ctl = Controller(model, c['key_pos'], c['limits'], low, high, 1.0 / c['rate'],
                             c['timeout'], c['max_subtask_time'], c['stop_threshold'],
                             c['press_grace'], on_end=self.on_run_end)
        except Exception as err:  # a model that does not load, for whatever reason: not configured
            self.problem = ' '.join(f'{err}'.split()) or type(err).__name__
            if not self.starting:                # autostart prints it once, as `cannot start:`
                self.get_logger().error(f'configure failed: {self.problem}')
            return TransitionCallbackReturn.FAILURE
        self.ctl, self.model_path, self.problem = ctl, path, None
        self.to_command = np.array([c['joint_names'].index(n) for n in c['command_joints']])  # (A,)
        self.command_pub = self.create_lifecycle_publisher(Float64MultiArray, c['command_topic'], 10)
        self.pressed_sub = self.create_subscription(String, 'dial/pressed', self.on_press, 10)
        self.entities = [self.create_subscription(String, 'taco/sketch', self.on_sketch, 10),
                         self.create_subscription(JointState, 'joint_states', self.on_joint_state, 10),
                         self.pressed_sub]
        self.lifecycle = 'inactive'
        self.get_logger().info(
            f'configured: model {path} (vocabulary {" ".join(model.vocab)}), {c["rate"]:g} Hz, '
            f'{c["interface"]} commands ({INTERFACES[c["interface"]].unit}) on '
            f'{self.command_pub.topic_name} for {c["command_joints"]}; action taco/execute_sketch')
        self.publish_status(force=True)
        return super().on_configure(state)

    def on_activate(self, state):
        """Start commanding: the control timer runs, sketches and goals are accepted."""
        result = super().on_activate(state)       # enables the command publisher
        self.control_timer = self.create_timer(1.0 / self.c['rate'], self.on_tick)
        self.ctl.last_tick = None
        # nothing runs while inactive: the runner is idle, or in error only because a sketch was
        # refused for the node being inactive; the status shows the new state at once
        self.ctl.runner.halt()
        self.rejected = None
        self.lifecycle = 'active'
        self.get_logger().info('active: accepting sketches')
        self.publish_status(force=True)
        return result

    def on_deactivate(self, state):
        """Halt whatever runs (its goal ends `deactivated`), one zero command, stop the timer."""
        self.stop_commanding('deactivated')
        self.lifecycle = 'inactive'
        self.get_logger().info('inactive: not commanding')
        self.publish_status(force=True)
        return super().on_deactivate(state)

    def on_cleanup(self, state):
        """Free the model and the topics (the action server stays: it rejects goals now)."""
        self.free()
        self.lifecycle = 'unconfigured'
        self.publish_status(force=True)
        return super().on_cleanup(state)

    def on_shutdown(self, state):
        """From any state: halt (zeros when active), free the model and the topics; the process
        then exits (node_util.spin_until reads `finished`) after the goals' results went out."""
        if self.lifecycle == 'active':
            self.stop_commanding('deactivated')
        self.free()
        self.lifecycle = 'finalized'
        self.finished = True
        self.get_logger().info('finalized: exiting')
        self.publish_status(force=True)
        return super().on_shutdown(state)

    def on_error(self, state):
        self.get_logger().error('a transition raised: back to unconfigured')
        if self.control_timer is not None:
            self.stop_commanding('deactivated')
        self.free()
        self.lifecycle = 'unconfigured'
        return TransitionCallbackReturn.SUCCESS

    def stop_commanding(self, outcome):
        """Halt the run (its goal ends with outcome), publish zeros now and wait until the
        subscribers have them (ZERO_ACK_TIMEOUT at most), stop the control timer."""
        if self.ctl is not None:
            self.ctl.halt(self.clock(), outcome)
            self.publish_command(self.ctl.take_zeros(), flush=True)
        if self.control_timer is not None:
            self.destroy_timer(self.control_timer)
            self.control_timer = None

    def free(self):
        for goal in list(self.goals.values()):       # none runs by now; finish any left
            if not goal.done.done():
                goal.done.set_result(None)
        for entity in self.entities:
            self.destroy_subscription(entity)
        if self.command_pub is not None:
            self.destroy_lifecycle_publisher(self.command_pub)
        self.entities, self.command_pub, self.ctl = [], None, None

    def autostart(self):
        """With the parameter autostart: configure and activate now; ValueError (the reason)
        when a transition fails."""
        if not self.p['autostart']:
            return
        self.starting = True
        try:
            for name, trigger in (('configure', self.trigger_configure),
                                  ('activate', self.trigger_activate)):
                if trigger() != TransitionCallbackReturn.SUCCESS:
                    raise ValueError(self.problem or f'the {name} transition failed')
        finally:
            self.starting = False

    # ----- inputs -----------------------------------------------------------------------------

    def on_joint_state(self, msg):
        """Hand a joint state to the controller: an implausible one ends a run at once, a stale
        one (stamped, older than joint_state_timeout or as far in the future) is not used."""
        now = self.clock()
        q, reason = joint_positions(msg, self.c['joint_names'], self.ctl.low, self.ctl.high)
        stamp, stale = msg.header.stamp, False
        if q is not None and (stamp.sec or stamp.nanosec):
            age = (self.get_clock().now() - Time.from_msg(stamp)).nanoseconds * 1e-9
            if abs(age) > self.c['timeout']:
                q, reason, stale = None, (f'stamped {age:.3f} s ago, beyond joint_state_timeout '
                                          f'{self.c["timeout"]:g} s'), True
        if q is None:
            self.get_logger().warning(f'joint state rejected: {reason}', throttle_duration_sec=WARN_PERIOD)
        self.ctl.joint_state(q, now, reason, stale)
        if q is None and not stale:
            self.publish_status()

    def on_sketch(self, msg):
        """The convenience topic: the same path as a goal, without feedback or result."""
        now, text = self.clock(), msg.data
        if text.strip().lower() in HALT_WORDS:
            self.ctl.halt(now, 'halted')
        else:
            try:
                if self.lifecycle != 'active':
                    raise ValueError(self.inactive_reason())
                sketch = parse_sketch(text, self.model_vocab())
            except ValueError as err:
                reason = f'sketch rejected: {err}'
                self.rejected = {'sketch': text[:200], 'reason': reason}
                self.ctl.reject(reason, now)
                self.get_logger().warning(reason, throttle_duration_sec=WARN_PERIOD)
            else:
                self.rejected = None
                self.ctl.start(sketch, now, keypad_present=self.keypad_present())
        self.publish_status()

    def on_press(self, msg):
        self.ctl.press(msg.data, self.clock())
        self.publish_status()

    # ----- the action -------------------------------------------------------------------------

    def on_goal(self, request):
        """Accept a goal only while active and only if its sketch and time limit are valid."""
        try:
            if self.lifecycle != 'active':
                raise ValueError(self.inactive_reason())
            parse_sketch_items(list(request.sketch), self.model_vocab())
            limit = request.time_limit
            if not (math.isfinite(limit) and 0 <= limit <= MAX_TIME_LIMIT):
                raise ValueError(f'time_limit: expected a number of seconds in [0, {MAX_TIME_LIMIT:g}] '
                                 f'(0: none), got {limit!r}')
        except ValueError as err:
            reason = f'goal rejected: {err}'
            self.rejected = {'sketch': list(request.sketch)[:64], 'reason': reason}
            if self.ctl is not None:
                self.ctl.rejected_goal(reason)
            self.get_logger().warning(reason, throttle_duration_sec=WARN_PERIOD)
            self.publish_status(force=True)
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def on_goal_accepted(self, handle):
        """Start the goal's run (preempting the one in progress) and its execute callback."""
        goal_id = bytes(handle.goal_id.uuid)
        self.goals[goal_id] = Goal(handle, Future())
        if self.ctl is None or self.lifecycle != 'active':      # deactivated in between
            self.goals[goal_id].done.set_result(None)
        else:
            request = handle.request
            self.rejected = None
            self.ctl.start(parse_sketch_items(list(request.sketch), self.model_vocab()), self.clock(),
                           goal=goal_id, time_limit=request.time_limit,
                           keypad_present=self.keypad_present())
        handle.execute()
        self.publish_status()

    async def execute_goal(self, handle):
        """Wait (without blocking the executor) for the run to end; finish the goal with its
        result: succeeded when done, canceled when canceled, aborted otherwise."""
        goal_id = bytes(handle.goal_id.uuid)
        goal = self.goals[goal_id]
        result = await goal.done
        del self.goals[goal_id]
        if result is None:
            result = {'success': False, 'state': 'deactivated',
                      'message': f'taco_policy is {self.lifecycle}: the goal did not run'}
        if result['state'] == 'done':
            handle.succeed()
        elif result['state'] == 'canceled' and handle.is_cancel_requested:
            handle.canceled()
        else:
            handle.abort()
        return ExecuteSketch.Result(**result)

    def on_cancel(self, handle):
        """Cancel the goal in progress: halt at once with a zero command."""
        run = None if self.ctl is None else self.ctl.run
        if run is None or not run.in_progress or run.goal != bytes(handle.goal_id.uuid):
            return CancelResponse.REJECT
        self.ctl.halt(self.clock(), 'canceled')
        self.publish_command(self.ctl.take_zeros())
        self.publish_status()
        return CancelResponse.ACCEPT

    def on_run_end(self, run):
        """The controller ended a run: finish its goal, if it has one."""
        self.get_logger().info(f'run {run.outcome}: {run.message}')
        goal = self.goals.get(run.goal) if run.goal is not None else None
        if goal is not None and not goal.done.done():
            self.publish_feedback(goal, self.clock(), force=True)
            goal.done.set_result(self.ctl.result(run))

    def publish_feedback(self, goal, now, force=False):
        feedback = self.ctl.feedback(now)
        key = (feedback['active'], len(feedback['completed']), len(feedback['pressed']))
        if force or key != goal.feedback_key or now - goal.feedback_time >= FEEDBACK_PERIOD:
            goal.feedback_key, goal.feedback_time = key, now
            goal.handle.publish_feedback(ExecuteSketch.Feedback(**feedback))

    # ----- the control loop -------------------------------------------------------------------

    def on_tick(self):
        """One control step: the controller decides, this publishes (at most one command).
        Nothing once a stop is pending (a stop signal, or the parent's exit, checked here first,
        and again before publishing: a signal handled while the tick computed has sent its zero
        command, on_stop_signal): the way out sends the zero command next."""
        if stop_pending(self):
            return
        now = self.clock()
        command = self.ctl.tick(now, self.tick_duration)
        if command is not None and not self.stop_signals:
            self.publish_command(command)
        run = self.ctl.run
        if run is not None and run.in_progress and run.goal in self.goals:
            self.publish_feedback(self.goals[run.goal], now)
        self.publish_status()
        self.tick_duration = self.clock() - now

    def on_stop_signal(self, signum):
        """The first stop signal (node_util.stop_on_signals, from its handler): a zero command at
        once when active, before the way out (which sends the zero command again and waits for
        its acknowledgement). The arm stops within the time the process takes to be scheduled,
        not a control tick plus the executor's wake-up later. The handler runs between two
        bytecodes of the main thread: if that is inside publish_command, the zero goes out right
        after that command (which publish_command then drops if it had not gone out yet), so no
        command of the run follows the zero."""
        if self.lifecycle != 'active' or self.command_pub is None:
            return
        if self.publishing:
            self.zero_due = True
        else:
            self.publish_zero_now()

    def publish_zero_now(self):
        """The stop signal's zero command, recorded with the subscribers matched then (a subscriber
        that leaves with it unacknowledged is one that left, for the way out's wait)."""
        self.command_subscribers.append((self.clock(), self.command_pub.get_subscription_count()))
        self.command_pub.publish(Float64MultiArray(data=[0.0] * len(self.to_command)))
        self.zero_last = True

    # ----- output -----------------------------------------------------------------------------

    def publish_command(self, action, flush=False):
        """The action (A,) in model order; sent in command_joints order. flush: then wait until
        every reliable subscriber still matched has acknowledged it (ZERO_ACK_TIMEOUT at most;
        `wait_acknowledged`); a warning when one did not although none had left. Without flush,
        nothing once a stop signal came (on_stop_signal has sent, or sends right after this, the
        zero command)."""
        if self.command_pub is None:
            return
        self.publishing = True
        try:
            if not flush and self.stop_signals:
                return
            now, matched = self.clock(), self.command_pub.get_subscription_count()
            history = self.command_subscribers                 # [(t, matched)] of ACK_HISTORY s
            history.append((now, matched))
            while history[0][0] < now - ACK_HISTORY:
                history.popleft()
            before = max(n for _, n in history)
            if not (flush and self.zero_last and not np.any(action)):   # the signal's zero is out: wait for it
                self.command_pub.publish(Float64MultiArray(data=[float(x) for x in action[self.to_command]]))
                self.zero_last = False
            if flush:
                acked, left, matched = wait_acknowledged(self.command_pub, ZERO_ACK_TIMEOUT, before)
                if acked:
                    return
                text = (f'the zero command was not acknowledged within {ZERO_ACK_TIMEOUT:g} s by '
                        f'every subscriber: {matched} still matched, at most {before} in the last '
                        f'{ACK_HISTORY:g} s')
                if left:                        # not evidence of a miss (wait_acknowledged)
                    self.get_logger().debug(f'{text}, {left} left during the wait')
                else:
                    self.get_logger().warning(text)
        finally:
            self.publishing = False
            if self.zero_due:                   # a stop signal came while this published
                self.zero_due = False
                self.publish_zero_now()

    def model_vocab(self):
        return self.ctl.model.vocab

    def keypad_present(self):
        return self.count_publishers(self.pressed_sub.topic_name) > 0

    def inactive_reason(self):
        return (f'taco_policy is {self.lifecycle}, not active: activate it '
                f'(ros2 lifecycle set {self.get_fully_qualified_name()} activate)')

    def status(self):
        """The status JSON's fields (without joint_state_age)."""
        if self.ctl is None:
            status = {'state': 'idle', 'sketch': [], 'active': None, 'stop_times': [], 'stop_steps': [],
                      'steps': 0, 'error': self.problem, 'pressed': None}
        else:
            status = self.ctl.status()
        run = None if self.ctl is None else self.ctl.run
        status['goal'] = run.goal.hex() if run is not None and run.goal is not None else None
        status['lifecycle'] = self.lifecycle
        status['rejected'] = self.rejected
        return status

    def publish_status(self, force=False):
        status = self.status()
        text = json.dumps(status, sort_keys=True)
        if force or text != self.last_status:
            self.last_status = text
            qpos_time = None if self.ctl is None else self.ctl.qpos_time
            age = None if qpos_time is None else round(self.clock() - qpos_time, 4)
            self.status_pub.publish(String(data=json.dumps(dict(status, joint_state_age=age),
                                                           sort_keys=True)))

    def publish_diagnostics(self):
        """One DiagnosticStatus for the control loop (module docstring)."""
        now = self.clock()
        msg = DiagnosticArray()
        msg.header.stamp = self.get_clock().now().to_msg()
        status = DiagnosticStatus(name=f'{self.get_fully_qualified_name()}: control loop',
                                  hardware_id=self.c['command_topic'])
        values = {'lifecycle': self.lifecycle, 'target rate (Hz)': f'{self.c["rate"]:g}'}
        if self.ctl is None:
            status.level = DiagnosticStatus.ERROR if self.problem else DiagnosticStatus.OK
            status.message = f'{self.lifecycle}' + (f': {self.problem}' if self.problem else '')
        else:
            c = self.ctl.counters
            rate, max_interval, max_duration = c.window(now)
            age = None if self.ctl.qpos_time is None else now - self.ctl.qpos_time
            counts = {'overruns': c.overruns, 'stale joint states': c.stale_joint_states,
                      'rejected joint states': c.rejected_joint_states,
                      'watchdog trips': c.watchdog_trips, 'rejected sketches': c.rejected_sketches}
            new = {k: v - (self.last_counters or {}).get(k, 0) for k, v in counts.items()}
            self.last_counters = counts
            values.update({'rate achieved (Hz)': f'{rate:.2f}' if self.lifecycle == 'active' else '0',
                           'largest tick interval (ms)': f'{1e3 * max_interval:.1f}',
                           'longest tick (ms)': f'{1e3 * max_duration:.2f}',
                           'joint state age (s)': 'none' if age is None else f'{age:.3f}',
                           'state': self.ctl.runner.state, 'runs': str(c.runs),
                           'runs done': str(c.runs_done),
                           'inherited presses': str(c.inherited_presses),
                           'last rejection': c.last_rejection or ''})
            values.update({k: str(v) for k, v in counts.items()})
            problems = [f'{n} {k}' for k, n in new.items() if n]
            active = self.lifecycle == 'active'
            if active and rate < RATE_WARN * self.c['rate'] and c.ticks > self.c['rate']:
                problems.append(f'control rate {rate:.1f} Hz of {self.c["rate"]:g}')
            if active and (age is None or age > self.c['timeout']):
                problems.append('no fresh joint state')
            status.level = (DiagnosticStatus.ERROR if new['watchdog trips'] else
                            DiagnosticStatus.WARN if problems else DiagnosticStatus.OK)
            status.message = ('; '.join(problems) if problems else
                              f'{self.lifecycle}, {self.ctl.runner.state}')
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        msg.status = [status]
        self.diagnostics_pub.publish(msg)


def wait_acknowledged(publisher, timeout, matched_before=0, poll=ACK_POLL, clock=time.monotonic):
    """Wait until every reliable subscriber of publisher has acknowledged its messages, at most
    timeout s, counting the subscribers matched between slices of poll s. Returns (acknowledged,
    left, matched): acknowledged is True once every subscriber still matched has acknowledged
    (or none is left); left is how many of the subscribers matched before (matched_before: the most
    matched at the publishes of the last ACK_HISTORY s, or at the start if more) have gone
    (unmatched); matched, how many are matched at the end.

    A subscriber that stops at the same moment as this node (the sim node under the launch's
    Ctrl-C) can leave with messages unacknowledged; Fast DDS then goes on reporting "not all
    acknowledged" for a second or more although every subscriber still matched has them (seen in
    a three-process experiment, and on most Ctrl-Cs of the launch, where the benchmark's
    subscriber had received the zero: a plain wait_for_all_acked(0.5 s) warned on almost every
    normal stop). So a timeout after a subscriber left is no evidence that one still
    there missed the message; a timeout with every subscriber still there is.
    """
    deadline = clock() + timeout
    start = max(matched_before, publisher.get_subscription_count())
    while True:
        left = deadline - clock()
        acked = publisher.wait_for_all_acked(Duration(seconds=max(0.0, min(poll, left))))
        matched = publisher.get_subscription_count()
        if acked or matched == 0 or clock() >= deadline:
            return acked or matched == 0, max(0, start - matched), matched


def _start(node):
    forced = shared_memory_forced(rclpy.get_rmw_implementation_identifier())
    if forced:
        node.get_logger().warning(
            f'{forced}: rmw_fastrtps adds its shared-memory transport, and a subscriber process '
            'that stops while it holds its port (a frozen driver) can then block this node\'s '
            'publish, the zero command included, until it runs again; leave the discovery range '
            'at SUBNET (with ROS_STATIC_PEERS=127.0.0.1 for one machine) to keep UDP alone')
    node.autostart()


def _stop(node):
    """On the way out: deactivate (zeros) and shut down, then let the goals' results go out."""
    if node.lifecycle in ('unconfigured', 'inactive', 'active'):
        node.trigger_shutdown()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline and rclpy.ok():
        rclpy.spin_once(node, timeout_sec=0.05)


def main(args=None):
    no_shared_memory_transport()                          # before rclpy.init: see its docstring
    return run(PolicyNode, 'taco_policy', args, start=_start, on_exit=_stop)


if __name__ == '__main__':
    sys.exit(main())
