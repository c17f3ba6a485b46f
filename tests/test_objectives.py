"""Tests for taco_ref/objectives.py.

In three layers (an exact reference, properties, smoke and determinism):
(a) exact references written plainly: every objective's value against brute-force path
    enumeration (spec/vectors/brute_force.py) on the policy's own scores, per row; every
    objective's gradient against central differences (float64, eps 1e-6, rtol 1e-5 with an
    absolute floor of 1e-7) on random entries of every parameter array, with and without the
    terminal STOP; ctc_soft_targets recovering the GO probabilities of a known Markov chain;
(b) hypothesis properties of path_indicators (monotone and non-monotone labellings against a
    plain loop) and of ctc_soft_targets (always in [0, 1], 1 at t = 0 and in the padding);
(c) small deterministic examples: a non-monotone labelling scored by hand, clipping.

Symbols: B batch, T time, L sketch length, K sub-tasks, D state dim, A action dim.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from taco_ref import data, nn, objectives, policy
from taco_ref.policy import PolicyConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spec" / "vectors"))
import brute_force as bf  # noqa: E402  (spec/vectors is not a package)

seeds = st.integers(0, 2 ** 32 - 1)
EPS, RTOL, ATOL = 1e-6, 1e-5, 1e-7


# ----------------------------------------------------------------------------------------------
# A tiny problem
# ----------------------------------------------------------------------------------------------

def monotone_labels(rng, T_b, L_b):
    """A random monotone segmentation of T_b steps into L_b non-empty segments, (T_b,)."""
    moves = np.zeros(T_b, np.int64)
    moves[np.sort(rng.choice(np.arange(1, T_b), size=L_b - 1, replace=False))] = 1
    return np.cumsum(moves)


def tiny_batch(seed, B=3, T=5, L=3, K=2, D=2, A=2, discrete=False, pad=np.nan):
    """A validated Demos with ragged lengths and sub-tasks repeated across rows. Padded states
    and continuous actions hold `pad` (NaN by default: the sub-policies must never read them),
    padded discrete actions -1 (0 when pad is finite, as spec/data.md asks of writers)."""
    rng = np.random.default_rng(seed)
    traj_len = np.array([T] + list(rng.integers(L, T + 1, size=B - 1)), np.int64)
    sketch_len = np.array([L] + list(rng.integers(1, L + 1, size=B - 1)), np.int64)
    sketch = np.full((B, L), -1, np.int64)
    labels = np.full((B, T), -1, np.int64)
    states = np.full((B, T, D), pad)
    actions = (np.full((B, T), -1 if np.isnan(pad) else 0, np.int64) if discrete
               else np.full((B, T, A), pad))
    for b in range(B):
        T_b, L_b = traj_len[b], sketch_len[b]
        sketch[b, :L_b] = rng.integers(0, K, size=L_b)
        labels[b, :T_b] = monotone_labels(rng, T_b, L_b)
        states[b, :T_b] = rng.normal(size=(T_b, D))
        actions[b, :T_b] = rng.integers(0, A, size=T_b) if discrete else rng.normal(size=(T_b, A))
    meta = {"n_actions": A} if discrete else {}
    return data.Demos(states, actions, traj_len, sketch, sketch_len, labels,
                      rng.normal(size=(B, D)), tuple(f"task{k}" for k in range(K)), meta).validate()


def tiny_params(batch, seed, discrete=False, activation="tanh", hidden=(3,)):
    """Sub-policy parameters (random biases, normalisation from the batch) and their config."""
    rng = np.random.default_rng(seed)
    A = batch.meta["n_actions"] if discrete else batch.actions.shape[2]
    cfg = PolicyConfig(state_dim=batch.states.shape[2], n_subtasks=len(batch.vocab), action_dim=A,
                       discrete=discrete, act_hidden=list(hidden), stop_hidden=list(hidden),
                       activation=activation)
    params = policy.init_params(cfg, rng)
    for name in policy.trainable(params):
        if ".b" in name:
            params[name] = rng.normal(scale=0.5, size=params[name].shape)
    params["norm.mean"] = rng.normal(scale=0.3, size=cfg.state_dim)
    params["norm.std"] = rng.uniform(0.7, 1.5, size=cfg.state_dim)
    return cfg, params


def full_scores(params, cfg, batch):
    """Every valid (b, t, l) score and the terminal STOP scores, from one evaluate call."""
    L = batch.sketch.shape[1]
    final_mask = np.arange(L)[None, :] < batch.sketch_len[:, None]
    out, _ = policy.evaluate(params, cfg, batch, objectives.valid_mask(batch), final_mask)
    return out


def row_scores(out, batch, b):
    """(log_act, log_stop, log_go) (T_b, L_b) and log_final_stop (L_b,) of row b."""
    T_b, L_b = batch.traj_len[b], batch.sketch_len[b]
    return ([out[name][b, :T_b, :L_b] for name in ("log_act", "log_stop", "log_go")],
            out["log_final_stop"][b, :L_b])


def path_logprobs(params, cfg, batch, terminal_stop):
    """Per row, the log-probability of every alignment path (brute-force enumeration) on the
    policy's own scores, with the terminal STOP factor when on."""
    out = full_scores(params, cfg, batch)
    rows = []
    for b in range(batch.n):
        (act, stop, go), final = row_scores(out, batch, b)
        rows.append([bf.path_logprob(z, act, stop, go, final if terminal_stop else None)
                     for z in bf.paths(*act.shape)])
    return rows


