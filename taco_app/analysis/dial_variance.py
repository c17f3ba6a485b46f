"""Where a Dial cell's task accuracy varies from: one factor at a time around a base run.

The grid's spread over seeds mixes everything that differs between two runs. Here each
factor moves alone, around a base training run (domain, algorithm, the domain config with
--set overrides, data seed 0's demonstrations, training seed 0, float32 nets), and every model
is scored on the same test PINs with the same episode seeds, except where those are the factor:

  training seed        TrainConfig.seed: hold-out split, initial weights, minibatch order and
                       dropout masks (the data stay those of seed 0)
  minibatch order      the generator after the initialisation is re-seeded: same split and
                       initial weights, another order of minibatches (and the dropout masks drawn
                       with it)
  float rounding       the nets in float64 instead of float32 (same draws throughout)
  test PIN set         the base model on other lists of test PINs (same episode seeds)
  rollout's own noise  the base model on the same PINs from other episode seeds (the arm's home
                       pose, perturbed by up to 0.03 rad per joint, is the Dial's only rollout
                       noise: the policy and the physics are deterministic)

For each factor: the task accuracies, their standard deviation, and the binomial standard error
sqrt(p (1 - p) / M) of one accuracy on M PINs, beside which the two evaluation factors are
read. Every model decides over the config's `views` of each state, as `taco evaluate` does.
Models are saved under OUT/models (a rerun trains only the missing ones); --base takes an
existing model (e.g. the shipped one) as the base run after checking that its config and data
are the base's; --factors measures some factors only (and trains only their models). Figures go
to OUT/variance.json and a markdown table to stdout.

    python -m taco_app.analysis.dial_variance --algo taco --out results/dial-variance/taco
    python -m taco_app.analysis.dial_variance --algo gtbc --levels 3 --n-tasks 500 --set lr_decay=none
    python -m taco_app.analysis.dial_variance --base sim/taco_sim/dial/models/dial --factors "minibatch order" \
        "test PIN set" "rollout's own noise" --out OUT
"""
import argparse
import dataclasses
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import taco_sim  # noqa: E402
from taco_ref import config as config_ref, evaluate, model as model_mod, train  # noqa: E402
from taco_ref.plumbing import files  # noqa: E402
from taco_app import config as config_mod  # noqa: E402
from taco_app.grid import cell as experiment


def trained(out, name, demos, cfg, validate, order=None):
    """The model OUT/models/name, trained first if missing (order: re-seed the generator after the
    initialisation with [seed, 1000 + order])."""
    path = os.path.join(out, "models", name)
    if os.path.exists(os.path.join(path, "model.json")):
        return model_mod.load(path)
    run_cls = train._Run
    if order is not None:
        class Reordered(run_cls):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                self.rng = np.random.default_rng([cfg.seed, 1000 + order])
        train._Run = Reordered
    try:
        print(f"training {name}", file=sys.stderr, flush=True)
        model = train.train(demos, cfg, validate=validate, augment=taco_sim.get(demos.meta["domain"]).augment)
    finally:
        train._Run = run_cls
    model_mod.save(model, path)
    return model


FACTORS = ("training seed", "minibatch order", "float rounding", "test PIN set", "rollout's own noise")


def score(model, dom, sketches, episode_seed):
    views = evaluate.state_views(dom, model.config.get("views", 1))
    return evaluate.task_accuracy(model, dom.task_env, sketches, seed=episode_seed, views=views)["task_accuracy"]


