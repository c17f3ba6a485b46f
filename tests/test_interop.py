"""Tests for taco_app/interop/ (`taco annotate`, `taco export`; spec/interop.md), with our
own readers; tests/test_interop_clients.py reads the results with the real lerobot and in
MimicGen's way (slow tier).

(a) the conventions written plainly: lerobot's active_at resolution of subtask rows, MimicGen's
    parse of termination signals, each against the labels they encode (hypothesis);
(b) round trips: export -> read gives back the demonstrations; annotate writes labels,
    posteriors and confidences, leaves the input alone, streams in chunks, keeps other
    language rows, reads older annotations; a failure leaves no output;
(c) every bad dataset, sketches file or option ends in one line on stderr, exit 2.
Small data (Nav-World, 12 demonstrations; a synthetic discrete set) and a model trained for
two epochs: these tests check plumbing, not accuracy.
"""
import base64
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
h5py = pytest.importorskip("h5py")

import taco_sim  # noqa: E402
from taco_ref import data, train  # noqa: E402
from taco_app import cli, interop  # noqa: E402
from taco_app.interop import labels as lab, lerobot  # noqa: E402
from taco_ref.train import TrainConfig  # noqa: E402

FORMATS = ("lerobot", "robomimic")


# ------------------------------------------------------------------------------------------
# (a) The conventions
# ------------------------------------------------------------------------------------------

@st.composite
def segmentations(draw, min_first=1, adjacent_repeats=True):
    """(sketch names, (T,) positions): an alignment path over a sketch of 1-5 steps drawn from
    four names, each segment 1-6 frames (the first at least min_first)."""
    L = draw(st.integers(1, 5))
    names = ["reach", "grasp", "lift", "place"]
    sketch = [draw(st.sampled_from(names))]
    for _ in range(L - 1):
        pool = names if adjacent_repeats else [n for n in names if n != sketch[-1]]
        sketch.append(draw(st.sampled_from(pool)))
    lengths = [draw(st.integers(min_first if l == 0 else 1, 6)) for l in range(L)]
    positions = np.repeat(np.arange(L), lengths).astype(np.int64)
    return sketch, positions


def plain_active_at(t, rows):
    """lerobot's active_at(t, style="subtask") written plainly: the subtask row with the latest
    timestamp <= t (timestamps compared as the Python floats of float32 values)."""
    live = [r for r in rows if r["style"] == "subtask" and r["timestamp"] <= t]
    return max(live, key=lambda r: r["timestamp"]) if live else None


@given(segmentations(), st.sampled_from([2, 10, 25, 30, 50]))
def test_prop_subtask_rows_resolve_to_the_labels(seg, fps):
    """spec/interop.md eq. (4): one row per segment, stamped with its first frame's float32
    timestamp; at every frame the active row (latest timestamp <= the frame's) is the frame's
    segment, and reading the rows back gives the sketch and the labels."""
    sketch, positions = seg
    timestamps = (np.arange(len(positions)) / fps).astype(np.float32)
    rows = lab.subtask_rows(sketch, positions, timestamps)
    assert len(rows) == len(sketch) and [r["content"] for r in rows] == sketch
    by_stamp = {r["timestamp"]: i for i, r in enumerate(rows)}
    for t, ts in enumerate(timestamps):
        row = plain_active_at(float(ts), rows)
        assert row is not None and by_stamp[row["timestamp"]] == positions[t]
        assert row["content"] == sketch[positions[t]]
    names, back = lab.labels_from_rows(list(reversed(rows)), timestamps, "episode")
    assert names == sketch
    np.testing.assert_array_equal(back, positions)


def plain_sarm_stage(frame, starts, ends):
    """lerobot SARM's rule written plainly (its sarm_utils.find_stage_and_tau): the first
    sub-task whose start <= frame <= end, both ends inclusive."""
    return next((i for i, (a, e) in enumerate(zip(starts, ends)) if a <= frame <= e), None)


@given(segmentations(), st.sampled_from([2, 10, 30]), st.floats(0, 100))
def test_prop_sarm_columns_give_every_frame_its_own_subtask(seg, fps, t0):
    """spec/interop.md eq. (5): one entry per segment; SARM's inclusive rule puts every frame
    in its own segment and no frame in two; times are seconds from the episode's first frame."""
    sketch, positions = seg
    timestamps = t0 + np.arange(len(positions)) / fps
    cols = lab.sarm_segments(sketch, positions, timestamps)
    starts, ends = cols["subtask_start_frames"], cols["subtask_end_frames"]
    assert cols["subtask_names"] == sketch and len(starts) == len(ends) == len(sketch)
    for f, p in enumerate(positions):
        assert plain_sarm_stage(f, starts, ends) == p
        assert sum(a <= f <= e for a, e in zip(starts, ends)) == 1
    np.testing.assert_allclose(cols["subtask_start_times"], np.array(starts) / fps, atol=1e-9)
    np.testing.assert_allclose(cols["subtask_end_times"], np.array(ends) / fps, atol=1e-9)


def plain_mimicgen_parse(signals, sketch, T):
    """MimicGen's source-demonstration parse written plainly (spec/interop.md §5): for each
    sub-task but the last, the first index f >= the previous end with signal[f] != signal[f-1]
    ends it at f + 1."""
    bounds, prev = [], 0
    for l, name in enumerate(sketch):
        if l == len(sketch) - 1:
            end = T
        else:
            s = signals[name]
            found = [f for f in range(1, T) if s[f] != s[f - 1] and f >= prev]
            if not found:
                return None
            end = found[0] + 1
        bounds.append((prev, end))
        prev = end
    return bounds


