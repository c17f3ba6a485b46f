"""Why do the Dial's STOP nets fire a control step before the press? The state at the press,
the STOP label's place, the nets' P(STOP) around it, and the candidate fixes, measured.

Three measurements, none on the test PINs:

  demonstrations  fresh expert demonstrations (their own seed, never trained or tested on),
                  recorded with what the state does not show: the key's travel, the arm's
                  joint speed, the DART level. For every press, the step before the last acting
                  step (-1), the last acting step (0: its action takes the key past its click
                  depth) and the STOP label's step (+1: the first state of the next segment,
                  spec/dial.md §6; the final state for the last digit): fingertip height over
                  the key top, key travel, |q'|, and each model's P(STOP) of the segment's
                  sub-policy (with the model's views, as execution decides).
  rollouts        each model on validation PINs (training length, random layouts, the seeds
                  of evaluate.validation_rollouts: never the test PINs or the test keypad).
                  Every STOP is early (the keypad has not counted the sub-task's key) or on
                  time; for each kind the fingertip height, key travel and P(STOP) where it fired.
  candidates      each execution rule on the same validation PINs: today's (P > 0.5 once),
                  a STOP that must hold for 2 or 3 consecutive decisions, a higher threshold,
                  and the threshold chosen on the held-out demonstrations by the model's own
                  Viterbi alignment (label-free: the first step whose P(STOP) clears it should
                  be the first step the alignment gives the next sub-task).

    python -m taco_app.analysis.dial_stop_timing --model RUN/model [--model RUN2/model] --out OUT.json

Prints the tables (markdown) and writes every figure to OUT.json.
"""
import argparse
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import taco_sim  # noqa: E402
from taco_ref import align, data, evaluate, model as model_mod, policy  # noqa: E402
from taco_sim.dial import env as dial_env, expert  # noqa: E402

DEMO_SEED = 40_000
"""Seed of the instrumented demonstrations: neither a training (10 000 + s) nor a held-out
(20 000 + s) set of any grid cell."""
OFFSETS = (-1, 0, 1)
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def instrumented_demos(n, seed, dart_sigma=expert.DART_SIGMA):
    """n torque demonstrations as expert.collect makes them (random layout, DART noise, the
    clean expert action recorded), with per step what the state does not show. Returns a list
    of dicts: states (T+1, D) (the last is the final state), labels (T,), sketch (L,), level
    (the demonstration's DART level, a share of the torque limits), layout (K,), and per state
    travel (S,) (every key's travel, m, negative down) and qdot (|q'| of the arm, rad/s)."""
    rng = np.random.default_rng(seed)
    sketches = expert.sample_sketches(n, expert.TRAIN_SKETCH_LEN, rng)
    out = []
    for sketch in sketches:
        task = expert.DialTask(layout="standard")
        while True:
            task.layout = dial_env.sample_layout(rng)
            obs = task.reset(sketch, seed=int(rng.integers(2 ** 31)))
            level = rng.uniform(0.0, dart_sigma)
            rec = {k: [] for k in ("states", "labels", "travel", "qdot")}

            def note(obs):
                env = task.env
                rec["states"].append(obs)
                rec["travel"].append(env.key_travel())                                # (S,)
                rec["qdot"].append(float(np.linalg.norm(env.data.qvel[env.names.arm_dof])))

            while not task.done and not task.failed and task.t < expert.budget(len(sketch)):
                clean = expert.expert_torque_from_obs(obs, task.target)
                note(obs)
                rec["labels"].append(task.progress)
                obs = task.step(clean + level * dial_env.TORQUE_LIMITS * rng.standard_normal(len(clean)))
            if task.done:
                note(obs)
                out.append({k: np.array(v) for k, v in rec.items()}
                           | {"sketch": np.array(sketch), "level": level, "layout": task.env.layout.copy()})
                break
    return out


def domain_of(model):
    """The Dial domain a model was trained on ("dial" or "dial-velocity"), from its data's record."""
    return model.info.get("data", {}).get("domain", "dial")


