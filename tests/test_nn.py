"""Tests for taco_ref/nn/ (the layers, dropout, MLPs, convolution, GRU and log-probabilities).

In three layers (an exact reference, properties, smoke and determinism), plus bad input:
(a) every backward against autograd applied to the same forward written plainly with
    autograd.numpy here (the GRU one row and one step at a time), differentiating sum(out * R)
    for a random R;
(b) hypothesis properties: dropout statistics and masks, GRU padding invariance, the reverse GRU
    equal to the forward GRU on each row's time-reversed valid part, log-sigmoid tails;
(c) determinism: same seed => same dropout mask and same initial parameters;
(d) bad input raises ValueError naming the argument.

Symbols: N rows, I/O layer widths, B batch, T time, Hd GRU width, A action dim, K classes.
"""
import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from taco_ref import nn

dims = st.integers(1, 6)
seeds = st.integers(0, 2 ** 32 - 1)
values = st.floats(-3.0, 3.0, allow_nan=False, width=64)
leading_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=values)


def close(actual, expected, what):
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-11, err_msg=what)


def ad_grads(f, args, R):
    """Gradients of sum(f(*args) * R) w.r.t. every argument, by autograd."""
    objective = lambda *a: anp.sum(f(*a) * R)  # noqa: E731
    return [grad(objective, i)(*args) for i in range(len(args))]


# ----------------------------------------------------------------------------------------------
# Plain references (autograd.numpy)
# ----------------------------------------------------------------------------------------------

def ref_linear(x, W, b):
    return anp.dot(x, W) + b


def ref_act(x, activation):
    return anp.where(x > 0, x, 0.0) if activation == "relu" else anp.tanh(x)


def ref_mlp(layers, x, activation, masks):
    """Hidden layers linear -> activation -> * mask; last layer linear. masks[i] may be 1.0."""
    h = x
    for i, (W, b) in enumerate(layers):
        h = ref_linear(h, W, b)
        if i < len(layers) - 1:
            h = ref_act(h, activation) * masks[i]
    return h


def ref_sigmoid(x):
    return 1.0 / (1.0 + anp.exp(-x))


def ref_gru_cell(p, x, h):
    """One step of the torch.nn.GRU cell with separate per-gate blocks, x (I,), h (Hd,)."""
    Hd = h.shape[0]
    W_x, W_h, b_x, b_h = p["W_x"], p["W_h"], p["b_x"], p["b_h"]
    g = lambda W, b, v, k: anp.dot(v, W[:, k * Hd:(k + 1) * Hd]) + b[k * Hd:(k + 1) * Hd]  # noqa
    r = ref_sigmoid(g(W_x, b_x, x, 0) + g(W_h, b_h, h, 0))
    z = ref_sigmoid(g(W_x, b_x, x, 1) + g(W_h, b_h, h, 1))
    n = anp.tanh(g(W_x, b_x, x, 2) + r * g(W_h, b_h, h, 2))
    return (1.0 - z) * n + z * h


def ref_gru(p, x, lengths, reverse=False):
    """(B, T, Hd): each row run alone over its valid steps, in the chosen direction."""
    B, T, _ = x.shape
    Hd = p["W_h"].shape[0]
    rows = []
    for b in range(B):
        out = [anp.zeros(Hd)] * T
        h = anp.zeros(Hd)
        steps = range(lengths[b] - 1, -1, -1) if reverse else range(lengths[b])
        for t in steps:
            h = ref_gru_cell(p, x[b, t], h)
            out[t] = h
        rows.append(anp.stack(out))
    return anp.stack(rows)


def ref_log_softmax(x):
    m = anp.max(x, axis=-1, keepdims=True)
    return x - m - anp.log(anp.sum(anp.exp(x - m), axis=-1, keepdims=True))


# ----------------------------------------------------------------------------------------------
# Strategies
# ----------------------------------------------------------------------------------------------

@st.composite
def linear_case(draw):
    lead = draw(leading_shapes)
    I, O = draw(dims), draw(dims)
    x = draw(arrays(lead + (I,)))
    W = draw(arrays((I, O)))
    b = draw(arrays((O,)))
    R = np.random.default_rng(draw(seeds)).normal(size=lead + (O,))
    return x, W, b, R


@st.composite
def sequence_case(draw, min_I=1):
    """Padded sequences x (B, T, I), lengths (B,), GRU params, upstream gradient R (B, T, Hd)."""
    B, T, I, Hd = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(dims), draw(dims)
    lengths = np.array(draw(st.lists(st.integers(1, T), min_size=B, max_size=B)), dtype=np.int64)
    rng = np.random.default_rng(draw(seeds))
    x = rng.normal(size=(B, T, I))
    params = nn.gru_init(rng, I, Hd)
    params = {k: v + 0.3 * rng.normal(size=v.shape) for k, v in params.items()}  # nonzero biases
    return x, lengths, params, rng


def padding_mask(lengths, T):
    return np.arange(T)[None, :] >= lengths[:, None]      # (B, T) True at padding


# ----------------------------------------------------------------------------------------------
# (a) Gradients against autograd
# ----------------------------------------------------------------------------------------------

@given(linear_case())
def test_linear_matches_autograd(case):
    x, W, b, R = case
    note(f"x {x.shape}, W {W.shape}")
    out, cache = nn.linear_forward(x, W, b)
    close(out, x @ W + b, "forward")
    dx, dW, db = nn.linear_backward(R, cache)
    for got, want, what in zip((dx, dW, db), ad_grads(ref_linear, (x, W, b), R), "xWb"):
        assert got.shape == want.shape
        close(got, want, f"d{what}")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@given(x=arrays(st.tuples(dims, dims)), seed=seeds)
def test_activations_match_autograd(activation, x, seed):
    R = np.random.default_rng(seed).normal(size=x.shape)
    fwd, bwd = {"relu": (nn.relu_forward, nn.relu_backward),
                "tanh": (nn.tanh_forward, nn.tanh_backward)}[activation]
    out, cache = fwd(x)
    close(out, ref_act(x, activation), "forward")
    (want,) = ad_grads(lambda v: ref_act(v, activation), (x,), R)
    close(bwd(R, cache), want, "dx")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@given(lead=leading_shapes, sizes=st.lists(dims, min_size=2, max_size=4), seed=seeds,
       rate=st.sampled_from([0.0, 0.3, 0.7]), train=st.booleans())
def test_mlp_matches_autograd(activation, lead, sizes, seed, rate, train):
    note(f"lead {lead}, sizes {sizes}")
    rng = np.random.default_rng(seed)
    layers = [(W, b + rng.normal(size=b.shape)) for W, b in nn.mlp_init(rng, sizes, activation)]
    x = rng.normal(size=lead + (sizes[0],))
    R = rng.normal(size=lead + (sizes[-1],))
    out, cache = nn.mlp_forward(layers, x, activation,
                                dropout=nn.Dropout(rate, np.random.default_rng(seed)) if train else None)
    # the masks the forward must have drawn: one per hidden layer, in order, from the same seed
    mask_rng = np.random.default_rng(seed)
    masks = [(mask_rng.random(lead + (n,)) >= rate) / (1 - rate) if train and rate else 1.0
             for n in sizes[1:-1]]
    close(out, ref_mlp(layers, x, activation, masks), "forward")
    dx, grads = nn.mlp_backward(R, cache)
    flat = [a for layer in layers for a in layer]
    f = lambda x, *flat: ref_mlp(list(zip(flat[::2], flat[1::2])), x, activation, masks)  # noqa
    want = ad_grads(f, (x, *flat), R)
    close(dx, want[0], "dx")
    assert len(grads) == len(layers)
    for i, ((dW, db), dW_ad, db_ad) in enumerate(zip(grads, want[1::2], want[2::2])):
        close(dW, dW_ad, f"dW[{i}]")
        close(db, db_ad, f"db[{i}]")


