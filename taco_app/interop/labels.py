"""How per-frame sub-task labels are written in the ecosystem's formats: LeRobot's subtask rows
and MimicGen's termination signals (spec/interop.md §4, §5), the sketches file, and what one
episode carries between a reader, the annotator and a writer. NumPy and YAML only: the file
formats themselves are in lerobot.py and robomimic.py.
"""
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import yaml

from taco_app.config import safe_yaml
from taco_ref.plumbing import files
from taco_ref.annotate import labels_from_segments, segments


class InteropError(ValueError):
    """A dataset, sketches file or option that cannot be read or written as asked; the message
    names the file, the episode and the field."""


@dataclass
class Episode:
    """One demonstration as a reader hands it over (before padding into a Demos).

    Field       | Shape            | Meaning
    key         |                  | the dataset's name for it: LeRobot's episode_index, robomimic's "demo_N"
    states      | (T, D) float64   | the state keys' values, concatenated in the order given
    actions     | (T, A) float64 or (T,) int64 | the action key's values (integers: discrete)
    final_state | (D,) float64     | the observation after the last action where the file has it, else states[-1]
    task        |                  | the episode's task string (None where the file has none)
    sketch      |                  | sub-task names of an annotation already in the file, or None
    labels      | (T,) int64       | that annotation's sketch position per frame, or None
    timestamps  | (T,) float32     | LeRobot's timestamp column (None for robomimic)
    """

    key: object
    states: np.ndarray
    actions: np.ndarray
    final_state: np.ndarray
    task: Optional[str] = None
    sketch: Optional[list] = None
    labels: Optional[np.ndarray] = None
    timestamps: Optional[np.ndarray] = None
    extra: dict = field(default_factory=dict)

    @property
    def length(self):
        return int(self.states.shape[0])


@dataclass
class EpisodeInfo:
    """What a reader knows of an episode before reading its frames: its key, length, task
    string (None where it has none: task_problem then says why) and the sketch of an annotation
    already in the file (None if none)."""

    key: object
    length: int
    task: Optional[str]
    task_problem: Optional[str]
    sketch: Optional[list]


@dataclass
class EpisodeLabels:
    """What a writer stores for one episode: its sketch and the per-frame labels, with the
    annotator's posteriors when there are some (an export of true labels has none).

    Field      | Shape        | Meaning
    sketch     |              | sub-task names, in order (L_n of them)
    positions  | (T,) int64   | sketch position of every frame
    posterior  | (T, L_n)     | P(frame at position l), float32; None for true labels
    stop       | (T,)         | P(a sub-task ends before this frame), float32; None for true labels
    confidence |              | spec/interop.md eq. (3); None for true labels
    """

    sketch: list
    positions: np.ndarray
    posterior: Optional[np.ndarray] = None
    stop: Optional[np.ndarray] = None
    confidence: Optional[float] = None


# ------------------------------------------------------------------------------------------
# The sketches file: task string -> sub-task names
# ------------------------------------------------------------------------------------------

MAX_SKETCHES_BYTES = 16 * 2**20
"""Largest sketches file read (16 MiB: about a hundred thousand tasks)."""


def read_sketches(path):
    """{task string: [sub-task names]} from a YAML mapping; InteropError naming the file and the
    entry otherwise. Read with yaml.safe_load after two guards: size and no aliases."""
    loaded = safe_yaml(path, MAX_SKETCHES_BYTES, InteropError, "a sketches file")
    if not isinstance(loaded, dict) or not loaded:
        raise InteropError(f"{path}: expected a mapping of task string to its list of sub-task names, "
                           f"got {type(loaded).__name__}")
    out = {}
    for task, names in loaded.items():
        if not isinstance(task, str) or not task:
            raise InteropError(f"{path}: task {task!r}: expected a non-empty string as the key")
        if (not isinstance(names, list) or not names
                or not all(isinstance(n, (str, int)) and not isinstance(n, bool) and str(n) for n in names)):
            raise InteropError(f"{path}: task {task!r}: expected a non-empty list of sub-task names, "
                               f"got {names!r}")
        out[task] = [str(n) for n in names]
    return out


def write_sketches(path, sketches, header=""):
    """Write {task: [names]} as YAML (atomically), one task per line, after header (comment
    lines)."""
    text = yaml.safe_dump({t: list(s) for t, s in sketches.items()}, sort_keys=True,
                          default_flow_style=None, allow_unicode=True, width=1000)
    files.write_bytes(path, (header + text).encode("utf-8"))


# ------------------------------------------------------------------------------------------
# LeRobot: subtask rows of language_persistent (spec/interop.md eq. (4))
# ------------------------------------------------------------------------------------------

SUBTASK_STYLE = "subtask"
SUBTASK_ROLE = "assistant"


def subtask_rows(sketch, positions, timestamps):
    """The language_persistent rows of one episode: one row per run of equal labels, stamped
    with the timestamp of the run's first frame (taken from the frame's own float32 timestamp,
    so that lerobot's active_at, which compares them exactly, finds the row on every frame of
    the run); spec/interop.md eq. (4)."""
    return [{"role": SUBTASK_ROLE, "content": sketch[pos], "style": SUBTASK_STYLE,
             "timestamp": float(timestamps[start]), "camera": None, "tool_calls": None}
            for start, _, pos in segments(positions)]


SARM_SUFFIXES = ("subtask_names", "subtask_start_times", "subtask_end_times",
                 "subtask_start_frames", "subtask_end_frames")
"""lerobot 0.6's per-episode sub-task columns in meta/episodes (its SARM reward model reads
them), each written with the prefix "sparse_" and, as lerobot's own writer does, unprefixed."""


