"""robomimic HDF5 datasets (and MimicGen's source demonstrations): read their demonstrations,
write annotated copies, export taco_ref demonstrations; spec/interop.md §2, §5.

A robomimic file holds data/demo_N groups, each with actions (T, A), obs/<key> (T, ...),
optionally next_obs/<key>, states, rewards, dones and the attribute num_samples; data has the
attributes total and env_args (JSON). robomimic has no sub-task field. The labels are written as:

- data/demo_N/subtask_index (T,) int64: the sketch position of every frame, with the sketch
  itself in the attribute data/demo_N.attrs["sketch"] (a JSON list of sub-task names);
- data/demo_N/datagen_info/subtask_term_signals/<sub-task> (T,) int64, MimicGen's termination
  signals (labels.mimicgen_signals), which MimicGen's source-dataset parser reads;
- for an annotation, data/demo_N/subtask_posterior (T, L_n) float32, subtask_stop (T,) float32,
  the attribute subtask_confidence, and data.attrs["subtask_annotation"], the summary (JSON).

An episode's task string (for the sketches file) is RoboCasa's attrs["ep_meta"] {"lang": ...}
when the demonstration has one, else the env_name of data.attrs["env_args"].
"""
import contextlib
import json
import os
import re
import shutil
import stat
import tempfile

import h5py
import numpy as np

from taco_ref.plumbing import files
from taco_app.interop.labels import (Episode, EpisodeInfo, InteropError, mimicgen_signals)

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
DEFAULT_ACTION_KEY = "actions"
SUBTASK_INDEX = "subtask_index"
SKETCH_ATTR = "sketch"
POSTERIOR = "subtask_posterior"
STOP = "subtask_stop"
CONFIDENCE_ATTR = "subtask_confidence"
SIGNALS = "datagen_info/subtask_term_signals"
SUMMARY_ATTR = "subtask_annotation"
REOPEN_EVERY = 256
"""Demonstrations read per opening of the file in the first pass (Dataset._file)."""


def is_dataset(path):
    """Whether path is a regular HDF5 file (by its signature, not its name; never opens a FIFO,
    a device or a socket, whose read could block forever)."""
    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as f:
            return f.read(8) == HDF5_SIGNATURE
    except OSError:
        return False


def _demo_order(name):
    m = re.fullmatch(r"demo_(\d+)", name)
    return (0, int(m.group(1)), "") if m else (1, 0, name)


MAX_ATTR_CHARS = 2**20
"""Longest JSON attribute read (1 Mi characters: a sketch, env_args, ep_meta)."""
MAX_EXPANSION = 1100
"""A dataset may declare at most this many times the bytes the file stores for it (zlib, the
strongest HDF5 filter h5py writes, compresses at most about 1032:1), so that a file cannot make
a read allocate what it does not hold (a 9 KiB file declaring 2e9 rows asked for 119 GiB)."""
SMALL_BYTES = 2**20
"""Datasets of at most this many declared bytes are read whatever they store (fill values)."""


def _json_attr(attrs, name, what):
    value = attrs.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    value = str(value)
    if len(value) > MAX_ATTR_CHARS:
        raise InteropError(f"{what}: attribute {name!r} holds {len(value)} characters, more than the "
                           f"{MAX_ATTR_CHARS} a JSON attribute may")
    try:
        return json.loads(value)
    except RecursionError:
        raise InteropError(f"{what}: attribute {name!r} is JSON nested too deeply") from None
    except ValueError:
        raise InteropError(f"{what}: attribute {name!r} is not JSON text") from None


def _stored(ds, key, what):
    """ds (an h5py.Dataset) checked to hold the bytes it declares (MAX_EXPANSION); InteropError
    naming the episode and key otherwise."""
    declared = int(ds.size) * ds.dtype.itemsize
    stored = int(ds.id.get_storage_size())
    if declared > SMALL_BYTES and declared > MAX_EXPANSION * stored:
        raise InteropError(f"{what}: {key} declares shape {ds.shape} ({declared / 2**30:.3g} GiB) but the file "
                           f"stores {stored} bytes of it; a corrupt or hand-made file")
    return ds


