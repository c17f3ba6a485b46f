"""The labels `taco annotate` writes, read by the real clients (slow tier; CI runs it).

Nav-World and Dial demonstrations are exported to LeRobot v3 and robomimic with `taco export`,
their labels stripped, and annotated again by `taco annotate` from the sketches alone:
Nav-World by TACO trained on the exported dataset itself (the navworld config cut to 40 epochs:
the alignment settles long before the 300 that sharpen STOP for execution; 99.71 % against
99.78 % with 300, at a seventh of the training), the Dial by the shipped Dial model. The results are then read

- through the real lerobot library's own API, in a separate Python 3.12 venv with
  lerobot[dataset]==0.6.1 that this test creates (lerobot 0.5 and later need Python >= 3.12;
  taco_ref stays on its own Python without torch): LeRobotDataset loads every frame, and
  lerobot's active_at(t, style="subtask") resolves each frame's sub-task row
  (tests/lerobot_readback.py);
- through h5py in robomimic's layout, with MimicGen's termination signals parsed as MimicGen's
  parse_source_dataset parses them (test_interop.plain_mimicgen_parse);

and, for Nav-World, the same model also annotates a dataset that lerobot's own recorder wrote
(tests/lerobot_write.py: its schema metadata, row groups, statistics and episode table), read
back the same way;

and compared frame by frame with the true labels: at least 99 % of Nav-World's frames and 97 %
of the Dial's must agree.

The venv is cached outside the repository, keyed by the lerobot and Python versions
($TACO_LEROBOT_VENV, else ~/.cache/taco_ref/lerobot-0.6.1-py3.12): the first run builds it
(about 5.6 GB with torch's CUDA wheels, 1.5 min here), later runs reuse it. Python 3.12 is
looked up as $TACO_PYTHON312, pyenv's versions, then python3.12 on PATH.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
h5py = pytest.importorskip("h5py")

import taco_sim  # noqa: E402
from taco_ref import data  # noqa: E402
from taco_app import cli, interop  # noqa: E402
from taco_app.interop import lerobot  # noqa: E402
from test_interop import plain_mimicgen_parse  # noqa: E402

pytestmark = pytest.mark.slow

LEROBOT_VERSION = "0.6.1"
HERE = os.path.dirname(os.path.abspath(__file__))
THRESHOLD = {"navworld": 0.99, "dial": 0.97}
SETUP = {"navworld": dict(n=400, sketch_len=3, seed=11), "dial": dict(n=60, sketch_len=4, seed=12)}
RECORDED = 100
"""Nav-World episodes also written by lerobot's own recorder (tests/lerobot_write.py)."""


def python312():
    """A Python 3.12 interpreter that runs (pyenv's shim for python3.12 is on PATH but exits 127
    where 3.12 is not pyenv's selected version), or the test fails saying how to provide one."""
    candidates = [os.environ.get("TACO_PYTHON312")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    candidates += [shutil.which("python3.12")]
    for c in candidates:
        if c and os.path.exists(c):
            probe = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                                   capture_output=True, text=True)
            if probe.returncode == 0 and probe.stdout.strip() == "True":
                return c
    pytest.fail("lerobot >= 0.5 needs Python 3.12: set TACO_PYTHON312 or put a working python3.12 on PATH")


def _ready(python):
    """Whether python imports lerobot LEROBOT_VERSION."""
    if not os.path.exists(python):
        return False
    probe = subprocess.run([python, "-c", "import lerobot; print(lerobot.__version__)"],
                           capture_output=True, text=True)
    return probe.returncode == 0 and probe.stdout.strip() == LEROBOT_VERSION


def lerobot_python():
    """The Python of a venv with the real lerobot, built on first use (cached, see the module
    docstring); built beside its final path and renamed there, so an interrupted build is
    never taken for a finished one."""
    venv = os.environ.get("TACO_LEROBOT_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "taco_ref",
        f"lerobot-{LEROBOT_VERSION}-py3.12")
    python = os.path.join(venv, "bin", "python")
    if _ready(python):
        return python
    building = f"{venv}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    subprocess.run([python312(), "-m", "venv", building], check=True)
    install = subprocess.run([os.path.join(building, "bin", "python"), "-m", "pip", "install", "-q",
                              f"lerobot[dataset]=={LEROBOT_VERSION}"], capture_output=True, text=True)
    if install.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        pytest.fail(f"pip install lerobot[dataset]=={LEROBOT_VERSION} failed:\n{install.stderr[-3000:]}")
    shutil.rmtree(venv, ignore_errors=True)
    os.rename(building, venv)
    assert _ready(python), f"{python} does not import lerobot {LEROBOT_VERSION}"
    return python


