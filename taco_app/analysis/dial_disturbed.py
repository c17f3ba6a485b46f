"""What a Dial model's STOP and action nets see when the arm is disturbed: the figures behind the
robustness fix of spec/dial.md §12, measured on validation PINs (never the test PINs).

For a model and a disturbance (a named test condition of taco_sim.dial.disturb, or motor torque
noise at a given share of the peak torques), the model and the expert (disturb.DialExpert) run
the validation PINs and layouts of evaluate.validation_rollouts under it, and every press the
keypad registers is followed:

  press window   offsets -2 .. +3 control steps around the first state after the pressing step
                 (0: where a demonstration's STOP label sits, spec/dial.md §6): the fingertip's
                 height over the key top, the key's travel, the arm's joint speed |q'| and the
                 P(STOP) of the pressed digit's sub-policy there (with the model's views), split
                 by what followed the press: the sub-policy stopped, or it pressed again / ran out.
  tracking       for dial-velocity, at the end of every control step: the velocity loop's error
                 v* - q' (spec/dial.md eq. (1)), as a share of the target's size and in rad/s.
  spread         per joint (q1..q9), the 99th percentile of |s - mean| / std over the rollout's
                 states, in the units the nets read them (the model's input normalisation: its
                 training data's mean and std); the model's and the expert's rollouts.
  coverage       how far the rollout's states lie from the nearest state of the model's training
                 demonstrations (the data the model's record names, when it is on disk), against
                 the same distance for fresh expert demonstrations under the same disturbance.

    python -m taco_app.analysis.dial_disturbed --model DIR [--test NAME | --noise SHARE]
        [--noise-joints J ...] [--n-tasks 50] [--out OUT.json]
    python -m taco_app.analysis.dial_disturbed --table OUT.json ...     # one table of several
    python -m taco_app.analysis.dial_disturbed --summary OUT.json ...   # each run's summary again
    python -m taco_app.analysis.dial_disturbed --retrained dial dial-velocity
        # the shipped models' test figures against the models they replaced (from the checkout)

Prints a short markdown summary; OUT.json holds every figure.
"""
import argparse
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from taco_ref import evaluate, model as model_mod  # noqa: E402
from taco_app.analysis import dial_stop_timing as timing  # noqa: E402
from taco_sim.dial import disturb, expert, velocity  # noqa: E402

OFFSETS = (-2, -1, 0, 1, 2, 3)
"""Control steps around the first state after a press (0) reported in a press window."""


def task_of(domain, disturbance):
    """The validation task environment (random layouts) of a Dial domain under a disturbance."""
    if domain == "dial-velocity":
        return velocity.DialVelocityTask("random", disturbance)
    if domain == "dial":
        return expert.DialTask("random", disturbance)
    raise ValueError(f"domain: expected 'dial' or 'dial-velocity', got {domain!r}")