def _member(group, key, what):
    """group.get(key), with HDF5's failures (a soft-link loop, a dangling external link, a
    damaged object header) as one InteropError naming the episode and key."""
    try:
        return group.get(key)
    except (RuntimeError, KeyError, OSError, ValueError) as err:
        raise InteropError(f"{what}: cannot open {key} ({' '.join(str(err).split())})") from None


class Dataset:
    """An opened robomimic file: every demonstration found, the state and action keys checked
    in each (present, same length, numeric), existing annotations and task strings read."""

    format = "robomimic"

    def __init__(self, path, state_keys=None, action_key=None):
        self.path = os.fspath(path)
        files.regular_file(self.path, float("inf"), InteropError)
        h5 = self._file()
        try:
            h5 = self._open(h5, state_keys, action_key)
        finally:
            h5.close()

    def _file(self, mode="r", path=None):
        """The file opened anew. HDF5 keeps per-file caches that grow with every object read
        (measured: 14 MiB per 1000 demonstrations) until the file is closed, so each pass opens
        it for at most REOPEN_EVERY demonstrations or one chunk."""
        try:
            return h5py.File(path or self.path, mode)
        except OSError as err:
            raise InteropError(f"{path or self.path}: not a readable HDF5 file ({err})") from None

    def close(self):
        """Nothing to release: the file is opened per pass and chunk (_file)."""

    def _open(self, h5, state_keys, action_key):
        data = h5.get("data")
        if not isinstance(data, h5py.Group):
            raise InteropError(f"{self.path}: no group 'data'; is this a robomimic dataset?")
        self.names = sorted((k for k in data if isinstance(_member(data, k, f"{self.path}: data"), h5py.Group)),
                            key=_demo_order)
        if not self.names:
            raise InteropError(f"{self.path}: data holds no demonstrations (data/demo_N groups)")
        self.action_key = action_key or DEFAULT_ACTION_KEY
        first = data[self.names[0]]
        first_what = f"{self.path}: {self.names[0]}"
        if state_keys:
            self.state_keys = tuple(self._resolve(first, k) for k in state_keys)
        else:
            obs = _member(first, "obs", first_what)
            low_dim = sorted(f"obs/{k}" for k in (obs if isinstance(obs, h5py.Group) else ())
                             if isinstance(v := _member(obs, k, first_what), h5py.Dataset)
                             and v.ndim == 2 and v.dtype.kind in "fiub")
            if low_dim:
                self.state_keys = tuple(low_dim)
            elif isinstance(_member(first, "states", first_what), h5py.Dataset):
                self.state_keys = ("states",)
            else:
                raise InteropError(f"{self.path}: {self.names[0]} has no low-dimensional obs/<key> "
                                   "and no states; name the state with --state-key")
        env_args = _json_attr(data.attrs, "env_args", f"{self.path}: data")
        self.env_name = env_args.get("env_name") if isinstance(env_args, dict) else None
        self.infos, widths, kinds = [], set(), set()
        for i, name in enumerate(self.names):
            if i and i % REOPEN_EVERY == 0:                   # bound HDF5's caches (_file)
                h5.close()
                h5 = self._file()
                data = h5["data"]
            g = data[name]
            what = f"{self.path}: {name}"
            act = _member(g, self.action_key, what)
            if not isinstance(act, h5py.Dataset):
                raise InteropError(f"{what}: no dataset {self.action_key!r} (--action-key)")
            if act.dtype.kind not in "fiu" or act.ndim not in (1, 2) or (act.ndim == 2 and act.dtype.kind != "f"):
                raise InteropError(f"{what}: {self.action_key} is {act.dtype} of shape {act.shape}; expected "
                                   "floats (T, A) or integer ids (T,)")
            T = act.shape[0]
            if T < 1:
                raise InteropError(f"{what}: no frames")
            _stored(act, self.action_key, what)
            kinds.add(act.dtype.kind != "f")
            widths.add(act.shape[1] if act.ndim == 2 else 0)
            dims = []
            for key in self.state_keys:
                ds = _member(g, key, what)
                if not isinstance(ds, h5py.Dataset):
                    raise InteropError(f"{what}: no dataset {key!r} (state key)")
                if ds.dtype.kind not in "fiub" or ds.ndim not in (1, 2):
                    raise InteropError(f"{what}: {key} is {ds.dtype} of shape {ds.shape}; a state key holds "
                                       "numbers of shape (T,) or (T, d)")
                if ds.shape[0] != T:
                    raise InteropError(f"{what}: ragged demonstration: {key} has {ds.shape[0]} frames, "
                                       f"{self.action_key} {T}")
                _stored(ds, key, what)
                dims.append(ds.shape[1] if ds.ndim == 2 else 1)
            if not hasattr(self, "state_dims"):
                self.state_dims = dims
            elif dims != self.state_dims:
                raise InteropError(f"{what}: state keys of widths {dims}, {self.names[0]} has {self.state_dims}")
            sketch = _json_attr(g.attrs, SKETCH_ATTR, what)
            if sketch is not None and (not isinstance(sketch, list) or not sketch
                                       or not all(isinstance(s, str) and s for s in sketch)):
                raise InteropError(f"{what}: attribute {SKETCH_ATTR!r} must be a JSON list of sub-task names")
            ep_meta = _json_attr(g.attrs, "ep_meta", what)
            task = ep_meta.get("lang") if isinstance(ep_meta, dict) and ep_meta.get("lang") else self.env_name
            problem = None if task else (f"{name} has no task: no attrs['ep_meta'] with 'lang' and no "
                                         "env_name in data.attrs['env_args']")
            self.infos.append(EpisodeInfo(name, T, task, problem, sketch))
        if len(kinds) > 1 or len(widths) > 1:
            raise InteropError(f"{self.path}: {self.action_key} differs in kind or width between demonstrations")
        self.discrete = kinds.pop()
        self.action_dim = None if self.discrete else widths.pop()
        return h5

    def _resolve(self, group, key):
        for candidate in (f"obs/{key}", key):
            if isinstance(_member(group, candidate, f"{self.path}: {self.names[0]}"), h5py.Dataset):
                return candidate
        obs = group.get("obs")
        known = sorted(obs) if isinstance(obs, h5py.Group) else []
        raise InteropError(f"--state-key {key}: no obs/{key} or {key} in {self.names[0]} (obs keys: {known})")

    @property
    def state_dim(self):
        return sum(self.state_dims)

    def describe(self):
        return list(self.infos)

    def _episode(self, h5, info):
        g = h5["data"][info.key]
        what = f"{self.path}: {info.key}"
        T = info.length
        states = np.concatenate([np.asarray(g[k][()], dtype=np.float64).reshape(T, -1)
                                 for k in self.state_keys], axis=1)          # (T, D)
        raw = g[self.action_key][()]
        actions = raw.astype(np.int64) if self.discrete else np.asarray(raw, dtype=np.float64)
        _finite(states, "+".join(self.state_keys), what)
        if not self.discrete:
            _finite(actions, self.action_key, what)
        final = states[-1].copy()
        nexts = [k.replace("obs/", "next_obs/", 1) for k in self.state_keys if k.startswith("obs/")]
        if len(nexts) == len(self.state_keys) and all(isinstance(g.get(k), h5py.Dataset) and g[k].shape[0] == T
                                                      for k in nexts):
            final = np.concatenate([np.asarray(g[k][T - 1], dtype=np.float64).reshape(-1) for k in nexts])
            _finite(final[None], "next_obs", what)
        labels = None
        if info.sketch is not None and isinstance(g.get(SUBTASK_INDEX), h5py.Dataset):
            labels = np.asarray(g[SUBTASK_INDEX][()], dtype=np.int64).reshape(-1)
            if labels.shape != (T,) or labels.min() < 0 or labels.max() >= len(info.sketch):
                raise InteropError(f"{what}: {SUBTASK_INDEX} must hold one sketch position in "
                                   f"[0, {len(info.sketch)}) per frame")
        return Episode(info.key, states, actions, final, info.task, info.sketch, labels)

    def image_key(self):
        """The first camera image dataset of the first demonstration (obs/<key> of uint8
        (T, H, W, C) with C 1, 3 or 4, as robomimic's *_image keys), or None."""
        if not hasattr(self, "_image_key"):
            self._image_key = None
            with self._file() as h5:
                obs = _member(h5["data"][self.names[0]], "obs", f"{self.path}: {self.names[0]}")
                for k in sorted(obs) if isinstance(obs, h5py.Group) else ():
                    v = _member(obs, k, f"{self.path}: {self.names[0]}")
                    if isinstance(v, h5py.Dataset) and v.ndim == 4 and v.dtype == np.uint8 and v.shape[3] in (1, 3, 4):
                        self._image_key = f"obs/{k}"
                        break
        return self._image_key

    def has_images(self):
        return self.image_key() is not None

    def frame_images(self, key, frames):
        """[(frame, data URI)] of the camera image at each frame of demonstration key."""
        from taco_app.interop.review import data_uri, png_bytes
        out = []
        with self._file() as h5:
            ds = _member(h5["data"][key], self.image_key(), f"{self.path}: {key}")
            if not isinstance(ds, h5py.Dataset):
                return out
            for t in frames:
                if 0 <= t < ds.shape[0]:
                    out.append((t, data_uri(png_bytes(ds[t]))))
        return out

    def episodes(self, chunk=64):
        """Yield lists of at most chunk Episodes, in demonstration order."""
        for i in range(0, len(self.infos), chunk):
            with self._file() as h5:
                part = [self._episode(h5, info) for info in self.infos[i:i + chunk]]
            yield part

    def write_labelled(self, out, label_fn, vocab=(), posterior_width=None, summary_fn=None, chunk=64,
                       in_place=False):
        """Write a copy of the file to out (or replace it, in_place) with the label datasets:
        label_fn(list of Episode) -> list of EpisodeLabels on each chunk as it is read;
        summary_fn() -> dict for data.attrs["subtask_annotation"], called at the end (vocab and
        posterior_width are LeRobot's concern: here every demonstration keeps its own sketch).
        The copy is made beside out and renamed over it at the end. Returns the names of the
        demonstrations whose labels MimicGen's parse of the signals would not give back."""
        target = self.path if in_place else os.fspath(out)
        if not in_place and os.path.exists(target):
            raise InteropError(f"--out: {target} exists; choose a new file (the input is never changed "
                               "unless --in-place)")
        frames = sum(info.length for info in self.infos)
        labels = HDF5_OVERHEAD * frames * (8 + 4 + 4 * (posterior_width or 8)) + len(self.infos) * DEMO_HEADER_BYTES
        with _file_beside(target, os.path.getsize(self.path) + labels + SLACK_BYTES) as tmp:
            shutil.copyfile(self.path, tmp)
            return self._write_into(tmp, label_fn, chunk, summary_fn)

    def _write_into(self, tmp, label_fn, chunk, summary_fn):
        unparsable = []
        for episodes in self.episodes(chunk):
            labels = label_fn(episodes)
            with self._file("r+", tmp) as dst:               # one chunk per opening (_file)
                for ep, lab in zip(episodes, labels):
                    if write_labels(dst["data"][ep.key], lab):
                        unparsable.append(ep.key)
        summary = summary_fn() if summary_fn else None
        if summary is not None:
            with self._file("r+", tmp) as dst:
                dst["data"].attrs[SUMMARY_ATTR] = json.dumps(summary, sort_keys=True)
        return unparsable


