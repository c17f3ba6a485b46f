"""Tests for taco_ref/data.py (format: spec/data.md).

In three layers (an exact reference, properties, smoke and determinism), plus bad input:
(a) save/load round trips exactly (arrays with dtypes, vocabulary, metadata), continuous,
    discrete and collected Nav-World data;
(b) hypothesis properties: split and batches cover every demonstration exactly once, trim
    each part to its own longest trajectory and sketch, and are deterministic for a seed; the
    fingerprint changes when any array entry (padding included) or the vocabulary changes;
(c) atomic_write keeps the old file when the writer fails midway and leaves no temporary file;
(d) validation: one test per rule, each matching the field name the message starts with; load
    refuses files that are not demonstration files with DataError, and never unpickles.

Symbols: N demonstrations, T time, L sketch length, K sub-tasks, D state dim, A action dim.
"""
import dataclasses
import os
import re

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from taco_ref import data
from taco_ref.plumbing import files
from taco_ref.data import DataError

seeds = st.integers(0, 2 ** 32 - 1)


def make_demos(seed=0, N=4, T=7, L=3, K=3, D=2, A=2, discrete=False):
    """A valid Demos with ragged lengths: row n has T_n >= L_n, monotone labels, zero padding
    (row 0 is full: T_0 = T, L_0 = L), and states[n, 0, 0] = n so that every demonstration can
    be recognised after reordering."""
    rng = np.random.default_rng(seed)
    traj_len = rng.integers(L, T + 1, size=N)
    traj_len[0] = T
    sketch_len = np.array([rng.integers(1, L + 1) for _ in range(N)])
    sketch_len[0] = sketch_len[-1] = L
    states = np.zeros((N, T, D))
    actions = np.zeros((N, T), np.int64) if discrete else np.zeros((N, T, A))
    sketch = np.full((N, L), -1, np.int64)
    labels = np.full((N, T), -1, np.int64)
    for n in range(N):
        T_n, L_n = traj_len[n], sketch_len[n]
        states[n, :T_n] = rng.normal(size=(T_n, D))
        actions[n, :T_n] = rng.integers(0, A, size=T_n) if discrete else rng.normal(size=(T_n, A))
        sketch[n, :L_n] = rng.integers(0, K, size=L_n)
        moves = np.zeros(T_n, np.int64)
        moves[np.sort(rng.choice(np.arange(1, T_n), size=L_n - 1, replace=False))] = 1
        labels[n, :T_n] = np.cumsum(moves)
    states[:, 0, 0] = np.arange(N)
    meta = {"domain": "test", "n_actions": A} if discrete else {"domain": "test"}
    return data.Demos(states, actions, traj_len.astype(np.int64), sketch, sketch_len.astype(np.int64),
                      labels, rng.normal(size=(N, D)), tuple(f"sub{k}" for k in range(K)), meta).validate()


def ids(demos):
    """The identifying number of every demonstration in demos (states[n, 0, 0])."""
    return [int(v) for v in demos.states[:, 0, 0]]


def assert_same_demos(a, b):
    for name in data.ARRAY_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert a.vocab == b.vocab


# ----------------------------------------------------------------------------------------------
# (a) Round trips
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("discrete", [False, True])
def test_save_load_round_trip_is_exact(tmp_path, discrete):
    demos = make_demos(discrete=discrete)
    demos.meta["note"] = {"nested": [1, 2.5, "x"]}
    path = tmp_path / "demos.npz"
    data.save(demos, path)
    loaded = data.load(path)
    assert_same_demos(demos, loaded)
    assert isinstance(loaded.vocab, tuple) and all(type(v) is str for v in loaded.vocab)
    assert loaded.meta == dict(demos.meta, format_version=data.FORMAT_VERSION)
    assert loaded.discrete == discrete
    assert loaded.fingerprint() == demos.fingerprint()
    assert sorted(os.listdir(tmp_path)) == ["demos.npz"]          # no temporary file left


def test_navworld_demos_round_trip(tmp_path):
    from taco_sim import navworld
    demos = navworld.collect(6, 2, seed=3)
    data.save(demos, tmp_path / "nav.npz")
    loaded = data.load(tmp_path / "nav.npz")
    assert_same_demos(demos, loaded)
    assert loaded.meta["domain"] == "navworld" and loaded.meta["seed"] == 3


