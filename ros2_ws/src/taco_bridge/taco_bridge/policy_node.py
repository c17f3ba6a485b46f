"""The TACO policy node: executes a sketch on a JACO arm with a taco_ref model's sub-policies.

Subscribes
  /taco/sketch        std_msgs/String       "0 5 1 6" or "0,5,1,6" (names or ids of the model's
                                            vocabulary); "" or "stop" halts
  /joint_states       sensor_msgs/JointState joints matched by name
Publishes
  <command_topic>     std_msgs/Float64MultiArray  one effort (N m) per joint of command_joints,
                      default /effort_controller/commands (the ros2_control effort controller's
                      topic): the policy's torques at every control tick while a sketch runs;
                      one message of zeros when a run ends (done, error, watchdog), on "stop"
                      or "" and on a rejected sketch, and on shutdown. Nothing while idle: an
                      effort controller holds the last command it got, which is then zeros.
  /taco/status        std_msgs/String       JSON of taco_ref.runner.SketchRunner.status() plus
                      "joint_state_age" (s, or null); on every change and at status_rate

Everything that decides a torque is in taco_ref.runner (parse_sketch, SketchRunner) and
taco_sim.dial.observation_from_joints (forward kinematics on the project's MJCF); this node only
moves messages. Control runs on a wall-clock timer at `rate` Hz; a new sketch is acted on at
once (and the timer restarted) so the first command follows the sketch without waiting a tick.

Safety: torques clipped to torque_limits; no joint state fresher than joint_state_timeout while
running ends the run in error (zeros commanded; a sketch started before any fresh joint state
gets joint_state_timeout from its start); a sketch that does not parse is rejected with an
error status (the run in progress halts, the node keeps running); max_subtask_time bounds each
sub-task; an exception inside a callback ends the run in error instead of killing the node.

Symbol | Shape | Meaning
J      |       | joints in the model's action order (9: six arm joints, three fingers)
K      |       | sub-tasks (digits)
D      |       | observation size = 39
"""
import json
import os
import sys
import time

import numpy as np
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

import taco_sim
from taco_ref import model as model_mod
from taco_ref.runner import SketchRunner, parse_sketch
from taco_sim import dial

from taco_bridge.node_util import declare, run, value

DEFAULT_MODEL = taco_sim.get('dial').models['default']
"""The shipped Dial model (weights.npz + model.json), used when the model parameter is empty."""
HALT_WORDS = ('', 'stop')

PARAMETERS = {
    # name: (default, description); None: an optional array, unset by default
    'model': ('', 'taco_ref model directory; empty: the shipped Dial model'),
    'rate': (1.0 / dial.CONTROL_DT, 'control rate (Hz); the policies were trained at 25 Hz'),
    'joint_names': (list(dial.JOINTS), 'robot joint names in the model action order'),
    'command_joints': (None, 'joint order of the effort command; unset: joint_names'),
    'torque_limits': ([float(x) for x in dial.TORQUE_LIMITS],
                      'per-joint torque limits (N m), joint_names order'),
    'layout': ([int(x) for x in dial.STANDARD_LAYOUT],
               'keypad slot of each digit 0..9 (taco_sim.dial); used unless key_positions is set'),
    'key_positions': (None, 'world (x, y, z) of each digit key top, 30 numbers (m), digit order'),
    'joint_state_timeout': (0.25, 'watchdog: seconds without a joint state before zero torque'),
    'max_subtask_time': (20.0, 'seconds one sub-task may stay active before an error'),
    'stop_threshold': (0.5, 'a sub-policy stops when P(STOP) exceeds this'),
    'status_rate': (1.0, 'Hz of the periodic status message (it is also sent on every change)'),
    'command_topic': ('/effort_controller/commands', 'topic of the effort command'),
}
OPTIONAL_TYPES = {'command_joints': Parameter.Type.STRING_ARRAY,
                  'key_positions': Parameter.Type.DOUBLE_ARRAY}


def dial_model(path):
    """Load and check a model for the Dial domain; ModelError / ValueError with the reason."""
    path = path or DEFAULT_MODEL
    if not os.path.isdir(path):
        hint = ' (the shipped Dial model has not been installed)' if path == DEFAULT_MODEL else ''
        raise model_mod.ModelError(f'model directory {path} does not exist{hint}')
    model = model_mod.load(path)
    cfg = model.policy
    if (cfg.state_dim, cfg.action_dim, cfg.discrete) != (dial.STATE_DIM, dial.ACTION_DIM, False):
        raise ValueError(f'{path}: a Dial model has D={dial.STATE_DIM}, A={dial.ACTION_DIM} '
                         f'continuous actions; this one D={cfg.state_dim}, A={cfg.action_dim}, '
                         f'discrete={cfg.discrete}')
    return model, path


def joint_positions(msg, names):
    """(J,) positions of names taken from a JointState by name, or None if one is missing."""
    index = {n: i for i, n in enumerate(msg.name)}
    if any(n not in index or index[n] >= len(msg.position) for n in names):
        return None
    return np.array([msg.position[index[n]] for n in names], dtype=np.float64)   # (J,)


