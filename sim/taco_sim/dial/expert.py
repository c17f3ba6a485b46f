"""The Dial domain's expert, task interface and demonstration collection (paper Sec. 5.3, appendix).

The expert is a joint-space P controller (on top of the arm's own gravity compensation, as in the
JACO2's torque mode: the MJCF bodies carry gravcomp) towards a set-point that is a
function of the state only, evaluated once per control step and held for SUBSAMPLE physics steps
(exactly how a learned sub-policy acts). For target digit d with slot s = layout[d]:

  1. fingertip horizontally within ``PRESS_RADIUS`` of key s      -> set-point PRESS[s] (descend)
  2. else, fingertip below the key tops + ``CLEARANCE``          -> HOVER[nearest slot] (lift straight up)
  3. else                                                         -> HOVER[s] (travel at hover height)

  torque = KP * c (q* - q), c = min(1, min_j MAX_ERROR_j / |q*_j - q_j|)   (arm)
  torque = KP_FINGER * (FINGERS_CLOSED - q_f)                      (fingers: a closed, pointing hand)

Gravity is compensated by the arm itself, so the action is only the corrective torque: a small,
smooth function of the state that a learned policy can fit to a useful accuracy (with the
gravity torques in the action, tens of N m, the policies' fit errors of a few N m swamped the
corrective part, at most KP * MAX_ERROR = 4.8 N m, and rollouts drifted). There is no integral term and
no velocity term: the MJCF's joint damping and armature (the harmonic drives) damp the motion, with
KP chosen so the closed loop's natural frequency (about 7 rad/s) is far below the 25 Hz control
rate. Bounding the joint error (scaled as a vector, so its direction is kept) bounds the torque
and hence the joint speed (damping-limited, about KP * MAX_ERROR / damping), which does the job
minimum-jerk set-points would do — slow, smooth motion that does not dip onto neighbouring keys — while keeping the torque a Markov function of
(observation, target digit): the policy, which sees joint angles and key offsets only, can
represent it exactly. HOVER and PRESS (joint poses for every slot) come from ``solve_ik`` once per
process, seeded from HOME, so all lie in one elbow-up branch.

A press ends the sub-task: the label of step t is the progress at s_t (Nav-World convention), so
after a press the next digit's rule 2 lifts the finger, which releases (re-arms) the key.

Symbol | Shape | Meaning
N      |       | demonstrations
T      |       | control steps; budget(L) at most
L      |       | sketch (PIN) length
K      |       | digits = 10
D, A   |       | state 39, action 9
"""
import multiprocessing
from dataclasses import asdict, dataclass, replace
from typing import Callable

import numpy as np

from taco_ref.data import assemble, collected_on
from taco_sim import sketch_array
from taco_sim.domain import SketchProgress, check_collect_args, check_dart_sigma, collect_sketches
from taco_sim.dial.disturb import PUSH_BODY, Disturbance, Episode
from taco_sim.dial.env import (ACTION_DIM, FINGERS_CLOSED, HOME, HOME_NOISE, K, PHYSICS_DT, PRESS_DEPTH, SLOT_LABELS,
                               SLOTS, STATE_DIM, SUBSAMPLE, TORQUE_LIMITS, VOCAB, DialEnv, check_layout,
                               kinematics, sample_layout)

HOVER_HEIGHT = 0.07
"""Fingertip height above the key tops at the hover poses (m)."""
PRESS_HEIGHT = -0.035
"""Fingertip height relative to the key tops at the press poses (m): beyond the 12 mm travel."""
PRESS_RADIUS = 0.012
"""Descend when the fingertip is horizontally within this of the target key (m)."""
CLEARANCE = 0.03
"""Below key tops + CLEARANCE and away from the target, the expert first lifts (m)."""
KP = np.array([60.0, 60.0, 60.0, 8.0, 8.0, 8.0])
"""(6,) arm P gains (N m / rad)."""
MAX_ERROR = np.array([0.08, 0.08, 0.08, 0.12, 0.12, 0.12])
"""(6,) per-joint bound on the set-point error (rad); a larger error is scaled down as a whole,
which keeps its direction (straight lines in joint space, no dip between hover poses)."""
KP_FINGER = 2.0
"""Finger P gain (N m / rad)."""
IK_TOLERANCE = 1e-4
"""Hover and press poses must reach their targets within this residual (m, rad)."""