def logsumexp(values):
    m = max(values)
    return m + np.log(sum(np.exp(v - m) for v in values))


def check_central_differences(loss_fn, params, grads, names, seed, entries=2):
    """grads[name][idx] against (loss(p + eps) - loss(p - eps)) / 2 eps at random entries."""
    rng = np.random.default_rng(seed)
    assert names, "no parameters to check"
    for name in names:
        for _ in range(entries):
            idx = tuple(int(rng.integers(0, s)) for s in params[name].shape)
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += EPS
            minus[name][idx] -= EPS
            fd = (loss_fn(plus) - loss_fn(minus)) / (2 * EPS)
            np.testing.assert_allclose(grads[name][idx], fd, rtol=RTOL, atol=ATOL,
                                       err_msg=f"d loss / d {name}{list(idx)}")


# ----------------------------------------------------------------------------------------------
# TACO
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("terminal_stop", [False, True])
@pytest.mark.parametrize("discrete", [False, True])
def test_taco_loss_is_minus_brute_force_loglik(terminal_stop, discrete):
    """Checks spec/objectives.md eq. (1)."""
    batch = tiny_batch(0, discrete=discrete)
    cfg, params = tiny_params(batch, 1, discrete)
    loss, _ = objectives.taco(params, cfg, batch, terminal_stop=terminal_stop)
    expected = -sum(logsumexp(row) for row in path_logprobs(params, cfg, batch, terminal_stop))
    np.testing.assert_allclose(loss, expected, rtol=1e-10)


@pytest.mark.parametrize("terminal_stop", [False, True])
@pytest.mark.parametrize("discrete, activation", [(False, "tanh"), (True, "tanh"), (False, "relu")])
def test_taco_gradient_matches_central_differences(terminal_stop, discrete, activation):
    """Checks spec/objectives.md eq. (1)."""
    batch = tiny_batch(2, discrete=discrete)
    cfg, params = tiny_params(batch, 3, discrete, activation, hidden=(4, 3))
    loss, grads = objectives.taco(params, cfg, batch, terminal_stop=terminal_stop)
    assert set(grads) == set(policy.trainable(params))
    check_central_differences(lambda p: objectives.taco(p, cfg, batch, terminal_stop)[0],
                              params, grads, sorted(grads), seed=4)


@pytest.mark.parametrize("terminal_stop", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 2.5, 40.0])
def test_tempered_taco_is_the_brute_force_free_energy(terminal_stop, temperature):
    """spec/objectives.md eq. (7): loss = -sum_b temp * log sum_z exp(log p(z) / temp) over
    every path z; temperature 1 is spec/objectives.md eq. (1)."""
    batch = tiny_batch(7)
    cfg, params = tiny_params(batch, 8)
    loss, _ = objectives.taco(params, cfg, batch, terminal_stop=terminal_stop, temperature=temperature)
    expected = -sum(temperature * logsumexp([v / temperature for v in row])
                    for row in path_logprobs(params, cfg, batch, terminal_stop))
    np.testing.assert_allclose(loss, expected, rtol=1e-10)


@pytest.mark.parametrize("terminal_stop", [False, True])
def test_tempered_taco_gradient_matches_central_differences(terminal_stop):
    """The gradient of spec/objectives.md eq. (7) is minus the tempered lattice's posteriors,
    carried through the nets (objectives.taco)."""
    batch = tiny_batch(9)
    cfg, params = tiny_params(batch, 10, hidden=(4, 3))
    loss, grads = objectives.taco(params, cfg, batch, terminal_stop, temperature=3.0)
    check_central_differences(lambda p: objectives.taco(p, cfg, batch, terminal_stop, temperature=3.0)[0],
                              params, grads, sorted(grads), seed=11)


