"""Tests for taco_ref/model.py (format: spec/training.md section 7).

(a) save/load round trip: every array bit for bit, the policy config, vocabulary, algorithm,
    CTC kind, training config and info; for a plain and a CTC-BC model;
(b) load refuses, with ModelError naming the file and the problem: a missing model.json or
    weights.npz, corrupted JSON, another model's weights, truncated weights, a wrong format or
    format_version, arrays that disagree with model.json or with the architecture, NaN weights,
    and an object-array archive, which is never unpickled. Tampered weights get a consistent
    SHA-256 written into model.json, so that the later checks are reached;
(c) saving is atomic: no temporary file is left, and a second save replaces the first.
"""
import hashlib
import io
import json
import os
import pathlib

import numpy as np
import pytest

from taco_ref import model as model_mod
from taco_ref import objectives, policy
from taco_ref.model import Model, ModelError
from taco_ref.policy import PolicyConfig


def make_model(seed=0, ctc_kind=None):
    cfg = PolicyConfig(state_dim=3, n_subtasks=2, action_dim=2, act_hidden=[4], stop_hidden=[5, 3])
    rng = np.random.default_rng(seed)
    params = policy.init_params(cfg, rng)
    params["norm.mean"] = rng.normal(size=3)
    params["norm.std"] = rng.uniform(0.5, 2.0, size=3)
    if ctc_kind:
        params.update(objectives.init_ctc_params(rng, ctc_kind, 5, [4], 2))
    algo = {"mlp": "ctcbc-mlp", "gru": "ctcbc-gru"}.get(ctc_kind, "taco")
    return Model(params, cfg, ("left", "right"), algo, ctc_kind,
                 config={"algo": algo, "lr": 0.005, "act_hidden": [4]},
                 info={"history": [{"epoch": 1, "held_out_loss": 2.5}], "train_size": 9})


def saved(tmp_path, m=None):
    directory = tmp_path / "model"
    model_mod.save(m or make_model(), directory)
    return directory


def read_meta(directory):
    return json.loads((directory / model_mod.META).read_text())


def write_meta(directory, meta):
    (directory / model_mod.META).write_text(json.dumps(meta))


