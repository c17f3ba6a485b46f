"""LeRobot v3 datasets (lerobot 0.6): read their episodes, write annotated copies, export
taco_ref demonstrations; spec/interop.md §2, §4.

A v3 dataset is a folder: meta/info.json (codebase_version "v3.x", fps, features), frames in
data/chunk-XXX/file-YYY.parquet (an episode's frames are consecutive rows of one file),
meta/tasks.parquet (task strings by task_index), meta/episodes/chunk-XXX/file-YYY.parquet
(one row per episode) and meta/stats.json. lerobot loads exactly the columns info.json declares,
so every column written here is declared there, and every declared one is written.

Sub-task labels are written as lerobot 0.6 reads them, the `language_persistent` column: on
every frame of an episode, the list of its rows, one {role: "assistant", content: <sub-task>,
style: "subtask", timestamp: <first frame of the segment>, camera: null, tool_calls: null} row
per segment; lerobot's active_at(t, style="subtask") resolves the one active at a frame. Beside
it, `subtask_index` (the sub-task's index in meta/subtasks.parquet, as lerobot 0.4.4-0.5 wrote
it), `subtask.position` (the sketch position), and for an annotation `subtask.posterior`
(float32, one entry per sketch position, 0 beyond the episode's sketch) and `subtask.stop`;
meta/episodes gains the per-episode sub-task columns lerobot's SARM reads (names, first and
last frames, times: `sparse_subtask_*` and `subtask_*`), an annotation's `subtask/confidence`,
and meta/subtask_annotation.json the summary.
"""
import json
import os
import shutil
import stat
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from taco_ref.plumbing import files
from taco_app.interop.labels import (SARM_SUFFIXES, Episode, EpisodeInfo, InteropError, SUBTASK_STYLE,
                                     labels_from_rows, runs_to_sketch, sarm_segments, subtask_rows)

CODEBASE_VERSION = "v3.0"
DEFAULT_STATE_KEYS = ("observation.state",)
DEFAULT_ACTION_KEY = "action"
LANGUAGE_PERSISTENT = "language_persistent"
SUBTASK_INDEX = "subtask_index"
POSITION = "subtask.position"
POSTERIOR = "subtask.posterior"
STOP = "subtask.stop"
LABEL_COLUMNS = (LANGUAGE_PERSISTENT, SUBTASK_INDEX, POSITION)
"""The columns every labelled dataset gets (an export's true labels, an annotation)."""
ANNOTATION_COLUMNS = LABEL_COLUMNS + (POSTERIOR, STOP)
"""... and an annotation's posteriors."""
CONFIDENCE = "subtask/confidence"
"""The per-episode confidence's column in meta/episodes."""
SARM_PREFIX = "sparse_"
SARM_COLUMNS = tuple(SARM_PREFIX + s for s in SARM_SUFFIXES) + SARM_SUFFIXES
"""The per-episode sub-task columns of meta/episodes (labels.sarm_segments), as lerobot 0.6's
annotator writes them: "sparse_"-prefixed and the unprefixed names its SARM falls back to."""
SARM_TYPES = {"subtask_names": pa.list_(pa.string()), "subtask_start_times": pa.list_(pa.float64()),
              "subtask_end_times": pa.list_(pa.float64()), "subtask_start_frames": pa.list_(pa.int64()),
              "subtask_end_frames": pa.list_(pa.int64())}
SUMMARY_FILE = "meta/subtask_annotation.json"
INFO, TASKS, SUBTASKS, STATS = "meta/info.json", "meta/tasks.parquet", "meta/subtasks.parquet", "meta/stats.json"
EPISODES_DIR = "meta/episodes"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
FRAME_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
CHUNKS_SIZE = 1000
"""Files per chunk folder (lerobot's default)."""
DATA_FILE_MB = 100
"""Size at which an export starts a new data file (lerobot's default data_files_size_in_mb)."""
BATCH_ROWS = 1024
"""Rows read at a time from a data file (the reader never holds a whole file)."""
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)

ROW_TYPE = pa.struct([
    pa.field("role", pa.string(), nullable=False), pa.field("content", pa.string()),
    pa.field("style", pa.string()), pa.field("timestamp", pa.float32(), nullable=False),
    pa.field("camera", pa.string()), pa.field("tool_calls", pa.list_(pa.string()))])
"""A language_persistent row as lerobot 0.6 declares it (tool_calls as JSON text)."""
LANGUAGE_FEATURE = {"dtype": "language", "shape": [1], "names": None}
MAX_WIDTH = 1 << 16
"""Most numbers a frame's state or action vector may declare (info.json features shape [d]):
arrays are allocated from the declaration before the data are read, and [1000000000] asked for
7.45 GiB."""


