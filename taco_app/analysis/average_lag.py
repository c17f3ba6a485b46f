"""How far behind its run's last parameters is the average a run keeps? For a finished run
with averaged parameters (`ema` or `ema_epochs`, spec/training.md eq. (14), (15)): the
held-out loss of its last epoch's parameters theta and of their average theta-bar (what the
run scores and keeps), and, on request, theta as a model directory for `taco evaluate`.

A finished run's checkpoint holds only the kept parameters (the change of stage copies them
in). The checkpoints alternate between two array files, so the other file holds the last
epoch's: theta (`param.*`) and theta-bar (`ema.*`). The held-out set is the run's own, split
from the data it trained on by its seed (train.TrainConfig.holdout_fraction), and the loss is
the trainer's (train.mean_loss): theta-bar's reproduces the run's last recorded held-out loss.

    python -m taco_app.analysis.average_lag --run RUN_DIR --data TRAINING_DATA [--model-out DIR]

prints one JSON object: beta, the policy stage's steps, epochs, held_out_last_iterate,
held_out_average, recorded (the history's last held-out loss).
"""
import argparse
import json
import os
import sys

import numpy as np

from taco_ref import data, model as model_mod, train
from taco_ref.plumbing import checkpoints, files

OTHER = {"checkpoint-0.npz": "checkpoint-1.npz", "checkpoint-1.npz": "checkpoint-0.npz"}


def last_epoch(run_dir):
    """(checkpoint metadata, {"param": theta, "ema": theta-bar}) of a finished run's last epoch;
    ValueError naming the run when it has no such checkpoint."""
    meta = files.read_json(os.path.join(run_dir, checkpoints.CHECKPOINT_META))
    name = OTHER.get(os.path.basename(str(meta.get("arrays_file"))))
    path = None if name is None else os.path.join(run_dir, name)
    if path is None or not os.path.isfile(path):
        raise ValueError(f"--run {run_dir}: no checkpoint of its last epoch (expected the array file "
                         f"other than {meta.get('arrays_file')!r})")
    with open(path, "rb") as f:
        arrays = files.load_npz(f, path, what="checkpoint array file")
    parts = {what: {k[len(what) + 1:]: v for k, v in arrays.items() if k.startswith(what + ".")}
             for what in ("param", "ema")}
    if not parts["ema"]:
        raise ValueError(f"--run {run_dir}: its last epoch kept no average (ema.* arrays): the run "
                         "trained without ema or ema_epochs, or had not finished")
    return meta, parts


def measure(run_dir, demos):
    """The figures of the module docstring for the run in run_dir, trained on demos."""
    meta, parts = last_epoch(run_dir)
    if meta.get("data_sha256") != demos.fingerprint():
        raise ValueError(f"--data: not the data the run in {run_dir} trained on (its fingerprint "
                         "differs from the checkpoint's data_sha256)")
    cfg = train.TrainConfig.from_dict(meta["config"])
    run = train._Run(demos, cfg, 0, None)           # the same split, by the run's seed
    job, stage = run.job, run.job.stages[-1]
    stage_train, held = job.stage_sets(stage, run.train_set, run.held_out)
    losses = {}
    for what in ("param", "ema"):
        job.params.update({k: v.astype(job.params[k].dtype) for k, v in parts[what].items()})
        losses[what] = train.mean_loss(job, stage, held, workspace=run.workspace)
    history = [h for h in meta["history"] if h["stage"] == stage]
    return {"run": run_dir, "beta": train.average_decay(cfg, stage_train.n),
            "steps": meta["adam"]["step_count"], "epochs": len(history),
            "held_out_last_iterate": losses["param"], "held_out_average": losses["ema"],
            "recorded": history[-1]["held_out_loss"] if history else None}


def last_iterate_model(run_dir, out):
    """Save the run's model with its last epoch's theta in place of the kept parameters."""
    _, parts = last_epoch(run_dir)
    model = model_mod.load(os.path.join(run_dir, "model"))
    missing = sorted(set(model.params) - set(parts["param"]))
    if missing:
        raise ValueError(f"--run {run_dir}: its checkpoint lacks the model's arrays {missing}")
    model.params = {k: np.asarray(parts["param"][k], dtype=np.float64) for k in model.params}
    model.info = dict(model.info, parameters=f"the last epoch's, not the kept average ({run_dir})")
    model_mod.save(model, out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m taco_app.analysis.average_lag",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a finished run's directory (its checkpoint.json)")
    ap.add_argument("--data", required=True, help="the demonstrations it trained on (.npz or a frames directory)")
    ap.add_argument("--model-out", metavar="DIR", help="also save the last epoch's parameters as a model here")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.run, data.load(args.data))), flush=True)
    if args.model_out:
        last_iterate_model(args.run, args.model_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
