"""The keypad as the policy node sees it: presses read from the arm's geometry, the release step
between repeated digits, and the check of a run against the keys a keypad registered. No ROS.

Why. The Dial sub-policies are Markov: sub-policy k sees the state (joint angles and the offset
of every key from the fingertip) and nothing else. Right after it has pressed key k the state is
"finger down on k", which is exactly where its STOP net learned to stop, and its action net
learned to push down (the expert's rule 1: within PRESS_RADIUS of the target, descend). So in
"7 7 2" the second 7 cannot tell "just pressed 7" from "press 7 again": it stops one step after
the first 7, or, if it did not stop, it would push on a key that is already down and never
re-arms. The training PINs never repeat a digit back to back (taco_sim.dial.sample_sketches).
Two domain rules, both functions of the observation alone, make the second press explicit,
and a third keeps one run's press from being credited to the next:

1. **Release step.** When a sub-task starts with its own key still down (the previous sub-task
   pressed the same key), the policy node first runs the sub-policy of another digit, the one
   whose key lies farthest from the key (`release_digit`), until the fingertip is
   RELEASED_HEIGHT above the key top (`key_clear`). Every sub-policy not aimed at the key under
   the finger first lifts straight up (the expert's rule 2, seen after every press of the
   training data), so this is the learned lift; it is cut before the digit travels anywhere.
   The release steps are not counted in the run's `steps`, and they count towards the repeated
   sub-task's `max_subtask_time`.
2. **Press rule.** A sub-task's STOP is honoured only once its key has gone down while it was
   active, having been clear of the finger before (`PressRule`). This also stops a sub-policy
   whose STOP fires just before its press (seen with the shipped model on some start poses):
   it keeps acting and presses.
3. **Hand-over.** A run never credits a press that began under the run before. A new sketch
   can arrive while the finger is on its way down to the old run's key; the keypad then
   registers that key a moment later, and without a rule the new run would count it as its
   own (seen over DDS as "the keypad registered 8, not the sketch 6 9 3"). So a run that starts
   with the fingertip within reach of a key (`key_in_reach`: over it, within REACH_RADIUS of
   its centre, and less than REACH_HEIGHT above its top) first lifts off it with the release
   step's sub-policy, until the finger is out of reach (`out_of_reach`), and a press of that
   key registered before then belongs to the run before (`Handover`). The finger descends
   5-7 mm a control step towards a key and is 39-43 mm above it (median) 7 steps before the
   pressing step; a finger that comes within reach takes at least 6 steps to press (expert
   demonstrations and the shipped models: `python -m taco_app.analysis.dial_approach_heights`),
   and the new run's own sub-policy decides each of them.

The geometry. With obs = concat(q (9,), (key_pos - fingertip) (K, 3)) (taco_sim.dial.observe),
key k's offset gives the fingertip's height above the key's rest top and its horizontal distance
from the key's centre. The simulation registers a press when the key's travel passes 6 mm; with
the snap action the fingertip (the DH tool point) is then 9-12 mm below the rest top and snaps on
to about 20 mm. PRESSED_HEIGHT sits past the registering point, RELEASED_HEIGHT above the rest top.
On a real arm the same rules use the measured `key_positions`: keep them within a few mm.

Checking a run. Only a keypad knows what was dialled: the simulation publishes every key it
registers on dial/pressed, and `check_presses` compares those with the sketch.

Symbol | Shape | Meaning
K      |       | digits (10)
D      |       | observation size 9 + 3 K = 39
L      |       | sketch length
"""
import numpy as np

PRESSED_HEIGHT = -0.014
"""m: the fingertip this far below the key's rest top (or lower) means the key is down."""
RELEASED_HEIGHT = 0.01
"""m: the fingertip this far above the key's rest top (or higher) means the key is up, re-armed."""
KEY_RADIUS = 0.02
"""m: the fingertip is over a key when horizontally within this of its centre (keys are 54 mm wide)."""
REACH_HEIGHT = 0.05
"""m: a fingertip less than this above a key's top, and within REACH_RADIUS of its centre, may
still press it (rule 3 of the module docstring)."""
REACH_RADIUS = 0.035
"""m: half a key (27 mm) and a margin: a fingertip farther than this from a key's centre
cannot press it."""