def _finite(values, key, what):
    flat = values.reshape(len(values), -1)
    bad = ~np.isfinite(flat)
    if bad.any():
        t = int(np.nonzero(bad.any(axis=1))[0][0])
        raise InteropError(f"{what}, frame {t}: {key} holds {flat[t][bad[t]][0]}")


HDF5_OVERHEAD = 1.1
"""An HDF5 file's size over its arrays' bytes, besides DEMO_HEADER_BYTES a demonstration."""
DEMO_HEADER_BYTES = 9 * 2**10
"""Bytes of object headers and attributes a demonstration's group and datasets take (about ten
datasets): export of 200 Nav-World demonstrations wrote 2.5 MB of arrays into a 4.2 MB file
(8.5 KiB a demonstration over its arrays); the estimate for it is 4.7 MB."""
SLACK_BYTES = 2**18
"""Bytes added to every estimate (the file's superblock and root objects)."""


@contextlib.contextmanager
def _file_beside(target, need=0):
    """A temporary file's path beside target (an HDF5 file is written by path, so
    files.atomic_write's file object does not serve): renamed over target, after an fsync, when
    the block ends, with target's mode if it exists, else the umask's; removed if it raises.
    need: the bytes it will take, checked first (files.check_room: HDF5 crashes on a write that
    fails half-way)."""
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    files.remove_dead_temporaries(parent, os.path.basename(target))    # a killed run's leftovers
    files.check_room(target, int(need))
    fd, tmp = tempfile.mkstemp(prefix=files.owned_prefix(), suffix=os.path.basename(target), dir=parent)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        # the mode of the file it replaces (in place), else what any new file gets (the umask)
        os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode) if os.path.exists(target)
                 else files.ordinary_mode())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _replace(group, name, data):
    if name in group:
        del group[name]
    return group.create_dataset(name, data=data)


