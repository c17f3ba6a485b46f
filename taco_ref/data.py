"""Demonstrations: the one on-disk format, its validation, and minibatching.

A demonstration set is a single ``.npz`` file (never a pickle) holding padded arrays plus a
JSON metadata string; spec/data.md documents it field by field.

Field        | Shape              | Meaning
states       | (N, T, D) float64  | s_1..s_T, zero beyond traj_len
actions      | (N, T, A) float64  | a_1..a_T (continuous), or (N, T) int64 (discrete)
traj_len     | (N,) int64         | T_n in [1, T]
sketch       | (N, L) int64       | sub-task ids b_1..b_L, -1 beyond sketch_len
sketch_len   | (N,) int64         | L_n in [1, min(L, T_n)]
labels       | (N, T) int64       | ground-truth sketch position (0-based) per step, -1 beyond traj_len
final_state  | (N, D) float64     | the observation after the last action (terminal STOP)
vocab        | (K,) str           | sub-task names; ids index this list
meta         | JSON string        | format version, action type, domain, how it was collected
"""
import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from taco_ref import files
from taco_ref.files import atomic_write

FORMAT_VERSION = 1
ARRAY_FIELDS = ("states", "actions", "traj_len", "sketch", "sketch_len", "labels", "final_state")
MAX_ABS_VALUE = 1e6
"""Largest magnitude of a state or continuous action inside a trajectory (and of final_state).
A robot's readings and commands in any unit it reports (metres, radians, N m, rad/s, pixel
values) stay far below it, while 1e300 turns a squared residual into inf and every loss after
it into NaN; squares of 1e6 (1e12) keep the objectives finite in float32 as in float64.
spec/data.md §5 rule 10."""
MAX_SKETCH_LEN = 64
"""Longest sketch a domain collects and a robot executes (taco_sim.domain and taco_ref.runner
read it from here): a guard against requests that would keep a robot busy for hours."""
MAX_ACTIONS = 1024
"""Most discrete actions (meta.n_actions): far above any discrete domain here (Craft's), and
small enough for the CTC classifier's one-hot table (n_actions x n_actions float64, 8 MiB)."""


class DataError(ValueError):
    """A demonstration file or array that does not meet the format."""


@dataclass
class Demos:
    """A padded set of N demonstrations (see the module docstring for every field)."""

    states: np.ndarray
    actions: np.ndarray
    traj_len: np.ndarray
    sketch: np.ndarray
    sketch_len: np.ndarray
    labels: np.ndarray
    final_state: np.ndarray
    vocab: tuple
    meta: dict = field(default_factory=dict)

    @property
    def discrete(self):
        return self.actions.ndim == 2

    @property
    def n(self):
        return self.states.shape[0]

    def subset(self, idx):
        """The demonstrations idx (an index array), trimmed to their longest T and L."""
        idx = np.asarray(idx)
        T = int(self.traj_len[idx].max()) if idx.size else 1
        L = int(self.sketch_len[idx].max()) if idx.size else 1
        return Demos(self.states[idx, :T], self.actions[idx, :T], self.traj_len[idx],
                     self.sketch[idx, :L], self.sketch_len[idx], self.labels[idx, :T],
                     self.final_state[idx], self.vocab, dict(self.meta))

    def fingerprint(self):
        """SHA-256 over every array and the vocabulary: identifies the exact data a run used."""
        h = hashlib.sha256()
        for name in ARRAY_FIELDS:
            arr = np.ascontiguousarray(getattr(self, name))
            h.update(f"{name}{arr.dtype.str}{arr.shape}".encode())
            h.update(arr.tobytes())
        h.update(json.dumps(list(self.vocab)).encode())
        return h.hexdigest()

    def validate(self):
        """Raise DataError naming the field and what was expected; return self when valid."""
        validate(self)
        return self