def test_save_overwrites_and_refuses_invalid_demos(tmp_path):
    path = tmp_path / "d.npz"
    data.save(make_demos(seed=1), path)
    data.save(make_demos(seed=2), path)
    assert_same_demos(data.load(path), make_demos(seed=2))
    bad = dataclasses.replace(make_demos(seed=3), sketch_len=np.zeros(4, np.int64))
    with pytest.raises(DataError, match="^sketch_len"):
        data.save(bad, path)
    assert_same_demos(data.load(path), make_demos(seed=2))       # the old file is untouched


# ----------------------------------------------------------------------------------------------
# (d) Validation: one rule per test, the message starts with the field name
# ----------------------------------------------------------------------------------------------

def invalid(field_name, **changes):
    """Assert that make_demos() with `changes` fails validation naming field_name."""
    demos = dataclasses.replace(make_demos(discrete=changes.pop("discrete", False)), **changes)
    with pytest.raises(DataError, match=f"^{field_name}: "):
        demos.validate()


def test_actions_with_a_different_time_axis_are_rejected():
    d = make_demos()
    invalid("actions", actions=np.zeros((d.n, d.states.shape[1] + 1, 2)))


def test_actions_with_a_different_number_of_demonstrations_are_rejected():
    d = make_demos()
    invalid("actions", actions=d.actions[:-1])


def test_labels_with_the_wrong_shape_are_rejected():
    d = make_demos()
    invalid("labels", labels=d.labels[:, :-1])


def test_nan_state_inside_a_trajectory_is_rejected():
    d = make_demos()
    states = d.states.copy()
    states[1, d.traj_len[1] - 1, 0] = np.nan
    invalid("states", states=states)


def test_nan_action_inside_a_trajectory_is_rejected():
    d = make_demos()
    actions = d.actions.copy()
    actions[2, 0, 1] = np.nan
    invalid("actions", actions=actions)


def test_nan_in_padding_is_accepted():
    d = make_demos()
    assert (d.traj_len < d.states.shape[1]).any()
    states, actions = d.states.copy(), d.actions.copy()
    pad = np.arange(d.states.shape[1])[None, :] >= d.traj_len[:, None]
    states[pad], actions[pad] = np.nan, np.nan
    dataclasses.replace(d, states=states, actions=actions).validate()


@pytest.mark.parametrize("field", ["states", "actions", "final_state"])
def test_values_beyond_the_magnitude_bound_are_rejected(field):
    """|x| <= data.MAX_ABS_VALUE inside trajectories (the bound itself is accepted); 1e300
    would turn every loss into inf or NaN. Padding stays unchecked."""
    d = make_demos()
    arr = getattr(d, field).copy()
    idx = (1, 0) if field == "final_state" else (1, d.traj_len[1] - 1, 0)
    arr[idx] = -data.MAX_ABS_VALUE
    dataclasses.replace(d, **{field: arr}).validate()
    arr[idx] = 1e300
    with pytest.raises(DataError, match=f"^{field}: expected values of magnitude at most 1e\\+06"):
        dataclasses.replace(d, **{field: arr}).validate()
    if field != "final_state":
        padded = getattr(d, field).copy()
        padded[np.arange(padded.shape[1])[None, :] >= d.traj_len[:, None]] = 1e300
        dataclasses.replace(d, **{field: padded}).validate()


def test_a_vocabulary_given_as_one_string_is_rejected():
    invalid("vocab", vocab="sub0")


def test_discrete_actions_are_bounded_in_number():
    d = make_demos(discrete=True)
    for n_actions in (data.MAX_ACTIONS + 1, True):
        invalid("meta.n_actions", discrete=True, meta=dict(d.meta, n_actions=n_actions))


@pytest.mark.parametrize("vocab, message", [
    (np.array("sub0sub1sub2"), "vocab: expected a 1-d array of sub-task names"),
    (np.arange(3), "vocab: expected a 1-d array of sub-task names"),
    (np.array([["sub0", "sub1", "sub2"]]), "vocab: expected a 1-d array of sub-task names"),
])
def test_load_rejects_a_vocabulary_that_is_not_a_list_of_names(tmp_path, vocab, message):
    """A 0-d string was split into characters, integers became names: both silently."""
    d = make_demos()
    arrays = {name: getattr(d, name) for name in data.ARRAY_FIELDS}
    np.savez(tmp_path / "v.npz", vocab=vocab, meta=np.array("{}"), **arrays)
    with pytest.raises(DataError, match=message):
        data.load(tmp_path / "v.npz")


