"""How many of the evaluation protocol's test PINs the ROS 2 bridge's control step dials (a
measurement, run by hand: `python -m taco_bridge.offline`; tests/test_bridge_control.py runs it small).

`taco evaluate` executes a model with taco_ref's runner (spec/evaluation.md): a sub-task ends
when its sub-policy says STOP. The bridge's node adds keypad rules on top (taco_bridge/keypad.py,
control.py): a sub-task's STOP counts only once its key went down, a repeated digit waits for
the release, and commands are clipped to the interface's limits. This script runs that control
step (taco_bridge.control.Controller, the node's decisions without ROS) on taco_sim's DialEnv,
offline, over the same test PINs and episode seeds as `taco evaluate --n-tasks N` (protocol seed
0: the standard keypad, home poses from the same seeds), and prints both counts:

    python -m taco_bridge.offline sim/taco_sim/dial/models/dial --n-tasks 500
    python -m taco_bridge.offline sim/taco_sim/dial/models/dial-velocity --interface velocity

A PIN counts as dialled when the run ends "done" and the keypad registered exactly its digits.
The JSON printed gives the count, each PIN's outcome (`outcomes`, "1" dialled) and a tally of
what went wrong with the others (`failures`: pin_failure).
With --test NAME the arm meets a named test condition of the Dial (taco_sim.dial.disturb: the
harder test, noise-5, push, ...): its PINs and its disturbances, as `taco evaluate --test NAME`:

    python -m taco_bridge.offline sim/taco_sim/dial/models/dial --test harder

With --preempt N it runs N targeted preemptions instead (taco_bridge.keypad's hand-over rule):
a PIN of four distinct digits is dialled with the simulated keypad's presses handed to the
controller; one of its presses is picked at random, and the same deterministic run is started
again with a second PIN of four distinct digits sent `lead` control steps before the step in
which that press registers (lead uniform in 0-7: the press registers 20-300 ms after the new
sketch arrived). A false error is a new run that does not end "done" (e.g. "the keypad
registered 8, not the sketch 6 9 3"); `inherited` counts the trials in which the rule gave the
old run a press that registered after the new sketch arrived. --no-handover turns the rule off,
for the comparison:

    python -m taco_bridge.offline sim/taco_sim/dial/models/dial --preempt 100
    python -m taco_bridge.offline sim/taco_sim/dial/models/dial --preempt 100 --no-handover
"""
import argparse
import collections
import json
import os
import re
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import taco_sim  # noqa: E402
from taco_ref import evaluate  # noqa: E402
from taco_ref.model import load  # noqa: E402
from taco_sim import dial  # noqa: E402
from taco_bridge import keypad  # noqa: E402
from taco_bridge.control import Controller, joint_bounds, keypad_offline, run_offline  # noqa: E402

INTERFACES = {"effort": ("dial", dial.TORQUE_LIMITS), "velocity": ("dial-velocity", dial.VELOCITY_LIMITS)}


def dial_pin(ctl, env, sketch, velocity, why=None):
    """True if the controller's control step dialled sketch on env (no keypad topic: the press
    rule reads the fingertip, as the node does without /dial/pressed). why: a list that gets,
    for a PIN not dialled, what went wrong (pin_failure)."""
    run = run_offline(ctl, env, sketch, env.velocity_step if velocity else env.step)
    return _dialled(run, env.presses, sketch, why)


def dial_pin_disturbed(ctl, task, sketch, why=None):
    """dial_pin on a task environment under a disturbance (a named test's DialTask, reset): the
    command goes through task.step (delayed, noisy, pushed as the test says)."""
    run = run_offline(ctl, task.env, sketch, task.step)
    return _dialled(run, task.env.presses, sketch, why)


def pin_failure(run, presses, sketch):
    """What went wrong with a PIN not dialled, in a few words: how the run ended (done, its
    error message with the sub-task's digit and position left out, or the PIN's step budget
    spent with the run in progress) and whether the keypad registered the PIN, a prefix of it
    or another key."""
    got, want = [int(p) for p in presses], [int(d) for d in sketch]
    if got == want:
        registered = "the PIN registered"
    elif got == want[:len(got)]:
        registered = f"{len(got)} of {len(want)} digits registered"
    else:
        registered = "another key registered"
    if run.outcome is None:
        ended = "the step budget ran out"
    elif run.outcome == "done":
        ended = "done"
    else:
        ended = f"{run.outcome}: " + re.sub(r"sub-task \d+ \(position \d+\)", "a sub-task", run.message or "")
    return f"{ended}; {registered}"


def _dialled(run, presses, sketch, why):
    ok = run.outcome == "done" and list(presses) == list(sketch)
    if not ok and why is not None:
        why.append(pin_failure(run, presses, sketch))
    return ok


def controller(model, limits):
    low, high = joint_bounds(0.25)
    key_pos = dial.key_positions(np.asarray(dial.STANDARD_LAYOUT))
    return Controller(model, key_pos, limits, low, high, dial.CONTROL_DT, 0.25,
                      max_subtask_time=20.0, stop_threshold=0.5, press_grace=0.5)


