"""Executing a sketch in real time: parsing, the sub-policy state machine, its status; no ROS.

The ROS 2 bridge (ros2_ws/src/taco_bridge) feeds this module the robot's state and publishes
what it returns; everything that decides what the robot does lives here, as plain functions of
their arguments, so that it is tested without ROS (tests/test_runner.py).

Execution follows taco_ref/evaluate.py `execute` (paper Sec. 4) step for step: the active
sub-policy acts until it emits STOP; a sub-policy acts at least once before it may stop; on STOP
the next sub-policy acts in the same state; the sketch is done when the last sub-policy stops.
On top of that, for a robot:
  - actions are clipped per component to [-limit, limit] (torque limits);
  - each sub-task gets a bounded time: past `max_subtask_time` seconds the run ends in error;
  - a non-finite action ends the run in error (and nothing is commanded);
  - a run can be halted (back to idle) or failed from outside (watchdog);
  - a sketch message that does not parse is rejected: the run in progress halts, state error.

States: idle (nothing to do), running, done (the last sub-policy stopped), error (the run was
ended by a safety rule; `error` says why). `start` leaves any state for running: a new sketch
preempts the one in progress.

Symbol | Shape | Meaning
L      |       | sketch length (sub-tasks in the sketch), 1 <= L <= MAX_SKETCH_LEN
K      |       | number of sub-tasks in the model's vocabulary
D      |       | state dimension
A      |       | action dimension
"""
import json
import re

import numpy as np

from taco_ref import policy
from taco_ref.data import MAX_SKETCH_LEN
MAX_TEXT_LEN = 4096
"""Longest sketch message accepted, in characters, before any parsing."""
STATES = ("idle", "running", "done", "error")

_SEPARATORS = re.compile(r"[\s,]+")


def _show(token, width=24):
    """A token as it may appear in an error message: repr'd and cut to width characters."""
    text = repr(token)
    return text if len(text) <= width else text[:width - 3] + "..."