NEAR_KEY = 0.025
"""failure_detail: a fingertip horizontally within this of a key's centre is over the key (m;
keys sit 0.07 apart)."""
NEIGHBOUR_KEY = 0.1
"""failure_detail: a key within this of the target (m) is a neighbour (the diagonal is 0.099)."""
OSCILLATION = 6
"""failure_detail: reversals of the fingertip's vertical motion over the key that make a time-out
an oscillation."""
JOINT_LIMIT_MARGIN = 0.02
"""failure_detail: an arm joint within this of its range's end (rad) is at its limit."""
STOP_TOLERANCE = 0.06
"""The paper's per-sub-task rule (spec/evaluation.md eq. (10)): a sub-task counts when its
sub-policy's STOP fires with the fingertip within this L1 distance (m) of its key's rest top,
as the original code judged the Dial; keys and presses play no part in it."""

DART_SIGMA = 0.1
"""Default DART noise level: a demonstration draws level ~ U(0, dart_sigma) and adds
N(0, (level * TORQUE_LIMITS)^2) to each executed torque."""
STEPS_PER_DIGIT = 100
"""budget(L) = STEPS_PER_DIGIT * L control steps (the expert needs about half)."""
CHUNK = 4
"""collect hands out demonstrations in chunks of this size (progress is per chunk)."""
MAX_ATTEMPTS = 50
"""collect gives up (ValueError naming dart_sigma) if one demonstration fails this many times in a row."""

_POSES = None


def poses():
    """(HOVER (S, 6), PRESS (S, 6)) arm poses per slot, solved once per process by IK from HOME."""
    global _POSES
    if _POSES is None:
        kin = kinematics()
        hover, press = np.zeros((SLOTS, 6)), np.zeros((SLOTS, 6))
        for s in range(SLOTS):
            hover[s], e1 = kin.solve_ik(HOME, kin.slot_pos[s] + [0.0, 0.0, HOVER_HEIGHT])
            press[s], e2 = kin.solve_ik(hover[s], kin.slot_pos[s] + [0.0, 0.0, PRESS_HEIGHT])
            if max(e1, e2) > IK_TOLERANCE:
                raise RuntimeError(f"IK for slot {s} did not converge (residuals {e1:.2g}, {e2:.2g})")
        _POSES = hover, press
    return _POSES


TRAIN_SKETCH_LEN = 4
"""L of the training data (paper Sec. 5.3.1)."""
TEST_SKETCH_LEN = 5
"""L_test of the test PINs (paper figure 7), dialled on the standard layout."""


def task_env():
    """A DialTask on the standard layout: the task environment taco_app.grid.cell evaluates in."""
    return DialTask(layout="standard")


def validation_env():
    """A DialTask on a random layout per episode (drawn from its seed, never the standard one):
    the training data's distribution, for choosing a training epoch by rollouts without
    touching the test condition (spec/training.md §5)."""
    return DialTask(layout="random")


def budget(sketch_len):
    """Control-step budget for a PIN of length sketch_len (see STEPS_PER_DIGIT)."""
    return STEPS_PER_DIGIT * int(sketch_len)


def set_point(q9, fingertip, key_pos, digit):
    """Arm set-point (6,) for target digit at joint angles q9 (9,), fingertip (3,), key_pos (K, 3)."""
    hover, press = poses()
    slot_pos = kinematics().slot_pos                                                  # (S, 3)
    target = key_pos[digit]                                                           # (3,)
    slot = int(np.argmin(np.linalg.norm(slot_pos - target, axis=1)))
    if np.linalg.norm(fingertip[:2] - target[:2]) < PRESS_RADIUS:
        return press[slot]
    if fingertip[2] < target[2] + CLEARANCE:
        nearest = int(np.argmin(np.linalg.norm(slot_pos[:, :2] - fingertip[:2], axis=1)))
        return hover[nearest]
    return hover[slot]


