"""How many of the evaluation protocol's test PINs the ROS 2 bridge's control step dials.

`taco evaluate` executes a model with taco_ref's runner (spec/evaluation.md): a sub-task ends
when its sub-policy says STOP. The bridge's node adds keypad rules on top (taco_bridge/keypad.py,
control.py): a sub-task's STOP counts only once its key went down, a repeated digit waits for
the release, and commands are clipped to the interface's limits. This script runs that control
step (taco_bridge.control.Controller, the node's decisions without ROS) on taco_sim's DialEnv,
offline, over the same test PINs and episode seeds as `taco evaluate --n-tasks N` (protocol seed
0: the standard keypad, home poses from the same seeds), and prints both counts:

    python bench/bridge_offline.py sim/taco_sim/dial/models/dial --n-tasks 500
    python bench/bridge_offline.py sim/taco_sim/dial/models/dial-velocity --interface velocity

A PIN counts as dialled when the run ends "done" and the keypad registered exactly its digits.
"""
import argparse
import json
import os
import sys
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "ros2_ws" / "src" / "taco_bridge"))
import taco_sim  # noqa: E402
from taco_ref import evaluate  # noqa: E402
from taco_ref.model import load  # noqa: E402
from taco_sim import dial  # noqa: E402
from taco_bridge.control import Controller, joint_bounds, run_offline  # noqa: E402

INTERFACES = {"effort": ("dial", dial.TORQUE_LIMITS), "velocity": ("dial-velocity", dial.VELOCITY_LIMITS)}


def dial_pin(ctl, env, sketch, velocity):
    """True if the controller's control step dialled sketch on env (no keypad topic: the press
    rule reads the fingertip, as the node does without /dial/pressed)."""
    run = run_offline(ctl, env, sketch, env.velocity_step if velocity else env.step)
    return run.outcome == "done" and list(env.presses) == list(sketch)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="model directory")
    ap.add_argument("--interface", choices=sorted(INTERFACES), default="effort")
    ap.add_argument("--n-tasks", type=int, default=500)
    args = ap.parse_args(argv)
    domain_name, limits = INTERFACES[args.interface]
    domain = taco_sim.get(domain_name)
    model = load(args.model)
    sketches = evaluate.protocol_sketches(domain, args.n_tasks)
    seeds = np.random.default_rng(evaluate.EPISODE_SEED).integers(0, 2**31, size=len(sketches))
    low, high = joint_bounds(0.25)
    key_pos = dial.key_positions(np.asarray(dial.STANDARD_LAYOUT))
    dialled = 0
    for i, (row, seed) in enumerate(zip(sketches, seeds)):
        sketch = [int(d) for d in row if d >= 0]
        ctl = Controller(model, key_pos, limits, low, high, dial.CONTROL_DT, 0.25,
                         max_subtask_time=20.0, stop_threshold=0.5, press_grace=0.5)
        env = dial.DialEnv()
        env.reset(seed=int(seed), layout="standard")
        dialled += dial_pin(ctl, env, sketch, args.interface == "velocity")
        print(f"\rbridge control step: {i + 1}/{len(sketches)}, {dialled} dialled", end="", file=sys.stderr)
    print(file=sys.stderr)
    print(json.dumps(dict(model=args.model, interface=args.interface, n_tasks=len(sketches),
                          dialled=dialled, share=dialled / len(sketches))))


if __name__ == "__main__":
    main()
