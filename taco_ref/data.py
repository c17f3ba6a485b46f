"""Demonstrations: the on-disk formats, their validation, and minibatching.

A demonstration set is a single ``.npz`` file (never a pickle) holding padded arrays plus a
JSON metadata string, or, for image states too large for memory, a directory of frame chunks
read lazily (`FrameStates`, spec/data.md §10); spec/data.md documents both field by field.

Field        | Shape              | Meaning
states       | (N, T, D) float64  | s_1..s_T, zero beyond traj_len; or images (N, T, H, W, C) uint8
actions      | (N, T, A) float64  | a_1..a_T (continuous), or (N, T) int64 (discrete)
traj_len     | (N,) int64         | T_n in [1, T]
sketch       | (N, L) int64       | sub-task ids b_1..b_L, -1 beyond sketch_len
sketch_len   | (N,) int64         | L_n in [1, min(L, T_n)]
labels       | (N, T) int64       | ground-truth sketch position (0-based) per step, -1 beyond traj_len
final_state  | (N, D) float64     | the observation after the last action (terminal STOP); (N, H, W, C)
             |                    | uint8 with image states
vocab        | (K,) str           | sub-task names; ids index this list
meta         | JSON string        | format version, action type, domain, how it was collected
"""
import hashlib
import json
import os
from dataclasses import dataclass, field, replace

import numpy as np

from taco_ref.plumbing import files, provenance
from taco_ref.plumbing.files import atomic_write

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

    @property
    def image_shape(self):
        """(H, W, C) of image states, None for state vectors."""
        return tuple(self.states.shape[2:]) if len(self.states.shape) == 5 else None

    def subset(self, idx):
        """The demonstrations idx (an index array), trimmed to their longest T and L."""
        idx = np.asarray(idx)
        T = int(self.traj_len[idx].max()) if idx.size else 1
        L = int(self.sketch_len[idx].max()) if idx.size else 1
        return Demos(self.states[idx, :T], self.actions[idx, :T], self.traj_len[idx],
                     self.sketch[idx, :L], self.sketch_len[idx], self.labels[idx, :T],
                     self.final_state[idx], self.vocab, dict(self.meta))

    def fingerprint(self):
        """SHA-256 over every array and the vocabulary: identifies the exact data a run used.
        Image states (and final images) enter through one SHA-256 per demonstration of its
        frames inside the trajectory (`frame_digests`), so that a set read lazily from a frame
        directory, whose digests were recorded when it was written, is not read whole to be
        identified; spec/data.md §6."""
        h = hashlib.sha256()
        for name in ARRAY_FIELDS:
            arr = getattr(self, name)
            h.update(f"{name}{np.dtype(arr.dtype).str}{tuple(arr.shape)}".encode())
            if self.image_shape is not None and name in ("states", "final_state"):
                for digest in (frame_digests(self) if name == "states" else _final_digests(arr)):
                    h.update(digest)
            else:
                h.update(np.ascontiguousarray(arr).tobytes())
        h.update(json.dumps(list(self.vocab)).encode())
        return h.hexdigest()

    def validate(self):
        """Raise DataError naming the field and what was expected; return self when valid."""
        validate(self)
        return self