@pytest.mark.slow
@given(sequence_case(), st.booleans())
def test_gru_matches_autograd(case, reverse):
    x, lengths, params, rng = case
    note(f"x {x.shape}, lengths {lengths}, reverse {reverse}")
    H, cache = nn.gru_forward(params, x, lengths, reverse=reverse)
    close(H, ref_gru(params, x, lengths, reverse), "forward")
    R = rng.normal(size=H.shape)
    dx, dparams = nn.gru_backward(R, cache)
    dx_ad, dp_ad = ad_grads(lambda x, p: ref_gru(p, x, lengths, reverse), (x, params), R)
    close(dx, dx_ad, "dx")
    assert dparams.keys() == params.keys()
    for k in params:
        assert dparams[k].shape == params[k].shape
        close(dparams[k], dp_ad[k], f"d{k}")


@pytest.mark.slow
@given(sequence_case())
def test_bigru_matches_autograd(case):
    x, lengths, params_f, rng = case
    params_b = {k: rng.normal(size=v.shape) * 0.5 for k, v in params_f.items()}
    Hd = params_f["W_h"].shape[0]
    H, cache = nn.bigru_forward(params_f, params_b, x, lengths)
    assert H.shape == x.shape[:2] + (2 * Hd,)

    def ref(x, pf, pb):
        return anp.concatenate([ref_gru(pf, x, lengths), ref_gru(pb, x, lengths, True)], axis=-1)

    close(H, ref(x, params_f, params_b), "forward")
    R = rng.normal(size=H.shape)
    dx, dpf, dpb = nn.bigru_backward(R, cache)
    dx_ad, dpf_ad, dpb_ad = ad_grads(ref, (x, params_f, params_b), R)
    close(dx, dx_ad, "dx")
    for k in params_f:
        close(dpf[k], dpf_ad[k], f"forward d{k}")
        close(dpb[k], dpb_ad[k], f"backward d{k}")


@given(x=arrays(st.tuples(dims, st.integers(1, 6), dims)), seed=seeds)
def test_log_softmax_matches_autograd(x, seed):
    R = np.random.default_rng(seed).normal(size=x.shape)
    out, cache = nn.log_softmax_forward(x)
    close(np.exp(out).sum(axis=-1), 1.0, "normalised")
    close(out, ref_log_softmax(x), "forward")
    (want,) = ad_grads(ref_log_softmax, (x,), R)
    close(nn.log_softmax_backward(R, cache), want, "dx")


def test_log_softmax_large_and_masked_logits():
    x = np.array([[1000.0, 0.0, -np.inf], [-1000.0, -1000.0, -1000.0]])
    out, cache = nn.log_softmax_forward(x)
    np.testing.assert_array_equal(out[0], [0.0, -1000.0, -np.inf])
    close(out[1], np.full(3, -np.log(3.0)), "uniform")
    dx = nn.log_softmax_backward(np.ones_like(x), cache)   # d sum_k out_k / dx_j = 1 - K p_j
    np.testing.assert_array_equal(dx[0], [-2.0, 1.0, 1.0])
    close(dx[1], 0.0, "uniform row")


@given(lead=leading_shapes, A=dims, seed=seeds, sigma=st.floats(0.05, 5.0))
def test_gaussian_logpdf_matches_autograd(lead, A, seed, sigma):
    """Checks spec/policy.md eq. (1), (6)."""
    rng = np.random.default_rng(seed)
    mu, a, R = rng.normal(size=lead + (A,)), rng.normal(size=lead + (A,)), rng.normal(size=lead)
    logp, cache = nn.gaussian_logpdf_forward(mu, a, sigma)
    assert logp.shape == lead
    # independent check of the density: product of 1-D normal densities
    dens = np.prod(np.exp(-0.5 * ((a - mu) / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi)), axis=-1)
    close(np.exp(logp), dens, "density")

    def ref(mu):
        return (-0.5 * anp.sum((a - mu) ** 2, axis=-1) / sigma ** 2
                - A * anp.log(sigma) - 0.5 * A * anp.log(2 * anp.pi))

    (want,) = ad_grads(ref, (mu,), R)
    close(nn.gaussian_logpdf_backward(R, cache), want, "dmu")


@given(lead=leading_shapes, K=dims, seed=seeds)
def test_categorical_logp_matches_autograd(lead, K, seed):
    """Checks spec/policy.md eq. (1), (7)."""
    rng = np.random.default_rng(seed)
    logits = 3 * rng.normal(size=lead + (K,))
    a = rng.integers(0, K, size=lead)
    R = rng.normal(size=lead)
    logp, cache = nn.categorical_logp_forward(logits, a)
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    close(np.exp(logp), np.take_along_axis(p, a[..., None], axis=-1)[..., 0], "probability")
    onehot = np.eye(K)[a]
    (want,) = ad_grads(lambda z: anp.sum(ref_log_softmax(z) * onehot, axis=-1), (logits,), R)
    close(nn.categorical_logp_backward(R, cache), want, "dlogits")


@given(x=arrays(st.tuples(dims, dims)), seed=seeds)
def test_log_sigmoid_pair_matches_autograd(x, seed):
    """Checks spec/policy.md eq. (2), (3), (5)."""
    rng = np.random.default_rng(seed)
    d_pos, d_neg = rng.normal(size=x.shape), rng.normal(size=x.shape)
    lp, ln = nn.log_sigmoid_pair(x)
    close(lp, np.log(1 / (1 + np.exp(-x))), "log sigma(x)")
    close(ln, np.log(1 / (1 + np.exp(x))), "log sigma(-x)")
    close(np.exp(lp) + np.exp(ln), 1.0, "sigma(x) + sigma(-x) = 1")

    def f(v):
        return anp.sum(anp.log(ref_sigmoid(v)) * d_pos + anp.log(ref_sigmoid(-v)) * d_neg)

    close(nn.log_sigmoid_pair_backward(d_pos, d_neg, x), grad(f)(x), "dx")
    close(nn.sigmoid(x), 1 / (1 + np.exp(-x)), "sigmoid")


# ----------------------------------------------------------------------------------------------
# (b) Properties
# ----------------------------------------------------------------------------------------------