def p_stop(model, subtask, states):
    """(n,) P(STOP) of sub-policy `subtask` in each of states (n, D), decided as execution
    decides: over the model's views where it has them."""
    n_views = int(model.config.get("views", 1))
    views = evaluate.state_views(taco_sim.get(domain_of(model)), n_views)
    if views is None:
        return np.array([policy.stop_probability(model.params, model.policy, subtask, s) for s in states])
    return np.array([policy.view_decision(model.params, model.policy, subtask, views(subtask, s))[0]
                     for s in states])


def press_windows(demos, models):
    """Rows (one per press) of the figures at OFFSETS around each press: {offset: {height,
    travel, qdot, p: {model name: P(STOP)}}}, with the press's sketch position, digit and the
    demonstration's DART level."""
    rows = []
    for demo in demos:
        labels, L = demo["labels"], len(demo["sketch"])
        for k in range(L):
            last = int(np.flatnonzero(labels == k)[-1])              # the last acting step
            steps = {o: last + o for o in OFFSETS}
            row = {"position": k, "digit": int(demo["sketch"][k]), "level": float(demo["level"]),
                   "segment_steps": int(np.sum(labels == k))}
            for o, t in steps.items():
                state = demo["states"][t]
                row[o] = {"height": float(_height_over(state, row["digit"])),
                          "travel": float(demo["travel"][t][demo["layout"][row["digit"]]]),
                          "qdot": float(demo["qdot"][t]),
                          "p": {name: float(p_stop(m, row["digit"], state[None])[0])
                                for name, m in models.items()}}
            rows.append(row)
    return rows


def _height_over(state, digit):
    """Fingertip height over digit's key top from a state (D,): minus the z of its offset."""
    return -state[9 + 3 * digit + 2]


def validation_pins(model, n_tasks, seed):
    """(domain, sketches (n, L), episode seeds (n,), views) of model's validation rollouts: the
    PINs and seeds of evaluate.validation_rollouts, never the test PINs."""
    dom = taco_sim.get(domain_of(model))
    rng = np.random.default_rng(evaluate.VALIDATION_SKETCH_SEED + seed)
    sketches = dom.sample_sketches(n_tasks, dom.train_sketch_len, rng)
    seeds = np.random.default_rng(evaluate.VALIDATION_EPISODE_SEED + seed).integers(0, 2 ** 31, size=n_tasks)
    views = evaluate.state_views(dom, int(model.config.get("views", 1)))
    return dom, sketches, seeds, views


def rollout_stops(model, n_tasks, seed, stop_hold=1, threshold=0.5):
    """Validation rollouts (evaluate.validation_rollouts' PINs, envs and seeds) under one
    execution rule: task accuracy and, for every accepted STOP, whether it was early (the
    keypad had not counted its key), with the fingertip height, key travel and P(STOP) there."""
    dom, sketches, seeds, views = validation_pins(model, n_tasks, seed)
    stops, done, failures, verdicts = [], 0, {}, {}
    for sketch, s in zip(sketches, seeds):
        trace = []

        def observe(task, active):
            if active < len(sketch):
                digit = sketch[active]
                env = task.env
                trace.append((active, env.fingertip[2] - env.key_pos[digit][2],
                              env.key_travel()[env.layout[digit]], task.progress, env.obs))

        out = evaluate.execute(model, dom.validation_env(), list(sketch), int(s), observer=observe,
                               views=views, stop_hold=stop_hold, stop_threshold=threshold)
        done += out["success"]
        for rule, counted in out["verdicts"].items():
            verdicts.setdefault(rule, []).append(counted)
        if out["failure"]:
            key = f'{out["failure"]["kind"]}: {out["failure"]["detail"]}'
            failures[key] = failures.get(key, 0) + 1
        for position, step in enumerate(out["stop_times"]):
            if step >= len(trace):
                continue
            active, height, travel, progress, obs = trace[step]
            p = p_stop(model, int(sketch[position]), obs[None])[0]
            stops.append({"early": bool(progress <= position), "height": float(height),
                          "travel": float(travel), "p": float(p), "last": position == len(sketch) - 1})
    return {"task_accuracy": done / n_tasks, "n_tasks": n_tasks, "failures": failures, "stops": stops,
            "rules": {rule: evaluate.rule_figures(v) for rule, v in verdicts.items()}}


