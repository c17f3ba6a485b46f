"""A trained model on disk: a directory holding model.json and the weights file it names.

The weights file (weights-<first 16 hex digits of its SHA-256>.npz; weights.npz in older models)
holds only float64 arrays (never loaded with pickle); model.json holds everything else — format
version, algorithm, vocabulary, the policy architecture, the training config, the weights file's
name and SHA-256, so a weights file that was truncated, swapped or edited is refused. Saving
writes the new weights file beside the old one, then model.json (atomically: the commit point),
then removes the weights it no longer names: a crash at any moment leaves the old model or the
new one, both whole. Loading checks sizes before allocating anything.
"""
import json
import os
from dataclasses import dataclass, field

import numpy as np

from taco_ref import algorithms
from taco_ref.plumbing import files
from taco_ref.config import TrainConfig
from taco_ref.plumbing.files import npz_blob, read_npz, write_bytes
from taco_ref.policy import PolicyConfig, param_shapes

FORMAT = "taco_ref model"
FORMAT_VERSION = 1
WEIGHTS, META = "weights.npz", "model.json"
MAX_PARAMS = 2 ** 28
"""Largest model accepted: 2^28 parameters (2 GiB of float64); the paper's Dial nets have 1.8 M."""


class ModelError(ValueError):
    """A model directory that cannot be trusted or used."""


@dataclass
class Model:
    params: dict
    """Every array: sub-policy nets ("act.*", "stop.*"), normalisation ("norm.*"), CTC net ("ctc.*")."""
    policy: PolicyConfig
    vocab: tuple
    algo: str
    ctc_kind: str = None
    """"mlp" or "gru" for CTC-BC models (their alignment network), else None."""
    config: dict = field(default_factory=dict)
    """The training configuration, for the record."""
    info: dict = field(default_factory=dict)
    """Anything else worth keeping: data file, epochs run, held-out losses."""


def policy_shapes(policy):
    """{name: shape} of every sub-policy array the architecture defines."""
    return param_shapes(policy)


def weights_file(directory):
    """Path of the weights file the model.json in directory names (weights.npz if none)."""
    meta = files.read_json(os.path.join(directory, META), ModelError)
    return os.path.join(directory, meta.get("weights_file", WEIGHTS))


def _weights_name(sha256):
    return f"weights-{sha256[:16]}.npz"


def save(model, directory):
    """Write model to directory (created if needed), atomically file by file."""
    blob, sha256 = npz_blob({k: np.asarray(v, dtype=np.float64) for k, v in model.params.items()})
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "algo": model.algo,
            "vocab": list(model.vocab), "policy": model.policy.to_dict(), "ctc_kind": model.ctc_kind,
            "config": model.config, "info": model.info,
            "weights_sha256": sha256, "weights_file": _weights_name(sha256),
            "arrays": {k: list(np.shape(v)) for k, v in model.params.items()}}
    write_bytes(os.path.join(directory, meta["weights_file"]), blob)
    write_bytes(os.path.join(directory, META), json.dumps(meta, indent=1, sort_keys=True).encode())
    for name in os.listdir(directory):          # the weights the committed model.json no longer names
        if name != meta["weights_file"] and (name == WEIGHTS or (name.startswith("weights-") and name.endswith(".npz"))):
            os.unlink(os.path.join(directory, name))


KNOWN_FIELDS = ("format", "format_version", "algo", "vocab", "policy", "ctc_kind", "config", "info",
                "weights_sha256", "weights_file", "arrays")
"""Every field model.json may hold; any other is refused (a field nobody reads is a mistake)."""
MAX_ABS_WEIGHT = 1e6
"""Largest magnitude of any stored number. Trained nets stay within tens (the shipped Dial
models: 7.1 and 6.1; a normalised input is O(1), and a weight of 1e6 would already turn it into
an output no action scale has); data is bounded by the same 1e6 (data.MAX_ABS_VALUE), so the
normalisation's mean is too."""
NORM_STD_RANGE = (1e-6, 1e6)
"""norm.std: training floors it at 1e-6 (train.state_statistics) and data bounded by 1e6
cannot spread further than 1e6; 0 would divide by zero."""
MAX_ABS_LOGSTD = 20.0
"""A learned log standard deviation (act.logstd) lies in [-20, 20], sigma from 2e-9 to 5e8:
far beyond what training reaches (the Dial's learned sigma settles near the torques' scale,
0.1-1), and exp(2 * 20) keeps the Gaussian's terms finite for actions bounded by 1e6."""