@given(segmentations(min_first=2, adjacent_repeats=False))
def test_prop_mimicgen_parses_the_signals_back(seg):
    """spec/interop.md eq. (6), (7): the termination signals are 0/1, rise on the last frame of
    each segment of their sub-task, and MimicGen's parse of them gives back every segment
    (sketches that repeat a sub-task, but never twice in a row, first segment >= 2 frames)."""
    sketch, positions = seg
    T = len(positions)
    signals = lab.mimicgen_signals(sketch, positions)
    note(f"sketch {sketch}, positions {positions.tolist()}, signals {signals}")
    assert set(signals) == set(sketch)
    starts = [int(np.argmax(positions == l)) for l in range(len(sketch))]
    ends = starts[1:] + [T]
    for l, name in enumerate(sketch):
        assert signals[name][ends[l] - 1] == 1                               # rises on the last frame
        assert set(np.unique(signals[name])) <= {0, 1}
    for name in set(sketch):
        last = max(l for l, n in enumerate(sketch) if n == name)
        assert (signals[name][ends[last] - 1:] == 1).all()                   # done for good after the last
    expected = list(zip(starts, ends))
    assert plain_mimicgen_parse(signals, sketch, T) == expected
    assert lab.mimicgen_segments(signals, sketch, T) == expected
    assert lab.mimicgen_representable(sketch, positions)


def test_mimicgen_cannot_express_a_sub_task_twice_in_a_row():
    """spec/interop.md eq. (6), (7): a sub-task named twice in a row, or a first segment of one
    frame, has no signal MimicGen parses back; mimicgen_representable says so, while a repeat
    with another sub-task between is parsed back."""
    twice = (["grasp", "grasp", "lift"], np.array([0, 0, 1, 1, 2, 2]))
    short = (["reach", "lift"], np.array([0, 1, 1, 1]))
    apart = (["grasp", "lift", "grasp"], np.array([0, 0, 1, 2, 2]))
    for sketch, positions in (twice, short):
        signals = lab.mimicgen_signals(sketch, positions)
        assert plain_mimicgen_parse(signals, sketch, len(positions)) != [(0, 2), (2, 4), (4, 6)][:len(sketch)]
        assert not lab.mimicgen_representable(sketch, positions)
    sketch, positions = apart
    signals = lab.mimicgen_signals(sketch, positions)
    assert signals["grasp"].tolist() == [0, 1, 0, 0, 1]
    assert plain_mimicgen_parse(signals, sketch, 5) == [(0, 2), (2, 3), (3, 5)]
    assert lab.mimicgen_representable(sketch, positions)


def test_sketches_file_is_read_and_checked(tmp_path):
    path = tmp_path / "s.yaml"
    lab.write_sketches(path, {"pick: a, b": ["a", "b"], "x": ["c"]})
    assert lab.read_sketches(path) == {"pick: a, b": ["a", "b"], "x": ["c"]}
    for text, why in (("- a\n- b\n", "expected a mapping"), ("t: []\n", "non-empty list"),
                      ("t: [a, [b]]\n", "non-empty list"), ("a: &x [b]\nc: *x\n", "aliases"),
                      ("t: [a\n", "not valid YAML"),
                      ("t: [a, b]\nu: [c]\nt: [a, d]\n", "the key 't' appears twice .line 1 and line 3.")):
        path.write_text(text)
        with pytest.raises(lab.InteropError, match=why):
            lab.read_sketches(path)


# ------------------------------------------------------------------------------------------
# (b) Round trips
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """12 Nav-World demonstrations, exported to both formats, and a TACO model trained on them
    for two epochs (with a one-epoch warm-up)."""
    d = tmp_path_factory.mktemp("interop")
    demos = taco_sim.get("navworld").collect(12, 3, seed=3)
    data.save(demos, d / "nav.npz")
    for fmt in FORMATS:
        assert cli.main(["export", str(d / "nav.npz"), "--format", fmt, "--out", str(d / _name(fmt))]) == 0
    cfg = TrainConfig(epochs=2, warmup_epochs=1, act_hidden=[16], stop_hidden=[16], batch_size=4, seed=0)
    train.train(demos, cfg, out_dir=str(d / "run"), progress=False)
    return d


def _name(fmt, stem="nav"):
    return f"{stem}-{fmt}" + (".hdf5" if fmt == "robomimic" else "")


def _sketches(work, fmt):
    return str(work / ("nav-lerobot.sketches.yaml" if fmt == "lerobot" else "nav-robomimic.sketches.yaml"))


def _digest(path):
    h = hashlib.sha256()
    paths = [path] if os.path.isfile(path) else sorted(
        os.path.join(dp, f) for dp, _, fs in os.walk(path) for f in fs)
    for p in paths:
        h.update(os.path.relpath(p, path).encode())
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _read_all(path, **kwargs):
    ds = interop.open_dataset(str(path), **kwargs)
    try:
        return ds, [ep for part in ds.episodes(5) for ep in part]
    finally:
        if hasattr(ds, "close"):
            ds.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_then_read_gives_back_the_demonstrations(work, fmt):
    demos = data.load(work / "nav.npz")
    ds, episodes = _read_all(work / _name(fmt))
    assert ds.format == fmt and not ds.discrete and len(episodes) == demos.n
    sketches = lab.read_sketches(_sketches(work, fmt))
    for n, ep in enumerate(episodes):
        T = demos.traj_len[n]
        sketch = [demos.vocab[k] for k in demos.sketch[n, :demos.sketch_len[n]]]
        tol = 1e-6 if fmt == "lerobot" else 0                       # LeRobot stores float32
        np.testing.assert_allclose(ep.states, demos.states[n, :T], rtol=tol, atol=tol)
        np.testing.assert_allclose(ep.actions, demos.actions[n, :T], rtol=tol, atol=tol)
        np.testing.assert_allclose(ep.final_state, demos.final_state[n] if fmt == "robomimic"
                                   else demos.states[n, T - 1], rtol=tol, atol=tol)
        assert ep.sketch == sketch and sketches[ep.task] == sketch
        np.testing.assert_array_equal(ep.labels, demos.labels[n, :T])
    if fmt == "lerobot":
        info = json.loads((work / _name(fmt) / "meta" / "info.json").read_text())
        assert info["fps"] == 2 and info["features"]["language_persistent"]["dtype"] == "language"
        table = pq.read_table(work / _name(fmt) / "data" / "chunk-000" / "file-000.parquet")
        assert set(table.column_names) == set(info["features"])    # declared = written, exactly


