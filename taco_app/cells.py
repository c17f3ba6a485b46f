"""Cell files: the one place that reads and writes a grid's results (spec/evaluation.md §6).

Every finished cell is one JSON file, OUT/cells/<domain>/<algo>/n<size>/seed<seed>.json, written
atomically; a cell is finished when its file's key matches (`matches`: a key of version 2,
taco_app.cellkeys, or of version 1, taco_app.legacy); entries of an earlier version's
results.json become cell files when their key matches (`Store.finished`); OUT/failures.json
lists the cells that failed in the last run.
"""
import glob
import json
import os

from taco_ref import files
from taco_app import legacy
from taco_app import cellkeys
from taco_app.cellkeys import CELL_FIELDS, KEY_VERSION, cell_key, full_config
from taco_app.experiment import data_specs


# --- cell files -----------------------------------------------------------------------------

def matches(record, cell):
    """Whether a cell file's record was computed for cell: its key equals the cell's key of the
    record's key_version (1 when absent: taco_app.legacy.cell_key_v1)."""
    version = record.get("key_version", 1)
    if version == KEY_VERSION:
        return record["key"] == cell_key(cell)
    return version == 1 and record["key"] == legacy.cell_key_v1(cell)


def cell_path(out_dir, cell):
    """OUT/cells/<domain>/<algo>/n<size>/seed<seed>.json"""
    return os.path.join(out_dir, "cells", cell["domain"], cell["algo"], f"n{cell['size']}",
                        f"seed{cell['seed']}.json")


def write_cell(out_dir, record):
    """Write a cell's record to its cell file, atomically; returns the path."""
    path = cell_path(out_dir, record["cell"])
    files.write_bytes(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return path


def read_cell(path):
    """The record in a cell file, or None when it is not one (unreadable, not JSON, or without
    key, cell and figures): such a file is never reused, its cell runs again."""
    try:
        record = files.read_json(path)
    except ValueError:
        return None
    if not isinstance(record, dict) or not all(isinstance(record.get(k), (str, dict))
                                               for k in ("key", "cell", "figures")):
        return None
    return record


def finished(out_dir, cell):
    """The record of cell in out_dir if it was computed with this very cell (same cell_key), else
    None: a cell file of another config is never reused."""
    record = read_cell(cell_path(out_dir, cell))
    return record if record is not None and matches(record, cell) else None


def load_cells(out_dir):
    """Every cell file's record under out_dir/cells, in path order."""
    paths = sorted(glob.glob(os.path.join(out_dir, "cells", "*", "*", "n*", "seed*.json")))
    return [r for r in map(read_cell, paths) if r is not None]


def flat(record):
    """A record as one row for the tables and figures: the cell's fields, its figures, key and seconds."""
    return dict(record["cell"], **record["figures"], key=record["key"], seconds=record.get("seconds"))


def _from_results_json(old, cell, key):
    """A cell file's record for the results.json entry old of cell (key: its version-1 key).
    The old record has no data fingerprints and only the training time."""
    figures = {k: v for k, v in old.items()
               if k not in CELL_FIELDS + ("key", "config", "data", "test_data", "seconds")}
    data = {name: {"n": spec[1], "sketch_len": spec[2], "seed": spec[3], "fingerprint": None}
            for name, spec in zip(("train", "test"), data_specs(cell))}
    return {"key": key, "cell": cellkeys.cell_fields(cell),
            "config": full_config(cell), "data": data, "figures": figures,
            "seconds": old.get("seconds"), "train_seconds": old.get("seconds"), "versions": None,
            "migrated": "results.json"}


class Store:
    """A grid's results directory, the one writer of its files: cell files and failures.json.

    finished(cell) is the record of cell when its cell file matches its key; else, when the
    directory's results.json (an earlier version's record) holds the cell under its version-1
    key, that entry becomes the cell's file first (`"migrated": "results.json"`) and is
    returned; else None (a file of another config is never reused, its cell runs again)."""

    def __init__(self, out_dir):
        self.out_dir = out_dir
        self._legacy = None
        self.migrated = 0

    def path(self, cell):
        return cell_path(self.out_dir, cell)

    def finished(self, cell):
        record = read_cell(self.path(cell))
        if record is not None and matches(record, cell):
            return record
        if self._legacy is None:
            self._legacy = {r.get("key"): r for r in legacy.load(self.out_dir)}
        key = legacy.cell_key_v1(cell) if self._legacy else None
        if key is None or key not in self._legacy:
            return None
        record = _from_results_json(self._legacy[key], cell, key)
        self.write(record)
        self.migrated += 1
        return record

    def stale(self, cell):
        """Whether cell has a file of another config (it will be recomputed)."""
        return os.path.exists(self.path(cell)) and self.finished(cell) is None

    def write(self, record):
        """The record's cell file, written atomically; returns its path."""
        return write_cell(self.out_dir, record)

    def write_failures(self, failures):
        """failures.json: the cells that failed in this run; removed when there are none."""
        path = os.path.join(self.out_dir, "failures.json")
        if failures:
            files.write_bytes(path, (json.dumps(failures, indent=1) + "\n").encode())
        elif os.path.exists(path):
            os.unlink(path)


def load_results(out_dir):
    """The rows of out_dir: every cell file, and the results.json cells of (domain, algo, size,
    seed) that have no cell file (so a directory not yet migrated still reports)."""
    rows = [flat(r) for r in load_cells(out_dir)]
    have = {tuple(r[k] for k in ("domain", "algo", "size", "seed")) for r in rows}
    rows += [dict(r, legacy=True) for r in legacy.load(out_dir)
             if tuple(r.get(k) for k in ("domain", "algo", "size", "seed")) not in have]
    return rows


def load_failures(out_dir):
    """The failed cells of the last grid run in out_dir (out_dir/failures.json), or []."""
    return legacy.read_list(os.path.join(out_dir, "failures.json"))


