"""Tests for taco_ref/policy.py.

In three layers (an exact reference, properties, smoke and determinism), plus bad input:
(a) the sub-policy scores written plainly with autograd.numpy here (for each scored (b, t, l):
    normalise the state (with images, run the convolutional core on it, one output pixel at a
    time), run the MLPs of sub-task sketch[b, l], Gaussian or categorical
    log-likelihood, log-sigmoid pair for STOP / GO; terminal STOP at final states) and
    differentiated by autograd on a random linear functional of the scores, against
    policy.evaluate + policy.backward, for every trainable parameter;
(b) hypothesis over small shapes (B, T, L, K, D, A, hidden sizes, activations, mask patterns,
    sub-tasks repeated across and within rows), continuous and discrete actions;
(c) dropout: rate > 0 in training changes STOP scores only, its backward matches central
    differences of the same-seed forward, evaluation is deterministic; policy.act's types and
    its STOP decision against the STOP probability;
(d) PolicyConfig rejects bad values with a message that starts with the field name.

Symbols: B batch, T time, L sketch length, K sub-tasks, D state dim, A action dim (or number of
discrete actions), n scored entries.
"""
import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from taco_ref import nn, policy
from taco_ref.policy import PolicyConfig

seeds = st.integers(0, 2 ** 32 - 1)
SCORE_NAMES = ("log_act", "log_stop", "log_go")


# ----------------------------------------------------------------------------------------------
# Plain reference (autograd.numpy)
# ----------------------------------------------------------------------------------------------

def ref_mlp(params, head, ks, x, activation):
    """Row i runs the `head` net of sub-task ks[i] on x[i]: (n, D) -> (n, O)."""
    n_layers = sum(1 for name in params if name.startswith(f"{head}.W"))
    h = x
    for i in range(n_layers):
        W = params[f"{head}.W{i}"][ks]                    # (n, in, out)
        b = params[f"{head}.b{i}"][ks]                    # (n, out)
        h = anp.einsum("ni,nio->no", h, W) + b
        if i < n_layers - 1:
            h = anp.where(h > 0, h, 0.0) if activation == "relu" else anp.tanh(h)
    return h


def ref_log_softmax(x):
    m = anp.max(x, axis=-1, keepdims=True)
    return x - m - anp.log(anp.sum(anp.exp(x - m), axis=-1, keepdims=True))


def ref_conv(x, W, b, s):
    """A 'valid' convolution, one output pixel at a time: x (n, H, W, C), W (k, k, C, O)."""
    k = W.shape[0]
    Ho, Wo = (x.shape[1] - k) // s + 1, (x.shape[2] - k) // s + 1
    return anp.stack([anp.stack([anp.tensordot(x[:, s * i:s * i + k, s * j:s * j + k], W, axes=3) + b
                                 for j in range(Wo)], axis=1) for i in range(Ho)], axis=1)


def ref_inputs(tparams, norm, cfg, states):
    """What the nets read: the normalised states (n, D), or with images the core's features
    (n, F): each conv layer then ReLU, flattened."""
    x = (states - norm["mean"]) / norm["std"]
    if cfg.image_shape is None:
        return x
    for i, s in enumerate(cfg.conv_strides):
        x = ref_conv(x, tparams[f"core.W{i}"], tparams[f"core.b{i}"], s)
        x = anp.where(x > 0, x, 0.0) if cfg.activation == "relu" else anp.tanh(x)
    return anp.reshape(x, (x.shape[0], int(np.prod(x.shape[1:]))))


def ref_scores(tparams, norm, cfg, case):
    """{name: (n,) scores at the nonzero entries of mask, in np.nonzero order}, and the terminal
    STOP scores at the nonzero entries of final_mask (when given)."""
    b, t, l = np.nonzero(case["mask"])
    ks = case["sketch"][b, l]
    x = ref_inputs(tparams, norm, cfg, case["states"][b, t].astype(np.float64))  # (n, F)
    head = ref_mlp(tparams, "act", ks, x, cfg.activation)                    # (n, A)
    if cfg.discrete:
        a = case["actions"][b, t]                                            # (n,)
        log_act = ref_log_softmax(head)[np.arange(len(a)), a]
    else:
        diff = case["actions"][b, t] - head                                  # (n, A)
        A = cfg.action_dim
        if cfg.learn_sigma:                                                  # per sub-task, per dim
            s = tparams["act.logstd"][ks]                                    # (n, A)
            log_act = (-0.5 * anp.sum(diff ** 2 * anp.exp(-2 * s), axis=1) - anp.sum(s, axis=1)
                       - 0.5 * A * np.log(2 * np.pi))
        else:
            log_act = (-0.5 * anp.sum(diff ** 2, axis=1) / cfg.sigma ** 2
                       - A * np.log(cfg.sigma) - 0.5 * A * np.log(2 * np.pi))
    g = ref_mlp(tparams, "stop", ks, x, cfg.activation)[:, 0]                # (n,)
    out = {"log_act": log_act, "log_stop": -anp.logaddexp(0.0, -g), "log_go": -anp.logaddexp(0.0, g)}
    if case["final_mask"] is not None:
        fb, fl = np.nonzero(case["final_mask"])
        xf = ref_inputs(tparams, norm, cfg, case["final_states"][fb].astype(np.float64))  # (nf, F)
        gf = ref_mlp(tparams, "stop", case["sketch"][fb, fl], xf, cfg.activation)[:, 0]
        out["log_final_stop"] = -anp.logaddexp(0.0, -gf)
    return out


