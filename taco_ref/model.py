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

from taco_ref import files
from taco_ref.files import npz_blob, read_npz, write_bytes
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


def load(directory):
    """Read a model directory; ModelError (naming the file and the problem) if anything is off."""
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
    try:
        policy = PolicyConfig(**meta["policy"])
        vocab = tuple(meta["vocab"])
        algo = str(meta["algo"])
        weights_name = meta.get("weights_file", WEIGHTS)
        expected = {str(k): tuple(int(n) for n in v) for k, v in dict(meta.get("arrays", {})).items()}
    except (KeyError, TypeError, ValueError) as err:
        raise ModelError(f"{meta_path}: bad model description ({err})") from None
    if not all(isinstance(v, str) and v for v in vocab) or len(set(vocab)) != len(vocab):
        raise ModelError(f"{meta_path}: vocab must be distinct non-empty names, got {list(vocab)[:20]}")
    if len(vocab) != policy.n_subtasks:
        raise ModelError(f"{meta_path}: vocab has {len(vocab)} names, the policy {policy.n_subtasks} sub-tasks")
    if not isinstance(weights_name, str) or os.path.basename(weights_name) != weights_name or not weights_name.endswith(".npz"):
        raise ModelError(f"{meta_path}: weights_file must be a file name in the model directory, got {weights_name!r}")
    sizes = {name: int(np.prod(shape, dtype=object)) for name, shape in param_shapes(policy).items()}
    if sum(sizes.values()) > MAX_PARAMS or sum(int(np.prod(v, dtype=object)) for v in expected.values()) > MAX_PARAMS:
        raise ModelError(f"{meta_path}: the architecture has more than {MAX_PARAMS} parameters")
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
    for name, shape in policy_shapes(policy).items():
        if name not in params or params[name].shape != shape:
            got = params[name].shape if name in params else "missing"
            raise ModelError(f"{weights_path}: {name} is {got}, the architecture in {META} needs {shape}")
    return Model(params, policy, vocab, algo, meta.get("ctc_kind"), meta.get("config", {}), meta.get("info", {}))