def test_log_sigmoid_pair_tails_are_exact():
    """Checks spec/policy.md eq. (2), (3), (5)."""
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is fine
        lp, ln = nn.log_sigmoid_pair(x)
        s = nn.sigmoid(x)
    np.testing.assert_array_equal(lp[[0, 4]], [-1000.0, 0.0])
    np.testing.assert_array_equal(ln[[0, 4]], [0.0, -1000.0])
    close(lp[1], -50.0 - np.log1p(np.exp(-50.0)), "log sigma(-50)")
    close([lp[2], ln[2]], [-np.log(2.0)] * 2, "log sigma(0)")
    close(s[1], np.exp(-50.0) / (1 + np.exp(-50.0)), "sigma(-50) keeps relative accuracy")
    np.testing.assert_array_equal(s[[0, 4]], [0.0, 1.0])
    dx = nn.log_sigmoid_pair_backward(np.ones(5), np.ones(5), x)
    np.testing.assert_array_equal(dx[[0, 4]], [1.0, -1.0])   # sigma(-x) - sigma(x) in the tails


@given(shape=st.tuples(dims, dims), rate=st.floats(0.0, 0.95), seed=seeds)
def test_dropout_mask_backward_and_determinism(shape, rate, seed):
    """Checks spec/policy.md eq. (4)."""
    x = np.random.default_rng(seed + 1).normal(size=shape)
    out, mask = nn.dropout_forward(x, nn.Dropout(rate, np.random.default_rng(seed)))
    if rate == 0.0:
        assert mask is None and out is not None
        np.testing.assert_array_equal(out, x)
        return
    scale = 1.0 / (1.0 - rate)
    assert np.isin(mask, [0.0, scale]).all()
    np.testing.assert_array_equal(out, x * mask)
    dout = np.random.default_rng(seed + 2).normal(size=shape)
    np.testing.assert_array_equal(nn.dropout_backward(dout, mask), dout * mask)
    out2, mask2 = nn.dropout_forward(x, nn.Dropout(rate, np.random.default_rng(seed)))
    np.testing.assert_array_equal(mask2, mask)          # same seed => same mask
    np.testing.assert_array_equal(out2, out)


@given(rate=st.floats(0.0, 0.9), seed=seeds)
def test_dropout_preserves_mean(rate, seed):
    """Checks spec/policy.md eq. (4)."""
    n = 100_000
    out, _ = nn.dropout_forward(np.ones(n), nn.Dropout(rate, np.random.default_rng(seed)))
    tol = 6 * np.sqrt(rate / (1 - rate) / n) + 1e-12    # 6 standard errors of the mean
    note(f"mean {out.mean()}, tol {tol}")
    assert abs(out.mean() - 1.0) <= tol
    assert abs((out != 0).mean() - (1 - rate)) <= 6 * np.sqrt(rate * (1 - rate) / n) + 1e-12


@given(x=arrays(st.tuples(dims, dims)), rate=st.floats(0.0, 0.99), seed=seeds)
def test_dropout_eval_is_identity(x, rate, seed):
    """Checks spec/policy.md eq. (4)."""
    rng = np.random.default_rng(seed)
    state = rng.bit_generator.state
    out, cache = nn.dropout_forward(x, None)
    np.testing.assert_array_equal(out, x)
    assert cache is None and rng.bit_generator.state == state   # no random numbers consumed
    np.testing.assert_array_equal(nn.dropout_backward(x, cache), x)


@given(sequence_case(), st.booleans())
def test_gru_padding_invariance(case, reverse):
    x, lengths, params, rng = case
    B, T, _ = x.shape
    pad = padding_mask(lengths, T)                      # (B, T)
    note(f"lengths {lengths}, reverse {reverse}")
    x_junk = np.where(pad[..., None], rng.choice([np.nan, np.inf, 1e6], size=x.shape), x)
    H, cache = nn.gru_forward(params, x, lengths, reverse=reverse)
    H2, cache2 = nn.gru_forward(params, x_junk, lengths, reverse=reverse)
    np.testing.assert_array_equal(H2, H)
    assert (H[pad] == 0).all()
    dH = rng.normal(size=H.shape)
    dH_junk = np.where(pad[..., None], rng.normal(size=H.shape) * 1e3, dH)
    dx, dp = nn.gru_backward(dH, cache)
    dx2, dp2 = nn.gru_backward(dH_junk, cache2)
    np.testing.assert_array_equal(dx2, dx)
    for k in params:
        np.testing.assert_array_equal(dp2[k], dp[k])
    assert (dx[pad] == 0).all()


@given(sequence_case())
def test_gru_reverse_is_forward_on_reversed_rows(case):
    x, lengths, params, _ = case
    H_rev, _ = nn.gru_forward(params, x, lengths, reverse=True)
    for b, n in enumerate(lengths):
        H_row, _ = nn.gru_forward(params, x[b:b + 1, n - 1::-1], np.array([n]))
        close(H_rev[b, :n], H_row[0, ::-1], f"row {b}")


def test_gru_full_rows_equal_lengths_none():
    rng = np.random.default_rng(0)
    params = nn.gru_init(rng, 3, 4)
    x = rng.normal(size=(2, 5, 3))
    H, _ = nn.gru_forward(params, x, None)
    H_full, _ = nn.gru_forward(params, x, np.array([5, 5]))
    np.testing.assert_array_equal(H, H_full)
    assert np.abs(H).max() < 1                          # |h| < 1: convex mix of tanh values


# ----------------------------------------------------------------------------------------------
# (c) Initialisation and determinism
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("activation, var", [("relu", lambda i, o: 2 / i),
                                             ("tanh", lambda i, o: 2 / (i + o))])
def test_mlp_init_scale(activation, var):
    sizes = [300, 200, 100]
    layers = nn.mlp_init(np.random.default_rng(0), sizes, activation)
    assert [W.shape for W, _ in layers] == [(300, 200), (200, 100)]
    for (W, b), i, o in zip(layers, sizes[:-1], sizes[1:]):
        assert (b == 0).all()
        assert np.abs(W).max() <= np.sqrt(3 * var(i, o))   # uniform bound = sqrt(3 Var)
        assert abs(W.var() / var(i, o) - 1) < 0.05
    again = nn.mlp_init(np.random.default_rng(0), sizes, activation)
    for (W, _), (W2, _) in zip(layers, again):
        np.testing.assert_array_equal(W, W2)


def test_gru_init_shapes_and_range():
    p = nn.gru_init(np.random.default_rng(0), 5, 7)
    assert {k: v.shape for k, v in p.items()} == {"W_x": (5, 21), "W_h": (7, 21),
                                                  "b_x": (21,), "b_h": (21,)}
    for v in p.values():
        assert v.dtype == np.float64 and np.abs(v).max() <= 1 / np.sqrt(7)


# ----------------------------------------------------------------------------------------------
# (d) Bad input
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, np.nan, "0.5", None])
def test_dropout_rejects_bad_rate(rate):
    with pytest.raises(ValueError, match="dropout rate"):
        nn.Dropout(rate, np.random.default_rng(0))


def test_dropout_needs_a_generator_and_layers_need_a_dropout():
    with pytest.raises(ValueError, match="rng"):
        nn.Dropout(0.5, None)
    with pytest.raises(ValueError, match="nn.Dropout or None"):
        nn.dropout_forward(np.ones(3), 0.5)
    with pytest.raises(ValueError, match="nn.Dropout or None"):
        nn.mlp_forward(nn.mlp_init(np.random.default_rng(0), [2, 3, 1]), np.ones((1, 2)), dropout=0.5)