def write_labels(group, lab):
    """Write one demonstration's labels into its group (module docstring); returns True when
    MimicGen's parse of the written signals would not give back the labels' segments
    (labels.mimicgen_representable)."""
    from taco_app.interop.labels import mimicgen_representable
    positions = np.asarray(lab.positions, dtype=np.int64)
    _replace(group, SUBTASK_INDEX, positions)
    group.attrs[SKETCH_ATTR] = json.dumps(list(lab.sketch))
    for name in (POSTERIOR, STOP):
        if name in group:
            del group[name]
    if CONFIDENCE_ATTR in group.attrs:
        del group.attrs[CONFIDENCE_ATTR]
    if lab.posterior is not None:
        group.create_dataset(POSTERIOR, data=np.asarray(lab.posterior, dtype=np.float32))
        group.create_dataset(STOP, data=np.asarray(lab.stop, dtype=np.float32))
        group.attrs[CONFIDENCE_ATTR] = float(lab.confidence)
    signals = group.require_group(SIGNALS)
    for name, signal in mimicgen_signals(lab.sketch, positions).items():
        _replace(signals, name, signal)
    return not mimicgen_representable(lab.sketch, positions)


def export(demos, out, tasks, domain=None):
    """Write demos (a validated taco_ref.data.Demos) as a new robomimic file out with the true
    labels; tasks: each demonstration's task string (stored as RoboCasa's ep_meta "lang").
    Returns the names of the demonstrations MimicGen cannot parse back (write_labels)."""
    from taco_app.interop.labels import EpisodeLabels
    target = os.fspath(out)
    if os.path.exists(target):
        raise InteropError(f"--out: {target} exists; choose a new file")
    unparsable = []
    frames = int(demos.traj_len.sum())
    per_frame = (2 * int(np.prod(demos.states.shape[2:])) + int(np.prod(demos.actions.shape[2:]))) * 8 + 4 * 8
    need = HDF5_OVERHEAD * frames * per_frame + demos.n * DEMO_HEADER_BYTES + SLACK_BYTES  # obs, next_obs...
    with _file_beside(target, need) as tmp:
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            total = 0
            for n in range(demos.n):
                Tn, Ln = int(demos.traj_len[n]), int(demos.sketch_len[n])
                g = data.create_group(f"demo_{n}")
                states = demos.states[n, :Tn]                                          # (T, D)
                nxt = np.concatenate([states[1:], demos.final_state[n][None]], axis=0)  # (T, D)
                g.create_dataset("obs/state", data=states)
                g.create_dataset("next_obs/state", data=nxt)
                g.create_dataset("actions", data=demos.actions[n, :Tn])
                done = np.zeros(Tn, dtype=np.int64)
                done[-1] = 1
                g.create_dataset("dones", data=done)
                g.create_dataset("rewards", data=done.astype(np.float64))
                g.attrs["num_samples"] = Tn
                g.attrs["ep_meta"] = json.dumps({"lang": tasks[n]})
                sketch = [demos.vocab[k] for k in demos.sketch[n, :Ln]]
                if write_labels(g, EpisodeLabels(sketch, demos.labels[n, :Tn])):
                    unparsable.append(f"demo_{n}")
                total += Tn
            data.attrs["total"] = total
            data.attrs["env_args"] = json.dumps({"env_name": f"taco_sim/{domain}" if domain else "taco_ref",
                                                 "env_kwargs": {}})
    return unparsable
