"""Tests for taco_ref/annotate.py: labels, posteriors and confidence (spec/interop.md §3).

(a) exact references: every alignment path of small rows enumerated plainly, their
    probabilities normalised, and the STOP posterior and the confidence formed as
    expectations over them;
(b) hypothesis properties over ragged batches: the STOP posteriors of a row add up to its
    L_b - 1 switches, the confidence is the posterior of the written labels, Viterbi's labels
    are always alignment paths;
(c) the decoders by name, the segment helpers, a smoke run on a model and its determinism.
"""
import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from taco_ref import align, annotate, data
from taco_ref.model import Model
from taco_ref.policy import PolicyConfig, init_params


def paths(T, L):
    """Every alignment path (the set Z of spec/align.md §1), 0-based: z_0 = 0, z_{T-1} = L-1, steps 0/1."""
    for steps in itertools.product((0, 1), repeat=T - 1):
        z = np.concatenate([[0], np.cumsum(steps, dtype=np.int64)]).astype(np.int64)
        if z[-1] == L - 1:
            yield z


def path_logp(z, act, stop, go):
    """log p(z) of a path (spec/align.md §1), written out term by term."""
    lp = act[0, 0]
    for t in range(1, len(z)):
        lp += (stop[t, z[t - 1]] if z[t] == z[t - 1] + 1 else go[t, z[t]]) + act[t, z[t]]
    return lp


def enumerate_posteriors(act, stop, go):
    """(gamma (T, L), sigma (T,), {tuple(path): probability}) by enumeration."""
    T, L = act.shape
    all_paths = list(paths(T, L))
    logp = np.array([path_logp(z, act, stop, go) for z in all_paths])
    p = np.exp(logp - logp.max())
    p /= p.sum()
    gamma = np.zeros((T, L))
    sigma = np.zeros(T)
    for z, pz in zip(all_paths, p):
        gamma[np.arange(T), z] += pz
        sigma[1:] += pz * (np.diff(z) == 1)
    return gamma, sigma, dict(zip(map(tuple, all_paths), p))


def random_lattice(rng, B, T, L):
    act = rng.normal(size=(B, T, L))
    stop = np.log(rng.uniform(0.05, 0.95, size=(B, T, L)))
    go = np.log(rng.uniform(0.05, 0.95, size=(B, T, L)))
    return act, stop, go


@pytest.mark.parametrize("T,L", [(1, 1), (3, 1), (3, 3), (5, 2), (6, 3), (7, 4)])
def test_posteriors_and_confidence_match_path_enumeration(T, L):
    """spec/interop.md eq. (2), (3): sigma_t is the probability that the path moves on at t
    and the confidence the expected agreement of a posterior path with the written labels,
    both against every path enumerated (for each decoder's labels)."""
    rng = np.random.default_rng(T * 10 + L)
    act, stop, go = random_lattice(rng, 1, T, L)
    gamma, sigma, by_path = enumerate_posteriors(act[0], stop[0], go[0])
    for decoder in annotate.DECODERS:
        ann = annotate.annotate_lattice(act, stop, go, np.array([T]), np.array([L]), decoder)
        np.testing.assert_allclose(ann.posterior[0], gamma, atol=1e-12)
        np.testing.assert_allclose(ann.stop[0], sigma, atol=1e-12)
        labels = ann.positions[0]
        expected = sum(p * np.mean(np.array(z) == labels) for z, p in by_path.items())
        assert ann.confidence[0] == pytest.approx(expected, abs=1e-12)
        assert 0 < ann.confidence[0] <= 1 + 1e-12


@st.composite
def ragged_lattices(draw):
    B = draw(st.integers(1, 4))
    T = draw(st.integers(1, 12))
    L = draw(st.integers(1, T))
    traj_len = np.array([draw(st.integers(1, T)) for _ in range(B)], dtype=np.int64)
    traj_len[0] = T
    sketch_len = np.array([draw(st.integers(1, min(L, t))) for t in traj_len], dtype=np.int64)
    sketch_len[0] = L if traj_len[0] >= L else sketch_len[0]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([0.1, 1.0, 10.0]))
    act, stop, go = random_lattice(rng, B, T, L)
    return act * scale, stop, go, traj_len, sketch_len


@given(ragged_lattices())
def test_prop_stop_posteriors_add_up_to_the_switches(lattice):
    """spec/interop.md eq. (2): every path switches L_b - 1 times, so sigma of a row sums to
    L_b - 1; sigma_1 = 0, sigma_t in [0, 1], and 0 in padding."""
    act, stop, go, traj_len, sketch_len = lattice
    ann = annotate.annotate_lattice(act, stop, go, traj_len, sketch_len)
    note(f"traj_len {traj_len}, sketch_len {sketch_len}")
    np.testing.assert_allclose(ann.stop.sum(axis=1), sketch_len - 1, atol=1e-9)
    assert (ann.stop[:, 0] == 0).all()
    assert (ann.stop >= -1e-12).all() and (ann.stop <= 1 + 1e-12).all()
    pad = np.arange(act.shape[1])[None, :] >= traj_len[:, None]
    assert (ann.stop[pad] == 0).all() and (ann.posterior[pad] == 0).all()


