"""The one reader of training settings.

A run's TrainConfig is built from, in increasing precedence:

1. taco_ref.train.TrainConfig's defaults (the generic, documented default of every field);
2. a YAML file: ``--config PATH`` or ``--config NAME`` (a file shipped in taco_sim/configs, e.g.
   ``dial-small``), else the domain's own (``taco_sim.get(domain).config``), shipped as package
   data so that it is found after any kind of install;
3. a named protocol, ``--protocol paper|recipe`` (taco_ref.config.PROTOCOLS: the
   equal-budget protocols of spec/evaluation.md §7, as overrides);
4. keyword values from the command line (``--algo``, ``--seed``) that were given;
5. ``--set key=value`` overrides (values parsed as YAML: numbers, lists, booleans).

A YAML file holds the keys either at the top level or under ``train:``.
"""
import os

import yaml

from taco_ref.plumbing import files
from taco_ref.config import PROTOCOLS, TrainConfig


def config_path(name_or_path):
    """A YAML path as given, or taco_sim/configs/NAME.yaml for a shipped config's name."""
    if os.path.exists(name_or_path):
        return name_or_path
    import taco_sim
    shipped = taco_sim.package_file("configs", f"{name_or_path}.yaml")
    if os.path.isfile(shipped):
        return shipped
    raise FileNotFoundError(f"--config: no file {name_or_path!r} and no shipped config of that name "
                            f"(shipped: {', '.join(shipped_configs())})")


def shipped_configs():
    import taco_sim
    folder = taco_sim.package_file("configs")
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".yaml"))


MAX_YAML_BYTES = 2 ** 20
"""Largest config file read (1 MiB; the shipped ones are under 2 kB)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (safe_load keeps the last
    silently: a task listed twice with two sketches would label episodes with the wrong one)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:                  # an unhashable key: construct_mapping says so
                break
            if first is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice (line {first.line + 1} and line "
                    f"{key_node.start_mark.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def safe_yaml(path, max_bytes, error=ValueError, what="a config"):
    """yaml.safe_load of the file at path after three guards: at most max_bytes, no aliases
    (nested aliases can expand to billions of entries), and no key given twice in a mapping; a
    syntax error becomes one error line with its position."""
    text = files.read_bytes(path, max_bytes, error).decode("utf-8", errors="replace")
    try:
        if any(isinstance(token, yaml.AliasToken) for token in yaml.scan(text)):
            raise error(f"{path}: YAML aliases (*name) are not accepted in {what}")
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise error(f"{path}: not valid YAML{where} ({problem})") from None


def read_yaml(path):
    """The training keys of a YAML file (a mapping, top level or under ``train:``).

    Read with yaml.safe_load after two guards: at most MAX_YAML_BYTES, and no aliases (a
    training config never needs them, and nested aliases can expand to billions of entries).
    A syntax error is reported as one line with its position.
    """
    loaded = safe_yaml(path, MAX_YAML_BYTES)
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping of config keys, got {type(loaded).__name__}")
    values = loaded.get("train", loaded)
    if not isinstance(values, dict):
        raise ValueError(f"{path}: 'train' must be a mapping of config keys")
    return dict(values)


def parse_override(text):
    """'key=value' from the command line; value parsed as YAML (numbers, lists, booleans)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--set expects key=value, got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise ValueError(f"--set {key.strip()}: {value!r} is not a YAML value") from None


def settings(domain=None, path=None, overrides=(), protocol=None, **given):
    """The merged settings (a dict of TrainConfig fields) in the precedence of the module docstring.

    domain: a domain name (its shipped YAML is used when path is None) or None; protocol: a
    name of PROTOCOLS or None; given: keyword values, used unless None.
    """
    values = {}
    if path:
        values.update(read_yaml(config_path(path)))
    elif domain:
        import taco_sim
        values.update(read_yaml(taco_sim.get(domain).config))
    if protocol is not None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"--protocol: expected one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        values.update(PROTOCOLS[protocol])
    values.update({k: v for k, v in given.items() if v is not None})
    values.update(parse_override(t) for t in overrides)
    return values


def load(domain=None, path=None, overrides=(), protocol=None, **given):
    """TrainConfig of settings(domain, path, overrides, protocol, **given), validated."""
    return TrainConfig.from_dict(settings(domain, path, overrides, protocol, **given))