def assemble(states, actions, labels, final_states, sketches, vocab, meta):
    """The validated Demos of N episodes of their own lengths, padded: every domain's collect
    builds its demonstrations here (spec/data.md §1).

    Argument     | Per episode i           | Padded into
    states       | (T_i, D) floats         | states (N, T, D), zeros beyond T_i
    actions      | (T_i, A) floats or (T_i,) ids | actions (N, T, A) or (N, T), zeros beyond T_i
    labels       | (T_i,) sketch positions | labels (N, T), -1 beyond T_i
    final_states | (D,)                    | final_state (N, D)
    sketches     | (L_i,) sub-task ids     | sketch (N, L), -1 beyond L_i; sketch_len (N,)
    """
    n = len(states)
    traj_len = np.array([len(a) for a in actions], dtype=np.int64)             # (N,)
    sketch_len = np.array([len(k) for k in sketches], dtype=np.int64)           # (N,)
    T, L = int(traj_len.max()), int(sketch_len.max())
    first = np.asarray(actions[0])
    padded_states = np.zeros((n, T, np.asarray(states[0]).shape[-1]))          # (N, T, D)
    padded_actions = np.zeros((n, T) + first.shape[1:], dtype=first.dtype)      # (N, T, A) or (N, T)
    padded_labels = np.full((n, T), -1, dtype=np.int64)                        # (N, T)
    sketch = np.full((n, L), -1, dtype=np.int64)                                # (N, L)
    for i in range(n):
        t = traj_len[i]
        padded_states[i, :t], padded_actions[i, :t], padded_labels[i, :t] = states[i][:t], actions[i], labels[i][:t]
        sketch[i, :sketch_len[i]] = sketches[i]
    return Demos(padded_states, padded_actions, traj_len, sketch, sketch_len, padded_labels,
                 np.array([np.asarray(f, dtype=float) for f in final_states]), tuple(vocab), meta).validate()


def _fail(name, expected, got):
    raise DataError(f"{name}: expected {expected}, got {got}")