@pytest.mark.parametrize("lengths", [[0, 2], [3, 4], [2], [1.0, 2.0], [[1, 2]]])
def test_gru_rejects_bad_lengths(lengths):
    params = nn.gru_init(np.random.default_rng(0), 2, 3)
    with pytest.raises(ValueError, match="lengths"):
        nn.gru_forward(params, np.zeros((2, 3, 2)), np.array(lengths))


def test_other_bad_inputs_name_the_argument():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="activation"):
        nn.mlp_init(rng, [2, 2], activation="sigmoid")
    with pytest.raises(ValueError, match="sizes"):
        nn.mlp_init(rng, [2])
    with pytest.raises(ValueError, match="x"):
        nn.gru_forward(nn.gru_init(rng, 2, 3), np.zeros((3, 2)), np.array([1, 1, 1]))
    with pytest.raises(ValueError, match="sigma"):
        nn.gaussian_logpdf_forward(np.zeros(2), np.zeros(2), 0.0)
    for a in (np.array([0, 3]), np.array([-1, 0]), np.array([0.0, 1.0]), np.array([0])):
        with pytest.raises(ValueError, match="a_int"):
            nn.categorical_logp_forward(np.zeros((2, 3)), a)


def test_mlp_backward_without_input_gradient_gives_the_same_parameter_gradients():
    rng = np.random.default_rng(0)
    layers = nn.mlp_init(rng, [5, 7, 3])
    x = rng.normal(size=(4, 5))
    out, cache = nn.mlp_forward(layers, x)
    dout = rng.normal(size=out.shape)
    dx, grads = nn.mlp_backward(dout, cache)
    dx_skipped, grads_skipped = nn.mlp_backward(dout, cache, input_grad=False)
    assert dx is not None and dx.shape == x.shape and dx_skipped is None
    for (dW, db), (dW2, db2) in zip(grads, grads_skipped):
        np.testing.assert_array_equal(dW, dW2)
        np.testing.assert_array_equal(db, db2)


# ----------------------------------------------------------------------------------------------
# float32: dtype kept through every layer; gradients against autograd (float64) at the same
# float32 values, with tolerances a wrong gradient fails
# ----------------------------------------------------------------------------------------------

F32_RTOL, F32_ATOL = 2e-5, 1e-6
"""float32 results against the float64 autograd ones at the same inputs (all O(1) here): max
|error| <= F32_RTOL * max |expected| + F32_ATOL per array. float32 rounds at 6e-8; the sums
of at most a few hundred O(1) terms here stay well below; a gradient off by 0.1 % (a dropped
term, a wrong scale) fails."""


def close32(actual, expected, what):
    """actual is float32 and within F32_RTOL * max |expected| of expected everywhere."""
    assert actual.dtype == np.float32, f"{what} is {actual.dtype}, expected float32"
    scale = max(float(np.abs(expected).max()), 1e-30)
    err = float(np.abs(actual.astype(np.float64) - expected).max())
    assert err <= F32_RTOL * scale + F32_ATOL, \
        f"{what}: max error {err:.3g} > {F32_RTOL} x {scale:.3g} + {F32_ATOL}"


def test_float32_tolerance_rejects_a_wrong_gradient():
    """The float32 check can fail: 0.1 % off in one entry, or float64 instead of float32."""
    expected = np.random.default_rng(0).normal(size=(20, 7))
    close32(expected.astype(np.float32), expected, "exact")
    wrong = expected.copy()
    wrong[3, 4] += 1e-3 * np.abs(expected).max()
    with pytest.raises(AssertionError, match="max error"):
        close32(wrong.astype(np.float32), expected, "wrong")
    with pytest.raises(AssertionError, match="expected float32"):
        close32(expected, expected, "float64")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@given(lead=leading_shapes, sizes=st.lists(st.integers(1, 40), min_size=2, max_size=4),
       seed=seeds, rate=st.sampled_from([0.0, 0.3]))
def test_float32_mlp_matches_autograd(activation, lead, sizes, seed, rate):
    note(f"lead {lead}, sizes {sizes}")
    rng = np.random.default_rng(seed)
    layers = [(W.astype(np.float32), (b + rng.normal(size=b.shape)).astype(np.float32))
              for W, b in nn.mlp_init(rng, sizes, activation)]
    x = rng.normal(size=lead + (sizes[0],)).astype(np.float32)
    R = rng.normal(size=lead + (sizes[-1],)).astype(np.float32)
    out, cache = nn.mlp_forward(layers, x, activation,
                                dropout=nn.Dropout(rate, np.random.default_rng(seed)))
    mask_rng = np.random.default_rng(seed)
    masks = [(mask_rng.random(lead + (n,)) >= rate) / (1 - rate) if rate else 1.0
             for n in sizes[1:-1]]
    layers64 = [(W.astype(np.float64), b.astype(np.float64)) for W, b in layers]
    x64 = x.astype(np.float64)
    close32(out, ref_mlp(layers64, x64, activation, masks), "forward")
    dx, grads = nn.mlp_backward(R, cache)
    flat = [a for layer in layers64 for a in layer]
    f = lambda x, *flat: ref_mlp(list(zip(flat[::2], flat[1::2])), x, activation, masks)  # noqa
    want = ad_grads(f, (x64, *flat), R.astype(np.float64))
    close32(dx, want[0], "dx")
    for i, ((dW, db), dW_ad, db_ad) in enumerate(zip(grads, want[1::2], want[2::2])):
        close32(dW, dW_ad, f"dW[{i}]")
        close32(db, db_ad, f"db[{i}]")


@given(lead=leading_shapes, A=dims, seed=seeds)
def test_float32_log_likelihoods_and_sigmoid_match_autograd(lead, A, seed):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=lead + (A,)).astype(np.float32)
    a = rng.normal(size=lead + (A,))                                  # float64 data
    R = rng.normal(size=lead)
    logp, cache = nn.gaussian_logpdf_forward(mu, a, 0.7)
    a32 = a.astype(np.float32).astype(np.float64)                     # what the float32 path reads
    ref = lambda m: -0.5 * anp.sum((a32 - m) ** 2, axis=-1) / 0.49 - A * np.log(0.7) \
        - 0.5 * A * np.log(2 * np.pi)  # noqa: E731
    close32(logp, ref(mu.astype(np.float64)), "gaussian logp")
    close32(nn.gaussian_logpdf_backward(R, cache), ad_grads(ref, (mu.astype(np.float64),), R)[0],
            "gaussian dmu")
    a_int = rng.integers(0, A, size=lead)
    logq, cache = nn.categorical_logp_forward(mu, a_int)
    onehot = np.eye(A)[a_int]

    def ref_cat(z):
        m = anp.max(z, axis=-1, keepdims=True)
        return anp.sum((z - m - anp.log(anp.sum(anp.exp(z - m), axis=-1, keepdims=True))) * onehot, -1)
    close32(logq, ref_cat(mu.astype(np.float64)), "categorical logp")
    close32(nn.categorical_logp_backward(R, cache), ad_grads(ref_cat, (mu.astype(np.float64),), R)[0],
            "categorical dlogits")
    g = mu[..., 0]
    pos, neg = nn.log_sigmoid_pair(g)
    close32(pos, -np.logaddexp(0.0, -g.astype(np.float64)), "log sigma(g)")
    close32(neg, -np.logaddexp(0.0, g.astype(np.float64)), "log sigma(-g)")