def ref_functional(tparams, norm, cfg, case, R):
    """sum over scored entries of R * score (entries outside the mask contribute 0)."""
    s = ref_scores(tparams, norm, cfg, case)
    b, t, l = np.nonzero(case["mask"])
    total = sum(anp.sum(R[name][b, t, l] * s[name]) for name in SCORE_NAMES)
    if case["final_mask"] is not None:
        fb, fl = np.nonzero(case["final_mask"])
        total = total + anp.sum(R["log_final_stop"][fb, fl] * s["log_final_stop"])
    return total


# ----------------------------------------------------------------------------------------------
# Strategies and helpers
# ----------------------------------------------------------------------------------------------

def make_params(cfg, rng):
    """init_params with random biases and a non-trivial normalisation (so every input matters)."""
    params = policy.init_params(cfg, rng)
    for name in params:
        if ".b" in name or name == "act.logstd":
            params[name] = rng.normal(scale=0.5, size=params[name].shape)
    n = params["norm.mean"].shape                        # (D,), or (C,) per channel of images
    params["norm.mean"] = rng.normal(size=n) if cfg.image_shape is None else rng.uniform(60, 200, size=n)
    params["norm.std"] = rng.uniform(0.5, 2.0, size=n) if cfg.image_shape is None else rng.uniform(20, 90, size=n)
    return params


def random_actions(cfg, rng, shape):
    if cfg.discrete:
        return rng.integers(0, cfg.action_dim, size=shape)
    return rng.normal(size=shape + (cfg.action_dim,))


def draw_alignment_case(draw, B, T, L, K):
    """(sketch (B, L) ids in [0, K), mask (B, T, L), terminal, final_mask (B, L) or None, rng) of a
    drawn case, in the order both case strategies draw them."""
    sketch = draw(hnp.arrays(np.int64, (B, L), elements=st.integers(0, K - 1)))
    mask = draw(hnp.arrays(np.bool_, (B, T, L)))
    terminal = draw(st.booleans())
    final_mask = draw(hnp.arrays(np.bool_, (B, L))) if terminal else None
    return sketch, mask, terminal, final_mask, np.random.default_rng(draw(seeds))


@st.composite
def policy_cases(draw, discrete=None, learn_sigma=False):
    """A PolicyConfig, parameters, a scored mask over (B, T, L), optional terminal STOP mask,
    and upstream gradients R for every score array."""
    B, T, L, K = (draw(st.integers(1, 3)) for _ in range(4))
    D, A = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    cfg = PolicyConfig(
        state_dim=D, n_subtasks=K, action_dim=A,
        discrete=draw(st.booleans()) if discrete is None else discrete,
        act_hidden=draw(st.lists(st.integers(1, 4), max_size=2)),
        stop_hidden=draw(st.lists(st.integers(1, 4), max_size=2)),
        sigma=draw(st.sampled_from([0.6, 1.0, 1.7])),
        activation=draw(st.sampled_from(["relu", "tanh"])), learn_sigma=learn_sigma)
    # few sub-tasks and several rows: ids repeat across rows (and within rows)
    sketch, mask, terminal, final_mask, rng = draw_alignment_case(draw, B, T, L, K)
    params = make_params(cfg, rng)
    case = dict(sketch=sketch, mask=mask, final_mask=final_mask,
                states=rng.normal(scale=2.0, size=(B, T, D)),
                actions=random_actions(cfg, rng, (B, T)),
                final_states=rng.normal(scale=2.0, size=(B, D)) if terminal else None)
    R = {name: rng.normal(size=(B, T, L)) for name in SCORE_NAMES}
    if terminal:
        R["log_final_stop"] = rng.normal(size=(B, L))
    note(f"cfg={cfg}\nsketch={sketch.tolist()}\nmask={mask.astype(int).tolist()}\n"
         f"final_mask={None if final_mask is None else final_mask.astype(int).tolist()}")
    return cfg, params, case, R