def test_empty_sketch_is_rejected():
    d = make_demos()
    sketch_len = d.sketch_len.copy()
    sketch_len[1] = 0
    invalid("sketch_len", sketch_len=sketch_len)


def test_sketch_longer_than_its_trajectory_is_rejected():
    d = make_demos(T=6, L=4)
    traj_len, sketch_len = d.traj_len.copy(), d.sketch_len.copy()
    traj_len[2], sketch_len[2] = 3, 4
    labels = d.labels.copy()
    labels[2] = [0, 1, 2, -1, -1, -1]
    demos = dataclasses.replace(d, traj_len=traj_len, sketch_len=sketch_len, labels=labels)
    with pytest.raises(DataError, match=r"^sketch_len: .*no longer than its trajectory.*demonstration 2"):
        demos.validate()


def test_unknown_subtask_id_is_rejected():
    d = make_demos(K=3)
    for bad in (3, -1):
        sketch = d.sketch.copy()
        sketch[0, 0] = bad
        invalid("sketch", sketch=sketch)


def test_subtask_ids_in_sketch_padding_are_not_checked():
    d = make_demos()
    sketch = d.sketch.copy()
    sketch[np.arange(sketch.shape[1])[None, :] >= d.sketch_len[:, None]] = 99
    dataclasses.replace(d, sketch=sketch).validate()


@pytest.mark.parametrize("rule, bad", [
    ("not starting at 0", [1, 1, 1, 1, 2, 2, 2]),
    ("jumping by 2", [0, 0, 2, 2, 2, 2, 2]),
    ("not ending at L - 1", [0, 0, 1, 1, 1, 1, 1]),
    ("going back", [0, 1, 0, 1, 2, 2, 2]),
])
def test_bad_labels_are_rejected(rule, bad):
    """Checks spec/data.md eq. (1)."""
    d = make_demos(T=7, L=3)                              # row 0: seven steps, three sketch steps
    labels = d.labels.copy()
    labels[0] = [0, 0, 1, 1, 2, 2, 2]
    dataclasses.replace(d, labels=labels.copy()).validate()   # the starting point is valid
    labels[0] = bad
    with pytest.raises(DataError, match="^labels: .*" + re.escape(f"demonstration 0: {bad}")):
        dataclasses.replace(d, labels=labels).validate()


def test_discrete_action_out_of_range_is_rejected():
    d = make_demos(discrete=True, A=3)
    for bad in (3, -1):
        actions = d.actions.copy()
        actions[1, 0] = bad
        invalid("actions", actions=actions, discrete=True)


def test_discrete_actions_need_n_actions_in_meta():
    d = make_demos(discrete=True)
    with pytest.raises(DataError, match="^meta.n_actions: "):
        dataclasses.replace(d, meta={"domain": "test"}).validate()


def test_traj_len_out_of_range_is_rejected():
    d = make_demos()
    traj_len = d.traj_len.copy()
    traj_len[0] = d.states.shape[1] + 1
    invalid("traj_len", traj_len=traj_len)


def test_wrong_format_version_is_rejected():
    invalid("meta.format_version", meta={"format_version": data.FORMAT_VERSION + 1})


def test_duplicate_vocab_names_are_rejected():
    invalid("vocab", vocab=("a", "b", "a"))


# ----------------------------------------------------------------------------------------------
# (d) load refuses what is not a demonstration file
# ----------------------------------------------------------------------------------------------

def test_load_rejects_a_file_missing_fields(tmp_path):
    d = make_demos()
    np.savez(tmp_path / "partial.npz", states=d.states, actions=d.actions)
    with pytest.raises(DataError, match=r"missing fields .*traj_len"):
        data.load(tmp_path / "partial.npz")


def test_load_rejects_a_truncated_file(tmp_path):
    path = tmp_path / "d.npz"
    data.save(make_demos(), path)
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="not a readable taco_ref demonstration file"):
        data.load(path)


def test_load_rejects_a_corrupted_file(tmp_path):
    path = tmp_path / "d.npz"
    data.save(make_demos(), path)
    blob = bytearray(path.read_bytes())
    blob[200:250] = bytes(50)                             # inside the compressed states
    path.write_bytes(bytes(blob))
    with pytest.raises(DataError, match="not a readable taco_ref demonstration file"):
        data.load(path)