def rollouts(model, disturbance, n_tasks, seed=0, use_expert=False, noise_joints=None):
    """Validation rollouts of model (or of the expert, use_expert) under disturbance; with
    noise_joints (0-based joint indices) the motors' torque noise reaches those joints only (the
    others' noise is drawn, then zeroed: the same draws as the full noise). Returns
    {"done": [bool], "failures": {text: count}, "presses": [window dicts], "tracking": (n, 2)
    array of (|v* - q'|, |v*|) per control step (velocity only), "states": (n, D)}."""
    dom, sketches, seeds, views = timing.validation_pins(model, n_tasks, seed)
    velocity_domain = dom.name == "dial-velocity"
    actor = (evaluate.Expert("expert", model.vocab, model.policy, disturb.DialExpert) if use_expert
             else model)
    out = {"done": [], "failures": {}, "presses": [], "tracking": [], "states": []}
    for sketch, s in zip(sketches, seeds):
        task = task_of(dom.name, disturbance)
        trace = []

        def observe(env, active):
            e = env.env
            trace.append({"progress": env.progress, "obs": e.obs, "tip": e.fingertip.copy(),
                          "travel": e.key_travel(), "key_pos": e.key_pos.copy(), "layout": e.layout.copy(),
                          "qdot": float(np.linalg.norm(e.data.qvel[e.names.arm_dof]))})

        act = task._act
        mask = None if noise_joints is None else np.isin(np.arange(9), list(noise_joints))

        def tracked(action, torque_noise=None):
            if mask is not None and torque_noise is not None:
                torque_noise = np.where(mask, torque_noise, 0.0)
            obs = act(action, torque_noise)
            if velocity_domain:
                target = np.clip(action, -velocity.VELOCITY_LIMITS, velocity.VELOCITY_LIMITS)
                qdot = task.env.data.qvel[task.env.names.arm_dof]
                out["tracking"].append((float(np.linalg.norm(target - qdot)), float(np.linalg.norm(target))))
            return obs

        task._act = tracked
        result = evaluate.execute(actor, task, list(sketch), int(s), observer=observe,
                                  views=None if use_expert else views,
                                  stop_hold=int(model.config.get("stop_hold", 1)))
        out["done"].append(result["success"])
        if result["failure"]:
            key = f'{result["failure"]["kind"]}: {result["failure"]["detail"]}'
            out["failures"][key] = out["failures"].get(key, 0) + 1
        out["states"].extend(t["obs"] for t in trace)
        if not use_expert:
            out["presses"].extend(press_windows(model, sketch, trace, result))
    out["tracking"] = np.array(out["tracking"]).reshape(-1, 2)
    out["states"] = np.array(out["states"])
    return out


def press_windows(model, sketch, trace, result):
    """Per press the keypad counted in one rollout: {position, outcome ("stopped", "pressed
    again", or "last digit": the PIN's last press, after which the episode ends), stop_after (steps from 0 to the accepted STOP, or None), offset: {height, travel,
    qdot, p}}: trace[t] is the state after t steps, so the press during step t - 1 -> t puts
    offset 0 at t."""
    rows = []
    stops = result["stop_times"]
    for t in range(1, len(trace)):
        k = trace[t - 1]["progress"]
        if trace[t]["progress"] <= k:
            continue
        digit = int(sketch[k])
        stopped = k < len(stops)
        outcome = "stopped" if stopped else "last digit" if k == len(sketch) - 1 else "pressed again"
        row = {"position": k, "digit": digit, "outcome": outcome, "stop_after": int(stops[k] - t) if stopped else None}
        window = [(o, trace[t + o]) for o in OFFSETS if 0 <= t + o < len(trace)]
        p = timing.p_stop(model, digit, np.array([w["obs"] for _, w in window]))
        for (o, w), pk in zip(window, p):
            key = w["key_pos"][digit]
            row[o] = {"height": float(w["tip"][2] - key[2]), "travel": float(w["travel"][w["layout"][digit]]),
                      "qdot": float(w["qdot"]), "p": float(pk)}
        rows.append(row)
    return rows


def window_summary(rows):
    """{outcome: {"n": presses, offset: {figure: [5th, median, 95th]}}} over the press rows."""
    out = {}
    for outcome in ("stopped", "pressed again", "last digit"):
        mine = [r for r in rows if r["outcome"] == outcome]
        out[outcome] = {"n": len(mine)}
        for o in OFFSETS:
            cells = [r[o] for r in mine if o in r]
            if cells:
                out[outcome][o] = {f: np.percentile([c[f] for c in cells], [5, 50, 95]).round(4).tolist()
                                   for f in ("height", "travel", "qdot", "p")}
    return out