@st.composite
def image_policy_cases(draw):
    """As policy_cases, with uint8 image states (H, W, C) read through a convolutional core of
    one or two layers (kernels and strides drawn so that every layer has an output)."""
    B, T, L, K = (draw(st.integers(1, 3)) for _ in range(4))
    H, W, C = draw(st.integers(4, 7)), draw(st.integers(4, 7)), draw(st.integers(1, 3))
    n_layers = draw(st.integers(1, 2))
    kernels = [draw(st.integers(1, 3)) for _ in range(n_layers)]
    strides = [draw(st.integers(1, 2)) for _ in range(n_layers)]
    if n_layers == 2 and nn.conv_output_size(min(H, W), kernels[0], strides[0]) < kernels[1]:
        kernels[1] = 1
    cfg = PolicyConfig(
        state_dim=H * W * C, n_subtasks=K, action_dim=draw(st.integers(1, 3)),
        act_hidden=draw(st.lists(st.integers(1, 4), max_size=1)),
        stop_hidden=draw(st.lists(st.integers(1, 4), max_size=1)),
        activation=draw(st.sampled_from(["relu", "tanh"])), image_shape=[H, W, C],
        conv_channels=[draw(st.integers(1, 3)) for _ in range(n_layers)], conv_kernels=kernels,
        conv_strides=strides)
    sketch, mask, terminal, final_mask, rng = draw_alignment_case(draw, B, T, L, K)
    params = make_params(cfg, rng)
    case = dict(sketch=sketch, mask=mask, final_mask=final_mask,
                states=rng.integers(0, 256, size=(B, T, H, W, C), dtype=np.uint8),
                actions=random_actions(cfg, rng, (B, T)),
                final_states=rng.integers(0, 256, size=(B, H, W, C), dtype=np.uint8) if terminal else None)
    R = {name: rng.normal(size=(B, T, L)) for name in SCORE_NAMES}
    if terminal:
        R["log_final_stop"] = rng.normal(size=(B, L))
    note(f"cfg={cfg}\nsketch={sketch.tolist()}\nmask={mask.astype(int).tolist()}")
    return cfg, params, case, R


def run_evaluate(params, cfg, case, **kw):
    inputs = policy.Inputs(case["states"], case["actions"], case["sketch"], case["final_states"])
    return policy.evaluate(params, cfg, inputs, case["mask"], case["final_mask"], **kw)


def split_params(params):
    tparams = {k: params[k] for k in policy.trainable(params)}
    return tparams, {"mean": params["norm.mean"], "std": params["norm.std"]}


# ----------------------------------------------------------------------------------------------
# (a) + (b): scores and gradients against the autograd reference
# ----------------------------------------------------------------------------------------------

def check_against_reference(cfg, params, case, R):
    out, cache = run_evaluate(params, cfg, case)
    tparams, norm = split_params(params)
    ref = ref_scores(tparams, norm, cfg, case)
    mask = case["mask"]
    b, t, l = np.nonzero(mask)
    for name in SCORE_NAMES:
        assert out[name].shape == mask.shape
        np.testing.assert_allclose(out[name][b, t, l], ref[name], rtol=1e-10, atol=1e-12, err_msg=name)
        assert (out[name][~mask] == 0).all(), f"{name} is not 0 outside the mask"
    if case["final_mask"] is not None:
        fm = case["final_mask"]
        assert out["log_final_stop"].shape == fm.shape
        np.testing.assert_allclose(out["log_final_stop"][fm], ref["log_final_stop"], rtol=1e-10,
                                   atol=1e-12, err_msg="log_final_stop")
        assert (out["log_final_stop"][~fm] == 0).all(), "log_final_stop is not 0 outside final_mask"
    else:
        assert "log_final_stop" not in out

    grads = policy.backward(R, cache)
    expected = grad(ref_functional)(tparams, norm, cfg, case, R)
    assert set(grads) == set(policy.trainable(params)) == set(expected)
    for name in grads:
        assert grads[name].shape == params[name].shape
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-8, atol=1e-10, err_msg=name)


@given(case=policy_cases(discrete=False))
def test_continuous_scores_and_gradients_match_autograd(case):
    """Checks spec/policy.md eq. (1), (2), (3), (5), (6)."""
    check_against_reference(*case)


@given(case=image_policy_cases())
def test_image_scores_and_gradients_match_autograd(case):
    """Image states through the shared convolutional core: every score and the gradient of every
    trainable array, the core's ("core.*") included, against autograd of the core and nets
    written plainly, with sub-tasks repeated across and within rows and terminal STOPs. Checks
    spec/policy.md eq. (15), (16)."""
    check_against_reference(*case)


def test_the_core_runs_once_per_batch_forward_and_backward(monkeypatch):
    """spec/policy.md eq. (16): one forward of the core on the distinct images a batch scores and
    one backward through it per objective call, whatever the number of sub-tasks and sketch
    positions that read each image."""
    cfg, params, case, R = _fixed_image_case()
    calls = {"forward": [], "backward": 0}
    real_forward, real_backward = nn.convnet_forward, nn.convnet_backward

    def forward(layers, strides, x, activation="relu", scope=None):
        calls["forward"].append(x.shape[0])
        return real_forward(layers, strides, x, activation, scope)

    def backward(dout, cache, input_grad=False):
        calls["backward"] += 1
        return real_backward(dout, cache, input_grad)
    monkeypatch.setattr(nn, "convnet_forward", forward)
    monkeypatch.setattr(nn, "convnet_backward", backward)
    out, cache = run_evaluate(params, cfg, case)
    policy.backward(R, cache)
    distinct = int(case["mask"].any(axis=2).sum())
    assert calls == {"forward": [distinct], "backward": 1}


