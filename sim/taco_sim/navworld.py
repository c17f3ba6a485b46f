"""Nav-World: 2-D point navigation through a sketch of destinations (paper Sec. 5.1).

Four destinations, named by ``VOCAB``, sit near the corners of a square; the agent starts near
its middle. Sub-task k is "go to destination k". A sketch is a sequence of distinct sub-task ids;
the task succeeds when the agent stops at the sketch's destinations in order. Each episode draws
the destinations from a Gaussian around their corner and the agent from a Gaussian around the
middle (rejection-sampled so that everything stays ``MIN_SEPARATION`` apart).

State   s = (d_0 - p, d_1 - p, d_2 - p, d_3 - p) flattened, d_k destination k, p the agent: (D,) = (8,)
Action  a = (v_x, v_y), clipped per component to [-MAX_SPEED, MAX_SPEED]:             (A,) = (2,)
Dynamics p <- p + clip(a) * DT

Progress at execution (:class:`NavWorld`): the caller reports each STOP of the active
sub-policy with ``stop()``. A sketch destination counts when STOP fires with the agent within
``RADIUS`` of the *current* target (the first sketch destination not counted yet); STOP anywhere
else fails the task (``failed``: the episode is over, as a wrong key is on the Dial pad). Moving
only moves: passing through, or resting on, a destination counts nothing. This is the original
Nav-World's rule (a sub-task counts only when STOP fires within a small tolerance of its
destination), and it makes STOP sharp: the policy must stop on the destination, not near it.

The expert (:func:`expert_velocity`) flies straight at the current target at ``MAX_SPEED`` and,
from within one step of it, lands exactly on it (a shortened last step). Its STOP (the data's
switch) is at the first state within ``RADIUS`` of the current target. Because
``MIN_SEPARATION > 2 * RADIUS``, one state is within ``RADIUS`` of at most one destination, so
progress rises by at most 1 per step; the start is never within ``RADIUS`` of a destination, so
progress starts at 0. :func:`collect` runs the expert with DART noise (Laskey et al., 2017) and
returns a :class:`taco_ref.data.Demos`: the executed action is noisy, the recorded action is the
clean expert action at the visited state. A noisy landing step misses the target by about
DART_SIGMA * DT = 0.15 per component, ending within ``RADIUS`` about 4 times in 5 (3 in 4 for
unclipped noise; the action clip trims some); otherwise a further short step corrects it.
Label convention: the label of step t is the progress at s_t, so at the first state within
``RADIUS`` of target l the label is already l + 1 (sub-policy l emits STOP there and sub-policy
l + 1 acts); ``final_state`` is the state where the last target is reached.

Symbol | Shape | Meaning
B      |       | episodes simulated together (collect works in chunks of ``CHUNK``)
T      |       | steps; ``budget(L)`` at most
L      |       | sketch length (distinct destinations, so L <= K)
K      |       | number of destinations / sub-tasks = len(VOCAB) = 4
D      |       | state dimension = 2 K = 8
A      |       | action dimension = 2
"""
import itertools

import numpy as np

from taco_ref.data import assemble, collected_on
from taco_sim import sketch_array
from taco_sim.domain import (Domain, SketchProgress, check_collect_args, check_dart_sigma,
                             collect_sketches, package_file, register)

VOCAB = ("black", "green", "yellow", "red")
"""Sub-task names; sub-task k = "go to destination VOCAB[k]"."""
K = len(VOCAB)
TRAIN_SKETCH_LEN = 3
"""L of the training data (paper Sec. 5.1)."""
TEST_SKETCH_LEN = K
"""L_test of the zero-shot test sketches: every destination once (:func:`zero_shot_sketches`)."""
STATE_DIM = 2 * K
ACTION_DIM = 2

DEST_CENTRES = np.array([[-5.0, 5.0],    # black:  top left
                         [5.0, 5.0],     # green:  top right
                         [5.0, -5.0],    # yellow: bottom right
                         [-5.0, -5.0]])  # red:    bottom left
"""(K, 2) mean destination positions: the corners of a square of side 10, in VOCAB order."""
DEST_STD = 1.0
"""Per-coordinate std of a destination around its centre. Neighbouring corners are 10 apart, so
two destinations come within MIN_SEPARATION only ~5 std of their difference away: never in practice."""
AGENT_CENTRE = np.array([0.0, 0.0])
"""(2,) mean start position: the middle of the square (7.07 from every corner)."""
AGENT_STD = 1.0
"""Per-coordinate std of the start position."""
MIN_SEPARATION = 3.0
"""Layouts are redrawn until destinations are pairwise, and the start is from every destination,
at least this far apart (about 0.5 % of layouts are redrawn, all for the start)."""

