"""Can a policy on Craft's features imitate the expert? GT-BC's action accuracy (spec/evaluation.md
eq. (12)) on held-out demonstrations of each expert, at one budget for both, and which rule of
the feature expert decided the steps its clone gets wrong (spec/craft.md §10).

For each expert (features, planner): 3000 demonstrations (collect seed 0; the trainer keeps 300
for early stopping) and 500 held-out ones (collect seed 99); GT-BC with the Craft config and a
fixed budget (EPOCHS epochs, no early stop), at craft.yaml's L2 penalty and at a tenth of it;
action accuracy on the held-out set and on the training set. For the feature expert's clones,
accuracy by the rule of feature_plan that decided each held-out step.

    python -m taco_app.analysis.craft_realisability --out results/craft/realisability [--workers 2]
    python -m taco_app.analysis.craft_realisability --out results/craft/realisability --epochs 150 --patience 20 --l2 1e-4

Writes OUT/realisability.json (every figure) and OUT/realisability.md (the tables, which
tables() rebuilds from the JSON); with another budget than the default (--epochs, --patience),
OUT/realisability-e<E>-p<P>.json and .md. Runs resume from OUT/runs/ (not committed): a model
found there is used only if it was trained with the same config on the same data.
"""
import argparse
import collections
import concurrent.futures
import io
import json
import os
import sys
from dataclasses import asdict

import numpy as np

import taco_sim
from taco_app import config as config_mod
from taco_ref import data, evaluate, model as model_mod, policy, train
from taco_ref.plumbing import files
from taco_sim.craft import expert as ex, world as cw

EXPERTS = ("features", "planner")
N_TRAIN, TRAIN_SEED, N_HELD, HELD_SEED = 3000, 0, 500, 99
EPOCHS = 15
L2S = (1e-3, 1e-4)
RULES = ("1 next to the target", "2 a wanted move, target in a pooled block only",
         "2 a wanted move, target in the window", "3 clear the way", "4-5 step aside or back")


def rule_of(state, subtask):
    """Which rule of feature_plan (spec/craft.md §10) decides state for subtask: a name of RULES."""
    kinds, pooled, inventory, heading = ex.read_features(state)
    target = ex.subtask_target(subtask)[1]
    regions = ex.target_regions(kinds, pooled, target)
    cell = [int(kinds[ex.VIEW + dx, ex.VIEW + dy]) for dx, dy in cw.MOVES]   # (4,) neighbours
    if target in cell:
        return RULES[0]
    pull = ex.attraction(regions)
    back = cw.MOVES.index(tuple(-c for c in cw.MOVES[heading]))
    positive = [a for a in np.argsort(-pull, kind="stable") if pull[a] > 0]
    wanted = positive if positive == [back] else [a for a in positive if a != back]
    if any(cell[a] == 0 for a in wanted):
        in_window = any(r[0] == r[1] and r[2] == r[3] for r in regions)
        return RULES[2] if in_window else RULES[1]
    if any(ex._clearable(cell[a], inventory) for a in wanted):
        return RULES[3]
    return RULES[4]


def by_rule(model, demos):
    """{rule: [steps, steps whose demonstrated action is the clone's argmax]} over demos."""
    out = collections.defaultdict(lambda: [0, 0])
    for n in range(demos.n):
        for t in range(demos.traj_len[n]):
            k, s = int(demos.sketch[n, demos.labels[n, t]]), demos.states[n, t]
            best = int(np.argmax(policy.action_head(model.params, model.policy, k, s[None])[0]))
            counts = out[rule_of(s, k)]
            counts[0] += 1
            counts[1] += int(best == int(demos.actions[n, t]))
    return dict(out)


def dataset(out, expert, n, seed):
    path = os.path.join(out, "runs", f"{expert}-n{n}-seed{seed}.npz")
    if os.path.exists(path):
        return data.load(path)
    demos = taco_sim.get("craft").collect(n, None, seed, expert=expert)
    data.save(demos, path)
    return demos