def _fixed_image_case():
    """4 trajectories of 6 images 5 x 6 x 3, sketches of 3 that repeat sub-tasks, every entry
    scored."""
    rng = np.random.default_rng(11)
    cfg = PolicyConfig(state_dim=90, n_subtasks=3, action_dim=2, act_hidden=[4], stop_hidden=[3],
                       image_shape=[5, 6, 3], conv_channels=[4, 2], conv_kernels=[3, 2], conv_strides=[1, 2])
    params = make_params(cfg, rng)
    B, T, L = 4, 6, 3
    case = dict(sketch=np.array([[0, 1, 0], [2, 2, 1], [1, 0, 2], [0, 0, 0]]), mask=np.ones((B, T, L), bool),
                final_mask=None, states=rng.integers(0, 256, size=(B, T, 5, 6, 3), dtype=np.uint8),
                actions=rng.normal(size=(B, T, 2)), final_states=None)
    R = {name: rng.normal(size=(B, T, L)) for name in SCORE_NAMES}
    return cfg, params, case, R


@given(n=st.integers(0, 3), H=st.integers(1, 5), W=st.integers(1, 5), C=st.integers(1, 4),
       dtype=st.sampled_from([np.float32, np.float64]), integer=st.booleans(),
       layout=st.sampled_from(["C", "strided", "F"]), seed=seeds)