def preemption_trial(model, seed, limits=dial.TORQUE_LIMITS, velocity=False, lead=None):
    """One targeted preemption (module docstring) from seed: a dict with the PINs, the press
    targeted (its step and digit), lead (control steps; drawn in 0-7 unless given), the new
    run's outcome, message and presses, and the presses the hand-over gave the old run."""
    rng = np.random.default_rng(seed)
    old = [int(x) for x in rng.choice(dial.K, 4, replace=False)]
    new = [int(x) for x in rng.choice(dial.K, 4, replace=False)]
    env = dial.DialEnv()
    env.reset(seed=int(seed), layout="standard")
    step = env.velocity_step if velocity else env.step
    _, presses = keypad_offline(controller(model, limits), env, [(0, old)], step)
    if not presses:
        raise RuntimeError(f"seed {seed}: the first pass pressed no key")
    t_press, key = presses[int(rng.integers(len(presses)))]
    lead = int(rng.integers(0, 8)) if lead is None else int(lead)
    lead = min(lead, t_press)
    env.reset(seed=int(seed), layout="standard")
    (_, run), _ = keypad_offline(controller(model, limits), env, [(0, old), (t_press - lead, new)], step)
    return {"seed": int(seed), "old": old, "new": new, "press_step": int(t_press), "key": int(key),
            "lead": lead, "outcome": run.outcome, "message": run.message,
            "pressed": list(run.presses), "inherited": list(run.inherited)}


def preempt(model, n, limits, velocity, handover=True):
    """n preemption_trials (seeds 0..n-1): the summary dict and the trials."""
    saved = keypad.key_in_reach
    if not handover:
        keypad.key_in_reach = lambda obs: None
    try:
        trials = []
        for seed in range(n):
            trials.append(preemption_trial(model, seed, limits, velocity))
            false = sum(t["outcome"] != "done" for t in trials)
            print(f"\rpreemptions: {seed + 1}/{n}, {false} false errors", end="", file=sys.stderr)
        print(file=sys.stderr)
    finally:
        keypad.key_in_reach = saved
    false = [t for t in trials if t["outcome"] != "done"]
    return {"trials": n, "handover": handover, "false_errors": len(false),
            "inherited": sum(bool(t["inherited"]) for t in trials),
            "leads": np.bincount([t["lead"] for t in trials], minlength=8).tolist(),
            "false": false}, trials


def main(argv=None):
    ap = argparse.ArgumentParser(prog='python -m taco_bridge.offline', description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="model directory")
    ap.add_argument("--interface", choices=sorted(INTERFACES), default="effort")
    ap.add_argument("--n-tasks", type=int, default=500)
    ap.add_argument("--preempt", type=int, metavar="N", help="N targeted preemptions instead")
    ap.add_argument("--no-handover", action="store_true", help="with --preempt: the hand-over rule off")
    ap.add_argument("--test", metavar="NAME", help="a named test condition of the Dial (harder, noise-5, ...): "
                                                   "its PINs and disturbances")
    args = ap.parse_args(argv)
    domain_name, limits = INTERFACES[args.interface]
    domain = taco_sim.get(domain_name)
    model = load(args.model)
    if args.preempt:
        summary, _ = preempt(model, args.preempt, limits, args.interface == "velocity",
                             handover=not args.no_handover)
        print(json.dumps(dict(model=args.model, interface=args.interface, **summary)))
        return
    if args.test is not None and args.test not in domain.tests:
        ap.error(f"--test: expected one of {', '.join(domain.tests)}, got {args.test!r}")
    sketches = evaluate.protocol_sketches(domain, args.n_tasks, test=args.test)
    seeds = np.random.default_rng(evaluate.EPISODE_SEED).integers(0, 2**31, size=len(sketches))
    outcomes, why = [], []
    for i, (row, seed) in enumerate(zip(sketches, seeds)):
        sketch = [int(d) for d in row if d >= 0]
        ctl = controller(model, limits)
        if args.test is not None:
            task = domain.tests[args.test].make_env()
            task.reset(sketch, seed=int(seed))
            outcomes.append(dial_pin_disturbed(ctl, task, sketch, why))
        else:
            env = dial.DialEnv()
            env.reset(seed=int(seed), layout="standard")
            outcomes.append(dial_pin(ctl, env, sketch, args.interface == "velocity", why))
        print(f"\rbridge control step: {i + 1}/{len(sketches)}, {sum(outcomes)} dialled", end="", file=sys.stderr)
    print(file=sys.stderr)
    dialled = sum(outcomes)
    print(json.dumps(dict(model=args.model, interface=args.interface, test=args.test, n_tasks=len(sketches),
                          dialled=dialled, share=dialled / len(sketches),
                          outcomes="".join("1" if ok else "0" for ok in outcomes),
                          failures=dict(collections.Counter(why).most_common()))))


if __name__ == "__main__":
    main()