def test_discrete_actions_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    N, T = 4, 7
    traj_len = np.array([7, 5, 6, 3])
    labels = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 1, -1, -1], [0, 0, 0, 0, 0, 0, -1],
                       [0, 1, 1, -1, -1, -1, -1]])
    states = np.where((np.arange(T)[None, :] < traj_len[:, None])[..., None], rng.normal(size=(N, T, 3)), 0)
    actions = np.where(np.arange(T)[None, :] < traj_len[:, None], rng.integers(0, 5, size=(N, T)), 0)
    demos = data.Demos(states, actions, traj_len, np.array([[0, 1], [1, 0], [2, -1], [2, 0]]),
                       np.array([2, 2, 1, 2]), labels, rng.normal(size=(N, 3)), ("a", "b", "c"),
                       {"n_actions": 5, "domain": "craft"}).validate()
    data.save(demos, tmp_path / "d.npz")
    for fmt in FORMATS:
        out = tmp_path / _name(fmt, "d")
        assert cli.main(["export", str(tmp_path / "d.npz"), "--format", fmt, "--out", str(out)]) == 0
        ds, episodes = _read_all(out)
        assert ds.discrete and [ep.actions.tolist() for ep in episodes] == [
            actions[n, :traj_len[n]].tolist() for n in range(N)]
        assert all(ep.actions.dtype == np.int64 for ep in episodes)


@pytest.mark.parametrize("fmt", FORMATS)
def test_annotate_writes_labels_posteriors_and_confidence(work, fmt, capsys):
    src, out = work / _name(fmt), work / _name(fmt, "ann")
    before = _digest(src)
    assert cli.main(["annotate", str(src), "--sketches", _sketches(work, fmt), "--model",
                     str(work / "run" / "model"), "--out", str(out), "--review", "3"]) == 0
    text = capsys.readouterr().out
    assert "annotated 12 episodes" in text and "agreement with the labels already in the dataset" in text
    assert _digest(src) == before                                   # the input is never changed
    _, episodes = _read_all(out)
    assert all(ep.labels is not None and len(ep.sketch) == 3 for ep in episodes)
    if fmt == "lerobot":
        info = json.loads((out / "meta" / "info.json").read_text())
        assert info["features"]["subtask.posterior"]["shape"] == [3]
        table = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
        assert set(table.column_names) == set(info["features"])
        post = np.array(table.column("subtask.posterior").to_pylist())
        np.testing.assert_allclose(post.sum(axis=1), 1.0, atol=1e-5)
        stop = np.array(table.column("subtask.stop").to_pylist())
        ep = np.array(table.column("episode_index").to_pylist())
        np.testing.assert_allclose([stop[ep == e].sum() for e in range(12)], 2.0, atol=1e-4)
        summary = json.loads((out / "meta" / "subtask_annotation.json").read_text())
        meta_eps = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
        conf = meta_eps.column("subtask/confidence").to_pylist()
        assert conf == pytest.approx([summary["confidence"][str(e)] for e in range(12)], abs=1e-6)
        # the per-episode sub-task columns lerobot's SARM reads, replaced (not doubled) on re-annotation
        for prefix in ("sparse_", ""):
            names = meta_eps.column(prefix + "subtask_names").to_pylist()
            starts = meta_eps.column(prefix + "subtask_start_frames").to_pylist()
            ends = meta_eps.column(prefix + "subtask_end_frames").to_pylist()
            for e, episode in enumerate(episodes):
                assert names[e] == list(episode.sketch)
                assert [plain_sarm_stage(f, starts[e], ends[e]) for f in range(len(episode.labels))] == \
                    episode.labels.tolist()
        assert len(set(meta_eps.column_names)) == len(meta_eps.column_names)
    else:
        with h5py.File(out, "r") as f:
            g = f["data/demo_0"]
            post = g["subtask_posterior"][()]
            assert post.dtype == np.float32 and post.shape == (g["actions"].shape[0], 3)
            np.testing.assert_allclose(post.sum(axis=1), 1.0, atol=1e-5)
            assert g["subtask_stop"][()].sum() == pytest.approx(2.0, abs=1e-4)
            assert 0 < g.attrs["subtask_confidence"] <= 1
            assert set(g["datagen_info/subtask_term_signals"]) == set(json.loads(g.attrs["sketch"]))
            summary = json.loads(f["data"].attrs["subtask_annotation"])
    assert len(summary["review"]) == 3 and summary["decoder"] == "viterbi"
    worst = min(summary["confidence"].values())
    assert summary["review"][0]["confidence"] == pytest.approx(worst, abs=1e-6)


@pytest.mark.parametrize("fmt", FORMATS)
def test_annotate_reads_the_sketches_of_an_existing_annotation(work, fmt, capsys):
    """Without --sketches the sketch of each episode is the one already annotated; the report
    gives the agreement with those labels."""
    out = work / _name(fmt, "again")
    assert cli.main(["annotate", str(work / _name(fmt)), "--model", str(work / "run" / "model"),
                     "--decoder", "posterior_argmax", "--out", str(out)]) == 0
    assert "agreement with the labels already in the dataset" in capsys.readouterr().out


def test_annotate_trains_taco_when_no_model_is_given(work, capsys):
    out = work / "trained-here"
    args = ["annotate", str(work / _name("lerobot")), "--sketches", _sketches(work, "lerobot"),
            "--out", str(out), "--set", "epochs=1", "--set", "warmup_epochs=0", "--set", "act_hidden=[8]",
            "--set", "stop_hidden=[8]"]
    assert cli.main(args) == 0
    assert "trained on them" in capsys.readouterr().out
    assert (work / "trained-here.taco-model" / "model" / "model.json").exists()
    shutil.rmtree(out)
    assert cli.main(args) == 2                                      # the run directory holds a run
    assert "--model" in capsys.readouterr().err