def test_image_input_is_the_per_channel_normalisation(n, H, W, C, dtype, integer, layout, seed):
    """policy.image_input is (x - m_c) / sigma_c per channel, computed as x / sigma_c - m_c /
    sigma_c in dtype: bit for bit what the plain broadcast of the (C,) statistics gives, for
    pixel counts and float images, contiguous, strided or in Fortran order, with no image at
    all, into a fresh array (the input is never written)."""
    rng = np.random.default_rng(seed)
    shape = (n, H, 2 * W if layout == "strided" else W, C)
    images = (rng.integers(0, 256, size=shape, dtype=np.uint8) if integer
              else rng.normal(100.0, 50.0, size=shape))
    if layout == "strided":
        images = images[:, :, ::2]
    elif layout == "F":
        images = np.asfortranarray(images)
    before = images.copy()
    params = {"norm.mean": rng.uniform(0.0, 255.0, size=C), "norm.std": rng.uniform(0.5, 80.0, size=C)}
    x = policy.image_input(params, images, dtype)
    scale = (1.0 / params["norm.std"]).astype(dtype)
    expected = np.multiply(images, scale, dtype=dtype) - params["norm.mean"].astype(dtype) * scale
    assert x.dtype == dtype and x.shape == images.shape
    np.testing.assert_array_equal(x, expected)
    np.testing.assert_allclose(x, (images - params["norm.mean"]) / params["norm.std"],
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    np.testing.assert_array_equal(images, before)


def test_acting_on_one_image_agrees_with_evaluate():
    """policy.act on one image runs the core on it alone and gives the STOP probability and the
    action mean that evaluate scores for that image."""
    cfg, params, case, _ = _fixed_image_case()
    out, _ = run_evaluate(params, cfg, case)
    for b, t, l in ((0, 0, 0), (2, 4, 1), (3, 5, 2)):
        k = case["sketch"][b, l]
        stop, mean = policy.act(params, cfg, k, case["states"][b, t])
        assert stop == (out["log_stop"][b, t, l] > np.log(0.5))
        # the Gaussian score of the action at the mean is its maximum: -A/2 log(2 pi) at sigma 1
        inputs = policy.Inputs(case["states"][b:b + 1, t:t + 1], mean[None, None], np.array([[k]]))
        at_mean, _ = policy.evaluate(params, cfg, inputs, np.ones((1, 1, 1), bool))
        np.testing.assert_allclose(at_mean["log_act"][0, 0, 0], -np.log(2 * np.pi), rtol=1e-12)
    with pytest.raises(ValueError, match=r"^state: expected an image of shape \(5, 6, 3\)"):
        policy.act(params, cfg, 0, np.zeros((6, 5, 3), np.uint8))


@pytest.mark.parametrize("fields, message", [
    (dict(conv_channels=[4]), "^conv_channels, conv_kernels, conv_strides: a convolutional core reads image"),
    (dict(image_shape=[5, 6, 3], state_dim=90), "^conv_channels must be a non-empty list"),
    (dict(image_shape=[5, 6, 3], state_dim=90, conv_channels=[4], conv_kernels=[7], conv_strides=[1]),
     "^conv_kernels: layer 1's kernel 7 does not fit its 5 x 6 input"),
    (dict(image_shape=[5, 6, 3], state_dim=90, conv_channels=[4, 2], conv_kernels=[3], conv_strides=[1]),
     "one entry per conv layer"),
    (dict(image_shape=[5, 6, 3], state_dim=91, conv_channels=[4], conv_kernels=[3], conv_strides=[1]),
     "^state_dim must be H W C = 90"),
    (dict(image_shape=[5, 6], state_dim=30, conv_channels=[4], conv_kernels=[3], conv_strides=[1]),
     r"^image_shape must be \[H, W, C\]"),
])
def test_a_convolutional_core_is_checked_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        PolicyConfig(**dict(dict(state_dim=4, n_subtasks=2, action_dim=1), **fields))


@given(case=policy_cases(discrete=False, learn_sigma=True))
def test_learned_sigma_scores_and_gradients_match_autograd(case):
    """A learned per-sub-task, per-dimension log-std: scores and every gradient, act.logstd's
    included, against autograd. Checks spec/policy.md eq. (9), (10)."""
    check_against_reference(*case)


@given(case=policy_cases(discrete=True))
def test_discrete_scores_and_gradients_match_autograd(case):
    """Checks spec/policy.md eq. (1), (2), (3), (5), (7)."""
    check_against_reference(*case)


def test_repeated_subtask_example_gradient_matches_autograd():
    """A hand-picked case: every row uses sub-task 1 at a different sketch position, two hidden
    layers, terminal STOP at every sketch step, the mask all True.
    Checks spec/policy.md eq. (5), (6)."""
    cfg = PolicyConfig(state_dim=3, n_subtasks=3, action_dim=2, act_hidden=[5, 4], stop_hidden=[3, 2])
    rng = np.random.default_rng(7)
    B, T, L = 3, 5, 3
    case = dict(sketch=np.array([[1, 0, 2], [0, 1, 1], [2, 2, 1]]), mask=np.ones((B, T, L), bool),
                final_mask=np.ones((B, L), bool), states=rng.normal(size=(B, T, 3)),
                actions=rng.normal(size=(B, T, 2)), final_states=rng.normal(size=(B, 3)))
    R = {name: rng.normal(size=(B, T, L)) for name in SCORE_NAMES}
    R["log_final_stop"] = rng.normal(size=(B, L))
    check_against_reference(cfg, make_params(cfg, rng), case, R)


def test_empty_mask_gives_zero_scores_and_gradients():
    cfg = PolicyConfig(state_dim=2, n_subtasks=2, action_dim=2, act_hidden=[3], stop_hidden=[3])
    params = make_params(cfg, np.random.default_rng(0))
    B, T, L = 2, 3, 2
    mask = np.zeros((B, T, L), bool)
    out, cache = policy.evaluate(params, cfg, policy.Inputs(np.ones((B, T, 2)), np.ones((B, T, 2)),
                                                           np.zeros((B, L), np.int64)), mask)
    assert all((out[name] == 0).all() for name in SCORE_NAMES)
    grads = policy.backward({name: np.ones((B, T, L)) for name in SCORE_NAMES}, cache)
    assert set(grads) == set(policy.trainable(params))
    assert all((g == 0).all() for g in grads.values())


def test_padding_values_are_never_read():
    """NaN states/actions and out-of-range sketch ids outside the mask do not reach the scores."""
    cfg = PolicyConfig(state_dim=2, n_subtasks=2, action_dim=2, act_hidden=[4], stop_hidden=[4])
    rng = np.random.default_rng(1)
    params = make_params(cfg, rng)
    B, T, L = 2, 4, 3
    mask = np.zeros((B, T, L), bool)
    mask[0, :2, :2] = mask[1, :3, :1] = True
    states, actions = rng.normal(size=(B, T, 2)), rng.normal(size=(B, T, 2))
    sketch = np.array([[0, 1, -1], [1, -1, -1]])
    clean, _ = policy.evaluate(params, cfg, policy.Inputs(states, actions, sketch), mask)
    states[0, 2:], actions[0, 2:], states[1, 3:], actions[1, 3:] = np.nan, np.nan, np.nan, np.nan
    dirty, _ = policy.evaluate(params, cfg, policy.Inputs(states, actions, sketch), mask)
    for name in SCORE_NAMES:
        np.testing.assert_array_equal(dirty[name], clean[name])
        assert np.isfinite(dirty[name]).all()


def test_scoring_without_a_cache_gives_the_same_scores():
    """keep_cache=False (scoring only: evaluate.scores) returns the same scores, bit for bit,
    with the terminal STOP too, and no cache."""
    cfg = PolicyConfig(state_dim=3, n_subtasks=3, action_dim=2, act_hidden=[5], stop_hidden=[4])
    rng = np.random.default_rng(2)
    params = make_params(cfg, rng)
    B, T, L = 3, 5, 2
    mask = np.ones((B, T, L), bool)
    inputs = policy.Inputs(rng.normal(size=(B, T, 3)), rng.normal(size=(B, T, 2)),
                           np.array([[0, 2], [1, 0], [2, 2]]), rng.normal(size=(B, 3)))
    final = np.ones((B, L), bool)
    kept, cache = policy.evaluate(params, cfg, inputs, mask, final)
    lean, none = policy.evaluate(params, cfg, inputs, mask, final, keep_cache=False)
    assert cache is not None and none is None
    for name in SCORE_NAMES + ("log_final_stop",):
        np.testing.assert_array_equal(lean[name], kept[name])


def test_trainable_excludes_normalisation():
    cfg = PolicyConfig(state_dim=2, n_subtasks=2, action_dim=1, act_hidden=[3, 3], stop_hidden=[])
    params = policy.init_params(cfg, np.random.default_rng(0))
    names = policy.trainable(params)
    assert "norm.mean" not in names and "norm.std" not in names
    assert sorted(names) == sorted(["act.W0", "act.b0", "act.W1", "act.b1", "act.W2", "act.b2",
                                    "stop.W0", "stop.b0"])
    assert params["act.W0"].shape == (2, 2, 3) and params["stop.W0"].shape == (2, 2, 1)
    np.testing.assert_array_equal(params["norm.mean"], 0.0)
    np.testing.assert_array_equal(params["norm.std"], 1.0)


# ----------------------------------------------------------------------------------------------
# (c) Dropout on the STOP nets
# ----------------------------------------------------------------------------------------------

def dropout_case(discrete=False):
    cfg = PolicyConfig(state_dim=3, n_subtasks=2, action_dim=3, discrete=discrete,
                       act_hidden=[6], stop_hidden=[8, 6], activation="tanh")
    rng = np.random.default_rng(3)
    B, T, L = 2, 4, 2
    mask = np.ones((B, T, L), bool)
    mask[1, 3] = False
    case = dict(sketch=np.array([[0, 1], [1, 1]]), mask=mask, final_mask=np.ones((B, L), bool),
                states=rng.normal(size=(B, T, 3)), actions=random_actions(cfg, rng, (B, T)),
                final_states=rng.normal(size=(B, 3)))
    return cfg, make_params(cfg, rng), case


@pytest.mark.parametrize("discrete", [False, True])
def test_dropout_in_training_changes_stop_scores_only(discrete):
    """Checks spec/policy.md eq. (4)."""
    cfg, params, case = dropout_case(discrete)
    plain, _ = run_evaluate(params, cfg, case)
    mask = case["mask"]
    for seed in range(3):
        dropped, _ = run_evaluate(params, cfg, case, stop_dropout=nn.Dropout(0.5, np.random.default_rng(seed)))
        np.testing.assert_array_equal(dropped["log_act"], plain["log_act"])
        for name in ("log_stop", "log_go"):
            assert not np.allclose(dropped[name][mask], plain[name][mask]), name
            assert (dropped[name][~mask] == 0).all()
        # still a probability pair: sigma(g) + sigma(-g) = 1 at every scored entry
        np.testing.assert_allclose(np.exp(dropped["log_stop"][mask]) + np.exp(dropped["log_go"][mask]), 1.0)


def test_dropout_same_seed_same_scores():
    cfg, params, case = dropout_case()
    a, _ = run_evaluate(params, cfg, case, stop_dropout=nn.Dropout(0.4, np.random.default_rng(11)))
    b, _ = run_evaluate(params, cfg, case, stop_dropout=nn.Dropout(0.4, np.random.default_rng(11)))
    for name in SCORE_NAMES + ("log_final_stop",):
        np.testing.assert_array_equal(a[name], b[name])


def test_no_dropout_and_rate_zero_are_the_same_deterministic_evaluation():
    cfg, params, case = dropout_case()
    ref, _ = run_evaluate(params, cfg, case)
    for seed in range(3):
        out, _ = run_evaluate(params, cfg, case, stop_dropout=nn.Dropout(0.0, np.random.default_rng(seed)))
        for name in SCORE_NAMES + ("log_final_stop",):
            np.testing.assert_array_equal(out[name], ref[name])


def test_dropout_backward_matches_central_differences():
    """With the rng reseeded for every call the dropout masks are fixed, so the forward is a
    smooth function of the parameters (tanh) and backward must match central differences.
    Checks spec/policy.md eq. (4)."""
    cfg, params, case = dropout_case()
    rng = np.random.default_rng(5)
    B, T, L = case["mask"].shape
    R = {name: rng.normal(size=(B, T, L)) for name in SCORE_NAMES}
    R["log_final_stop"] = rng.normal(size=(B, L))

    def f(p):
        out, cache = run_evaluate(p, cfg, case, stop_dropout=nn.Dropout(0.5, np.random.default_rng(99)))
        return sum((R[name] * out[name]).sum() for name in R), cache

    _, cache = f(params)
    grads = policy.backward(R, cache)
    eps = 1e-6
    for name in ("stop.W0", "stop.b1", "stop.W2", "act.W0"):
        for _ in range(3):
            idx = tuple(rng.integers(0, s) for s in params[name].shape)
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            fd = (f(plus)[0] - f(minus)[0]) / (2 * eps)
            np.testing.assert_allclose(grads[name][idx], fd, rtol=1e-5, atol=1e-8, err_msg=f"{name}{idx}")


# ----------------------------------------------------------------------------------------------
# (c) Acting
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("discrete", [False, True])
def test_act_types_action_and_stop_decision(discrete):
    """Checks spec/policy.md eq. (8)."""
    cfg = PolicyConfig(state_dim=4, n_subtasks=3, action_dim=3, discrete=discrete,
                       act_hidden=[5], stop_hidden=[5])
    rng = np.random.default_rng(2)
    params = make_params(cfg, rng)
    for k in range(cfg.n_subtasks):
        for _ in range(5):
            state = rng.normal(scale=2.0, size=4)
            stop, action = policy.act(params, cfg, k, state)
            assert type(stop) is bool
            # the STOP probability the lattice uses at the same state
            probe_actions = (np.arange(cfg.action_dim)[None] if discrete
                             else np.zeros((1, 1, cfg.action_dim)))
            states = np.repeat(state[None, None], probe_actions.shape[1], axis=1)   # (1, T, D)
            mask = np.ones((1, states.shape[1], 1), bool)
            out, _ = policy.evaluate(params, cfg, policy.Inputs(states, probe_actions, np.array([[k]])), mask)
            p_stop = float(np.exp(out["log_stop"][0, 0, 0]))
            assert stop == (p_stop > 0.5)
            assert policy.stop_probability(params, cfg, k, state) == pytest.approx(p_stop, rel=1e-6)
            assert policy.act(params, cfg, k, state, stop_threshold=p_stop * (1 - 1e-9))[0] is True
            assert policy.act(params, cfg, k, state, stop_threshold=p_stop * (1 + 1e-9))[0] is False
            if discrete:
                assert type(action) is int and 0 <= action < cfg.action_dim
                assert action == int(np.argmax(out["log_act"][0, :, 0]))   # most probable action
            else:
                assert isinstance(action, np.ndarray) and action.shape == (cfg.action_dim,)
                assert action.dtype == np.float64
                # the mean: its log-density is the Gaussian's maximum, -A log sigma - A/2 log 2 pi
                out, _ = policy.evaluate(params, cfg, policy.Inputs(state[None, None], action[None, None],
                                                               np.array([[k]])), np.ones((1, 1, 1), bool))
                peak = -cfg.action_dim * np.log(cfg.sigma) - 0.5 * cfg.action_dim * np.log(2 * np.pi)
                np.testing.assert_allclose(out["log_act"][0, 0, 0], peak, rtol=1e-12)


@pytest.mark.slow
def test_act_with_a_generator_draws_discrete_actions_from_the_policy():
    """rng given: a discrete action is a draw from pi_k(a | s) (frequencies against the
    softmax), reproducible from the generator's seed; a continuous action is still the mean.
    Checks spec/policy.md eq. (8)."""
    cfg = PolicyConfig(state_dim=3, n_subtasks=2, action_dim=4, discrete=True, act_hidden=[5],
                       stop_hidden=[5])
    params = make_params(cfg, np.random.default_rng(1))
    params["act.W1"] *= 0.2                                     # a spread-out distribution to sample
    state = np.array([0.5, -0.2, 1.0])
    out, _ = policy.evaluate(params, cfg, policy.Inputs(state[None, None].repeat(4, 1), np.arange(4)[None],
                                                        np.array([[1]])), np.ones((1, 4, 1), bool))
    p = np.exp(out["log_act"][0, :, 0])
    rng = np.random.default_rng(7)
    draws = np.array([policy.act(params, cfg, 1, state, rng=rng)[1] for _ in range(8000)])
    freq = np.bincount(draws, minlength=4) / draws.size
    assert p.min() > 0.02 and p.max() < 0.9                     # not close to one-hot
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(0.25 / draws.size))
    again = [policy.act(params, cfg, 1, state, rng=np.random.default_rng(7))[1] for _ in range(1)]
    assert again[0] == draws[0]
    assert policy.act(params, cfg, 1, state)[1] == int(np.argmax(p))       # no rng: the argmax
    cont = PolicyConfig(state_dim=3, n_subtasks=2, action_dim=2, act_hidden=[5], stop_hidden=[5])
    cparams = make_params(cont, np.random.default_rng(1))
    np.testing.assert_array_equal(policy.act(cparams, cont, 0, state, rng=np.random.default_rng(0))[1],
                                  policy.act(cparams, cont, 0, state)[1])


