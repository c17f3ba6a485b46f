"""How hard may the Dial's harder test be? The expert on validation PINs under each candidate
disturbance (taco_sim.dial.disturb), for setting the test's levels before any model is scored.

The expert (disturb.DialExpert: the demonstrations' set-point controller, STOP once the keypad
registers its digit) dials N validation PINs (the validation split's seeds, spec/evaluation.md
§6: PINs from default_rng(80 000), episodes from 90 000; never a test PIN) on the standard
keypad under one disturbance at a time, then under the combinations asked for. A level is
admissible when the expert completes at least 99 % of them. Written: OUT/levels.json (one row
per candidate: variant, name, the disturbance, PIN lengths, completed, N, Wilson interval,
failure kinds) and OUT/levels.md (the table).

    python -m taco_app.analysis.dial_harder_levels --out results/dial-harder-levels [--n 400] [--variants dial dial-velocity]
"""
import argparse
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from taco_ref import evaluate, policy  # noqa: E402
from taco_ref.plumbing import files  # noqa: E402
from taco_sim.dial import disturb, expert, velocity  # noqa: E402
from taco_sim.dial.env import K, STATE_DIM, VOCAB  # noqa: E402

D = disturb.Disturbance
CANDIDATES = (
    ("standard", D(), (5,)),
    ("start 0.06", D(start=0.06), (5,)), ("start 0.1", D(start=0.1), (5,)), ("start 0.15", D(start=0.15), (5,)),
    ("noise 1 %", D(noise=0.01), (5,)), ("noise 2 %", D(noise=0.02), (5,)), ("noise 3 %", D(noise=0.03), (5,)),
    ("noise 5 %", D(noise=0.05), (5,)), ("noise 8 %", D(noise=0.08), (5,)),
    ("delay 1", D(delay=1), (5,)), ("delay 2", D(delay=2), (5,)),
    ("push 20 N", D(push=20.0), (5,)), ("push 40 N", D(push=40.0), (5,)), ("push 60 N", D(push=60.0), (5,)),
    ("PINs of 10", D(), (10,)),
)
"""(name, disturbance, PIN lengths): one factor at a time around the standard test."""

TASKS = {"dial": (expert.DialTask, 9), "dial-velocity": (velocity.DialVelocityTask, velocity.ACTION_DIM)}


def run(variant, disturbance, lengths, n, seed=0):
    """The expert's task_accuracy result on n validation PINs of the given lengths under
    disturbance, in the variant's task environment on the standard keypad."""
    task, action_dim = TASKS[variant]
    cfg = policy.PolicyConfig(state_dim=STATE_DIM, n_subtasks=K, action_dim=action_dim)
    agent = evaluate.Expert("expert", VOCAB, cfg, disturb.DialExpert)
    condition = disturb.TestCondition("", disturbance, tuple(lengths))
    sketch_seed, episode_seed = evaluate.split_seeds("validation", seed)
    sketches = condition.sketches(n, np.random.default_rng(sketch_seed))
    return evaluate.task_accuracy(agent, lambda: task("standard", disturbance), sketches, seed=episode_seed)


def parse_combination(text):
    """'name=start:0.1,noise:0.02,delay:1,push:40,lengths:5-10' -> (name, Disturbance, lengths)."""
    name, _, spec = text.partition("=")
    fields, lengths = {}, (5,)
    for part in spec.split(","):
        key, _, value = part.partition(":")
        if key == "lengths":
            lo, _, hi = value.partition("-")
            lengths = tuple(range(int(lo), int(hi or lo) + 1))
        elif key in ("delay", "push_steps"):
            fields[key] = int(value)
        else:
            fields[key] = float(value)
    return name, D(**fields), lengths


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m taco_app.analysis.dial_harder_levels",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for levels.json and levels.md")
    parser.add_argument("--n", type=int, default=400, help="validation PINs per candidate")
    parser.add_argument("--variants", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--only", nargs="*", default=None, help="combinations only: name=key:value,...")
    args = parser.parse_args(argv)
    candidates = [parse_combination(c) for c in args.only] if args.only is not None else list(CANDIDATES)
    path = os.path.join(args.out, "levels.json")
    rows = json.load(open(path)) if os.path.exists(path) else []
    done = {(r["variant"], r["name"], r["n"]) for r in rows}
    for variant in args.variants:
        for name, d, lengths in candidates:
            if (variant, name, args.n) in done:
                continue
            res = run(variant, d, lengths, args.n)
            k = res["outcomes"].count("1")
            lo, hi = evaluate.wilson_interval(k, args.n)
            rows.append({"variant": variant, "name": name, "disturbance": d.__dict__, "lengths": list(lengths),
                         "completed": k, "n": args.n, "wilson": [lo, hi], "failures": res.get("failures", {}),
                         "failure_details": res.get("failure_details", {})})
            print(f"{variant:14} {name:24} {k:4d} / {args.n}  {100 * k / args.n:5.1f} %  {res.get('failures', {})}",
                  file=sys.stderr, flush=True)
            os.makedirs(args.out, exist_ok=True)
            files.write_bytes(path, (json.dumps(rows, indent=1) + "\n").encode())
    lines = ["| variant | candidate | PIN lengths | expert completes | 95 % Wilson | failures |", "|---|---|---|---:|---|---|"]
    for r in rows:
        span = f"{r['lengths'][0]}-{r['lengths'][-1]}" if len(r["lengths"]) > 1 else str(r["lengths"][0])
        lines.append(f"| {r['variant']} | {r['name']} | {span} | {r['completed']} of {r['n']} "
                     f"({100 * r['completed'] / r['n']:.1f} %) | [{100 * r['wilson'][0]:.1f}, {100 * r['wilson'][1]:.1f}] "
                     f"| {', '.join(f'{k} {v}' for k, v in sorted(r['failures'].items())) or '-'} |")
    files.write_bytes(os.path.join(args.out, "levels.md"), ("\n".join(lines) + "\n").encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