def test_tempered_taco_rejects_a_temperature_below_one():
    """Checks spec/objectives.md eq. (7)."""
    batch = tiny_batch(0)
    cfg, params = tiny_params(batch, 1)
    with pytest.raises(ValueError, match="temperature"):
        objectives.taco(params, cfg, batch, temperature=0.5)


@pytest.mark.parametrize("terminal_stop", [False, True])
@pytest.mark.parametrize("discrete", [False, True])
def test_viterbi_taco_is_minus_the_best_brute_force_path(terminal_stop, discrete):
    """spec/objectives.md eq. (9): loss = -sum_b max_z log p(z) over every path z."""
    batch = tiny_batch(12, B=4, T=6, discrete=discrete)
    cfg, params = tiny_params(batch, 13, discrete)
    loss, _ = objectives.taco_viterbi(params, cfg, batch, terminal_stop=terminal_stop)
    expected = -sum(max(row) for row in path_logprobs(params, cfg, batch, terminal_stop))
    np.testing.assert_allclose(loss, expected, rtol=1e-10)
    assert loss >= objectives.taco(params, cfg, batch, terminal_stop=terminal_stop)[0]


@pytest.mark.parametrize("terminal_stop", [False, True])
def test_viterbi_taco_gradient_is_bc_on_the_decoded_path(terminal_stop):
    """spec/objectives.md eq. (9): the gradient is objectives.bc's on the best
    path, and matches central differences (the path does not change under a small step)."""
    from taco_ref import align
    batch = tiny_batch(14)
    cfg, params = tiny_params(batch, 15, hidden=(4, 3))
    loss, grads = objectives.taco_viterbi(params, cfg, batch, terminal_stop)
    out = full_scores(params, cfg, batch)
    path = align.align_viterbi(out["log_act"], out["log_stop"], out["log_go"], batch.traj_len, batch.sketch_len)
    bc_loss, bc_grads = objectives.bc(params, cfg, batch, path, terminal_stop)
    np.testing.assert_allclose(loss, bc_loss, rtol=1e-12)
    for name in bc_grads:
        np.testing.assert_allclose(grads[name], bc_grads[name], rtol=1e-10, atol=1e-12, err_msg=name)
    check_central_differences(lambda p: objectives.taco_viterbi(p, cfg, batch, terminal_stop)[0],
                              params, grads, sorted(grads), seed=16)