def test_labels_that_are_not_an_alignment_path_do_not_stop_a_new_annotation(work, tmp_path, capsys):
    """A robomimic file whose subtask_index skips back (as an argmax decoder's labels may) is
    annotated again from its own sketches: those labels are compared, not trusted."""
    src = _copy(work, "robomimic", tmp_path)
    with h5py.File(src, "r+") as f:
        index = f["data/demo_0/subtask_index"][()]
        assert index[0] == 0 and index[1] == 0 and index[2] == 0
        index[1] = 1                                                # 0, 1, 0, ...: no path
        f["data/demo_0/subtask_index"][...] = index
    out = tmp_path / "again.hdf5"
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(out)]) == 0
    assert "agreement with the labels already in the dataset" in capsys.readouterr().out
    with h5py.File(out, "r") as f:
        written = f["data/demo_0/subtask_index"][()]
    assert written[0] == 0 and np.all(np.diff(written) >= 0) and np.all(np.diff(written) <= 1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_annotate_in_place_rewrites_the_dataset(work, fmt, tmp_path):
    src = tmp_path / _name(fmt)
    (shutil.copytree if fmt == "lerobot" else shutil.copyfile)(work / _name(fmt), src)
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--in-place"]) == 0
    assert sorted(os.listdir(tmp_path)) == [src.name]               # no temporary left behind
    _, episodes = _read_all(src)
    assert len(episodes) == 12 and all(ep.labels is not None for ep in episodes)


@pytest.mark.parametrize("fmt", FORMATS)
def test_sketches_template_lists_every_task_and_missing_tasks_are_named_at_once(work, fmt, tmp_path, capsys):
    """--sketches-template writes every task string (with the dataset's own sketch where it is
    annotated) to a file --sketches reads back; a sketches file that lacks tasks names them all
    in one line, not one per run."""
    src = work / _name(fmt)
    out = tmp_path / "template.yaml"
    assert cli.main(["annotate", str(src), "--sketches-template", str(out)]) == 0
    assert "task strings of 12 episodes" in capsys.readouterr().out
    table = lab.read_sketches(out)
    ds = interop.open_dataset(str(src))
    assert set(table) == {info.task for info in ds.describe()}
    assert all(table[info.task] == list(info.sketch) for info in ds.describe())
    assert out.read_text().startswith("# The task strings of")
    assert cli.main(["annotate", str(src), "--sketches-template", str(out)]) == 2        # exists
    capsys.readouterr()
    first = sorted(table)[0]
    lab.write_sketches(tmp_path / "one.yaml", {first: table[first]})
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--sketches",
                     str(tmp_path / "one.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    missing = len(table) - 1
    assert f"{missing} task string(s) not in the sketches file" in err and "--sketches-template" in err, err
    assert len(err.strip().splitlines()) == 1


def _with_images(src, dest):
    """A copy of the robomimic file src whose demonstrations carry a camera image per frame
    (obs/agentview_image, uint8 (T, 8, 8, 3), the frame index in every pixel)."""
    shutil.copyfile(src, dest)
    with h5py.File(dest, "r+") as f:
        for name, g in f["data"].items():
            T = g["actions"].shape[0]
            g.create_dataset("obs/agentview_image", data=np.broadcast_to(
                np.arange(T, dtype=np.uint8)[:, None, None, None], (T, 8, 8, 3)).copy())
    return dest


def test_review_page_is_self_contained_and_holds_every_episode(work, tmp_path, capsys):
    """--report writes one HTML file with its data and script inline (nothing fetched), the
    review list first, every episode's posterior, boundaries and confidence, and the camera
    frames at the boundaries where the dataset has images."""
    from taco_app.interop import review
    src = _with_images(work / _name("robomimic"), tmp_path / "img.hdf5")
    page = tmp_path / "page.html"
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(tmp_path / "o.hdf5"),
                     "--report", str(page), "--review", "3"]) == 0
    assert f"review page: {page}" in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text and "<link" not in text and " src=\"" not in text
    blob = text.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    payload = json.loads(blob)
    assert [e["key"] for e in payload["episodes"][:3]] == payload["review"][:3]
    assert len(payload["episodes"]) == 12 and len(payload["table"]) == 12
    ds = interop.open_dataset(str(tmp_path / "o.hdf5"))
    for ep in [e for part in ds.episodes() for e in part]:
        rec = next(r for r in payload["episodes"] if r["key"] == ep.key)
        assert rec["bounds"] == review.boundaries(ep.labels) and rec["sketch"] == list(ep.sketch)
        post = np.frombuffer(base64.b64decode(rec["post"]), np.uint8).reshape(rec["C"], len(rec["sketch"]))
        assert post.shape[0] == min(ep.length, review.MAX_COLUMNS)
        assert [im["frame"] for im in rec["images"]] == review.frames_to_show(rec)
        assert all(im["src"].startswith("data:image/png;base64,") for im in rec["images"])
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(tmp_path / "o2.hdf5"),
                     "--report", str(page)]) == 2                                  # never overwritten
    assert "--report" in capsys.readouterr().err


def test_the_review_page_shows_the_agreement_the_command_prints_and_lists_below_its_threshold(work, tmp_path,
                                                                                              capsys):
    """The agreement with the dataset's own labels was printed on the terminal only; the page
    now holds the same figure, and lists first only the episodes below --review-below, least
    confident first (tests/test_review_page.py checks how the page draws both)."""
    import re
    page = tmp_path / "page.html"
    assert cli.main(["annotate", str(work / _name("lerobot")), "--model", str(work / "run" / "model"),
                     "--out", str(tmp_path / "o"), "--report", str(page), "--review-below", "0.999"]) == 0
    printed = re.search(r"agreement with the labels already in the dataset: ([0-9.]+) % of frames",
                        capsys.readouterr().out).group(1)
    payload = json.loads(page.read_text().split('id="data">', 1)[1].split("</script>", 1)[0])
    assert f"{100 * payload['agreement']['share']:.2f}" == printed
    assert payload["agreement"]["frames"] == int(data.load(work / "nav.npz").traj_len.sum())
    assert payload["threshold"] == 0.999 and payload["limit"] == interop.DEFAULT_REVIEW
    listed = [e for e in payload["episodes"] if e["review"]]
    assert [e["key"] for e in listed] == payload["review"]
    conf = [e["confidence"] for e in listed]
    assert conf == sorted(conf) and all(c < 0.999 or e["note"] for c, e in zip(conf, listed))
    below = sorted(e["confidence"] for e in payload["table"] if e["confidence"] < 0.999)
    assert payload["below"] == len(below) and [c for c, e in zip(conf, listed) if not e["note"]] == below[:20]
    assert set(payload["colours"]) == {s for e in payload["episodes"] for s in e["sketch"]}