def test_load_rejects_a_file_that_is_not_npz(tmp_path):
    path = tmp_path / "notes.npz"
    path.write_text("states,actions\n1,2\n")
    with pytest.raises(DataError, match="not a readable taco_ref demonstration file"):
        data.load(path)


def test_load_rejects_a_missing_file(tmp_path):
    with pytest.raises(DataError, match="nope.npz: no such file"):
        data.load(tmp_path / "nope.npz")


def test_load_never_unpickles_an_object_array(tmp_path, hostile):
    marker = str(tmp_path / "pwned")
    d = make_demos()
    arrays = {name: getattr(d, name) for name in data.ARRAY_FIELDS}
    arrays["states"] = np.array([hostile(marker)], dtype=object)
    arrays["vocab"] = np.array(d.vocab)
    arrays["meta"] = np.array('{"format_version": 1}')
    path = tmp_path / "hostile.npz"
    np.savez(path, **arrays)                              # pickles the object array
    with pytest.raises(DataError, match="not a readable"):
        data.load(path)
    assert not os.path.exists(marker), "data.load ran a pickle"
    # the file really is hostile: unpickling it would have run os.mkdir
    with np.load(path, allow_pickle=True) as z:
        z["states"]
    assert os.path.isdir(marker)


def test_load_rejects_meta_that_is_not_an_object(tmp_path):
    d = make_demos()
    arrays = {name: getattr(d, name) for name in data.ARRAY_FIELDS}
    np.savez(tmp_path / "m.npz", vocab=np.array(d.vocab), meta=np.array("[1, 2]"), **arrays)
    with pytest.raises(DataError, match="meta"):
        data.load(tmp_path / "m.npz")


def test_load_validates_the_contents(tmp_path):
    d = make_demos()
    arrays = {name: getattr(d, name) for name in data.ARRAY_FIELDS}
    arrays["sketch"] = np.full_like(d.sketch, 7)          # ids beyond the vocabulary
    np.savez(tmp_path / "bad.npz", vocab=np.array(d.vocab), meta=np.array("{}"), **arrays)
    with pytest.raises(DataError, match="^sketch: "):
        data.load(tmp_path / "bad.npz")


# ----------------------------------------------------------------------------------------------
# (c) atomic_write
# ----------------------------------------------------------------------------------------------

def test_atomic_write_keeps_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "file.bin"
    path.write_bytes(b"old contents")

    def writer(f):
        f.write(b"new contents, half written")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        files.atomic_write(path, writer)
    assert path.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["file.bin"]


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "file.bin"                  # the directory is created
    files.atomic_write(path, lambda f: f.write(b"first"))
    files.atomic_write(path, lambda f: f.write(b"second"))
    assert path.read_bytes() == b"second"
    assert os.listdir(tmp_path / "sub") == ["file.bin"]


def test_atomic_write_on_keyboard_interrupt_leaves_no_temporary(tmp_path):
    path = tmp_path / "file.bin"

    def writer(f):
        f.write(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(path, writer)
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# (b) split, batches, fingerprint
# ----------------------------------------------------------------------------------------------

def assert_trimmed(part):
    """A subset is padded only to its own longest trajectory and sketch."""
    if part.n:
        assert part.states.shape[1] == part.traj_len.max() == part.labels.shape[1]
        assert part.sketch.shape[1] == part.sketch_len.max()
        part.validate()


@given(N=st.integers(1, 12), fraction=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]), seed=seeds)
def test_split_covers_every_demonstration_once(N, fraction, seed):
    demos = make_demos(seed=seed % 1000, N=N)
    train, held = data.split(demos, fraction, np.random.default_rng(seed))
    note(f"train {ids(train)} held {ids(held)}")
    assert sorted(ids(train) + ids(held)) == list(range(N))
    expected = int(round(fraction * N))
    if fraction > 0 and N > 1:
        expected = min(max(expected, 1), N - 1)
    assert held.n == expected
    assert ids(train) == sorted(ids(train)) and ids(held) == sorted(ids(held))   # original order
    assert_trimmed(train)
    assert_trimmed(held)
    again = data.split(demos, fraction, np.random.default_rng(seed))
    assert ids(again[0]) == ids(train) and ids(again[1]) == ids(held)


