"""What a cell is, and its key: the hash of a versioned canonical config (spec/evaluation.md
§6, "The key").

A cell of a results table is (domain, algorithm, dataset size, seed) with its evaluation sizes
and its training config. Its key is the SHA-256 of ``canonical(cell)``:

- ``version``: KEY_VERSION, the version of this canonical form;
- the CELL_FIELDS (domain, algo, size, seed, sketch lengths, evaluation sizes); the data seeds
  are the seed's (TRAIN_DATA_SEED + seed, TEST_DATA_SEED + seed), so the seed stands for them;
- ``split``: the tasks it is evaluated on, only when they are the validation tasks
  (taco_ref.evaluate.SPLITS; test cells keep the keys they had before splits existed);
- ``tests``: the named test conditions it is also evaluated on (the Dial's harder test), only
  when it has any;
- ``expert``: the cell's expert (cell["expert"]), only where its domain offers a choice and the
  expert is not the one every cell had before the choice existed (Domain.expert_before: the
  Craft planner), so those cells keep their keys and a cell of another expert never matches
  them;
- ``config``: the TrainConfig fields the cell's algorithm reads (the shared ones and its own
  section, taco_ref.config.fields_read_by), minus those that cannot change its run: sigma_init
  unless sigma is learned, select_tasks and select_from unless epochs are chosen by rollouts,
  train_core and ctc_core_dtype without a convolutional core (state vectors);
  epoch_size enters as what it decides, the passes per epoch at this size. A field added to
  the config later declares, in its dataclass field's metadata, the value ``before`` under
  which a run is the run from before the field existed; at that value it is left out, so the
  keys of every finished cell stay valid (undeclared_fields; tests/test_cellkeys.py).

Cell files written before this canonical form carry a key of version 1 (no ``key_version``
field); taco_app.grid.legacy computes those and taco_app.grid.store.matches compares a file's key of
either version, so committed cells are found, never recomputed.
"""
import hashlib
import json
from dataclasses import asdict, fields

import taco_sim
from taco_ref import config as config_mod, data as data_mod, train
from taco_app.grid import Cell

KEY_VERSION = 2
CELL_FIELDS = ("domain", "algo", "size", "seed", "train_sketch_len", "n_tasks", "n_align", "test_lengths")
"""What a cell is, besides its training config (`cell["config"]`, the settings given)."""
FIELDS_AT_VERSION_2 = (
    "algo", "act_hidden", "stop_hidden", "activation", "sigma", "sigma_init", "lr", "lr_decay",
    "batch_size", "epoch_size", "epochs", "patience", "holdout_fraction", "ema", "select",
    "select_tasks", "select_from", "seed", "stop_dropout", "dropout_decay", "act_l2", "stop_l2",
    "terminal_stop", "stop_prior", "warmup_epochs", "temperature", "temperature_epochs", "restarts",
    "dtype", "normalise_states", "ctc_hidden", "ctc_lr", "ctc_weighting", "ctc_decoder",
    "compile_hidden", "compile_beta", "compile_temperature", "compile_prior_rate")
"""The config's fields when KEY_VERSION 2 was set: each always enters the key of an algorithm
that reads it. A field added since must declare metadata["before"]."""


def undeclared_fields(config_cls=None):
    """The fields of config_cls (TrainConfig) that could change committed cells' keys: a field
    added since KEY_VERSION 2 without metadata["before"], or a field of FIELDS_AT_VERSION_2
    that is gone (tests/test_cellkeys.py holds this empty)."""
    names = [f.name for f in fields(config_cls or train.TrainConfig)]
    added = [f.name for f in fields(config_cls or train.TrainConfig)
             if f.name not in FIELDS_AT_VERSION_2 and "before" not in f.metadata]
    return added + [name for name in FIELDS_AT_VERSION_2 if name not in names]


def keyed_expert(cell):
    """The cell's expert where it enters the key (module docstring), else None."""
    expert = cell.get("expert")
    if expert is None or expert == taco_sim.get(cell["domain"]).expert_before:
        return None
    return expert


def split_of(cell):
    """The split of tasks the cell is evaluated on (taco_ref.evaluate.SPLITS): cell["split"],
    "test" when absent (every cell before validation cells existed)."""
    return cell.get("split") or "test"


def tests_of(cell):
    """The named test conditions the cell is evaluated on besides the standard test
    (cell["tests"], Domain.tests: the Dial's harder test), [] when none."""
    return list(cell.get("tests") or [])


def cell_fields(cell: Cell) -> dict:
    """What a cell file records of the cell besides its config: the CELL_FIELDS, its expert
    when it has one (cell["expert"]), its split when it is not "test" and its test conditions
    when it has any."""
    out = {k: cell.get(k) for k in CELL_FIELDS}
    if cell.get("expert") is not None:
        out["expert"] = cell["expert"]
    if split_of(cell) != "test":
        out["split"] = split_of(cell)
    if tests_of(cell):
        out["tests"] = tests_of(cell)
    return out


def training_config(cell):
    """The cell's TrainConfig (its config, with algo and seed the cell's)."""
    return train.TrainConfig.from_dict(dict(cell["config"], algo=cell["algo"], seed=cell["seed"]))


def full_config(cell: Cell) -> dict:
    """The cell's whole TrainConfig as a dict (every field, defaults included): what a cell
    file records."""
    return asdict(training_config(cell))


def canonical(cell):
    """The canonical form of a cell (module docstring): everything that decides its figures."""
    cfg = training_config(cell)
    full = asdict(cfg)
    before = config_mod.before_values(cfg)
    config = {k: full[k] for k in config_mod.fields_read_by(cfg.algo)
              if not (k in before and full[k] == before[k]) and k not in config_mod.inert_fields(cfg)}
    n_train = cell["size"] - data_mod.holdout_count(cell["size"], cfg.holdout_fraction)
    config["passes_per_epoch"] = train.passes_per_epoch(config.pop("epoch_size"), n_train)
    out = {"version": KEY_VERSION, **{k: cell.get(k) for k in CELL_FIELDS}, "config": config}
    if keyed_expert(cell) is not None:
        out["expert"] = keyed_expert(cell)
    if split_of(cell) != "test":
        out["split"] = split_of(cell)
    if tests_of(cell):
        out["tests"] = tests_of(cell)
    return out


def cell_key(cell: Cell) -> str:
    """SHA-256 of canonical(cell)."""
    return hashlib.sha256(json.dumps(canonical(cell), sort_keys=True).encode()).hexdigest()