def test_act_accepts_a_list_state_and_is_deterministic():
    cfg = PolicyConfig(state_dim=2, n_subtasks=1, action_dim=2, act_hidden=[3], stop_hidden=[3])
    params = make_params(cfg, np.random.default_rng(4))
    a = policy.act(params, cfg, 0, [0.3, -1.0])
    b = policy.act(params, cfg, 0, np.array([0.3, -1.0]))
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])


# ----------------------------------------------------------------------------------------------
# (d) PolicyConfig validation
# ----------------------------------------------------------------------------------------------

GOOD = dict(state_dim=2, n_subtasks=3, action_dim=2)


@pytest.mark.parametrize("field, value", [
    ("state_dim", 0), ("state_dim", 2.0), ("n_subtasks", -1), ("action_dim", "2"),
    ("act_hidden", [0]), ("act_hidden", [4, 2.5]), ("stop_hidden", [-3]), ("stop_hidden", ["8"]),
    ("sigma", 0.0), ("sigma", -1.0), ("activation", "gelu"),
])
def test_policy_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field} "):
        PolicyConfig(**dict(GOOD, **{field: value}))


def test_policy_config_round_trips_through_to_dict():
    cfg = PolicyConfig(state_dim=2, n_subtasks=3, action_dim=4, discrete=True, act_hidden=(7, 5),
                       stop_hidden=[3], sigma=0.6, activation="tanh")
    assert cfg.act_hidden == [7, 5]                       # stored as a list
    assert PolicyConfig(**cfg.to_dict()) == cfg