MAX_SPEED = 1.0
"""Per-component bound on the velocity action: a = clip(a, -MAX_SPEED, MAX_SPEED)."""
DT = 0.5
"""Integration step: the expert covers MAX_SPEED * DT = 0.5 per step, so a noise-free
corner-to-corner leg (10, or 14.1 across the diagonal) takes 20-28 steps, landing included, and an
L = 3 episode 60 on average (67 with DART noise; tests/test_navworld.py asks 30-80)."""
RADIUS = 0.25
"""Arrival tolerance (inclusive): STOP counts within this distance of the current target, and the
expert's STOP (the data's switch) is at the first state within it. Half an expert step, so the
switch state is a landing point, not any point up to a step short; MIN_SEPARATION > 2 * RADIUS.
With DART noise a landing step ends within RADIUS about 4 times in 5 (81 % in collect(300, 3,
seed=7)), else a further short step corrects it. Measured on collect(1000, 3, seed=0) against
this project's earlier RADIUS = 0.5 (counted on passing): mean T 66.6 against 63.4, so about 1.1
extra landing steps per sub-task (0.76 steps per sub-task are taken from within one step of the
target); nothing is discarded."""
EXPERT_GAIN = 1.0 / DT
"""Proportional gain of the expert: v = EXPERT_GAIN * (d - p), rescaled to norm <= MAX_SPEED.
With gain 1 / DT the unsaturated action (within MAX_SPEED * DT of the target) lands exactly on it."""
DART_SIGMA = 0.3
"""Default per-component std of the DART noise added to executed actions (0.3 of MAX_SPEED):
enough to spread the visited states around the expert's straight lines, small enough that the
expert finishes within budget (no discard in 10 000 episodes of L = 3, nor of L = 4)."""
STEPS_PER_SUBTASK = 50
"""budget(L) = STEPS_PER_SUBTASK * L: about twice the DART expert's mean of ~16 (first leg) to
~26 (later legs) steps per sub-task, landing included; of 10 000 L = 3 episodes the longest took
95 of the 150 steps, and no leg more than 43."""
CHUNK = 256
"""collect simulates this many demonstrations together (bounds memory; progress is per chunk)."""
MAX_REDRAW_ROUNDS = 100
"""collect gives up (ValueError naming dart_sigma) if a chunk still has unfinished episodes after this many rounds."""


def budget(sketch_len):
    """Step budget for a sketch of length sketch_len (see STEPS_PER_SUBTASK)."""
    return STEPS_PER_SUBTASK * int(sketch_len)


def clip_action(action):
    """Clip a velocity action (..., 2) per component to [-MAX_SPEED, MAX_SPEED]."""
    return np.clip(np.asarray(action, dtype=np.float64), -MAX_SPEED, MAX_SPEED)


def observe(agent, dests):
    """State (B, D) from agent positions (B, 2) and destinations (B, K, 2): d_k - p, flattened."""
    return (dests - agent[:, None, :]).reshape(len(agent), STATE_DIM)   # (B, D)


def target_offset(state, target):
    """The (x, y) offset to destination target: state (..., D), target (...) int -> (..., 2)."""
    state = np.asarray(state, dtype=np.float64)
    offsets = state.reshape(state.shape[:-1] + (K, 2))                   # (..., K, 2)
    target = np.asarray(target)[..., None, None]                         # (..., 1, 1)
    return np.take_along_axis(offsets, target, axis=-2)[..., 0, :]       # (..., 2)


def expert_velocity(offset):
    """Expert action for an offset (..., 2) to its target: EXPERT_GAIN * offset, norm <= MAX_SPEED.

    The rescaling keeps the direction, and a vector of norm <= MAX_SPEED is inside the action box,
    so clip_action leaves expert actions unchanged.
    """
    v = EXPERT_GAIN * np.asarray(offset, dtype=np.float64)              # (..., 2)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)                     # (..., 1)
    return v * np.minimum(1.0, MAX_SPEED / np.maximum(norm, 1e-300))     # (..., 2)


def sample_layout(rng, n):
    """Draw n layouts: agent (n, 2) and destinations (n, K, 2), redrawing any layout where two
    points (destination-destination or start-destination) are closer than MIN_SEPARATION."""
    agent = np.empty((n, 2))
    dests = np.empty((n, K, 2))
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        agent[todo] = AGENT_CENTRE + AGENT_STD * rng.standard_normal((m, 2))
        dests[todo] = DEST_CENTRES + DEST_STD * rng.standard_normal((m, K, 2))
        pts = np.concatenate([agent[todo, None], dests[todo]], axis=1)  # (m, K + 1, 2)
        gap = np.linalg.norm(pts[:, :, None] - pts[:, None], axis=-1)   # (m, K + 1, K + 1)
        gap[:, np.arange(K + 1), np.arange(K + 1)] = np.inf
        todo = todo[gap.min(axis=(1, 2)) < MIN_SEPARATION]
    return agent, dests