def key_offset(obs, digit):
    """(height of the fingertip above key digit's rest top, horizontal distance from its centre)."""
    offset = np.asarray(obs, dtype=np.float64)[9:].reshape(-1, 3)[digit]     # (3,) key - fingertip
    return -float(offset[2]), float(np.hypot(offset[0], offset[1]))


def key_down(obs, digit):
    """True when the fingertip is over key digit and PRESSED_HEIGHT or more below its top."""
    height, distance = key_offset(obs, digit)
    return distance < KEY_RADIUS and height < PRESSED_HEIGHT


def key_clear(obs, digit):
    """True when the finger cannot be holding key digit down: away from it, or above it by
    RELEASED_HEIGHT."""
    height, distance = key_offset(obs, digit)
    return distance >= KEY_RADIUS or height > RELEASED_HEIGHT


def release_digit(obs, digit):
    """The digit whose key is horizontally farthest from key digit: its sub-policy lifts the
    finger off key digit (rule 1 of the module docstring)."""
    offsets = np.asarray(obs, dtype=np.float64)[9:].reshape(-1, 3)             # (K, 3)
    distance = np.hypot(*(offsets[:, :2] - offsets[digit, :2]).T)             # (K,)
    return int(np.argmax(distance))


def key_in_reach(obs):
    """The digit whose key the fingertip may still press (rule 3): the key horizontally nearest
    the fingertip, when within REACH_RADIUS of its centre and less than REACH_HEIGHT above its
    top; else None."""
    offsets = np.asarray(obs, dtype=np.float64)[9:].reshape(-1, 3)             # (K, 3)
    distance = np.hypot(offsets[:, 0], offsets[:, 1])                          # (K,)
    digit = int(np.argmin(distance))
    height = -float(offsets[digit, 2])
    return digit if distance[digit] < REACH_RADIUS and height < REACH_HEIGHT else None


def out_of_reach(obs, digit):
    """True when the fingertip can no longer press key digit: REACH_HEIGHT above its top or
    farther than REACH_RADIUS from its centre."""
    height, distance = key_offset(obs, digit)
    return height >= REACH_HEIGHT or distance >= REACH_RADIUS


class Handover:
    """Rule 3 of the module docstring, for one run.

    `begin(obs)` when the run starts (obs: the latest observation, or None when no joint state
    has come yet, then the first `update` decides); `lifting` is True while the run must first
    lift off the key it inherited (`digit`). `update(obs)` every control step before anything
    else; `inherits(digit)` tells whether a press of digit registered now belongs to the run
    before.
    """

    def __init__(self):
        self.digit, self.decided = None, False

    def begin(self, obs):
        self.digit, self.decided = None, obs is not None
        if obs is not None:
            self.digit = key_in_reach(obs)

    @property
    def lifting(self):
        return self.digit is not None

    def update(self, obs):
        if not self.decided:
            self.begin(obs)
        elif self.digit is not None and out_of_reach(obs, self.digit):
            self.digit = None
        return self.lifting

    def inherits(self, digit):
        return self.digit is not None and int(digit) == self.digit


class PressRule:
    """Rule 2 of the module docstring, for the active sub-task of one run.

    `begin(obs, digit)` when a sub-task becomes active; it returns True when the sub-task must
    first be released (its key is down under the finger). Then `update(obs)` every control step,
    before the sub-policy is asked; it returns True once the key has been pressed (down after
    having been clear) since `begin`, i.e. when the sub-policy's STOP may be honoured, and
    keeps `releasing` up to date.
    """

    def __init__(self):
        self.digit, self.clear, self.pressed, self.releasing = None, False, False, False

    def begin(self, obs, digit):
        self.digit, self.pressed = int(digit), False
        self.clear = key_clear(obs, self.digit)
        self.releasing = not self.clear
        return self.releasing

    def update(self, obs):
        if not self.clear and key_clear(obs, self.digit):
            self.clear, self.releasing = True, False
        if self.clear and key_down(obs, self.digit):
            self.pressed = True
        return self.pressed


def check_presses(presses, sketch):
    """None when presses (the digits a keypad registered, in order) can still become sketch (L,)
    names: a prefix of it; else the reason, one line."""
    presses, sketch = list(presses), list(sketch)
    if presses == sketch[:len(presses)]:
        return None
    return (f'the keypad registered {" ".join(presses)}, not the sketch {" ".join(sketch)}: '
            'the PIN was not dialled')