def expert_torque_from_obs(obs, digit):
    """Clean expert torque (A,) from the observation (D,) alone and the target digit."""
    obs = np.asarray(obs, dtype=np.float64)
    q9 = obs[:9]
    kin = kinematics()
    tip = kin.fingertip(q9)
    key_pos = obs[9:].reshape(K, 3) + tip                                              # (K, 3)
    torque = np.empty(ACTION_DIM)
    err = set_point(q9, tip, key_pos, digit) - q9[:6]                                  # (6,)
    err *= min(1.0, float(np.min(MAX_ERROR / np.maximum(np.abs(err), 1e-12))))        # keep direction
    torque[:6] = KP * err
    torque[6:] = KP_FINGER * (FINGERS_CLOSED - q9[6:])
    return np.clip(torque, -TORQUE_LIMITS, TORQUE_LIMITS)


def expert_torque(env, digit):
    """Clean expert torque (A,) for env's current state and target digit (a function of env.obs)."""
    return expert_torque_from_obs(env.obs, digit)


def _check_sketches(sketches, sketch_len=None):
    """sketches as (n, L) int64 digits with no digit equal to its predecessor; ValueError otherwise."""
    arr = sketch_array(sketches, K, sketch_len, what="digits")
    bad = (arr[:, 1:] == arr[:, :-1]).any(axis=1)
    if bad.any():
        raise ValueError(f"sketch: consecutive digits must differ, got {arr[bad][0].tolist()}")
    return arr


def sample_sketches(n, sketch_len, rng, exclude=()):
    """n PINs (n, L) int64: uniform over digit sequences whose consecutive digits differ (repeats
    further apart are allowed: the finger lifts and re-arms the key in between), never one of exclude."""
    if sketch_len < 1:
        raise ValueError(f"sketch_len: expected >= 1, got {sketch_len}")
    excluded = {tuple(int(i) for i in s) for s in exclude}
    out = np.empty((n, sketch_len), dtype=np.int64)
    for i in range(n):
        for _ in range(10000):
            pin = [int(rng.integers(K))]
            for _ in range(sketch_len - 1):
                pin.append(int((pin[-1] + 1 + rng.integers(K - 1)) % K))
            if tuple(pin) not in excluded:
                break
        else:
            raise ValueError(f"sample_sketches: could not draw a PIN of length {sketch_len} outside exclude")
        out[i] = pin
    return out


def zero_shot_sketches(n, rng):
    """n test PINs (n, TEST_SKETCH_LEN): longer than the TRAIN_SKETCH_LEN training PINs."""
    return sample_sketches(n, TEST_SKETCH_LEN, rng)