def demo_threshold(model, demos, thresholds=THRESHOLDS):
    """The label-free threshold of the candidates: on held-out demonstrations, for each
    threshold the share of segment ends (all but each sketch's last) where the first step whose
    P(STOP) exceeds it is the first step the model's own Viterbi alignment gives the next
    segment; returns ({threshold: share}, the best threshold)."""
    shares = {}
    hits = {t: [] for t in thresholds}
    for batch in data.batches(demos, data.pass_batch_size(demos, 16)):
        log_act, log_stop, log_go = evaluate.scores(model, batch)
        path = align.align_viterbi(log_act, log_stop, log_go, batch.traj_len, batch.sketch_len)
        for i in range(batch.states.shape[0]):
            T, L = int(batch.traj_len[i]), int(batch.sketch_len[i])
            for k in range(L - 1):
                seg = np.flatnonzero(path[i, :T] == k)
                if seg.size == 0:
                    continue
                end = int(seg[-1]) + 1                      # the alignment's first step of k + 1
                p = p_stop(model, int(batch.sketch[i, k]), batch.states[i, seg[0] + 1:end + 1])
                for t in thresholds:
                    over = np.flatnonzero(p > t)
                    hits[t].append(bool(over.size) and int(over[0]) + seg[0] + 1 == end)
    for t in thresholds:
        shares[t] = float(np.mean(hits[t])) if hits[t] else None
    best = max(thresholds, key=lambda t: (shares[t] or 0.0, -t))
    return shares, best


def _fmt(values, scale=1.0, digits=1):
    v = np.asarray([x for x in values if x is not None], dtype=float) * scale
    if not v.size:
        return "-"
    return f"{v.mean():.{digits}f} [{np.percentile(v, 5):.{digits}f}, {np.percentile(v, 95):.{digits}f}]"


