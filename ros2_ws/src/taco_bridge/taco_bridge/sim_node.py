"""The simulated arm: taco_sim.dial's MuJoCo JACO2 and keypad, stepped in (scaled) real time.

Topic names are relative (`-r __ns:=/arm1` moves them all); without a namespace:
Subscribes
  <command_topic>  std_msgs/Float64MultiArray  the command of command_interface, the message a
                   ros2_control forward command controller takes: effort, one torque (N m) per
                   joint of joint_names (default topic effort_controller/commands); velocity,
                   one velocity target (rad/s) per arm joint, the first six of joint_names
                   (default topic velocity_controller/commands). Held until the next one, zeros
                   after command_timeout without one; wrong length or non-finite: ignored
Publishes
  joint_states     sensor_msgs/JointState  name (joint_names), position, velocity, effort (the
                   applied torques) at joint_state_rate, stamped with the node's clock
  dial/pressed     std_msgs/String         one message per key the keypad registers, data =
                   the digit ("5"): what was really dialled, which the policy node and
                   taco-bridge-send compare with the sketch

Start: with wait_for_command (the default) physics does not run until the first command
arrives, so a sketch starts exactly at the sampled start pose (home +- HOME_NOISE, as in
training). The arm compensates its own weight (like the JACO2 in torque mode), so zero effort
holds it still; efforts are added on top of that compensation. In velocity mode the arm's
velocity loop (taco_sim.dial.DialEnv.velocity_torque, spec/dial.md §7) turns the held targets
into torques at every physics step and holds the fingers closed; zero velocity stands still.

Disturbance (the harder test's, taco_sim.dial.disturb; spec/dial.md §11): `disturbance` names
one of its test conditions (noise-5, push, delay, start, harder, ...; empty: none). Its start
spread widens the start pose; every CONTROL_DT of simulated time the arm takes the command held
then (delay control steps late), draws the motors' torque noise for the step, and pushes the
forearm for push_steps control steps from 0-9 steps after the third registered press (the
middle digit of a PIN of 5: the node does not know the PIN). Its draws come from `seed`.

Real time: a wall-clock timer fires every step_period seconds and runs as many physics steps
(PHYSICS_DT = 2 ms each) as bring simulated time to real_time_factor x elapsed wall time; if it
falls more than max_lag seconds behind it drops the deficit (counted in `lag_resets`) instead of
running ever longer bursts. With real_time_factor f > 1 the policy node's rate must be 25 f Hz to
act once per CONTROL_DT of simulated time (the taco-bridge-dial script does this).

Symbol | Shape | Meaning
J      |       | joints (9: six arm joints, three fingers)
"""
import sys
import time

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

from taco_sim import dial
from taco_sim.dial.disturb import PUSH_BODY, TESTS, Episode
from taco_sim.dial.env import HOME_NOISE

from taco_bridge.node_util import declare, number, run, topic, value

TOPICS = {'effort': 'effort_controller/commands', 'velocity': 'velocity_controller/commands'}
"""command_interface -> default (relative) command topic: the ros2_control controller's."""

PARAMETERS = {
    'real_time_factor': (1.0, 'simulated seconds per wall-clock second'),
    'step_period': (0.004, 'wall-clock period (s) of the physics timer'),
    'max_lag': (0.1, 'simulated seconds the physics may fall behind before the deficit is dropped'),
    'joint_state_rate': (200.0, 'Hz of /joint_states'),
    'joint_names': (list(dial.JOINTS), 'joint names of /joint_states and of the effort command, '
                                       'in taco_sim.dial.JOINTS order'),
    'layout': ([int(x) for x in dial.STANDARD_LAYOUT], 'keypad slot of each digit 0..9'),
    'seed': (0, 'seeds the start pose (home +- HOME_NOISE)'),
    'command_interface': ('effort', 'effort: joint torques (N m); velocity: arm joint velocity targets '
                                    '(rad/s) executed by the simulated arm\'s velocity loop'),
    'command_topic': ('', 'topic of the command; empty: effort_controller/commands (effort) or '
                          'velocity_controller/commands (velocity)'),
    'command_timeout': (0.5, 'seconds without a command before it drops to zero (torque or velocity)'),
    'wait_for_command': (True, 'hold the start pose (no physics) until the first command'),
    'viewer': (False, 'open the passive mujoco.viewer window'),
    'disturbance': ('', 'a named test condition of taco_sim.dial.disturb (harder, noise-5, push, delay, '
                        'start, ...): the arm meets its disturbance; empty: none'),
}

PUSH_AFTER = 3
"""The sim node's push waits for this many registered presses (it does not know the PIN's length:
the middle digit of a PIN of 5, as the harder test's PINs of 5)."""


