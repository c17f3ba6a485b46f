"""Tests for taco_ref/algorithms/compile.py (spec/compile.md): CompILE with the sketch as latents.

(a) exact references: one-hot boundaries give the hard segmentation's BC path weights
    (objectives.path_indicators); the hand-derived gradient of the soft segmentation and the KL
    term against autograd on a plainly written copy of the objective; the boundary net's
    gradient against central differences;
(b) properties (hypothesis): masks form a partition of every valid step, weights in [0, 1];
    the decoder's positions are monotone paths;
(c) a short training run on Nav-World: the model saves, loads and aligns, deterministically.
"""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, note, strategies as st
from scipy.special import gammaln

from taco_ref import evaluate, model as model_mod, objectives, train
from taco_ref.algorithms import compile as cmp
from taco_sim import navworld


def one_hot_boundaries(starts, traj_len, L, T):
    """y (L-1, B, T) one-hot at each demonstration's segment starts (a list of lists)."""
    B = len(starts)
    y = np.zeros((L - 1, B, T))
    for b, s in enumerate(starts):
        for i, t in enumerate(s):
            y[i, b, t] = 1.0
    return y, np.cumsum(y, axis=2)


def test_one_hot_boundaries_give_the_bc_path():
    """Checks spec/compile.md eq. (3), (4), (5): for one-hot boundaries the masks are the hard
    segmentation's act indicators and S, G its STOP and GO indicators (objectives.bc's path)."""
    T, L = 9, 3
    traj_len, sketch_len = np.array([9, 7, 5]), np.array([3, 2, 1])
    starts = [[3, 6], [2], []]
    y, C = one_hot_boundaries(starts, traj_len, L, T)
    m, S, G = cmp.segment_weights(C, y, traj_len, L)
    labels = np.full((3, T), -1)
    for b, s in enumerate(starts):
        edges = [0] + s + [traj_len[b]]
        for i in range(len(edges) - 1):
            labels[b, edges[i]:edges[i + 1]] = i
    act, stop, go, _ = objectives.path_indicators(labels, traj_len, sketch_len, L)
    np.testing.assert_array_equal(m, act)
    np.testing.assert_array_equal(S, stop)
    np.testing.assert_array_equal(G, go)


def reference_loss(u, la, ls, lg, noise, sketch, traj_len, sketch_len, temp, rate, beta):
    """The objective of spec/compile.md written plainly, demonstration by demonstration, for autograd."""
    total = 0.0
    for b in range(len(traj_len)):
        Tb, Lb = int(traj_len[b]), int(sketch_len[b])
        Cs = []
        for i in range(Lb - 1):
            z = u[b, 1:Tb, sketch[b, i]]
            for C in Cs:
                z = z + anp.log(C[1:Tb] + cmp.EPS)
            w = (z + noise[i, b, 1:Tb]) / temp
            y = anp.exp(w - anp.max(w))
            y = y / anp.sum(y)
            y = anp.concatenate([anp.zeros(1), y])
            Cs.append(anp.cumsum(y))
            if i == 0:                                    # KL of boundary 0 against the prior
                q = anp.exp(z - anp.max(z))
                q = q / anp.sum(q)
                t = np.arange(1, Tb)
                logp = t * np.log(rate) - rate - gammaln(t + 1.0)
                logp = logp - np.log(np.sum(np.exp(logp - logp.max()))) - logp.max()
                total = total + beta * (Lb - 1) * anp.sum(q * (anp.log(q) - logp))
            ys = Cs[-1] - anp.concatenate([anp.zeros(1), Cs[-1][:-1]])
            if i == 0:
                ys_all = [ys]
            else:
                ys_all.append(ys)
        masks = []
        for i in range(Lb):
            mi = anp.ones(Tb)
            for C in Cs[:i]:
                mi = mi * C[:Tb]
            if i < Lb - 1:
                mi = mi * (1.0 - Cs[i][:Tb])
            masks.append(mi)
        for i in range(Lb):
            total = total - anp.sum(masks[i] * la[b, :Tb, i])
            total = total - anp.sum(masks[i][:-1] * masks[i][1:] * lg[b, 1:Tb, i])
            if i < Lb - 1:
                total = total - anp.sum(masks[i][:-1] * ys_all[i][1:Tb] * ls[b, 1:Tb, i])
    return total


@st.composite
def problems(draw):
    B, K = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    L = draw(st.integers(1, 4))
    sketch_len = np.array([draw(st.integers(1, L)) for _ in range(B)])
    traj_len = np.array([draw(st.integers(max(int(n), 2), 8)) for n in sketch_len])
    T = int(traj_len.max())
    seed = draw(st.integers(0, 2 ** 31))
    return B, K, L, T, sketch_len, traj_len, seed