def is_dataset(path):
    """Whether path is a folder with meta/info.json (recognised by content, not by name)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, INFO))


# ------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------

class _Ref:
    """Where one episode's frames are: data file, first row, frame count; its task and the
    sketch of an annotation already present (None if none)."""

    __slots__ = ("file", "row0", "length", "episode", "task_index", "tasks", "sketch", "last_ts")

    def __init__(self, file, row0, episode, task_index):
        self.file, self.row0, self.length, self.episode = file, row0, 0, episode
        self.task_index, self.tasks, self.sketch, self.last_ts = task_index, {task_index}, None, None


def _matrix(column, name, what):
    """(n, d) float64 (or (n,) int64 for an integer scalar column) of a numeric column: a
    scalar, a fixed-size list or a list of equal lengths; InteropError otherwise."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if arr.null_count:
        raise InteropError(f"{what}: {name} has missing values")
    t = arr.type
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        values = arr.flatten()
        if values.null_count:
            raise InteropError(f"{what}: {name} has missing values")
        if pa.types.is_fixed_size_list(t):
            width = t.list_size
        else:
            lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
            if lengths.size and (lengths != lengths[0]).any():
                row = int(np.nonzero(lengths != lengths[0])[0][0])
                raise InteropError(f"{what}: {name} is ragged (frame {row} has {lengths[row]} values, "
                                   f"frame 0 has {lengths[0]})")
            width = int(lengths[0]) if lengths.size else 0
        t = values.type
        if not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)):
            raise InteropError(f"{what}: {name} holds {t}, expected numbers")
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64).reshape(len(arr), width)
    if pa.types.is_integer(t):
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_floating(t) or pa.types.is_boolean(t):
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64).reshape(-1, 1)
    raise InteropError(f"{what}: {name} holds {t}, expected numbers")


def _read_table(path, what):
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise InteropError(f"{path}: not a readable parquet file ({what}): {err}") from None


def _indexed_names(path, index_column, name_column, what):
    """[name by index] of a table like meta/tasks.parquet: names stored as the pandas index
    (a column of that name) next to an integer index column."""
    table = _read_table(path, what)
    if index_column not in table.column_names or name_column not in table.column_names:
        raise InteropError(f"{path}: expected columns {index_column!r} and {name_column!r}, got "
                           f"{table.column_names}")
    idx = np.asarray(table.column(index_column).to_numpy(zero_copy_only=False))
    names = table.column(name_column).to_pylist()
    if idx.size and (np.sort(idx) != np.arange(idx.size)).any():
        raise InteropError(f"{path}: {index_column} must number the rows 0..{idx.size - 1}")
    out = [None] * idx.size
    for i, n in zip(idx, names):
        out[int(i)] = n
    return out