def _check_sketches(sketches, sketch_len=None):
    """sketches as an (n, L) int64 array of distinct ids in [0, K); ValueError otherwise."""
    arr = sketch_array(sketches, K, sketch_len)
    srt = np.sort(arr, axis=1)
    bad = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
    if bad.any():
        raise ValueError(f"sketch: destinations must not repeat within a sketch, got {arr[bad][0].tolist()}")
    return arr


def sample_sketches(n, sketch_len, rng, exclude=()):
    """n sketches (n, L) int64, uniform over ordered sequences of sketch_len distinct destinations,
    never one of exclude (an iterable of id sequences)."""
    if not 1 <= sketch_len <= K:
        raise ValueError(f"sketch_len: expected 1..{K} (destinations do not repeat), got {sketch_len}")
    excluded = {tuple(int(i) for i in s) for s in exclude}
    pool = [p for p in itertools.permutations(range(K), sketch_len) if p not in excluded]
    if not pool:
        raise ValueError(f"sample_sketches: every sketch of length {sketch_len} is excluded")
    pool = np.array(pool, dtype=np.int64).reshape(-1, sketch_len)       # (P, L)
    return pool[rng.integers(len(pool), size=n)]                         # (n, L)


def zero_shot_sketches(n, rng):
    """n test sketches with L_test = K = 4: all destinations in a random order. They never occur
    in L = 3 training data (different length, and every one visits all four destinations)."""
    return sample_sketches(n, K, rng)


class NavWorld(SketchProgress):
    """One Nav-World episode. ``reset(sketch, seed)``, then ``step(action)``, and ``stop()`` on
    each STOP of the active sub-policy, until ``done`` or ``failed``.

    Attribute | Shape | Meaning
    agent     | (2,)   | agent position p
    dests     | (K, 2) | destination positions, VOCAB order
    sketch    | (L,)   | sub-task ids of this episode
    progress  |        | sketch destinations counted so far (STOP within RADIUS), in order
    failed    |        | a STOP fired outside RADIUS of the current target: the episode is over
    t         |        | steps taken since reset
    obs       | (D,)   | current state (a fresh copy)
    """

    vocab = VOCAB
    state_dim = STATE_DIM
    action_dim = ACTION_DIM
    subtask_budget = None
    """No forced STOP: a sub-policy acts until it stops or the task's budget runs out."""

    def __init__(self):
        self.agent = None
        self.dests = None
        self.sketch = None
        self.progress = 0
        self.failed = False
        self.t = 0

    def reset(self, sketch, seed=None):
        """Start an episode for sketch (distinct ids); layout drawn from np.random.default_rng(seed).

        Returns the first observation (D,). The same seed gives the same layout.
        """
        self.sketch = _check_sketches(sketch)[0]
        agent, dests = sample_layout(np.random.default_rng(seed), 1)
        self.agent, self.dests = agent[0], dests[0]
        self.progress = 0
        self.failed = False
        self.t = 0
        return self.obs

    @property
    def obs(self):
        return observe(self.agent[None], self.dests[None])[0]           # (D,)

    @property
    def at_target(self):
        """Whether the agent is within RADIUS of the current target (False when there is none)."""
        target = self.target
        return target is not None and bool(np.linalg.norm(self.dests[target] - self.agent) <= RADIUS)

    def budget(self, sketch_len):
        """Step budget for a sketch of length sketch_len (module :func:`budget`)."""
        return budget(sketch_len)

    def step(self, action):
        """Move by clip(action) * DT; returns the new observation (D,).

        Only moves (and counts t): reaching or passing a destination counts nothing without
        stop(). After done or failed the agent still moves; progress and failed stay.
        """
        a = clip_action(action)
        if a.shape != (ACTION_DIM,) or not np.isfinite(a).all():
            raise ValueError(f"action: expected 2 finite numbers, got {np.asarray(action).tolist()}")
        self.agent = self.agent + a * DT
        self.t += 1
        return self.obs

    def stop(self):
        """The active sub-policy emitted STOP in the current state.

        Within RADIUS of the current target the sub-task counts (progress + 1; done once all
        have); anywhere else the sub-task, and so the task, has failed (failed = True). No
        effect once done or failed.
        """
        if self.target is None:
            return
        if self.at_target:
            self.progress += 1
        else:
            self.failed = True


def task_env():
    """A fresh NavWorld: the task environment taco_app.grid.cell evaluates policies in."""
    return NavWorld()


def expert_action(env):
    """The expert's (2,) action in env: head for the current target at MAX_SPEED, landing on it
    from within one step (zeros when done or failed). The expert's STOP is env.at_target."""
    if env.target is None:
        return np.zeros(ACTION_DIM)
    return expert_velocity(env.dests[env.target] - env.agent)


