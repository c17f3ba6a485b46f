"""spec/peers.md's measured facts about OMPN's TACO code, checked against a checkout of it.

Skipped unless TACO_OMPN names a checkout of Ordered-Memory-RL/ompn_craft and torch is
installed: nothing of OMPN is vendored (tests/compare_ompn.py reads it at run time).
"""
import os

import numpy as np
import pytest

OMPN = os.environ.get("TACO_OMPN")
pytestmark = pytest.mark.skipif(not OMPN, reason="set TACO_OMPN to a checkout of ompn_craft")
torch = pytest.importorskip("torch") if OMPN else None

from taco_ref import align  # noqa: E402


@pytest.fixture(scope="module")
def ompn():
    import compare_ompn
    return compare_ompn, compare_ompn.load_ompn(OMPN)


def test_agrees_to_float64_rounding_with_a_float64_default(ompn):
    compare, peer = ompn
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        act, stop, go, tl, sl = compare.random_case(np.random.default_rng(0), 16, 40, 5)
        ours = align.taco_forward_backward(act, stop, go, tl, sl)
        theirs = compare.ompn_loglik_and_grads(peer, act, stop, go, tl, sl)
    finally:
        torch.set_default_dtype(old)
    np.testing.assert_allclose(theirs[0], ours.loglik, rtol=0, atol=1e-12)
    mask = compare.valid(tl, sl, 40, 5)
    for o, t in zip((ours.d_act, ours.d_stop, ours.d_go), theirs[1:]):
        np.testing.assert_allclose(np.where(mask, t, 0), np.where(mask, o, 0), rtol=0, atol=1e-12)


def test_the_decoders_1e32_padding_adds_a_path(ompn):
    compare, peer = ompn
    act = np.array([[[0.0, 0.0], [0.0, 0.0], [0.0, -100.0]]])
    go, stop = np.full((1, 3, 2), np.log(0.5)), np.full((1, 3, 2), np.log(0.5))
    go[0, 1, 0], stop[0, 1, 0] = -200.0, 0.0
    tl, sl = np.array([3]), np.array([2])
    assert align.DECODERS["forward_argmax"](act, stop, go, tl, sl)[0].tolist() == [0, 1, 1]
    assert compare.ompn_decode(peer, act, stop, go, tl, sl)[0].tolist() == [0, 1, 0]


def test_an_impossible_row_moves_ompn_but_not_taco_ref(ompn):
    compare, peer = ompn
    act, stop, go, _, _ = compare.random_case(np.random.default_rng(1), 1, 4, 3)
    tl, sl = np.array([2]), np.array([3])
    ours = align.taco_forward_backward(act, stop, go, tl, sl)
    theirs = compare.ompn_loglik_and_grads(peer, act, stop, go, tl, sl)
    assert ours.loglik[0] == -np.inf and theirs[0][0] == pytest.approx(-1e8, rel=1e-6)
    assert all((g == 0).all() for g in (ours.d_act, ours.d_stop, ours.d_go))
    assert max(np.abs(g).max() for g in theirs[1:]) > 0.5