def load(directory):
    """Read a model directory; ModelError (naming the file and the problem) if anything is off.

    Every field must have its meaning and a value training can produce: format and version;
    algo a registered algorithm (taco_ref.algorithms) and ctc_kind the one it implies; the policy architecture
    (PolicyConfig, sigma in policy.SIGMA_RANGE); the vocabulary a list of distinct non-empty
    names, one per sub-task; config a training config (TrainConfig.from_dict) that agrees with
    the algorithm and the architecture where it names them; info an object; and the weights
    exactly the arrays the architecture declares (the sub-policies' and normalisation's, plus
    the CTC classifier's for CTC-BC), float64, finite, |w| <= MAX_ABS_WEIGHT, norm.std in
    NORM_STD_RANGE and act.logstd within MAX_ABS_LOGSTD. spec/training.md §9.
    """
    meta_path = os.path.join(directory, META)
    if not os.path.isdir(directory):
        raise ModelError(f"{directory}: not a taco_ref model directory (no such directory)")
    if not os.path.exists(meta_path):
        raise ModelError(f"{directory}: not a taco_ref model directory ({meta_path} is missing)")
    meta = files.read_json(meta_path, ModelError)
    if meta.get("format") != FORMAT:
        raise ModelError(f"{meta_path}: not a taco_ref model (format field is {meta.get('format')!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelError(f"{meta_path}: format_version {meta.get('format_version')!r}, this code reads {FORMAT_VERSION}")
    unknown = sorted(set(meta) - set(KNOWN_FIELDS))
    if unknown:
        raise ModelError(f"{meta_path}: unknown fields {unknown[:10]}; a model holds {list(KNOWN_FIELDS)}")
    try:
        if not isinstance(meta.get("policy"), dict):
            raise TypeError(f"policy must be an object, got {type(meta.get('policy')).__name__}")
        policy = PolicyConfig(**meta["policy"])
        weights_name = meta.get("weights_file", WEIGHTS)
        arrays = meta.get("arrays")
        if not isinstance(arrays, dict) or not all(
                isinstance(v, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v)
                for v in arrays.values()):
            raise TypeError("arrays must map each array's name to its shape, a list of sizes")
        expected = {str(k): tuple(v) for k, v in arrays.items()}
    except (KeyError, TypeError, ValueError) as err:
        raise ModelError(f"{meta_path}: bad model description ({_short(err)})") from None
    sizes = {name: int(np.prod(shape, dtype=object)) for name, shape in param_shapes(policy).items()}
    if sum(sizes.values()) > MAX_PARAMS or sum(int(np.prod(v, dtype=object)) for v in expected.values()) > MAX_PARAMS:
        raise ModelError(f"{meta_path}: the architecture has more than {MAX_PARAMS} parameters")
    algo, ctc_kind, vocab = _algorithm_and_vocab(meta, meta_path, policy)
    config = _config(meta, meta_path, algo, policy)
    info = meta.get("info", {})
    if not isinstance(info, dict):
        raise ModelError(f"{meta_path}: info must be an object (a JSON mapping), got {_short(info)}")
    if not isinstance(weights_name, str) or os.path.basename(weights_name) != weights_name or not weights_name.endswith(".npz"):
        raise ModelError(f"{meta_path}: weights_file must be a file name in the model directory, got {weights_name!r}")
    weights_path = os.path.join(directory, weights_name)
    if not os.path.exists(weights_path):
        raise ModelError(f"{directory}: not a taco_ref model directory ({weights_path} is missing)")
    params = read_npz(weights_path, meta.get("weights_sha256"), ModelError, META, "weights file")
    if set(params) != set(expected):
        raise ModelError(f"{weights_path}: arrays {sorted(set(params) ^ set(expected))} differ from {META}")
    for name, arr in params.items():
        if arr.dtype != np.float64 or list(arr.shape) != list(expected[name]):
            raise ModelError(f"{weights_path}: {name} is {arr.dtype} {arr.shape}, expected float64 {tuple(expected[name])}")
        if not np.isfinite(arr).all():
            raise ModelError(f"{weights_path}: {name} holds non-finite values")
    declared = dict(policy_shapes(policy))
    own_shapes = algorithms.get(algo).shapes
    if own_shapes is not None:                      # the algorithm's own nets (CTC's classifier, ...)
        try:
            declared.update(own_shapes(params, policy, config))
        except ValueError as err:
            raise ModelError(f"{weights_path}: {err}") from None
    for name, shape in declared.items():
        if name not in params or params[name].shape != shape:
            got = params[name].shape if name in params else "missing"
            raise ModelError(f"{weights_path}: {name} is {got}, the architecture in {META} needs {shape}")
    extra = sorted(set(params) - set(declared))
    if extra:
        raise ModelError(f"{weights_path}: arrays {extra[:10]} are not part of the {algo} architecture "
                         f"in {META}")
    _check_values(params, weights_path)
    return Model(params, policy, vocab, algo, ctc_kind, config, info)


def _short(value, limit=80):
    text = str(value) if isinstance(value, Exception) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _algorithm_and_vocab(meta, meta_path, policy):
    """(algo, ctc_kind, vocab) after checking each against the registry and the architecture."""
    algo = meta.get("algo")
    if not isinstance(algo, str) or algo not in algorithms.names():
        raise ModelError(f"{meta_path}: algo must be one of {list(algorithms.names())}, got {_short(algo)}")
    ctc_kind = meta.get("ctc_kind")
    want = algorithms.get(algo).ctc_kind
    if ctc_kind != want:
        raise ModelError(f"{meta_path}: ctc_kind must be {want!r} for algo {algo!r}, got {_short(ctc_kind)}")
    vocab = meta.get("vocab")
    if (not isinstance(vocab, list) or not all(isinstance(v, str) and v for v in vocab)
            or len(set(vocab)) != len(vocab)):
        raise ModelError(f"{meta_path}: vocab must be a list of distinct non-empty names, got "
                         f"{_short(vocab if not isinstance(vocab, list) else vocab[:20])}")
    if len(vocab) != policy.n_subtasks:
        raise ModelError(f"{meta_path}: vocab has {len(vocab)} names, the policy {policy.n_subtasks} sub-tasks")
    return algo, ctc_kind, tuple(vocab)


_ARCHITECTURE_KEYS = ("act_hidden", "stop_hidden", "activation", "conv_channels", "conv_kernels",
                      "conv_strides")


def _config(meta, meta_path, algo, policy):
    """The training config: an object of TrainConfig fields with valid values (missing ones are
    the defaults of older versions), naming the model's algorithm and, where it names them, the
    policy's hidden sizes, activation and sigma."""
    config = meta.get("config", {})
    if not isinstance(config, dict):
        raise ModelError(f"{meta_path}: config must be an object of training settings, got {_short(config)}")
    try:
        cfg = TrainConfig.from_dict(config)
    except (TypeError, ValueError) as err:
        raise ModelError(f"{meta_path}: config: {_short(err, 200)}") from None
    if "algo" in config and cfg.algo != algo:
        raise ModelError(f"{meta_path}: config.algo is {cfg.algo!r}, the model's algo {algo!r}")
    for key in _ARCHITECTURE_KEYS:
        if key in config and getattr(cfg, key) != getattr(policy, key):
            raise ModelError(f"{meta_path}: config.{key} is {getattr(cfg, key)!r}, the policy's "
                             f"{getattr(policy, key)!r}")
    if "sigma" in config:
        learned = cfg.sigma == "learned"
        if policy.learn_sigma != (learned and not policy.discrete) or (not learned and cfg.sigma != policy.sigma):
            raise ModelError(f"{meta_path}: config.sigma is {cfg.sigma!r}, the policy's sigma "
                             f"{policy.sigma!r}{' (learned)' if policy.learn_sigma else ''}")
    return config


def _check_values(params, weights_path):
    """Magnitudes a trained model can have (MAX_ABS_WEIGHT, NORM_STD_RANGE, MAX_ABS_LOGSTD)."""
    for name, arr in params.items():
        if arr.size and np.abs(arr).max() > MAX_ABS_WEIGHT:
            raise ModelError(f"{weights_path}: {name} holds values up to {np.abs(arr).max():.3g}; a "
                             f"trained model's are within {MAX_ABS_WEIGHT:g}")
    std = params["norm.std"]
    low, high = NORM_STD_RANGE
    if std.size and not ((std >= low) & (std <= high)).all():
        raise ModelError(f"{weights_path}: norm.std must lie in [{low:g}, {high:g}] (a standard "
                         f"deviation of the training states), got values from {std.min():.3g} to {std.max():.3g}")
    logstd = params.get("act.logstd")
    if logstd is not None and logstd.size and np.abs(logstd).max() > MAX_ABS_LOGSTD:
        raise ModelError(f"{weights_path}: act.logstd must lie in [-{MAX_ABS_LOGSTD:g}, {MAX_ABS_LOGSTD:g}] "
                         f"(a learned log standard deviation), got values up to {np.abs(logstd).max():.3g}")