@given(N=st.integers(1, 12), batch_size=st.integers(1, 5), seed=seeds)
def test_minibatches_cover_every_demonstration_once(N, batch_size, seed):
    demos = make_demos(seed=seed % 1000, N=N)
    batches = list(data.batches(demos, batch_size, np.random.default_rng(seed)))
    seen = [i for b in batches for i in ids(b)]
    note(f"batches {[ids(b) for b in batches]}")
    assert sorted(seen) == list(range(N))
    assert len(batches) == -(-N // batch_size)
    assert all(1 <= b.n <= batch_size for b in batches)
    for b in batches:
        assert_trimmed(b)
        for i, n in enumerate(ids(b)):                    # rows carry their own data
            np.testing.assert_array_equal(b.states[i, :b.traj_len[i]], demos.states[n, :demos.traj_len[n]])
            np.testing.assert_array_equal(b.sketch[i, :b.sketch_len[i]],
                                          demos.sketch[n, :demos.sketch_len[n]])
    again = list(data.batches(demos, batch_size, np.random.default_rng(seed)))
    assert [ids(b) for b in again] == [ids(b) for b in batches]


def test_minibatch_order_depends_on_the_seed():
    demos = make_demos(N=12)
    orders = {tuple(i for b in data.batches(demos, 4, np.random.default_rng(s)) for i in ids(b))
              for s in range(5)}
    assert len(orders) > 1


@pytest.mark.parametrize("name", data.ARRAY_FIELDS)
def test_fingerprint_changes_when_any_array_changes(name):
    demos = make_demos()
    base = demos.fingerprint()
    assert make_demos().fingerprint() == base              # same content, same fingerprint
    arr = getattr(demos, name).copy()
    idx = (arr.shape[0] - 1,) + tuple(s - 1 for s in arr.shape[1:])   # last entry, often padding
    arr[idx] = arr[idx] + 1
    assert dataclasses.replace(demos, **{name: arr}).fingerprint() != base
    # a dtype change with equal values is a change too
    assert dataclasses.replace(demos, **{name: getattr(demos, name).astype(
        np.float32 if getattr(demos, name).dtype.kind == "f" else np.int32)}).fingerprint() != base


def test_fingerprint_changes_with_the_vocabulary_but_not_meta():
    demos = make_demos()
    base = demos.fingerprint()
    assert dataclasses.replace(demos, vocab=("sub0", "sub1", "other")).fingerprint() != base
    assert dataclasses.replace(demos, meta={"domain": "else"}).fingerprint() == base


def test_assemble_pads_episodes_of_their_own_lengths():
    """data.assemble, every domain's Demos builder: states and actions padded with zeros,
    labels and sketches with -1, lengths from the episodes, validated."""
    rng = np.random.default_rng(0)
    states = [rng.normal(size=(3, 2)), rng.normal(size=(5, 2))]
    actions = [rng.normal(size=(3, 1)), rng.normal(size=(5, 1))]
    labels = [np.array([0, 0, 1]), np.array([0, 1, 1, 2, 2])]
    d = data.assemble(states, actions, labels, [s[-1] for s in states], [[1, 0], [0, 1, 1]],
                      ("a", "b"), {"domain": "test", "action_type": "continuous"})
    assert d.traj_len.tolist() == [3, 5] and d.sketch_len.tolist() == [2, 3]
    assert d.states.shape == (2, 5, 2) and (d.states[0, 3:] == 0).all() and (d.actions[0, 3:] == 0).all()
    assert d.labels[0].tolist() == [0, 0, 1, -1, -1] and d.sketch[0].tolist() == [1, 0, -1]
    np.testing.assert_array_equal(d.states[1], states[1])
    ids = data.assemble(states, [np.array([1, 2, 0]), np.array([0, 0, 1, 1, 2])], labels,
                        [s[-1] for s in states], [[1, 0], [0, 1, 1]], ("a", "b"),
                        {"domain": "test", "action_type": "discrete", "n_actions": 3})
    assert ids.discrete and ids.actions.dtype == np.int64 and ids.actions[0].tolist() == [1, 2, 0, 0, 0]


# ----------------------------------------------------------------------------------------------
# Image states and frame directories (spec/data.md §10)
# ----------------------------------------------------------------------------------------------

def make_image_demos(seed=0, N=5, T=7, H=4, W=3, C=3):
    """make_demos' sketches, labels and actions with uint8 image states (N, T, H, W, C) (zeros in
    padding) and final images; states[n, 0, 0, 0, 0] = n identifies each demonstration."""
    base = make_demos(seed=seed, N=N, T=T)
    rng = np.random.default_rng(seed + 100)
    states = np.zeros((N, T, H, W, C), np.uint8)
    for n in range(N):
        states[n, :base.traj_len[n]] = rng.integers(0, 256, size=(base.traj_len[n], H, W, C))
    states[:, 0, 0, 0, 0] = np.arange(N)
    final = rng.integers(0, 256, size=(N, H, W, C), dtype=np.uint8)
    return dataclasses.replace(base, states=states, final_state=final).validate()


def image_ids(demos):
    return [int(np.asarray(demos.states[i])[0, 0, 0, 0]) for i in range(demos.n)]


def test_image_states_round_trip_through_npz_and_frame_directories(tmp_path):
    """spec/data.md §10: the same set saved as an .npz and as a frame directory (chunks of
    whole demonstrations) reads back equal, with one fingerprint; the directory's states are
    read lazily (data.FrameStates)."""
    demos = make_image_demos()
    data.save(demos, tmp_path / "d.npz")
    data.save_frames(demos, tmp_path / "frames", frames_per_chunk=9)       # several chunks
    for loaded in (data.load(tmp_path / "d.npz"), data.load(tmp_path / "frames")):
        assert_same_demos(demos, dataclasses.replace(loaded, states=np.asarray(loaded.states)))
        assert loaded.fingerprint() == demos.fingerprint() and loaded.image_shape == (4, 3, 3)
    lazy = data.load(tmp_path / "frames")
    assert isinstance(lazy.states, data.FrameStates) and lazy.states.shape == demos.states.shape
    names = sorted(os.listdir(tmp_path / "frames"))
    assert names[:2] == [data.INDEX, data.FINAL] or data.INDEX in names
    assert sum(n.startswith("frames-") for n in names) >= 3


@given(idx=st.lists(st.integers(0, 4), min_size=1, max_size=5), seed=seeds)
def test_lazy_subsets_and_gathers_equal_the_padded_array(idx, seed):
    """Subsets, splits, [b, t] gathers and single demonstrations of a frame directory read the
    same values as the padded ndarray, zeros in padding; a subset's fingerprint is the in-memory
    subset's."""
    import tempfile
    demos = make_image_demos()
    with tempfile.TemporaryDirectory() as tmp:
        lazy = data.save_frames(demos, os.path.join(tmp, "f"), frames_per_chunk=8)
        sub, ref = lazy.subset(idx), demos.subset(idx)
        assert isinstance(sub.states, data.FrameStates)
        np.testing.assert_array_equal(np.asarray(sub.states), ref.states)
        assert sub.fingerprint() == ref.fingerprint()
        rng = np.random.default_rng(seed)
        b = rng.integers(0, sub.n, size=6)
        t = rng.integers(0, sub.states.shape[1], size=6)
        np.testing.assert_array_equal(sub.states[b, t], ref.states[b, t])
        np.testing.assert_array_equal(sub.states[0], ref.states[0])
        T = int(rng.integers(1, sub.states.shape[1] + 1))
        np.testing.assert_array_equal(sub.states[sub.n - 1, :T], ref.states[sub.n - 1, :T])
        np.testing.assert_array_equal(sub.states[np.int64(0), :], ref.states[0, :])
        train, held = data.split(lazy, 0.4, np.random.default_rng(seed))
        train_ref, held_ref = data.split(demos, 0.4, np.random.default_rng(seed))
        assert image_ids(train) == image_ids(train_ref) and image_ids(held) == image_ids(held_ref)


def test_a_lazy_set_pickles_as_its_directory(tmp_path):
    """A worker process receives a frame directory's set as its path and selection, not its
    images, and reads the same values."""
    import pickle
    lazy = data.save_frames(make_image_demos(H=20, W=20), tmp_path / "f").subset([3, 1])
    blob = pickle.dumps(lazy.states)
    assert len(blob) < 2000 < np.asarray(lazy.states).nbytes
    np.testing.assert_array_equal(np.asarray(pickle.loads(blob)), np.asarray(lazy.states))


def test_image_statistics_are_exact_per_channel():
    """spec/training.md eq. (1) per colour channel: mean and population std over every pixel of
    every frame inside the trajectories, for in-memory and lazily read states alike."""
    demos = make_image_demos(N=6)
    inside = np.concatenate([demos.states[n, :demos.traj_len[n]] for n in range(demos.n)])
    pixels = inside.reshape(-1, 3).astype(np.float64)
    mean, std = data.image_statistics(demos)
    np.testing.assert_allclose(mean, pixels.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std, pixels.std(axis=0), rtol=1e-12)


def test_image_validation_names_the_field():
    demos = make_image_demos()
    with pytest.raises(DataError, match="^states: expected images of dtype uint8"):
        dataclasses.replace(demos, states=demos.states.astype(np.float32)).validate()
    with pytest.raises(DataError, match=r"^final_state: expected a uint8 array of shape \(N,\)"):
        dataclasses.replace(demos, final_state=demos.final_state[:, :2]).validate()


def frame_dir(tmp_path):
    data.save_frames(make_image_demos(), tmp_path / "f", frames_per_chunk=9)
    return tmp_path / "f"


def test_a_frame_directory_without_its_index_is_refused(tmp_path):
    """The index is written last: a directory whose collection did not finish is not a set."""
    d = frame_dir(tmp_path)
    os.unlink(d / data.INDEX)
    with pytest.raises(DataError, match="demos.npz is missing: not written, or its collection did not finish"):
        data.load(d)


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(p.read_bytes()[:-7]), r"bytes, expected .* \(truncated or padded\)"),
    (lambda p: p.write_bytes(p.read_bytes() + b"\0"), r"\(truncated or padded\)"),
    (lambda p: np.save(p, np.zeros((3, 4, 3, 3), np.uint8)), "the header declares uint8 \\(3, 4, 3, 3\\)"),
    (lambda p: np.save(p, np.zeros((9, 4, 3, 3), np.float32)), "the header declares float32"),
    (lambda p: p.write_bytes(b"not an array"), "not a readable .npy array"),
    (lambda p: p.unlink(), "no such file"),
])
def test_a_damaged_chunk_is_refused_before_anything_is_read(tmp_path, damage, message):
    """Every chunk's header and size are checked against the index when the set is opened, so
    training cannot read past a chunk's end or into garbage; the message names the file."""
    d = frame_dir(tmp_path)
    damage(d / data.chunk_name(0))
    with pytest.raises(DataError, match=f"frames-00000.npy: .*{message}"):
        data.load(d)