def sarm_segments(sketch, positions, timestamps):
    """{suffix: list} of one episode's per-episode sub-task columns, spec/interop.md eq. (5):
    for each run [a_i, e_i) of equal labels the sub-task's name, its first and last frame
    (a_i, e_i - 1: lerobot's SARM counts frame f in sub-task i when start_i <= f <= end_i, so
    the end is inclusive and runs never share a frame), and the same frames as seconds from
    the episode's first frame, read from the timestamp column."""
    runs = segments(positions)
    ts = np.asarray(timestamps, dtype=np.float64)
    return {"subtask_names": [sketch[pos] for _, _, pos in runs],
            "subtask_start_times": [float(ts[a] - ts[0]) for a, _, _ in runs],
            "subtask_end_times": [float(ts[b - 1] - ts[0]) for _, b, _ in runs],
            "subtask_start_frames": [int(a) for a, _, _ in runs],
            "subtask_end_frames": [int(b - 1) for _, b, _ in runs]}


def labels_from_rows(rows, timestamps, what):
    """(sketch names, (T,) positions) of an episode from its language_persistent rows: the
    style "subtask" rows in time order are the sketch, and each frame is at the row active at
    its timestamp (the latest one at or before it), as lerobot's active_at resolves it.
    None when the episode has no subtask rows; InteropError for rows that cannot be read so."""
    sub = [r for r in rows or [] if r is not None and r.get("style") == SUBTASK_STYLE]
    if not sub:
        return None
    sub.sort(key=lambda r: r["timestamp"])
    stamps = np.array([r["timestamp"] for r in sub], dtype=np.float32)
    if np.any(np.diff(stamps) == 0):
        raise InteropError(f"{what}: two subtask rows of language_persistent share a timestamp")
    names = [r.get("content") for r in sub]
    if not all(isinstance(n, str) and n for n in names):
        raise InteropError(f"{what}: a subtask row of language_persistent has no content (sub-task name)")
    positions = np.searchsorted(stamps, np.asarray(timestamps, dtype=np.float32), side="right") - 1
    if positions[0] < 0:
        raise InteropError(f"{what}: its first frame (t = {timestamps[0]}) comes before its first "
                           f"subtask row (t = {stamps[0]})")
    used = np.unique(positions)
    if used.size != len(names):
        raise InteropError(f"{what}: subtask rows at timestamps no frame has "
                           f"({len(names) - used.size} of {len(names)} rows cover no frame)")
    return names, positions.astype(np.int64)


def runs_to_sketch(ids, names, what):
    """(sketch names, positions) from a per-frame sub-task id column (LeRobot's older
    subtask_index with meta/subtasks.parquet): each run of one id is a sketch step."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return None
    runs = segments(np.where(ids >= 0, ids, 0))
    if (ids < 0).any() or any(pos >= len(names) for _, _, pos in runs):
        bad = int(ids[(ids < 0) | (ids >= len(names))][0])
        raise InteropError(f"{what}: subtask_index {bad} is not in meta/subtasks.parquet "
                           f"({len(names)} sub-tasks)")
    sketch = [names[pos] for _, _, pos in runs]
    return sketch, labels_from_segments([a for a, _, _ in runs], ids.size)


# ------------------------------------------------------------------------------------------
# MimicGen: datagen_info/subtask_term_signals (spec/interop.md eq. (6), (7))
# ------------------------------------------------------------------------------------------

def mimicgen_signals(sketch, positions):
    """{sub-task name: (T,) int64 0/1} termination signals of one episode, spec/interop.md
    eq. (6): the signal of a sketch step's sub-task rises on the step's last frame and stays 1
    until the frame before the frame before the same sub-task's next step begins (so that a
    sub-task named twice rises twice, and the fall is never taken for the second rise)."""
    T = len(positions)
    out = {name: np.zeros(T, dtype=np.int64) for name in dict.fromkeys(sketch)}
    runs = segments(positions)
    for i, (_, stop, pos) in enumerate(runs):
        name = sketch[pos]
        later = [a for a, _, p in runs[i + 1:] if sketch[p] == name]
        end = later[0] - 1 if later else T
        out[name][stop - 1:end] = 1
    return out


def mimicgen_segments(signals, sketch, length):
    """MimicGen's parse of a source demonstration, spec/interop.md eq. (7): for each sketch step
    but the last, the first frame f >= the previous step's end at which its sub-task's signal
    changes (any nonzero difference s[f] - s[f-1]) ends the step at f + 1; the last step ends
    with the demonstration. Returns the list of [start, end) per step, or None where a signal
    has no such change (MimicGen refuses that demonstration)."""
    bounds, prev = [], 0
    for l, name in enumerate(sketch):
        if l == len(sketch) - 1:
            end = length
        else:
            s = np.asarray(signals[name])
            changes = np.nonzero(np.diff(s))[0] + 1
            after = changes[changes >= prev]
            if after.size == 0:
                return None
            end = int(after[0]) + 1
        bounds.append((prev, end))
        prev = end
    return bounds


def mimicgen_representable(sketch, positions):
    """Whether MimicGen's parse of mimicgen_signals(sketch, positions) gives back the runs of
    positions: false for a first step of one frame (a signal cannot rise at frame 0) and for a
    sub-task named twice in a row (its signal cannot fall in between)."""
    runs = segments(positions)
    parsed = mimicgen_segments(mimicgen_signals(sketch, positions), [sketch[p] for _, _, p in runs],
                               len(positions))
    return parsed == [(a, b) for a, b, _ in runs]