class Dataset:
    """An opened LeRobot v3 dataset: info.json checked, the keys found, every episode located
    (scan), existing sub-task annotations read. InteropError on anything a reader cannot use."""

    format = "lerobot"

    def __init__(self, root, state_keys=None, action_key=None, need_timestamps=True):
        self.root = os.fspath(root)
        info_path = os.path.join(self.root, INFO)
        self.info = files.read_json(info_path, InteropError)
        version = str(self.info.get("codebase_version", ""))
        if not version.startswith("v3."):
            raise InteropError(f"{info_path}: codebase_version {version!r}; this reader reads LeRobot v3 "
                               "datasets (convert older ones with lerobot's convert_dataset_v21_to_v30)")
        fps = self.info.get("fps")
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
            raise InteropError(f"{info_path}: fps must be a positive number, got {fps!r}")
        self.fps = fps
        features = self.info.get("features")
        if not isinstance(features, dict) or not all(isinstance(v, dict) for v in features.values()):
            raise InteropError(f"{info_path}: features must map each column to its description")
        self.features = features
        self.state_keys = tuple(state_keys) if state_keys else DEFAULT_STATE_KEYS
        self.action_key = action_key or DEFAULT_ACTION_KEY
        for key in FRAME_COLUMNS[:3] + ("episode_index",):
            if key not in features:
                raise InteropError(f"{info_path}: no {key!r} feature; every LeRobot v3 dataset has one")
        self.state_dims = [self._numeric_width(k, "--state-key") for k in self.state_keys]
        self.discrete = self._action_kind()
        self.action_dim = None if self.discrete else self._numeric_width(self.action_key, "--action-key")
        self.tasks = (_indexed_names(os.path.join(self.root, TASKS), "task_index", "task", "tasks")
                      if os.path.exists(os.path.join(self.root, TASKS)) else [])
        sub_path = os.path.join(self.root, SUBTASKS)
        self.subtask_names = (_indexed_names(sub_path, "subtask_index", "subtask", "sub-tasks")
                              if SUBTASK_INDEX in features and os.path.exists(sub_path) else None)
        self.data_files = sorted(_glob_parquet(os.path.join(self.root, "data")))
        if not self.data_files:
            raise InteropError(f"{self.root}: no data/chunk-*/file-*.parquet files")
        self.refs = self._scan()

    # --- keys ---------------------------------------------------------------------------
    def _numeric_width(self, key, option):
        ft = self.features.get(key)
        if ft is None:
            known = sorted(k for k, f in self.features.items()
                           if f.get("dtype") not in ("video", "image", "string", "language"))
            raise InteropError(f"{option} {key}: no such feature in {os.path.join(self.root, INFO)} "
                               f"(numeric features: {known})")
        dtype, shape = ft.get("dtype"), ft.get("shape")
        if dtype in ("video", "image", "string", "language"):
            raise InteropError(f"{option} {key}: a {dtype} feature; taco_ref learns from numeric vectors")
        if not isinstance(shape, list) or len(shape) != 1 or not isinstance(shape[0], int) or shape[0] < 1:
            raise InteropError(f"{option} {key}: shape {shape}, expected a vector [d]")
        if shape[0] > MAX_WIDTH:       # declared, not yet read: arrays are sized from it
            raise InteropError(f"{option} {key}: shape {shape} declares {shape[0]} numbers a frame; at most "
                               f"{MAX_WIDTH} (a state or action vector, not an image)")
        return shape[0]

    def _action_kind(self):
        ft = self.features.get(self.action_key)
        if ft is None:
            self._numeric_width(self.action_key, "--action-key")
        if str(ft.get("dtype", "")).startswith(("int", "uint")):
            if ft.get("shape") != [1]:
                raise InteropError(f"--action-key {self.action_key}: integer actions of shape "
                                   f"{ft.get('shape')}; discrete actions are one id per frame, shape [1]")
            return True
        return False

    @property
    def state_dim(self):
        return sum(self.state_dims)

    # --- scan ---------------------------------------------------------------------------
    def _scan(self):
        """Locate every episode (file, first row, length) and check the frame columns: an
        episode's rows consecutive in one file, frame_index 0, 1, ..., timestamps increasing,
        lengths as meta/episodes and info.json say. Reads the existing subtask annotation's
        sketch from each episode's first frame."""
        refs, seen = [], set()
        for path in self.data_files:
            what = os.path.relpath(path, self.root)
            try:
                pf = pq.ParquetFile(path)
            except (OSError, pa.ArrowException) as err:
                raise InteropError(f"{path}: not a readable parquet file: {err}") from None
            names = pf.schema_arrow.names
            needed = list(FRAME_COLUMNS[:3]) + list(self.state_keys) + [self.action_key]
            missing = [k for k in needed if k not in names]
            if missing:
                raise InteropError(f"{what}: no column {missing[0]!r} (it has {names})")
            columns = ["episode_index", "frame_index", "timestamp"]
            columns += ["task_index"] if "task_index" in names else []
            lang = LANGUAGE_PERSISTENT in names and LANGUAGE_PERSISTENT in self.features
            old = SUBTASK_INDEX in names and self.subtask_names is not None and not lang
            columns += [LANGUAGE_PERSISTENT] if lang else []
            columns += [SUBTASK_INDEX] if old else []
            row, current, old_ids = 0, None, []
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                ep = np.asarray(batch.column("episode_index").to_numpy(zero_copy_only=False))
                fi = np.asarray(batch.column("frame_index").to_numpy(zero_copy_only=False))
                ts = np.asarray(batch.column("timestamp").to_numpy(zero_copy_only=False), dtype=np.float64)
                ti = (np.asarray(batch.column("task_index").to_numpy(zero_copy_only=False))
                      if "task_index" in columns else np.zeros_like(ep))
                ids = (np.asarray(batch.column(SUBTASK_INDEX).to_numpy(zero_copy_only=False)) if old else None)
                if not np.isfinite(ts).all():
                    bad = int(np.nonzero(~np.isfinite(ts))[0][0])
                    raise InteropError(f"{what}: episode {ep[bad]}, frame {fi[bad]}: timestamp {ts[bad]}")
                cuts = np.concatenate([[0], np.nonzero(np.diff(ep))[0] + 1, [len(ep)]])
                for a, b in zip(cuts[:-1], cuts[1:]):            # runs of one episode in this batch
                    e = int(ep[a])
                    if current is None or e != current.episode:
                        if current is not None:
                            self._close(current, old_ids, what)
                        if e in seen:
                            raise InteropError(f"{what}: the frames of episode {e} are not consecutive "
                                               "rows of one data file")
                        seen.add(e)
                        current = _Ref(path, row + a, e, int(ti[a]))
                        refs.append(current)
                        old_ids = []
                        if lang:
                            current.sketch = self._sketch_from_rows(batch, a)
                        ts_prev = -np.inf
                    else:
                        ts_prev = current.last_ts
                    want = np.arange(current.length, current.length + b - a)
                    if (fi[a:b] != want).any():
                        k = int(np.nonzero(fi[a:b] != want)[0][0])
                        raise InteropError(f"{what}: episode {e}: frame_index {fi[a + k]} at its frame "
                                           f"{want[k]} (expected 0, 1, 2, ... in order)")
                    steps = np.diff(np.concatenate([[ts_prev], ts[a:b]]))
                    if (steps <= 0).any():
                        k = int(np.nonzero(steps <= 0)[0][0])
                        raise InteropError(f"{what}: episode {e}: timestamps do not increase at frame {want[k]}")
                    current.last_ts = ts[b - 1]
                    current.tasks.update(int(x) for x in np.unique(ti[a:b]))
                    current.length += int(b - a)
                    if old:
                        old_ids.append(ids[a:b])
                row += len(ep)
            if current is not None:
                self._close(current, old_ids, what)
                current = None
        self._check_counts(refs)
        return refs

    def _sketch_from_rows(self, batch, i):
        rows = batch.column(LANGUAGE_PERSISTENT)[i].as_py()
        sub = [r for r in rows or [] if r is not None and r.get("style") == SUBTASK_STYLE]
        if not sub:
            return None
        sub.sort(key=lambda r: r["timestamp"])
        return [r.get("content") for r in sub]

    def _close(self, ref, old_ids, what):
        if old_ids:
            found = runs_to_sketch(np.concatenate(old_ids).astype(np.int64), self.subtask_names,
                                   f"{what}: episode {ref.episode}")
            ref.sketch = found[0] if found else None

    def _check_counts(self, refs):
        info_path = os.path.join(self.root, INFO)
        total = sum(r.length for r in refs)
        if self.info.get("total_frames") not in (None, total):
            raise InteropError(f"{info_path}: total_frames {self.info.get('total_frames')}, but the data "
                               f"files hold {total} frames")
        if self.info.get("total_episodes") not in (None, len(refs)):
            raise InteropError(f"{info_path}: total_episodes {self.info.get('total_episodes')}, but the "
                               f"data files hold {len(refs)} episodes")
        lengths = {}
        for path in _glob_parquet(os.path.join(self.root, EPISODES_DIR)):
            table = _read_table(path, "episode metadata")
            if "episode_index" in table.column_names and "length" in table.column_names:
                lengths.update(zip(table.column("episode_index").to_pylist(), table.column("length").to_pylist()))
        for r in refs:
            if r.episode in lengths and lengths[r.episode] != r.length:
                raise InteropError(f"{EPISODES_DIR}: episode {r.episode} has length {lengths[r.episode]}, "
                                   f"but the data has {r.length} frames")
        for r in refs:
            if r.task_index >= len(self.tasks) and self.tasks:
                raise InteropError(f"{TASKS}: no task_index {r.task_index} (episode {r.episode})")

    # --- episodes -----------------------------------------------------------------------
    def task_of(self, ref):
        """The task string of an episode, or None if it has none or several (describe says which)."""
        if len(ref.tasks) != 1 or ref.task_index >= len(self.tasks):
            return None
        return self.tasks[ref.task_index]

    def describe(self):
        """An EpisodeInfo per episode, in the order episodes() yields them."""
        out = []
        for ref in self.refs:
            problem = None
            if len(ref.tasks) > 1:
                problem = (f"episode {ref.episode} has {len(ref.tasks)} tasks (task_index "
                           f"{sorted(ref.tasks)}); a sketch needs one task per episode")
            elif not self.tasks:
                problem = f"episode {ref.episode}: the dataset has no {TASKS}"
            out.append(EpisodeInfo(ref.episode, ref.length, self.task_of(ref), problem, ref.sketch))
        return out

    def _chunks(self, path, refs, columns, chunk):
        """(table, refs) of at most chunk consecutive episodes of one data file at a time,
        reading BATCH_ROWS rows at a time: never more than a chunk and a batch in memory."""
        pf = pq.ParquetFile(path)
        buffer, buffered, consumed, i = [], 0, refs[0].row0 if refs else 0, 0
        if refs and refs[0].row0 != 0:
            raise InteropError(f"{path}: rows before its first episode")
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            buffer.append(batch)
            buffered += batch.num_rows
            while i < len(refs):
                k = min(chunk, len(refs) - i)
                need = refs[i + k - 1].row0 + refs[i + k - 1].length - consumed
                if buffered < need:
                    break
                table = pa.Table.from_batches(buffer)
                yield table.slice(0, need), refs[i:i + k]
                buffer = table.slice(need).to_batches()
                buffered, consumed, i = buffered - need, consumed + need, i + k

    def _episode(self, table, ref, offset):
        what = f"{self.root}: episode {ref.episode}"
        part = table.slice(offset, ref.length)
        states = np.concatenate([_matrix(part.column(k), k, what).reshape(ref.length, -1)
                                 for k in self.state_keys], axis=1)                   # (T, D)
        actions = _matrix(part.column(self.action_key), self.action_key, what)
        if self.discrete:
            actions = actions.reshape(ref.length)                                      # (T,)
        _finite(states, self.state_keys, what)
        if not self.discrete:
            _finite(actions, (self.action_key,), what)
        timestamps = part.column("timestamp").to_numpy().astype(np.float32)
        sketch = labels = None
        if LANGUAGE_PERSISTENT in part.column_names and LANGUAGE_PERSISTENT in self.features:
            found = labels_from_rows(part.column(LANGUAGE_PERSISTENT)[0].as_py(), timestamps, what)
            if found:
                sketch, labels = found
        elif ref.sketch is not None and SUBTASK_INDEX in part.column_names:
            ids = part.column(SUBTASK_INDEX).to_numpy(zero_copy_only=False)
            sketch, labels = runs_to_sketch(ids, self.subtask_names, what)
        return Episode(ref.episode, states, actions, states[-1].copy(), None, sketch, labels, timestamps)

    def episodes(self, chunk=64):
        """Yield lists of at most chunk Episodes, in file order, holding at most a chunk of them."""
        columns = list(dict.fromkeys(["timestamp", *self.state_keys, self.action_key]))
        for path in self.data_files:
            names = pq.ParquetFile(path).schema_arrow.names
            extra = [c for c in (LANGUAGE_PERSISTENT, SUBTASK_INDEX) if c in names]
            refs = [r for r in self.refs if r.file == path]
            for table, part in self._chunks(path, refs, columns + extra, chunk):
                yield self._episodes_of(table, part)

    def image_key(self):
        """The first feature of dtype "image" (frames stored in the data files as PNG or JPEG
        bytes), or None; "video" features would need a video decoder and are not shown."""
        return next((k for k, f in sorted(self.features.items()) if f.get("dtype") == "image"), None)

    def has_images(self):
        return self.image_key() is not None

    def frame_images(self, key, frames):
        """[(frame, data URI)] of the image feature at each frame of episode key."""
        from taco_app.interop.review import data_uri
        ref = next((r for r in self.refs if r.episode == key), None)
        name = self.image_key()
        if ref is None or name is None:
            return []
        cached = getattr(self, "_image_table", None)         # the page asks episode by episode,
        if cached is None or cached[0] != ref.file:         # in file order: one file's column read once
            self._image_table = cached = (ref.file, pq.ParquetFile(ref.file).read(columns=[name]))
        table = cached[1]
        out = []
        for t in frames:
            if 0 <= t < ref.length:
                cell = table.column(name)[ref.row0 + t].as_py()
                blob = cell.get("bytes") if isinstance(cell, dict) else cell
                if isinstance(blob, (bytes, bytearray)) and blob:
                    out.append((t, data_uri(bytes(blob))))
        return out

    def _episodes_of(self, table, part):
        """The Episodes of the refs in part, whose frames are table's rows in order."""
        out, offset = [], 0
        for ref in part:
            ep = self._episode(table, ref, offset)
            ep.task = self.task_of(ref)
            out.append(ep)
            offset += ref.length
        return out

    # --- writing an annotated copy ------------------------------------------------------
    def write_labelled(self, out, label_fn, vocab, posterior_width=None, summary_fn=None, chunk=64,
                       in_place=False):
        """Write a copy of the dataset to out (or replace it, in_place) with the label columns:
        label_fn(list of Episode) -> list of EpisodeLabels is called on each chunk as it is
        read; vocab: the sub-task names subtask_index counts (names not in it are appended);
        posterior_width: the widest sketch, for the posterior column (None: true labels, no
        posterior columns); summary_fn() -> dict for meta/subtask_annotation.json, called at the
        end. Everything is written into a temporary folder beside out and renamed into place at
        the end, so an error leaves no partial dataset. Returns the list of episodes whose
        labels MimicGen could not parse back (none here: LeRobot has no MimicGen signals)."""
        target = self.root if in_place else os.fspath(out)
        if not in_place and os.path.exists(target):
            raise InteropError(f"--out: {target} exists; choose a new folder (the input is never changed "
                               "unless --in-place)")
        parent = os.path.dirname(os.path.abspath(target))
        os.makedirs(parent, exist_ok=True)
        files.remove_dead_temporaries(parent, os.path.basename(target))   # a killed run's leftovers
        tmp = tempfile.mkdtemp(prefix=files.owned_prefix(), suffix=os.path.basename(target), dir=parent)
        try:
            self._write_into(tmp, label_fn, list(vocab), posterior_width, summary_fn, chunk, link=in_place)
            _commit(tmp, target, in_place)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return []

    def _write_into(self, tmp, label_fn, vocab, posterior_width, summary_fn, chunk, link):
        rewritten = {os.path.abspath(p) for p in self.data_files}
        rewritten |= {os.path.abspath(os.path.join(self.root, p)) for p in (INFO, SUBTASKS, SUMMARY_FILE)}
        rewritten |= {os.path.abspath(p) for p in _glob_parquet(os.path.join(self.root, EPISODES_DIR))}
        _copy_tree(self.root, tmp, skip=rewritten, link=link)
        confidences, sarm = {}, {}
        for path in self.data_files:
            dest = os.path.join(tmp, os.path.relpath(path, self.root))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            pf = pq.ParquetFile(path)
            refs = [r for r in self.refs if r.file == path]
            keep = [n for n in pf.schema_arrow.names if n not in ANNOTATION_COLUMNS]
            schema = _output_schema(pf.schema_arrow, keep, posterior_width)
            writer = pq.ParquetWriter(dest, schema, compression="snappy")
            try:
                for table, part in self._chunks(path, refs, pf.schema_arrow.names, chunk):
                    episodes = self._episodes_of(table, part)
                    offset = 0
                    for ref, ep, lab in zip(part, episodes, label_fn(episodes)):
                        vocab += [n for n in dict.fromkeys(lab.sketch) if n not in vocab]
                        old_rows = (table.column(LANGUAGE_PERSISTENT)[offset].as_py()
                                    if LANGUAGE_PERSISTENT in table.column_names else None)
                        cols = label_columns(lab, ep.timestamps, vocab, posterior_width, old_rows)
                        part_table = table.slice(offset, ref.length).select(keep)
                        for name, arr in cols.items():
                            part_table = part_table.append_column(schema.field(name), arr)
                        writer.write_table(part_table.select(schema.names))   # one row group per episode
                        if lab.confidence is not None:
                            confidences[ref.episode] = float(lab.confidence)
                        sarm[ref.episode] = sarm_segments(lab.sketch, lab.positions, ep.timestamps)
                        offset += ref.length
            finally:
                writer.close()
        self._write_meta(tmp, vocab, confidences, sarm, posterior_width, summary_fn() if summary_fn else None)

    def _write_meta(self, tmp, vocab, confidences, sarm, posterior_width, summary):
        info = json.loads(json.dumps(self.info))
        features = {k: v for k, v in info["features"].items() if k not in ANNOTATION_COLUMNS}
        features.update(label_features(posterior_width))
        info["features"] = features
        files.write_bytes(os.path.join(tmp, INFO), (json.dumps(info, indent=4) + "\n").encode())
        write_names_table(os.path.join(tmp, SUBTASKS), "subtask_index", "subtask", vocab)
        for path in _glob_parquet(os.path.join(self.root, EPISODES_DIR)):
            table = _read_table(path, "episode metadata")
            table = table.drop_columns([c for c in (CONFIDENCE,) + SARM_COLUMNS if c in table.column_names])
            if "episode_index" in table.column_names:
                index = table.column("episode_index").to_pylist()
                if confidences:
                    values = [confidences.get(e, float("nan")) for e in index]
                    table = table.append_column(pa.field(CONFIDENCE, pa.float64()), pa.array(values, pa.float64()))
                table = _with_sarm_columns(table, [sarm.get(e) for e in index])
            dest = os.path.join(tmp, os.path.relpath(path, self.root))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            pq.write_table(table, dest)
        if summary is not None:
            files.write_bytes(os.path.join(tmp, SUMMARY_FILE),
                              (json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())


def _with_sarm_columns(table, segments):
    """table (meta/episodes rows) with the SARM_COLUMNS appended; segments: per row the
    labels.sarm_segments dict, or None for an episode without labels (null cells)."""
    for prefix in (SARM_PREFIX, ""):
        for suffix in SARM_SUFFIXES:
            values = [None if s is None else s[suffix] for s in segments]
            table = table.append_column(pa.field(prefix + suffix, SARM_TYPES[suffix]),
                                        pa.array(values, SARM_TYPES[suffix]))
    return table


def _finite(values, keys, what):
    """InteropError naming the first frame of values (T, ...) that holds NaN or an infinity."""
    flat = values.reshape(len(values), -1)                                   # (T, d)
    bad = ~np.isfinite(flat)
    if bad.any():
        t = int(np.nonzero(bad.any(axis=1))[0][0])
        raise InteropError(f"{what}, frame {t}: {' + '.join(keys)} holds {flat[t][bad[t]][0]}")


def _glob_parquet(folder):
    """folder/*/*.parquet, sorted (lerobot's own order of data and episode files)."""
    out = []
    if os.path.isdir(folder):
        for sub in sorted(os.listdir(folder)):
            d = os.path.join(folder, sub)
            if os.path.isdir(d):
                out += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".parquet")]
    return out