@given(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 60)), min_size=1, max_size=6))
def test_even_split_labels_follow_their_definition(rows):
    """spec/objectives.md eq. (8): y_t = floor(t L_b / T_b) for t < T_b, -1 after; segments
    are non-empty, differ in length by at most one, and the labels form an alignment path."""
    sketch_len = np.array([L for L, _ in rows], np.int64)
    traj_len = sketch_len + np.array([extra for _, extra in rows], np.int64)   # T_b >= L_b
    T = int(traj_len.max()) + 2
    labels = objectives.even_split_labels(traj_len, sketch_len, T)
    note(f"labels = {labels.tolist()}")
    assert labels.shape == (len(rows), T)
    for b, (T_b, L_b) in enumerate(zip(traj_len, sketch_len)):
        row = labels[b]
        assert (row[T_b:] == -1).all()
        assert row[:T_b].tolist() == [t * L_b // T_b for t in range(T_b)]
        assert row[0] == 0 and row[T_b - 1] == L_b - 1
        assert set(np.diff(row[:T_b]).tolist()) <= {0, 1}
        sizes = np.bincount(row[:T_b], minlength=L_b)
        assert sizes.min() >= 1 and sizes.max() - sizes.min() <= 1


# ----------------------------------------------------------------------------------------------
# Behavioural cloning on a labelling: GT-BC / CTC-BC
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("terminal_stop", [False, True])
@pytest.mark.parametrize("discrete", [False, True])
def test_bc_with_monotone_labels_is_minus_the_path_logprob_per_row(terminal_stop, discrete):
    """Checks spec/objectives.md eq. (2)."""
    batch = tiny_batch(5, B=4, T=6, discrete=discrete)
    cfg, params = tiny_params(batch, 6, discrete)
    out = full_scores(params, cfg, batch)
    total = 0.0
    for b in range(batch.n):
        row = batch.subset([b])
        loss, _ = objectives.bc(params, cfg, row, row.labels, terminal_stop=terminal_stop)
        (act, stop, go), final = row_scores(out, batch, b)
        z = tuple(batch.labels[b, :batch.traj_len[b]])
        expected = -bf.path_logprob(z, act, stop, go, final if terminal_stop else None)
        np.testing.assert_allclose(loss, expected, rtol=1e-10, err_msg=f"row {b}")
        total += loss
    loss, _ = objectives.bc(params, cfg, batch, batch.labels, terminal_stop=terminal_stop)
    np.testing.assert_allclose(loss, total, rtol=1e-10)


@pytest.mark.parametrize("terminal_stop", [False, True])
@pytest.mark.parametrize("discrete", [False, True])
def test_bc_gradient_matches_central_differences(terminal_stop, discrete):
    """Checks spec/objectives.md eq. (2)."""
    batch = tiny_batch(7, discrete=discrete)
    cfg, params = tiny_params(batch, 8, discrete, hidden=(4, 3))
    labels = batch.labels.copy()
    labels[0, :batch.traj_len[0]] = [0, 1, 0, 2, 1]          # non-monotone: scored by the same rule
    _, grads = objectives.bc(params, cfg, batch, labels, terminal_stop)
    check_central_differences(lambda p: objectives.bc(p, cfg, batch, labels, terminal_stop)[0],
                              params, grads, sorted(grads), seed=9)


def plain_indicators(labels, traj_len, L, terminal_stop):
    """path_indicators' rule, one step at a time."""
    B, T = labels.shape
    act, stop, go, final = (np.zeros((B, T, L)), np.zeros((B, T, L)), np.zeros((B, T, L)),
                            np.zeros((B, L)))
    for b in range(B):
        for t in range(traj_len[b]):
            act[b, t, labels[b, t]] = 1
            if t >= 1 and labels[b, t] != labels[b, t - 1]:
                stop[b, t, labels[b, t - 1]] = 1           # the previous sub-policy stopped
            elif t >= 1:
                go[b, t, labels[b, t]] = 1                 # the current one went on
        if terminal_stop:
            final[b, labels[b, traj_len[b] - 1]] = 1
    return act, stop, go, final


@st.composite
def labellings(draw, monotone):
    B, T, L = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(seeds))
    traj_len = draw(hnp.arrays(np.int64, (B,), elements=st.integers(1, T)))
    if monotone:
        sketch_len = np.array([rng.integers(1, min(L, T_b) + 1) for T_b in traj_len], np.int64)
        labels = np.full((B, T), -1, np.int64)
        for b in range(B):
            labels[b, :traj_len[b]] = monotone_labels(rng, traj_len[b], sketch_len[b])
    else:
        sketch_len = np.full(B, L, np.int64)
        labels = draw(hnp.arrays(np.int64, (B, T), elements=st.integers(0, L - 1)))
    terminal_stop = draw(st.booleans())
    note(f"labels={labels.tolist()} traj_len={traj_len.tolist()} sketch_len={sketch_len.tolist()}")
    return labels, traj_len, sketch_len, L, terminal_stop


@given(case=labellings(monotone=False))
def test_path_indicators_follow_the_rule_for_any_labelling(case):
    """Checks spec/objectives.md eq. (2)."""
    labels, traj_len, sketch_len, L, terminal_stop = case
    got = objectives.path_indicators(labels, traj_len, sketch_len, L, terminal_stop)
    expected = plain_indicators(labels, traj_len, L, terminal_stop)
    for name, g, e in zip(("act", "stop", "go", "final"), got, expected):
        np.testing.assert_array_equal(g, e, err_msg=name)


@given(case=labellings(monotone=True))
def test_path_indicators_of_a_monotone_labelling_form_one_lattice_path(case):
    labels, traj_len, sketch_len, L, terminal_stop = case
    act, stop, go, final = objectives.path_indicators(labels, traj_len, sketch_len, L, terminal_stop)
    T = labels.shape[1]
    in_t = np.arange(T)[None, :] < traj_len[:, None]
    np.testing.assert_array_equal(act.sum(axis=2), in_t)                    # one position per step
    trans = (stop + go).sum(axis=2)
    np.testing.assert_array_equal(trans[:, 0], 0)                          # no transition into t = 0
    np.testing.assert_array_equal(trans[:, 1:], in_t[:, 1:])                # one per later step
    np.testing.assert_array_equal(stop.sum(axis=(1, 2)), sketch_len - 1)    # all but the last stop
    assert final.sum() == (len(traj_len) if terminal_stop else 0)
    if terminal_stop:
        np.testing.assert_array_equal(final[np.arange(len(traj_len)), sketch_len - 1], 1)


