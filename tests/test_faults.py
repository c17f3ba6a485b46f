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
import resource
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from taco_ref import data, model as model_mod
from taco_ref.plumbing import files as files_mod
from taco_app import cli
import taco_sim

SMALL = ["--set", "epochs=2", "--set", "act_hidden=[8]", "--set", "stop_hidden=[8]",
         "--set", "ctc_hidden=[8]", "--set", "patience=100"]
RESULTS = []
"""(case name, class, passed) of every case run; conftest.py prints the count."""
SHIPPED_DIAL = taco_sim.get("dial").models["default"]


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
    """(exit code, the one stderr line) of `taco argv`. On failure stderr must hold progress
    lines (each rewritten in place: it starts with a carriage return) and then exactly one line
    "taco COMMAND: ..." of its own: no warning or traceback before it, and not glued to a
    progress line that was never ended."""
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    if not code:
        return code, ""
    lines = capsys.readouterr().err.rstrip("\n").split("\n")
    *before, err = lines
    assert all(line.startswith("\r") for line in before), lines
    assert "\r" not in err and err.startswith(f"taco {argv[0]}: "), lines
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
           "--sketch-len")


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


# ---- memory: readers allocate by the file's size -----------------------------------------

ADDRESS_SPACE = 1_500_000_000
"""Bytes of address space the memory cases allow a `taco` process (ulimit -v 1.5 GB): a
reader that asks for its 16 GiB cap at once fails under it, as on a small robot computer."""


def _limited(argv, limit=ADDRESS_SPACE, python=()):
    """(exit code, stderr) of `taco argv` (or of `python *python`) in a child
    process whose address space is limited to limit bytes (RLIMIT_AS, set between fork and
    exec; None: no limit). A child process also shows stderr as a user sees it: in this
    process pytest records warnings instead of printing them."""
    def limit_memory():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    args = list(python) or ["-m", "taco_app.cli"] + [str(a) for a in argv]
    done = subprocess.run([sys.executable] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          preexec_fn=limit_memory)
    return done.returncode, done.stderr.decode(errors="replace")


@case("crash")
def model_read_under_an_address_space_limit(base, tmp, capsys):
    """Reading model.json and the weights asked Python for a 16 GiB buffer (MemoryError)."""
    code, err = _limited(["evaluate", "--model", base / "run" / "model", "--n-tasks", "1"])
    assert code == 0 and "Error" not in err, err


SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "sim", "taco_sim", "dial", "models")


@pytest.fixture(scope="module")
def dial_data(tmp_path_factory):
    """A few demonstrations of each Dial domain, for align and train."""
    import taco_sim
    d = tmp_path_factory.mktemp("dial-data")
    for domain in ("dial", "dial-velocity"):
        data.save(taco_sim.get(domain).collect(6, 2, 5), d / f"{domain}.npz")
    return d


@pytest.mark.slow
@pytest.mark.parametrize("model", ["dial", "dial-velocity"])
def test_shipped_models_run_under_an_address_space_limit(model, dial_data, tmp_path, offscreen_gl):
    """Everything a robot computer does with a shipped model fits in ADDRESS_SPACE: loading it
    (the ROS policy node's start-up), evaluate, align, rollout, and a training run resumed
    with the model's own config (bench/bench_memory.py measures the peak of each)."""
    path = os.path.join(SHIPPED, model)
    runs = {
        "load": None,
        "evaluate": ["evaluate", "--model", path, "--domain", model, "--n-tasks", "2"],
        "align": ["align", "--model", path, "--data", dial_data / f"{model}.npz"],
        "rollout": ["rollout", "--model", path, "--domain", model, "--sketch", "0 5",
                    "--out", tmp_path / "sheet.png"],
    }
    if model == "dial":
        config = ["--config", "dial", "--set", "epochs=2"]                # the shipped model's
        run = tmp_path / "run"
        assert cli.main([str(a) for a in ["train", "--data", dial_data / "dial.npz", "--out", run,
                                          "--stop-after", "1"] + config]) == 0
        runs["train --resume"] = ["train", "--data", dial_data / "dial.npz", "--out", run, "--resume"] + config
    for what, argv in runs.items():
        code, err = (_limited([], python=["-c", f"from taco_ref import model; model.load({path!r})"])
                        if what == "load" else _limited(argv))
        assert code in ((0, 1) if what == "rollout" else (0,)) and "Error" not in err, (what, err)
    assert (tmp_path / "sheet.png").stat().st_size > 0