class PolicyNode(Node):
    """Sketch in, torques out; see the module docstring."""

    def __init__(self, **kwargs):
        super().__init__('taco_policy', **kwargs)
        declare(self, PARAMETERS, OPTIONAL_TYPES)
        p = {name: value(self, name) for name in PARAMETERS}
        self.model, self.model_path = dial_model(p['model'])
        self.rate = float(p['rate'])
        self.joint_names = list(p['joint_names'])
        self.command_joints = list(p['command_joints'] or self.joint_names)
        limits = np.asarray(p['torque_limits'], dtype=np.float64)               # (J,)
        J = dial.ACTION_DIM
        if len(self.joint_names) != J or limits.shape != (J,):
            raise ValueError(f'joint_names and torque_limits need {J} entries each, got '
                             f'{len(self.joint_names)} and {limits.size}')
        if sorted(self.command_joints) != sorted(self.joint_names):
            raise ValueError(f'command_joints {self.command_joints} must be a permutation of '
                             f'joint_names {self.joint_names}')
        self.to_command = np.array([self.joint_names.index(n) for n in self.command_joints])
        if p['key_positions'] is not None:
            key_pos = np.asarray(p['key_positions'], dtype=np.float64)
            if key_pos.shape != (3 * dial.K,):
                raise ValueError(f'key_positions needs {3 * dial.K} numbers, got {key_pos.size}')
            self.key_pos = key_pos.reshape(dial.K, 3)                            # (K, 3)
        else:
            self.key_pos = dial.key_positions(np.asarray(p['layout'], dtype=np.int64))
        self.timeout = float(p['joint_state_timeout'])
        if not (self.rate > 0 and self.timeout > 0 and float(p['status_rate']) > 0):
            raise ValueError('rate, joint_state_timeout and status_rate must be positive')
        self.runner = SketchRunner(self.model.params, self.model.policy, self.model.vocab,
                                   limits=limits, max_subtask_time=float(p['max_subtask_time']),
                                   stop_threshold=float(p['stop_threshold']))
        self.qpos = None                  # (J,) latest joint positions, model order
        self.qpos_time = None             # time.monotonic() of their arrival
        self.last_status = None

        self.command_pub = self.create_publisher(Float64MultiArray, p['command_topic'], 10)
        self.status_pub = self.create_publisher(String, '/taco/status', 10)
        self.create_subscription(String, '/taco/sketch', self.on_sketch, 10)
        self.create_subscription(JointState, '/joint_states', self.on_joint_state, 10)
        self.control_timer = self.create_timer(1.0 / self.rate, self.on_tick)
        self.create_timer(1.0 / float(p['status_rate']), lambda: self.publish_status(force=True))
        self.get_logger().info(
            f'model {self.model_path} (vocabulary {" ".join(self.model.vocab)}), {self.rate:g} Hz, '
            f'commands on {p["command_topic"]} for {self.command_joints}')
        self.publish_status(force=True)

    # ----- callbacks --------------------------------------------------------------------------

    def on_joint_state(self, msg):
        q = joint_positions(msg, self.joint_names)
        if q is None:
            self.get_logger().warn(f'joint state without all of {self.joint_names}; ignored',
                                   throttle_duration_sec=5.0)
            return
        self.qpos, self.qpos_time = q, time.monotonic()

    def on_sketch(self, msg):
        text = msg.data
        if text.strip().lower() in HALT_WORDS:
            self.runner.halt()
            self.publish_command(None)
        else:
            try:
                sketch = parse_sketch(text, self.model.vocab)
            except ValueError as err:
                self.runner.reject(f'sketch rejected: {err}')
                self.publish_command(None)
                self.get_logger().warning(self.runner.error)
            else:
                self.runner.start(sketch, time.monotonic())
                self.control_timer.reset()
                self.on_tick()
                return
        self.publish_status()

    def on_tick(self):
        if self.runner.state != 'running':
            self.publish_status()
            return
        try:
            action = self.control_step(time.monotonic())
        except Exception as err:  # a bug or bad data must not kill the node holding the arm
            self.runner.fail(f'control step failed: {type(err).__name__}: {err}')
            action = None
        self.publish_command(action)    # None (this tick ended the run): zeros
        self.publish_status()

    def control_step(self, now):
        """The (J,) torques to command now, or None (zeros); applies the watchdog.

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
                self.runner.fail(f'no fresh joint state within {self.timeout:g} s ({age})')
            return None
        obs = dial.observation_from_joints(self.qpos, self.key_pos)              # (D,)
        return self.runner.step(obs, now)

    # ----- output -----------------------------------------------------------------------------

    def publish_command(self, action):
        """Torques (J,) in model order, or None for zeros; sent in command_joints order."""
        torque = np.zeros(len(self.joint_names)) if action is None else action
        self.command_pub.publish(Float64MultiArray(data=[float(x) for x in torque[self.to_command]]))

    def publish_status(self, force=False):
        status = self.runner.status()
        text = json.dumps(status, sort_keys=True)
        if force or text != self.last_status:
            self.last_status = text
            age = None if self.qpos_time is None else round(time.monotonic() - self.qpos_time, 4)
            self.status_pub.publish(String(data=json.dumps(dict(status, joint_state_age=age),
                                                           sort_keys=True)))


def _halt(node):
    node.runner.halt()
    node.publish_command(None)          # leave the effort controller holding zeros


def main(args=None):
    return run(PolicyNode, 'taco_policy', args, on_exit=_halt)


if __name__ == '__main__':
    sys.exit(main())