def test_path_indicators_non_monotone_example():
    """labels 0 1 0 2 2: act where labelled; STOP of 0 at t=1, of 1 at t=2, of 0 at t=3; GO of 2
    at t=4; terminal STOP of 2. Padding (t = 5) is ignored.
    Checks spec/objectives.md eq. (2)."""
    labels = np.array([[0, 1, 0, 2, 2, -1]])
    act, stop, go, final = objectives.path_indicators(labels, np.array([5]), np.array([3]), 3,
                                                      terminal_stop=True)
    expect_act = np.zeros((6, 3))
    expect_act[[0, 1, 2, 3, 4], [0, 1, 0, 2, 2]] = 1
    expect_stop = np.zeros((6, 3))
    expect_stop[[1, 2, 3], [0, 1, 0]] = 1
    expect_go = np.zeros((6, 3))
    expect_go[4, 2] = 1
    np.testing.assert_array_equal(act[0], expect_act)
    np.testing.assert_array_equal(stop[0], expect_stop)
    np.testing.assert_array_equal(go[0], expect_go)
    np.testing.assert_array_equal(final[0], [0, 0, 1])


def test_bc_non_monotone_loss_is_minus_the_indicated_scores():
    """Checks spec/objectives.md eq. (2)."""
    batch = tiny_batch(10, B=2, T=5, L=3)
    cfg, params = tiny_params(batch, 11)
    labels = batch.labels.copy()
    labels[0, :5] = [0, 2, 1, 1, 0]
    out = full_scores(params, cfg, batch)
    for terminal_stop in (False, True):
        act, stop, go, final = plain_indicators(labels, batch.traj_len, 3, terminal_stop)
        expected = -((act * out["log_act"]).sum() + (stop * out["log_stop"]).sum()
                     + (go * out["log_go"]).sum() + (final * out["log_final_stop"]).sum())
        loss, _ = objectives.bc(params, cfg, batch, labels, terminal_stop)
        np.testing.assert_allclose(loss, expected, rtol=1e-10)


# ----------------------------------------------------------------------------------------------
# CTC-BC stage 1: the classifier and the blank-free CTC
# ----------------------------------------------------------------------------------------------

def ctc_setup(kind, discrete, seed):
    # zero padding, as spec/data.md requires: the MLP classifier reads every step
    batch = tiny_batch(seed, B=3, T=6, L=3, K=3, discrete=discrete, pad=0.0)
    cfg, params = tiny_params(batch, seed + 1, discrete)
    rng = np.random.default_rng(seed + 2)
    hidden = [4] if kind == "gru" else [5, 4]
    params.update(objectives.init_ctc_params(rng, kind, cfg.state_dim + cfg.action_dim, hidden,
                                             cfg.n_subtasks))
    for name in params:                                   # biases away from 0
        if name.startswith("ctc.") and (".b" in name or name.endswith("b_x") or name.endswith("b_h")):
            params[name] = rng.normal(scale=0.3, size=params[name].shape)
    return batch, cfg, params


@pytest.mark.parametrize("kind", ["mlp", "gru"])
@pytest.mark.parametrize("discrete", [False, True])
def test_ctc_loss_is_minus_brute_force_loglik(kind, discrete):
    """Checks spec/objectives.md eq. (3)."""
    batch, cfg, params = ctc_setup(kind, discrete, 20)
    loss, _ = objectives.ctc(params, kind, batch, discrete, cfg.action_dim)
    feats = objectives.ctc_features(params, batch, discrete, cfg.action_dim)
    assert feats.shape == batch.states.shape[:2] + (cfg.state_dim + cfg.action_dim,)
    log_p, _ = objectives.ctc_log_p(params, kind, feats, batch.traj_len)
    expected = 0.0
    for b in range(batch.n):
        T_b, L_b = batch.traj_len[b], batch.sketch_len[b]
        expected -= bf.ctc_reference(log_p[b, :T_b], batch.sketch[b, :L_b])["loglik"]
    np.testing.assert_allclose(loss, expected, rtol=1e-10)