@pytest.mark.slow
def test_review_page_shows_a_lerobot_image_feature(work, tmp_path):
    """LeRobot "image" features (PNG bytes in the data files) are shown at the boundaries too."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from taco_app.interop import review
    src = tmp_path / "img-lerobot"
    shutil.copytree(work / _name("lerobot"), src)
    info = json.loads((src / "meta" / "info.json").read_text())
    info["features"]["observation.images.top"] = {"dtype": "image", "shape": [8, 8, 3],
                                                  "names": ["height", "width", "channel"]}
    (src / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    for path in src.rglob("data/**/*.parquet"):
        table = pq.read_table(path)
        frames = table.column("frame_index").to_pylist()
        images = [{"bytes": review.png_bytes(np.full((8, 8, 3), f, np.uint8)), "path": None} for f in frames]
        pq.write_table(table.append_column("observation.images.top", pa.array(
            images, type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))), path)
    page = tmp_path / "page.html"
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(tmp_path / "o"),
                     "--report", str(page)]) == 0
    payload = json.loads(page.read_text().split('id="data">', 1)[1].split("</script>", 1)[0])
    for rec in payload["episodes"]:
        assert [im["frame"] for im in rec["images"]] == review.frames_to_show(rec)
        shown = [base64.b64decode(im["src"].split(",", 1)[1]) for im in rec["images"]]
        assert shown == [review.png_bytes(np.full((8, 8, 3), t, np.uint8)) for t in review.frames_to_show(rec)]


def test_lagging_boundaries_compares_each_boundary_with_the_action_change():
    actions = np.zeros((20, 2))
    actions[10:] = 5.0                                   # the new sub-task acts from frame 10
    actions += np.random.default_rng(0).normal(scale=0.01, size=actions.shape)
    on_time = np.r_[np.zeros(10, int), np.ones(10, int)]
    late = np.r_[np.zeros(11, int), np.ones(9, int)]
    assert interop.lagging_boundaries(actions, on_time) == (0, 1)
    assert interop.lagging_boundaries(actions, late) == (1, 1)
    assert interop.lagging_boundaries(actions, np.zeros(20, int)) == (0, 0)


@pytest.mark.slow
def test_a_state_key_that_holds_the_previous_action_is_reported(work, tmp_path, capsys):
    """A state key carrying the last command (observation.velocity in many real datasets) made
    253 of 255 boundaries come a frame late at confidence 0.9998, and nothing said so: annotate
    now names the key (its dimensions correlate with the previous action, not the current)."""
    src = tmp_path / "vel.hdf5"
    shutil.copyfile(work / _name("robomimic"), src)
    with h5py.File(src, "r+") as f:
        for g in f["data"].values():
            state, act = g["obs/state"][()], g["actions"][()]
            del g["obs/state"]
            g.create_dataset("obs/pose", data=state[:, :6])
            prev = np.concatenate([np.zeros((1, act.shape[1])), act[:-1]])
            g.create_dataset("obs/velocity", data=prev)
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(tmp_path / "o.hdf5"),
                     "--state-key", "pose", "--state-key", "velocity"]) == 0
    out = capsys.readouterr().out
    assert "warning: state obs/velocity[0] tracks the previous action" in out, out
    assert "obs/pose" not in out.split("warning:", 1)[1]
    capsys.readouterr()
    assert cli.main(["annotate", str(work / _name("robomimic")), "--model", str(work / "run" / "model"),
                     "--out", str(tmp_path / "o2.hdf5")]) == 0
    assert "tracks the previous action" not in capsys.readouterr().out


def test_png_encoder_round_trips():
    from taco_app.interop import review
    img = np.random.default_rng(0).integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    blob = review.png_bytes(img)
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    import zlib
    body = blob[8:]
    chunks = {}
    while body:
        n = int.from_bytes(body[:4], "big")
        chunks[body[4:8]] = body[8:8 + n]
        body = body[12 + n:]
    raw = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(5, 1 + 7 * 3)
    assert (raw[:, 0] == 0).all() and np.array_equal(raw[:, 1:].reshape(5, 7, 3), img)


@pytest.mark.slow
def test_review_page_renders_in_a_real_browser(work, tmp_path):
    """Debian's chromium (headless, .ci/run installs it) opens the page from a file: its script
    draws every episode (a canvas each, the review list first, the camera frames decoded), and
    a screenshot is not blank."""
    import subprocess
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium; .ci/run does)")
    src = _with_images(work / _name("robomimic"), tmp_path / "img.hdf5")
    page = tmp_path / "page.html"
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(tmp_path / "o.hdf5"),
                     "--report", str(page), "--review", "3"]) == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'data-rendered="12"' in dom, dom[-2000:]
    review_part = dom.split('id="review"', 1)[1].split('id="others"', 1)[0]
    assert review_part.count('class="card flag"') == 3 and review_part.count("<canvas") == 3
    assert dom.count("<canvas") == 12 and dom.count('<img src="data:image/png;base64,') >= 12
    assert dom.count("<tr>") == 13                                         # header + 12 episodes
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, *flags, "--window-size=1000,800", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_in_place_survives_a_sigkill_at_any_moment(work, fmt, tmp_path):
    """`annotate --in-place` killed (SIGKILL) at moments spread over its run: the dataset is
    always whole under its own name (the old one or the annotated one), and the next run
    finishes and removes what the killed one left (a whole-dataset .tmp-* copy stayed before,
    and a kill between the two renames left the dataset only under .tmp-old-*)."""
    import subprocess
    import sys
    import time
    model = str(work / "run" / "model")
    src = tmp_path / _name(fmt)

    def fresh():
        if src.exists():
            (shutil.rmtree if src.is_dir() else os.unlink)(src)
        (shutil.copytree if fmt == "lerobot" else shutil.copyfile)(work / _name(fmt), src)

    def annotate():
        return subprocess.Popen([sys.executable, "-m", "taco_app.cli", "annotate", str(src), "--model", model,
                                 "--in-place"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed_writing = 0
    for delay in (0.0, 0.002, 0.01, 0.03, 0.1, 0.3, 1.0):
        fresh()
        proc = annotate()
        while proc.poll() is None and not any(n.startswith(".tmp-") for n in os.listdir(tmp_path)):
            time.sleep(0.001)                         # until it starts writing its temporary
        time.sleep(delay)
        killed_writing += proc.poll() is None
        proc.kill()
        proc.wait()
        _, episodes = _read_all(src)                  # whole under its name: old or new
        assert len(episodes) == 12, delay
        assert annotate().wait(timeout=300) == 0, delay
        assert sorted(os.listdir(tmp_path)) == [src.name], (delay, os.listdir(tmp_path))
        _, episodes = _read_all(src)
        assert all(ep.labels is not None for ep in episodes)
    assert killed_writing >= 3, "the kills did not land while it wrote: the test is moot"


def _modes(path):
    """{relative path: permission bits} of path and everything under it."""
    path = Path(path)
    if path.is_file():
        return {".": stat.S_IMODE(path.stat().st_mode)}
    out = {".": stat.S_IMODE(path.stat().st_mode)}
    for p in path.rglob("*"):
        out[str(p.relative_to(path))] = stat.S_IMODE(p.stat().st_mode)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_outputs_get_the_umask_and_in_place_keeps_the_datasets_modes(work, fmt, tmp_path):
    """Outputs were 0600 / 0700 whatever the umask (mkstemp, mkdtemp), and --in-place turned a
    755 / 644 dataset into 700 / 600."""
    old = os.umask(0o027)
    try:
        out = tmp_path / _name(fmt, "export")
        assert cli.main(["export", str(work / "nav.npz"), "--format", fmt, "--out", str(out)]) == 0
        modes = _modes(out)
        assert all(m == (0o750 if (out / k).is_dir() else 0o640) for k, m in modes.items()), modes
        annotated = tmp_path / _name(fmt, "annotated")
        assert cli.main(["annotate", str(out), "--model", str(work / "run" / "model"), "--out",
                         str(annotated)]) == 0
        modes = _modes(annotated)
        assert all(m == (0o750 if (annotated / k).is_dir() else 0o640) for k, m in modes.items()), modes
        for p in [out] + list(Path(out).rglob("*")):            # the user's own modes: 755 / 644
            p.chmod(0o755 if p.is_dir() else 0o644)
        before = _modes(out)
        assert cli.main(["annotate", str(out), "--model", str(work / "run" / "model"), "--in-place"]) == 0
        after = _modes(out)
        assert {k: after[k] for k in before if k in after} == before
    finally:
        os.umask(old)


def test_a_corrupt_value_names_the_file_the_episode_the_frame_and_the_key(work, tmp_path, capsys):
    """A state of magnitude 1e9 (finite, past data.MAX_ABS_VALUE) in one frame was reported as
    `episodes 0..11: states[5, 3, 1]`: an index into the chunk, with neither the dataset, its
    episode index nor the feature."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    src = tmp_path / "nan"
    shutil.copytree(work / _name("lerobot"), src)
    path = next(src.rglob("data/**/*.parquet"))
    table = pq.read_table(path)
    rows = table.column("observation.state").to_pylist()
    episode = table.column("episode_index").to_pylist()
    frame = table.column("frame_index").to_pylist()
    r = next(i for i, e in enumerate(episode) if e == 5 and frame[i] == 3)
    rows[r][1] = 1e9
    column = table.schema.get_field_index("observation.state")
    table = table.set_column(column, table.schema.field(column), pa.array(rows, type=table.schema.field(column).type))
    pq.write_table(table, path)
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(tmp_path / "o")]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"taco annotate: {src}: episode 5, frame 3: observation.state (states): "), line
    assert "magnitude at most" in line and len(line.splitlines()) == 1 and not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_annotation_streams_one_chunk_at_a_time(work, fmt, tmp_path, monkeypatch):
    """Each call of the labeller gets at most --chunk episodes, every episode once and in
    order, also when the reader's batches cut episodes (spec/interop.md §8)."""
    monkeypatch.setattr(lerobot, "BATCH_ROWS", 7)
    from taco_ref import model as model_mod
    model = model_mod.load(str(work / "run" / "model"))
    ds = interop.open_dataset(str(work / _name(fmt)))
    plan = interop.plan_sketches(ds, None, model.vocab)
    seen, sizes = [], []
    inner = interop.Labeller(model, plan, "viterbi")

    def label_fn(episodes):
        sizes.append(len(episodes))
        seen.extend(ep.key for ep in episodes)
        return inner(episodes)
    ds.write_labelled(str(tmp_path / _name(fmt)), label_fn, vocab=model.vocab, posterior_width=3, chunk=5)
    if hasattr(ds, "close"):
        ds.close()
    assert sizes == [5, 5, 2]
    assert seen == [info.key for info in interop.open_dataset(str(work / _name(fmt))).describe()]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failure_while_writing_leaves_no_output(work, fmt, tmp_path):
    ds = interop.open_dataset(str(work / _name(fmt)))
    calls = []

    def label_fn(episodes):
        calls.append(1)
        if len(calls) == 2:
            raise lab.InteropError("stop here")
        return [lab.EpisodeLabels(ep.sketch, ep.labels) for ep in episodes]
    with pytest.raises(lab.InteropError, match="stop here"):
        ds.write_labelled(str(tmp_path / _name(fmt)), label_fn, vocab=(), chunk=4)
    assert os.listdir(tmp_path) == []


