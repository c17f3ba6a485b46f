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
read. Models are saved under OUT/models (a rerun trains only the missing ones); figures go to
OUT/variance.json and a markdown table to stdout.

    python bench/dial_variance.py --algo taco --out results/dial-variance/taco
    python bench/dial_variance.py --algo gtbc --levels 3 --n-tasks 500 --set lr_decay=none
"""
import argparse
import json
import os
import sys
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import taco_sim  # noqa: E402
from taco_ref import evaluate, files, model as model_mod, train  # noqa: E402
from taco_app import config as config_mod, experiment  # noqa: E402


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


def score(model, dom, sketches, episode_seed):
    return evaluate.task_accuracy(model, dom.task_env, sketches, seed=episode_seed)["task_accuracy"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", default="dial")
    ap.add_argument("--algo", default="taco")
    ap.add_argument("--size", type=int, default=1200)
    ap.add_argument("--levels", type=int, default=3, help="values per factor, the base included")
    ap.add_argument("--n-tasks", type=int, default=500)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
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
    models = {"base": trained(args.out, "seed0", demos, base_cfg, validator(base_cfg))}
    for s in levels[1:]:
        cfg = config(seed=s)
        models[f"seed{s}"] = trained(args.out, f"seed{s}", demos, cfg, validator(cfg))
    for o in levels[1:]:
        models[f"order{o}"] = trained(args.out, f"order{o}", demos, base_cfg, validator(base_cfg), order=o)
    other = "float64" if base_cfg.dtype == "float32" else "float32"
    cfg = config(dtype=other)
    models[other] = trained(args.out, other, demos, cfg, validator(cfg))

    sketch_lists = [dom.test_sketches(args.n_tasks, np.random.default_rng(evaluate.TEST_SKETCH_SEED + i))
                    for i in levels]
    episode_seeds = [evaluate.EPISODE_SEED + i for i in levels]
    base_score = score(models["base"], dom, sketch_lists[0], episode_seeds[0])
    factors = {
        "training seed": [base_score] + [score(models[f"seed{s}"], dom, sketch_lists[0], episode_seeds[0])
                                         for s in levels[1:]],
        "minibatch order": [base_score] + [score(models[f"order{o}"], dom, sketch_lists[0], episode_seeds[0])
                                           for o in levels[1:]],
        "float rounding": [base_score, score(models[other], dom, sketch_lists[0], episode_seeds[0])],
        "test PIN set": [base_score] + [score(models["base"], dom, sketch_lists[i], episode_seeds[0])
                                        for i in levels[1:]],
        "rollout's own noise": [base_score] + [score(models["base"], dom, sketch_lists[0], episode_seeds[i])
                                               for i in levels[1:]],
    }
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