@pytest.mark.parametrize("kind", ["mlp", "gru"])
@pytest.mark.parametrize("discrete", [False, True])
def test_ctc_gradient_matches_central_differences(kind, discrete):
    """Checks spec/objectives.md eq. (3)."""
    batch, cfg, params = ctc_setup(kind, discrete, 30)
    _, grads = objectives.ctc(params, kind, batch, discrete, cfg.action_dim)
    ctc_names = sorted(k for k in params if k.startswith("ctc."))
    assert sorted(grads) == ctc_names
    check_central_differences(lambda p: objectives.ctc(p, kind, batch, discrete, cfg.action_dim)[0],
                              params, grads, ctc_names, seed=31)


def image_ctc_setup(kind, seed, core_dtype="float64"):
    """A batch of 7 x 6 x 3 uint8 images (ragged, zero padding) with the classifier of kind on
    its own two-layer core ("ctc.core.*", in core_dtype) and per-channel image statistics."""
    vectors = tiny_batch(seed, B=3, T=6, L=3, K=3, D=1, pad=0.0)
    rng = np.random.default_rng(seed + 1)
    B, T = vectors.states.shape[:2]
    images = rng.integers(0, 256, size=(B, T, 7, 6, 3), dtype=np.uint8)
    images[np.arange(T)[None, :] >= vectors.traj_len[:, None]] = 0
    batch = data.Demos(images, vectors.actions, vectors.traj_len, vectors.sketch, vectors.sketch_len,
                       vectors.labels, rng.integers(0, 256, size=(B, 7, 6, 3), dtype=np.uint8),
                       vectors.vocab, {}).validate()
    cfg = PolicyConfig(state_dim=7 * 6 * 3, n_subtasks=3, action_dim=2, act_hidden=[3], stop_hidden=[3],
                       image_shape=[7, 6, 3], conv_channels=[3, 2], conv_kernels=[3, 2], conv_strides=[1, 2])
    params = {"norm.mean": rng.uniform(60, 200, size=3), "norm.std": rng.uniform(20, 90, size=3)}
    hidden = [4] if kind == "gru" else [5, 4]
    params.update(objectives.init_ctc_params(rng, kind, cfg.feature_dim + cfg.action_dim, hidden, 3))
    for i, (W, b) in enumerate(nn.conv_init(rng, 3, cfg.conv_channels, cfg.conv_kernels)):
        params[f"ctc.core.W{i}"] = W.astype(core_dtype)
        params[f"ctc.core.b{i}"] = rng.normal(scale=0.3, size=b.shape).astype(core_dtype)
    return batch, cfg, params


@pytest.mark.parametrize("kind", ["mlp", "gru"])
def test_ctc_gradient_through_the_classifiers_image_core_matches_central_differences(kind):
    """Checks spec/objectives.md eq. (3) with image states: the feature gradient goes on
    through the classifier's own core (spec/policy.md §10), and the core's arrays get theirs."""
    batch, cfg, params = image_ctc_setup(kind, 50)
    loss, grads = objectives.ctc(params, kind, batch, False, cfg.action_dim, image_cfg=cfg)
    ctc_names = sorted(k for k in params if k.startswith("ctc."))
    assert sorted(grads) == ctc_names and any(k.startswith("ctc.core.") for k in ctc_names)
    assert all(grads[k].dtype == np.float64 for k in ctc_names)
    assert all(np.abs(grads[f"ctc.core.W{i}"]).max() > 0 for i in range(2))
    check_central_differences(lambda p: objectives.ctc(p, kind, batch, False, cfg.action_dim, image_cfg=cfg)[0],
                              params, grads, ctc_names, seed=51)


@pytest.mark.parametrize("kind", ["mlp", "gru"])
def test_a_float32_classifier_core_gives_float32_core_gradients_close_to_float64(kind):
    """ctc_core_dtype float32 (spec/training.md §4): the core computes in float32, the classifier
    after it in float64; loss and every gradient agree with the float64 core's on the same
    (rounded) weights to float32 accuracy, the core's gradients come back float32, and no float32
    subnormal enters a matrix product (spec/training.md eq. (12))."""
    batch, cfg, params32 = image_ctc_setup(kind, 60, core_dtype="float32")
    params64 = {k: v.astype(np.float64) for k, v in params32.items()}
    with nn.subnormal_census() as census:
        loss32, grads32 = objectives.ctc(params32, kind, batch, False, cfg.action_dim, image_cfg=cfg)
    loss64, grads64 = objectives.ctc(params64, kind, batch, False, cfg.action_dim, image_cfg=cfg)
    assert census.subnormal == 0 and census.entries > 0
    np.testing.assert_allclose(loss32, loss64, rtol=1e-5)
    for name, g in grads64.items():
        assert grads32[name].dtype == (np.float32 if name.startswith("ctc.core.") else np.float64), name
        np.testing.assert_allclose(grads32[name], g, rtol=2e-3, atol=2e-4 * np.abs(g).max(), err_msg=name)
    labels32, _ = objectives.ctc_alignment(params32, kind, batch, False, cfg.action_dim, image_cfg=cfg)
    labels64, _ = objectives.ctc_alignment(params64, kind, batch, False, cfg.action_dim, image_cfg=cfg)
    assert np.array_equal(labels32, labels64)