def test_a_frame_directory_never_unpickles(tmp_path, hostile):
    """A chunk or final.npy holding a pickled object array is refused by its header, and the
    pickle never runs."""
    marker = str(tmp_path / "pwned")
    for name in (data.chunk_name(0), data.FINAL):
        d = frame_dir(tmp_path / name)
        np.save(d / name, np.array([hostile(marker)], dtype=object), allow_pickle=True)
        with pytest.raises(DataError, match=f"{name}: expected a uint8 array"):
            data.load(d)
    assert not os.path.exists(marker)


def test_a_frame_index_that_lies_about_its_chunks_is_refused(tmp_path):
    d = frame_dir(tmp_path)
    with np.load(d / data.INDEX) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["chunk"] = arrays["chunk"][::-1].copy()
    np.savez(d / data.INDEX, **arrays)
    with pytest.raises(DataError, match="chunk must number the demonstrations' chunk files"):
        data.load(d)


def test_writing_a_frame_directory_again_replaces_the_old_one(tmp_path):
    """A new collection into the same directory first removes the old index and final images,
    so an interrupted one is never taken for the old set, and finish leaves only its own files
    (the old set's later chunks go)."""
    data.save_frames(make_image_demos(N=5), tmp_path / "f", frames_per_chunk=4)
    assert sum(n.startswith("frames-") for n in os.listdir(tmp_path / "f")) >= 3
    writer = data.FrameWriter(tmp_path / "f", (4, 3, 3))
    assert data.INDEX not in os.listdir(tmp_path / "f") and data.FINAL not in os.listdir(tmp_path / "f")
    with pytest.raises(DataError, match="demos.npz is missing"):
        data.load(tmp_path / "f")
    new = make_image_demos(seed=3, N=2)
    writer.write_chunk(0, [new.states[n, :new.traj_len[n]] for n in range(2)])
    loaded = writer.finish(new, new.final_state)
    assert loaded.fingerprint() == new.fingerprint()
    assert sorted(os.listdir(tmp_path / "f")) == sorted([data.INDEX, data.FINAL, data.chunk_name(0)])