def test_read_bytes_asks_for_the_files_size_only(tmp_path, monkeypatch):
    """The read buffer is the file's size + 1, whatever the cap; a file that changes size
    between the size check and the read is refused."""
    import builtins
    path = tmp_path / "f.json"
    path.write_bytes(b"{}")
    asked = []
    real_open = builtins.open

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def read(self, n=-1):
            asked.append(n)
            return self.f.read(n)
    monkeypatch.setattr(builtins, "open", lambda p, mode="r", *a, **k: Spy(real_open(p, mode, *a, **k)))
    assert files_mod.read_bytes(path, files_mod.MAX_ARRAY_BYTES) == b"{}"
    assert asked == [3]
    monkeypatch.setattr(files_mod.os, "fstat", lambda fd: os.stat_result((0o100644,) + (0,) * 5 + (1,) + (0,) * 3))
    with pytest.raises(ValueError, match="changed while it was read"):
        files_mod.read_bytes(path, files_mod.MAX_ARRAY_BYTES)


# ---- model files that mean nothing -------------------------------------------------------

def _edit_weights(directory, **arrays):
    """Replace arrays of the weights file (None removes one), recording the new SHA-256 and
    shapes in model.json: a consistent forgery, so that the value checks are reached."""
    import hashlib
    meta = json.loads((directory / "model.json").read_text())
    weights = directory / meta.get("weights_file", "weights.npz")
    with np.load(weights) as z:
        current = {k: z[k] for k in z.files}
    for name, value in arrays.items():
        if value is None:
            current.pop(name)
        else:
            current[name] = value
    _npz(weights, **current)
    meta["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    meta["arrays"] = {k: list(v.shape) for k, v in current.items()}
    (directory / "model.json").write_text(json.dumps(meta))


def _weights(directory):
    with np.load(model_mod.weights_file(directory)) as z:
        return {k: z[k] for k in z.files}


def _refused_model(base, tmp, capsys, *phrases, command="evaluate", meta=None, weights=None, policy=None):
    m = _model_copy(base, tmp)
    if meta:
        _edit_meta(m, **meta)
    if policy:
        current = json.loads((m / "model.json").read_text())["policy"]
        _edit_meta(m, policy=dict(current, **policy))
    if weights:
        _edit_weights(m, **weights(_weights(m)))
    argv = (["evaluate", "--model", m, "--n-tasks", "1"] if command == "evaluate"
            else ["align", "--model", m, "--data", base / "nav.npz"])
    expect(capsys, argv, 2, *phrases)


@case("silent")
def model_with_an_unknown_algorithm(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "algo must be one of", meta={"algo": "bogus"})


@case("silent")
def model_with_a_list_as_algorithm(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "algo must be one of", meta={"algo": ["taco"]})


@case("silent")
def model_config_that_is_a_list(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "config must be an object", meta={"config": [1]})


@case("silent")
def model_config_with_an_unknown_field(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "unknown config keys", meta={"config": {"lerning_rate": 1}})


@case("silent")
def model_config_of_another_algorithm(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "config.algo", meta={"config": {"algo": "gtbc"}})


@case("silent")
def model_info_that_is_text(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "info must be an object", meta={"info": "x"})


@case("silent")
def model_with_an_unknown_field(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "unknown fields ['note']", meta={"note": "x"})


@case("silent")
def model_with_an_extra_weights_array(base, tmp, capsys):
    """Listed in model.json and present in the weights, but no part of the architecture."""
    _refused_model(base, tmp, capsys, "not part of the taco architecture",
                   weights=lambda w: {"extra": np.zeros(3)})


@case("silent")
def model_ctc_kind_that_does_not_match_the_algorithm(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "ctc_kind must be None", meta={"ctc_kind": "gru"})


@case("crash")
def model_with_a_bogus_ctc_kind_in_align(base, tmp, capsys):
    """A KeyError traceback in align before."""
    m = _model_copy(base, tmp)
    _edit_meta(m, algo="ctcbc-mlp", ctc_kind="bogus", config={})
    expect(capsys, ["align", "--model", m, "--data", base / "nav.npz"], 2, "ctc_kind must be 'mlp'")


@case("silent")
def model_ctc_weights_of_another_kind(base, tmp, capsys):
    """A CTC-BC (MLP) model whose classifier arrays are a GRU's."""
    from taco_ref import objectives
    m = _model_copy(base, tmp)
    _edit_meta(m, algo="ctcbc-mlp", ctc_kind="mlp", config={})
    meta = json.loads((m / "model.json").read_text())
    D, A, K = meta["policy"]["state_dim"], meta["policy"]["action_dim"], meta["policy"]["n_subtasks"]
    gru = objectives.init_ctc_params(np.random.default_rng(0), "gru", D + A, [4], K)
    _edit_weights(m, **gru)
    expect(capsys, ["align", "--model", m, "--data", base / "nav.npz"], 2, "ctc.W0")


@case("crash")
def model_sigma_of_1e300_in_align(base, tmp, capsys):
    """An OverflowError traceback in align before."""
    _refused_model(base, tmp, capsys, "sigma must be a positive number in", command="align",
                   policy={"sigma": 1e300})


@case("silent")
def model_sigma_far_below_the_range(base, tmp, capsys):
    """Align reported 0.00 % for it."""
    _refused_model(base, tmp, capsys, "sigma must be a positive number in", command="align",
                   policy={"sigma": 1e-30})


@case("silent")
def model_sigma_that_is_a_boolean(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "sigma must be", policy={"sigma": True})


@case("silent")
def model_weights_scaled_by_1e200(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "act.W0 holds values up to 1",
                   weights=lambda w: {"act.W0": w["act.W0"] * 1e200})


@case("silent")
def model_norm_std_of_zero(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "norm.std must lie in",
                   weights=lambda w: {"norm.std": np.zeros_like(w["norm.std"])})


@case("silent")
def model_learned_log_std_far_out(base, tmp, capsys):
    def add_logstd(w):
        K, A = w["act.b0"].shape[0], w[max(k for k in w if k.startswith("act.b"))].shape[1]
        return {"act.logstd": np.full((K, A), 300.0)}
    m = _model_copy(base, tmp)
    current = json.loads((m / "model.json").read_text())
    _edit_meta(m, policy=dict(current["policy"], learn_sigma=True), config={})
    _edit_weights(m, **add_logstd(_weights(m)))
    expect(capsys, ["evaluate", "--model", m, "--n-tasks", "1"], 2, "act.logstd must lie in")


@case("silent")
def model_vocabulary_given_as_a_string(base, tmp, capsys):
    meta = json.loads((base / "run" / "model" / "model.json").read_text())
    _refused_model(base, tmp, capsys, "vocab must be a list", meta={"vocab": "".join(meta["vocab"])})


@case("silent")
def model_discrete_flag_that_is_text(base, tmp, capsys):
    _refused_model(base, tmp, capsys, "discrete must be true or false", policy={"discrete": "no"})


# ---- data files that mean nothing --------------------------------------------------------

def _data_arrays(base):
    with np.load(base / "nav.npz") as z:
        return {k: z[k] for k in z.files}


@case("silent")
def data_states_of_1e300(base, tmp, capsys):
    """train, align and evaluate exited 0 on it (train then blamed the learning rate)."""
    d = data.load(base / "nav.npz")
    arrays = _data_arrays(base)
    arrays["states"] = arrays["states"].copy()
    arrays["states"][0, d.traj_len[0] - 1, 0] = 1e300
    path = _npz(tmp / "s.npz", **arrays)
    for argv in (["train", "--data", path, "--out", tmp / "r"] + SMALL,
                 ["align", "--model", base / "run" / "model", "--data", path],
                 ["evaluate", "--model", base / "run" / "model", "--n-tasks", "1", "--data", path]):
        expect(capsys, argv, 2, "states", "magnitude at most 1e+06")


@case("silent")
def data_actions_of_1e300(base, tmp, capsys):
    arrays = _data_arrays(base)
    arrays["actions"] = arrays["actions"] * 1e300
    path = _npz(tmp / "a.npz", **arrays)
    expect(capsys, ["train", "--data", path, "--out", tmp / "r"] + SMALL, 2, "actions", "magnitude")


@case("silent")
def data_vocabulary_as_one_string(base, tmp, capsys):
    """A 0-d string was split into its characters, one sub-task each."""
    arrays = _data_arrays(base)
    arrays["vocab"] = np.array("".join(str(v)[0] for v in arrays["vocab"]))
    path = _npz(tmp / "v.npz", **arrays)
    expect(capsys, ["align", "--model", base / "run" / "model", "--data", path], 2, "vocab", "1-d array")


@case("silent")
def data_vocabulary_of_integers(base, tmp, capsys):
    arrays = _data_arrays(base)
    arrays["vocab"] = np.arange(len(arrays["vocab"]))
    path = _npz(tmp / "i.npz", **arrays)
    expect(capsys, ["train", "--data", path, "--out", tmp / "r"], 2, "vocab", "strings")


@case("crash")
def data_with_a_billion_discrete_actions(base, tmp, capsys):
    """A one-hot table of n_actions^2 would be allocated by CTC-BC."""
    arrays = _data_arrays(base)
    arrays["actions"] = np.zeros(arrays["actions"].shape[:2], dtype=np.int64)
    arrays["meta"] = np.array(json.dumps(dict(json.loads(str(arrays["meta"])), n_actions=10 ** 9)))
    path = _npz(tmp / "d.npz", **arrays)
    expect(capsys, ["train", "--algo", "ctcbc-mlp", "--data", path, "--out", tmp / "r"], 2, "n_actions")


# ---- the remaining tracebacks, and options that do nothing --------------------------------

@case("crash")
def checkpoint_with_a_garbage_generator_state(base, tmp, capsys):
    """A TypeError traceback on --resume before."""
    out = _stopped_run(base, tmp, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    meta["rng"]["state"] = {"state": "garbage", "inc": [1]}
    (out / "checkpoint.json").write_text(json.dumps(meta))
    expect(capsys, _resume(base, out), 2, "cannot resume", "'rng'")


@case("crash")
def checkpoint_with_a_negative_optimiser_variance(base, tmp, capsys):
    import hashlib
    out = _stopped_run(base, tmp, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    arrays_path = out / meta["arrays_file"]
    with np.load(arrays_path) as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k in arrays if k.startswith("adam.v."))
    arrays[name] = -np.ones_like(arrays[name])
    _npz(arrays_path, **arrays)
    meta["arrays_sha256"] = hashlib.sha256(arrays_path.read_bytes()).hexdigest()
    (out / "checkpoint.json").write_text(json.dumps(meta))
    expect(capsys, _resume(base, out), 2, "cannot resume", name)


@case("crash")
def checkpoint_history_that_is_not_a_record(base, tmp, capsys):
    out = _stopped_run(base, tmp, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    meta["history"], meta["best_loss"] = [1, 2], "low"
    (out / "checkpoint.json").write_text(json.dumps(meta))
    expect(capsys, _resume(base, out), 2, "cannot resume", "best_loss")


@pytest.mark.parametrize("spent", [{"seconds": -1.0, "cpu_seconds": 1.0, "processes": 1},
                                   {"seconds": 1.0, "cpu_seconds": 1.0, "processes": 0},
                                   {"seconds": 1.0, "cpu_seconds": "1", "processes": 1}, [1, 2]])
@pytest.mark.slow
def test_checkpoint_with_a_bad_record_of_its_cost(base, tmp_path, capsys, spent):
    out = _stopped_run(base, tmp_path, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    meta["spent"] = spent
    (out / "checkpoint.json").write_text(json.dumps(meta))
    expect(capsys, _resume(base, out), 2, "cannot resume", "'spent'")


@pytest.mark.slow
def test_a_checkpoint_written_before_its_cost_was_kept_resumes(base, tmp_path, capsys):
    out = _stopped_run(base, tmp_path, capsys)
    meta = json.loads((out / "checkpoint.json").read_text())
    assert meta.pop("spent")["processes"] == 1
    (out / "checkpoint.json").write_text(json.dumps(meta))
    assert run(capsys, _resume(base, out)) == (0, "")
    info = json.loads((out / "model" / "model.json").read_text())["info"]
    assert info["processes"] == 1 and info["earlier"]["processes"] == 0     # counted from the resume


@pytest.mark.parametrize("sigma", ["inf", "1e6", "nan", "-0.1"])
def test_dart_noise_is_bounded_before_collecting(tmp_path, capsys, sigma):
    expect(capsys, ["collect", "navworld", "--n", "2", "--dart-sigma", sigma, "--out", tmp_path / "d.npz"],
           2, "--dart-sigma", "[0, 1]")
    assert not (tmp_path / "d.npz").exists()


@pytest.mark.parametrize("domain, value, phrases", [("dial", "nan", ("--motor-noise", "[0, 0.2]")),
                                                    ("dial-velocity", "0.5", ("--motor-noise", "[0, 0.2]")),
                                                    ("navworld", "0.1", ("--motor-noise", "navworld"))])
def test_motor_noise_is_bounded_and_only_for_the_arm(tmp_path, capsys, domain, value, phrases):
    expect(capsys, ["collect", domain, "--n", "2", "--motor-noise", value, "--out", tmp_path / "d.npz"],
           2, *phrases)
    assert not (tmp_path / "d.npz").exists()


@pytest.mark.parametrize("domain, value, phrases", [("dial", "earthquake", ("--disturbance", "harder")),
                                                    ("navworld", "harder", ("--disturbance", "navworld"))])
def test_a_collection_disturbance_is_a_named_condition_and_only_for_the_arm(tmp_path, capsys, domain, value,
                                                                          phrases):
    expect(capsys, ["collect", domain, "--n", "2", "--disturbance", value, "--out", tmp_path / "d.npz"],
           2, *phrases)
    assert not (tmp_path / "d.npz").exists()


@case("crash")
def dart_noise_of_infinity(base, tmp, capsys):
    """A RuntimeError traceback after 100 redraws before."""
    expect(capsys, ["collect", "navworld", "--n", "2", "--dart-sigma", "inf", "--out", tmp / "d.npz"], 2,
           "--dart-sigma")


@case("crash")
def dart_noise_of_a_million(base, tmp, capsys):
    expect(capsys, ["collect", "dial", "--n", "1", "--dart-sigma", "1e6", "--out", tmp / "d.npz"], 2,
           "--dart-sigma")


@case("crash")
def dart_noise_for_a_discrete_domain(base, tmp, capsys):
    """craft's collect has no dart_sigma (a TypeError traceback before)."""
    expect(capsys, ["collect", "craft", "--n", "2", "--dart-sigma", "0.1", "--out", tmp / "d.npz"], 2,
           "--dart-sigma", "craft")


def _refused_in_a_limited_process(argv, *phrases):
    """`taco argv` in a child limited to ADDRESS_SPACE, so that a count that is not bounded
    ends in a MemoryError there instead of exhausting this machine's memory."""
    code, err = _limited(argv)
    lines = err.rstrip("\n").split("\n")
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"taco {argv[0]}: "), err
    for phrase in phrases:
        assert phrase in lines[0], (phrase, err)


@case("crash")
def a_billion_test_tasks(base, tmp, capsys):
    _refused_in_a_limited_process(["evaluate", "--model", base / "run" / "model", "--n-tasks",
                                   "1000000000"], "--n-tasks", "100000")


@case("crash")
def a_billion_demonstrations(base, tmp, capsys):
    _refused_in_a_limited_process(["collect", "navworld", "--n", "1000000000", "--out", tmp / "d.npz"],
                                  "--n", "100000")


@case("crash")
def a_million_worker_processes(base, tmp, capsys, monkeypatch):
    import multiprocessing

    def no_pool(*args, **kwargs):                # were the count not bounded: no fork storm here
        raise AssertionError("a worker pool was started")
    monkeypatch.setattr(multiprocessing, "get_context", no_pool)
    expect(capsys, ["collect", "dial", "--n", "1", "--workers", "1000000", "--out", tmp / "d.npz"], 2,
           "--workers", "256")


@case("silent")
def workers_for_a_domain_that_collects_in_one_process(base, tmp, capsys):
    """Accepted and ignored before."""
    expect(capsys, ["collect", "navworld", "--n", "2", "--workers", "2", "--out", tmp / "d.npz"], 2,
           "--workers", "navworld")
    assert not (tmp / "d.npz").exists()


@case("silent")
def local_workers_beside_a_scheduler(base, tmp, capsys):
    """The cells run on the scheduler's workers: --workers was accepted and ignored. Refused
    before any connection is tried."""
    expect(capsys, ["experiment", "navworld", "--sizes", "5", "--seeds", "0", "--scheduler",
                    "tcp://127.0.0.1:9", "--workers", "4", "--out", tmp / "grid"], 2, "--workers", "scheduler")
    assert not (tmp / "grid").exists()


@case("silent")
def two_gru_layers_asked_of_ctcbc_gru(base, tmp, capsys):
    """The bi-GRU has one hidden size; [5, 5] silently trained [5]."""
    expect(capsys, ["train", "--algo", "ctcbc-gru", "--data", base / "nav.npz", "--out", tmp / "r",
                    "--set", "ctc_hidden=[5,5]"], 2, "ctc_hidden", "one hidden size")


@case("silent")
def a_key_given_twice_in_a_yaml_file(base, tmp, capsys):
    """yaml.safe_load keeps the last of two equal keys: a config (or a sketches file, whose task
    listed twice with two sketches labelled episodes with the wrong one at confidence 0.999)
    took one value silently."""
    (tmp / "dup.yaml").write_text("epochs: 1\nlr: 0.1\nepochs: 3\n")
    expect(capsys, ["train", "--data", base / "nav.npz", "--out", tmp / "r", "--config", tmp / "dup.yaml"],
           2, "dup.yaml", "'epochs' appears twice (line 1 and line 3)")
    assert not (tmp / "r").exists()


@case("crash")
def a_fifo_given_as_the_dataset(base, tmp, capsys):
    """A named pipe as DATASET blocked annotate forever (the format probe opened and read it)."""
    fifo = tmp / "pipe"
    os.mkfifo(fifo)
    expect(capsys, ["annotate", fifo, "--model", base / "run" / "model", "--out", tmp / "o"], 2,
           "pipe", "not a regular file")
    assert not (tmp / "o").exists()


def _robomimic(path, build):
    """A robomimic-shaped HDF5 file at path: data/demo_0 with the env_args and task a dataset
    has, then build(demo group) adds the rest."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        g = f.create_group("data/demo_0")
        f["data"].attrs["env_args"] = json.dumps({"env_name": "pick"})
        build(g, h5py)
    (path.parent / "s.yaml").write_text('pick: ["0", "1"]\n')
    return ["--sketches", path.parent / "s.yaml"]


@case("crash")
def an_hdf5_dataset_declaring_two_billion_rows(base, tmp, capsys):
    """A 9 KiB file whose datasets declare 2e9 rows made annotate allocate 119 GiB."""
    def build(g, h5py):
        g.create_dataset("actions", shape=(2_000_000_000, 9), dtype="f4", chunks=(1000, 9))
        g.create_dataset("obs/s", shape=(2_000_000_000, 39), dtype="f4", chunks=(1000, 39))
    extra = _robomimic(tmp / "huge.hdf5", build)
    expect(capsys, ["annotate", tmp / "huge.hdf5", "--model", SHIPPED_DIAL, "--out", tmp / "o.hdf5"] + extra,
           2, "huge.hdf5: demo_0: actions declares shape (2000000000, 9)", "stores 0 bytes")
    assert not (tmp / "o.hdf5").exists()


@case("crash")
def an_hdf5_soft_link_loop(base, tmp, capsys):
    def build(g, h5py):
        g.create_dataset("actions", data=np.zeros((5, 9)))
        g["obs/a"] = h5py.SoftLink("/data/demo_0/obs/b")
        g["obs/b"] = h5py.SoftLink("/data/demo_0/obs/a")
    extra = _robomimic(tmp / "loop.hdf5", build)
    expect(capsys, ["annotate", tmp / "loop.hdf5", "--model", SHIPPED_DIAL, "--out", tmp / "o.hdf5"] + extra,
           2, "loop.hdf5: demo_0: cannot open", "too many links")


@case("crash")
def a_sketch_attribute_nested_100000_deep(base, tmp, capsys):
    def build(g, h5py):
        g.create_dataset("actions", data=np.zeros((5, 9)))
        g.create_dataset("obs/s", data=np.zeros((5, 39)))
        g.attrs["sketch"] = "[" * 100000 + "]" * 100000
    extra = _robomimic(tmp / "deep.hdf5", build)
    expect(capsys, ["annotate", tmp / "deep.hdf5", "--model", SHIPPED_DIAL, "--out", tmp / "o.hdf5"] + extra,
           2, "deep.hdf5: demo_0: attribute 'sketch' is JSON nested too deeply")


@case("crash")
def a_robomimic_export_that_does_not_fit(base, tmp, capsys):
    """Under `ulimit -f` (or on a full disk) HDF5's failed write crashed the interpreter (rc
    139) after thousands of traceback lines and left its .tmp-*.hdf5 behind; the room is now
    checked before HDF5 writes a byte."""
    pytest.importorskip("h5py")
    demos = taco_sim.get("navworld").collect(60, 3, seed=3)
    data.save(demos, tmp / "nav60.npz")

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 2**10, 100 * 2**10))
    done = subprocess.run([sys.executable, "-m", "taco_app.cli", "export", str(tmp / "nav60.npz"), "--format",
                           "robomimic", "--out", str(tmp / "out" / "o.hdf5")], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, preexec_fn=small_files)
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 3 and err.count("\n") == 1, err
    assert err.startswith("taco export: cannot read or write") and "file size limit" in err, err
    assert not (tmp / "out").exists() or os.listdir(tmp / "out") == []


# ---- untidy errors -----------------------------------------------------------------------

@case("crash")
def no_warnings_before_a_divergence(base, tmp, capsys):
    """NumPy RuntimeWarnings (up to 10 lines) preceded the error line. Run as a separate
    process, whose stderr is what a user sees: progress lines, then the one error line."""
    for extra in (["--set", "lr=1e10"], ["--set", "ctc_lr=1e10", "--algo", "ctcbc-mlp"]):
        code, err = _limited(["train", "--data", base / "nav.npz", "--out", tmp / "r", "--overwrite"]
                                + SMALL + extra, limit=None)
        *before, last = err.rstrip("\n").split("\n")
        assert code == 4 and last.startswith("taco train: training diverged"), err
        assert all(line.startswith("\r") for line in before), err


@case("crash")
def disk_full_after_a_progress_line(base, tmp, capsys, monkeypatch):
    """A write fails after an epoch's progress line, which ends in no newline: the error must
    not be glued to it."""
    real_fsync, calls = os.fsync, []

    def full_later(fd):
        calls.append(fd)
        if len(calls) > 2:                   # the start checkpoint (arrays and JSON) goes through
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", full_later)
    capsys.readouterr()
    code = cli.main([str(a) for a in ["train", "--data", base / "nav.npz", "--out", tmp / "r"] + SMALL])
    err = capsys.readouterr().err
    assert code == 3 and "epoch   1" in err, err
    assert "\ntaco train: cannot read or write" in err and err.count("taco train:") == 1, err


SLOW_CASES = {"no_warnings_before_a_divergence", "a_robomimic_export_that_does_not_fit", "a_billion_demonstrations", "a_billion_test_tasks",
              "model_read_under_an_address_space_limit",
              "disk_full_while_checkpointing", "stale_temporaries_are_removed"}
"""Cases run in fresh processes of the command line (each imports it anew) or that train over
several checkpoints (0.8-1 s each), marked slow."""


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n
                                  for n in sorted(CASES)])
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


@pytest.mark.slow
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