def _copy_tree(src, dst, skip, link):
    """Copy src's files into dst except those in skip (absolute paths); hard links where link
    is set (an in-place rewrite removes the originals after the swap) and the file system has them."""
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if not d.startswith(files.TEMP_PREFIX)]
        rel = os.path.relpath(dirpath, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for name in filenames:
            full = os.path.abspath(os.path.join(dirpath, name))
            if full in skip or name.startswith(files.TEMP_PREFIX):
                continue
            target = os.path.join(dst, rel, name)
            if link:
                try:
                    os.link(full, target)
                    continue
                except OSError:
                    pass
            shutil.copy2(full, target)


def _commit(tmp, target, in_place):
    """Move the finished folder tmp to target; in place, exchange the two in one step
    (files.exchange, Linux; elsewhere two renames) and only then delete the original, so that a
    SIGKILL at any moment leaves the dataset whole under its name, old or new. Permissions: a new dataset gets those of any
    folder and file the user creates (the umask; mkdtemp made its top folder 0700); in place,
    every folder and file keeps the original's mode (new ones the umask's)."""
    for dirpath, _, filenames in os.walk(tmp):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
    os.chmod(tmp, files.ordinary_mode(directory=True))
    if in_place:
        for dirpath, dirnames, filenames in os.walk(tmp):
            for name in [""] + dirnames + filenames:
                new = os.path.join(dirpath, name)
                old = os.path.join(target, os.path.relpath(new, tmp))
                if os.path.exists(old) and not os.path.islink(new):
                    os.chmod(new, stat.S_IMODE(os.stat(old).st_mode))
    if not in_place:
        os.rename(tmp, target)
        return
    if files.exchange(tmp, target):          # one step: target is the old or the new dataset
        shutil.rmtree(tmp, ignore_errors=True)   # now the old one; a kill here leaves it to
        return                                   # the next run's remove_dead_temporaries
    old = tempfile.mkdtemp(prefix=files.owned_prefix() + "old-",
                           suffix=os.path.basename(target), dir=os.path.dirname(os.path.abspath(target)))
    os.rmdir(old)
    os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------------------------------
# The label columns
# ------------------------------------------------------------------------------------------

def label_features(posterior_width=None):
    """info.json entries of the label columns (with the posteriors' when posterior_width)."""
    out = {LANGUAGE_PERSISTENT: dict(LANGUAGE_FEATURE),
           SUBTASK_INDEX: {"dtype": "int64", "shape": [1], "names": None},
           POSITION: {"dtype": "int64", "shape": [1], "names": None}}
    if posterior_width:
        out[POSTERIOR] = {"dtype": "float32", "shape": [int(posterior_width)], "names": None}
        out[STOP] = {"dtype": "float32", "shape": [1], "names": None}
    return out


def _output_schema(schema, keep, posterior_width):
    """The input schema's kept fields and the label columns (the posteriors' with posterior_width)."""
    annotated = bool(posterior_width)
    fields = [schema.field(n) for n in keep]
    fields += [pa.field(LANGUAGE_PERSISTENT, pa.list_(ROW_TYPE)), pa.field(SUBTASK_INDEX, pa.int64()),
               pa.field(POSITION, pa.int64())]
    if annotated:
        fields += [pa.field(POSTERIOR, pa.list_(pa.float32(), int(posterior_width))),
                   pa.field(STOP, pa.float32())]
    return pa.schema(fields, metadata=_hf_metadata(schema.metadata, annotated, posterior_width))


def _hf_metadata(metadata, annotated, posterior_width):
    """The schema metadata with the `huggingface` features (if the file has them) extended by
    the label columns, so that a plain `datasets` reader types them too."""
    metadata = dict(metadata or {})
    raw = metadata.get(b"huggingface")
    if raw is None:
        return metadata or None
    try:
        hf = json.loads(raw)
        feats = hf["info"]["features"]
    except (ValueError, KeyError, TypeError, RecursionError):
        metadata.pop(b"huggingface")
        return metadata or None
    for k in ANNOTATION_COLUMNS:
        feats.pop(k, None)
    value = (lambda dtype: {"dtype": dtype, "_type": "Value"})
    feats[LANGUAGE_PERSISTENT] = {"feature": {
        "role": value("string"), "content": value("string"), "style": value("string"),
        "timestamp": value("float32"), "camera": value("string"),
        "tool_calls": {"feature": value("string"), "_type": "List"}}, "_type": "List"}
    feats[SUBTASK_INDEX] = value("int64")
    feats[POSITION] = value("int64")
    if annotated:
        feats[POSTERIOR] = {"feature": value("float32"), "length": int(posterior_width), "_type": "List"}
        feats[STOP] = value("float32")
    hf.pop("fingerprint", None)
    metadata[b"huggingface"] = json.dumps(hf).encode()
    return metadata


def _rows_array(rows, n):
    """A list<ROW_TYPE> array of n frames, each holding the same rows."""
    struct = pa.array(rows, type=ROW_TYPE)                                   # (R,)
    R = len(rows)
    take = np.tile(np.arange(R, dtype=np.int64), n)                          # (n * R,)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * R)
    return pa.ListArray.from_arrays(offsets, struct.take(pa.array(take)), type=pa.list_(ROW_TYPE))


def _kept_rows(old_rows):
    """The rows of an existing language_persistent cell that are not sub-task rows (plans,
    memory, task rephrasings), in ROW_TYPE (tool calls as JSON text)."""
    kept = []
    for r in old_rows or []:
        if r is None or r.get("style") == SUBTASK_STYLE:
            continue
        calls = r.get("tool_calls")
        kept.append({"role": r.get("role") or "assistant", "content": r.get("content"), "style": r.get("style"),
                     "timestamp": float(r.get("timestamp") or 0.0), "camera": r.get("camera"),
                     "tool_calls": None if calls is None else [c if isinstance(c, str) else json.dumps(c)
                                                               for c in calls]})
    return kept


def label_columns(lab, timestamps, vocab, posterior_width=None, old_rows=None):
    """{column: array} of one episode's label columns (spec/interop.md eq. (4)); posteriors
    padded with 0 to posterior_width when given."""
    T = len(lab.positions)
    rows = _kept_rows(old_rows) + subtask_rows(lab.sketch, lab.positions, timestamps)
    rows.sort(key=lambda r: (r["timestamp"], r["style"] or "", r["role"] or ""))
    ids = np.array([vocab.index(lab.sketch[p]) for p in lab.positions], dtype=np.int64)
    cols = {LANGUAGE_PERSISTENT: _rows_array(rows, T), SUBTASK_INDEX: pa.array(ids),
            POSITION: pa.array(np.asarray(lab.positions, dtype=np.int64))}
    if posterior_width:
        post = np.zeros((T, posterior_width), dtype=np.float32)              # (T, L_max)
        post[:, :lab.posterior.shape[1]] = lab.posterior
        cols[POSTERIOR] = pa.FixedSizeListArray.from_arrays(pa.array(post.reshape(-1)), posterior_width)
        cols[STOP] = pa.array(np.asarray(lab.stop, dtype=np.float32))
    return cols


def write_names_table(path, index_column, name_column, names):
    """A table like meta/tasks.parquet: name_column stored as the pandas index (lerobot reads
    these tables with pandas), index_column numbering the rows."""
    table = pa.table({index_column: pa.array(np.arange(len(names), dtype=np.int64)),
                      name_column: pa.array(list(names), pa.string())})
    pandas_meta = {
        "index_columns": [name_column],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": index_column, "field_name": index_column, "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": name_column, "field_name": name_column, "pandas_type": "unicode",
                     "numpy_type": "object", "metadata": None}],
        "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}}
    table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    files.atomic_write(path, lambda f: pq.write_table(table, f))


