"""Checkpoints and run folders: everything needed to continue a training run exactly where it
stopped (spec/training.md §8), and nothing of the method. taco_ref.train calls `save` after
every epoch and `load` on --resume; a reader of the algorithm can skip this module.

A checkpoint is checkpoint.json (the commit point: counters, history, optimiser record, the
generator's state, the config, the arrays file's name and SHA-256) and one of two .npz files
written in turn, so a crash at any moment leaves the previous checkpoint whole. Loading checks
every field and array before the run uses any of it.
"""
import json
import math
import os
from dataclasses import asdict

import numpy as np

from taco_ref import config as config_mod
from taco_ref.plumbing import files


CHECKPOINT_META = "checkpoint.json"


def save(out_dir, job, state, adam, best, average=None):
    """Arrays go to one of two files in turn, then the JSON (the commit point) names that file
    and its SHA-256: a crash at any moment leaves the previous checkpoint intact and usable."""
    arrays = {f"param.{k}": v for k, v in job.params.items()}
    arrays.update({f"best.{k}": v for k, v in best.items()})
    arrays.update({f"ema.{k}": v for k, v in (average or {}).items()})
    adam_arrays, adam_meta = adam.state()
    arrays.update(adam_arrays)
    blob, sha256 = files.npz_blob(arrays)
    name = f"checkpoint-{state['saves'] % 2}.npz"
    files.write_bytes(os.path.join(out_dir, name), blob)
    meta = dict(state, adam=adam_meta, config=asdict(job.cfg), arrays_file=name, arrays_sha256=sha256)
    files.write_bytes(os.path.join(out_dir, CHECKPOINT_META), json.dumps(meta, indent=1, sort_keys=True).encode())


NO_TIME = {"seconds": 0.0, "cpu_seconds": 0.0, "processes": 0}
"""A run's cost before its first process (_Run.spent); also an earlier checkpoint's, which did
not record it."""

_CHECKPOINT_FIELDS = {"stage": int, "epoch": int, "bad_epochs": int, "saves": int, "history": list,
                      "config": dict, "adam": dict, "rng": dict, "arrays_file": str,
                      "arrays_sha256": str}


def _number(x):
    """Whether x is a finite JSON number (not a bool; an integer too large for a float is not)."""
    try:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    except OverflowError:
        return False


def _check_progress(meta, path, job):
    """ValueError ("cannot resume: ...") unless the counters, history, optimiser record and
    generator state of checkpoint.json are what a run writes: each a value the loop can use."""
    def bad(field, expected):
        raise ValueError(f"cannot resume: {path}: field {field!r} must be {expected}, "
                         f"got {_one_line_repr(meta.get(field))}")
    if meta["saves"] < 1:
        bad("saves", "a positive integer")
    if meta.get("best_loss") is not None and not _number(meta.get("best_loss")):
        bad("best_loss", "null or a finite number")
    if meta.get("best_score") is not None and not (_number(meta["best_score"]) and 0 <= meta["best_score"] <= 1):
        bad("best_score", "null or a share in [0, 1]")
    if meta["bad_epochs"] > meta["epoch"]:
        bad("bad_epochs", f"at most the epochs run in the stage ({meta['epoch']})")
    for entry in meta["history"]:
        if (not isinstance(entry, dict) or entry.get("stage") not in job.stages
                or not isinstance(entry.get("epoch"), int) or isinstance(entry.get("epoch"), bool)
                or not all(_number(entry.get(k)) for k in ("train_loss", "held_out_loss"))):
            bad("history", f"a list of {{stage, epoch, train_loss, held_out_loss}} records, one of "
                           f"{list(job.stages)} and finite numbers each")
    stages = [job.stages.index(entry["stage"]) for entry in meta["history"]]
    current = sum(s == meta["stage"] for s in stages)
    if (stages != sorted(stages) or (stages and stages[-1] > meta["stage"])
            or (meta["stage"] < len(job.stages) and current != meta["epoch"])):
        bad("history", f"one record per epoch run, stage by stage: {meta['epoch']} of stage "
                       f"{meta['stage']} so far")
    spent = meta.get("spent")                      # absent from checkpoints written before it was kept
    if spent is not None and not (isinstance(spent, dict) and set(spent) == set(NO_TIME)
            and all(_number(spent[k]) and spent[k] >= 0 for k in ("seconds", "cpu_seconds"))
            and isinstance(spent["processes"], int) and not isinstance(spent["processes"], bool)
            and spent["processes"] >= 1):
        bad("spent", "an object {seconds, cpu_seconds, processes}: non-negative numbers and a "
                     "positive count")
    step_count = meta["adam"].get("step_count")
    if isinstance(step_count, bool) or not isinstance(step_count, int) or step_count < 0:
        bad("adam", "an object with step_count a non-negative integer")
    probe = np.random.default_rng(0).bit_generator
    try:
        probe.state = meta["rng"]
        written = probe.state == meta["rng"]          # what the run wrote reads back the same
    except (TypeError, ValueError, KeyError, OverflowError):
        written = False
    if not written:
        bad("rng", f"the state of a {type(probe).__name__} generator, as the run wrote it")