def test_lerobot_keeps_other_language_rows_and_reads_older_annotations(work, tmp_path):
    """Rows of other styles in language_persistent survive an annotation; a dataset labelled
    the lerobot 0.4.4-0.5 way (subtask_index with meta/subtasks.parquet) is read as annotated."""
    src = tmp_path / "planned"
    shutil.copytree(work / _name("lerobot"), src)
    path = src / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    rows = table.column("language_persistent").to_pylist()
    plan_row = {"role": "assistant", "content": "1. go; 2. go again", "style": "plan", "timestamp": 0.0,
                "camera": None, "tool_calls": None}
    column = pa.array([r + [plan_row] for r in rows], type=pa.list_(lerobot.ROW_TYPE))
    table = table.set_column(table.column_names.index("language_persistent"),
                             pa.field("language_persistent", column.type), column)
    pq.write_table(table, path)
    out = tmp_path / "planned-ann"
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(out)]) == 0
    after = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").column("language_persistent")
    assert all(sum(r["style"] == "plan" for r in cell) == 1 for cell in after.to_pylist())

    old = tmp_path / "old-style"
    shutil.copytree(work / _name("lerobot"), old)
    path = old / "data" / "chunk-000" / "file-000.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["language_persistent"]), path)
    info = json.loads((old / "meta" / "info.json").read_text())
    del info["features"]["language_persistent"]
    (old / "meta" / "info.json").write_text(json.dumps(info))
    _, episodes = _read_all(old)
    demos = data.load(work / "nav.npz")
    for n, ep in enumerate(episodes):
        assert ep.sketch == [demos.vocab[k] for k in demos.sketch[n]]
        np.testing.assert_array_equal(ep.labels, demos.labels[n, :demos.traj_len[n]])


