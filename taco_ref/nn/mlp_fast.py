"""The nets' fast path: what training and execution run (policy.NETS), the maths of nn.mlp.

The same MLPs and pair of nets as nn.mlp (hidden layers linear -> activation -> dropout, the
output layer linear; the action and STOP nets reading the same states), computed for speed:
each layer's output is one array activated and dropped out in place; the two nets' first layers
are one matrix product [x W_a1 | x W_b1] and one activation over both; float32 subnormals are
flushed where each array is made (the ReLU's mask does it in the same multiply, spec/training.md
eq. (12)); the derivatives run in cache-sized row blocks that also take the bias gradient's
column sums. tests/test_nn.py checks every function here against nn.mlp: float64 to rounding,
float32 to the stated tolerance. bench/bench_train.py measures what each of these buys."""
from typing import NamedTuple

import numpy as np

from taco_ref.nn.layers import (
    FLUSH_BELOW, _floats, _flushed, _row_blocks, flush_subnormals, linear_backward, linear_forward,
    matmul, relu_backward, relu_forward, relu_inplace, tanh_backward, tanh_forward, tanh_inplace)
from taco_ref.nn.dropout import _dropout_mask
from taco_ref.nn.mlp import mlp_init  # noqa: F401  (the same initialisation)


# ----------------------------------------------------------------------------------------
# Multi-layer perceptron: hidden layers linear -> activation -> dropout, output layer linear
# ----------------------------------------------------------------------------------------

_ACTIVATIONS = {"relu": (relu_forward, relu_backward), "tanh": (tanh_forward, tanh_backward)}
_ACTIVATIONS_INPLACE = {"relu": relu_inplace, "tanh": tanh_inplace}


class HiddenCache(NamedTuple):
    """What a hidden layer's backward needs after linear -> activation -> dropout."""
    deriv: object          # the activation's derivative (ReLU: a bool mask), or None if applied by the caller
    mask: object           # the dropout mask (scaled), or None without dropout


class LayerCache(NamedTuple):
    """One layer of mlp_forward: its product's cache and, for a hidden layer, its HiddenCache."""
    linear: tuple          # (x, W): the layer's input and weights (layers.linear_forward)
    hidden: object         # HiddenCache, or None for the output layer


class PairNetCache(NamedTuple):
    """One net of mlp_pair_forward past the shared first product."""
    hidden: object         # the first layer's HiddenCache, or None when it is the output layer
    rest: object           # mlp_forward's [LayerCache] of the layers after the first, or None


class PairCache(NamedTuple):
    """mlp_pair_forward's cache: the shared input and first product, and each net's rest."""
    x: np.ndarray          # (N, I) the inputs both nets read
    n_a: int               # rows of x net a reads (the first n_a)
    H_a: int               # net a's first-layer width
    H_b: int               # net b's first-layer width
    nets: tuple            # (PairNetCache of a, PairNetCache of b)
    deriv: object          # the joint activation's derivative over (N, H_a + H_b), or None
    first_W: np.ndarray    # (I, H_a + H_b) the concatenated first-layer weights


def _check_activation(activation):
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
    return _ACTIVATIONS[activation]


def _hidden_inplace(h, activation, dropout, activated=False, bias=None):
    """h <- drop(act(h + bias)) in place (bias None: h alone); returns the cache (activation
    derivative, dropout mask). activated=True: act was already applied by the caller (the
    derivative is then None)."""
    if activated:
        deriv = None
    elif activation == "relu":
        deriv = relu_inplace(h, bias)                     # (..., O) bool, bias added with it
    else:
        if bias is not None:
            h += bias
        deriv = _ACTIVATIONS_INPLACE[activation](h)      # (..., O) float
    mask = _dropout_mask(h.shape, h.dtype, dropout)
    if mask is not None:
        h *= mask
    return HiddenCache(deriv, mask)