def test_ctc_alignment_returns_monotone_labels_and_normalised_weights():
    batch, cfg, params = ctc_setup("mlp", False, 40)
    for decoder in ("forward_argmax", "posterior_argmax", "viterbi"):
        labels, weights = objectives.ctc_alignment(params, "mlp", batch, False, cfg.action_dim, decoder)
        assert labels.shape == batch.labels.shape and weights.shape == objectives.valid_mask(batch).shape
        for b in range(batch.n):
            z = labels[b, :batch.traj_len[b]]
            assert z[0] == 0 and 0 <= z.min() and z.max() < batch.sketch_len[b]
            if decoder == "viterbi":                      # a lattice path: 0 ... L_b - 1, steps 0 / 1
                assert z[-1] == batch.sketch_len[b] - 1 and set(np.diff(z)) <= {0, 1}
        np.testing.assert_allclose(weights.sum(axis=2)[objectives.valid_mask(batch).any(axis=2)], 1.0)


# ----------------------------------------------------------------------------------------------
# CTC-BC stage 2, alpha-weighted: stop targets and soft BC
# ----------------------------------------------------------------------------------------------

def markov_chain(q, sketch_len):
    """p_t(l) of a chain that starts at position 0 and moves l -> l + 1 with probability
    1 - q[t, l] (q: GO probability at t); q = 1 at each row's last position keeps p normalised.

    p_{t+1}(0) = p_t(0) q_{t+1}(0),  p_{t+1}(l) = p_t(l) q_{t+1}(l) + p_t(l-1) (1 - q_{t+1}(l-1)).
    """
    B, T, L = q.shape
    p = np.zeros((B, T, L))
    p[:, 0, 0] = 1.0
    for t in range(1, T):
        p[:, t] = p[:, t - 1] * q[:, t]
        p[:, t, 1:] += p[:, t - 1, :-1] * (1.0 - q[:, t, :-1])
    p[padding(sketch_len, p.shape)] = 0.0
    return p


def padding(sketch_len, shape):
    """(B, T, L) bool: l >= sketch_len[b]."""
    return np.broadcast_to(np.arange(shape[2])[None, None, :] >= sketch_len[:, None, None], shape)


def test_ctc_soft_targets_recover_the_go_probabilities_of_a_markov_chain():
    """Checks spec/objectives.md eq. (5)."""
    rng = np.random.default_rng(50)
    B, T, L = 3, 12, 4
    sketch_len = np.array([4, 2, 3])
    q = rng.uniform(0.2, 0.95, size=(B, T, L))
    q[padding(sketch_len - 1, q.shape)] = 1.0             # each row's last position, and padding
    p = markov_chain(q, sketch_len)
    np.testing.assert_allclose(p.sum(axis=2), 1.0)            # a distribution at every step
    targets = objectives.ctc_soft_targets(p, sketch_len)
    assert targets.shape == (B, T, L)
    np.testing.assert_array_equal(targets[:, 0], 1.0)         # no transition into t = 0
    # recovered wherever the chain has mass at (t - 1, l) to move
    seen = np.zeros((B, T, L), bool)
    seen[:, 1:] = p[:, :-1] > 1e-6
    assert seen.sum() > 40
    np.testing.assert_allclose(targets[seen], q[seen], rtol=0, atol=1e-8)
    np.testing.assert_array_equal(targets[padding(sketch_len, targets.shape)], 1.0)


def test_ctc_soft_targets_clip_to_the_unit_interval():
    # l = 0: p_1(0) / p_0(0) = 0.9 / 0.5 > 1 -> 1;  l = 1: (p_1(1) - p_0(0)(1 - q(0))) / p_0(1) < 0 -> 0
    """Checks spec/objectives.md eq. (5)."""
    w = np.array([[[0.5, 0.5], [0.9, 0.1]],
                  [[0.8, 0.2], [0.2, 0.1]]])
    targets = objectives.ctc_soft_targets(w, np.array([2, 2]))
    np.testing.assert_allclose(targets[0, 1], [1.0, 0.2])     # 0.1 - 0.5 * 0 = 0.1, / 0.5
    np.testing.assert_allclose(targets[1, 1], [0.25, 0.0])    # (0.1 - 0.8 * 0.75) / 0.2 < 0


