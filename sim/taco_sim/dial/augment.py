"""The keys a sub-task does not press, moved: in training, the keys a demonstration never presses
go to other free slots (relayout_unused_keys); in execution, each sub-policy can decide over
views of its state with the other keys rearranged (other_key_views). spec/dial.md §9.

A state holds the offset of every key from the fingertip (spec/dial.md §3). A demonstration
presses the digits of its sketch; the other keys only sit there. Moving them to other slots
gives the state of the same arm motion on another layout, one the demonstrations' layout
distribution (``sample_layout``) could have drawn: the pressed keys stay where they are and the
others take a uniformly random assignment to the digit slots left free. The sketch is all it reads,
never a sub-task label or a segmentation, so TACO stays label-free.
"""
import numpy as np

from taco_sim.dial.env import DIGIT_SLOTS, K, STANDARD_LAYOUT, slot_positions

JOINTS = 9
"""obs[:9] are joint angles, obs[9 + 3 d : 12 + 3 d] = key_pos[d] - fingertip (spec/dial.md §3)."""
TOLERANCE = 1e-4
"""m: how far a key, placed back from its offset, may lie from its slot (float32 states: ~1e-7)."""


def layout_of(state, slots=None):
    """(K,) slot of each digit in one state (D,), read from its key offsets: the fingertip f is
    the one of the candidates slot - offset[0] that puts every key on a slot. ValueError when no
    candidate does (not a Dial state). slots: slot_positions(), if the caller has it."""
    slots = slot_positions() if slots is None else slots                  # (S, 3)
    offsets = np.asarray(state, dtype=np.float64)[JOINTS:JOINTS + 3 * K].reshape(K, 3)
    for f in slots - offsets[0]:                                          # (3,) a fingertip candidate
        dist = np.linalg.norm(offsets[:, None, :] + f - slots[None], axis=2)  # (K, S)
        layout = dist.argmin(axis=1)
        if dist[np.arange(K), layout].max() < TOLERANCE and len(set(layout.tolist())) == K:
            return layout
    raise ValueError("state: its key offsets are not the keys of a layout of the Dial's slots "
                     f"(none within {TOLERANCE} m of a slot for any fingertip position)")


def relayout_unused_keys(batch, rng):
    """In place: for every demonstration of the batch (taco_ref.data.Demos), the digits not in
    its sketch go to a uniformly random assignment of the digit slots (DIGIT_SLOTS, as in
    sample_layout) its sketch's digits leave free (redrawn if that makes the standard layout,
    which training never shows), the same for all of its steps; its states' offsets of those
    keys move with them. Uses rng (a numpy Generator) once per demonstration."""
    slots = slot_positions()
    states = batch.states
    for j in range(batch.n):
        T = int(batch.traj_len[j])
        layout = layout_of(states[j, 0], slots)
        pressed = sorted({int(k) for k in batch.sketch[j, :batch.sketch_len[j]]})
        others = [d for d in range(K) if d not in pressed]
        taken = set(layout[pressed].tolist())
        free = [s for s in DIGIT_SLOTS.tolist() if s not in taken]
        while True:
            new = layout.copy()
            new[others] = rng.permutation(free)
            if not np.array_equal(new, STANDARD_LAYOUT):
                break
        shift = (slots[new] - slots[layout]).astype(states.dtype)           # (K, 3), 0 for pressed keys
        states[j, :T, JOINTS:JOINTS + 3 * K] += shift.ravel()


VIEW_SEED = 70_000
"""The permutations of other_key_views come from np.random.default_rng([VIEW_SEED, k, i])."""
MAX_VIEWS = 256
"""taco_ref.config.MAX_VIEWS (domains import only taco_ref.data: tests/test_layout.py)."""


def other_key_permutation(subtask, i):
    """(K,) the i-th fixed permutation for sub-task k = subtask: digit d reads digit p[d]'s
    offset, p[k] = k, the other digits permuted uniformly (i >= 1; i = 0 is the identity)."""
    p = np.arange(K)
    if i:
        others = np.array([d for d in range(K) if d != subtask])
        p[others] = np.random.default_rng([VIEW_SEED, subtask, i]).permutation(others)
    return p


_PERMUTATIONS = {}


def other_key_views(subtask, state, n):
    """(n, D) views of one state (D,) for sub-policy k = subtask (spec/dial.md §9): view 0 is
    the state; view i the state with the offsets of the digits d != k permuted among themselves
    by other_key_permutation(k, i). The joints and key k's offset are the same in every view,
    and each view is the state of the same fingertip on another layout of the same slots."""
    if not 1 <= n <= MAX_VIEWS:
        raise ValueError(f"n: expected a number of views in [1, {MAX_VIEWS}], got {n}")
    if not 0 <= subtask < K:
        raise ValueError(f"subtask: expected a digit id in [0, {K - 1}], got {subtask}")
    key = (int(subtask), int(n))
    if key not in _PERMUTATIONS:
        _PERMUTATIONS[key] = np.stack([other_key_permutation(subtask, i) for i in range(n)])  # (n, K)
    perms = _PERMUTATIONS[key]
    state = np.asarray(state, dtype=np.float64)
    offsets = state[JOINTS:JOINTS + 3 * K].reshape(K, 3)[perms]                 # (n, K, 3)
    views = np.empty((n, state.shape[0]))
    views[:, :JOINTS] = state[:JOINTS]
    views[:, JOINTS:JOINTS + 3 * K] = offsets.reshape(n, 3 * K)
    views[:, JOINTS + 3 * K:] = state[JOINTS + 3 * K:]
    return views