def validate(d):
    """Check every field of a Demos; the errors name the field and the first bad entry."""
    for name in ARRAY_FIELDS:
        if not isinstance(getattr(d, name), np.ndarray):
            _fail(name, "a numpy array", type(getattr(d, name)).__name__)
    if d.states.ndim != 3 or d.states.dtype.kind != "f":
        _fail("states", "a float array of shape (N, T, D)", f"{d.states.dtype} {d.states.shape}")
    N, T, D = d.states.shape
    if N < 1 or T < 1 or D < 1:
        _fail("states", "N, T, D >= 1", d.states.shape)
    if d.actions.ndim == 3:
        if d.actions.dtype.kind != "f" or d.actions.shape[:2] != (N, T):
            _fail("actions", f"a float array of shape (N, T, A) = ({N}, {T}, A)",
                  f"{d.actions.dtype} {d.actions.shape}")
    elif d.actions.ndim == 2:
        if d.actions.dtype.kind not in "iu" or d.actions.shape != (N, T):
            _fail("actions", f"an integer array of shape (N, T) = ({N}, {T}) for discrete actions",
                  f"{d.actions.dtype} {d.actions.shape}")
    else:
        _fail("actions", "shape (N, T, A) (continuous) or (N, T) (discrete)", d.actions.shape)
    for name, shape in (("traj_len", (N,)), ("sketch_len", (N,)), ("labels", (N, T))):
        arr = getattr(d, name)
        if arr.dtype.kind not in "iu" or arr.shape != shape:
            _fail(name, f"an integer array of shape {shape}", f"{arr.dtype} {arr.shape}")
    if d.sketch.dtype.kind not in "iu" or d.sketch.ndim != 2 or d.sketch.shape[0] != N:
        _fail("sketch", f"an integer array of shape (N, L) with N = {N}", f"{d.sketch.dtype} {d.sketch.shape}")
    L = d.sketch.shape[1]
    if d.final_state.shape != (N, D) or d.final_state.dtype.kind != "f":
        _fail("final_state", f"a float array of shape (N, D) = ({N}, {D})",
              f"{d.final_state.dtype} {d.final_state.shape}")
    if isinstance(d.vocab, (str, bytes)):
        _fail("vocab", "a list of sub-task names, not one string", repr(d.vocab))
    K = len(d.vocab)
    if K < 1 or not all(isinstance(v, str) and v for v in d.vocab) or len(set(d.vocab)) != K:
        _fail("vocab", "a non-empty list of distinct, non-empty sub-task names", list(d.vocab))

    bad = np.nonzero((d.traj_len < 1) | (d.traj_len > T))[0]
    if bad.size:
        _fail("traj_len", f"values in [1, {T}]", f"traj_len[{bad[0]}] = {d.traj_len[bad[0]]}")
    bad = np.nonzero(d.sketch_len < 1)[0]
    if bad.size:
        _fail("sketch_len", "at least 1 (an empty sketch has nothing to align)",
              f"sketch_len[{bad[0]}] = {d.sketch_len[bad[0]]}")
    bad = np.nonzero(d.sketch_len > L)[0]
    if bad.size:
        _fail("sketch_len", f"values <= L = {L}", f"sketch_len[{bad[0]}] = {d.sketch_len[bad[0]]}")
    bad = np.nonzero(d.sketch_len > d.traj_len)[0]
    if bad.size:
        n = bad[0]
        _fail("sketch_len", "a sketch no longer than its trajectory (L_n <= T_n)",
              f"demonstration {n}: sketch_len {d.sketch_len[n]} > traj_len {d.traj_len[n]}")

    in_t = np.arange(T)[None, :] < d.traj_len[:, None]                      # (N, T)
    in_l = np.arange(L)[None, :] < d.sketch_len[:, None]                    # (N, L)
    ids = np.where(in_l, d.sketch, 0)
    bad = np.argwhere((ids < 0) | (ids >= K))
    if bad.size:
        n, l = bad[0]
        _fail("sketch", f"sub-task ids in [0, K) = [0, {K}) (K = len(vocab))",
              f"sketch[{n}, {l}] = {d.sketch[n, l]}")
    _finite("states", d.states, in_t[:, :, None])
    _finite("final_state", d.final_state, np.ones((N, 1), bool))
    if d.discrete:
        n_actions = d.meta.get("n_actions")
        if isinstance(n_actions, bool) or not isinstance(n_actions, int) or not 1 <= n_actions <= MAX_ACTIONS:
            _fail("meta.n_actions", f"a positive integer up to {MAX_ACTIONS} for discrete actions", n_actions)
        bad = np.argwhere(in_t & ((d.actions < 0) | (d.actions >= n_actions)))
        if bad.size:
            n, t = bad[0]
            _fail("actions", f"discrete action ids in [0, {n_actions})", f"actions[{n}, {t}] = {d.actions[n, t]}")
    else:
        _finite("actions", d.actions, in_t[:, :, None])

    # labels: start at 0, step by 0 or 1, end at L_n - 1 (a monotone path), spec/data.md eq. (1)
    lab = np.where(in_t, d.labels, 0)
    steps = np.diff(lab, axis=1)
    step_ok = ~in_t[:, 1:] | ((steps == 0) | (steps == 1))
    last = d.labels[np.arange(N), d.traj_len - 1]
    bad = np.nonzero((lab[:, 0] != 0) | ~step_ok.all(axis=1) | (last != d.sketch_len - 1))[0]
    if bad.size:
        _fail("labels", "per-step sketch positions that start at 0, rise by 0 or 1 per step and "
              "end at sketch_len - 1", f"demonstration {bad[0]}: {d.labels[bad[0], :d.traj_len[bad[0]]].tolist()}")
    version = d.meta.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        _fail("meta.format_version", FORMAT_VERSION, version)