# ------------------------------------------------------------------------------------------
# (c) Bad input: one line each
# ------------------------------------------------------------------------------------------

def _copy(work, fmt, tmp_path):
    dst = tmp_path / _name(fmt)
    (shutil.copytree if fmt == "lerobot" else shutil.copyfile)(work / _name(fmt), dst)
    return dst


def _rewrite_parquet(path, change):
    table = pq.read_table(path)
    pq.write_table(change(table), path)


def _set_info(root, change):
    info = json.loads((root / "meta" / "info.json").read_text())
    change(info)
    (root / "meta" / "info.json").write_text(json.dumps(info))


def _nan_state(table):
    states = np.array(table.column("observation.state").to_pylist(), dtype=np.float32)
    states[30, 2] = np.nan
    col = pa.FixedSizeListArray.from_arrays(pa.array(states.reshape(-1)), states.shape[1])
    return table.set_column(0, pa.field("observation.state", col.type), col)


def _swap_frames(table):
    idx = list(range(table.num_rows))
    idx[3], idx[4] = idx[4], idx[3]
    return table.take(idx)


def _h5(path, change):
    with h5py.File(path, "r+") as f:
        change(f)


def _ragged(f):
    state = f["data/demo_1/obs/state"][()]
    del f["data/demo_1/obs/state"]
    f["data/demo_1/obs/state"] = state[:-1]


def _nan_action(f):
    a = f["data/demo_2/actions"][()]
    a[5, 1] = np.nan
    f["data/demo_2/actions"][...] = a