@given(w=hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4)),
                    elements=st.floats(0.0, 1.0)),
       data_=st.data())
def test_ctc_soft_targets_always_lie_in_the_unit_interval(w, data_):
    """Checks spec/objectives.md eq. (5)."""
    B, T, L = w.shape
    sketch_len = data_.draw(hnp.arrays(np.int64, (B,), elements=st.integers(1, L)))
    targets = objectives.ctc_soft_targets(w, sketch_len)
    assert targets.shape == w.shape
    assert np.isfinite(targets).all() and (targets >= 0).all() and (targets <= 1).all()
    np.testing.assert_array_equal(targets[:, 0], 1.0)
    np.testing.assert_array_equal(targets[padding(sketch_len, w.shape)], 1.0)


def soft_inputs(batch, seed):
    rng = np.random.default_rng(seed)
    valid = objectives.valid_mask(batch)
    weights = np.where(valid, rng.uniform(0.0, 1.0, size=valid.shape), 0.0)
    targets = rng.uniform(0.0, 1.0, size=valid.shape)
    return weights, targets


@pytest.mark.parametrize("discrete", [False, True])
def test_soft_bc_loss_is_the_weighted_sum_of_scores(discrete):
    """Checks spec/objectives.md eq. (4)."""
    batch = tiny_batch(60, discrete=discrete)
    cfg, params = tiny_params(batch, 61, discrete)
    weights, targets = soft_inputs(batch, 62)
    out = full_scores(params, cfg, batch)
    w_prev = np.zeros_like(weights)
    w_prev[:, 1:] = weights[:, :-1]
    expected = -((weights * out["log_act"]).sum()
                 + (w_prev * (targets * out["log_go"] + (1 - targets) * out["log_stop"])).sum())
    loss, _ = objectives.soft_bc(params, cfg, batch, weights, targets)
    np.testing.assert_allclose(loss, expected, rtol=1e-10)


@pytest.mark.parametrize("discrete", [False, True])
def test_soft_bc_gradient_matches_central_differences(discrete):
    """Checks spec/objectives.md eq. (4)."""
    batch = tiny_batch(70, discrete=discrete)
    cfg, params = tiny_params(batch, 71, discrete, hidden=(4, 3))
    weights, targets = soft_inputs(batch, 72)
    _, grads = objectives.soft_bc(params, cfg, batch, weights, targets)
    assert set(grads) == set(policy.trainable(params))
    check_central_differences(lambda p: objectives.soft_bc(p, cfg, batch, weights, targets)[0],
                              params, grads, sorted(grads), seed=73)


def test_soft_bc_never_scores_padding():
    """The STOP term of spec/objectives.md eq. (4) ends at T_b: what the padding of a short row
    holds (0, NaN, 5) changes nothing, and the loss stays finite (spec/objectives.md §5)."""
    losses = []
    for pad in (0.0, np.nan, 5.0):
        batch = tiny_batch(80, B=3, T=6, pad=pad)
        assert batch.traj_len.min() < 6                   # some row is padded
        cfg, params = tiny_params(batch, 81)
        weights, targets = soft_inputs(batch, 82)
        losses.append(objectives.soft_bc(params, cfg, batch, weights, targets)[0])
    assert np.isfinite(losses).all()
    assert losses[0] == losses[1] == losses[2]


@pytest.mark.parametrize("kind", ["mlp", "gru"])
@pytest.mark.parametrize("discrete", [False, True])
def test_ctc_ignores_padding(kind, discrete):
    """Features are zeroed in padding: NaN states/actions (or -1 action ids) there change
    neither the CTC loss nor its gradient (spec/data.md section 2)."""
    results = []
    for pad in (0.0, np.nan):
        batch, cfg, params = ctc_setup(kind, discrete, 90)
        dirty = tiny_batch(90, B=3, T=6, L=3, K=3, discrete=discrete, pad=pad)
        assert dirty.traj_len.min() < 6                   # some row is padded
        results.append(objectives.ctc(params, kind, dirty, discrete, cfg.action_dim))
    (loss0, grads0), (loss1, grads1) = results
    assert np.isfinite(loss1) and loss0 == loss1
    for name in grads0:
        np.testing.assert_array_equal(grads1[name], grads0[name], err_msg=name)