def demo_table(rows, names):
    lines = ["| step (relative to the press) | fingertip over key top (mm) | key travel (mm) | |q'| (rad/s) | "
             + " | ".join(f"P(STOP) {n}" for n in names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    label = {-1: "-1: before the last acting step", 0: "0: last acting step (its action presses)",
             1: "+1: STOP label (first state after the press)"}
    for o in OFFSETS:
        cells = [_fmt([r[o]["height"] for r in rows], 1e3), _fmt([r[o]["travel"] for r in rows], 1e3),
                 _fmt([r[o]["qdot"] for r in rows], 1.0, 2)]
        cells += [_fmt([r[o]["p"][n] for r in rows], 1.0, 3) for n in names]
        lines.append(f"| {label[o]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def noise_table(rows, names):
    """The same figures at the last acting step (0) and the label (+1), by DART level third."""
    levels = np.array([r["level"] for r in rows])
    cuts = np.percentile(levels, [100 / 3, 200 / 3])
    lines = ["| DART level (share of torque limits) | presses | height at 0 (mm) | height at +1 (mm) | "
             + " | ".join(f"P(STOP) at 0, {n}" for n in names) + " |",
             "|---|---:|---|---|" + "---|" * len(names)]
    for lo, hi, text in ((-1, cuts[0], "low third"), (cuts[0], cuts[1], "middle third"), (cuts[1], 2, "high third")):
        mine = [r for r in rows if lo < r["level"] <= hi]
        lvl = [r["level"] for r in mine]
        cells = [f"{text} ({min(lvl):.3f}-{max(lvl):.3f})", str(len(mine)),
                 _fmt([r[0]["height"] for r in mine], 1e3), _fmt([r[1]["height"] for r in mine], 1e3)]
        cells += [_fmt([r[0]["p"][n] for r in mine], 1.0, 3) for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def stop_table(results):
    lines = ["| model | execution rule | task acc. keypad / strict / paper (%) | early STOPs (of all) | "
             "height at early STOP (mm) | travel at early STOP (mm) | P(STOP) at early STOP | "
             "height at on-time STOP (mm) |",
             "|---|---|---|---:|---|---|---|---|"]
    for name, by_rule in results.items():
        for rule, r in by_rule.items():
            early = [s for s in r["stops"] if s["early"]]
            ontime = [s for s in r["stops"] if not s["early"]]
            acc = " / ".join(f"{100 * a:.1f}" for a in (r["task_accuracy"], r["rules"]["strict"]["task_accuracy"],
                                                        r["rules"]["paper"]["task_accuracy"]))
            lines.append(f"| {name} | {rule} | {acc} | "
                         f"{len(early)} ({len(r['stops'])}) | {_fmt([s['height'] for s in early], 1e3)} | "
                         f"{_fmt([s['travel'] for s in early], 1e3)} | {_fmt([s['p'] for s in early], 1.0, 3)} | "
                         f"{_fmt([s['height'] for s in ontime], 1e3)} |")
    return "\n".join(lines)


def tables(figures):
    """The markdown main prints, from the figures it writes (a JSON file read back)."""
    rows = [{**r, **{int(o): r[str(o)] for o in OFFSETS}} for r in figures["presses"]]
    names, out = figures["models"], []
    if rows:
        imb = figures["imbalance"]
        out += [f"## Around the press: {len(rows)} presses of {figures['n_demos']} demonstrations "
                f"(seed {figures['demo_seed']})", "", demo_table(rows, names), "", noise_table(rows, names), "",
                f"STOP labels among the STOP nets' terms: {imb['stop_labels']} of {imb['acting_steps']} "
                f"steps ({100 * imb['stop_labels'] / imb['acting_steps']:.2f} %)", ""]
    out += [f"## STOPs in validation rollouts ({figures['n_tasks']} PINs of length "
            f"{expert.TRAIN_SKETCH_LEN}, random layouts)", "", stop_table(figures["rules"]), ""]
    for name, c in figures["demo_threshold"].items():
        out.append(f"{name}: exact STOP step on held-out demonstrations by threshold "
                   + ", ".join(f"{float(t):g}: {100 * v:.1f} %" for t, v in c["shares"].items())
                   + f" -> {c['threshold']:g}")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m taco_app.analysis.dial_stop_timing",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, action="append", help="a Dial model directory (repeatable)")
    ap.add_argument("--demos", type=int, default=100, help="instrumented demonstrations (default 100)")
    ap.add_argument("--heldout", default=None,
                    help="held-out demonstrations for the label-free threshold (.npz); default: none")
    ap.add_argument("--n-tasks", type=int, default=200, help="validation PINs per rule (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="validation seed (evaluate.validation_rollouts)")
    ap.add_argument("--out", required=True, help="JSON file of every figure")
    args = ap.parse_args(argv)
    models = {}
    for path in args.model:
        m = model_mod.load(path)
        models[f"{m.algo} ({path})"] = m
    names = [n for n, m in models.items() if domain_of(m) == "dial"]    # torques: the demonstrations'
    demos = instrumented_demos(args.demos if names else 0, DEMO_SEED)
    rows = press_windows(demos, {n: models[n] for n in names})
    steps = sum(len(d["labels"]) for d in demos)
    heldout = data.load(args.heldout) if args.heldout else None
    rules, chosen = {}, {}
    for name, m in models.items():
        rules[name] = {"P > 0.5 once": rollout_stops(m, args.n_tasks, args.seed),
                       "P > 0.5 held 2 steps": rollout_stops(m, args.n_tasks, args.seed, stop_hold=2),
                       "P > 0.5 held 3 steps": rollout_stops(m, args.n_tasks, args.seed, stop_hold=3),
                       "P > 0.9 once": rollout_stops(m, args.n_tasks, args.seed, threshold=0.9)}
        if heldout is not None and heldout.meta.get("domain") == domain_of(m):
            shares, best = demo_threshold(m, heldout)
            chosen[name] = {"shares": shares, "threshold": best}
            rules[name][f"P > {best:g} once (chosen on held-out demos)"] = rollout_stops(
                m, args.n_tasks, args.seed, threshold=best)
        print(f"{name}: done", file=sys.stderr, flush=True)
    figures = {"demo_seed": DEMO_SEED, "n_demos": len(demos), "n_tasks": args.n_tasks, "models": names,
               "presses": rows,
               "imbalance": {"stop_labels": len(rows) - len(demos), "acting_steps": steps},
               "rules": rules, "demo_threshold": chosen}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(figures, f, separators=(",", ":"))
    print(tables(json.loads(json.dumps(figures))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