def collected_on():
    """meta["collected_on"] of a set collected now: the machine collecting it
    (taco_ref.plumbing.provenance.machine), whose CPU and BLAS kernels decide a collection's last bits
    (spec/data.md §4, §6). Every domain's collect records it."""
    return provenance.machine()


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
        if not isinstance(getattr(d, name), np.ndarray) and not (name == "states" and isinstance(d.states, FrameStates)):
            _fail(name, "a numpy array", type(getattr(d, name)).__name__)
    images = len(d.states.shape) == 5
    if images and d.states.dtype != np.uint8:
        _fail("states", "images of dtype uint8, shape (N, T, H, W, C)", f"{d.states.dtype} {d.states.shape}")
    if not images and (d.states.ndim != 3 or d.states.dtype.kind != "f"):
        _fail("states", "a float array of shape (N, T, D), or uint8 images (N, T, H, W, C)",
              f"{d.states.dtype} {d.states.shape}")
    N, T = d.states.shape[:2]
    D = d.states.shape[2:]
    if N < 1 or T < 1 or min(D) < 1:
        _fail("states", "N, T and every state dimension >= 1", d.states.shape)
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
    if d.final_state.shape != (N,) + D or d.final_state.dtype != (np.uint8 if images else d.final_state.dtype) \
            or (not images and d.final_state.dtype.kind != "f"):
        kind = "a uint8 array" if images else "a float array"
        _fail("final_state", f"{kind} of shape (N,) + the state's shape = {(N,) + D}",
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
    if not images:        # uint8 pixels are finite and within MAX_ABS_VALUE by their type
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
# Files: one .npz, or a frame directory for image states (spec/data.md §6, §10)
# ----------------------------------------------------------------------------------------

INDEX = "demos.npz"
"""The index of a frame directory: every field but the images, and where the images are."""
FINAL = "final.npy"
"""The final image of every demonstration, (N, H, W, C) uint8, in a frame directory."""
FRAME_FORMAT = "taco_ref frames"


def chunk_name(i):
    """File name of frame chunk i of a frame directory."""
    return f"frames-{i:05d}.npy"


def part_name(i):
    """File name of the part of frame chunk i: what its collection needs besides the frames to
    rebuild the chunk's demonstrations, and the key of the job that made it (FrameWriter.reuse)."""
    return f"part-{i:05d}.npz"


_PART_RECORD = ("key", "lengths", "digests")


def save(demos, path):
    """Validate and write demos to path, atomically: an .npz file, or, for image states, a
    frame directory when path does not end in .npz (`save_frames`)."""
    demos.validate()
    if demos.image_shape is not None and not str(path).endswith(".npz"):
        save_frames(demos, path)
        return
    if isinstance(demos.states, FrameStates):
        demos = replace(demos, states=np.asarray(demos.states))
    meta = dict(demos.meta, format_version=FORMAT_VERSION)
    arrays = {name: getattr(demos, name) for name in ARRAY_FIELDS}
    arrays["vocab"] = np.array(demos.vocab, dtype=str)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    atomic_write(path, lambda f: np.savez_compressed(f, **arrays))


def load(path):
    """Read and validate a demonstration file or frame directory. Never unpickles; an .npz must
    be a regular file whose arrays' headers agree with their stored sizes (files.load_npz)
    before anything is allocated; a frame directory is checked the same way and its images are
    then read on demand (`load_frames`); errors name the file and the field."""
    if os.path.isdir(path):
        return load_frames(path)
    z = files.open_npz(path, DataError, "taco_ref demonstration file")
    return _from_arrays(z, path, ARRAY_FIELDS)


def _from_arrays(z, path, fields, **given):
    """A validated Demos from the arrays z of an .npz (fields) plus the given ones."""
    missing = [k + ".npy" for k in tuple(fields) + ("vocab", "meta") if k not in z]
    if missing:
        raise DataError(f"{path}: missing fields {missing}; is this a taco_ref demonstration file?")
    arrays = {k: z[k] for k in fields}
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
    return Demos(vocab=vocab, meta=meta, **arrays, **given).validate()


# --- image states read on demand --------------------------------------------------------

SMALL_FIELDS = ("actions", "traj_len", "sketch", "sketch_len", "labels")
"""The fields a frame directory's index holds as arrays (states and final_state are images)."""


class _FrameSource:
    """The images of one frame directory: its chunk files (each header and size checked once,
    when the set is opened) and where each demonstration's frames are. Frames are read with
    positioned reads (files.read_npy_rows), not memory maps: the pages read stay in the page
    cache, and a process's resident memory holds only the frames it copied.

    Attribute    | Shape     | Meaning
    directory    |           | the frame directory (absolute path)
    image_shape  | (3,)      | (H, W, C)
    traj_len     | (N,)      | T_n, frames of demonstration n
    chunk        | (N,)      | chunk file holding demonstration n's frames
    offset       | (N,)      | its first frame's index in that chunk
    digests      | (N, 32)   | SHA-256 of each demonstration's frames (C order), recorded when written
    data_at      | (chunks,) | byte offset of each chunk's data (after its .npy header)
    """

    def __init__(self, directory, image_shape, traj_len, chunk, offset, digests, chunk_frames):
        self.directory, self.image_shape = directory, tuple(int(v) for v in image_shape)
        self.traj_len, self.chunk, self.offset, self.digests = traj_len, chunk, offset, digests
        self.chunk_frames = chunk_frames                      # (n_chunks,) frames per chunk file
        self.data_at = [files.npy_offset(self.chunk_path(i), np.uint8,
                                         (int(chunk_frames[i]),) + self.image_shape, DataError)
                        for i in range(len(chunk_frames))]

    def chunk_path(self, i):
        return os.path.join(self.directory, chunk_name(int(i)))

    def read(self, i, start, count):
        """Frames start .. start + count of chunk i, (count, H, W, C) uint8, a new array."""
        return files.read_npy_rows(self.chunk_path(i), self.data_at[int(i)], self.image_shape, np.uint8,
                                   int(start), int(count), DataError)

    def frames(self, n):
        """Demonstration n's frames (T_n, H, W, C), read from its chunk."""
        return self.read(self.chunk[n], self.offset[n], self.traj_len[n])


class FrameStates:
    """Image states (n, T, H, W, C) uint8 of a frame directory, read on demand: what
    Demos.states holds for a set loaded by `load_frames`. Subsets and batches select without
    reading; frames are read when indexed.

    Indexing (what data and policy use; the same results as on the padded ndarray):
    states[idx, :T']  with idx an index array, list, range or slice -> FrameStates (no read)
    states[b, t]      with integer arrays b, t of one shape         -> ndarray (b.shape + (H, W, C))
    states[n]         one demonstration, padded to T                 -> ndarray (T, H, W, C)
    states[n, :T']    the same, its first T' steps (any slice of time) -> ndarray
    np.asarray(states)                                              -> the whole padded ndarray
    Padding frames (t >= T_n) read as zeros, as the .npz format writes them. Pickled, it is
    its directory and selection: a worker process reopens the files.
    """

    dtype = np.dtype(np.uint8)
    ndim = 5

    def __init__(self, source, rows, T):
        self._source = source
        self._rows = np.asarray(rows, dtype=np.int64)                    # (n,) demonstrations
        self._T = int(T)

    @property
    def shape(self):
        return (len(self._rows), self._T) + self._source.image_shape

    @property
    def directory(self):
        return self._source.directory

    def __len__(self):
        return len(self._rows)

    def digests(self):
        """(n, 32) uint8: the recorded SHA-256 of each selected demonstration's frames."""
        return self._source.digests[self._rows]

    def frames(self, i):
        """Selected demonstration i's frames inside its trajectory, (T_i, H, W, C), up to T."""
        return self._source.frames(int(self._rows[i]))[:self._T]

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            out = np.zeros((self._T,) + self._source.image_shape, np.uint8)
            f = self.frames(int(key))
            out[:len(f)] = f
            return out
        if not (isinstance(key, tuple) and len(key) == 2):
            raise TypeError(f"FrameStates: index with [idx, :T], [b, t] or [n], got {key!r}")
        first, second = key
        if isinstance(first, (int, np.integer)) and isinstance(second, slice):
            return self[first][second]                    # as an ndarray: (T', H, W, C)
        if isinstance(second, slice):
            if second.start not in (None, 0) or second.step not in (None, 1):
                raise TypeError(f"FrameStates: the time index must be :T, got {second!r}")
            T = self._T if second.stop is None else min(self._T, int(second.stop))
            return FrameStates(self._source, self._rows[first], T)
        b, t = np.broadcast_arrays(np.asarray(first), np.asarray(second))
        if b.dtype.kind not in "iu" or t.dtype.kind not in "iu":
            raise TypeError("FrameStates: [b, t] needs integer arrays")
        return self._gather(b.ravel(), t.ravel()).reshape(b.shape + self._source.image_shape)

    def _gather(self, b, t):
        """Frames (m, H, W, C) of the (b, t) pairs, read chunk by chunk in file order; zeros in
        padding (t >= T_b)."""
        src = self._source
        demo = self._rows[b]                                                     # (m,)
        out = np.zeros((len(b),) + src.image_shape, np.uint8)
        inside = (t >= 0) & (t < np.minimum(src.traj_len[demo], self._T))
        chunk = src.chunk[demo]
        position = src.offset[demo] + t                                          # (m,) frame in its chunk
        for c in np.unique(chunk[inside]):
            pick = np.nonzero(inside & (chunk == c))[0]
            pick = pick[np.argsort(position[pick], kind="stable")]                  # in file order
            pos = position[pick]
            runs = np.split(np.arange(len(pick)), np.nonzero(np.diff(pos) > 1)[0] + 1)
            for run in runs:                      # one read per run of neighbouring frames
                first, last = int(pos[run[0]]), int(pos[run[-1]])
                block = src.read(c, first, last - first + 1)                          # (n, H, W, C)
                out[pick[run]] = block[pos[run] - first]
        return out

    def __array__(self, dtype=None, copy=None):
        out = np.zeros(self.shape, np.uint8)
        for i in range(len(self._rows)):
            f = self.frames(i)
            out[i, :len(f)] = f
        return out if dtype is None else out.astype(dtype)

    def __reduce__(self):
        return (_reopen, (self._source.directory, self._rows, self._T))


def _reopen(directory, rows, T):
    return FrameStates(_read_index(directory)[1], rows, T)


def frame_digests(demos):
    """(N, 32) uint8: SHA-256 of each demonstration's image states inside its trajectory
    (frames t < T_n, C order): recorded ones for a frame directory, computed otherwise."""
    if isinstance(demos.states, FrameStates):
        return demos.states.digests()
    return np.array([_digest(demos.states[n, :int(demos.traj_len[n])]) for n in range(demos.n)])


def _digest(frames):
    """(32,) uint8: the SHA-256 of an array's bytes in C order (a demonstration's frames)."""
    return np.frombuffer(hashlib.sha256(np.ascontiguousarray(frames).tobytes()).digest(), np.uint8)


def _final_digests(final):
    return [_digest(f).tobytes() for f in final]


def save_frames(demos, directory, frames_per_chunk=None):
    """Write image demos to a frame directory (spec/data.md §10), every file atomically, the
    index last: chunk files of whole demonstrations (frames inside the trajectories only,
    about CHUNK_BYTES each unless frames_per_chunk), final.npy, then demos.npz."""
    demos.validate()
    if demos.image_shape is None:
        raise DataError("states: a frame directory holds image states (N, T, H, W, C)")
    writer = FrameWriter(directory, demos.image_shape)
    per = frames_per_chunk or max(1, CHUNK_BYTES // int(np.prod(demos.image_shape)))
    start = 0
    while start < demos.n:
        stop = start + 1
        while stop < demos.n and demos.traj_len[start:stop + 1].sum() <= per:
            stop += 1
        writer.write_chunk(len(writer.chunks), [np.asarray(demos.states[n])[:demos.traj_len[n]]
                                                for n in range(start, stop)])
        start = stop
    return writer.finish(demos, np.asarray(demos.final_state))


CHUNK_BYTES = 2 ** 27
"""Bytes of images per chunk file that save_frames aims at (128 MiB, whole demonstrations)."""


class FrameWriter:
    """Writes a frame directory piece by piece (collection streams each chunk as it is made):
    write_chunk(i, [frames of each demonstration]) in any order and process, or reuse(i, key)
    of a chunk an interrupted collection of the same job left, then finish. The old index and
    final.npy are removed first, so a directory is complete only once finish has run; finish
    removes every chunk it did not write or reuse, and the parts."""

    def __init__(self, directory, image_shape):
        self.directory = os.path.abspath(os.fspath(directory))
        self.image_shape = tuple(int(v) for v in image_shape)
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise DataError(f"{directory}: exists and is not a directory")
        os.makedirs(self.directory, exist_ok=True)
        files.remove_stale_temporaries(self.directory)
        for name in (INDEX, FINAL):
            if os.path.lexists(os.path.join(self.directory, name)):
                os.unlink(os.path.join(self.directory, name))
        self.chunks = {}

    def reuse(self, i, key):
        """The part of chunk i ({name: array} as write_frame_chunk was given it) when the
        directory holds chunk i as the job named key wrote it: its part file records exactly
        key, and the chunk file's header, size and every demonstration's frames match the
        part's lengths and SHA-256 digests (the frames are read once to check them). The
        chunk's record is kept as if written now. None otherwise (missing, another job's,
        unreadable, or not the frames its part describes): the chunk is to be made again."""
        part = os.path.join(self.directory, part_name(i))
        chunk = os.path.join(self.directory, chunk_name(i))
        if not (os.path.isfile(part) and os.path.isfile(chunk)):
            return None
        try:
            arrays = files.open_npz(part, DataError, "frame chunk part")
            if (any(name not in arrays for name in _PART_RECORD) or arrays["key"].ndim != 0
                    or arrays["key"].dtype.kind != "U" or str(arrays["key"]) != key):
                return None
            lengths, digests = arrays["lengths"], arrays["digests"]
            if (lengths.ndim != 1 or lengths.dtype.kind not in "iu" or len(lengths) < 1 or (lengths < 1).any()
                    or digests.shape != (len(lengths), 32) or digests.dtype != np.uint8):
                return None
            offset = files.npy_offset(chunk, np.uint8, (int(lengths.sum()),) + self.image_shape, DataError)
            start = 0
            for T_n, digest in zip(lengths.tolist(), digests):
                frames = files.read_npy_rows(chunk, offset, self.image_shape, np.uint8, start, T_n, DataError)
                if not np.array_equal(_digest(frames), digest):
                    return None
                start += T_n
        except DataError:
            return None
        self.chunks[i] = {"lengths": lengths.astype(np.int64), "digests": digests}
        return {name: value for name, value in arrays.items() if name not in _PART_RECORD}

    def write_chunk(self, i, demo_frames):
        """Write chunk i: the frames (T_n, H, W, C) uint8 of consecutive demonstrations; returns
        and keeps its record (frames per demonstration, their SHA-256 digests)."""
        record = write_frame_chunk(self.directory, i, demo_frames, self.image_shape)
        self.chunks[i] = record
        return record

    def add(self, i, record):
        """Keep the record of chunk i written by another process (write_frame_chunk)."""
        self.chunks[i] = record

    def finish(self, demos, final):
        """Write final.npy and the index for demos (its states are not read: the chunks hold
        them, in chunk order); return the set read back lazily (load_frames)."""
        order = sorted(self.chunks)
        if order != list(range(len(order))):
            raise DataError(f"{self.directory}: frame chunks {order} are not numbered 0, 1, ...")
        lengths = np.concatenate([self.chunks[i]["lengths"] for i in order]).astype(np.int64)
        if not np.array_equal(lengths, demos.traj_len):
            raise DataError(f"{self.directory}: the chunks hold {len(lengths)} demonstrations whose "
                            f"frame counts differ from traj_len")
        final = np.ascontiguousarray(final, dtype=np.uint8)
        if final.shape != (demos.n,) + self.image_shape:
            raise DataError(f"final_state: expected {(demos.n,) + self.image_shape}, got {final.shape}")
        atomic_write(os.path.join(self.directory, FINAL), lambda f: np.save(f, final))
        arrays = {name: getattr(demos, name) for name in SMALL_FIELDS}
        arrays["chunk"] = np.concatenate([np.full(len(self.chunks[i]["lengths"]), i, np.int64) for i in order])
        arrays["digests"] = np.concatenate([self.chunks[i]["digests"] for i in order]).astype(np.uint8)
        arrays["vocab"] = np.array(demos.vocab, dtype=str)
        meta = dict(demos.meta, format_version=FORMAT_VERSION)
        meta["frames"] = {"format": FRAME_FORMAT, "image_shape": list(self.image_shape),
                          "chunks": len(order)}
        arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
        atomic_write(os.path.join(self.directory, INDEX), lambda f: np.savez_compressed(f, **arrays))
        for name in os.listdir(self.directory):   # parts, and chunks of an earlier, larger set
            stale = name.startswith("part-") and name.endswith(".npz")
            if name.startswith("frames-") and name.endswith(".npy"):
                number = name[len("frames-"):-len(".npy")]
                stale = not (number.isdigit() and int(number) < len(order) and name == chunk_name(int(number)))
            if stale:
                os.unlink(os.path.join(self.directory, name))
        return load_frames(self.directory)


def write_frame_chunk(directory, i, demo_frames, image_shape, part=None):
    """Chunk file i of a frame directory from the frames of consecutive demonstrations (a list
    of (T_n, H, W, C) uint8), written atomically; returns {lengths (n,), digests (n, 32)}.
    Collection workers call it directly and hand the record to FrameWriter.add.

    part = (key, {name: array}): what the collection needs besides the frames to rebuild these
    demonstrations, and the key naming the job that made them; written to part_name(i) after
    the chunk (an old part is removed before it), so that a collection of the same job run
    again after an interruption reuses the chunk (FrameWriter.reuse)."""
    shape = tuple(image_shape)
    for f in demo_frames:
        if f.dtype != np.uint8 or f.ndim != 4 or f.shape[1:] != shape or len(f) < 1:
            raise DataError(f"frames: expected (T_n, H, W, C) = (T_n,) + {shape} uint8, got {f.dtype} {f.shape}")
    if part is not None and (not isinstance(part[0], str) or set(part[1]) & set(_PART_RECORD)):
        raise DataError(f"part: expected (key string, {{name: array}}) without the names {_PART_RECORD}")
    part_path = os.path.join(directory, part_name(i))
    if os.path.lexists(part_path):                  # a chunk and another job's part never pair
        os.unlink(part_path)
    frames = np.concatenate(demo_frames) if len(demo_frames) > 1 else np.ascontiguousarray(demo_frames[0])
    atomic_write(os.path.join(directory, chunk_name(i)), lambda f: np.save(f, frames))
    digests = np.array([_digest(f) for f in demo_frames])
    record = {"lengths": np.array([len(f) for f in demo_frames], np.int64), "digests": digests}
    if part is not None:
        key, arrays = part
        atomic_write(part_path, lambda f: np.savez(f, **arrays, key=np.array(key), **record))
    return record


def _read_index(directory):
    """(arrays and meta of the index, the _FrameSource) of a frame directory, every size and
    header checked before anything large is read."""
    directory = os.path.abspath(os.fspath(directory))
    index = os.path.join(directory, INDEX)
    if not os.path.exists(index):
        raise DataError(f"{directory}: not a frame directory of taco_ref demonstrations ({INDEX} is "
                        f"missing: not written, or its collection did not finish)")
    z = files.open_npz(index, DataError, "taco_ref frame index")
    for name in SMALL_FIELDS + ("chunk", "digests", "vocab", "meta"):
        if name not in z:
            raise DataError(f"{index}: missing field {name}.npy; is this a taco_ref frame directory?")
    try:
        meta = json.loads(str(z["meta"])) if z["meta"].ndim == 0 and z["meta"].dtype.kind == "U" else None
    except (TypeError, ValueError, RecursionError):
        meta = None
    frames = meta.get("frames") if isinstance(meta, dict) else None
    if not isinstance(frames, dict) or frames.get("format") != FRAME_FORMAT:
        raise DataError(f"{index}: meta.frames: expected {{format: {FRAME_FORMAT!r}, image_shape, chunks}}")
    shape, n_chunks = frames.get("image_shape"), frames.get("chunks")
    if (not isinstance(shape, list) or len(shape) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 2 ** 16 for v in shape)
            or isinstance(n_chunks, bool) or not isinstance(n_chunks, int) or n_chunks < 1):
        raise DataError(f"{index}: meta.frames: expected image_shape [H, W, C] and chunks >= 1, "
                        f"got {shape!r}, {n_chunks!r}")
    traj_len, chunk, digests = z["traj_len"], z["chunk"], z["digests"]
    N = len(traj_len)
    if (traj_len.ndim != 1 or traj_len.dtype.kind not in "iu" or chunk.shape != (N,) or chunk.dtype.kind not in "iu"
            or digests.shape != (N, 32) or digests.dtype != np.uint8 or N < 1):
        raise DataError(f"{index}: traj_len (N,), chunk (N,) and digests (N, 32) uint8 expected, got "
                        f"{traj_len.shape}, {chunk.shape}, {digests.dtype} {digests.shape}")
    if (traj_len < 1).any() or (chunk < 0).any() or (chunk >= n_chunks).any() or (np.diff(chunk) < 0).any() \
            or set(np.unique(chunk).tolist()) != set(range(n_chunks)):
        raise DataError(f"{index}: chunk must number the demonstrations' chunk files 0..{n_chunks - 1} in "
                        f"order, every one used, and traj_len be >= 1")
    starts = np.concatenate([[0], np.cumsum(traj_len)[:-1]])
    first = np.searchsorted(chunk, np.arange(n_chunks))                        # first demo of each chunk
    offset = starts - starts[first][chunk]
    chunk_frames = np.bincount(chunk, weights=traj_len, minlength=n_chunks).astype(np.int64)
    source = _FrameSource(directory, shape, traj_len.astype(np.int64), chunk.astype(np.int64),
                          offset.astype(np.int64), digests, chunk_frames)
    return z, source                          # (every chunk's header and size checked in _FrameSource)


def load_frames(directory):
    """A validated Demos whose states are read lazily from the frame directory (FrameStates);
    the index, every chunk's header and size and final.npy are checked first (DataError
    naming the file); the final images (N, H, W, C) are read into memory (45 MB at the
    paper's scale)."""
    z, source = _read_index(directory)
    N = len(source.traj_len)
    path = os.path.join(source.directory, FINAL)
    at = files.npy_offset(path, np.uint8, (N,) + source.image_shape, DataError)
    final = files.read_npy_rows(path, at, source.image_shape, np.uint8, 0, N, DataError)   # (N, H, W, C)
    states = FrameStates(source, np.arange(N), int(source.traj_len.max()))
    T = states.shape[1]
    for name in ("actions", "labels"):
        if z[name].ndim < 2 or z[name].shape[1] != T:
            raise DataError(f"{os.path.join(source.directory, INDEX)}: {name}: expected {T} time steps "
                            f"(the longest trajectory), got shape {z[name].shape}")
    return _from_arrays(z, os.path.join(source.directory, INDEX), SMALL_FIELDS, states=states,
                        final_state=final)


def image_statistics(demos, batch=64):
    """Per-channel mean and standard deviation (C,) of the image states inside the
    trajectories, pooled over every pixel and frame; std floored at 1e-6 (spec/training.md
    eq. (1) per channel). Exact: integer counts of each of the 256 values per channel, read a
    few demonstrations at a time."""
    C = demos.image_shape[2]
    counts = np.zeros((C, 256), np.int64)
    for start in range(0, demos.n, batch):
        for n in range(start, min(demos.n, start + batch)):
            frames = (demos.states.frames(n) if isinstance(demos.states, FrameStates)
                      else demos.states[n, :int(demos.traj_len[n])])
            pixels = np.asarray(frames).reshape(-1, C)                          # (T_n H W, C)
            for c in range(C):
                counts[c] += np.bincount(pixels[:, c], minlength=256)
    values = np.arange(256, dtype=np.float64)
    total = counts.sum(axis=1)                                                  # (C,)
    mean = counts @ values / total
    var = counts @ values ** 2 / total - mean ** 2
    return mean, np.maximum(np.sqrt(np.maximum(var, 0.0)), 1e-6)


MAX_BATCH_FRAMES = 1024
"""Whole-set passes (held-out losses, alignment) over image states take at most this many
frames per batch (about 0.5 GB of activations for the paper's 112 x 112 core)."""


def pass_batch_size(demos, batch_size):
    """Demonstrations per batch of a whole-set pass: batch_size, fewer for image states so that
    a batch holds at most MAX_BATCH_FRAMES frames."""
    if demos.image_shape is None:
        return batch_size
    return max(1, min(batch_size, MAX_BATCH_FRAMES // max(1, demos.states.shape[1])))


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