def base_model(path, cfg, demos):
    """The model at path as the base run: ValueError naming --base unless it was trained with
    cfg's settings (seed and dtype included) on demos."""
    model = model_mod.load(path)
    want, have = dataclasses.asdict(cfg), dataclasses.asdict(train.TrainConfig.from_dict(model.config))
    differ = [k for k in config_ref.fields_read_by(cfg.algo) if want[k] != have[k]]
    if differ:
        raise ValueError(f"--base {path}: trained with other settings than the base run's: "
                         + ", ".join(f"{k}={have[k]!r} (base: {want[k]!r})" for k in differ))
    data = model.info.get("data", {})
    for key in ("domain", "seed", "sketch_len"):
        if data.get(key) != demos.meta.get(key):
            raise ValueError(f"--base {path}: trained on data with {key}={data.get(key)!r}, the base run's "
                             f"has {demos.meta.get(key)!r}")
    if model.info.get("train_size", 0) + model.info.get("held_out_size", 0) != demos.n:
        raise ValueError(f"--base {path}: trained on {model.info.get('train_size', 0) + model.info.get('held_out_size', 0)}"
                         f" demonstrations, the base run on {demos.n}")
    return model


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m taco_app.analysis.dial_variance", description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", default="dial")
    ap.add_argument("--algo", default="taco")
    ap.add_argument("--size", type=int, default=1200)
    ap.add_argument("--levels", type=int, default=3, help="values per factor, the base included")
    ap.add_argument("--n-tasks", type=int, default=500)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--factors", nargs="+", choices=FACTORS, default=list(FACTORS), metavar="FACTOR",
                    help=f"the factors to measure (default: all of {', '.join(FACTORS)})")
    ap.add_argument("--base", default=None, metavar="MODEL",
                    help="an existing model directory as the base run (checked against its settings and data)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    dom = taco_sim.get(args.domain)
    settings = config_mod.settings(args.domain, None, args.set)
    cell = dict(domain=args.domain, algo=args.algo, size=args.size, seed=0,
                train_sketch_len=dom.train_sketch_len, n_tasks=args.n_tasks, n_align=100,
                config=settings)
    demos = experiment.collect(experiment.data_specs(cell)[0])

    def config(**kw):
        return train.TrainConfig.from_dict(dict(settings, **dict(dict(algo=args.algo, seed=0), **kw)))

    def validator(cfg):
        return (evaluate.validation_rollouts(dom, cfg.select_tasks, cfg.seed, dom.train_sketch_len)
                if cfg.select == "rollouts" else None)

    levels = range(args.levels)
    base_cfg = config()
    models = {"base": (base_model(args.base, base_cfg, demos) if args.base
                       else trained(args.out, "seed0", demos, base_cfg, validator(base_cfg)))}
    if "training seed" in args.factors:
        for s in levels[1:]:
            cfg = config(seed=s)
            models[f"seed{s}"] = trained(args.out, f"seed{s}", demos, cfg, validator(cfg))
    if "minibatch order" in args.factors:
        for o in levels[1:]:
            models[f"order{o}"] = trained(args.out, f"order{o}", demos, base_cfg, validator(base_cfg), order=o)
    other = "float64" if base_cfg.dtype == "float32" else "float32"
    if "float rounding" in args.factors:
        cfg = config(dtype=other)
        models[other] = trained(args.out, other, demos, cfg, validator(cfg))

    sketch_lists = [dom.test_sketches(args.n_tasks, np.random.default_rng(evaluate.TEST_SKETCH_SEED + i))
                    for i in levels]
    episode_seeds = [evaluate.EPISODE_SEED + i for i in levels]
    base_score = score(models["base"], dom, sketch_lists[0], episode_seeds[0])
    scores = {
        "training seed": lambda: [score(models[f"seed{s}"], dom, sketch_lists[0], episode_seeds[0])
                                  for s in levels[1:]],
        "minibatch order": lambda: [score(models[f"order{o}"], dom, sketch_lists[0], episode_seeds[0])
                                    for o in levels[1:]],
        "float rounding": lambda: [score(models[other], dom, sketch_lists[0], episode_seeds[0])],
        "test PIN set": lambda: [score(models["base"], dom, sketch_lists[i], episode_seeds[0])
                                 for i in levels[1:]],
        "rollout's own noise": lambda: [score(models["base"], dom, sketch_lists[0], episode_seeds[i])
                                        for i in levels[1:]],
    }
    factors = {k: [base_score] + scores[k]() for k in FACTORS if k in args.factors}
    binomial = float(np.sqrt(base_score * (1 - base_score) / args.n_tasks))
    rows = {k: {"task_accuracy": v, "sd": float(np.std(v, ddof=1))} for k, v in factors.items()}
    report = dict(domain=args.domain, algo=args.algo, size=args.size, n_tasks=args.n_tasks,
                  settings=settings, base_dtype=base_cfg.dtype, binomial_se=binomial, factors=rows)
    files.write_bytes(os.path.join(args.out, "variance.json"), (json.dumps(report, indent=1) + "\n").encode())
    print(f"| {args.algo}, {args.size} demos, {args.n_tasks} PINs | task acc. % per level | SD (points) |")
    print("|---|---|---:|")
    for k, r in rows.items():
        print(f"| {k} | {' / '.join(f'{100 * a:.1f}' for a in r['task_accuracy'])} | {100 * r['sd']:.1f} |")
    print(f"| (binomial SE of one accuracy on {args.n_tasks} PINs) | | {100 * binomial:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
