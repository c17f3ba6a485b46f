"""Cell files: the one place that reads and writes a grid's results (spec/evaluation.md §6).

Every finished cell is one JSON file, OUT/cells/<domain>/<algo>/n<size>/seed<seed>.json, written
atomically; a cell is finished when its file's key matches (`matches`: a key of version 2,
taco_app.grid.keys, or of version 1, taco_app.grid.legacy); entries of an earlier version's
results.json become cell files when their key matches (`Store.finished`); OUT/failures.json
lists the cells that failed in the last run.
"""
import glob
import json
import os
from typing import Optional

from taco_ref.plumbing import files
from taco_app.grid import Cell, Record, keys as cellkeys, legacy
from taco_app.grid.keys import CELL_FIELDS, KEY_VERSION, cell_key, full_config
from taco_app.grid.cell import data_specs


# --- cell files -----------------------------------------------------------------------------

def matches(record, cell):
    """Whether a cell file's record was computed for cell: its key equals the cell's key of the
    record's key_version (1 when absent: taco_app.grid.legacy.cell_key_v1)."""
    version = record.get("key_version", 1)
    if version == KEY_VERSION:
        return record["key"] == cell_key(cell)
    return version == 1 and record["key"] == legacy.cell_key_v1(cell)


def cell_path(out_dir, cell):
    """OUT/cells/<domain>/<algo>/n<size>/seed<seed>.json"""
    return os.path.join(out_dir, "cells", cell["domain"], cell["algo"], f"n{cell['size']}",
                        f"seed{cell['seed']}.json")