# ----------------------------------------------------------------------------------------------
# Two nets on the same inputs with one first-layer product (mlp_pair_forward / backward)
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@given(N=st.integers(1, 12), I=dims, sizes_a=st.lists(dims, min_size=1, max_size=3),
       sizes_b=st.lists(dims, min_size=1, max_size=3), seed=seeds, rate=st.sampled_from([0.0, 0.4]),
       frac=st.floats(0.0, 1.0))
def test_mlp_pair_equals_two_mlps_and_matches_autograd(dtype, activation, N, I, sizes_a, sizes_b,
                                                        seed, rate, frac):
    """Net a on x[:n_a], net b on x (with dropout): the values of two mlp_forward calls (the
    same dropout draws), and every gradient of sum(out_a R_a) + sum(out_b R_b) by autograd."""
    n_a = int(round(frac * N))
    note(f"N {N}, n_a {n_a}, sizes a {[I] + sizes_a}, b {[I] + sizes_b}")
    rng = np.random.default_rng(seed)
    la = [(W.astype(dtype), (b + rng.normal(size=b.shape)).astype(dtype))
          for W, b in nn.mlp_init(rng, [I] + sizes_a, activation)]
    lb = [(W.astype(dtype), (b + rng.normal(size=b.shape)).astype(dtype))
          for W, b in nn.mlp_init(rng, [I] + sizes_b, activation)]
    x = rng.normal(size=(N, I)).astype(dtype)
    Ra = rng.normal(size=(n_a, sizes_a[-1])).astype(dtype)
    Rb = rng.normal(size=(N, sizes_b[-1])).astype(dtype)
    out_a, out_b, cache = nn.mlp_pair_forward(la, lb, x, n_a, activation,
                                              nn.Dropout(rate, np.random.default_rng(seed)))
    want_a, _ = nn.mlp_forward(la, x[:n_a], activation)
    want_b, _ = nn.mlp_forward(lb, x, activation, nn.Dropout(rate, np.random.default_rng(seed)))
    assert out_a.dtype == out_b.dtype == dtype
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_a, want_a, **tol, err_msg="net a")
    np.testing.assert_allclose(out_b, want_b, **tol, err_msg="net b")
    grads_a, grads_b = nn.mlp_pair_backward(Ra, Rb, cache)
    mask_rng = np.random.default_rng(seed)
    masks = [(mask_rng.random((N, n)) >= rate) / (1 - rate) if rate else 1.0 for n in sizes_b[:-1]]
    flat = [a.astype(np.float64) for layer in la + lb for a in layer]

    def objective(*flat):
        pa = list(zip(flat[:2 * len(la):2], flat[1:2 * len(la):2]))
        pb = list(zip(flat[2 * len(la)::2], flat[2 * len(la) + 1::2]))
        x64 = x.astype(np.float64)
        return (anp.sum(ref_mlp(pa, x64[:n_a], activation, [1.0] * len(pa)) * Ra)
                + anp.sum(ref_mlp(pb, x64, activation, masks) * Rb))
    want = [grad(objective, i)(*flat) for i in range(len(flat))]
    got = [a for layer in grads_a + grads_b for a in layer]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape
        if dtype == np.float64:
            close(g, w, f"gradient {i}")
        else:
            close32(g, w, f"gradient {i}")


# ----------------------------------------------------------------------------------------------
# Subnormals
# ----------------------------------------------------------------------------------------------

TINY = float(np.finfo(np.float32).tiny)
FLUSH = float(nn.FLUSH_BELOW)
tiny32 = st.floats(-FLUSH, FLUSH, allow_nan=False, width=32, exclude_min=True, exclude_max=True)
any32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@given(hnp.arrays(np.float32, leading_shapes, elements=st.one_of(any32, tiny32)))
def test_flush_zeroes_exactly_the_float32_subnormals(x):
    """spec/training.md eq. (12): entries with |x| < 2^-100 (the subnormals among them) become 0,
    every other entry keeps its bits, in place; the census counts the subnormals; float64 arrays
    are never touched."""
    before = x.copy()
    flushed = np.abs(before) < FLUSH
    sub = (np.abs(before) < TINY) & (before != 0)
    note(f"{int(flushed.sum())} flushed, {int(sub.sum())} subnormal, of {x.size}")
    assert nn.count_subnormal(before) == int(sub.sum())
    out = nn.flush_subnormals(x)
    assert out is x
    assert (x[flushed] == 0).all()
    np.testing.assert_array_equal(x[~flushed], before[~flushed])
    assert nn.count_subnormal(x) == 0
    x64 = before.astype(np.float64)
    kept = x64.copy()
    nn.flush_subnormals(x64)
    np.testing.assert_array_equal(x64, kept)
    assert nn.count_subnormal(x64) == 0


def test_float32_relu_and_tanh_flush_their_outputs_and_the_census_counts_products():
    """spec/training.md eq. (12): a pre-activation below 2^-100 gives 0 (ReLU: derivative 0 too);
    matmul counts each product and each subnormal operand entry inside a census, none outside."""
    z = np.array([[-1.0, 1e-39, 2.0, 0.0, 3e-30, 1e-32]], np.float32)
    h, deriv = nn.relu_forward(z)
    np.testing.assert_array_equal(h, np.array([[0.0, 0.0, 2.0, 0.0, 3e-30, 0.0]], np.float32))
    np.testing.assert_array_equal(deriv, [[False, False, True, False, True, False]])
    t, _ = nn.tanh_forward(z)
    assert nn.count_subnormal(t) == 0 and t[0, 5] == 0 and t[0, 2] == np.tanh(np.float32(2.0))
    np.testing.assert_array_equal(nn.relu_forward(z.astype(np.float64))[0] > 0,
                                  [[False, True, True, False, True, True]])   # float64: as before
    W = np.ones((6, 2), np.float32)
    with nn.subnormal_census() as census:
        nn.matmul(z, W)
        nn.linear_forward(h, W, np.zeros(2, np.float32))
    assert (census.products, census.entries, census.subnormal) == (2, 36, 1)
    nn.matmul(z, W)
    assert census.products == 2


@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=9),
       block=st.sampled_from([1, 12, 100, 1 << 18]), strided=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), data=st.data())