def write_parts(directory, demos, key, per=2):
    """Chunks of `per` demonstrations of demos, each with a part under key holding its
    demonstrations' numbers; returns the records."""
    os.makedirs(directory, exist_ok=True)
    records = []
    for i, start in enumerate(range(0, demos.n, per)):
        rows = range(start, min(start + per, demos.n))
        records.append(data.write_frame_chunk(directory, i, [demos.states[n, :demos.traj_len[n]] for n in rows],
                                              demos.image_shape, part=(key, {"rows": np.array(list(rows))})))
    return records


def test_a_chunk_with_its_part_is_reused_by_the_same_job_only(tmp_path):
    """spec/data.md §10: a chunk whose part names the job's key, and whose frames match the
    part's digests, is reused (its part's arrays back, its record kept); another key, a
    missing part or chunk gives None; finish removes the parts."""
    demos = make_image_demos(N=5)
    records = write_parts(tmp_path / "f", demos, "job A")
    assert sorted(n for n in os.listdir(tmp_path / "f") if n.startswith("part-")) == [
        data.part_name(i) for i in range(3)]
    writer = data.FrameWriter(tmp_path / "f", demos.image_shape)
    assert writer.reuse(0, "job B") is None and writer.chunks == {}
    part = writer.reuse(1, "job A")
    assert part.keys() == {"rows"} and part["rows"].tolist() == [2, 3]
    assert writer.chunks[1]["lengths"].tolist() == records[1]["lengths"].tolist()
    np.testing.assert_array_equal(writer.chunks[1]["digests"], records[1]["digests"])
    os.unlink(tmp_path / "f" / data.chunk_name(2))
    assert writer.reuse(2, "job A") is None
    assert writer.reuse(7, "job A") is None
    assert writer.reuse(0, "job A")["rows"].tolist() == [0, 1]
    writer.write_chunk(2, [demos.states[4, :demos.traj_len[4]]])
    loaded = writer.finish(demos, demos.final_state)
    assert loaded.fingerprint() == demos.fingerprint()
    assert not any(n.startswith("part-") for n in os.listdir(tmp_path / "f"))