# ------------------------------------------------------------------------------------------
# Export of taco_ref demonstrations
# ------------------------------------------------------------------------------------------

def feature_stats(values):
    """lerobot's statistics of a (n, d) array: min, max, mean, std, count and the quantiles
    q01, q10, q50, q90, q99 per column, as lists."""
    v = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    out = {"min": v.min(axis=0), "max": v.max(axis=0), "mean": v.mean(axis=0), "std": v.std(axis=0),
           "count": np.array([len(v)])}
    for q in QUANTILES:
        out[f"q{int(round(q * 100)):02d}"] = np.quantile(v, q, axis=0)
    return {k: a.tolist() for k, a in out.items()}


def export(demos, out, fps, tasks, data_file_mb=DATA_FILE_MB):
    """Write demos (a validated taco_ref.data.Demos) as a new LeRobot v3 dataset in out, with
    the true labels in the label columns; tasks: the task string of each demonstration.
    Written into a temporary folder beside out and renamed at the end."""
    target = os.fspath(out)
    if os.path.exists(target):
        raise InteropError(f"--out: {target} exists; choose a new folder")
    if isinstance(fps, bool) or not isinstance(fps, int) or fps < 1:
        raise InteropError(f"--fps: LeRobot needs a whole number of frames per second, got {fps!r}")
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    files.remove_dead_temporaries(parent, os.path.basename(target))
    tmp = tempfile.mkdtemp(prefix=files.owned_prefix(), suffix=os.path.basename(target), dir=parent)
    try:
        _export_into(tmp, demos, fps, tasks, data_file_mb)
        _commit(tmp, target, False)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _export_into(tmp, demos, fps, tasks, data_file_mb):
    from taco_app.interop.labels import EpisodeLabels
    N, T, D = demos.states.shape
    vocab = list(demos.vocab)
    task_names = list(dict.fromkeys(tasks))
    state_ft = {"dtype": "float32", "shape": [D], "names": None}
    action_ft = ({"dtype": "int64", "shape": [1], "names": None} if demos.discrete
                 else {"dtype": "float32", "shape": [demos.actions.shape[2]], "names": None})
    features = {"observation.state": state_ft, "action": action_ft}
    features.update({k: {"dtype": "float32" if k == "timestamp" else "int64", "shape": [1], "names": None}
                     for k in FRAME_COLUMNS})
    features.update(label_features(None))
    schema = _output_schema(pa.schema(
        [pa.field("observation.state", pa.list_(pa.float32(), D)),
         pa.field("action", pa.int64() if demos.discrete else pa.list_(pa.float32(), demos.actions.shape[2]))]
        + [pa.field(k, pa.float32() if k == "timestamp" else pa.int64()) for k in FRAME_COLUMNS]),
        ["observation.state", "action", *FRAME_COLUMNS], None)
    numeric = ["observation.state", "action", *FRAME_COLUMNS, SUBTASK_INDEX, POSITION]
    per_episode, sarm, all_values = [], [], {k: [] for k in numeric}
    chunk_i = file_i = 0
    writer, written_bytes, index = None, 0, 0
    try:
        for n in range(N):
            Tn, Ln = int(demos.traj_len[n]), int(demos.sketch_len[n])
            sketch = [vocab[k] for k in demos.sketch[n, :Ln]]
            positions = demos.labels[n, :Tn].astype(np.int64)
            timestamps = (np.arange(Tn) / fps).astype(np.float32)
            states = demos.states[n, :Tn].astype(np.float32)
            actions = (demos.actions[n, :Tn].astype(np.int64) if demos.discrete
                       else demos.actions[n, :Tn].astype(np.float32))
            frame = {"observation.state": pa.FixedSizeListArray.from_arrays(pa.array(states.reshape(-1)), D),
                     "action": (pa.array(actions) if demos.discrete else
                                pa.FixedSizeListArray.from_arrays(pa.array(actions.reshape(-1)), actions.shape[1])),
                     "timestamp": pa.array(timestamps), "frame_index": pa.array(np.arange(Tn, dtype=np.int64)),
                     "episode_index": pa.array(np.full(Tn, n, dtype=np.int64)),
                     "index": pa.array(np.arange(index, index + Tn, dtype=np.int64)),
                     "task_index": pa.array(np.full(Tn, task_names.index(tasks[n]), dtype=np.int64))}
            frame.update(label_columns(EpisodeLabels(sketch, positions), timestamps, vocab))
            table = pa.table([frame[name] for name in schema.names], schema=schema)
            size = table.nbytes
            if writer is not None and written_bytes + size > data_file_mb * 2**20:
                writer.close()
                writer, written_bytes = None, 0
                file_i += 1
                if file_i == CHUNKS_SIZE:
                    chunk_i, file_i = chunk_i + 1, 0
            if writer is None:
                path = os.path.join(tmp, DATA_PATH.format(chunk_index=chunk_i, file_index=file_i))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                writer = pq.ParquetWriter(path, schema, compression="snappy")
            writer.write_table(table)
            written_bytes += size
            values = {"observation.state": states, "action": actions.reshape(Tn, -1),
                      "timestamp": timestamps[:, None], "frame_index": np.arange(Tn)[:, None],
                      "episode_index": np.full((Tn, 1), n), "index": np.arange(index, index + Tn)[:, None],
                      "task_index": np.full((Tn, 1), task_names.index(tasks[n])),
                      SUBTASK_INDEX: np.array([vocab.index(sketch[p]) for p in positions])[:, None],
                      POSITION: positions[:, None]}
            row = {"episode_index": n, "tasks": [tasks[n]], "length": Tn, "data/chunk_index": chunk_i,
                   "data/file_index": file_i, "dataset_from_index": index, "dataset_to_index": index + Tn}
            for k in numeric:
                for stat, v in feature_stats(values[k]).items():
                    row[f"stats/{k}/{stat}"] = v
                all_values[k].append(values[k])
            row["meta/episodes/chunk_index"] = 0
            row["meta/episodes/file_index"] = 0
            per_episode.append(row)
            sarm.append(sarm_segments(sketch, positions, timestamps))
            index += Tn
    finally:
        if writer is not None:
            writer.close()
    episodes = _with_sarm_columns(pa.Table.from_pylist(per_episode), sarm)
    path = os.path.join(tmp, EPISODES_PATH.format(chunk_index=0, file_index=0))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(episodes, path)
    write_names_table(os.path.join(tmp, TASKS), "task_index", "task", task_names)
    write_names_table(os.path.join(tmp, SUBTASKS), "subtask_index", "subtask", vocab)
    stats = {k: feature_stats(np.concatenate(all_values[k])) for k in numeric}
    files.write_bytes(os.path.join(tmp, STATS), (json.dumps(stats, indent=4) + "\n").encode())
    info = {"codebase_version": CODEBASE_VERSION, "fps": fps, "features": features,
            "total_episodes": N, "total_frames": int(index), "total_tasks": len(task_names),
            "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": data_file_mb, "video_files_size_in_mb": 200,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "video_path": None,
            "robot_type": None, "splits": {"train": f"0:{N}"}}
    files.write_bytes(os.path.join(tmp, INFO), (json.dumps(info, indent=4) + "\n").encode())