def test_blocked_activation_and_derivative_equal_the_whole_array_formulas(shape, block, strided,
                                                                          dtype, data):
    """The ReLU (with its bias) and the derivative-and-flush of the backward pass run over row
    blocks (nn.layers.ELEMENTWISE_BLOCK_BYTES, here as small as one row); every block count, a strided
    view included, gives the values of the whole-array formulas bit for bit, and the column sums
    returned with float32 are those of the result (spec/training.md eq. (12))."""
    elements = st.one_of(any32, tiny32)
    wide = shape[:-1] + (2 * shape[-1],)
    h = data.draw(hnp.arrays(np.float32, wide if strided else shape, elements=elements)).astype(dtype)
    d = data.draw(hnp.arrays(np.float32, wide if strided else shape, elements=elements)).astype(dtype)
    if strided:                                           # every other column: a view with no rows
        h, d = h[..., ::2], d[..., ::2]
    b = data.draw(hnp.arrays(np.float32, shape[-1:], elements=st.floats(-2, 2, width=32))).astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        z = h + b
        low = FLUSH if dtype == np.float32 else 0.0
        keep_ref = z >= low if dtype == np.float32 else z > 0
        relu_ref = z * keep_ref
        d_ref = d * ((np.abs(d) >= FLUSH) & keep_ref) if dtype == np.float32 else d * keep_ref
    saved = nn.layers.ELEMENTWISE_BLOCK_BYTES
    nn.layers.ELEMENTWISE_BLOCK_BYTES = block
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            keep = nn.relu_inplace(h, b)
            sums = nn.mlp_fast._times_derivative_flushed(d, keep)
    finally:
        nn.layers.ELEMENTWISE_BLOCK_BYTES = saved
    np.testing.assert_array_equal(keep, keep_ref)
    np.testing.assert_array_equal(h, relu_ref)
    np.testing.assert_array_equal(d, d_ref)
    if dtype == np.float64:
        assert sums is None                               # float64 sums in np.sum's own order
    else:
        exact = d.astype(np.float64).reshape(-1, shape[-1]).sum(axis=0)
        if np.isfinite(exact).all() and np.abs(d).max(initial=0) < 1e30:
            np.testing.assert_allclose(sums, exact, rtol=1e-5,
                                       atol=1e-6 * np.abs(d).sum(axis=tuple(range(d.ndim - 1))).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_single_output_backward_is_the_outer_product_bit_for_bit(dtype):
    """A layer with one output (the STOP nets' last) takes dx = dout W^T as a broadcast multiply:
    the same values as the matrix product, into dx_out when given."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(7, 5)).astype(dtype)
    W, b = rng.normal(size=(5, 1)).astype(dtype), np.zeros(1, dtype)
    _, cache = nn.linear_forward(x, W, b)
    dout = rng.normal(size=(7, 1)).astype(dtype)
    dx, dW, db = nn.linear_backward(dout, cache)
    np.testing.assert_array_equal(dx, np.matmul(dout, W.T))
    out = np.empty((7, 10), dtype)[:, 2:7]
    dx2, _, _ = nn.linear_backward(dout, cache, dx_out=out)
    assert dx2 is out
    np.testing.assert_array_equal(out, dx)
    np.testing.assert_array_equal(dW, x.T @ dout)


def test_mlp_backward_flushes_its_douts_but_never_writes_the_callers():
    """spec/training.md eq. (12): an output-layer dout with subnormal and tiny entries reaches no
    product (it is flushed in a copy; the caller's array keeps its values) and the parameter
    gradients equal those of the flushed dout."""
    rng = np.random.default_rng(0)
    layers = [(W.astype(np.float32), b.astype(np.float32)) for W, b in nn.mlp_init(rng, [4, 8, 3])]
    x = rng.normal(size=(5, 4)).astype(np.float32)
    _, cache = nn.mlp_forward(layers, x)
    dout = rng.normal(size=(5, 3)).astype(np.float32)
    dout[::2, 1] = 1e-39
    dout[1, 2] = 1e-33
    kept = dout.copy()
    with nn.subnormal_census() as census:
        dx, grads = nn.mlp_backward(dout, cache)
    assert census.subnormal == 0 and census.products == 4
    np.testing.assert_array_equal(dout, kept)
    clean = dout.copy()
    clean[::2, 1] = 0.0
    clean[1, 2] = 0.0
    dx2, grads2 = nn.mlp_backward(clean, cache)
    np.testing.assert_array_equal(dx, dx2)
    for (dW, db), (dW2, db2) in zip(grads, grads2):
        np.testing.assert_array_equal(dW, dW2)
        np.testing.assert_array_equal(db, db2)


# ----------------------------------------------------------------------------------------------
# 2-D convolution and the convolutional core (spec/policy.md §10)
# ----------------------------------------------------------------------------------------------

def ref_conv2d(x, W, b, s):
    """The convolution written plainly: one output pixel at a time, each a sum over its window."""
    N, H, W_, C = x.shape
    kh, kw, _, O = W.shape
    Ho, Wo = (H - kh) // s + 1, (W_ - kw) // s + 1
    rows = []
    for i in range(Ho):
        row = []
        for j in range(Wo):
            window = x[:, s * i:s * i + kh, s * j:s * j + kw, :]                 # (N, kh, kw, C)
            row.append(anp.tensordot(window, W, axes=([1, 2, 3], [0, 1, 2])) + b)
        rows.append(anp.stack(row, axis=1))
    return anp.stack(rows, axis=1)                                             # (N, Ho, Wo, O)


def ref_convnet(layers, strides, x):
    h = x
    for (W, b), s in zip(layers, strides):
        h = ref_act(ref_conv2d(h, W, b, s), "relu")
    return anp.reshape(h, (h.shape[0], -1))


@st.composite
def conv_case(draw):
    """x (N, H, W, C), W (kh, kw, C, O), b (O,), stride and an upstream gradient, the kernel
    fitting the image (every stride from 1 to past the kernel size)."""
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = draw(st.integers(1, 5))
    H, W_ = draw(st.integers(kh, kh + 7)), draw(st.integers(kw, kw + 7))
    N, C, O = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 11))
    rng = np.random.default_rng(draw(seeds))
    x, W, b = rng.normal(size=(N, H, W_, C)), rng.normal(size=(kh, kw, C, O)), rng.normal(size=O)
    R = rng.normal(size=(N, nn.conv_output_size(H, kh, stride), nn.conv_output_size(W_, kw, stride), O))
    return x, W, b, stride, R


@given(conv_case())
def test_conv2d_matches_autograd(case):
    """spec/policy.md eq. (11), (12), (13), (14): the forward against the convolution written
    plainly, and dx, dW, db against autograd of it, over shapes, kernels and strides (strides
    past the kernel size included: pixels no window reads get dx = 0)."""
    x, W, b, s, R = case
    note(f"x {x.shape}, W {W.shape}, stride {s}")
    out, cache = nn.conv2d_forward(x, W, b, s)
    assert out.shape == R.shape and out.dtype == np.float64
    close(out, ref_conv2d(x, W, b, s), "forward")
    dx, dW, db = nn.conv2d_backward(R, cache)
    for got, want, what in zip((dx, dW, db), ad_grads(lambda *a: ref_conv2d(*a, s), (x, W, b), R), "xWb"):
        assert got.shape == want.shape
        close(got, want, f"d{what}")


@pytest.mark.parametrize("shape, W_shape, stride, fold", [
    ((3, 112, 112, 3), (5, 5, 3, 10), 2, 3),     # the paper's first layer: Wo = 54
    ((2, 64, 64, 3), (5, 5, 3, 10), 2, 3),       # the reduced scale's: Wo = 30
    ((2, 9, 18, 2), (3, 4, 2, 7), 2, 2),         # Wo = 8: two pixels a row
    ((2, 9, 17, 2), (3, 4, 2, 7), 3, 1),         # Wo = 5: neither 3 nor 2 divides it
    ((2, 54, 54, 10), (5, 5, 10, 5), 2, 1),      # the paper's second layer: K = 250, not folded
])
def test_conv2d_folds_short_narrow_layers_and_agrees_unfolded(monkeypatch, shape, W_shape, stride, fold):
    """nn.conv._fold picks g output pixels per patch row for short, narrow layers (FOLD_MAX_K), and
    the folded forward pass and dW equal the unfolded ones (FOLD_MAX_K = 0) to rounding."""
    rng = np.random.default_rng(7)
    x, W, b = rng.normal(size=shape), rng.normal(size=W_shape), rng.normal(size=W_shape[3])
    kh, kw, C, O = W_shape
    Wo = nn.conv_output_size(shape[2], kw, stride)
    assert nn.conv._fold(kh * kw * C, O, Wo) == fold
    out, cache = nn.conv2d_forward(x, W, b, stride)
    R = rng.normal(size=out.shape)
    grads = nn.conv2d_backward(R, cache)
    monkeypatch.setattr(nn.conv, "FOLD_MAX_K", 0)
    assert nn.conv._fold(kh * kw * C, O, Wo) == 1
    out1, cache1 = nn.conv2d_forward(x, W, b, stride)
    close(out, out1, "forward")
    for got, want, what in zip(grads, nn.conv2d_backward(R, cache1), "xWb"):
        close(got, want, f"d{what}")


@given(conv_case())
def test_conv2d_in_float32_keeps_its_dtype_and_matches_float64(case):
    """spec/policy.md eq. (11), (12), (14): float32 in, float32 out, within float32 rounding of the
    float64 result."""
    x, W, b, s, R = case
    f32 = [a.astype(np.float32) for a in (x, W, b, R)]
    out, cache = nn.conv2d_forward(*f32[:3], s)
    grads = nn.conv2d_backward(f32[3], cache)
    out64, cache64 = nn.conv2d_forward(x, W, b, s)
    assert out.dtype == np.float32 and all(g.dtype == np.float32 for g in grads)
    for got, want in zip((out,) + grads, (out64,) + nn.conv2d_backward(R, cache64)):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


def test_conv2d_pieces_give_the_same_result(monkeypatch):
    """The patch matrix is built a few images at a time (nn.conv.CONV_CHUNK_BYTES): one image per
    piece gives the same outputs and gradients as the whole batch in one piece."""
    rng = np.random.default_rng(3)
    x, W, b = rng.normal(size=(5, 11, 9, 3)), rng.normal(size=(3, 3, 3, 10)), rng.normal(size=10)
    R = rng.normal(size=(5, 5, 4, 10))
    whole = nn.conv2d_forward(x, W, b, 2)
    whole_grads = nn.conv2d_backward(R, whole[1])
    monkeypatch.setattr(nn.conv, "CONV_CHUNK_BYTES", 1)
    assert len(nn.conv._chunks(5, 20, 27, 8)) == 5
    one = nn.conv2d_forward(x, W, b, 2)
    assert np.array_equal(one[0], whole[0])
    for a, c in zip(nn.conv2d_backward(R, one[1]), whole_grads):
        close(a, c, "gradient")


def test_conv2d_without_input_gradient_returns_the_same_weights_gradient():
    """input_grad=False (a first layer, whose input is data) skips dx and nothing else."""
    rng = np.random.default_rng(4)
    x, W, b = rng.normal(size=(2, 8, 8, 3)), rng.normal(size=(5, 5, 3, 10)), rng.normal(size=10)
    out, cache = nn.conv2d_forward(x, W, b, 2)
    R = rng.normal(size=out.shape)
    dx, dW, db = nn.conv2d_backward(R, cache)
    none, dW2, db2 = nn.conv2d_backward(R, cache, input_grad=False)
    assert none is None and dx.shape == x.shape
    assert np.array_equal(dW, dW2) and np.array_equal(db, db2)


@pytest.mark.parametrize("args, message", [
    ((np.zeros((1, 5, 5, 3)), np.zeros((3, 3, 2, 4)), np.zeros(4), 1), "same C"),
    ((np.zeros((1, 5, 5)), np.zeros((3, 3, 3, 4)), np.zeros(4), 1), r"\(N, H, W, C\)"),
    ((np.zeros((1, 5, 5, 3)), np.zeros((3, 3, 3, 4), np.float32), np.zeros(4), 1), "dtype"),
    ((np.zeros((1, 5, 5, 3)), np.zeros((3, 3, 3, 4)), np.zeros(3), 1), "b of shape"),
    ((np.zeros((1, 5, 5, 3)), np.zeros((3, 3, 3, 4)), np.zeros(4), 0), "stride"),
    ((np.zeros((1, 5, 5, 3)), np.zeros((3, 3, 3, 4)), np.zeros(4), True), "stride"),
    ((np.zeros((1, 2, 5, 3)), np.zeros((3, 3, 3, 4)), np.zeros(4), 1), "larger than the image"),
])
def test_conv2d_rejects_bad_input_naming_what_was_expected(args, message):
    with pytest.raises(ValueError, match=f"^conv2d: .*{message}"):
        nn.conv2d_forward(*args)


@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.float32, marks=pytest.mark.slow)])
@given(H=st.integers(9, 20), W_=st.integers(9, 20), C=st.integers(1, 3), seed=seeds)
def test_convnet_matches_autograd(dtype, H, W_, C, seed):
    """spec/policy.md eq. (15): the core (conv -> ReLU per layer, flattened in (i, j, o) order)
    against autograd of the layers written plainly; no input gradient unless asked for."""
    rng = np.random.default_rng(seed)
    channels, kernels, strides = [4, 3], [3, 2], [2, 1]
    layers = [(W.astype(dtype), (b + rng.normal(size=b.shape)).astype(dtype))
              for W, b in nn.conv_init(rng, C, channels, kernels)]
    x = rng.normal(size=(2, H, W_, C)).astype(dtype)
    out, cache = nn.convnet_forward(layers, strides, x)
    assert out.shape == (2, int(np.prod(nn.convnet_output_shape((H, W_, C), channels, kernels, strides))))
    R = rng.normal(size=out.shape).astype(dtype)
    dx, grads = nn.convnet_backward(R, cache)
    assert dx is None and out.dtype == dtype
    x64, flat = x.astype(np.float64), [a.astype(np.float64) for layer in layers for a in layer]
    f = lambda x, *flat: ref_convnet(list(zip(flat[::2], flat[1::2])), strides, x)  # noqa: E731
    want = ad_grads(f, (x64, *flat), R.astype(np.float64))
    tol = dict(rtol=1e-9, atol=1e-11) if dtype == np.float64 else dict(rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(out, f(x64, *flat), **tol)
    for (dW, db), dW_ad, db_ad in zip(grads, want[1::2], want[2::2]):
        np.testing.assert_allclose(dW, dW_ad, **tol)
        np.testing.assert_allclose(db, db_ad, **tol)
    dx, _ = nn.convnet_backward(R, cache, input_grad=True)
    np.testing.assert_allclose(dx, want[0], **tol)


def test_conv_init_is_he_uniform_and_deterministic():
    a = nn.conv_init(np.random.default_rng(5), 3, [10, 5], [5, 3])
    b = nn.conv_init(np.random.default_rng(5), 3, [10, 5], [5, 3])
    assert [W.shape for W, _ in a] == [(5, 5, 3, 10), (3, 3, 10, 5)]
    for (W, bias), (W2, _), fan_in in zip(a, b, (75, 90)):
        assert np.array_equal(W, W2) and not bias.any()
        assert np.abs(W).max() <= np.sqrt(6 / fan_in)
        assert abs(W.var() - 2 / fan_in) < 0.35 * 2 / fan_in


def test_convnet_in_float32_sends_no_subnormal_into_a_product():
    """spec/training.md eq. (12): the core's activations and its douts are flushed where they
    are made, so no product of a float32 core step (forward, dW, dx) has a subnormal operand,
    even when the input and the upstream gradient hold subnormal and tiny entries."""
    rng = np.random.default_rng(6)
    layers = [(W.astype(np.float32), b.astype(np.float32)) for W, b in nn.conv_init(rng, 3, [6, 4], [3, 3])]
    x = rng.normal(size=(3, 12, 12, 3)).astype(np.float32)
    x[0, :2] = np.float32(1e-39)                          # subnormal inputs: flushed by the caller
    x = nn.flush_subnormals(x)
    with nn.subnormal_census() as census:
        out, cache = nn.convnet_forward(layers, [2, 1], x)
        R = rng.normal(size=out.shape).astype(np.float32)
        R[:, ::3] = np.float32(1e-40)                     # subnormal upstream gradients
        R[:, 1::3] *= np.float32(1e-33)                   # tiny normals whose products would be subnormal
        nn.convnet_backward(R, cache, input_grad=True)
    assert census.products > 0 and census.subnormal == 0


# ----------------------------------------------------------------------------------------
# The plain reference nets (nn.mlp) against the fast path training runs (nn.mlp_fast)
# ----------------------------------------------------------------------------------------

PLAIN_FAST_TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-5)}
"""How far the fast path may lie from the plain one: float64 to rounding (other summation
orders); float32 to a few ulps of the widths here, and the flush of |x| < 2^-100 to zero."""


def _net(rng, sizes, dtype):
    return [(W.astype(dtype), (0.1 * rng.standard_normal(b.shape)).astype(dtype))
            for W, b in nn.mlp_init(rng, sizes)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_plain_and_fast_mlps_agree(dtype, activation, rate):
    """spec/policy.md eq. (1): nn.mlp (the equations, new arrays) and nn.mlp_fast (in place, flushed, blocked) give the
    same outputs and gradients: float64 to rounding, float32 within PLAIN_FAST_TOL; the same
    dropout units are dropped (the same draws in the same order)."""
    rng = np.random.default_rng(3)
    layers = _net(rng, [6, 9, 7, 3], dtype)
    x = rng.standard_normal((2, 5, 6)).astype(dtype)
    dout = rng.standard_normal((2, 5, 3)).astype(dtype)
    drop = (lambda: nn.Dropout(rate, np.random.default_rng(8))) if rate else (lambda: None)
    fast, fast_cache = nn.mlp_fast.mlp_forward(layers, x.copy(), activation, drop())
    plain, plain_cache = nn.mlp.mlp_forward(layers, x, activation, drop())
    tol = PLAIN_FAST_TOL[dtype]
    assert fast.dtype == plain.dtype == dtype
    np.testing.assert_allclose(fast, plain, **tol)
    dx_fast, g_fast = nn.mlp_fast.mlp_backward(dout, fast_cache)
    dx_plain, g_plain = nn.mlp.mlp_backward(dout, plain_cache, activation)
    np.testing.assert_allclose(dx_fast, dx_plain, **tol)
    for (dW, db), (pW, pb) in zip(g_fast, g_plain):
        np.testing.assert_allclose(dW, pW, **tol)
        np.testing.assert_allclose(db, pb, **tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("input_grad", [False, True])
def test_plain_and_fast_pairs_of_nets_agree(dtype, input_grad):
    """spec/policy.md eq. (1): the action and STOP nets: the fast path's one first-layer product for both against two
    plain MLPs, net a on the first n_a rows, the STOP net's dropout drawn alike."""
    rng = np.random.default_rng(5)
    layers_a, layers_b = _net(rng, [7, 10, 4], dtype), _net(rng, [7, 6, 5, 1], dtype)
    x = rng.standard_normal((11, 7)).astype(dtype)
    n_a = 8
    d_a, d_b = rng.standard_normal((n_a, 4)).astype(dtype), rng.standard_normal((11, 1)).astype(dtype)
    out = {}
    for name, impl in (("fast", nn.mlp_fast), ("plain", nn.mlp)):
        a, b, cache = impl.mlp_pair_forward(layers_a, layers_b, x.copy(), n_a, "relu",
                                            dropout_b=nn.Dropout(0.25, np.random.default_rng(2)))
        out[name] = (a, b) + tuple(impl.mlp_pair_backward(d_a, d_b, cache, input_grad=input_grad))
    tol = PLAIN_FAST_TOL[dtype]
    for i, (f, p) in enumerate(zip(out["fast"], out["plain"])):
        if isinstance(f, np.ndarray):
            np.testing.assert_allclose(f, p, **tol, err_msg=str(i))
        else:                                            # a net's [(dW, db), ...]
            for (dW, db), (pW, pb) in zip(f, p):
                np.testing.assert_allclose(dW, pW, **tol, err_msg=str(i))
                np.testing.assert_allclose(db, pb, **tol, err_msg=str(i))


def test_the_sub_policies_on_the_plain_nets_give_the_fast_paths_loss_and_gradients(monkeypatch):
    """spec/policy.md eq. (1): policy.NETS selects the implementation: TACO's loss and every parameter's gradient on a
    Nav-World batch agree to rounding in float64 whichever runs."""
    import taco_sim
    from taco_ref import objectives, policy, train
    demos = taco_sim.get("navworld").collect(6, 2, 0)
    cfg = train.TrainConfig(act_hidden=[16, 8], stop_hidden=[12], dtype="float64")
    job = train._Job(cfg, demos, np.random.default_rng(0))
    results = {}
    for impl in (nn.mlp_fast, nn.mlp):
        monkeypatch.setattr(policy, "NETS", impl)
        results[impl.__name__] = objectives.taco(job.params, job.policy_cfg, demos, cfg.terminal_stop)
    (loss_f, grads_f), (loss_p, grads_p) = results["taco_ref.nn.mlp_fast"], results["taco_ref.nn.mlp"]
    np.testing.assert_allclose(loss_f, loss_p, rtol=1e-12)
    assert grads_f.keys() == grads_p.keys()
    for name in grads_f:
        np.testing.assert_allclose(grads_f[name], grads_p[name], rtol=1e-9, atol=1e-12, err_msg=name)