# ----------------------------------------------------------------------------------------------
# Each (b, t, sub-task) once; float32 nets
# ----------------------------------------------------------------------------------------------

def test_a_state_is_run_once_per_subtask_even_when_the_sketch_repeats_it(monkeypatch):
    """Sketch [1, 0, 1]: the nets of sub-task 1 run on each (b, t) once, not twice, and both
    sketch positions get the same scores; the gradient matches autograd (check_against_reference
    sums both positions' contributions)."""
    cfg = PolicyConfig(state_dim=2, n_subtasks=2, action_dim=2, act_hidden=[4], stop_hidden=[3])
    rng = np.random.default_rng(3)
    B, T, L = 2, 4, 3
    case = dict(sketch=np.array([[1, 0, 1], [1, 1, 1]]), mask=np.ones((B, T, L), bool),
                final_mask=np.ones((B, L), bool), states=rng.normal(size=(B, T, 2)),
                actions=rng.normal(size=(B, T, 2)), final_states=rng.normal(size=(B, 2)))
    rows = {}
    real = nn.mlp_pair_forward

    def spy(layers_a, layers_b, x, n_a, *args, **kw):
        rows[len(rows)] = (x.shape[0], n_a)
        return real(layers_a, layers_b, x, n_a, *args, **kw)
    monkeypatch.setattr(policy.NETS, "mlp_pair_forward", spy)
    out, _ = run_evaluate(make_params(cfg, rng), cfg, case)
    # sub-task 0: row 0 only, T steps + 1 terminal state; sub-task 1: both rows, 2T + 2
    assert rows == {0: (T + 1, T), 1: (2 * T + 2, 2 * T)}
    for name in SCORE_NAMES:
        np.testing.assert_array_equal(out[name][:, :, 0], out[name][:, :, 2], err_msg=name)
        np.testing.assert_array_equal(out[name][1, :, 0], out[name][1, :, 1], err_msg=name)
    R = {name: rng.normal(size=(B, T, L)) for name in SCORE_NAMES}
    R["log_final_stop"] = rng.normal(size=(B, L))
    monkeypatch.setattr(policy.NETS, "mlp_pair_forward", real)
    check_against_reference(cfg, make_params(cfg, rng), case, R)


