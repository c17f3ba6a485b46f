"""What a real arm meets, for the Dial's harder test: disturbances of the simulated arm and the
named test conditions made of them (spec/dial.md §11, spec/evaluation.md §9).

A `Disturbance` changes the task environment, never the policy: a wider start pose, Gaussian
noise on the torque every motor receives (the commanded torque, or for `dial-velocity` the
velocity loop's, as a share of each motor's peak torque), a delay of whole control steps between a decision and its execution, and
a horizontal push on the forearm for a few control steps in the middle of the PIN. Everything
an episode draws comes from its seed: the start pose from the layout's stream
(`DialEnv.reset(seed, home_noise=start)`: one draw of the same uniforms at any spread), the
noise and the push from `default_rng([seed, DISTURB_STREAM])`, so an episode is a function of
(model, PIN, seed, disturbance) and two models are compared on the same disturbances.

`TESTS` names the conditions `taco evaluate --test NAME` and a grid's `--tests` run: each a
disturbance and the PIN lengths it draws. Their levels were set on validation PINs with the
expert (`DialExpert`, which must complete at least 99 % of them), before any model was scored:
`taco_app/analysis/dial_harder_levels.py` measures it, spec/dial.md §11 gives its figures.

Symbol | Shape | Meaning
A      |       | action dimension: 9 torques, or 6 velocity targets (dial-velocity)
"""
from dataclasses import dataclass, field

import numpy as np

from taco_sim.dial.env import HOME_NOISE, TORQUE_LIMITS

DISTURB_STREAM = 3
"""An episode of seed s draws its action noise and its push from default_rng([s, DISTURB_STREAM])."""
PUSH_BODY = "link_3"
"""The body pushed: the JACO2's forearm (elbow to wrist)."""
PUSH_JITTER = 10
"""The push starts 0 to PUSH_JITTER - 1 control steps (drawn per episode) after the middle digit
of the PIN, digit ceil(L / 2), registers."""