class DialTask(SketchProgress):
    """One PIN-dialling episode on a DialEnv; the duck type of taco_sim.navworld.NavWorld.

    layout: "standard", an array (spec/dial.md §4), or "random": a layout drawn from each
    episode's seed (DialEnv.reset), as in the training data. disturbance: a
    taco_sim.dial.disturb.Disturbance the arm meets (the harder test), None for the standard arm.

    Attribute | Shape | Meaning
    env       |       | the DialEnv
    sketch    | (L,)  | the PIN's digits
    progress  |       | leading digits pressed correctly
    done      |       | all digits pressed in order
    failed    |       | a wrong digit was pressed (a real PIN pad rejects it: the episode is over)
    t         |       | control steps since reset
    """

    vocab = VOCAB
    state_dim = STATE_DIM
    action_dim = ACTION_DIM
    subtask_budget = None
    """No forced STOP: the budget of the whole PIN bounds a run."""

    def __init__(self, layout="standard", disturbance=None):
        self.layout = None if isinstance(layout, str) and layout == "random" else check_layout(layout)
        self.disturbance = None if disturbance is None or disturbance.none else disturbance
        self._episode = None
        self.env = DialEnv()
        self.sketch = None
        self.progress = 0
        self.failed = False
        self._record = {"tip": [], "saturated": [], "at_limit": [], "presses": [], "stops": []}

    def reset(self, sketch, seed=None):
        """Start dialling sketch (digits) from a home pose drawn from seed; returns obs (D,)."""
        self.sketch = _check_sketches(sketch)[0]
        self.progress = 0
        self.failed = False
        if self.disturbance is None:
            obs = self.env.reset(seed=seed, layout=self.layout)
        else:
            obs = self.env.reset(seed=seed, layout=self.layout, home_noise=self.disturbance.start)
            self._episode = Episode(self.disturbance, seed, len(self.sketch), self.action_dim)
        self._record = {"tip": [self.env.fingertip], "saturated": [], "at_limit": [], "presses": [],
                        "stops": []}
        return obs

    @property
    def t(self):
        return self.env.t

    def budget(self, sketch_len):
        return budget(sketch_len)

    def _count(self):
        for digit in self.env.new_presses():
            self._record["presses"].append((self.env.t, digit))
            if self.done or self.failed:
                break
            if digit == self.sketch[self.progress]:
                self.progress += 1
            else:
                self.failed = True

    def render(self, camera="front"):
        """(H, W, 3) uint8 picture of the episode (DialEnv.render)."""
        return self.env.render(camera)

    def keypad(self):
        """The pad now, for a picture of it (taco_app.plots.rollout draws one beside each frame:
        at the render's size a key is a few pixels). Slots are row-major, row 0 ("1 2 3" in the
        standard layout) nearest the robot, the top of the front camera's picture.

        Key     | Meaning
        cols    | slots per row (3)
        labels  | (SLOTS,) the digit (or * and #) at each slot in this episode's layout
        down    | (SLOTS,) bool: the key is pushed in past PRESS_DEPTH now
        presses | [(t, slot, counted)] every press so far: step, slot, whether it dialled the PIN
        target  | the slot of the next digit to dial (None when done or failed)"""
        labels = list(SLOT_LABELS)
        for digit, slot in enumerate(self.env.layout):
            labels[slot] = str(digit)
        presses = [(int(t), int(self.env.layout[d]), j < self.progress)
                   for j, (t, d) in enumerate(self._record["presses"])]
        target = None if self.sketch is None or self.target is None else int(self.env.layout[self.target])
        return {"cols": 3, "labels": labels, "down": (self.env.key_travel() < PRESS_DEPTH).tolist(),
                "presses": presses, "target": target}

    action_limits = TORQUE_LIMITS
    """(A,) the most each action component can command (failure_detail's torque limit)."""

    def step(self, action):
        """One control step with action (A,); updates progress / failed. Returns obs (D,). Under
        a disturbance the arm executes the delayed, noisy command and the push acts on the
        forearm during the step (taco_sim.dial.disturb)."""
        if self._episode is None:
            obs = self._act(action)
        else:
            push = self._episode.force(self.env.t, self.progress)
            body = self.env.model.body(PUSH_BODY).id
            if push is not None:
                self.env.data.xfrc_applied[body, :3] = push
            obs = self._act(*self._episode.command(action))
            self.env.data.xfrc_applied[body, :3] = 0.0
        self._count()
        self._note(action)
        return obs

    def _act(self, action, torque_noise=None):
        """Apply action for one control step (torques, held for SUBSAMPLE physics steps), with the
        motors' torque noise (A,) added where given."""
        return self.env.step(action if torque_noise is None else action + torque_noise)

    def _note(self, action):
        """Record what failure_detail reads: the fingertip after the step, whether the action
        asked a motor for its limit or more, whether an arm joint sits at its range's end."""
        record, env = self._record, self.env
        lower, upper = _arm_bounds()                                                   # (6,) each
        q = env.qpos[:6]
        record["tip"].append(env.fingertip)
        record["saturated"].append(bool((np.abs(np.asarray(action)) >= self.action_limits).any()))
        record["at_limit"].append(bool(((q - lower < JOINT_LIMIT_MARGIN) | (upper - q < JOINT_LIMIT_MARGIN)).any()))

    def failure_detail(self, kind, position, start, end):
        """What went wrong with the sub-policy at sketch position `position`, active from control
        step start to end, in words (spec/dial.md §4, spec/evaluation.md eq. (4)); taco_ref.evaluate.execute's hook.

        stopped early: over its key (horizontally within NEAR_KEY of it) or away from it;
        stopped late: it pressed its key again, pressed another key, or ran out of steps;
        wrong outcome: the key it pressed was a neighbour of its own or further away;
        timed out: never came within NEAR_KEY of its key, came and stayed (hover), or came and
        went up and down (OSCILLATION or more reversals of the fingertip's vertical motion while
        near it); ", at a torque limit" when the action asked a motor for its limit or more in
        more than half the steps, ", at a joint limit" when an arm joint was within
        JOINT_LIMIT_MARGIN of its range's end in any step.
        """
        record = self._record
        target = self.env.key_pos[self.sketch[position]]                              # (3,)
        tips = np.array(record["tip"][start:end + 1])                                  # (n, 3)
        near = np.linalg.norm(tips[:, :2] - target[:2], axis=1) < NEAR_KEY           # (n,)
        pressed = [d for t, d in record["presses"] if start < t <= end]
        if kind == "stopped early":
            return "over its key, before pressing it" if near[-1] else "away from its key"
        if kind == "stopped late":
            if not self.failed:
                return "after its press, until the time ran out"
            return "pressed its key again" if pressed and pressed[-1] == self.sketch[position] else "pressed another key"
        if kind == "wrong outcome":
            wrong = self.env.key_pos[pressed[-1]] if pressed else target
            return ("pressed a neighbouring key" if np.linalg.norm(wrong[:2] - target[:2]) < NEIGHBOUR_KEY
                    else "pressed a distant key")
        if kind != "timed out":
            return ""
        if not near.any():
            text = "never reached its key"
        else:
            dz = np.diff(tips[near, 2])
            reversals = int(np.count_nonzero(np.diff(np.sign(dz[np.abs(dz) > 1e-4])) != 0))
            text = "oscillated over its key" if reversals >= OSCILLATION else "stayed over its key"
        steps = slice(start, end)
        if np.mean(record["saturated"][steps] or [False]) > 0.5:
            text += ", at a torque limit"
        if any(record["at_limit"][steps]):
            text += ", at a joint limit"
        return text

    def stop(self):
        """The active sub-policy emitted STOP: nothing happens. The keypad judges presses, not
        STOP decisions (a real PIN pad sees only keys), so progress and failed change in step.
        The STOP is recorded (the fingertip and the keypad's progress) for subtask_verdicts."""
        self._record["stops"].append((self.env.fingertip, self.progress))

    def subtask_verdicts(self):
        """{rule: (L,) bool} for the episode so far, spec/evaluation.md eq. (10)-(11): sketch
        position l counts under

          "paper"   when sub-policy l said STOP with the fingertip within STOP_TOLERANCE (L1)
                    of key l's rest top (the original code's rule; the keypad plays no part);
          "strict"  when the keypad counted key l while sub-policy l was active (after the
                    previous STOP, before its own), so an early STOP fails its sub-task even
                    when the next sub-policy then presses the key.

        The sub-policy still active when the episode ends (the keypad completed the PIN, a wrong
        key, the budget) is judged in the last state as if it stopped there. The i-th recorded
        STOP is sketch position i's (execution hands over in order)."""
        L = len(self.sketch)
        ends = list(self._record["stops"][:L])
        if len(ends) < L:
            ends.append((self.env.fingertip, self.progress))
        paper, strict = np.zeros(L, bool), np.zeros(L, bool)
        start = 0                              # the keypad's progress when position l began
        for position, (tip, progress) in enumerate(ends):
            key = self.env.key_pos[self.sketch[position]]                                   # (3,)
            paper[position] = np.abs(tip - key).sum() < STOP_TOLERANCE
            strict[position] = start <= position < progress
            start = progress
        return {"paper": paper, "strict": strict}