# ------------------------------------------------------------------------------------------
# Taking the labels out again
# ------------------------------------------------------------------------------------------

def strip_lerobot(root):
    """Remove every label column (and its declaration), meta/episodes' sub-task columns and
    meta/subtasks.parquet."""
    for path in glob.glob(os.path.join(root, "data", "*", "*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns([c for c in lerobot.ANNOTATION_COLUMNS if c in table.column_names]), path)
    info_path = os.path.join(root, "meta", "info.json")
    with open(info_path) as f:
        info = json.load(f)
    for c in lerobot.ANNOTATION_COLUMNS:
        info["features"].pop(c, None)
    with open(info_path, "w") as f:
        json.dump(info, f, indent=4)
    os.unlink(os.path.join(root, "meta", "subtasks.parquet"))
    for path in glob.glob(os.path.join(root, "meta", "episodes", "*", "*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns([c for c in lerobot.SARM_COLUMNS if c in table.column_names]), path)


def strip_robomimic(path):
    with h5py.File(path, "r+") as f:
        for g in f["data"].values():
            del g["subtask_index"]
            del g["datagen_info"]
            del g.attrs["sketch"]


# ------------------------------------------------------------------------------------------
# The round trip
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lerobot_py():
    return lerobot_python()


def _truth(demos):
    """(positions, names) per demonstration: the true sketch position and sub-task name of every frame."""
    out = []
    for n in range(demos.n):
        T = demos.traj_len[n]
        pos = demos.labels[n, :T]
        out.append((pos, [demos.vocab[demos.sketch[n, p]] for p in pos]))
    return out


def _lerobot_env(tmp_path):
    return dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONWARNINGS="ignore")


def _read_with_lerobot(python, root, truth, tmp_path):
    """(readback, share of frames whose active_at position is the true one, the same by
    sub-task name) of the labelled LeRobot dataset at root, read by lerobot_readback.py; every
    frame's active row must be the one its subtask.position and subtask_index columns name."""
    out = tmp_path / (root.name + ".readback.json")
    read = subprocess.run([python, os.path.join(HERE, "lerobot_readback.py"), str(root), str(out)],
                          capture_output=True, text=True, env=_lerobot_env(tmp_path))
    assert read.returncode == 0, read.stderr[-3000:]
    with open(out) as f:
        back = json.load(f)
    frames = back["frames"]
    assert len(frames) == sum(len(truth[e][0]) for e in {f[0] for f in frames})
    agree_pos = agree_name = 0
    for episode, frame, name, position, subtask_index, written_position in frames:
        pos, names = truth[episode]
        assert name is not None and position == written_position          # active_at = the columns
        assert name == back["subtasks"][subtask_index]
        agree_pos += position == pos[frame]
        agree_name += name == names[frame]
    return back, agree_pos / len(frames), agree_name / len(frames)


def _annotate(argv):
    code = cli.main(["annotate", *argv])
    assert code == 0, f"taco annotate {' '.join(argv)} exited {code}"


@pytest.mark.parametrize("domain", ["navworld", "dial"])
def test_real_lerobot_and_mimicgen_read_the_labels(domain, tmp_path, lerobot_py, capsys):
    """spec/interop.md eq. (4), (5), (6), (7): labels written by taco annotate from the sketches alone
    are read back by lerobot's LeRobotDataset and active_at, and by MimicGen's parse of the
    termination signals, and agree with the true labels on at least 99 % (Nav-World, TACO
    trained on the dataset) and 97 % (the Dial, shipped model) of the frames."""
    s = SETUP[domain]
    demos = taco_sim.get(domain).collect(s["n"], s["sketch_len"], s["seed"])
    data.save(demos, tmp_path / "demos.npz")
    truth = _truth(demos)
    for fmt, out in (("lerobot", "ds"), ("robomimic", "ds.hdf5")):
        assert cli.main(["export", str(tmp_path / "demos.npz"), "--format", fmt, "--out", str(tmp_path / out),
                         "--sketches-out", str(tmp_path / f"{fmt}.yaml")]) == 0
    strip_lerobot(tmp_path / "ds")
    strip_robomimic(tmp_path / "ds.hdf5")
    for path in (tmp_path / "ds", tmp_path / "ds.hdf5"):   # no label is left to copy
        ds = interop.open_dataset(str(path))
        assert all(info.sketch is None for info in ds.describe())
        if hasattr(ds, "close"):
            ds.close()

    if domain == "navworld":
        model = tmp_path / "nav.taco-model" / "model"
        _annotate([str(tmp_path / "ds"), "--sketches", str(tmp_path / "lerobot.yaml"), "--out", str(tmp_path / "ann"),
                   "--config", "navworld", "--seed", "0", "--set", "epochs=40", "--set", "patience=40",
                   "--save-model", str(tmp_path / "nav.taco-model")])
    else:
        model = taco_sim.get("dial").models["default"]
        _annotate([str(tmp_path / "ds"), "--sketches", str(tmp_path / "lerobot.yaml"), "--out", str(tmp_path / "ann"),
                   "--model", str(model)])
    _annotate([str(tmp_path / "ds.hdf5"), "--sketches", str(tmp_path / "robomimic.yaml"),
               "--out", str(tmp_path / "ann.hdf5"), "--model", str(model)])
    report = capsys.readouterr().out

    # lerobot's own API, in its own venv
    back, lerobot_agreement, by_name = _read_with_lerobot(lerobot_py, tmp_path / "ann", truth, tmp_path)
    assert back["episodes"] == demos.n and back["features"]["language_persistent"] == "language"
    # lerobot's SARM reads the per-episode columns of meta/episodes to the same frame
    written = {(e, f): (p, name) for e, f, name, p, _, _ in back["frames"]}
    assert back["sarm"] is not None and back["sarm_legacy_equal"]
    assert len(back["sarm"]) == len(written)
    assert all(written[(e, f)] == (p, name) for e, f, p, name in back["sarm"])
    assert back["posterior_shape"] == [s["sketch_len"]] and len(back["confidence"]) == demos.n

    # robomimic's layout through h5py, MimicGen's signals parsed as MimicGen parses them
    agree_idx = agree_mg = total = 0
    with h5py.File(tmp_path / "ann.hdf5", "r") as f:
        for n in range(demos.n):
            g = f[f"data/demo_{n}"]
            sketch = json.loads(g.attrs["sketch"])
            index = g["subtask_index"][()]
            T = len(index)
            signals = {k: g["datagen_info/subtask_term_signals"][k][()] for k in g["datagen_info/subtask_term_signals"]}
            bounds = plain_mimicgen_parse(signals, sketch, T)
            assert bounds is not None, f"demo_{n}: MimicGen finds no end of a sub-task"
            parsed = np.concatenate([np.full(b - a, l) for l, (a, b) in enumerate(bounds)])
            np.testing.assert_array_equal(parsed, index)                     # signals = subtask_index
            pos, _ = truth[n]
            agree_idx += int((index == pos).sum())
            agree_mg += int((parsed == pos).sum())
            total += T
    robomimic_agreement, mimicgen_agreement = agree_idx / total, agree_mg / total
    recorded = ""
    if domain == "navworld":                 # a dataset lerobot's own recorder wrote, annotated likewise
        n = RECORDED
        with open(tmp_path / "recorded.yaml", "w") as f:
            json.dump({f"task {i}": [demos.vocab[k] for k in demos.sketch[i, :demos.sketch_len[i]]]
                       for i in range(n)}, f)
        write = subprocess.run([lerobot_py, os.path.join(HERE, "lerobot_write.py"), str(tmp_path / "demos.npz"),
                                "2", str(n), str(tmp_path / "recorded")], capture_output=True, text=True,
                               env=_lerobot_env(tmp_path))
        assert write.returncode == 0, write.stderr[-3000:]
        _annotate([str(tmp_path / "recorded"), "--sketches", str(tmp_path / "recorded.yaml"),
                   "--out", str(tmp_path / "recorded-ann"), "--model", str(model)])
        _, rec_agreement, _ = _read_with_lerobot(lerobot_py, tmp_path / "recorded-ann", truth, tmp_path)
        recorded = f", lerobot-recorded dataset ({n} episodes) {100 * rec_agreement:.2f} %"
        assert rec_agreement >= THRESHOLD[domain]
    print(f"\n{domain}: {demos.n} episodes, {total} frames; agreement with the true labels: lerobot "
          f"active_at {100 * lerobot_agreement:.2f} % (by name {100 * by_name:.2f} %){recorded}, "
          f"robomimic subtask_index {100 * robomimic_agreement:.2f} %, MimicGen parse "
          f"{100 * mimicgen_agreement:.2f} %\n{report}", file=sys.stderr)
    for value in (lerobot_agreement, robomimic_agreement, mimicgen_agreement):
        assert value >= THRESHOLD[domain]
