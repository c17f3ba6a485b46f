"""Does a Dial sub-policy fail at its key, or at the other keys? The test protocol with each
sub-policy shown the other digits' key offsets permuted among themselves.

A Dial state is the arm's joints and the offset of every key from the fingertip (spec/dial.md
§3). Sub-policy k needs its own key's offset; the other nine are the layout around it. The
test protocol runs every PIN on the standard keypad, a layout training never shows, so each
sub-policy meets one arrangement of the other keys, the same in all 500 PINs.

Here the model runs the protocol's test PINs (evaluate.protocol_sketches, the same episode
seeds) on the standard keypad as usual, except that sub-policy k, for its STOP and its action,
sees the offsets of the digits d != k permuted among themselves by a fixed permutation (one per
k, drawn from --perm-seed): its own key's offset and the joints are unchanged, and the other
offsets are still those of real keys, so the state is one of a real layout of the same slots.
Printed: task accuracy and sub-task success by digit (spec/evaluation.md eq. (7)) unchanged
("as is") and under each permutation draw.

A digit whose success moves a lot between the rows fails or succeeds because of where the
*other* keys are, not because of the reach to its own.

    python -m taco_app.analysis.dial_other_keys --model MODEL_DIR [--n-tasks 500] [--perm-seeds 0 1 2]
"""
import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import taco_sim  # noqa: E402
from taco_sim.dial import env as dial_env  # noqa: E402
from taco_sim.dial.augment import JOINTS  # noqa: E402
from taco_ref import evaluate, model as model_mod, policy  # noqa: E402


def other_key_permutations(seed, K=dial_env.K):
    """{k: (K,) index array}: digit d's offset is read from digit perm[k][d]; perm[k][k] = k."""
    rng = np.random.default_rng(seed)
    perms = {}
    for k in range(K):
        others = [d for d in range(K) if d != k]
        p = np.arange(K)
        p[others] = rng.permutation(others)
        perms[k] = p
    return perms


def run(model, dom, n_tasks, perms=None):
    """The protocol's task_accuracy result, sub-policy k seeing obs with its other keys permuted
    by perms[k] (None: as is)."""
    stop_probability, action = policy.stop_probability, policy.action

    def view(k, state):
        state = np.asarray(state, dtype=np.float64)
        if perms is None:
            return state
        offsets = state[JOINTS:].reshape(-1, 3)[perms[k]]
        return np.concatenate([state[:JOINTS], offsets.ravel()])

    policy.stop_probability = lambda params, cfg, k, s: stop_probability(params, cfg, k, view(k, s))
    policy.action = lambda params, cfg, k, s, rng=None: action(params, cfg, k, view(k, s), rng)
    try:
        sketches = evaluate.protocol_sketches(dom, n_tasks, 0)
        return evaluate.task_accuracy(model, dom.task_env, sketches, seed=evaluate.EPISODE_SEED)
    finally:
        policy.stop_probability, policy.action = stop_probability, action


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m taco_app.analysis.dial_other_keys", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--domain", default="dial", choices=["dial", "dial-velocity"])
    ap.add_argument("--n-tasks", type=int, default=500)
    ap.add_argument("--perm-seeds", type=int, nargs="*", default=[0, 1, 2])
    args = ap.parse_args(argv)
    dom = taco_sim.get(args.domain)
    model = model_mod.load(args.model)
    evaluate.check_vocab(model, dom.vocab, f"domain {dom.name}")
    print(f"| {args.model}, {args.n_tasks} PINs | task acc. % | "
          + " | ".join(dom.vocab) + " |")
    print("|---|---:|" + "---:|" * len(dom.vocab))
    for label, perms in [("as is", None)] + [(f"other keys permuted (seed {s})", other_key_permutations(s))
                                            for s in args.perm_seeds]:
        r = run(model, dom, args.n_tasks, perms)
        share = {int(k): 100 * c / n for k, (c, n) in r["subtask_success"].items()}
        print(f"| {label} | {100 * r['task_accuracy']:.1f} | "
              + " | ".join(f"{share[k]:.0f}" if k in share else "-" for k in range(len(dom.vocab))) + " |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
