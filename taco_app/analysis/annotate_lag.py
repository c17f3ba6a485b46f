"""Why does a state key that repeats the previous action make `taco annotate`'s boundaries
come a frame late? Measured on the Dial (continuous torques), the same demonstrations with and
without such a key.

Two datasets of the same expert demonstrations (torques, or with --domain dial-velocity joint
velocity targets): "state" (the Dial's observation) and
"state + previous action" (each frame's state with the action of the frame before appended,
zeros on the first: what an `observation.velocity` holding the last command carries). TACO is
trained on each with the same config and seed (the Dial's, `augment` and `views` off: the
appended dimensions are no key offsets) and labels its own training data (Viterbi), as
`taco annotate` without `--model` does. For every true boundary b (the first frame of sketch
step l + 1):

  offset     the annotated boundary minus b (0 on time, +1 a frame late);
  actions    log pi_{l+1}(a_t | s_t) - log pi_l(a_t | s_t) at t = b and t = b + 1: which
             sub-policy explains the frame's action (positive: the new one);
  STOP       P(STOP | s_t) of step l's sub-policy at t = b and b + 1.

    python -m taco_app.analysis.annotate_lag [--n 120] [--epochs 20] [--seed 0] --out OUT.json

Prints the tables (markdown); OUT.json holds every figure.
"""
import argparse
import dataclasses
import io
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import taco_sim  # noqa: E402
from taco_app import config as config_mod  # noqa: E402
from taco_ref import annotate, evaluate, train  # noqa: E402

COLLECT_SEED = 50_000
"""Seed of the demonstrations: no grid cell's training (10 000 + s) or held-out (20 000 + s) set."""


def with_previous_action(demos):
    """demos with each state's previous action appended (zeros before the first action)."""
    N, T, _ = demos.states.shape
    prev = np.zeros((N, T, demos.actions.shape[2]), dtype=demos.states.dtype)
    prev[:, 1:] = demos.actions[:, :-1]
    last = demos.actions[np.arange(N), demos.traj_len - 1]                       # (N, A)
    return dataclasses.replace(demos, states=np.concatenate([demos.states, prev], axis=2),
                               final_state=np.concatenate([demos.final_state, last], axis=1))


def measure(demos, epochs, seed, domain):
    """Train TACO on demos, label them; per true boundary: offset, action margins, STOP."""
    cfg = config_mod.load(domain, overrides=[f"epochs={epochs}", f"patience={epochs}", "augment=false",
                                             "views=1"], algo="taco", seed=seed)
    model = train.train(demos, cfg, log=io.StringIO(), progress=False)
    lattice = evaluate.scores(model, demos)                                   # log_act, log_stop, log_go (N, T, L)
    positions = annotate.annotate_lattice(*lattice, demos.traj_len, demos.sketch_len).positions
    log_act, log_stop, _ = lattice
    rows = []
    for n in range(demos.n):
        T = int(demos.traj_len[n])
        truth, got = demos.labels[n, :T], positions[n, :T]
        for b in np.nonzero(np.diff(truth))[0] + 1:
            l = int(truth[b - 1])
            hits = np.nonzero(got == l + 1)[0]
            found = int(hits[0]) if len(hits) else T
            row = {"offset": found - int(b)}
            for k, t in (("b", b), ("b+1", b + 1)):
                if t < T:
                    row[f"act_margin_{k}"] = float(log_act[n, t, l + 1] - log_act[n, t, l])
                    row[f"stop_{k}"] = float(np.exp(log_stop[n, t, l]))
            rows.append(row)
    return rows


def summary(rows):
    off = np.array([r["offset"] for r in rows])
    out = {"boundaries": len(rows),
           "offset": {str(k): int(np.sum(off == k)) for k in (-1, 0, 1)} | {"other": int(np.sum(np.abs(off) > 1))},
           "offset_histogram": {str(k): int(np.sum(off == k)) for k in np.unique(off)},
           "further_median_abs": float(np.median(np.abs(off[np.abs(off) > 1]))) if np.any(np.abs(off) > 1) else 0.0}
    for key in ("act_margin_b", "act_margin_b+1", "stop_b", "stop_b+1"):
        v = np.array([r[key] for r in rows if key in r])
        out[key] = np.percentile(v, (5, 50, 95)).round(3).tolist()
    return out


def table(figures):
    lines = ["| state | boundaries | on time | 1 late | 1 early | further (their median \\|offset\\|) | log-lik margin new - old at b "
             "| at b + 1 | P(STOP) old at b | at b + 1 |", "|---|---:|---:|---:|---:|---:|---|---|---|---|"]
    for name, s in figures["variants"].items():
        o = s["offset"]

        def f(v):
            return f"{v[1]:g} [{v[0]:g}, {v[2]:g}]"
        lines.append(f"| {name} | {s['boundaries']} | {o['0']} | {o['1']} | {o['-1']} | {o['other']} "
                     f"({s['further_median_abs']:g}) "
                     f"| {f(s['act_margin_b'])} | {f(s['act_margin_b+1'])} | {f(s['stop_b'])} | {f(s['stop_b+1'])} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m taco_app.analysis.annotate_lag",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=120, help="demonstrations (default 120)")
    ap.add_argument("--epochs", type=int, default=20, help="training epochs (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="training seed")
    ap.add_argument("--domain", default="dial", choices=["dial", "dial-velocity"],
                    help="torques (dial) or joint velocity targets (dial-velocity)")
    ap.add_argument("--out", required=True, help="JSON file of every figure")
    args = ap.parse_args(argv)
    dom = taco_sim.get(args.domain)
    demos = dom.collect(args.n, dom.train_sketch_len, COLLECT_SEED + args.seed)
    figures = {"domain": args.domain, "n": args.n, "epochs": args.epochs, "seed": args.seed, "collect_seed": COLLECT_SEED + args.seed,
               "variants": {}}
    for name, d in (("state", demos), ("state + previous action", with_previous_action(demos))):
        figures["variants"][name] = summary(measure(d, args.epochs, args.seed, args.domain))
        print(f"{name}: done", file=sys.stderr, flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(figures, f, indent=1)
    print(table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
