"""taco_ref.evaluate.execute: the execution rules of spec/evaluation.md on scripted envs."""
import numpy as np

from taco_ref import evaluate, policy


class ScriptedModel:
    """A one-dimensional model whose sub-policies STOP when the state is 1 (progress just counted)."""

    def __init__(self, K=3):
        cfg = policy.PolicyConfig(state_dim=1, n_subtasks=K, action_dim=1, act_hidden=[2],
                                  stop_hidden=[2])
        params = policy.init_params(cfg, np.random.default_rng(0))
        for name in params:
            params[name][...] = 0.0
        params["norm.std"][...] = 1.0
        # STOP logit = 100 * relu(s) - 50 through the first hidden unit: > 0.5 iff s > 0.5
        params["stop.W0"][:, 0, 0] = 100.0
        params["stop.b1"][:] = -50.0
        params["stop.W1"][:, 0, 0] = 1.0
        self.params, self.policy, self.vocab = params, cfg, tuple(str(k) for k in range(K))


class CounterEnv:
    """State = 1 right after the env counts progress (every 3 steps), else 0;
    fails (like a wrong key) at step fail_at."""

    def __init__(self, fail_at=None):
        self.fail_at = fail_at

    def reset(self, sketch, seed=None):
        self.sketch, self.t, self.progress, self.failed = list(sketch), 0, 0, False
        return np.zeros(1)

    def budget(self, L):
        return 10 * L

    @property
    def done(self):
        return self.progress == len(self.sketch)

    def step(self, action):
        self.t += 1
        if self.t % 3 == 0:
            self.progress += 1
        self.failed = self.fail_at is not None and self.t >= self.fail_at
        return np.array([float(self.t % 3 == 0)])


def test_a_failed_env_ends_the_episode_and_the_observer_sees_every_step():
    seen = []
    out = evaluate.execute(ScriptedModel(), CounterEnv(fail_at=4), [0, 1, 2], seed=0,
                           observer=lambda env, active: seen.append((env.t, active)))
    assert out["steps"] == 4 and not out["success"]
    assert [t for t, _ in seen] == [0, 1, 2, 3, 4]


def test_without_failure_the_sketch_completes():
    out = evaluate.execute(ScriptedModel(), CounterEnv(), [0, 1, 2], seed=0)
    assert out["success"] and out["progress"] == 3 and out["steps"] == 9
    assert out["stop_times"] == [3, 6]          # the last sub-policy never needs to stop
