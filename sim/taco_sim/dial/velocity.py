"""The Dial's velocity variant (domain "dial-velocity"): the policy commands joint velocities.

Same arm, keypad, observation (D = 39), PINs, layouts and evaluation as the torque variant
(``env``, ``expert``); only the action differs. The action is the six arm joints' velocity
targets (rad/s), the command a ros2_control JointGroupVelocityController or Kinova's
angular-velocity mode takes, executed in the simulation by a firmware-like velocity loop
(``DialEnv.velocity_torque``, spec/dial.md §7) that runs at every 2 ms physics step while a
target is held for the 40 ms control step. The fingers are not in the action: the pointing hand
keeps them closed, a velocity-controlled arm drives them through its own gripper interface, and
in the simulation the velocity mode holds them closed (``FINGER_HOLD_KP``).

The expert (spec/dial.md §7) uses the torque expert's set-points (``expert.set_point``) and its
bounded joint error, and turns the error into a velocity:

  v = GAIN * c (q* - q),  c = min(1, min_j MAX_ERROR_j / |q*_j - q_j|)

GAIN = KP / b, the torque expert's gain over the joints' damping, is the rate at which the torque
expert's damping-limited motion closes the error; so both experts move alike, at most
GAIN * MAX_ERROR = 0.4 (joints 1-3) and 0.48 rad/s (4-6), under the arm's 0.63 and 0.84 rad/s.

Symbol | Shape | Meaning
D      |       | state dimension = 39 (as the torque variant)
A      |       | action dimension = 6 arm joint velocity targets (rad/s)
"""
import numpy as np

from taco_sim.dial.env import K, VELOCITY_LIMITS, kinematics
from taco_sim.dial.expert import (MAX_ERROR, DialTask, Variant, collect_variant,
                                  set_point)

ACTION_DIM = 6
"""A: arm joint velocity targets 1..6 (rad/s)."""
GAIN = np.array([5.0, 5.0, 5.0, 4.0, 4.0, 4.0])
"""(6,) the expert's velocity per rad of set-point error (1/s): KP / damping of the torque
expert and the MJCF (60 / 12 and 8 / 2)."""
DART_SIGMA_VELOCITY = 0.3
"""Default DART level for this variant: noise N(0, (level * VELOCITY_LIMITS)^2), level ~
U(0, 0.3), i.e. up to 0.19 rad/s (joints 1-3) and 0.25 rad/s (4-6); the torque variant's
noise, up to 3 N m / 12 and 0.68 N m / 2 of damping, moves the joints by as much. Every attempt
succeeds at this level; the shipped model's data used 0.6 (spec/dial.md §7)."""


def expert_velocity_from_obs(obs, digit):
    """Clean expert velocity targets (6,) (rad/s) from the observation (D,) and the target digit."""
    obs = np.asarray(obs, dtype=np.float64)
    q9 = obs[:9]
    tip = kinematics().fingertip(q9)
    key_pos = obs[9:].reshape(K, 3) + tip                                              # (K, 3)
    err = set_point(q9, tip, key_pos, digit) - q9[:6]                                  # (6,)
    err *= min(1.0, float(np.min(MAX_ERROR / np.maximum(np.abs(err), 1e-12))))        # keep direction
    return np.clip(GAIN * err, -VELOCITY_LIMITS, VELOCITY_LIMITS)


class DialVelocityTask(DialTask):
    """A DialTask whose actions are arm joint velocity targets (6,) (rad/s)."""

    action_dim = ACTION_DIM
    action_limits = VELOCITY_LIMITS

    def _act(self, action, torque_noise=None):
        """One control step of the velocity loop towards action (6,) (rad/s), with the motors'
        torque noise (9,) added to the loop's torque where given."""
        return self.env.velocity_step(action, torque_noise)


def task_env():
    """A DialVelocityTask on the standard layout (the evaluation protocol's environment)."""
    return DialVelocityTask(layout="standard")


def validation_env():
    """A DialVelocityTask on a random layout per episode (expert.validation_env's counterpart)."""
    return DialVelocityTask(layout="random")


VELOCITY = Variant("dial-velocity", DialVelocityTask, expert_velocity_from_obs, VELOCITY_LIMITS)
"""The velocity variant for expert.collect_variant."""


def collect(n, sketch_len, seed, dart_sigma=DART_SIGMA_VELOCITY, sketches=None, progress=None, workers=1,
            motor_noise=0.0, disturbance=None):
    """n DART demonstrations of the velocity expert (actions (N, T, 6), rad/s); otherwise as
    taco_sim.dial.collect (random layouts, per-demonstration seeds, equal for any workers;
    motor_noise, disturbance: what the demonstrations' arm meets, collect_variant's)."""
    return collect_variant(VELOCITY, n, sketch_len, seed, dart_sigma=dart_sigma, sketches=sketches,
                           progress=progress, workers=workers, motor_noise=motor_noise,
                           disturbance=disturbance)
