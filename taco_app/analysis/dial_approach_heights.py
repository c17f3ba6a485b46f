"""How high is the fingertip over a key in the control steps before the keypad registers it?
The figure behind the ROS bridge's hand-over rule (keypad.REACH_HEIGHT, REACH_RADIUS;
spec/dial.md §10): a run that starts with the finger within reach of a key first lifts off it,
and a press of that key before the finger is out of reach belongs to the run before. The rule
is sound when a finger above REACH_HEIGHT needs more control steps to press than a new
sub-policy needs to turn away.

Two sources, neither the test PINs:

  demonstrations  fresh expert demonstrations with DART noise (dial_stop_timing's
                  instrumented_demos, its seed): the pressing step is the last acting step of
                  each segment (the keypad counts the key during it).
  rollouts        each --model executed on validation PINs (evaluate.validation_rollouts'
                  sketches and seeds): the pressing step is the step during which the keypad's
                  count rises.

For k = 0 (the pressing step's state), 1, 2, ... steps before: the fingertip's height over the
pressed key's top and its horizontal distance from the key's centre (percentiles), the share of
presses already within reach, and per press the number of steps it spent within reach before
pressing (the steps a new run's sub-policy would have to turn away).

    python -m taco_app.analysis.dial_approach_heights [--model DIR ...] [--demos 100] [--n-tasks 50] --out OUT.json

Prints the tables (markdown); OUT.json holds every figure.
"""
import argparse
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from taco_bridge import keypad  # noqa: E402
from taco_ref import evaluate, model as model_mod  # noqa: E402
from taco_app.analysis import dial_stop_timing as timing  # noqa: E402

BEFORE = 10
"""Steps before the pressing step reported (k = 0 .. BEFORE)."""


def demo_approaches(demos):
    """Per press of the demonstrations: (heights (BEFORE + 1,), distances (BEFORE + 1,)) at
    k = 0 .. BEFORE steps before the pressing step (NaN before the episode's start)."""
    out = []
    for demo in demos:
        labels = demo["labels"]
        for k, digit in enumerate(demo["sketch"]):
            press = int(np.flatnonzero(labels == k)[-1])
            out.append(_window([demo["states"][t] if t >= 0 else None
                                for t in range(press, press - BEFORE - 1, -1)], int(digit)))
    return out


def rollout_approaches(model, n_tasks, seed):
    """Per press registered in validation rollouts of model (sketches and seeds of
    evaluate.validation_rollouts, executed with the model's own views and STOP hold, as the
    bridge executes it): the same windows, the pressing step being the step during which the
    keypad's count rose; the pressed key is the one the count credited."""
    dom, sketches, seeds, views = timing.validation_pins(model, n_tasks, seed)
    stop_hold = int(model.config.get("stop_hold", 1))
    out = []
    for sketch, s in zip(sketches, seeds):
        trace = []                                                  # (progress, obs) after each step

        def observe(task, active):
            trace.append((task.progress, task.env.obs))

        evaluate.execute(model, dom.validation_env(), list(sketch), int(s), observer=observe, views=views,
                         stop_hold=stop_hold)
        for t in range(1, len(trace)):
            if trace[t][0] > trace[t - 1][0]:                       # the step from t - 1 pressed
                digit = int(sketch[trace[t - 1][0]])
                out.append(_window([trace[i][1] if i >= 0 else None
                                    for i in range(t - 1, t - 2 - BEFORE, -1)], digit))
    return out


def _window(states, digit):
    h = np.full(len(states), np.nan)
    r = np.full(len(states), np.nan)
    for i, s in enumerate(states):
        if s is not None:
            h[i], r[i] = keypad.key_offset(s, digit)
    return h, r