def _times_derivative_flushed(dh, deriv):
    """dh <- flush(dh * deriv) in place (deriv: the activation's derivative, or None): dh is a
    product's output and the next product's operand. With a ReLU mask in float32, one multiply
    by (|dh| >= FLUSH_BELOW) & mask does both, block by block (`_row_blocks`), and the sums of
    dh's columns (the bias gradient of the layer below, (dh.shape[-1],)) are taken from each
    block while it is in cache and returned; None otherwise (the caller sums: float64 keeps
    np.sum's order, so its results do not move)."""
    if dh.dtype == np.float32 and (deriv is None or deriv.dtype == bool):
        blocks = _row_blocks(dh, deriv)                   # cache-sized row blocks
        magnitude = np.empty(blocks[0][0].shape, dh.dtype)  # scratch, reused by every block
        keep = np.empty(magnitude.shape, bool)
        sums = np.empty(dh.shape[-1:], dh.dtype)          # (O,)
        partial = np.empty_like(sums)
        for i, (d, mask) in enumerate(blocks):
            m, k = magnitude[:len(d)], keep[:len(d)]
            np.greater_equal(np.abs(d, out=m), FLUSH_BELOW, out=k)
            if mask is not None:
                np.logical_and(k, mask, out=k)
            np.multiply(d, k, out=d)                      # relu_backward and the flush
            if d.ndim != 2:                               # one block of an N-D view
                return d.sum(axis=tuple(range(d.ndim - 1)))
            if i == 0:
                np.add.reduce(d, axis=0, out=sums)
            else:
                sums += np.add.reduce(d, axis=0, out=partial)
        return sums
    if deriv is not None:
        dh *= deriv                                       # relu_backward / tanh_backward
    flush_subnormals(dh)
    return None


def _hidden_backward_inplace(dh, cache, flush=True):
    """dh <- d drop(act(h)) / dh in place: undo dropout, then the activation (if cached), and
    flush float32 (`_times_derivative_flushed`, whose column sums of dh, or None, are returned);
    flush=False (the caller flushes the array dh is part of) applies the derivative alone."""
    if cache.mask is not None:
        dh *= cache.mask                                  # dropout_backward, in place
    if flush:
        return _times_derivative_flushed(dh, cache.deriv)
    if cache.deriv is not None:
        dh *= cache.deriv                                       # relu_backward / tanh_backward
    return None


def mlp_forward(layers, x, activation="relu", dropout=None):
    """Forward pass of the MLP built by :func:`mlp_init`.

    Symbol  | Shape    | Meaning
    layers  |          | [(W, b), ...] as from mlp_init
    x       | (..., I) | inputs; any leading axes
    dropout |          | a Dropout on every hidden layer's output (not the output layer), or None
    out     | (..., O) | output of the last (linear) layer

    Each layer's output is one fresh array, activated and dropped out in place.
    """
    _check_activation(activation)
    caches = []
    h = _floats(x)                                        # (..., I)
    for i, (W, b) in enumerate(layers):
        if i == len(layers) - 1:
            h, lin_cache = linear_forward(h, W, b)        # (..., O_i)
            caches.append(LayerCache(lin_cache, None))
            break
        out = matmul(h, W)                                # (..., O_i) x W, then + b with the
        if np.result_type(out, b) != out.dtype:           # activation (mixed precisions promote)
            out = out + b
            b = None
        caches.append(LayerCache((h, W), _hidden_inplace(out, activation, dropout, bias=b)))
        h = out
    return h, caches


def mlp_backward(dout, cache, input_grad=True, dx_out=None):
    """(dx, grads) for :func:`mlp_forward`; grads = [(dW, db), ...] matching layers.

    input_grad=False returns dx = None and skips the first layer's input product (about 4 %
    of a Dial-sized training step) when the inputs are data, as for the sub-policies.
    dx_out (an array of x's shape, a view is fine) receives dx without a temporary.
    """
    grads = []
    dh = _flushed(_floats(dout))                          # (..., O); never written to
    for i, layer in reversed(list(enumerate(cache))):
        sums = None
        if layer.hidden is not None:                      # dh is a fresh array here
            sums = _hidden_backward_inplace(dh, layer.hidden)
        dh, dW, db = linear_backward(dh, layer.linear, input_grad=input_grad or i > 0,
                                     dx_out=dx_out if i == 0 else None, db=sums)
        grads.append((dW, db))
    return dh, grads[::-1]


