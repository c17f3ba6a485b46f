"""Multi-layer perceptrons as spec/policy.md writes them: the plain reference.

A hidden layer is h = drop(act(x W + b)), the output layer x W + b; the action and STOP nets of a
sub-policy are two such MLPs that read the same states (spec/policy.md eq. (1)-(4)). Every
function here makes new arrays and says each step once, in the order of the equations.

Training and execution run the same maths in nn.mlp_fast (policy.NETS): in place, the two first
layers as one product, float32 subnormals flushed where each array is made, cache-sized blocks.
tests/test_nn.py checks that path against this one: float64 to rounding, float32 to the stated
tolerance (the flush of |x| < 2^-100 is the only change of value, spec/training.md eq. (12)).
"""
import numpy as np

from taco_ref.nn.dropout import _dropout_mask

_ACTIVATION = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}
_DERIVATIVE = {"relu": lambda z, h: (z > 0).astype(z.dtype), "tanh": lambda z, h: 1.0 - h ** 2}


def check_activation(activation):
    if activation not in _ACTIVATION:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATION)}, got {activation!r}")


def mlp_init(rng, sizes, activation="relu"):
    """Parameters [(W_1, b_1), ..., (W_n, b_n)] for an MLP with widths sizes = [I, ..., O].

    Every layer, the output layer included, draws W uniformly from [-bound, bound]:
    - activation="relu": He/Kaiming uniform, bound = sqrt(6 / fan_in)  (Var W = 2 / fan_in);
    - activation="tanh": Glorot/Xavier uniform, bound = sqrt(6 / (fan_in + fan_out)).
    Biases are zero. fan_in = I of the layer, fan_out = O of the layer. float64 (a float32 run
    rounds these values, so both precisions start from the same draws).
    """
    check_activation(activation)
    sizes = [int(s) for s in sizes]
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes must list at least two positive widths, got {sizes}")
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        denom = fan_in if activation == "relu" else fan_in + fan_out
        bound = np.sqrt(6.0 / denom)
        W = rng.uniform(-bound, bound, size=(fan_in, fan_out))  # (I, O)
        layers.append((W, np.zeros(fan_out)))                    # b: (O,)
    return layers


def mlp_forward(layers, x, activation="relu", dropout=None):
    """(out, cache): out = the last layer's x W + b after the hidden layers
    h = drop(act(h W + b)) (dropout: an nn.Dropout on every hidden layer, or None).

    Symbol | Shape    | Meaning
    x      | (..., I) | inputs; any leading axes
    out    | (..., O) | output of the last (linear) layer
    """
    check_activation(activation)
    h = np.asarray(x)
    if h.dtype.kind != "f":
        h = h.astype(np.float64)
    cache = []
    for i, (W, b) in enumerate(layers):
        z = h @ W + b                                     # (..., O_i)
        if i == len(layers) - 1:
            cache.append((h, W, None, None, None))
            return z, cache
        a = _ACTIVATION[activation](z)                    # (..., O_i)
        mask = _dropout_mask(a.shape, a.dtype, dropout)   # inverted dropout: kept units scaled
        cache.append((h, W, z, a, mask))
        h = a if mask is None else a * mask
    return h, cache                                       # no layers: the identity


def mlp_backward(dout, cache, activation="relu", input_grad=True):
    """(dx, [(dW, db), ...]) of sum(dout * out) for mlp_forward's out; dx None without
    input_grad. Per layer, from the last: dz = dh (the output layer) or dh * mask * act'(z);
    dW = h^T dz, db = sum of dz over rows, dh = dz W^T."""
    grads = []
    dh = np.asarray(dout)
    for i in reversed(range(len(cache))):
        h, W, z, a, mask = cache[i]
        dz = dh
        if z is not None:                                 # a hidden layer
            if mask is not None:
                dz = dz * mask
            dz = dz * _DERIVATIVE[activation](z, a)
        h2, dz2 = h.reshape(-1, W.shape[0]), dz.reshape(-1, W.shape[1])
        grads.append((h2.T @ dz2, dz2.sum(axis=0)))       # (I, O), (O,)
        dh = dz @ W.T if (input_grad or i > 0) else None  # (..., I)
    return dh, grads[::-1]


def mlp_pair_forward(layers_a, layers_b, x, n_a, activation="relu", dropout_b=None, first=None):
    """The action net a on the rows x[:n_a] and the STOP net b on every row (its dropout
    dropout_b); (out_a, out_b, cache). first is accepted for the fast path's signature and not
    read: each net uses its own first layer."""
    out_a, cache_a = mlp_forward(layers_a, np.asarray(x)[:n_a], activation)
    out_b, cache_b = mlp_forward(layers_b, x, activation, dropout_b)
    return out_a, out_b, (cache_a, cache_b, n_a, np.asarray(x).shape, activation)


def mlp_pair_backward(dout_a, dout_b, cache, input_grad=False):
    """(grads_a, grads_b), with input_grad (grads_a, grads_b, dx): dx (N, I) the sum of both
    nets' input gradients, net a's on its first n_a rows."""
    cache_a, cache_b, n_a, shape, activation = cache
    dx_a, grads_a = mlp_backward(dout_a, cache_a, activation, input_grad)
    dx_b, grads_b = mlp_backward(dout_b, cache_b, activation, input_grad)
    if not input_grad:
        return grads_a, grads_b
    dx = dx_b.copy()
    dx[:n_a] += dx_a
    return grads_a, grads_b, dx