def _one_line_repr(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def config_changes(saved, cfg):
    """The fields, sorted, in which a checkpoint's config (saved: the dict it recorded) differs
    from cfg in what the run reads (config.fields_read_by: the shared fields and its algorithm's
    section) and can change it (config.inert_fields). A field of another algorithm's section
    does not stop a resume, nor does a field
    added to the config since the checkpoint was written while cfg holds the value at which a
    run is the run from before it (its metadata "before", as cell keys take it). A field the
    checkpoint has and the config no longer knows is a difference."""
    now = asdict(cfg)
    before = config_mod.before_values(cfg)
    changed = {k for k in saved if k not in now}
    inert = config_mod.inert_fields(cfg)
    for k in config_mod.fields_read_by(cfg.algo):
        if k in inert:
            continue
        if k in saved:
            if saved[k] != now[k]:
                changed.add(k)
        elif not (k in before and now[k] == before[k]):
            changed.add(k)
    return sorted(changed)


def load(out_dir, job, data_sha256):
    """(meta, arrays, best) of the checkpoint in out_dir, every field and array checked against
    the run job is (its data's fingerprint, its config, its stages, the shapes and dtypes of its
    parameters); ValueError "cannot resume: ..." naming the first that is not."""
    path = os.path.join(out_dir, CHECKPOINT_META)
    meta = files.read_json(path)
    for name, kind in _CHECKPOINT_FIELDS.items():
        if not isinstance(meta.get(name), kind) or isinstance(meta.get(name), bool):
            raise ValueError(f"cannot resume: {path}: field {name!r} missing or not a {kind.__name__}")
    most = max(stage.epochs(job.cfg) for stage in job.algorithm.stages(job.cfg))
    if not (0 <= meta["stage"] <= len(job.stages) and meta["epoch"] >= 0 and meta["bad_epochs"] >= 0
            and meta["epoch"] <= max(most, 0)):
        raise ValueError(f"cannot resume: {path}: stage {meta['stage']}, epoch {meta['epoch']} are "
                         f"outside this run's {len(job.stages)} stages and {most} epochs")
    if meta.get("data_sha256") != data_sha256:
        raise ValueError(f"cannot resume: the checkpoint in {out_dir} was made on different data")
    changed = config_changes(meta["config"], job.cfg)
    if changed:
        raise ValueError(f"cannot resume: the checkpoint in {out_dir} was made with a different "
                         f"config (differs in {changed})")
    _check_progress(meta, path, job)
    arrays = files.read_npz(os.path.join(out_dir, os.path.basename(meta["arrays_file"])),
                            meta["arrays_sha256"], recorded_in=f"{CHECKPOINT_META} (cannot resume)")
    for k in job.params:
        for key in (f"param.{k}", f"best.{k}"):
            got = arrays.get(key)
            if got is None or got.dtype != job.params[k].dtype or got.shape != job.params[k].shape:
                have = "missing" if got is None else f"{got.dtype} {got.shape}"
                raise ValueError(f"cannot resume: {path}: {key} is {have}, this run needs "
                                 f"{job.params[k].dtype} {job.params[k].shape}")
            if not np.isfinite(got).all():
                raise ValueError(f"cannot resume: {path}: {key} holds non-finite values")
        job.params[k] = arrays[f"param.{k}"]
    if meta["stage"] < len(job.stages):             # the optimiser state of the stage under way
        for name in job.names(job.stages[meta["stage"]]):
            for key in (f"adam.m.{name}", f"adam.v.{name}"):
                got = arrays.get(key)
                want = job.params[name]
                if got is None or got.dtype != want.dtype or got.shape != want.shape:
                    have = "missing" if got is None else f"{got.dtype} {got.shape}"
                    raise ValueError(f"cannot resume: {path}: {key} is {have}, this run needs "
                                     f"{want.dtype} {want.shape}")
                if not np.isfinite(got).all() or (key.startswith("adam.v.") and (got < 0).any()):
                    raise ValueError(f"cannot resume: {path}: {key} holds non-finite"
                                     f"{' or negative' if key.startswith('adam.v.') else ''} values")
    best = {k[len("best."):]: v for k, v in arrays.items() if k.startswith("best.")}
    return meta, arrays, best


def prepare_out_dir(out_dir, resume=False, overwrite=False):
    """Check out_dir before any work: it must be a directory or not exist; a run already there
    (a checkpoint or a finished model) is continued only with resume and replaced only with
    overwrite, never silently. Removes temporary files a killed writer left behind."""
    if out_dir is None:
        return
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"--out: {out_dir} exists and is not a directory")
    has_run = any(os.path.exists(os.path.join(out_dir, name))
                  for name in (CHECKPOINT_META, os.path.join("model", "model.json"),
                               os.path.join("restart-0", CHECKPOINT_META)))
    if has_run and not (resume or overwrite):
        raise ValueError(f"--out: {out_dir} already holds a training run; pass --resume to continue "
                         "it or --overwrite to start again")
    for folder in (out_dir, os.path.join(out_dir, "model")):
        files.remove_stale_temporaries(folder)