def nearest_distance(states, reference, scale, chunk=512):
    """(n,) Euclidean distance of each state (n, D) to its nearest reference state (m, D), each
    dimension divided by scale (D,) (the reference's std)."""
    R = reference / scale                                                       # (m, D)
    r2 = np.einsum("md,md->m", R, R)                                            # (m,)
    out = np.empty(len(states))
    for i in range(0, len(states), chunk):
        S = states[i:i + chunk] / scale                                         # (c, D)
        d2 = np.einsum("cd,cd->c", S, S)[:, None] - 2 * S @ R.T + r2[None]      # (c, m)
        out[i:i + chunk] = np.sqrt(np.maximum(d2.min(1), 0.0))
    return out


def disturbance_of(args):
    if args.test:
        if args.test not in disturb.TESTS:
            raise SystemExit(f"--test: expected one of {', '.join(disturb.TESTS)}, got {args.test!r}")
        return args.test, disturb.TESTS[args.test].disturbance
    joints = "" if args.noise_joints is None else f" on joints {' '.join(map(str, args.noise_joints))}"
    return f"noise {args.noise:g}{joints}", disturb.Disturbance(noise=args.noise)


def summary_lines(name, figures):
    lines = [f"### {name}", "",
             f"validation PINs completed: model {figures['model_accuracy']:.3f}, expert "
             f"{figures['expert_accuracy']:.3f}; model failures {figures['failures']}"]
    for outcome, s in figures["windows"].items():
        if not s["n"]:
            continue
        lines += ["", f"presses then {outcome}: {s['n']}", "",
                  "| offset | height over key top (mm) | key travel (mm) | arm joint speed (rad/s) | P(STOP) |",
                  "|---:|---|---|---|---|"]
        for o in OFFSETS:
            c = s.get(o, s.get(str(o)))                  # str after a JSON round trip
            if c is not None:
                lines.append(f"| {o} | {_fmt(c['height'], 1e3)} | {_fmt(c['travel'], 1e3)} | {_fmt(c['qdot'])} "
                             f"| {_fmt(c['p'])} |")
    lines += ["", "| joint | " + " | ".join(f"q{j + 1}" for j in range(9)) + " |", "|---" * 10 + "|",
              "| training sd (rad) | " + " | ".join(f"{v:.4f}" for v in figures["training_std_q"]) + " |"]
    for who, row in figures["spread_q99"].items():
        lines.append(f"| spread (training sd), {who} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    if figures.get("tracking"):
        t = figures["tracking"]
        lines += ["", f"velocity loop error (norm of v* - q') at the end of a control step: median {t['error'][1]:.4f} "
                      f"rad/s (95th {t['error'][2]:.4f}); as a share of the target's norm (steps whose target exceeds 0.05 rad/s): median "
                      f"{t['share'][1]:.3f} (95th {t['share'][2]:.3f})"]
    if figures.get("coverage"):
        c = figures["coverage"]
        lines += ["", "distance to the nearest training state (std units) [5th, median, 95th, 99th]: "
                      f"model rollouts {c['model']}, expert rollouts {c['expert']}"]
    return "\n".join(lines)


def table(figures):
    """One markdown table of several runs' figures (a row each, in the order given): the model,
    the disturbance, the validation PINs the model and the expert completed, the model's
    failures, and the 99th percentile |z| of the wrist's roll (q6) and of the fingers (q7-q9,
    the largest) for the model and the expert."""
    lines = ["| model | disturbance | model completes | expert completes | model's failures | "
             "q6 spread (training sd): model / expert | fingers' spread (training sd): model / expert |",
             "|---|---|---:|---:|---|---|---|"]
    for f in figures:
        n = f["n_tasks"]
        failures = ", ".join(f"{k} {v}" for k, v in sorted(f["failures"].items(), key=lambda kv: -kv[1])) or "-"
        z = f["spread_q99"]
        lines.append(f"| {f['model']} | {f['disturbance']} | {round(f['model_accuracy'] * n)} of {n} | "
                     f"{round(f['expert_accuracy'] * n)} of {n} | {failures} | {z['model'][5]:.1f} / "
                     f"{z['expert'][5]:.1f} | {max(z['model'][6:9]):.1f} / {max(z['expert'][6:9]):.1f} |")
    return "\n".join(lines)


VALIDATION_CONDITIONS = ("standard", "harder", "noise-5", "start")
"""The conditions the robustness fix was chosen on (spec/dial.md §12): the standard test, the
harder test and its two costliest disturbances for the shipped models."""


def validation_table(folder, candidates):
    """Markdown table of `taco evaluate --split validation` outputs named PREFIX-CONDITION.json in
    folder: a row per (prefix, model, what its demonstrations met) of candidates, the PINs
    completed per VALIDATION_CONDITIONS and the lowest share (the choice's score)."""
    lines = ["| model | its demonstrations' arm | " + " | ".join(VALIDATION_CONDITIONS) + " | lowest |",
             "|---|---|" + "---:|" * (len(VALIDATION_CONDITIONS) + 1)]
    for prefix, model, about in candidates:
        cells, shares = [], []
        for condition in VALIDATION_CONDITIONS:
            path = os.path.join(folder, f"{prefix}-{condition}.json")
            if not os.path.exists(path):
                cells.append("-")
                continue
            with open(path, encoding="utf-8") as f:
                out = json.load(f)
            k, n = out["outcomes"].count("1"), out["n_tasks"]
            cells.append(f"{k} of {n}")
            shares.append(k / n)
        lowest = f"{100 * min(shares):.1f} %" if len(shares) == len(VALIDATION_CONDITIONS) else "-"
        lines.append(f"| {model} | {about} | " + " | ".join(cells) + f" | {lowest} |")
    return "\n".join(lines)


TEST_CONDITIONS = ("standard", "harder", "noise-1", "noise-2", "noise-3", "noise-5", "start", "delay", "push", "long")
SHIPPED_FIGURES = os.path.join("results", "dial", "shipped")
BEFORE_FIGURES = os.path.join("results", "archive", "dial-shipped-undisturbed")


def retrained_table(model, folder, before, conditions=None):
    """Markdown table of a retrained model against the one it replaced on the same test PINs:
    a row per condition ("standard" is NAME-evaluate.json, any other NAME-test-CONDITION.json,
    in folder for the model and in before for its predecessor), the PINs each completed with
    their Wilson interval, and the difference (retrained − before) paired on the PINs
    (spec/evaluation.md eq. (6)); "-" where the predecessor was not measured. conditions:
    TEST_CONDITIONS by default."""
    def load(where, condition):
        name = f"{model}-evaluate.json" if condition == "standard" else f"{model}-test-{condition}.json"
        path = os.path.join(where, name)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def share(out):
        k, n = out["outcomes"].count("1"), out["n_tasks"]
        lo, hi = evaluate.wilson_interval(k, n)
        return f"{k} of {n}, {100 * k / n:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"

    conditions = TEST_CONDITIONS if conditions is None else conditions
    lines = [f"| `{model}`: condition | what is disturbed | before | retrained | retrained − before (paired) |",
             "|---|---|---|---|---:|"]
    for condition in conditions:
        new, old = load(folder, condition), load(before, condition)
        if new is None:
            raise FileNotFoundError(f"retrained_table: no output of {model} for condition {condition!r} in {folder}")
        about = "the standard test" if condition == "standard" else disturb.TESTS[condition].about
        if old is None:
            diff = "-"
        else:
            d, lo, hi = evaluate.paired_difference_interval(new["outcomes"], old["outcomes"])
            diff = f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        lines.append(f"| `{condition}` | {about} | {share(old) if old else '-'} | {share(new)} | {diff} |")
    return "\n".join(lines)


def _fmt(q, scale=1.0):
    return f"{q[1] * scale:.3g} [{q[0] * scale:.3g}, {q[2] * scale:.3g}]"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m taco_app.analysis.dial_disturbed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a Dial model directory, or a shipped model's name")
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print one table of these runs' figures and exit")
    ap.add_argument("--summary", nargs="+", metavar="JSON", help="print each run's summary again and exit")
    ap.add_argument("--retrained", nargs="+", metavar="NAME",
                    help="print each shipped model's test figures against its predecessor's and exit "
                         f"(the figure files of {SHIPPED_FIGURES} and {BEFORE_FIGURES}, from the checkout)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--test", help="a named test condition of taco_sim.dial.disturb.TESTS")
    group.add_argument("--noise", type=float, default=0.05, help="motor torque noise, share of the peak torques")
    ap.add_argument("--noise-joints", type=int, nargs="+", choices=range(1, 10), metavar="J",
                    help="the motor noise on these joints only (1-9; 7-9 the fingers)")
    ap.add_argument("--n-tasks", type=int, default=50, help="validation PINs (default 50)")
    ap.add_argument("--seed", type=int, default=0, help="validation seed (evaluate.validation_rollouts)")
    ap.add_argument("--data", help="the model's training demonstrations (.npz) for the coverage figures")
    ap.add_argument("--out", help="JSON file of every figure")
    args = ap.parse_args(argv)
    if args.retrained:
        print("\n\n".join(retrained_table(name, SHIPPED_FIGURES, BEFORE_FIGURES) for name in args.retrained))
        return 0
    if args.table or args.summary:
        figures = []
        for path in args.table or args.summary:
            with open(path, encoding="utf-8") as f:
                figures.append(json.load(f))
        if args.table:
            print(table(figures))
        else:
            print("\n\n".join(summary_lines(f"{f['model']} under {f['disturbance']}: {f['n_tasks']} validation PINs", f)
                              for f in figures))
        return 0
    if not args.model:
        ap.error("--model: expected a Dial model (or --table)")
    from taco_ref import data as data_mod
    from taco_app.cli import model_path
    m = model_mod.load(model_path(args.model))
    name, d = disturbance_of(args)
    joints = None if args.noise_joints is None else [j - 1 for j in args.noise_joints]
    model_runs = rollouts(m, d, args.n_tasks, args.seed, noise_joints=joints)
    expert_runs = rollouts(m, d, args.n_tasks, args.seed, use_expert=True, noise_joints=joints)
    figures = {"model": args.model, "disturbance": name, "n_tasks": args.n_tasks,
               "model_accuracy": float(np.mean(model_runs["done"])),
               "expert_accuracy": float(np.mean(expert_runs["done"])),
               "failures": model_runs["failures"], "windows": window_summary(model_runs["presses"])}
    mean, std = m.params["norm.mean"], m.params["norm.std"]
    figures["training_std_q"] = np.round(std[:9], 5).tolist()
    figures["spread_q99"] = {
        who: np.percentile(np.abs((runs["states"][:, :9] - mean[:9]) / std[:9]), 99, axis=0).round(2).tolist()
        for who, runs in (("model", model_runs), ("expert", expert_runs))}
    track = model_runs["tracking"]
    if len(track):
        moving = track[:, 1] > 0.05
        figures["tracking"] = {"error": np.percentile(track[:, 0], [5, 50, 95]).round(5).tolist(),
                               "share": np.percentile(track[moving, 0] / track[moving, 1], [5, 50, 95]).round(4).tolist()}
    if args.data:
        demos = data_mod.load(args.data)
        ref = np.concatenate([demos.states[i, :int(demos.traj_len[i])] for i in range(len(demos.traj_len))])
        scale = ref.std(0) + 1e-9
        q = [5, 50, 95, 99]
        figures["coverage"] = {
            "model": np.percentile(nearest_distance(model_runs["states"], ref, scale), q).round(3).tolist(),
            "expert": np.percentile(nearest_distance(expert_runs["states"], ref, scale), q).round(3).tolist()}
    print(summary_lines(f"{args.model} under {name}: {args.n_tasks} validation PINs", figures))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    return 0


if __name__ == "__main__":
    sys.exit(main())