_ARM_BOUNDS = None


def _arm_bounds():
    """(lower (6,), upper (6,)) arm joint limits, read once per process."""
    global _ARM_BOUNDS
    if _ARM_BOUNDS is None:
        _ARM_BOUNDS = kinematics().arm_bounds
    return _ARM_BOUNDS


@dataclass(frozen=True)
class Variant:
    """What differs between the Dial's action variants in collection (module-level objects, so
    that a fork pool's jobs carry them by reference).

    Field  | Meaning
    name   | the domain's name, meta["domain"] of its data
    task   | the task class: DialTask (torques) or a subclass acting otherwise
    expert | expert(obs (D,), digit) -> clean action (A,)
    noise  | (A,) DART noise scale: a demonstration's noise is N(0, (level * noise)^2),
           | level ~ U(0, dart_sigma)
    """

    name: str
    task: type
    expert: Callable
    noise: np.ndarray


MAX_MOTOR_NOISE = 0.2
"""The most motor torque noise a collection draws from (share of the peak torques): beyond it
the expert itself fails (the harder test's levels stop at 5 %)."""


def draw_disturbance(rng, limits):
    """An attempt's disturbance under collection limits (a Disturbance of maxima): each field
    away from the standard arm's drawn uniformly up to its limit, in the order start, noise,
    delay, push (the start spread from HOME_NOISE up, the delay an integer from 0); a field at
    the standard arm's draws nothing. None for the standard arm."""
    fields = {}
    if limits.start > HOME_NOISE:
        fields["start"] = float(rng.uniform(HOME_NOISE, limits.start))
    if limits.noise > 0:
        fields["noise"] = float(rng.uniform(0.0, limits.noise))
    if limits.delay > 0:
        fields["delay"] = int(rng.integers(0, limits.delay + 1))
    if limits.push > 0:
        fields["push"] = float(rng.uniform(0.0, limits.push))
    d = Disturbance(push_steps=limits.push_steps, **fields)
    return None if d.none else d