@given(problems(), st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.0, 0.1, 1.0]))
def test_gradient_of_the_soft_segmentation_matches_autograd(problem, temp, beta):
    """Checks spec/compile.md eq. (1), (2), (6), (7), (8), (9), (10): the loss, d loss / du of
    segments_backward + kl_forward, and d loss / d scores = -(m, S, G), against autograd on
    reference_loss."""
    B, K, L, T, sketch_len, traj_len, seed = problem
    note(f"B={B} K={K} L={L} T={T} T_b={traj_len} L_b={sketch_len}")
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(B, T, K))
    la, ls, lg = (-rng.random((B, T, L)) * 3 for _ in range(3))
    noise = rng.gumbel(size=(max(L - 1, 0), B, T))
    sketch = rng.integers(0, K, size=(B, L))                       # repeats allowed
    rate = 2.5
    (y, C, m, S, G), cache = cmp.segments_forward(u, sketch, traj_len, sketch_len, noise, temp)
    d_z0 = None
    ours_loss = -float((m * la).sum() + (S * ls).sum() + (G * lg).sum())
    if y.shape[0]:
        kl, d_z0 = cmp.kl_forward(cache.z[0], traj_len, sketch_len, rate)
        ours_loss += beta * kl
        d_z0 = beta * d_z0
    du = cmp.segments_backward(-la, -ls, -lg, cache, d_z0)
    args = (noise if L > 1 else np.zeros((0, B, T)), sketch, traj_len, sketch_len, temp, rate, beta)
    want = reference_loss(u, la, ls, lg, *args)
    np.testing.assert_allclose(ours_loss, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(du, autograd.grad(reference_loss, 0)(u, la, ls, lg, *args), rtol=1e-7, atol=1e-9)
    for i, d in ((1, -m), (2, -S), (3, -G)):
        np.testing.assert_allclose(d, autograd.grad(reference_loss, i)(u, la, ls, lg, *args), rtol=1e-9, atol=1e-12)


@given(problems())
def test_masks_partition_every_valid_step(problem):
    """Checks spec/compile.md eq. (3): sum_i m_i(t) = 1 on every valid step (the masks are a
    soft partition), 0 in padding; S and G lie in [0, 1] and S + G <= 1 (to rounding)."""
    B, K, L, T, sketch_len, traj_len, seed = problem
    rng = np.random.default_rng(seed)
    (y, C, m, S, G), _ = cmp.segments_forward(rng.normal(size=(B, T, K)) * 3, rng.integers(0, K, (B, L)),
                                              traj_len, sketch_len, None, 1.0)
    valid = np.arange(T)[None, :] < traj_len[:, None]
    np.testing.assert_allclose(m.sum(axis=2), valid.astype(float), atol=1e-12)
    assert (S >= -1e-12).all() and (G >= -1e-12).all() and (S + G <= 1 + 1e-12).all()   # rounding of 1 - C


def test_decode_recovers_planted_boundaries(monkeypatch):
    """Checks spec/compile.md eq. (11): with boundary scores that peak where each sub-task ends,
    decode returns the segmentation whose segment i + 1 starts at that peak, a monotone path."""
    T, K = 10, 3
    traj_len, sketch_len = np.array([10, 8]), np.array([3, 2])
    sketch = np.array([[2, 0, 1], [1, 1, 0]])
    u = np.zeros((2, T, K))
    u[0, 4, 2], u[0, 7, 0], u[1, 5, 1] = 5.0, 5.0, 5.0
    monkeypatch.setattr(cmp, "scores_forward", lambda *a: (u, None))
    batch = type("Batch", (), dict(sketch=sketch, traj_len=traj_len, sketch_len=sketch_len))()
    path = cmp.decode(None, batch, False, 2)
    assert path[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert path[1].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, -1, -1]


def small_config(**kw):
    return train.TrainConfig.from_dict(dict(dict(algo="compile", act_hidden=[8], stop_hidden=[8],
                                                 compile_hidden=[6], epochs=2, patience=10, dtype="float64",
                                                 stop_dropout=0.2), **kw))


def test_boundary_net_gradient_matches_central_differences():
    """Checks spec/compile.md eq. (8), (10) end to end: the gradient of `loss` with respect to
    the boundary net's weights against central differences."""
    demos = navworld.collect(4, 3, seed=2)
    job = train._Job(small_config(), demos, np.random.default_rng(0))
    noise = np.random.default_rng(1).gumbel(size=(2,) + demos.states.shape[:2])

    def f(params):
        return cmp.loss(params, job.policy_cfg, demos, False, 3.0, 0.5, 1.0, noise)

    value, grads = f(job.params)
    rng = np.random.default_rng(3)
    for name in ("cmp.W0", "cmp.b0", "cmp.W1", "cmp.b1"):
        for _ in range(3):
            idx = tuple(rng.integers(0, n) for n in job.params[name].shape)
            h = 1e-5
            plus, minus = dict(job.params), dict(job.params)
            plus[name], minus[name] = job.params[name].copy(), job.params[name].copy()
            plus[name][idx] += h
            minus[name][idx] -= h
            fd = (f(plus)[0] - f(minus)[0]) / (2 * h)
            np.testing.assert_allclose(grads[name][idx], fd, rtol=1e-5, atol=1e-7, err_msg=f"{name}{idx}")


def test_compile_trains_saves_loads_and_aligns(tmp_path):
    """Checks spec/compile.md eq. (11) in a short run: deterministic (same seed, same
    parameters), the model round-trips through its directory (the boundary net's shapes checked
    on load), and aligns under every decoder plus its own boundaries, each a share in [0, 1]."""
    demos, held = navworld.collect(30, 2, seed=5), navworld.collect(10, 2, seed=6)
    cfg = small_config()
    a = train.train(demos, cfg, out_dir=str(tmp_path / "run"), progress=False)
    b = train.train(demos, cfg, progress=False)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    loaded = model_mod.load(str(tmp_path / "run" / "model"))
    assert loaded.algo == "compile" and any(k.startswith("cmp.") for k in loaded.params)
    acc = evaluate.alignment_accuracy(loaded, held)
    assert set(acc) == set(evaluate.DECODERS) | {"boundaries"}
    assert all(0.0 <= v <= 1.0 for v in acc.values())


def test_a_model_whose_boundary_net_disagrees_with_its_config_is_refused(tmp_path):
    """A model file whose config names other boundary-net sizes than its weights is refused
    with a line naming the field."""
    demos = navworld.collect(12, 2, seed=5)
    m = train.train(demos, small_config(epochs=1), progress=False)
    m.config = dict(m.config, compile_hidden=[7])
    model_mod.save(m, str(tmp_path / "m"))
    with pytest.raises(model_mod.ModelError, match="compile_hidden"):
        model_mod.load(str(tmp_path / "m"))
