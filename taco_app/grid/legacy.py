"""Reading what earlier versions of `taco experiment` wrote: version-1 cell keys and results.json.

Frozen: nothing here changes when the config gains a field. Version-1 keys hashed the whole
TrainConfig of their day (V1_FIELDS) with the fields introduced along the way left out at the
value every older cell ran with; taco_app.grid.keys computes today's keys and calls
cell_key_v1 only for a cell file without key_version. results.json (the record of the version
before cell files) is converted into cell files by `migrate`.
"""
import hashlib
import json
import os
from dataclasses import asdict, fields as dataclass_fields

from taco_ref import config as config_mod, data as data_mod, train
from taco_ref.plumbing import files
from taco_app.grid import keys as cellkeys

V1_FIELDS = tuple(f for f in cellkeys.FIELDS_AT_VERSION_2 if not f.startswith("compile_"))
"""TrainConfig's fields when version-1 keys were last written: version 2's (both lists are
frozen) less CompILE's section, which no version-1 key had."""
V1_LEFT_OUT_AT = (("dtype", "float64"), ("act_l2", 0.0), ("stop_l2", 0.0), ("lr_decay", "none"),
                  ("select", "held_out_loss"), ("ema", 0.0))
"""Fields a version-1 key left out at the value every cell ran with before the field existed."""


def cell_key_v1(cell):
    """The version-1 key of cell: SHA-256 of the CELL_FIELDS and the V1_FIELDS of its config,
    less V1_LEFT_OUT_AT, sigma_init unless sigma is learned, select_tasks and select_from unless
    select is "rollouts", and epoch_size where it makes one pass per epoch. None when the cell
    sets a field that did not exist then away from its neutral value (no such cell was written)."""
    if cellkeys.keyed_expert(cell) is not None:
        return None                                  # every version-1 cell had its domain's first expert
    cfg = cellkeys.training_config(cell)
    full, inert = asdict(cfg), config_mod.inert_fields(cfg)
    if any(k not in V1_FIELDS and not _neutral(cell, k, v, inert) for k, v in full.items()):
        return None
    config = {k: full[k] for k in V1_FIELDS}
    fields = {k: cell.get(k) for k in cellkeys.CELL_FIELDS}
    for name, before in V1_LEFT_OUT_AT:
        if config[name] == before:
            del config[name]
    if config["sigma"] != "learned":
        del config["sigma_init"]
    if config.get("select") != "rollouts":
        del config["select_tasks"], config["select_from"]
    n_train = cell["size"] - data_mod.holdout_count(cell["size"], config["holdout_fraction"])
    if train.passes_per_epoch(config["epoch_size"], n_train) == 1:
        del config["epoch_size"]
    fields["config"] = config
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _neutral(cell, name, value, inert):
    """A field younger than version 1 is neutral where the cell's algorithm does not read it,
    where it cannot change the cell's run (inert: config.inert_fields of its config), or where it
    holds the value it declares (metadata["before"]) under which a run is the run from before
    the field existed."""
    declared = {f.name: f.metadata for f in dataclass_fields(train.TrainConfig)}.get(name, {})
    return (name not in config_mod.fields_read_by(cell["algo"])
            or name in inert
            or ("before" in declared and value == declared["before"]))


# --- results.json, the record of the version before cell files ------------------------------

def read_list(path):
    """The JSON list of objects in path (bounded read), or [] when there is no such file."""
    if not os.path.exists(path):
        return []
    try:
        value = json.loads(files.read_bytes(path, files.MAX_JSON_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not valid JSON ({type(err).__name__})") from None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{path}: expected a JSON list of objects")
    return value


def load(out_dir):
    """The cells of out_dir/results.json (what `taco experiment` wrote before cell files), or []."""
    return read_list(os.path.join(out_dir, "results.json"))
