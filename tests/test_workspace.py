"""nn.workspace: a training step's convolutional core reuses the previous step's memory, and
computes exactly what fresh arrays compute."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from taco_ref import nn
from taco_ref.nn import workspace

STRIDES = [2, 1]
F = int(np.prod(nn.convnet_output_shape((9, 10, 3), [4, 2], [3, 2], STRIDES)))   # the core's output width


def _core(rng, dtype):
    layers = [(W.astype(dtype), (0.1 * rng.standard_normal(b.shape)).astype(dtype))
              for W, b in nn.conv_init(rng, 3, [4, 2], [3, 2])]
    return layers


def _pass(layers, x, R, scope=None):
    """(features, grads) of one forward and backward pass, copied out of any workspace."""
    f, cache = nn.convnet_forward(layers, STRIDES, x, scope=scope)
    f = f.copy()
    _, grads = nn.convnet_backward(R[:len(x)], cache)
    return f, grads


@given(sizes=st.lists(st.integers(1, 7), min_size=1, max_size=5), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 2 ** 16))
def test_steps_in_a_workspace_compute_exactly_what_fresh_arrays_do(sizes, dtype, seed):
    """Batches of varying sizes one step after another (buffers grown, then read shorter): the
    features and every gradient bit for bit those of fresh arrays."""
    rng = np.random.default_rng(seed)
    layers = _core(rng, np.dtype(dtype))
    ws = nn.Workspace()
    R = rng.standard_normal((max(sizes), F)).astype(dtype)                  # (n, F) upstream gradient
    for n in sizes:
        x = rng.standard_normal((n, 9, 10, 3)).astype(dtype)
        with ws.step():
            got = _pass(layers, x, R, workspace.active_scope())
        want = _pass(layers, x, R)
        assert np.array_equal(got[0], want[0])
        for (dW, db), (eW, eb) in zip(got[1], want[1]):
            assert np.array_equal(dW, eW) and np.array_equal(db, eb)


def test_a_step_reuses_the_previous_steps_memory():
    """The second step of the same size allocates nothing new: its activations sit where the
    first step's did."""
    rng = np.random.default_rng(0)
    layers = _core(rng, np.float32)
    x = rng.standard_normal((5, 9, 10, 3)).astype(np.float32)
    ws = nn.Workspace()
    where = []
    for _ in range(2):
        with ws.step():
            f, cache = nn.convnet_forward(layers, STRIDES, x, scope=workspace.active_scope())
            nn.convnet_backward(np.ones_like(f), cache)
            where.append((f.__array_interface__["data"][0], ws.nbytes()))
    assert where[0] == where[1] and where[0][1] > 0


def test_two_forward_passes_of_one_step_keep_their_own_arrays():
    """A step may run the core twice (TACO's policy core and CTC-BC's classifier core): each
    forward pass gets its own scope, so the first one's backward still reads its own arrays."""
    rng = np.random.default_rng(1)
    layers = _core(rng, np.float64)
    x1, x2 = (rng.standard_normal((4, 9, 10, 3)) for _ in range(2))
    R = rng.standard_normal((4, F))
    want = _pass(layers, x1, R)
    ws = nn.Workspace()
    with ws.step():
        f1, c1 = nn.convnet_forward(layers, STRIDES, x1, scope=workspace.active_scope())
        nn.convnet_forward(layers, STRIDES, x2, scope=workspace.active_scope())
        assert np.array_equal(f1, want[0])
        for (dW, db), (eW, eb) in zip(nn.convnet_backward(R, c1)[1], want[1]):
            assert np.array_equal(dW, eW) and np.array_equal(db, eb)


def test_a_backward_pass_after_its_step_was_reused_raises():
    """A cache kept past its step, whose arrays the next step overwrote, is refused by name."""
    rng = np.random.default_rng(2)
    layers = _core(rng, np.float64)
    x = rng.standard_normal((3, 9, 10, 3))
    ws = nn.Workspace()
    with ws.step():
        f, old = nn.convnet_forward(layers, STRIDES, x, scope=workspace.active_scope())
    with ws.step():
        nn.convnet_forward(layers, STRIDES, x, scope=workspace.active_scope())
        with pytest.raises(RuntimeError, match="workspace step 1.*step 2 has reused"):
            nn.convnet_backward(np.ones_like(f), old)


def test_outside_a_step_every_array_is_fresh():
    """No active workspace: active_scope() is None and nothing is kept (evaluation, held-out
    losses and every direct call work as before)."""
    assert workspace.active_scope() is None
    ws = nn.Workspace()
    with ws.step():
        assert workspace.active_scope() is not None
    assert workspace.active_scope() is None and ws.nbytes() == 0


def test_gradients_are_never_workspace_memory():
    """dW and db go to the optimiser, which may keep them: they are fresh arrays even in a step."""
    rng = np.random.default_rng(3)
    layers = _core(rng, np.float32)
    x = rng.standard_normal((3, 9, 10, 3)).astype(np.float32)
    ws = nn.Workspace()
    with ws.step():
        f, cache = nn.convnet_forward(layers, STRIDES, x, scope=workspace.active_scope())
        grads = nn.convnet_backward(np.ones_like(f), cache)[1]
    buffers = list(ws._buffers.values())
    for dW, db in grads:
        for g in (dW, db):
            assert not any(np.shares_memory(g, b) for b in buffers)