@dataclass(frozen=True)
class Disturbance:
    """How the simulated arm departs from the commands it is given (all at their defaults: the
    standard test's arm).

    Field      | Meaning
    start      | half-width (rad) of the uniform start pose around HOME, per joint (0.03 standard)
    noise      | std of Gaussian noise added to each motor's torque, as a share of its peak torque
               | (TORQUE_LIMITS), drawn anew every control step and held through it (for
               | dial-velocity: added to the velocity loop's torque at every physics step)
    delay      | control steps between a decision and its execution; the arm executes a zero
               | action (hold, on top of gravity compensation) until the first decision arrives
    push       | newtons of a horizontal force on the forearm, in a direction drawn per episode
    push_steps | control steps the push lasts (from PUSH_JITTER steps after mid-PIN)
    """

    start: float = HOME_NOISE
    noise: float = 0.0
    delay: int = 0
    push: float = 0.0
    push_steps: int = 3

    def __post_init__(self):
        for name, low, high in (("start", 0.0, 0.5), ("noise", 0.0, 1.0), ("push", 0.0, 500.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"Disturbance.{name}: expected a number in [{low}, {high}], got {value!r}")
        for name, high in (("delay", 10), ("push_steps", 100)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= high:
                raise ValueError(f"Disturbance.{name}: expected an integer in [0, {high}], got {value!r}")

    @property
    def none(self):
        """Whether the arm is the standard test's (no disturbance but the default start)."""
        return self == Disturbance()


class Episode:
    """One episode's draws and state under a disturbance: the commands waiting to execute, the
    noise stream and the push's schedule and direction."""

    def __init__(self, disturbance, seed, sketch_len, action_dim):
        self.d = disturbance
        self.rng = np.random.default_rng([0 if seed is None else int(seed), DISTURB_STREAM])
        angle = self.rng.uniform(0.0, 2 * np.pi)                       # drawn first: the same push
        self.direction = np.array([np.cos(angle), np.sin(angle), 0.0])  # for any noise level
        self.jitter = int(self.rng.integers(PUSH_JITTER))
        self.mid = (int(sketch_len) + 1) // 2                            # digits registered before it
        self.waiting = [np.zeros(action_dim) for _ in range(disturbance.delay)]
        self.push_from = None                                            # the control step it starts

    def command(self, action):
        """(the action executed at this control step (A,): the one decided delay steps ago, the
        motors' torque noise for the step (9,) or None)."""
        self.waiting.append(np.asarray(action, dtype=np.float64))
        executed = self.waiting.pop(0)
        if self.d.noise > 0:
            return executed, self.rng.normal(0.0, 1.0, TORQUE_LIMITS.shape) * self.d.noise * TORQUE_LIMITS
        return executed, None

    def force(self, t, progress):
        """(3,) the force on the forearm at control step t with progress digits registered."""
        if self.d.push <= 0 or self.d.push_steps == 0:
            return None
        if self.push_from is None and progress >= self.mid:
            self.push_from = t + self.jitter
        if self.push_from is not None and self.push_from <= t < self.push_from + self.d.push_steps:
            return self.d.push * self.direction
        return None


@dataclass(frozen=True)
class TestCondition:
    """A named test condition of the Dial: its disturbance, the PIN lengths it draws (each PIN's
    length uniform over `lengths`) and, for an ablation, the STOP hold it executes with (None:
    the model's own)."""

    about: str
    disturbance: Disturbance = field(default_factory=Disturbance)
    lengths: tuple = (5,)
    stop_hold: object = None

    def sketches(self, n, rng):
        """n PINs (n, max(lengths)) int64, rows padded with -1: each PIN's length drawn uniformly
        from lengths, then its digits (expert.sample_sketches's rule: no digit twice in a row)."""
        from taco_sim.dial.expert import sample_sketches
        chosen = np.asarray(self.lengths)[rng.integers(len(self.lengths), size=n)]      # (n,)
        out = np.full((n, max(self.lengths)), -1, dtype=np.int64)
        for i, L in enumerate(chosen):
            out[i, :L] = sample_sketches(1, int(L), rng)[0]
        return out


class DialExpert:
    """The Dial's expert on the evaluation protocol (taco_ref.evaluate.Expert's make): it acts by
    the expert's set-point controller from the observation (expert.expert_torque_from_obs, or
    velocity.expert_velocity_from_obs for the velocity variant) and says STOP once the keypad
    has registered its digit (it reads the simulator's keypad, as the demonstrations' labels
    do). Used to set the harder test's levels, never to score a method."""

    def __init__(self, env):
        from taco_sim.dial.expert import expert_torque_from_obs
        from taco_sim.dial.velocity import DialVelocityTask, expert_velocity_from_obs
        self.env = env
        self.act = expert_velocity_from_obs if isinstance(env, DialVelocityTask) else expert_torque_from_obs

    def stops(self, subtask, state):
        return self.env.progress > len(self.env._record["stops"])

    def action(self, subtask, state, rng):
        return self.act(self.env.env.obs, subtask)


@dataclass(frozen=True)
class NamedTest:
    """A test condition bound to one domain's task environment (Domain.tests' values)."""

    about: str
    make_env: object
    sketches: object
    stop_hold: object = None


def named_tests(task_of):
    """{name: NamedTest} of TESTS for a domain whose task environment under a disturbance is
    task_of(disturbance) (the torque, velocity or image DialTask on the standard keypad)."""
    from functools import partial
    return {name: NamedTest(c.about, partial(task_of, c.disturbance), c.sketches, c.stop_hold)
            for name, c in TESTS.items()}


HARDER = Disturbance(start=0.1, noise=0.03, delay=1, push=40.0, push_steps=3)
"""The harder test's arm: each disturbance at a magnitude a real arm meets (spec/dial.md §11): a
start pose ±0.1 rad per joint (±0.03 in the standard test), noise of 3 % of each motor's peak
torque every control step, commands one control step (40 ms) late, and a 40 N push on the forearm for
three control steps after the middle digit."""
LONG = tuple(range(5, 11))
"""The harder test's PIN lengths: 5 (the standard test's) to 10, each PIN's drawn uniformly."""

TESTS = {
    "harder": TestCondition("every disturbance at once, PINs of 5-10 digits", HARDER, LONG),
    "harder-stop-once": TestCondition("the harder test with a STOP decided in one step (an ablation of the "
                                      "two-step hold)", HARDER, LONG, stop_hold=1),
    "start": TestCondition("a start pose ±0.1 rad per joint", Disturbance(start=0.1)),
    "noise-1": TestCondition("torque noise 1 % of each limit", Disturbance(noise=0.01)),
    "noise-2": TestCondition("torque noise 2 % of each limit", Disturbance(noise=0.02)),
    "noise-3": TestCondition("torque noise 3 % of each limit", Disturbance(noise=0.03)),
    "noise-5": TestCondition("torque noise 5 % of each limit", Disturbance(noise=0.05)),
    "delay": TestCondition("commands one control step late", Disturbance(delay=1)),
    "push": TestCondition("a 40 N push on the forearm for 3 control steps mid-PIN", Disturbance(push=40.0)),
    "long": TestCondition("PINs of 5-10 digits, no disturbance", Disturbance(), LONG),
}
"""The Dial's named test conditions beside the standard test (spec/dial.md §11, spec/evaluation.md
§9): the harder test, its ablation with a one-step STOP, and each disturbance alone (the noise at
the levels a robot user asks about). Fixed on validation PINs with the expert before any model
was scored on them. The noise is on the motors' torques for every variant: for dial-velocity it
is added to the velocity loop's torque, which the loop then fights (spec/dial.md §11)."""