def _demo(args):
    """One DART demonstration: (states (T, D), actions (T, A), labels (T,), final (D,), discarded).
    Under collection limits (a Disturbance of maxima, not the standard arm's) an attempt also
    draws its disturbance (draw_disturbance: e.g. a motor noise level ~ U(0, limit)) and its arm
    meets it as the harder test's does, from the attempt's episode seed; under the standard
    arm's nothing more is drawn (the default data, bit for bit)."""
    variant, sketch, seed, dart_sigma, limits = args
    rng = np.random.default_rng(seed)
    task = variant.task(layout="standard")
    L = len(sketch)
    for attempt in range(MAX_ATTEMPTS):
        task.layout = sample_layout(rng)
        episode_seed = int(rng.integers(2 ** 31))
        scale = rng.uniform(0.0, dart_sigma) * variant.noise                           # (A,)
        if not limits.none:
            task.disturbance = draw_disturbance(rng, limits)
        obs = task.reset(sketch, seed=episode_seed)
        states, actions, labels = [], [], []
        while not task.done and not task.failed and task.t < budget(L):
            clean = variant.expert(obs, task.target)
            states.append(obs)
            actions.append(clean)
            labels.append(task.progress)
            obs = task.step(clean + scale * rng.standard_normal(len(clean)))
        if task.done:
            return np.array(states), np.array(actions), np.array(labels), obs, attempt
    raise ValueError(f"dart_sigma: a demonstration failed {MAX_ATTEMPTS} times in a row at "
                     f"dart_sigma = {dart_sigma}; lower it")


TORQUE = Variant("dial", DialTask, expert_torque_from_obs, TORQUE_LIMITS)
"""The torque variant: the domain "dial" (this module's expert and DialTask)."""


def _chunk(jobs):
    return [_demo(j) for j in jobs]


def check_motor_noise(motor_noise):
    """motor_noise: a number in [0, MAX_MOTOR_NOISE] (ValueError naming it otherwise)."""
    if (isinstance(motor_noise, bool) or not isinstance(motor_noise, (int, float, np.floating))
            or not 0.0 <= motor_noise <= MAX_MOTOR_NOISE):
        raise ValueError(f"motor_noise: expected a share of the peak torques in [0, {MAX_MOTOR_NOISE:g}], "
                         f"got {motor_noise!r}")


def collection_draws(n, sketch_len, seed, dart_sigma, sketches, workers):
    """(sketches (n, L), seeds (n,) SeedSequences): what a Dial collect (joint-space or image)
    draws from its seed before any demonstration, after checking its arguments: the PINs (the
    given ones, checked, or sampled) and one seed per demonstration."""
    check_collect_args(n, sketch_len, workers)
    check_dart_sigma(dart_sigma)
    rng = np.random.default_rng(seed)
    sketches = collect_sketches(n, sketch_len, rng, sketches, sample_sketches, _check_sketches)
    return sketches, np.random.SeedSequence(rng.integers(2 ** 63)).spawn(n)