def write_weights(directory, arrays):
    """Replace weights.npz by `arrays` and record its SHA-256 in model.json (a consistent forgery)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_blob(directory, buf.getvalue())


def write_blob(directory, blob):
    pathlib.Path(model_mod.weights_file(directory)).write_bytes(blob)
    meta = read_meta(directory)
    meta["weights_sha256"] = hashlib.sha256(blob).hexdigest()
    write_meta(directory, meta)


def load_arrays(directory):
    with np.load(model_mod.weights_file(directory)) as z:
        return {k: z[k] for k in z.files}


# ----------------------------------------------------------------------------------------------
# (a) Round trip
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ctc_kind", [None, "mlp", "gru"])
def test_save_load_round_trip_is_bit_identical(tmp_path, ctc_kind):
    m = make_model(1, ctc_kind)
    directory = saved(tmp_path, m)
    loaded = model_mod.load(directory)
    assert set(loaded.params) == set(m.params)
    for name, arr in m.params.items():
        assert loaded.params[name].dtype == np.float64 and loaded.params[name].shape == arr.shape
        assert loaded.params[name].tobytes() == arr.tobytes(), name
    assert loaded.policy == m.policy
    assert loaded.vocab == m.vocab and isinstance(loaded.vocab, tuple)
    assert (loaded.algo, loaded.ctc_kind) == (m.algo, m.ctc_kind)
    assert loaded.config == m.config and loaded.info == m.info


def test_loaded_model_acts_like_the_saved_one(tmp_path):
    m = make_model(2)
    loaded = model_mod.load(saved(tmp_path, m))
    state = np.array([0.3, -1.2, 2.0])
    for k in range(2):
        a, b = policy.act(m.params, m.policy, k, state), policy.act(loaded.params, loaded.policy, k, state)
        assert a[0] == b[0]
        np.testing.assert_array_equal(a[1], b[1])


# ----------------------------------------------------------------------------------------------
# (b) Refusals
# ----------------------------------------------------------------------------------------------

def test_missing_model_json(tmp_path):
    directory = saved(tmp_path)
    os.remove(directory / model_mod.META)
    with pytest.raises(ModelError, match=r"not a taco_ref model directory \(.*model\.json is missing\)"):
        model_mod.load(directory)


def test_missing_weights(tmp_path):
    directory = saved(tmp_path)
    os.remove(model_mod.weights_file(directory))
    with pytest.raises(ModelError, match=r"weights-\w+\.npz is missing"):
        model_mod.load(directory)


def test_missing_directory(tmp_path):
    with pytest.raises(ModelError, match="not a taco_ref model directory"):
        model_mod.load(tmp_path / "nothing")


@pytest.mark.parametrize("text", [b'{"format": "taco_ref model", "weig', b"\xff\xfe not utf-8", b""])
def test_corrupted_json(tmp_path, text):
    directory = saved(tmp_path)
    (directory / model_mod.META).write_bytes(text)
    with pytest.raises(ModelError, match=r"model\.json: not valid JSON"):
        model_mod.load(directory)


def test_json_that_is_not_a_model(tmp_path):
    directory = saved(tmp_path)
    for meta in ([1, 2], {"format": "something else"}):
        write_meta(directory, meta)
        with pytest.raises(ModelError, match=r"model\.json: (not a taco_ref model|expected a JSON object)"):
            model_mod.load(directory)


def test_weights_replaced_by_another_models_weights(tmp_path):
    directory = saved(tmp_path, make_model(3))
    other = saved(tmp_path / "other", make_model(4))
    pathlib.Path(model_mod.weights_file(directory)).write_bytes(pathlib.Path(model_mod.weights_file(other)).read_bytes())
    with pytest.raises(ModelError, match=r"weights-\w+\.npz: contents do not match the SHA-256"):
        model_mod.load(directory)


def test_truncated_weights(tmp_path):
    directory = saved(tmp_path)
    blob = pathlib.Path(model_mod.weights_file(directory)).read_bytes()
    pathlib.Path(model_mod.weights_file(directory)).write_bytes(blob[:-100])
    with pytest.raises(ModelError, match=r"weights-\w+\.npz: contents do not match the SHA-256"):
        model_mod.load(directory)


def test_truncated_weights_with_a_consistent_hash(tmp_path):
    directory = saved(tmp_path)
    blob = pathlib.Path(model_mod.weights_file(directory)).read_bytes()
    write_blob(directory, blob[: len(blob) // 2])
    with pytest.raises(ModelError, match=r"weights-\w+\.npz: not a readable weights file"):
        model_mod.load(directory)


def test_wrong_format_version(tmp_path):
    directory = saved(tmp_path)
    meta = read_meta(directory)
    meta["format_version"] = model_mod.FORMAT_VERSION + 1
    write_meta(directory, meta)
    with pytest.raises(ModelError, match=r"model\.json: format_version 2, this code reads 1"):
        model_mod.load(directory)


def test_array_shape_inconsistent_with_the_architecture(tmp_path):
    """weights.npz and its 'arrays' record agree with each other (and the hash is right), but the
    policy in model.json needs act.W0 of shape (K, D, H) = (2, 3, 4)."""
    directory = saved(tmp_path)
    arrays = load_arrays(directory)
    arrays["act.W0"] = np.zeros((2, 3, 6))
    arrays["act.b0"] = np.zeros((2, 6))
    meta = read_meta(directory)
    meta["arrays"]["act.W0"], meta["arrays"]["act.b0"] = [2, 3, 6], [2, 6]
    write_meta(directory, meta)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"weights-\w+\.npz: act\.W0 is \(2, 3, 6\), the architecture in "
                                         r"model\.json needs \(2, 3, 4\)"):
        model_mod.load(directory)


def test_missing_architecture_array(tmp_path):
    directory = saved(tmp_path)
    arrays = load_arrays(directory)
    del arrays["stop.b1"]
    meta = read_meta(directory)
    del meta["arrays"]["stop.b1"]
    write_meta(directory, meta)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"stop\.b1 is missing, the architecture"):
        model_mod.load(directory)


def test_arrays_disagreeing_with_model_json(tmp_path):
    directory = saved(tmp_path)
    arrays = load_arrays(directory)
    arrays["extra"] = np.zeros(3)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"arrays \['extra'\] differ from model\.json"):
        model_mod.load(directory)
    arrays = load_arrays(directory)
    del arrays["extra"]
    arrays["act.W0"] = arrays["act.W0"][:, :, :2]            # recorded as (2, 3, 4)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"act\.W0 is float64 \(2, 3, 2\), expected float64 \(2, 3, 4\)"):
        model_mod.load(directory)


def test_non_float64_weights(tmp_path):
    directory = saved(tmp_path)
    arrays = load_arrays(directory)
    arrays["norm.std"] = arrays["norm.std"].astype(np.float32)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"norm\.std is float32"):
        model_mod.load(directory)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_weights(tmp_path, value):
    directory = saved(tmp_path)
    arrays = load_arrays(directory)
    arrays["stop.W1"][1, 0, 0] = value
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"weights-\w+\.npz: stop\.W1 holds non-finite values"):
        model_mod.load(directory)


def test_object_array_weights_are_never_unpickled(tmp_path, hostile):
    directory = saved(tmp_path)
    marker = str(tmp_path / "pwned")
    arrays = load_arrays(directory)
    arrays["act.W0"] = np.array([hostile(marker)], dtype=object)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"weights-\w+\.npz: not a readable weights file"):
        model_mod.load(directory)
    assert not os.path.exists(marker), "model.load ran a pickle"
    with np.load(model_mod.weights_file(directory), allow_pickle=True) as z:   # it really is hostile
        z["act.W0"]
    assert os.path.isdir(marker)


def test_bad_policy_description(tmp_path):
    directory = saved(tmp_path)
    meta = read_meta(directory)
    meta["policy"]["activation"] = "gelu"
    write_meta(directory, meta)
    with pytest.raises(ModelError, match=r"model\.json: bad model description \(activation"):
        model_mod.load(directory)


def test_vocab_length_must_match_the_subtasks(tmp_path):
    directory = saved(tmp_path)
    meta = read_meta(directory)
    meta["vocab"] = ["only one"]
    write_meta(directory, meta)
    with pytest.raises(ModelError, match=r"model\.json: vocab has 1 names, the policy 2 sub-tasks"):
        model_mod.load(directory)


def test_a_learned_sigma_model_round_trips(tmp_path):
    """act.logstd is part of the architecture when learn_sigma is set, and accepted within
    MAX_ABS_LOGSTD."""
    cfg = PolicyConfig(state_dim=3, n_subtasks=2, action_dim=2, act_hidden=[4], stop_hidden=[3],
                       sigma=0.5, learn_sigma=True)
    params = policy.init_params(cfg, np.random.default_rng(0))
    params["act.logstd"][:] = [[-model_mod.MAX_ABS_LOGSTD, 0.0], [1.0, model_mod.MAX_ABS_LOGSTD]]
    m = Model(params, cfg, ("a", "b"), "taco", None, config={"sigma": "learned", "sigma_init": 0.5})
    loaded = model_mod.load(saved(tmp_path, m))
    assert loaded.policy.learn_sigma and loaded.params["act.logstd"].tobytes() == params["act.logstd"].tobytes()


@pytest.mark.parametrize("change, message", [
    ({"algo": "bogus"}, r"algo must be one of"),
    ({"algo": ["taco"]}, r"algo must be one of"),
    ({"ctc_kind": "mlp"}, r"ctc_kind must be None for algo 'taco'"),
    ({"config": [1]}, r"config must be an object"),
    ({"config": {"lr": "fast"}}, r"config: lr must be a number"),
    ({"config": {"algo": "gtbc"}}, r"config\.algo is 'gtbc', the model's algo 'taco'"),
    ({"config": {"act_hidden": [5]}}, r"config\.act_hidden is \[5\], the policy's \[4\]"),
    ({"config": {"sigma": 0.3}}, r"config\.sigma is 0\.3, the policy's sigma 1\.0"),
    ({"info": "x"}, r"info must be an object"),
    ({"vocab": "lr"}, r"vocab must be a list"),
    ({"vocab": ["left", 7]}, r"vocab must be a list of distinct non-empty names"),
    ({"extra_field": 1}, r"unknown fields \['extra_field'\]"),
    ({"policy": "x"}, r"bad model description \(policy must be an object"),
    ({"arrays": [1]}, r"bad model description \(arrays must map"),
])
def test_every_field_of_model_json_must_mean_something(tmp_path, change, message):
    directory = saved(tmp_path)
    write_meta(directory, dict(read_meta(directory), **change))
    with pytest.raises(ModelError, match=r"model\.json: " + message):
        model_mod.load(directory)


@pytest.mark.parametrize("name, value, message", [
    ("policy.sigma", 1e300, r"sigma must be a positive number in \[0\.0001, 10000\]"),
    ("policy.sigma", 1e-5, r"sigma must be a positive number in"),
    ("policy.sigma", True, r"sigma must be a positive number in"),
    ("policy.discrete", "yes", r"discrete must be true or false"),
])
def test_the_policy_description_is_held_to_training_ranges(tmp_path, name, value, message):
    directory = saved(tmp_path)
    meta = read_meta(directory)
    meta["policy"][name.split(".")[1]] = value
    write_meta(directory, meta)
    with pytest.raises(ModelError, match=message):
        model_mod.load(directory)


@pytest.mark.parametrize("edit, message", [
    (lambda a: {"act.W0": a["act.W0"] * 0 + model_mod.MAX_ABS_WEIGHT * 1.5}, r"act\.W0 holds values up to 1\.5e\+06"),
    (lambda a: {"norm.std": a["norm.std"] * 0}, r"norm\.std must lie in \[1e-06, 1e\+06\]"),
    (lambda a: {"norm.std": a["norm.std"] * 0 + 1e-7}, r"norm\.std must lie in"),
    (lambda a: {"extra": np.zeros(2)}, r"arrays \['extra'\] are not part of the taco architecture"),
])
def test_weights_are_held_to_what_training_produces(tmp_path, edit, message):
    """A consistent forgery (SHA-256 and the arrays record agree) reaches the value checks."""
    directory = saved(tmp_path)
    arrays = load_arrays(directory)
    arrays.update(edit(arrays))
    meta = read_meta(directory)
    meta["arrays"] = {k: list(v.shape) for k, v in arrays.items()}
    write_meta(directory, meta)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"weights-\w+\.npz: " + message):
        model_mod.load(directory)
    arrays = load_arrays(directory)
    arrays.update({"act.W0": np.clip(arrays["act.W0"], -model_mod.MAX_ABS_WEIGHT, model_mod.MAX_ABS_WEIGHT),
                   "norm.std": np.full(3, model_mod.NORM_STD_RANGE[0])})
    arrays.pop("extra", None)
    meta["arrays"] = {k: list(v.shape) for k, v in arrays.items()}
    write_meta(directory, meta)
    write_weights(directory, arrays)
    model_mod.load(directory)                               # the bounds themselves are accepted


@pytest.mark.parametrize("kind", ["mlp", "gru"])
def test_ctc_weights_must_be_the_classifier_of_the_models_kind(tmp_path, kind):
    """A CTC-BC model carries exactly its classifier: the other kind's arrays, a missing one,
    or hidden sizes other than config.ctc_hidden are refused."""
    directory = saved(tmp_path, make_model(1, kind))
    other = objectives.init_ctc_params(np.random.default_rng(0), {"mlp": "gru", "gru": "mlp"}[kind], 5, [4], 2)
    arrays = {k: v for k, v in load_arrays(directory).items() if not k.startswith("ctc.")}
    arrays.update(other)
    meta = read_meta(directory)
    meta["arrays"] = {k: list(v.shape) for k, v in arrays.items()}
    write_meta(directory, meta)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=r"the CTC \w+ classifier needs|not part of the"):
        model_mod.load(directory)
    directory = saved(tmp_path / "again", make_model(1, kind))
    write_meta(directory, dict(read_meta(directory), config=dict(read_meta(directory)["config"], ctc_hidden=[7])))
    with pytest.raises(ModelError, match=r"hidden sizes are \[4\], config\.ctc_hidden \[7\]"):
        model_mod.load(directory)


# ----------------------------------------------------------------------------------------------
# (c) Atomic saving
# ----------------------------------------------------------------------------------------------

def test_a_crash_between_the_weights_and_model_json_keeps_the_old_model_whole(tmp_path, monkeypatch):
    """Issue 11: re-saving into a finished model directory and dying after the weights but
    before model.json left the old model unusable (SHA mismatch). The new weights now go to a
    new file and model.json is the commit point."""
    directory = saved(tmp_path, make_model(5))
    real = model_mod.write_bytes

    def die_at_model_json(path, blob):
        if os.path.basename(path) == model_mod.META:
            raise KeyboardInterrupt                     # the process dies here
        real(path, blob)

    monkeypatch.setattr(model_mod, "write_bytes", die_at_model_json)
    with pytest.raises(KeyboardInterrupt):
        model_mod.save(make_model(6), directory)
    monkeypatch.undo()
    loaded = model_mod.load(directory)
    assert loaded.params["act.W0"].tobytes() == make_model(5).params["act.W0"].tobytes()
    model_mod.save(make_model(6), directory)             # the next save cleans the orphan up
    assert len([n for n in os.listdir(directory) if n.endswith(".npz")]) == 1


def test_model_json_is_bounded_before_anything_is_allocated(tmp_path):
    directory = saved(tmp_path, make_model(5))
    meta = json.loads((directory / model_mod.META).read_text())
    meta["policy"]["act_hidden"] = [10 ** 6, 10 ** 6]              # a 29 GiB network, if built
    (directory / model_mod.META).write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="more than 268435456 parameters"):
        model_mod.load(directory)
    (directory / model_mod.META).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelError, match="nested too deeply"):
        model_mod.load(directory)
    meta["policy"]["act_hidden"] = [4]
    meta["vocab"] = ["a", "a"] + meta["vocab"][2:]
    (directory / model_mod.META).write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="distinct"):
        model_mod.load(directory)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_weights_that_are_a_fifo_or_a_device_are_refused_without_reading(tmp_path):
    directory = saved(tmp_path, make_model(5))
    weights = model_mod.weights_file(directory)
    os.remove(weights)
    os.mkfifo(weights)                                    # reading it would block forever
    with pytest.raises(ModelError, match="not a regular file"):
        model_mod.load(directory)
    os.remove(weights)
    os.symlink("/dev/zero", weights)                      # reading it would never end
    with pytest.raises(ModelError, match="not a regular file"):
        model_mod.load(directory)

def test_save_leaves_no_temporary_files_and_replaces_an_old_model(tmp_path):
    directory = saved(tmp_path, make_model(5))
    first = os.path.basename(model_mod.weights_file(directory))
    assert sorted(os.listdir(directory)) == sorted([model_mod.META, first])
    model_mod.save(make_model(6), directory)
    second = os.path.basename(model_mod.weights_file(directory))
    assert second != first and sorted(os.listdir(directory)) == sorted([model_mod.META, second])
    loaded = model_mod.load(directory)
    assert loaded.params["act.W0"].tobytes() == make_model(6).params["act.W0"].tobytes()


def test_policy_shapes_match_init_params():
    cfg = make_model().policy
    shapes = model_mod.policy_shapes(cfg)
    assert shapes["act.W0"] == (2, 3, 4) and shapes["stop.W2"] == (2, 3, 1)
    assert shapes["norm.mean"] == (3,)


def make_image_model(seed=0, ctc_kind=None):
    """A model of image states 7 x 6 x 3 read through a two-layer core (and, for CTC-BC, the
    classifier's own core)."""
    cfg = PolicyConfig(state_dim=126, n_subtasks=2, action_dim=2, act_hidden=[4], stop_hidden=[3],
                       image_shape=[7, 6, 3], conv_channels=[4, 2], conv_kernels=[3, 2], conv_strides=[2, 1])
    rng = np.random.default_rng(seed)
    params = policy.init_params(cfg, rng)
    params["norm.mean"], params["norm.std"] = rng.uniform(50, 200, size=3), rng.uniform(20, 80, size=3)
    if ctc_kind:
        params.update(objectives.init_ctc_params(rng, ctc_kind, cfg.feature_dim + 2, [4], 2))
        params.update({f"ctc.{k}": v for k, v in policy.init_params(cfg, rng).items() if k.startswith("core.")})
    algo = {"mlp": "ctcbc-mlp", "gru": "ctcbc-gru"}.get(ctc_kind, "taco")
    return Model(params, cfg, ("left", "right"), algo, ctc_kind,
                 config={"algo": algo, "conv_channels": [4, 2], "conv_kernels": [3, 2], "conv_strides": [2, 1]})


@pytest.mark.parametrize("ctc_kind", [None, "gru"])
def test_an_image_model_round_trips_with_its_core(tmp_path, ctc_kind):
    m = make_image_model(ctc_kind=ctc_kind)
    directory = saved(tmp_path, m)
    loaded = model_mod.load(directory)
    assert loaded.policy == m.policy and loaded.policy.feature_dim == 2 * 1 * 2      # 7 x 6 -> 3 x 2 -> 2 x 1
    assert set(loaded.params) == set(m.params)
    for name in m.params:
        assert np.array_equal(loaded.params[name], m.params[name]), name
    image = np.random.default_rng(1).integers(0, 256, size=(7, 6, 3), dtype=np.uint8)
    assert policy.act(loaded.params, loaded.policy, 1, image)[0] == policy.act(m.params, m.policy, 1, image)[0]


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.update({"core.W1": np.zeros((3, 3, 4, 2))}), r"core.W1 is float64 \(3, 3, 4, 2\)"),
    (lambda a: a.pop("core.b0"), r"arrays \['core.b0'\] differ"),
    (lambda a: a.update({"norm.mean": np.zeros(126)}), r"norm.mean is float64 \(126,\)"),
])
def test_an_image_model_whose_core_disagrees_with_its_architecture_is_refused(tmp_path, edit, message):
    directory = saved(tmp_path, make_image_model())
    arrays = load_arrays(directory)
    edit(arrays)
    write_weights(directory, arrays)
    with pytest.raises(ModelError, match=message):
        model_mod.load(directory)


def test_an_image_model_whose_config_names_another_core_is_refused(tmp_path):
    directory = saved(tmp_path, make_image_model())
    meta = read_meta(directory)
    meta["config"]["conv_kernels"] = [5, 2]
    write_meta(directory, meta)
    with pytest.raises(ModelError, match=r"config.conv_kernels is \[5, 2\], the policy's \[3, 2\]"):
        model_mod.load(directory)