def summary(windows):
    """{"k": [...], "height": [[p0, p5, p50, p95, p100] per k] (mm), "distance": the same,
    "in_reach": share per k, "steps_in_reach": {min, median, max}, "descent": the median drop
    (mm) from step k + 1 to step k}."""
    H = np.array([w[0] for w in windows]) * 1000                      # (P, BEFORE + 1) mm
    R = np.array([w[1] for w in windows]) * 1000
    reach = (H < keypad.REACH_HEIGHT * 1000) & (R < keypad.REACH_RADIUS * 1000)
    # steps within reach before the press, counted back from the pressing step until out of reach
    steps = [int(np.argmin(row)) if not row.all() else BEFORE + 1 for row in reach]
    q = (0, 5, 50, 95, 100)
    return {"n_presses": len(windows), "k": list(range(BEFORE + 1)),
            "height": [np.nanpercentile(H[:, k], q).round(1).tolist() for k in range(BEFORE + 1)],
            "distance": [np.nanpercentile(R[:, k], q).round(1).tolist() for k in range(BEFORE + 1)],
            "in_reach": [float(np.mean(reach[:, k])) for k in range(BEFORE + 1)],
            "steps_in_reach": {"min": int(min(steps)), "median": float(np.median(steps)), "max": int(max(steps))},
            "descent": [float(np.nanmedian(H[:, k + 1] - H[:, k])) for k in range(BEFORE)]}


def table(name, s, dt):
    lines = [f"### {name}: {s['n_presses']} presses", "",
             f"Steps within reach before the press (REACH_HEIGHT {keypad.REACH_HEIGHT * 1000:g} mm, "
             f"REACH_RADIUS {keypad.REACH_RADIUS * 1000:g} mm; counted back from the pressing step): "
             f"min {s['steps_in_reach']['min']}, median {s['steps_in_reach']['median']:g}, "
             f"max {s['steps_in_reach']['max']} (at most {BEFORE + 1} counted). Median descent a step, "
             f"k = 1 to 0, 2 to 1, ...: {', '.join(f'{d:.1f}' for d in s['descent'])} mm.", "",
             "| k (steps before the pressing step) | ms | height over key top (mm): min [5th, median, 95th] max "
             "| distance from centre (mm): median [95th] | within reach |",
             "|---:|---:|---|---|---:|"]
    for k in s["k"]:
        h, r = s["height"][k], s["distance"][k]
        lines.append(f"| {k} | {k * dt * 1000:.0f} | {h[0]} [{h[1]}, {h[2]}, {h[3]}] {h[4]} | {r[2]} [{r[3]}] "
                     f"| {100 * s['in_reach'][k]:.0f} % |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m taco_app.analysis.dial_approach_heights",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", default=[], help="a Dial model directory (repeatable)")
    ap.add_argument("--demos", type=int, default=100, help="instrumented demonstrations (default 100)")
    ap.add_argument("--n-tasks", type=int, default=50, help="validation PINs per model (default 50)")
    ap.add_argument("--seed", type=int, default=0, help="validation seed (evaluate.validation_rollouts)")
    ap.add_argument("--out", required=True, help="JSON file of every figure")
    args = ap.parse_args(argv)
    from taco_sim.dial import env as dial_env
    dt = dial_env.CONTROL_DT
    figures = {"demo_seed": timing.DEMO_SEED, "control_dt_s": dt, "reach_height_m": keypad.REACH_HEIGHT,
               "reach_radius_m": keypad.REACH_RADIUS, "sources": {}}
    demos = timing.instrumented_demos(args.demos, timing.DEMO_SEED)
    figures["sources"][f"expert demonstrations ({len(demos)}, DART noise)"] = summary(demo_approaches(demos))
    print("demonstrations: done", file=sys.stderr, flush=True)
    for path in args.model:
        m = model_mod.load(path)
        name = f"{m.algo} rollouts ({os.path.basename(os.path.normpath(path))}, {args.n_tasks} validation PINs)"
        figures["sources"][name] = summary(rollout_approaches(m, args.n_tasks, args.seed))
        print(f"{name}: done", file=sys.stderr, flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(figures, f, indent=1)
    print("\n\n".join(table(name, s, dt) for name, s in figures["sources"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