class SimNode(Node):
    """See the module docstring."""

    def __init__(self, **kwargs):
        super().__init__('taco_sim', **kwargs)
        declare(self, PARAMETERS)
        p = {name: value(self, name) for name in PARAMETERS}
        self.rtf = number(p, 'real_time_factor', 0, 100)
        self.max_lag = number(p, 'max_lag', 0, 10)
        step_period = number(p, 'step_period', 0, 1)
        joint_state_rate = number(p, 'joint_state_rate', 0, 1000)
        self.command_timeout = number(p, 'command_timeout', 0, 10)
        self.interface = p['command_interface']
        if self.interface not in TOPICS:
            raise ValueError(f'parameter command_interface: expected one of {", ".join(TOPICS)}, '
                             f'got {self.interface!r}')
        command_topic = topic(dict(p, command_topic=p['command_topic'] or TOPICS[self.interface]),
                              'command_topic')
        self.command_dim = dial.ACTION_DIM if self.interface == 'effort' else len(dial.VELOCITY_LIMITS)
        self.joint_names = list(p['joint_names'])
        self.waiting = bool(p['wait_for_command'])
        if len(self.joint_names) != dial.ACTION_DIM or len(set(self.joint_names)) != dial.ACTION_DIM:
            raise ValueError(f'parameter joint_names: expected {dial.ACTION_DIM} distinct names, '
                             f'got {self.joint_names}')
        self.disturbance = disturbance_of(p['disturbance'])
        self.env = dial.DialEnv()
        start = HOME_NOISE if self.disturbance is None else self.disturbance.start
        try:
            self.env.reset(seed=int(p['seed']), layout=np.asarray(p['layout'], dtype=np.int64), home_noise=start)
        except ValueError as err:
            raise ValueError(f'parameter {err}') from None
        self.episode = None if self.disturbance is None else Episode(self.disturbance, int(p['seed']),
                                                                     2 * PUSH_AFTER - 1, self.command_dim)
        self.executed = (np.zeros(self.command_dim), None)   # the disturbed arm's command and noise
        self.command = np.zeros(self.command_dim)    # (J,) torques or (6,) velocities: the held command
        self.command_time = None
        self.lag_resets = 0
        self.viewer = None
        if p['viewer']:
            import mujoco.viewer
            self.viewer = mujoco.viewer.launch_passive(self.env.model, self.env.data)

        self.joint_pub = self.create_publisher(JointState, 'joint_states', 10)
        self.press_pub = self.create_publisher(String, 'dial/pressed', 10)
        command_sub = self.create_subscription(Float64MultiArray, command_topic, self.on_command, 10)
        self.wall0, self.sim0 = time.monotonic(), self.env.time
        self.create_timer(step_period, self.on_physics)
        self.create_timer(1.0 / joint_state_rate, self.publish_joint_state)
        self.get_logger().info(f'JACO dial sim, layout {self.env.layout.tolist()}, '
                               f'real-time factor {self.rtf:g}, {self.interface} commands on '
                               f'{command_sub.topic_name}'
                               + (f', disturbance {p["disturbance"]}' if self.disturbance else ''))

    def on_command(self, msg):
        command = np.asarray(msg.data, dtype=np.float64)
        if command.shape != (self.command_dim,) or not np.isfinite(command).all():
            self.get_logger().warn(f'{self.interface} command needs {self.command_dim} finite numbers, '
                                   f'got {len(msg.data)}; ignored', throttle_duration_sec=5.0)
            return
        self.command, self.command_time = command, time.monotonic()

    def on_physics(self):
        now = time.monotonic()
        if self.waiting:
            if self.command_time is None:
                self.wall0, self.sim0 = now, self.env.time
                return
            self.waiting = False
        behind = self.sim0 + (now - self.wall0) * self.rtf - self.env.time
        if behind > self.max_lag:
            self.lag_resets += 1
            self.sim0 -= behind - self.max_lag
            behind = self.max_lag
        n = int(behind / dial.PHYSICS_DT)
        if n <= 0:
            return
        fresh = self.command_time is not None and now - self.command_time <= self.command_timeout
        command = self.command if fresh else np.zeros(self.command_dim)
        if self.episode is None:
            self.step(command, None, n)
        else:
            self.disturbed_steps(command, n)
        for digit in self.env.new_presses():
            self.press_pub.publish(String(data=dial.VOCAB[digit]))
            self.get_logger().info(f'pressed {dial.VOCAB[digit]}')
        if self.viewer is not None and self.viewer.is_running():
            self.viewer.sync()

    def step(self, command, noise, n):
        """n physics steps of the held command (torques, or the velocity loop's targets) with the
        motors' torque noise (J,) or None."""
        if self.interface == 'velocity':
            self.env.velocity_physics_step(command, n, noise)
        else:
            self.env.physics_step(command if noise is None else command + noise, n)

    def disturbed_steps(self, command, n):
        """n physics steps under the disturbance: at each control-step boundary of simulated time
        the episode takes the command held now and gives the one to execute (delayed) and the
        step's noise, and the push is on or off for the step."""
        body = self.env.model.body(PUSH_BODY).id
        steps = int(round(self.env.time / dial.PHYSICS_DT))
        while n > 0:
            if steps % dial.SUBSAMPLE == 0:
                self.executed = self.episode.command(command)
                force = self.episode.force(steps // dial.SUBSAMPLE, len(self.env.presses))
                self.env.data.xfrc_applied[body, :3] = 0.0 if force is None else force
            k = min(n, dial.SUBSAMPLE - steps % dial.SUBSAMPLE)
            self.step(*self.executed, k)
            steps += k
            n -= k

    def publish_joint_state(self):
        _, pos, vel, effort = self.env.joint_state()
        msg = JointState(name=self.joint_names, position=pos.tolist(), velocity=vel.tolist(),
                         effort=effort.tolist())
        msg.header.stamp = self.get_clock().now().to_msg()
        self.joint_pub.publish(msg)


def disturbance_of(name):
    """The Disturbance of a named test condition, None for '' (or a condition without one);
    ValueError naming the parameter otherwise."""
    if name == '':
        return None
    if name not in TESTS:
        raise ValueError(f'parameter disturbance: expected one of {", ".join(TESTS)} or empty, got {name!r}')
    d = TESTS[name].disturbance
    return None if d.none else d


def _close_viewer(node):
    if node.viewer is not None:
        node.viewer.close()


def main(args=None):
    return run(SimNode, 'taco_sim', args, on_exit=_close_viewer)


if __name__ == '__main__':
    sys.exit(main())