def collect(n, sketch_len, seed, dart_sigma=DART_SIGMA, sketches=None, progress=None, workers=1,
            motor_noise=0.0, disturbance=None):
    """n expert demonstrations of the torque variant (domain "dial"); see collect_variant."""
    return collect_variant(TORQUE, n, sketch_len, seed, dart_sigma=dart_sigma, sketches=sketches,
                           progress=progress, workers=workers, motor_noise=motor_noise,
                           disturbance=disturbance)


def collection_limits(motor_noise=0.0, disturbance=None):
    """The Disturbance of maxima a collection draws its attempts' disturbances under: disturbance
    (None: the standard arm's) with its noise raised to motor_noise; ValueError naming either."""
    check_motor_noise(motor_noise)
    if disturbance is None:
        disturbance = Disturbance()
    if not isinstance(disturbance, Disturbance):
        raise ValueError(f"disturbance: expected a taco_sim.dial.disturb.Disturbance or None, got {disturbance!r}")
    if disturbance.noise > MAX_MOTOR_NOISE:
        raise ValueError(f"disturbance: its noise {disturbance.noise:g} is over MAX_MOTOR_NOISE {MAX_MOTOR_NOISE:g}")
    return replace(disturbance, noise=max(disturbance.noise, float(motor_noise)))


def collect_variant(variant, n, sketch_len, seed, dart_sigma=DART_SIGMA, sketches=None, progress=None,
                    workers=1, motor_noise=0.0, disturbance=None):
    """n demonstrations of variant's expert with DART noise on random (never standard) layouts,
    as a validated Demos (meta["domain"] = variant.name).

    Same contract as taco_sim.navworld.collect: states (N, T, D) at control steps, actions the
    clean expert action (torques, or velocities) at each visited state, labels the progress at
    s_t, final_state the state after the last press. Demonstration i runs from its own seed
    (derived from seed and i), so the result does not depend on workers; a failed attempt (wrong
    press or over budget) is redrawn with a new layout and counted in meta["discarded"].
    workers > 1 uses a fork pool; progress(done, total) is called as chunks of CHUNK finish (in
    order). motor_noise > 0: each demonstration's arm also meets motor torque noise at a level
    ~ U(0, motor_noise) of the peak torques (the harder test's noise; spec/dial.md §12), the
    recorded action still the clean expert's; meta["motor_noise"] says so. disturbance (a
    Disturbance of maxima, e.g. the harder test's): each attempt draws every disturbance up to
    it (draw_disturbance); meta["collection_disturbance"] records the maxima.
    """
    limits = collection_limits(motor_noise, disturbance)
    sketches, seeds = collection_draws(n, sketch_len, seed, dart_sigma, sketches, workers)
    jobs = [(variant, sketches[i], seeds[i], float(dart_sigma), limits) for i in range(n)]
    chunks = [jobs[i:i + CHUNK] for i in range(0, n, CHUNK)]
    poses()                                                  # solve IK before forking
    results = []
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for out in pool.imap(_chunk, chunks):
                results.extend(out)
                if progress is not None:
                    progress(len(results), n)
    else:
        for c in chunks:
            results.extend(_chunk(c))
            if progress is not None:
                progress(len(results), n)
    meta = {"domain": variant.name, "action_type": "continuous", "sketch_len": int(sketch_len),
            "dart_sigma": float(dart_sigma),
            "seed": int(seed) if isinstance(seed, (int, np.integer)) else None,
            "discarded": int(sum(r[4] for r in results)), "subsample": SUBSAMPLE,
            "physics_dt": PHYSICS_DT, "collected_on": collected_on()}
    if motor_noise > 0:                         # absent at 0: the default data's meta, unchanged
        meta["motor_noise"] = float(motor_noise)
    if disturbance is not None and not disturbance.none:
        meta["collection_disturbance"] = {k: (int(v) if k in ("delay", "push_steps") else float(v))
                                          for k, v in asdict(limits).items()}
    return assemble([r[0] for r in results], [r[1] for r in results], [r[2] for r in results],
                    [r[3] for r in results], sketches, VOCAB, meta)