def write_cell(out_dir, record: Record):
    """Write a cell's record to its cell file, atomically; returns the path."""
    path = cell_path(out_dir, record["cell"])
    files.write_bytes(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return path


class CellError(ValueError):
    """A cell file a report cannot use: names the file and what is wrong with it."""


def read_cell(path):
    """The record in a cell file, or None when it is not one (unreadable, not JSON, or without
    key, cell and figures): such a file is never reused, its cell runs again."""
    try:
        return _read_cell(path)
    except CellError:
        return None


def _read_cell(path):
    """The record in a cell file; CellError naming the file when it is unreadable, not JSON,
    or lacks its key (a string), cell and figures (objects)."""
    try:
        record = files.read_json(path, error=CellError)
    except OSError as err:
        raise CellError(f"{path}: cannot be read ({err.strerror})") from None
    for name, kind in (("key", str), ("cell", dict), ("figures", dict)):
        if not isinstance(record.get(name), kind):
            raise CellError(f"{path}: not a cell file: '{name}' is missing or not a JSON "
                            f"{'string' if kind is str else 'object'}")
    return record


SHARES = ("task_accuracy", "subtask_accuracy")
"""Figures every reported cell has: shares in [0, 1]."""


def check_reportable(row, where):
    """CellError naming `where` (a cell file, or results.json) unless row, a flat row, can be
    reported as it stands: the cell fields a table groups by, and every figure a verdict or a
    table reads finite and in range. A report that skipped it, or read NaN as a figure, would
    change what it says without a word."""
    import math
    import taco_sim
    from taco_ref import algorithms

    def bad(what):
        raise CellError(f"{where}: {what}; the report reads no damaged cell (recompute it with "
                        f"taco experiment --rerun, or restore it from git)")
    if row.get("domain") not in taco_sim.names():
        bad(f"cell.domain: expected one of {', '.join(taco_sim.names())}, got {row.get('domain')!r}")
    if row.get("algo") not in algorithms.names():
        bad(f"cell.algo: expected one of {', '.join(algorithms.names())}, got {row.get('algo')!r}")
    for name, least in (("size", 1), ("seed", 0), ("n_tasks", 1)):
        if type(row.get(name)) is not int or row[name] < least:
            bad(f"{name}: expected an integer >= {least}, got {row.get(name)!r}")

    def share(name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0.0 <= value <= 1.0:
            bad(f"figures.{name}: expected a finite share in [0, 1], got {value!r}")
    for name in SHARES:
        if name not in row:
            bad(f"figures.{name}: missing")
        share(name, row[name])
    for name, value in row.items():
        if name.startswith("align_"):
            share(name, value)
    for name in ("task_accuracy_by_length",):
        for L, value in (row.get(name) or {}).items():
            share(f"{name}.{L}", value)
    for name, figures in (row.get("tests") or {}).items():
        if not isinstance(figures, dict):
            bad(f"figures.tests.{name}: expected the figures of a test condition (an object)")
        for key in SHARES:
            share(f"tests.{name}.{key}", figures.get(key))
    outcomes = row.get("outcomes")
    if outcomes is not None and (not isinstance(outcomes, str) or set(outcomes) - {"0", "1"}
                                 or len(outcomes) != row["n_tasks"]):
        bad(f"figures.outcomes: expected a string of {row['n_tasks']} characters 0 and 1")
    if outcomes is not None and abs(outcomes.count("1") / row["n_tasks"] - row["task_accuracy"]) > 1e-9:
        bad(f"figures.task_accuracy {row['task_accuracy']!r} is not the share of 1s in its outcomes "
            f"({outcomes.count('1')} of {row['n_tasks']})")


def finished(out_dir, cell):
    """The record of cell in out_dir if it was computed with this very cell (same cell_key), else
    None: a cell file of another config is never reused."""
    record = read_cell(cell_path(out_dir, cell))
    return record if record is not None and matches(record, cell) else None


def partner_data(records, cell):
    """{"train"|"test": {"fingerprint", "partner"}}: the data fingerprints cell must train and be
    tested on, from the finished cells of records (a grid's cell files) that are its partners:
    the same domain, size and seed, another algorithm, and the same data spec (n, sketch length,
    seed, expert) of that set. A paired comparison of two methods needs one set of
    demonstrations; experiment.run_cell refuses other data (spec/evaluation.md §6, "Paired
    cells"). Partners recorded before fingerprints were (migrated) say nothing."""
    from taco_app.grid.cell import data_specs
    specs = dict(zip(("train", "test"), data_specs(cell)))
    out = {}
    for record in records:
        other = record.get("cell") or {}
        if (other.get("domain"), other.get("size"), other.get("seed")) != (cell["domain"], cell["size"], cell["seed"]) \
                or other.get("algo") == cell["algo"]:
            continue
        for name, spec in specs.items():
            data = (record.get("data") or {}).get(name) or {}
            same = (data.get("n"), data.get("sketch_len"), data.get("seed"), data.get("expert")) == \
                (spec[1], spec[2], spec[3], spec[4])
            if same and data.get("fingerprint") and name not in out:
                out[name] = {"fingerprint": data["fingerprint"], "partner": f"{other['algo']} seed {other['seed']}"}
    return out


def cell_paths(out_dir):
    """The cell files under out_dir/cells, in path order."""
    return sorted(glob.glob(os.path.join(out_dir, "cells", "*", "*", "n*", "seed*.json")))


def load_cells(out_dir, strict=False):
    """Every cell file's record under out_dir/cells, in path order. A file that is not a cell
    file is left out (the grid computes its cell again), or, with strict (a report), CellError
    naming it."""
    if strict:
        return [_read_cell(p) for p in cell_paths(out_dir)]
    return [r for r in map(read_cell, cell_paths(out_dir)) if r is not None]


def flat(record, where=None):
    """A record as one row for the tables and figures: the cell's fields, its figures, key and
    seconds. A figure named like a cell field with another value (n_tasks is both, equal)
    would relabel the cell: CellError naming where (the file) instead."""
    own = dict(record["cell"], key=record["key"], seconds=record.get("seconds"))
    clash = sorted(k for k in set(record["figures"]) & set(own) if record["figures"][k] != own[k])
    if clash:
        raise CellError(f"{where or 'a cell record'}: figures.{clash[0]} = {record['figures'][clash[0]]!r} "
                        f"would overwrite the cell's own {clash[0]} ({own[clash[0]]!r})")
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

    def finished(self, cell: Cell) -> Optional[Record]:
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

    def write(self, record: Record):
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
    """The rows of out_dir, for a report: every cell file, and the results.json cells of
    (domain, algo, size, seed) that have no cell file (so a directory not yet migrated still
    reports). Every row is checked (check_reportable): a damaged cell file, a figure that is
    not finite or not a share, or two files of one cell give CellError naming the file, never a
    row left out or a figure taken from results.json in its place."""
    rows, where = [], {}
    for path in cell_paths(out_dir):
        row = flat(_read_cell(path), path)
        check_reportable(row, path)
        ident = tuple(row[k] for k in ("domain", "algo", "size", "seed"))
        if ident in where:
            raise CellError(f"{path}: the same cell as {where[ident]} (domain, algorithm, size, seed)")
        where[ident] = path
        rows.append(row)
    results_json = os.path.join(out_dir, "results.json")
    for r in legacy.load(out_dir):
        if tuple(r.get(k) for k in ("domain", "algo", "size", "seed")) not in where:
            check_reportable(r, f"{results_json}: {r.get('algo')} n{r.get('size')} seed {r.get('seed')}")
            rows.append(dict(r, legacy=True))
    return rows


def load_failures(out_dir):
    """The failed cells of the last grid run in out_dir (out_dir/failures.json), or []."""
    return legacy.read_list(os.path.join(out_dir, "failures.json"))