def mlp_pair_forward(layers_a, layers_b, x, n_a, activation="relu", dropout_b=None, first=None):
    """Two MLPs reading the same inputs, net a on the rows x[:n_a] and net b on every row, with
    their first layers as one matrix product: [z_a | z_b] = x [W_a1 | W_b1] + [b_a1 | b_b1].
    Equal to mlp_forward(layers_a, x[:n_a]) and mlp_forward(layers_b, x, dropout=dropout_b)
    (same values; the dropout draws of b are the same too); spec/policy.md §4. first, if given,
    is that concatenated first layer (W (I, H_a + H_b), b (H_a + H_b,)), made once by a caller
    that runs many pairs.

    Symbol    | Shape     | Meaning
    x         | (N, I)    | inputs
    n_a       |           | rows of x net a reads (the first n_a)
    out_a     | (n_a, Oa) | output of net a
    out_b     | (N, Ob)   | output of net b
    """
    _check_activation(activation)
    x = _floats(x)
    (W_a, b_a), (W_b, b_b) = layers_a[0], layers_b[0]
    H_a = W_a.shape[1]
    if first is None:
        first = np.concatenate([W_a, W_b], axis=1), np.concatenate([b_a, b_b])
    z = matmul(x, first[0])                               # (N, H_a + H_b) one GEMM for both
    joint = len(layers_a) > 1 and len(layers_b) > 1
    fused = joint and activation == "relu" and np.result_type(z, first[1]) == z.dtype
    if not fused:
        z += first[1]
    # When both first layers are hidden, the activation runs once over the whole of z: on the
    # contiguous (N, H_a + H_b) array it takes about half the time of two calls on its column
    # halves (bench/bench_train.py, Nav-World-sized step). Rows n_a: of z_a are activated and
    # never read. Dropout (net b only) then scales its half; values and draws are unchanged.
    if fused:
        deriv = relu_inplace(z, first[1])                 # (N, H_a + H_b), the bias added with it
    else:
        deriv = _ACTIVATIONS_INPLACE[activation](z) if joint else None
    outs, caches = [], []
    for layers, h, dropout in ((layers_a, z[:n_a, :H_a], None), (layers_b, z[:, H_a:], dropout_b)):
        if len(layers) == 1:                              # the first layer is the output layer
            outs.append(h)
            caches.append(PairNetCache(None, None))
            continue
        hidden_cache = _hidden_inplace(h, activation, dropout, activated=joint)  # h: view of z
        out, rest_cache = mlp_forward(layers[1:], h, activation, dropout)
        outs.append(out)
        caches.append(PairNetCache(hidden_cache, rest_cache))
    return outs[0], outs[1], PairCache(x, n_a, H_a, W_b.shape[1], tuple(caches), deriv, first[0])


def mlp_pair_backward(dout_a, dout_b, cache, input_grad=False):
    """(grads_a, grads_b) for :func:`mlp_pair_forward`, each [(dW, db), ...] matching its layers;
    with input_grad, (grads_a, grads_b, dx) where dx (N, I) = [dz_a | dz_b] [W_a1 | W_b1]^T is
    the gradient w.r.t. the shared inputs (features of a convolutional core), both nets' in one
    product.

    The two first layers' gradients come from one product: x^T [dz_a (0 past row n_a) | dz_b].
    """
    x, n_a, H_a = cache.x, cache.n_a, cache.H_a
    dz = np.empty((x.shape[0], H_a + cache.H_b), np.result_type(x, dout_a, dout_b))  # (N, H_a + H_b)
    dz[n_a:, :H_a] = 0.0                                  # net a never read these rows
    rest = []
    for dout, dz_head, net in ((dout_a, dz[:n_a, :H_a], cache.nets[0]), (dout_b, dz[:, H_a:], cache.nets[1])):
        if net.rest is None:
            dz_head[...] = dout
            rest.append([])
            continue
        _, grads = mlp_backward(dout, net.rest, dx_out=dz_head)    # writes dh into dz
        _hidden_backward_inplace(dz_head, net.hidden, flush=False)  # dropout; activation if not joint
        rest.append(grads)
    db = _times_derivative_flushed(dz, cache.deriv)      # joint activation (dz[n_a:, :H_a] is 0);
                                                          # dz was written by products above
    # z = x W + b for both nets at once
    dW = matmul(x.T, dz)                                  # (I, H_a + H_b)
    if db is None:
        db = dz.sum(axis=0)                               # (H_a + H_b,)
    grads = ([(dW[:, :H_a], db[:H_a])] + rest[0], [(dW[:, H_a:], db[H_a:])] + rest[1])
    if not input_grad:
        return grads
    return grads + (matmul(dz, cache.first_W.T),)         # (N, I) d(x W)/dx = W^T, both nets