def _rollout(sketches, agent, dests, rng, dart_sigma):
    """Run the DART expert on B episodes at once for up to budget(L) steps.

    sketches (B, L), agent (B, 2), dests (B, K, 2). Returns states (B, T, D), actions (B, T, A),
    labels (B, T) (-1 after the end), traj_len (B,), final_state (B, D), finished (B,) bool.
    """
    B, L = sketches.shape
    T = budget(L)
    states = np.zeros((B, T, STATE_DIM))
    actions = np.zeros((B, T, ACTION_DIM))
    labels = np.full((B, T), -1, dtype=np.int64)
    traj_len = np.zeros(B, dtype=np.int64)
    progress = np.zeros(B, dtype=np.int64)
    rows = np.arange(B)
    agent = agent.copy()
    for t in range(T):
        active = progress < L                                            # (B,)
        if not active.any():
            break
        obs = observe(agent, dests)                                      # (B, D)
        target = sketches[rows, np.minimum(progress, L - 1)]             # (B,)
        clean = expert_velocity(dests[rows, target] - agent)             # (B, A)
        executed = clip_action(clean + dart_sigma * rng.standard_normal((B, ACTION_DIM)))
        states[active, t] = obs[active]
        actions[active, t] = clean[active]
        labels[active, t] = progress[active]
        traj_len += active
        agent[active] += executed[active] * DT
        # the expert's STOP: the first state within RADIUS of the target (env.at_target)
        reached = active & (np.linalg.norm(dests[rows, target] - agent, axis=-1) <= RADIUS)
        progress += reached
    return states, actions, labels, traj_len, observe(agent, dests), progress == L


def collect(n, sketch_len, seed, dart_sigma=DART_SIGMA, sketches=None, progress=None, workers=1):
    """n expert demonstrations with DART noise, as a validated taco_ref.data.Demos.

    sketches: (n, sketch_len) ids, or None to draw each uniformly (sample_sketches). An episode
    that does not finish within budget(sketch_len) steps is discarded and redrawn with a new
    layout and the same sketch; meta["discarded"] counts them. progress(done, total), if given,
    is called after each chunk of CHUNK demonstrations. Deterministic for a seed. workers is
    accepted for the domain contract and not used: the rollout is vectorised over a chunk and
    runs in this process (1000 demonstrations take about a second).
    """
    check_collect_args(n, sketch_len, workers, K)
    check_dart_sigma(dart_sigma)
    rng = np.random.default_rng(seed)
    sketches = collect_sketches(n, sketch_len, rng, sketches, sample_sketches, _check_sketches)
    L = sketch_len
    T = budget(L)
    states = np.zeros((n, T, STATE_DIM))
    actions = np.zeros((n, T, ACTION_DIM))
    labels = np.full((n, T), -1, dtype=np.int64)
    traj_len = np.zeros(n, dtype=np.int64)
    final_state = np.zeros((n, STATE_DIM))
    discarded = 0
    for start in range(0, n, CHUNK):
        todo = np.arange(start, min(start + CHUNK, n))
        for _ in range(MAX_REDRAW_ROUNDS):
            agent, dests = sample_layout(rng, todo.size)
            out = _rollout(sketches[todo], agent, dests, rng, dart_sigma)
            ok = out[5]
            keep = todo[ok]
            states[keep], actions[keep], labels[keep] = out[0][ok], out[1][ok], out[2][ok]
            traj_len[keep], final_state[keep] = out[3][ok], out[4][ok]
            discarded += int((~ok).sum())
            todo = todo[~ok]
            if not todo.size:
                break
        else:
            raise ValueError(f"dart_sigma: {todo.size} episodes still unfinished after "
                             f"{MAX_REDRAW_ROUNDS} redraws at dart_sigma = {dart_sigma}; lower it")
        if progress is not None:
            progress(min(start + CHUNK, n), n)
    meta = {"domain": "navworld", "action_type": "continuous", "sketch_len": int(L),
            "dart_sigma": float(dart_sigma),
            "seed": int(seed) if isinstance(seed, (int, np.integer)) else None,
            "discarded": discarded, "collected_on": collected_on()}
    return assemble([states[i, :t] for i, t in enumerate(traj_len)], [actions[i, :t] for i, t in enumerate(traj_len)],
                    [labels[i, :t] for i, t in enumerate(traj_len)], final_state, sketches, VOCAB, meta)


DOMAIN = register(Domain(
    name="navworld", vocab=VOCAB, state_dim=STATE_DIM, action_dim=ACTION_DIM, discrete=False,
    train_sketch_len=TRAIN_SKETCH_LEN, test_sketch_len=TEST_SKETCH_LEN, collect=collect,
    task_env=task_env, sample_sketches=sample_sketches, test_sketches=zero_shot_sketches,
    config=package_file("configs", "navworld.yaml"), control_dt=DT))
"""Nav-World on the domain contract (taco_sim.domain)."""