def run(out, expert, l2, epochs=EPOCHS, patience=EPOCHS):
    """One clone: its figures (a dict). patience = epochs: no early stop."""
    demos, held = dataset(out, expert, N_TRAIN, TRAIN_SEED), dataset(out, expert, N_HELD, HELD_SEED)
    cfg = config_mod.load("craft", overrides=[f"epochs={epochs}", f"patience={patience}", f"act_l2={l2}",
                                              f"stop_l2={l2}"], algo="gtbc", seed=0)
    budget = "" if (epochs, patience) == (EPOCHS, EPOCHS) else f"-e{epochs}-p{patience}"
    run_dir = os.path.join(out, "runs", f"gtbc-{expert}-l2-{l2:g}{budget}")
    model_dir = os.path.join(run_dir, "model")
    if os.path.exists(os.path.join(model_dir, "model.json")):          # trained before: the same run?
        model = model_mod.load(model_dir)
        volatile = ("collected_on", "format_version")     # set by collect / by data.load
        same = {k: v for k, v in model.info.get("data", {}).items() if k not in volatile} == \
            {k: v for k, v in demos.meta.items() if k not in volatile}
        if model.config != asdict(cfg) or not same:
            raise ValueError(f"{model_dir}: trained with another config or data; remove it")
    else:
        model = train.train(demos, cfg, out_dir=run_dir, log=io.StringIO(), overwrite=True)
    history = [h for h in model.info["history"] if h["stage"] == "policy"]
    figures = {"expert": expert, "l2": l2, "epochs": epochs, "patience": patience, "epochs_run": len(history),
               "held_out": evaluate.action_accuracy(model, held),
               "training_data": evaluate.action_accuracy(model, demos),
               "best_held_out_loss": min(h["held_out_loss"] for h in model.info["history"]
                                         if h["stage"] == "policy")}
    figures["held_out_steps"] = int(held.traj_len.sum())
    if expert == "features":
        figures["by_rule"] = by_rule(model, held)
    return figures


def wilson(k, n, z=1.96):
    """95 % Wilson interval of k successes in n."""
    p = k / n
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def tables(figures):
    """The markdown tables of figures (the JSON's content)."""
    first = figures["runs"][0]
    epochs, patience = first.get("epochs", EPOCHS), first.get("patience", EPOCHS)
    budget = (f"{epochs} epochs of the Craft config" if patience >= epochs else
              f"the Craft config's training (at most {epochs} epochs, early stopping with patience {patience} "
              "on the 300 demonstrations kept aside)")
    lines = [f"GT-BC, {N_TRAIN} demonstrations (collect seed {TRAIN_SEED}), {budget}; action accuracy on "
             f"{N_HELD} held-out demonstrations (seed {HELD_SEED}) of the same expert and on the training data.",
             "", "| expert | L2 | epochs run | held-out [95 % Wilson over steps] | training data |",
             "|---|---|---:|---:|---:|"]
    for f in figures["runs"]:
        steps = sum(v[0] for v in f["by_rule"].values()) if "by_rule" in f else f.get("held_out_steps")
        interval = ""
        if steps:
            lo, hi = wilson(round(f["held_out"] * steps), steps)
            interval = f" [{100 * lo:.1f}, {100 * hi:.1f}]"
        lines.append(f"| {f['expert']} | {f['l2']:g} | {f.get('epochs_run', f.get('epochs', EPOCHS))} | "
                     f"{100 * f['held_out']:.1f} %{interval} | {100 * f['training_data']:.1f} % |")
    for f in figures["runs"]:
        if "by_rule" in f:
            total = sum(v[0] for v in f["by_rule"].values())
            lines += ["", f"The feature expert's clone at L2 {f['l2']:g}, by the rule that decided each "
                      "held-out step:", "", "| rule | steps | share | accuracy |", "|---|---:|---:|---:|"]
            for rule in RULES:
                n, hit = f["by_rule"].get(rule, [0, 0])
                if n:
                    lines.append(f"| {rule} | {n} | {100 * n / total:.1f} % | {100 * hit / n:.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m taco_app.analysis.craft_realisability",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for realisability.json/.md and runs/")
    ap.add_argument("--workers", type=int, default=1, help="clones trained at once (processes)")
    ap.add_argument("--epochs", type=int, default=EPOCHS, help="epochs of every clone")
    ap.add_argument("--patience", type=int, default=None,
                    help="early stopping's patience (default: --epochs, i.e. none)")
    ap.add_argument("--l2", type=float, nargs="+", default=list(L2S), help="L2 penalties, each a clone per expert")
    ap.add_argument("--experts", nargs="+", choices=EXPERTS, default=list(EXPERTS))
    args = ap.parse_args(argv)
    patience = args.epochs if args.patience is None else args.patience
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    for expert in args.experts:                       # collected once, before the clones share them
        dataset(args.out, expert, N_TRAIN, TRAIN_SEED), dataset(args.out, expert, N_HELD, HELD_SEED)
    jobs = [(args.out, e, l2, args.epochs, patience) for l2 in args.l2 for e in args.experts]
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        runs = list(pool.map(run, *zip(*jobs)))
    figures = {"runs": runs}
    stem = "realisability" + ("" if (args.epochs, patience) == (EPOCHS, EPOCHS) else f"-e{args.epochs}-p{patience}")
    files.write_bytes(os.path.join(args.out, f"{stem}.json"),
                      (json.dumps(figures, indent=1, sort_keys=True) + "\n").encode())
    text = tables(figures)
    files.write_bytes(os.path.join(args.out, f"{stem}.md"), text.encode())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