@given(case=policy_cases())
def test_float32_nets_give_float64_scores_and_float32_gradients_close_to_autograd(case):
    """float32 parameters: the scores are float64 arrays (for the alignment core) holding the
    float32 nets' values, the gradients are float32; both against the float64 autograd
    reference at the same (float32-representable) parameters, to float32 precision. A gradient
    0.1 % off fails (tests/test_nn.py F32_RTOL)."""
    cfg, params, case, R = case
    params = {n: v.astype(np.float32).astype(np.float64) for n, v in params.items()}
    params32 = {n: v.astype(np.float32) if n in policy.trainable(params) else v
                for n, v in params.items()}
    out, cache = run_evaluate(params32, cfg, case)
    tparams, norm = split_params(params)
    ref = ref_scores(tparams, norm, cfg, case)
    b, t, l = np.nonzero(case["mask"])
    for name in SCORE_NAMES:
        assert out[name].dtype == np.float64
        err = np.abs(out[name][b, t, l] - ref[name])
        assert (err <= 2e-5 * (1 + np.abs(ref[name]))).all(), f"{name}: max error {err.max(initial=0)}"
    grads = policy.backward(R, cache)
    expected = grad(ref_functional)(tparams, norm, cfg, case, R)
    for name in grads:
        assert grads[name].dtype == np.float32, name
        scale = float(np.abs(expected[name]).max(initial=0.0))
        err = float(np.abs(grads[name] - expected[name]).max(initial=0.0))
        assert err <= 2e-5 * scale + 2e-6, f"{name}: max error {err:.3g}, max |grad| {scale:.3g}"
