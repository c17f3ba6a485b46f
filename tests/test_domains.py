"""The domain contract (sim/taco_sim/domain.py), checked on every registered domain.

A new domain that registers itself is tested here without editing this file: shapes,
finiteness, determinism by seed, the same collection for 1 and 2 workers, the expert's
success rate, demonstrations that pass validation, test sketches, the task environment's
members, the training config and any shipped model.
"""
import numpy as np
import pytest

import taco_sim
from taco_ref import data, evaluate, model as model_mod
from taco_app import config

NAMES = taco_sim.names()
N = 4                                               # demonstrations per collection below
# the Dial's domains (MuJoCo physics; the image Dial renders every state, ~9 ms a frame) take
# 5-30 s each here: slow tier (tests/test_dial.py and tests/test_dial_image.py check them
# quickly in the inner loop)
PARAMS = [pytest.param(n, marks=pytest.mark.slow) if n.startswith("dial") else n for n in NAMES]


@pytest.fixture(scope="module", params=PARAMS)
def dom(request):
    return taco_sim.get(request.param)


@pytest.fixture(scope="module")
def demos(dom):
    return dom.collect(N, dom.train_sketch_len, 7)


def test_one_longest_sketch_for_domains_and_the_runner():
    """MAX_SKETCH_LEN is defined once, in the data format, and read by the domains and the runner."""
    from taco_ref import runner
    from taco_sim import domain as domain_mod
    assert domain_mod.MAX_SKETCH_LEN is data.MAX_SKETCH_LEN and runner.MAX_SKETCH_LEN is data.MAX_SKETCH_LEN


def test_the_builtin_domains_are_registered():
    assert {"navworld", "dial", "dial-velocity", "dial-image", "dial-image-small"} <= set(NAMES)
    with pytest.raises(ValueError, match="domain must be one of"):
        taco_sim.get("no-such-domain")


def test_the_declaration_is_consistent(dom):
    assert dom.K == len(dom.vocab) >= 1 and dom.state_dim >= 1 and dom.action_dim >= 1
    env = dom.task_env()
    for member in ("reset", "step", "stop", "budget", "done", "failed", "progress", "subtask_budget"):
        assert hasattr(type(env), member) or hasattr(env, member), member
    assert hasattr(env, "render") == dom.renders


def test_collected_demonstrations_validate_and_match_the_declaration(dom, demos):
    assert isinstance(demos, data.Demos) and demos.n == N
    demos.validate()
    assert demos.meta["domain"] == dom.name and tuple(demos.vocab) == tuple(dom.vocab)
    assert set(demos.meta["collected_on"]) == {"cpu", "machine", "blas", "numpy_simd"}
    assert demos.states.shape[2:] == dom.obs_shape and demos.discrete == dom.discrete
    assert int(np.prod(dom.obs_shape)) == dom.state_dim
    if not dom.discrete:
        assert demos.actions.shape[2] == dom.action_dim
    if dom.train_sketch_len is not None:
        assert (demos.sketch_len == dom.train_sketch_len).all()
    assert np.isfinite(demos.states).all() and np.isfinite(demos.final_state).all()


def test_collection_is_deterministic_by_seed_and_equal_for_any_workers(dom, demos):
    again = dom.collect(N, dom.train_sketch_len, 7, workers=2)
    assert again.fingerprint() == demos.fingerprint()
    other = dom.collect(N, dom.train_sketch_len, 8)
    assert other.fingerprint() != demos.fingerprint()