BAD = {
    "codebase v2.1": ("lerobot", lambda p: _set_info(p, lambda i: i.update(codebase_version="v2.1")), [],
                      "codebase_version 'v2.1'"),
    "missing state key": ("lerobot", None, ["--state-key", "observation.joints"], "no such feature"),
    "video state": ("lerobot", lambda p: _set_info(p, lambda i: i["features"].update(
        {"observation.images.top": {"dtype": "video", "shape": [8, 8, 3], "names": None}})),
        ["--state-key", "observation.images.top"], "a video feature"),
    "nan state": ("lerobot", lambda p: _rewrite_parquet(p / "data/chunk-000/file-000.parquet", _nan_state), [],
                  "observation.state holds nan"),
    "frames out of order": ("lerobot", lambda p: _rewrite_parquet(
        p / "data/chunk-000/file-000.parquet", _swap_frames), [], "frame_index"),
    "total frames": ("lerobot", lambda p: _set_info(p, lambda i: i.update(total_frames=3)), [], "total_frames 3"),
    "ragged": ("robomimic", lambda p: _h5(p, _ragged), [], "ragged demonstration"),
    "nan action": ("robomimic", lambda p: _h5(p, _nan_action), [], "actions holds nan"),
    "missing action key": ("robomimic", None, ["--action-key", "commands"], "no dataset 'commands'"),
    "long sketch": ("robomimic", "sketch:" + json.dumps(["black"] * 500), [], "its sketch has 500 sub-tasks"),
    "unknown task": ("lerobot", "sketch-other", [], "not in the sketches file"),
    "bad yaml": ("lerobot", "yaml:t: [a\n", [], "not valid YAML"),
    "unknown sub-task": ("robomimic", "sketch:" + json.dumps(["black", "purple"]), [],
                         "'purple' is not one the model knows"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_datasets_end_in_one_error_line(work, tmp_path, capsys, case):
    fmt, change, extra, expected = BAD[case]
    path = _copy(work, fmt, tmp_path)
    sketches = _sketches(work, fmt)
    if callable(change):
        change(path)
    elif isinstance(change, str) and change.startswith("sketch:"):
        names = json.loads(change[len("sketch:"):])
        lab.write_sketches(tmp_path / "s.yaml", {t: names for t in lab.read_sketches(sketches)})
        sketches = str(tmp_path / "s.yaml")
    elif change == "sketch-other":
        lab.write_sketches(tmp_path / "s.yaml", {"another task": ["black"]})
        sketches = str(tmp_path / "s.yaml")
    elif isinstance(change, str) and change.startswith("yaml:"):
        (tmp_path / "s.yaml").write_text(change[len("yaml:"):])
        sketches = str(tmp_path / "s.yaml")
    out = tmp_path / "out"
    code = cli.main(["annotate", str(path), "--sketches", sketches, "--model", str(work / "run" / "model"),
                     "--out", str(out)] + extra)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("taco annotate: ") and "\n" not in err and "Traceback" not in err, err
    assert expected in err, err
    assert not out.exists()


def test_bad_paths_and_options_end_in_one_error_line(work, tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    (tmp_path / "folder").mkdir()
    model = str(work / "run" / "model")
    cases = [
        (["annotate", str(text), "--out", str(tmp_path / "o")], "neither a LeRobot v3 folder"),
        (["annotate", str(tmp_path / "folder"), "--out", str(tmp_path / "o")], "without meta/info.json"),
        (["annotate", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")], "no such file or folder"),
        (["annotate", str(work / _name("lerobot")), "--model", model], "or --in-place"),
        (["annotate", str(work / _name("lerobot")), "--model", model, "--out", str(work / _name("robomimic"))],
         "exists"),
        (["annotate", str(work / _name("lerobot")), "--model", model, "--out", str(tmp_path / "o"),
          "--in-place"], "not both"),
        (["annotate", str(work / _name("lerobot")), "--model", model, "--out",
          str(work / _name("lerobot") / "labelled")], "is inside DATASET"),
        (["annotate", str(work / _name("robomimic")), "--model", model, "--out", str(tmp_path / "o.hdf5"),
          "--state-key", "state", "--state-key", "state"], "states have 16 dimensions"),
        (["export", str(work / "nav.npz"), "--format", "lerobot", "--out", str(work / _name("lerobot"))],
         "exists"),
        (["export", str(text), "--format", "robomimic", "--out", str(tmp_path / "x.hdf5")], "notes.txt"),
        (["annotate", str(work / _name("robomimic")), "--out", str(tmp_path / "c.hdf5"), "--set", "algo=ctcbc-gru"],
         "aligns with its classifier"),
    ]
    for argv, expected in cases:
        code = cli.main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith(f"taco {argv[0]}: ") and "\n" not in err, (argv, err)
        assert expected in err, (argv, err)


def test_a_task_string_with_html_in_it_cannot_break_out_of_the_pages_data(tmp_path):
    """A task string or a sketch name holding "<!--<script>" (which put the HTML parser in the
    script's escaped state, swallowed the page's own code and showed 0 episodes) or
    "</script><b>": the page's data element holds no "<", ">" or "&" at all, and reads back as
    the strings given."""
    from taco_app.interop import review
    recorder = review.Recorder()
    hostile = "<!--<script>alert(1)</script><b>x</b>&amp;"
    recorder.add("ep<!--", hostile, ["a<!--", "</script>b"], np.array([0, 0, 1, 1]),
                 np.array([[1.0, 0.0], [0.9, 0.1], [0.1, 0.9], [0.0, 1.0]]), 0.9, True)
    page = tmp_path / "page.html"
    review.write_page(page, recorder, [{"episode": "ep<!--"}], {"dataset": hostile})
    text = page.read_text(encoding="utf-8")
    blob = text.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    assert not set(blob) & set("<>&")
    payload = json.loads(blob)
    assert payload["episodes"][0]["task"] == hostile and payload["episodes"][0]["sketch"] == ["a<!--", "</script>b"]
    assert payload["meta"]["dataset"] == hostile and text.count("<script") == 2


@pytest.mark.parametrize("where", ["out", "inside out", "dataset", "inside dataset"])
def test_the_review_page_never_lands_on_or_inside_a_dataset(work, tmp_path, capsys, where):
    """--report naming the output dataset (an HTML file named o.hdf5 was left, exit 0) or a file
    inside it (le-o/meta/info.json broke the LeRobot dataset), or the dataset read, is refused
    in one line before anything is written."""
    src = work / _name("lerobot")
    out = tmp_path / "le-o"
    report = {"out": out, "inside out": out / "meta" / "info.json", "dataset": src,
              "inside dataset": src / "meta" / "page.html"}[where]
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(out),
                     "--report", str(report)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--report:" in err[0]
    assert "write the review page elsewhere" in err[0] or (where == "dataset" and "exists" in err[0])
    assert not out.exists()


@pytest.mark.slow
def test_a_page_of_hostile_task_strings_renders_every_episode_in_a_real_browser(tmp_path):
    """The escaped data in Debian's chromium: the page with "<!--<script>" in its task strings
    draws its episode (it drew 0 before) and runs no injected script."""
    import subprocess
    from taco_app.interop import review
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium; .ci/run does)")
    recorder = review.Recorder()
    for i in range(2):
        recorder.add(f"e{i}", "<!--<script>document.title='owned'</script>", ["a", "b"], np.array([0, 0, 1, 1]),
                     np.array([[1.0, 0.0], [0.9, 0.1], [0.1, 0.9], [0.0, 1.0]]), 0.9, True)
    page = tmp_path / "page.html"
    review.write_page(page, recorder, [{"episode": "e0"}], {"dataset": "<!--<script>"})
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'data-rendered="2"' in dom and dom.count("<canvas") == 2, dom[-2000:]
    assert "<title>owned</title>" not in dom


def test_a_declared_feature_width_beyond_a_vectors_is_refused_before_any_allocation(work, tmp_path, capsys):
    """info.json declaring observation.state of shape [1000000000] (7.45 GiB of float64 a frame
    before a row was read, then a traceback) is one line naming the key and the bound."""
    import resource
    src = _copy(work, "lerobot", tmp_path)
    info = json.loads((src / "meta" / "info.json").read_text())
    info["features"]["observation.state"]["shape"] = [1_000_000_000]
    (src / "meta" / "info.json").write_text(json.dumps(info))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert cli.main(["annotate", str(src), "--model", str(work / "run" / "model"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "observation.state: shape [1000000000]" in err[0] and "at most 65536" in err[0]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000            # kB: no huge array


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_into_an_existing_path_names_out_not_an_option_never_given(work, tmp_path, fmt, capsys):
    """`taco export` into an existing folder blamed --sketches-out, which was never passed: the
    existing --out is named first, and a sketches file left beside a new --out is named as that."""
    before = _digest(work / _name(fmt))
    assert cli.main(["export", str(work / "nav.npz"), "--format", fmt, "--out", str(work / _name(fmt))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("taco export: --out: ") and "exists" in err and "--sketches-out" not in err, err
    assert _digest(work / _name(fmt)) == before
    stale = Path(interop.default_sketches_path(str(tmp_path / _name(fmt, "new"))))
    stale.write_text("left: [a]\n")
    assert cli.main(["export", str(work / "nav.npz"), "--format", fmt, "--out", str(tmp_path / _name(fmt, "new"))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("taco export: --out: the sketches file written beside it") and "--sketches-out" in err, err
    assert stale.read_text() == "left: [a]\n" and not os.path.exists(tmp_path / _name(fmt, "new"))
