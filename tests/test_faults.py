"""Fault injection and bad input through the `taco` command line (issue 11's campaign classes).

Every case runs `taco ...` (cli.main) on a hostile or broken input and demands the documented
outcome: an exit code from cli's table (2 bad input, 3 I/O refused, 4 diverged), exactly one
line "taco COMMAND: ..." on stderr naming the input, no traceback, no hang, nothing unpickled
and no work lost. Each case belongs to the class a failure would fall in:

  crash   a traceback or hang instead of one clear line
  silent  bad input accepted, or a figure reported for data that does not fit the model
  lost    finished or in-progress work destroyed

The run ends with a count per class (conftest.py's terminal summary). The ROS node's own
bad-input cases are in tests/test_ros_bridge.py.
"""
import errno
import io
import json
import os
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from taco_ref import data, files as files_mod, model as model_mod
from taco_ref.app import cli

SMALL = ["--set", "epochs=2", "--set", "act_hidden=[8]", "--set", "stop_hidden=[8]",
         "--set", "ctc_hidden=[8]", "--set", "patience=100"]
RESULTS = []
"""(case name, class, passed) of every case run; conftest.py prints the count."""


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Good data and a finished run to break copies of."""
    d = tmp_path_factory.mktemp("faults")
    assert cli.main(["collect", "navworld", "--n", "20", "--sketch-len", "2", "--seed", "1",
                     "--out", str(d / "nav.npz")]) == 0
    assert cli.main(["train", "--data", str(d / "nav.npz"), "--out", str(d / "run"), "--seed", "0"]
                    + SMALL) == 0
    return d


def run(capsys, argv):
    """(exit code, the one stderr line) of `taco argv`; fails on a traceback or several lines."""
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().split("\n")[-1] if code else ""
    return code, err


def expect(capsys, argv, code, *phrases):
    got, line = run(capsys, argv)
    assert got == code, (got, line)
    assert line.startswith(f"taco {argv[0]}") and "Traceback" not in line, line
    for phrase in phrases:
        assert phrase in line, (phrase, line)


CASES = {}


def case(kind):
    """Register a case of class kind (crash, silent, lost); parametrised below."""
    def register(fn):
        CASES[fn.__name__] = (kind, fn)
        return fn
    return register


def _copy(src, dst):
    dst.write_bytes(src.read_bytes())
    return dst


def _npz(path, **arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    return path


# ---- data files --------------------------------------------------------------------------

@case("crash")
def missing_data_file(base, tmp, capsys):
    expect(capsys, ["train", "--data", tmp / "nope.npz", "--out", tmp / "r"], 2, "no such file")


@case("crash")
def text_file_as_data(base, tmp, capsys):
    (tmp / "t.npz").write_text("states,actions\n1,2\n")
    expect(capsys, ["train", "--data", tmp / "t.npz", "--out", tmp / "r"], 2, "not an .npz")


@case("crash")
def npy_renamed_npz(base, tmp, capsys):
    np.save(tmp / "a.npy", np.ones(3))
    os.rename(tmp / "a.npy", tmp / "a.npz")
    expect(capsys, ["align", "--model", base / "run" / "model", "--data", tmp / "a.npz"], 2, "not an .npz")


@case("crash")
def truncated_data(base, tmp, capsys):
    blob = (base / "nav.npz").read_bytes()
    (tmp / "cut.npz").write_bytes(blob[: len(blob) // 2])
    expect(capsys, ["train", "--data", tmp / "cut.npz", "--out", tmp / "r"], 2, "cut.npz")


@case("silent")
def pickled_object_in_data(base, tmp, capsys):
    marker = tmp / "pwned"

    class Hostile:
        def __reduce__(self):
            return os.mkdir, (str(marker),)
    arrays = dict(np.load(base / "nav.npz", allow_pickle=False))
    arrays["states"] = np.array([Hostile()], dtype=object)
    buf = io.BytesIO()
    np.savez(buf, **arrays, allow_pickle=True)
    (tmp / "h.npz").write_bytes(buf.getvalue())
    expect(capsys, ["train", "--data", tmp / "h.npz", "--out", tmp / "r"], 2, "Python objects")
    assert not marker.exists()


@case("crash")
def forged_array_header(base, tmp, capsys):
    """A header claiming 10^13 float64 (73 TiB) over a few bytes of data."""
    good = _npz(tmp / "g.npz", states=np.zeros(4))
    with zipfile.ZipFile(good) as zf:
        blob = zf.read("states.npy")
    forged = blob.replace(b"(4,)", b"(10000000000000,)".ljust(4)).replace(b"(4,)", b"")
    header_len = blob.index(b"\n") + 1
    header = blob[:header_len].replace(b"'shape': (4,)", b"'shape': (10000000000000,)")
    pad = (64 - len(header) % 64) % 64
    header = header[:-1] + b" " * pad + b"\n"
    header = header[:8] + int(len(header) - 10).to_bytes(2, "little") + header[10:]
    forged = header + blob[header_len:]
    with zipfile.ZipFile(tmp / "f.npz", "w") as zf:
        zf.writestr("states.npy", forged)
    expect(capsys, ["train", "--data", tmp / "f.npz", "--out", tmp / "r"], 2, "claims")


@case("crash")
def data_is_a_fifo(base, tmp, capsys):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp / "fifo.npz")
    expect(capsys, ["train", "--data", tmp / "fifo.npz", "--out", tmp / "r"], 2, "not a regular file")


@case("crash")
def data_linked_to_dev_zero(base, tmp, capsys):
    os.symlink("/dev/zero", tmp / "zero.npz")
    expect(capsys, ["train", "--data", tmp / "zero.npz", "--out", tmp / "r"], 2, "not a regular file")


# ---- model directories -------------------------------------------------------------------

def _model_copy(base, tmp):
    src, dst = base / "run" / "model", tmp / "model"
    dst.mkdir()
    for name in os.listdir(src):
        _copy(src / name, dst / name)
    return dst


def _edit_meta(directory, **changes):
    meta = json.loads((directory / "model.json").read_text())
    meta.update(changes)
    (directory / "model.json").write_text(json.dumps(meta))
    return meta


@case("crash")
def model_with_a_huge_architecture(base, tmp, capsys):
    m = _model_copy(base, tmp)
    meta = json.loads((m / "model.json").read_text())
    _edit_meta(m, policy=dict(meta["policy"], act_hidden=[10 ** 6, 10 ** 6]))
    expect(capsys, ["evaluate", "--model", m, "--n-tasks", "1"], 2, "parameters")


@case("crash")
def model_json_nested_100000_deep(base, tmp, capsys):
    m = _model_copy(base, tmp)
    (m / "model.json").write_text("[" * 100_000 + "]" * 100_000)
    expect(capsys, ["evaluate", "--model", m, "--n-tasks", "1"], 2, "nested too deeply")


@case("silent")
def model_with_a_duplicated_vocabulary(base, tmp, capsys):
    m = _model_copy(base, tmp)
    meta = json.loads((m / "model.json").read_text())
    _edit_meta(m, vocab=[meta["vocab"][0]] * len(meta["vocab"]))
    expect(capsys, ["evaluate", "--model", m, "--n-tasks", "1"], 2, "distinct")


@case("silent")
def model_weights_edited(base, tmp, capsys):
    m = _model_copy(base, tmp)
    weights = model_mod.weights_file(m)
    blob = bytearray(open(weights, "rb").read())
    blob[-40] ^= 0xFF
    open(weights, "wb").write(bytes(blob))
    expect(capsys, ["evaluate", "--model", m, "--n-tasks", "1"], 2, "SHA-256")


@case("crash")
def model_weights_are_a_fifo(base, tmp, capsys):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    m = _model_copy(base, tmp)
    weights = model_mod.weights_file(m)
    os.remove(weights)
    os.mkfifo(weights)
    expect(capsys, ["evaluate", "--model", m, "--n-tasks", "1"], 2, "not a regular file")


# ---- configs -----------------------------------------------------------------------------

def _train_with_config(base, tmp, capsys, text, *phrases, code=2):
    (tmp / "c.yaml").write_text(text)
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", tmp / "r", "--config", tmp / "c.yaml"],
           code, *phrases)


@case("crash")
def yaml_syntax_error(base, tmp, capsys):
    _train_with_config(base, tmp, capsys, "train:\n  lr: [1, 2\n", "not valid YAML at line")


@case("crash")
def yaml_train_is_null(base, tmp, capsys):
    _train_with_config(base, tmp, capsys, "train:\n", "'train' must be a mapping")


@case("crash")
def yaml_alias_bomb(base, tmp, capsys):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    _train_with_config(base, tmp, capsys, "\n".join(lines + ["train:", "  act_hidden: *a8"]) + "\n",
                       "aliases")


@case("silent")
def yaml_unknown_key(base, tmp, capsys):
    _train_with_config(base, tmp, capsys, "train:\n  lerning_rate: 0.1\n", "unknown config keys")


@case("silent")
def learning_rate_that_diverges(base, tmp, capsys):
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", tmp / "r"] + SMALL
           + ["--set", "lr=1e10", "--set", "epochs=5"], 4, "diverged")
    assert not (tmp / "r" / "model").exists()


@case("silent")
def number_field_given_text(base, tmp, capsys):
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", tmp / "r", "--set", "sigma=abc"],
           2, "sigma must be a positive number")


@case("crash")
def hidden_size_of_a_billion(base, tmp, capsys):
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", tmp / "r",
                    "--set", "act_hidden=[1000000000]"], 2, "act_hidden")


# ---- checkpoints -------------------------------------------------------------------------

def _stopped_run(base, tmp, capsys):
    out = tmp / "part"
    assert cli.main(["train", "--data", str(base / "nav.npz"), "--out", str(out), "--stop-after", "1",
                     "--seed", "2"] + SMALL) == 0
    capsys.readouterr()
    return out


def _resume(base, out):
    return ["train", "--data", base / "nav.npz", "--out", out, "--resume", "--seed", "2"] + SMALL


@case("crash")
def checkpoint_missing_a_key(base, tmp, capsys):
    out = _stopped_run(base, tmp, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    del meta["adam"]
    (out / "checkpoint.json").write_text(json.dumps(meta))
    expect(capsys, _resume(base, out), 2, "'adam' missing")


@case("silent")
def checkpoint_stage_tampered(base, tmp, capsys):
    out = _stopped_run(base, tmp, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    (out / "checkpoint.json").write_text(json.dumps(dict(meta, stage=5)))
    expect(capsys, _resume(base, out), 2, "cannot resume")
    assert not (out / "model").exists()


@case("silent")
def checkpoint_arrays_replaced(base, tmp, capsys):
    out = _stopped_run(base, tmp, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    _npz(out / meta["arrays_file"], x=np.ones(2))
    expect(capsys, _resume(base, out), 2, "SHA-256")


# ---- command-line arguments --------------------------------------------------------------

@case("crash")
def zero_test_tasks(base, tmp, capsys):
    expect(capsys, ["evaluate", "--model", base / "run" / "model", "--n-tasks", "0"], 2, "--n-tasks")


@case("silent")
def zero_workers(base, tmp, capsys):
    expect(capsys, ["collect", "navworld", "--n", "2", "--workers", "0", "--out", tmp / "d.npz"], 2, "--workers")


@case("silent")
def zero_sketch_length(base, tmp, capsys):
    expect(capsys, ["collect", "navworld", "--n", "2", "--sketch-len", "0", "--out", tmp / "d.npz"], 2,
           "--sketch-len")


@case("crash")
def a_million_digit_pin(base, tmp, capsys):
    expect(capsys, ["collect", "dial", "--n", "1", "--sketch-len", "1000000", "--out", tmp / "d.npz"], 2,
           "sketch_len")


@case("crash")
def out_is_a_file(base, tmp, capsys):
    (tmp / "file").write_text("x")
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", tmp / "file"] + SMALL, 2, "not a directory")


@case("crash")
def unknown_domain(base, tmp, capsys):
    expect(capsys, ["evaluate", "--model", base / "run" / "model", "--domain", "atari"], 2, "invalid choice")


# ---- model and data that do not fit ------------------------------------------------------

def _demos_variant(base, path, **changes):
    d = data.load(base / "nav.npz")
    for name, value in changes.items():
        setattr(d, name, value)
    data.save(d, path)
    return path


@case("silent")
def data_with_a_permuted_vocabulary(base, tmp, capsys):
    d = data.load(base / "nav.npz")
    path = _demos_variant(base, tmp / "p.npz", vocab=tuple(reversed(d.vocab)))
    expect(capsys, ["align", "--model", base / "run" / "model", "--data", path], 2, "vocabulary")


@case("silent")
def data_with_renamed_sub_tasks(base, tmp, capsys):
    d = data.load(base / "nav.npz")
    path = _demos_variant(base, tmp / "n.npz", vocab=tuple(v.upper() for v in d.vocab))
    expect(capsys, ["evaluate", "--model", base / "run" / "model", "--n-tasks", "1", "--data", path], 2,
           "vocabulary")


@case("crash")
def data_with_another_state_size(base, tmp, capsys):
    d = data.load(base / "nav.npz")
    path = _demos_variant(base, tmp / "s.npz", states=np.concatenate([d.states, d.states], axis=2),
                          final_state=np.concatenate([d.final_state, d.final_state], axis=1))
    expect(capsys, ["align", "--model", base / "run" / "model", "--data", path], 2, "dimensions")


# ---- work that must not be lost ----------------------------------------------------------

@case("lost")
def retraining_over_a_checkpoint_without_resume(base, tmp, capsys):
    out = _stopped_run(base, tmp, capsys)
    before = (out / "checkpoint.json").read_bytes()
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", out, "--seed", "2"] + SMALL, 2, "--resume")
    assert (out / "checkpoint.json").read_bytes() == before


@case("lost")
def retraining_over_a_finished_model_without_overwrite(base, tmp, capsys):
    m = _model_copy(base, tmp)
    before = (m / "model.json").read_bytes()
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", tmp] + SMALL, 2, "already holds")
    assert (m / "model.json").read_bytes() == before


@case("lost")
def stop_after_zero_leaves_a_checkpoint(base, tmp, capsys):
    code, _ = run(capsys, ["train", "--data", base / "nav.npz", "--out", tmp / "z", "--stop-after", "0"] + SMALL)
    assert code == 0 and (tmp / "z" / "checkpoint.json").exists()


@case("lost")
def stale_temporaries_are_removed(base, tmp, capsys):
    out = _stopped_run(base, tmp, capsys)
    stale = out / (files_mod.TEMP_PREFIX + "x-checkpoint-0.npz")
    stale.write_bytes(b"half written")
    os.utime(stale, (0, 0))                                      # left by a writer killed long ago
    code, _ = run(capsys, _resume(base, out))
    assert code == 0 and not stale.exists()


@case("lost")
def files_honour_the_umask(base, tmp, capsys):
    old = os.umask(0o027)
    try:
        code, _ = run(capsys, ["collect", "navworld", "--n", "2", "--out", tmp / "m.npz"])
    finally:
        os.umask(old)
    assert code == 0 and (os.stat(tmp / "m.npz").st_mode & 0o777) == 0o640


@case("lost")
def disk_full_while_checkpointing(base, tmp, capsys, monkeypatch):
    """ENOSPC on the second checkpoint write: exit 3 with one line, and the checkpoint that was
    there stays whole (the run resumes from it)."""
    out = _stopped_run(base, tmp, capsys)
    before = (out / "checkpoint.json").read_bytes()
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    expect(capsys, _resume(base, out), 3, "No space left on device")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert (out / "checkpoint.json").read_bytes() == before
    assert not [n for n in os.listdir(out) if n.startswith(files_mod.TEMP_PREFIX)]
    code, _ = run(capsys, _resume(base, out))
    assert code == 0


@case("crash")
def read_only_output(base, tmp, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system", str(tmp / "ro"))
    monkeypatch.setattr(files_mod.tempfile, "mkstemp", refuse)
    expect(capsys, ["collect", "navworld", "--n", "2", "--out", tmp / "ro" / "d.npz"], 3, "Read-only file system")


@pytest.mark.parametrize("name", sorted(CASES))
def test_fault(name, base, tmp_path, capsys, monkeypatch):
    kind, fn = CASES[name]
    passed = False
    try:
        if "monkeypatch" in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
            fn(base, tmp_path, capsys, monkeypatch)
        else:
            fn(base, tmp_path, capsys)
        passed = True
    finally:
        RESULTS.append((name, kind, passed))


@given(blob=st.binary(max_size=2048), keep=st.integers(0, 4096))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_bytes_as_a_data_file_give_one_line(base, tmp_path, capsys, blob, keep):
    """Arbitrary bytes, and every prefix of a real data file, are refused with exit 2 and one
    line (or, for the whole real file, accepted): never a traceback."""
    path = tmp_path / "fuzz.npz"
    real = (base / "nav.npz").read_bytes()
    for candidate in (blob, real[:keep], real[:keep] + blob):
        path.write_bytes(candidate)
        code, line = run(capsys, ["align", "--model", base / "run" / "model", "--data", path])
        assert code == 2 and line.startswith("taco align: ") and "fuzz.npz" in line, line