def parse_sketch(text, vocab, max_len=MAX_SKETCH_LEN):
    """Sub-task ids (list of int, length L) of a sketch written as text.

    Tokens are separated by whitespace and/or commas. A token is a sub-task name from vocab
    (exact match), or else a sub-task id written as a decimal integer 0 <= id < K. For the Dial
    domain the names are the digits themselves: "0 5 1 6" and "0,5,1,6" both give [0, 5, 1, 6].
    Raises ValueError naming the first problem: empty sketch, text or sketch too long, unknown
    sub-task (with the vocabulary). "stop" and empty messages are the caller's business.

    Symbol | Shape | Meaning
    text   | str   | the message
    vocab  | (K,)  | sub-task names
    returns| (L,)  | sub-task ids
    """
    if not isinstance(text, str):
        raise ValueError(f"a sketch is text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_LEN:
        raise ValueError(f"sketch message of {len(text)} characters, at most {MAX_TEXT_LEN}")
    tokens = [t for t in _SEPARATORS.split(text) if t]
    if not tokens:
        raise ValueError("empty sketch: give sub-tasks separated by spaces or commas")
    if len(tokens) > max_len:
        raise ValueError(f"sketch of {len(tokens)} sub-tasks, at most {max_len}")
    return _subtask_ids(tokens, vocab)


def parse_sketch_items(items, vocab, max_len=MAX_SKETCH_LEN):
    """Sub-task ids (list of int, length L) of a sketch given as a list of strings, one sub-task
    name or id per item (the ROS action's `string[] sketch`): ["0", "5", "1", "6"].

    The same tokens as parse_sketch, without the splitting: an item with a separator in it is
    not a sub-task. Raises ValueError naming the first problem: not a list of strings, empty,
    longer than max_len, an item too long, an unknown sub-task (with the vocabulary).
    """
    if not isinstance(items, (list, tuple)) or not all(isinstance(t, str) for t in items):
        raise ValueError(f"a sketch is a list of sub-task names, got {_show(items)}")
    if not items:
        raise ValueError("empty sketch: give at least one sub-task")
    if len(items) > max_len:
        raise ValueError(f"sketch of {len(items)} sub-tasks, at most {max_len}")
    if sum(len(t) for t in items) > MAX_TEXT_LEN:
        raise ValueError(f"sketch of {sum(len(t) for t in items)} characters, at most {MAX_TEXT_LEN}")
    return _subtask_ids(items, vocab)


def _subtask_ids(tokens, vocab):
    """Ids of tokens, each a name of vocab (exact match) or a decimal id 0 <= id < K."""
    index = {name: k for k, name in enumerate(vocab)}
    ids = []
    for i, token in enumerate(tokens):
        if token in index:
            ids.append(index[token])
        elif token.isascii() and token.isdigit() and int(token) < len(vocab):
            ids.append(int(token))
        else:
            names = " ".join(vocab)
            raise ValueError(f"unknown sub-task {_show(token)} at position {i} of the sketch "
                             f"(known: {names}, or ids 0..{len(vocab) - 1})")
    return ids


class SketchRunner:
    """The state machine that executes one sketch at a time with a model's sub-policies.

    Symbol           | Shape | Meaning
    params, cfg      |       | the model's arrays and PolicyConfig (taco_ref.model.Model)
    vocab            | (K,)  | sub-task names, for the status
    limits           | (A,)  | per-component action limits (clip to [-limits, limits]); None: no clip
    max_subtask_time |       | seconds one sub-task may stay active before the run ends in error;
                     |       | None: unbounded
    stop_threshold   |       | a sub-policy stops when pi_k(STOP | s) > stop_threshold
    stop_hold        |       | ... in stop_hold consecutive decisions (spec/evaluation.md eq. (9));
                     |       | 1: in one
    max_subtask_steps|       | a sub-policy that has acted this many times is stopped by force
                     |       | (a domain's subtask_budget, e.g. Craft's); None: never
    rng              |       | numpy Generator: discrete actions are drawn from pi_k(a | s)
                     |       | (policy.action), one draw per action; None: the most probable
    views            |       | views(k, s) -> (n, D) states sub-policy k should act alike in
                     |       | (a domain's state_views); its STOP probability and action are then
                     |       | the means over them (policy.view_decision, spec/evaluation.md
                     |       | eq. (8)); None: s alone
    expert           |       | an object with stops(k, s) -> bool and action(k, s, rng) that
                     |       | decides in place of the nets (a domain's expert, run through the
                     |       | same machine: evaluate.Expert); params is then not read and
                     |       | stop_threshold plays no part; None: the nets decide
    """

    def __init__(self, params, cfg, vocab, limits=None, max_subtask_time=None, stop_threshold=0.5,
                 max_subtask_steps=None, rng=None, views=None, stop_hold=1, expert=None):
        if len(vocab) != cfg.n_subtasks:
            raise ValueError(f"vocab has {len(vocab)} names, the policy {cfg.n_subtasks} sub-tasks")
        if limits is not None:
            limits = np.asarray(limits, dtype=np.float64)                    # (A,)
            if cfg.discrete or limits.shape != (cfg.action_dim,):
                raise ValueError(f"limits must have shape ({cfg.action_dim},) for a continuous "
                                 f"policy, got {limits.shape} (discrete={cfg.discrete})")
            if not (np.isfinite(limits).all() and (limits >= 0).all()):
                raise ValueError(f"limits must be finite and non-negative, got {limits}")
        if max_subtask_time is not None and not max_subtask_time > 0:
            raise ValueError(f"max_subtask_time must be positive, got {max_subtask_time!r}")
        if max_subtask_steps is not None and not (isinstance(max_subtask_steps, (int, np.integer))
                                                  and max_subtask_steps >= 1):
            raise ValueError(f"max_subtask_steps must be a positive integer, got {max_subtask_steps!r}")
        if isinstance(stop_hold, bool) or not (isinstance(stop_hold, (int, np.integer)) and stop_hold >= 1):
            raise ValueError(f"stop_hold must be a positive integer, got {stop_hold!r}")
        self.max_subtask_steps = max_subtask_steps
        self.stop_hold = int(stop_hold)
        self.params, self.cfg, self.vocab = params, cfg, tuple(vocab)
        self.limits, self.max_subtask_time = limits, max_subtask_time
        self.stop_threshold = stop_threshold
        self.rng = rng
        if views is not None and (cfg.discrete or cfg.image_shape is not None or expert is not None):
            raise ValueError("views: only for state vectors with continuous actions, decided by nets")
        self.views = views
        self.expert = expert
        self._decision = None                     # (sub-task, state, (p_stop, action)) of views
        self._reset("idle", sketch=[], now=None)

    def _reset(self, state, sketch, now):
        self.state = state
        self.sketch = list(sketch)
        """(L,) sub-task ids of the current (or last) sketch."""
        self.active = 0
        """Sketch position of the active sub-policy."""
        self.acted = 0
        """Actions the active sub-policy has taken (it may stop only once this is > 0)."""
        self.held = 0
        """Consecutive decisions of the active sub-policy, up to this one, with P(STOP) above
        the threshold (it stops when this reaches stop_hold)."""
        self.steps = 0
        """Actions taken in this run."""
        self.started = now
        self.subtask_started = now
        self.stop_times = []
        """Seconds from the start of the run to each STOP."""
        self.stop_steps = []
        """Step index of each STOP, as evaluate.execute counts them."""
        self.error = None

    def start(self, sketch, now):
        """Begin executing sketch (L,) sub-task ids at time now (seconds); preempts any run."""
        sketch = [int(k) for k in sketch]
        if not sketch:
            raise ValueError("empty sketch")
        bad = [k for k in sketch if not 0 <= k < self.cfg.n_subtasks]
        if bad:
            raise ValueError(f"sub-task ids {bad} outside 0..{self.cfg.n_subtasks - 1}")
        self._reset("running", sketch, now)

    def halt(self):
        """Stop acting: back to idle from any state, error cleared (the sketch and stop times
        stay in the status)."""
        self.state, self.error = "idle", None

    def fail(self, message):
        """End the run in error with message (e.g. the watchdog); no effect unless running."""
        if self.state == "running":
            self.state, self.error = "error", str(message)

    def reject(self, message):
        """A sketch message that could not be parsed: halt whatever ran and report message."""
        self._reset("error", [], None)
        self.error = str(message)

    def step(self, state, now, may_stop=True):
        """The action to apply in state (D,) at time now, or None when nothing is to be applied
        (not running, or this call ended the run: done or error).

        Same decisions as evaluate.execute: the active sub-policy is asked first; if it stops
        (having acted at least once) the next sub-policy chooses the action in this same state.
        With stop_hold = h > 1 the active sub-policy stops only in the h-th consecutive decision
        whose P(STOP) exceeds the threshold; until then it acts (spec/evaluation.md eq. (9)).
        may_stop=False vetoes the sub-policy's own STOP in this step (the ROS bridge's press rule:
        a key that has not gone down yet); a forced STOP (max_subtask_steps) still happens.
        """
        if self.state != "running":
            return None
        if self.max_subtask_time is not None and now - self.subtask_started > self.max_subtask_time:
            self.fail(f"sub-task {self.vocab[self.sketch[self.active]]} (position {self.active}) "
                      f"did not stop within {self.max_subtask_time:g} s")
            return None
        forced = self.max_subtask_steps is not None and self.acted >= self.max_subtask_steps  # the domain's budget
        if self.acted > 0 and not forced:
            self.held = self.held + 1 if self._stops(state) else 0
        if self.acted > 0 and (forced or (may_stop and self.held >= self.stop_hold)):
            self.stop_times.append(now - self.started)
            self.stop_steps.append(self.steps)
            self.active, self.acted, self.held, self.subtask_started = self.active + 1, 0, 0, now
            if self.active == len(self.sketch):
                self.state = "done"
                return None
        if self.expert is not None:
            action = self.expert.action(self.sketch[self.active], state, self.rng)
        elif self.views is None:
            action = policy.action(self.params, self.cfg, self.sketch[self.active], state, self.rng)
        else:
            action = self._view_decision(state)[1]
        if not self.cfg.discrete:
            action = np.asarray(action, dtype=np.float64)                    # (A,)
            if not np.isfinite(action).all():
                self.fail(f"sub-task {self.vocab[self.sketch[self.active]]} produced a "
                          "non-finite action")
                return None
            if self.limits is not None:
                action = np.clip(action, -self.limits, self.limits)          # (A,)
        self.acted += 1
        self.steps += 1
        return action

    def _stops(self, state):
        if self.expert is not None:
            return bool(self.expert.stops(self.sketch[self.active], state))
        if self.views is not None:
            return self._view_decision(state)[0] > self.stop_threshold
        return policy.stops(self.params, self.cfg, self.sketch[self.active], state, self.stop_threshold)

    def _view_decision(self, state):
        """(p_stop, action) of the active sub-policy over views of state, computed once per
        (sub-task, state): the STOP test and the action of one step share it."""
        k, state = self.sketch[self.active], np.array(state, dtype=np.float64)
        if self._decision is None or self._decision[0] != k or not np.array_equal(self._decision[1], state):
            self._decision = (k, state, policy.view_decision(self.params, self.cfg, k, self.views(k, state)))
        return self._decision[2]

    def status(self):
        """The run as a JSON-ready dict: state, sketch (names), active (position or None),
        stop_times (s from the start), stop_steps, steps, error (text or None)."""
        return {"state": self.state,
                "sketch": [self.vocab[k] for k in self.sketch],
                "active": self.active if self.state == "running" else None,
                "stop_times": [round(t, 6) for t in self.stop_times],
                "stop_steps": list(self.stop_steps),
                "steps": self.steps,
                "error": self.error}

    def status_json(self):
        return json.dumps(self.status(), ensure_ascii=True, sort_keys=True)
