"""The Craft domain (paper Sec. 5.2): psketch's crafting grid world, on the domain contract.

``world`` holds the grid, the rules of a step, the 1076 features, the scenarios and the picture
(rules in ``recipes.yaml``); ``expert`` the tasks (``tasks.yaml``), the task environment, the
planner expert and DART collection. spec/craft.md documents all of it.

Two domains are registered:

name           | trained on            | evaluated on (test_sketches)
craft          | all 10 tasks          | the 4-step tasks (bed, axe, shears, get[gold]); the paper's
               |                       | mean reward over all training tasks is the by-length
               |                       | mean (spec/craft.md §7)
craft-holdout  | the 8 tasks but bed,  | bed and axe, never seen in training (psketch's
               | axe                   | holdout split): zero-shot

Both train on a mix of sketch lengths (2 to 5): ``train_sketch_len`` is None.
"""
import numpy as np

from taco_sim.craft import world
from taco_sim.craft.expert import (ALL_TASKS, DART_EPS, EPISODE_STEPS, EXPERTS, HOLDOUT, K,
                                   N_ACTIONS, STATE_DIM, SUBTASK_STEPS, TASK_GOALS, TASK_NAMES,
                                   TASK_SKETCHES, TRAIN_TASKS_HOLDOUT, VOCAB, CraftTask, collect,
                                   expert_action, feature_action, feature_plan, feature_stops, plan,
                                   rollout, sample_sketches_from, subtask_done, task_env, task_of,
                                   task_sketches, tasks_of_length)
from taco_sim.domain import Domain, package_file, register

__all__ = ["ALL_TASKS", "DART_EPS", "EPISODE_STEPS", "EXPERTS", "HOLDOUT", "K", "N_ACTIONS",
           "STATE_DIM", "SUBTASK_STEPS", "TASK_GOALS", "TASK_NAMES", "TASK_SKETCHES", "TEST_SKETCH_LEN",
           "TRAIN_TASKS_HOLDOUT", "VOCAB", "CraftTask", "collect", "collect_holdout",
           "expert_action", "feature_action", "feature_plan", "feature_stops", "plan", "rollout", "sample_sketches", "sample_sketches_holdout",
           "subtask_done", "task_env", "task_of", "task_sketches", "tasks_of_length",
           "test_sketches", "test_sketches_holdout", "world"]

TEST_SKETCH_LEN = 4
"""Length of craft-holdout's evaluation sketches (bed and axe are both 4 long)."""


def collect_all(n, sketch_len, seed, dart_eps=DART_EPS, sketches=None, progress=None, workers=1,
                expert="features"):
    """collect over all 10 tasks (domain "craft")."""
    return collect(n, sketch_len, seed, dart_eps=dart_eps, sketches=sketches, progress=progress,
                   workers=workers, tasks=ALL_TASKS, domain="craft", expert=expert)


def collect_holdout(n, sketch_len, seed, dart_eps=DART_EPS, sketches=None, progress=None, workers=1,
                    expert="features"):
    """collect over the 8 training tasks of the zero-shot split (domain "craft-holdout")."""
    return collect(n, sketch_len, seed, dart_eps=dart_eps, sketches=sketches, progress=progress,
                   workers=workers, tasks=TRAIN_TASKS_HOLDOUT, domain="craft-holdout", expert=expert)


def sample_sketches(n, sketch_len, rng, exclude=()):
    """n sketches (n, L) drawn uniformly from the 10 tasks of length sketch_len."""
    return sample_sketches_from(ALL_TASKS, n, sketch_len, rng, exclude)


def sample_sketches_holdout(n, sketch_len, rng, exclude=()):
    """n sketches (n, L) drawn uniformly from the 8 training tasks of length sketch_len."""
    return sample_sketches_from(TRAIN_TASKS_HOLDOUT, n, sketch_len, rng, exclude)


def padded_sketches(tasks):
    """(n, 5) int64 sketches of the task ids, each padded with -1 after its own length."""
    width = max(len(s) for s in TASK_SKETCHES)
    return np.array([list(TASK_SKETCHES[i]) + [-1] * (width - len(TASK_SKETCHES[i])) for i in tasks],
                    dtype=np.int64).reshape(len(tasks), width)


def test_sketches(n, rng):
    """n sketches drawn uniformly from the 10 tasks, padded with -1 (mixed lengths 2 to 5): the
    paper's protocol, so task accuracy is the mean reward over the training tasks in new worlds
    (spec/craft.md §7)."""
    return padded_sketches(np.asarray(ALL_TASKS)[rng.integers(len(ALL_TASKS), size=n)])


def test_sketches_holdout(n, rng):
    """n sketches (n, 4) drawn uniformly from the held-out tasks bed and axe."""
    return sample_sketches_from(HOLDOUT, n, TEST_SKETCH_LEN, rng)


test_sketches.__test__ = False            # pytest: these are not tests
test_sketches_holdout.__test__ = False


def _register(name, **split):
    """A Craft domain registered: the world, config and experts both splits share, and split's
    own tasks (collect, sample_sketches, test_sketches, test_sketch_len)."""
    return register(Domain(
        name=name, vocab=VOCAB, state_dim=STATE_DIM, action_dim=N_ACTIONS, discrete=True,
        train_sketch_len=None, task_env=task_env, config=package_file("configs", "craft.yaml"),
        renders=True, experts=EXPERTS, expert_before="planner", **split))


DOMAIN = _register("craft", test_sketch_len=None, collect=collect_all, sample_sketches=sample_sketches,
                   test_sketches=test_sketches)
"""Craft on the domain contract: trained and evaluated on the 10 tasks."""

HOLDOUT_DOMAIN = _register("craft-holdout", test_sketch_len=TEST_SKETCH_LEN, collect=collect_holdout,
                           sample_sketches=sample_sketches_holdout, test_sketches=test_sketches_holdout)
"""Craft's zero-shot split: trained on 8 tasks, evaluated on bed and axe."""