@given(ragged_lattices(), st.sampled_from(annotate.DECODERS))
def test_prop_confidence_is_the_posterior_of_the_labels(lattice, decoder):
    """spec/interop.md eq. (3): the confidence is the mean over a row's steps of the posterior
    of its decoded position, in (0, 1]; Viterbi's labels are always alignment paths, and
    is_alignment says so for exactly the rows whose labels start at 0, step by 0 or 1 and end
    at L_b - 1."""
    act, stop, go, traj_len, sketch_len = lattice
    ann = annotate.annotate_lattice(act, stop, go, traj_len, sketch_len, decoder)
    for b in range(len(traj_len)):
        T = traj_len[b]
        z = ann.positions[b, :T]
        assert ann.confidence[b] == pytest.approx(ann.posterior[b, np.arange(T), z].mean(), abs=1e-12)
        assert 0 < ann.confidence[b] <= 1 + 1e-12
        plain = z[0] == 0 and z[-1] == sketch_len[b] - 1 and np.isin(np.diff(z), (0, 1)).all()
        assert ann.monotone[b] == plain
    if decoder == "viterbi":
        assert ann.monotone.all()


def test_labels_are_the_named_decoders():
    """spec/interop.md eq. (1): the labels are exactly what align's decoder of that name
    returns, and an unknown decoder name is refused."""
    rng = np.random.default_rng(0)
    act, stop, go = random_lattice(rng, 3, 9, 3)
    lengths = (np.array([9, 7, 3]), np.array([3, 2, 3]))
    for name, decode in align.DECODERS.items():
        ann = annotate.annotate_lattice(act, stop, go, *lengths, name)
        np.testing.assert_array_equal(ann.positions, decode(act, stop, go, *lengths))
    with pytest.raises(ValueError, match="decoder must be one of"):
        annotate.annotate_lattice(act, stop, go, *lengths, "beam")


def test_a_row_without_an_alignment_is_named():
    act, stop, go = random_lattice(np.random.default_rng(1), 2, 4, 2)
    act[1, :, 1] = -np.inf                                   # position 2 can never be active
    with pytest.raises(ValueError, match="demonstration 1: the model gives its sketch no alignment"):
        annotate.annotate_lattice(act, stop, go, np.array([4, 4]), np.array([2, 2]))


def test_segments_and_labels_from_segments_are_inverse():
    row = np.array([0, 0, 1, 1, 1, 2, -1, -1])
    assert annotate.segments(row) == [(0, 2, 0), (2, 5, 1), (5, 6, 2)]
    np.testing.assert_array_equal(annotate.labels_from_segments([0, 2, 5], 6), row[:6])
    assert annotate.segments(np.array([0, 1, 0])) == [(0, 1, 0), (1, 2, 1), (2, 3, 0)]
    assert annotate.segments(np.array([-1])) == []
    assert not annotate.is_alignment(np.array([[0, 1, 0]]), np.array([3]), np.array([2]))[0]
    assert annotate.is_alignment(np.array([[0, 1, 1, -1]]), np.array([3]), np.array([2]))[0]


def _model_and_demos(seed=0):
    """An untrained two-sub-task model and three demonstrations (no training: the smoke test
    checks shapes and determinism, not accuracy)."""
    rng = np.random.default_rng(seed)
    cfg = PolicyConfig(state_dim=3, action_dim=2, n_subtasks=2, discrete=False, act_hidden=[8],
                       stop_hidden=[8])
    model = Model(init_params(cfg, rng), cfg, ("a", "b"), "taco")
    traj_len = np.array([6, 4, 5])
    states, actions = rng.normal(size=(3, 6, 3)), rng.normal(size=(3, 6, 2))
    sketch, sketch_len = np.array([[0, 1], [1, -1], [1, 0]]), np.array([2, 1, 2])
    labels = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, -1, -1], [0, 0, 1, 1, 1, -1]])
    demos = data.Demos(states, actions, traj_len, sketch, sketch_len, labels, rng.normal(size=(3, 3)),
                       ("a", "b"), {}).validate()
    return model, demos


def test_annotate_runs_on_a_model_and_is_deterministic():
    model, demos = _model_and_demos()
    first = annotate.annotate(model, demos)
    again = annotate.annotate(model, demos)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert first.positions.shape == (3, 6) and first.posterior.shape == (3, 6, 2)
    assert (first.positions[1, :4] == 0).all() and (first.positions[1, 4:] == -1).all()
    np.testing.assert_allclose(first.posterior[0].sum(axis=1), 1.0)
    assert first.monotone.all()


def test_annotate_refuses_a_ctc_model_and_a_mismatched_one():
    model, demos = _model_and_demos()
    with pytest.raises(ValueError, match="aligns with its CTC classifier"):
        annotate.annotate(replace(model, algo="ctcbc-mlp", ctc_kind="mlp"), demos)
    with pytest.raises(ValueError, match="vocabulary"):
        annotate.annotate(replace(model, vocab=("b", "a")), demos)
