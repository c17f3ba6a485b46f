"""A trained model on disk: a directory holding weights.npz and model.json.

weights.npz holds only float64 arrays (never loaded with pickle); model.json holds everything
else — format version, algorithm, vocabulary, the policy architecture, the training config, and
the SHA-256 of weights.npz, so a weights file that was truncated, swapped or edited is refused.
Both are written atomically (temp file + rename), weights first, JSON last: a model directory
is complete exactly when its JSON names the weights it sits beside.
"""
import json
import os
from dataclasses import dataclass, field

import numpy as np

from taco_ref.files import npz_blob, read_npz, write_bytes
from taco_ref.policy import PolicyConfig, init_params

FORMAT = "taco_ref model"
FORMAT_VERSION = 1
WEIGHTS, META = "weights.npz", "model.json"


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
    return {k: v.shape for k, v in init_params(policy, np.random.default_rng(0)).items()}


def save(model, directory):
    """Write model to directory (created if needed), atomically file by file."""
    blob, sha256 = npz_blob({k: np.asarray(v, dtype=np.float64) for k, v in model.params.items()})
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "algo": model.algo,
            "vocab": list(model.vocab), "policy": model.policy.to_dict(), "ctc_kind": model.ctc_kind,
            "config": model.config, "info": model.info,
            "weights_sha256": sha256,
            "arrays": {k: list(np.shape(v)) for k, v in model.params.items()}}
    write_bytes(os.path.join(directory, WEIGHTS), blob)
    write_bytes(os.path.join(directory, META), json.dumps(meta, indent=1, sort_keys=True).encode())


def load(directory):
    """Read a model directory; ModelError (naming the file and the problem) if anything is off."""
    meta_path, weights_path = os.path.join(directory, META), os.path.join(directory, WEIGHTS)
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read().decode())
        if not os.path.exists(weights_path):
            raise FileNotFoundError(2, "missing", weights_path)
    except FileNotFoundError as err:
        raise ModelError(f"{directory}: not a taco_ref model directory ({err.filename} is missing)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelError(f"{meta_path}: unreadable model metadata ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelError(f"{meta_path}: not a taco_ref model (format field is {meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelError(f"{meta_path}: format_version {meta.get('format_version')!r}, this code reads {FORMAT_VERSION}")
    params = read_npz(weights_path, meta.get("weights_sha256"), ModelError, META)
    expected = meta.get("arrays", {})
    if set(params) != set(expected):
        raise ModelError(f"{weights_path}: arrays {sorted(set(params) ^ set(expected))} differ from {META}")
    for name, arr in params.items():
        if arr.dtype != np.float64 or list(arr.shape) != list(expected[name]):
            raise ModelError(f"{weights_path}: {name} is {arr.dtype} {arr.shape}, expected float64 {tuple(expected[name])}")
        if not np.isfinite(arr).all():
            raise ModelError(f"{weights_path}: {name} holds non-finite values")
    try:
        policy = PolicyConfig(**meta["policy"])
        vocab = tuple(str(v) for v in meta["vocab"])
        algo = str(meta["algo"])
    except (KeyError, TypeError, ValueError) as err:
        raise ModelError(f"{meta_path}: bad model description ({err})") from None
    if len(vocab) != policy.n_subtasks:
        raise ModelError(f"{meta_path}: vocab has {len(vocab)} names, the policy {policy.n_subtasks} sub-tasks")
    for name, shape in policy_shapes(policy).items():
        if name not in params or params[name].shape != shape:
            got = params[name].shape if name in params else "missing"
            raise ModelError(f"{weights_path}: {name} is {got}, the architecture in {META} needs {shape}")
    return Model(params, policy, vocab, algo, meta.get("ctc_kind"), meta.get("config", {}), meta.get("info", {}))