def test_collection_reports_progress_up_to_n(dom):
    seen = []
    dom.collect(2, dom.train_sketch_len, 3, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (2, 2) and all(t == 2 for _, t in seen)


def test_the_expert_succeeds_almost_always(dom, demos):
    """Failed expert attempts are redrawn and counted in meta['discarded']."""
    assert demos.n / (demos.n + demos.meta["discarded"]) >= 0.8


def test_test_sketches_are_deterministic_and_in_range(dom):
    a = dom.test_sketches(5, np.random.default_rng(1))
    b = dom.test_sketches(5, np.random.default_rng(1))
    assert np.array_equal(a, b) and a.dtype == np.int64 and a.shape[0] == 5
    if dom.test_sketch_len is not None:
        assert a.shape[1] == dom.test_sketch_len
        assert ((0 <= a) & (a < dom.K)).all()
    else:                          # a mix of lengths: each row ids, then -1 padding (data.md)
        assert all(len(evaluate.unpad(row)) >= 1 for row in a)
        assert ((a == -1) | ((0 <= a) & (a < dom.K))).all()
    L = dom.train_sketch_len or len(evaluate.unpad(a[0]))
    pool = dom.sample_sketches(6, L, np.random.default_rng(2))
    try:
        rest = dom.sample_sketches(20, L, np.random.default_rng(3), exclude=pool[:1])
    except ValueError as err:                      # the only sketch of that length was excluded
        assert "left" in str(err) or "exclude" in str(err)
    else:
        assert not (rest == pool[0]).all(axis=1).any()


def test_the_task_environment_is_deterministic_by_seed(dom):
    sketch = evaluate.unpad(dom.test_sketches(1, np.random.default_rng(0))[0])
    obs = [dom.task_env().reset(sketch, seed=5) for _ in range(2)]
    assert obs[0].shape == dom.obs_shape and np.array_equal(obs[0], obs[1])
    env = dom.task_env()
    env.reset(sketch, seed=5)
    action = 0 if dom.discrete else np.zeros(dom.action_dim)
    nxt = env.step(action)
    assert nxt.shape == dom.obs_shape and np.isfinite(nxt).all()
    assert env.progress == 0 and not env.done and env.budget(len(sketch)) >= len(sketch)


def test_the_training_config_loads(dom):
    cfg = config.load(dom.name)
    assert cfg.algo == "taco"


def test_shipped_models_load_and_speak_the_domain(dom):
    for name, path in dom.models.items():
        model = model_mod.load(path)
        evaluate.check_vocab(model, dom.vocab, f"domain {dom.name}")
        assert model.policy.state_dim == dom.state_dim, name
        assert tuple(model.policy.image_shape or (dom.state_dim,)) == dom.obs_shape, name


def test_collect_refuses_counts_and_noise_out_of_bounds_before_collecting(dom, monkeypatch):
    """Every collect validates its arguments (taco_sim.domain.check_collect_args): counts beyond
    MAX_COLLECT / MAX_WORKERS, a sketch length outside [1, MAX_SKETCH_LEN] and non-integers are
    refused by name before any array is allocated (np.zeros would be the first); a continuous domain's DART level must lie
    in [0, MAX_DART_SIGMA]."""
    import inspect
    from taco_sim import domain as domain_mod

    def no_allocation(*args, **kwargs):
        raise AssertionError("collect allocated before checking its arguments")
    monkeypatch.setattr(np, "zeros", no_allocation)
    for kwargs, name in (({"n": domain_mod.MAX_COLLECT + 1}, "n"), ({"n": 0}, "n"),
                         ({"n": 2, "workers": domain_mod.MAX_WORKERS + 1}, "workers"),
                         ({"n": 2, "workers": 0}, "workers"), ({"n": "2"}, "n"),
                         ({"n": 2, "sketch_len": 0}, "sketch_len"),
                         ({"n": 2, "sketch_len": domain_mod.MAX_SKETCH_LEN + 1}, "sketch_len")):
        args = dict({"sketch_len": dom.train_sketch_len, "seed": 0}, **kwargs)
        args.setdefault("workers", 1)
        with pytest.raises(ValueError, match=f"^{name}: expected an integer in"):
            dom.collect(**args)
    if "dart_sigma" in inspect.signature(dom.collect).parameters:
        for level in (float("inf"), float("nan"), -0.1, domain_mod.MAX_DART_SIGMA * 1.01, True):
            with pytest.raises(ValueError, match="^dart_sigma: expected a number in"):
                dom.collect(2, dom.train_sketch_len, 0, dart_sigma=level)