@pytest.mark.parametrize("damage", [
    lambda d: _flip_last_byte(d / data.chunk_name(0)),                        # other frames
    lambda d: (d / data.chunk_name(0)).write_bytes((d / data.chunk_name(0)).read_bytes()[:-1]),
    lambda d: np.save(d / data.chunk_name(0), np.zeros((1, 4, 3, 3), np.uint8)),
    lambda d: (d / data.part_name(0)).write_bytes(b"not an archive"),
    lambda d: np.savez(d / data.part_name(0), key=np.array("job A")),         # no lengths, digests
])
def test_a_damaged_chunk_or_part_is_made_again_not_reused(tmp_path, damage):
    """Reuse reads the chunk's frames against the part's digests: changed, truncated or
    reshaped frames, or a part that is not one, make the chunk a job to run again."""
    demos = make_image_demos(N=4)
    write_parts(tmp_path / "f", demos, "job A")
    damage(tmp_path / "f")
    writer = data.FrameWriter(tmp_path / "f", demos.image_shape)
    assert writer.reuse(0, "job A") is None and 0 not in writer.chunks
    assert writer.reuse(1, "job A")["rows"].tolist() == [2, 3]


def _flip_last_byte(path):
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))


def test_writing_a_chunk_removes_another_jobs_part_first(tmp_path):
    """A chunk written without a part (save_frames) never pairs with the part an earlier job
    left under its number."""
    demos = make_image_demos(N=4)
    write_parts(tmp_path / "f", demos, "job A")
    other = make_image_demos(seed=5, N=2)
    data.write_frame_chunk(tmp_path / "f", 0, [other.states[n, :other.traj_len[n]] for n in range(2)],
                           other.image_shape)
    assert not (tmp_path / "f" / data.part_name(0)).exists()
    assert data.FrameWriter(tmp_path / "f", demos.image_shape).reuse(0, "job A") is None
    with pytest.raises(DataError, match="part: expected"):
        data.write_frame_chunk(tmp_path / "f", 0, [other.states[0, :other.traj_len[0]]], other.image_shape,
                               part=("job A", {"lengths": np.zeros(1)}))