def _finite(name, arr, valid):
    """Finite values of magnitude <= MAX_ABS_VALUE where valid (padding is not checked)."""
    with np.errstate(invalid="ignore"):
        bad = np.argwhere(~np.isfinite(arr) & valid)
        if bad.size:
            idx = tuple(int(i) for i in bad[0])
            _fail(name, "finite values inside the trajectory", f"{name}{list(idx)} = {arr[idx]}")
        bad = np.argwhere((np.abs(arr) > MAX_ABS_VALUE) & valid)
    if bad.size:
        idx = tuple(int(i) for i in bad[0])
        _fail(name, f"values of magnitude at most {MAX_ABS_VALUE:g} inside the trajectory (data.MAX_ABS_VALUE)",
              f"{name}{list(idx)} = {arr[idx]:.6g}")


# ----------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------

def save(demos, path):
    """Validate and write demos to path (.npz), atomically."""
    demos.validate()
    meta = dict(demos.meta, format_version=FORMAT_VERSION)
    arrays = {name: getattr(demos, name) for name in ARRAY_FIELDS}
    arrays["vocab"] = np.array(demos.vocab, dtype=str)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    atomic_write(path, lambda f: np.savez_compressed(f, **arrays))


def load(path):
    """Read and validate a demonstration file. Never unpickles; the file must be a regular
    .npz whose arrays' headers agree with their stored sizes (files.load_npz) before anything
    is allocated; errors name the file and the field."""
    files.regular_file(path, files.MAX_ARRAY_BYTES, DataError)
    try:
        with open(path, "rb") as f:
            z = files.load_npz(f, path, DataError, "taco_ref demonstration file")
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from None
    missing = [k + ".npy" for k in ARRAY_FIELDS + ("vocab", "meta") if k not in z]
    if missing:
        raise DataError(f"{path}: missing fields {missing}; is this a taco_ref demonstration file?")
    arrays = {k: z[k] for k in ARRAY_FIELDS}
    if z["vocab"].ndim != 1 or z["vocab"].dtype.kind != "U":
        raise DataError(f"{path}: vocab: expected a 1-d array of sub-task names (strings), got "
                        f"{z['vocab'].dtype} of shape {z['vocab'].shape}")
    if z["meta"].ndim != 0 or z["meta"].dtype.kind != "U":
        raise DataError(f"{path}: meta: expected one string of JSON text, got {z['meta'].dtype} of "
                        f"shape {z['meta'].shape}")
    try:
        vocab = tuple(str(v) for v in z["vocab"].tolist())
        meta = json.loads(str(z["meta"]))
    except (TypeError, ValueError, RecursionError) as err:
        raise DataError(f"{path}: vocab/meta: unreadable ({type(err).__name__}: {err})") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: meta: expected a JSON object")
    return Demos(vocab=vocab, meta=meta, **arrays).validate()


# ----------------------------------------------------------------------------------------
# Splits and minibatches
# ----------------------------------------------------------------------------------------

def holdout_count(n, holdout_fraction):
    """How many of n demonstrations split holds out: round(fraction * n), >= 1 if n > 1 and
    the fraction is positive, and never all of them."""
    k = int(round(holdout_fraction * n))
    if holdout_fraction > 0 and n > 1:
        k = min(max(k, 1), n - 1)
    return k


def split(demos, holdout_fraction, rng):
    """(train, held_out) by a random permutation; held_out gets holdout_count of them."""
    perm = rng.permutation(demos.n)
    k = holdout_count(demos.n, holdout_fraction)
    return demos.subset(np.sort(perm[k:])), demos.subset(np.sort(perm[:k]))


def batch_indices(n, batch_size, rng=None):
    """Yield index arrays of at most batch_size of range(n): in order when rng is None (whole-set
    losses, decoding), else in a fresh random order rng.permutation(n) with each batch's indices
    sorted (training). Every index appears exactly once."""
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    order = np.arange(n) if rng is None else rng.permutation(n)
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        yield idx if rng is None else np.sort(idx)


def batches(demos, batch_size, rng=None):
    """Yield Demos of at most batch_size demonstrations (batch_indices), each padded only to its
    own longest trajectory and sketch: the one batch iterator of training and evaluation."""
    for idx in batch_indices(demos.n, batch_size, rng):
        yield demos.subset(idx)
