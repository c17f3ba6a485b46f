"""Neural-network building blocks as forward/backward pairs: linear, ReLU, tanh, dropout, MLP,
2-D convolution and the convolutional core, GRU and bidirectional GRU, log-softmax,
log-sigmoid, and the two action log-likelihoods.

Every ``*_forward(...)`` returns ``(out, cache)`` and sits directly above its
``*_backward(dout, cache)``, which returns the gradient of ``sum(dout * out)`` with respect to the
forward's array inputs (and parameters). Plain NumPy, no autodiff at run time; the tests
check every backward against autograd. Parameters are plain arrays in lists and dicts.

Precision: float32 and float64 arrays keep their dtype through every layer (the sub-policy nets
train in either, spec/training.md §1 `dtype`); anything else (ints, lists) is read as float64.
Mixed inputs follow NumPy's promotion (float32 with float64 gives float64).

Subnormal float32 values never enter the nets' matrix products (spec/training.md eq. (12)):
every float32 array an MLP multiplies (its input rows, each hidden activation, each backward
dout) has its entries with |x| < 2^-100 (the subnormals, below 2^-126, and the tiny normals
whose products would be subnormal) replaced by zero where it is made (`flush_subnormals`; in
the ReLU, fused into its mask). Intel cores take a microcode assist of ~100 cycles for every
instruction with a subnormal operand or result; AMD cores do not. float64 arrays are never
touched. Every product goes through `matmul`, which a `subnormal_census()` counts (tests,
bench/bench_train.py).

Symbol | Shape | Meaning
N      |       | rows: any number of leading axes (...) flattened together
I      |       | input width of a layer
O      |       | output width of a layer
B      |       | batch size (sequences)
T      |       | padded sequence length; row b uses T_b = lengths[b]
Hd     |       | GRU hidden width (H is the GRU output array)
A      |       | action dimension (Gaussian policy)
K      |       | number of classes (categorical policy)
"""
import contextlib
import numbers

import numpy as np

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
TINY32 = np.float32(np.finfo(np.float32).tiny)
"""2^-126, the smallest normal float32; below it (and above 0) a float32 is subnormal."""
FLUSH_BELOW = np.float32(2.0 ** -100)
"""float32 entries of the nets' arrays with |x| below this (~7.9e-31) are set to 0
(`flush_subnormals`): 2^26 times TINY32, so that a surviving entry times a weight of magnitude
2^-26 or more is still normal (spec/training.md eq. (12))."""


def _floats(x):
    """x as an array of its own float dtype if float32 or float64, else as float64."""
    x = np.asarray(x)
    return x if x.dtype in _FLOATS else x.astype(np.float64)


ELEMENTWISE_BLOCK_BYTES = 2 ** 18
"""Element-wise passes over the nets' activations and gradients (the ReLU with its bias, its
derivative, the float32 flush, the bias sums) run over row blocks of about this many bytes: a
block's three to five passes then find it in the core's cache instead of streaming the whole
array (MBs) from memory each time. Alone, a (2500, 600) float32 derivative-and-flush takes 40 %
less time (0.67 against 1.15 ms on the Intel Xeon); in a training step, whose arrays come
half-warm from the products, the backward pass gained 4-10 ms of ~155 (docs/speed.md)."""


def _row_blocks(*arrays):
    """Matching row blocks of arrays of one shape (None entries are passed through as None):
    tuples of views over ELEMENTWISE_BLOCK_BYTES-sized slices of the leading axis of their
    2-D reshaping (the last axis kept whole). Arrays of which some is neither 2-D nor
    C-contiguous (no 2-D view of it exists) are one block."""
    first = arrays[0]
    width = first.shape[-1] if first.ndim else 1
    rows = first.size // width if width else 0
    flat = []
    for a in arrays:
        if a is not None and a.ndim != 2:
            if not a.flags.c_contiguous:
                return [arrays]                           # no view of rows: one block
            a = a.reshape(rows, width)
        flat.append(a)
    step = max(1, ELEMENTWISE_BLOCK_BYTES // (first.itemsize * max(width, 1)))
    if rows <= step:
        return [tuple(flat)]
    cuts = [slice(i, i + step) for i in range(0, rows, step)]
    columns = [[None] * len(cuts) if a is None else [a[c] for c in cuts] for a in flat]
    return list(zip(*columns))


# ----------------------------------------------------------------------------------------
# Subnormals: the flush, the one matrix product, and its census
# ----------------------------------------------------------------------------------------

def count_subnormal(x):
    """Number of subnormal entries (0 < |x| < 2^-126) of a float32 array; 0 for any other dtype."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        return 0
    a = np.abs(x)
    return int(np.count_nonzero((a < TINY32) & (a > 0)))


def flush_subnormals(x, scratch=None):
    """Set the entries of a float32 array x with |x| < FLUSH_BELOW (2^-100: the subnormals and
    the tiny normals whose products would be subnormal) to zero, in place; returns x. Other
    dtypes are returned untouched. spec/training.md eq. (12). scratch, (magnitude, keep) arrays
    of x's shape (x's dtype, bool), saves the two temporaries of a caller that flushes often."""
    if x.dtype == np.float32:
        magnitude, keep = scratch if scratch is not None else (None, None)
        keep = np.greater_equal(np.abs(x, out=magnitude), FLUSH_BELOW, out=keep)   # (...)
        np.multiply(x, keep, out=x)                       # tiny * 0 = 0, the rest * 1
    return x


def _flushed(x):
    """x itself when flush_subnormals would not change it, else a flushed copy (x is not
    written)."""
    if x.dtype != np.float32:
        return x
    a = np.abs(x)
    return flush_subnormals(x.copy()) if ((a < FLUSH_BELOW) & (a > 0)).any() else x


class SubnormalCensus:
    """What `matmul` multiplied while this census was active: products, float32 operand
    entries, and the subnormal ones among them."""

    __slots__ = ("products", "entries", "subnormal")

    def __init__(self):
        self.products = self.entries = self.subnormal = 0

    def add(self, *operands):
        self.products += 1
        for x in operands:
            if x.dtype == np.float32:
                self.entries += x.size
                self.subnormal += count_subnormal(x)


_CENSUSES = []


@contextlib.contextmanager
def subnormal_census():
    """Count every product of the nets (`matmul`) made inside the block: with
    subnormal_census() as c: ...; then c.products, c.entries, c.subnormal. Off by default
    (costs one list check per product)."""
    census = SubnormalCensus()
    _CENSUSES.append(census)
    try:
        yield census
    finally:
        _CENSUSES.remove(census)


def matmul(a, b, out=None):
    """a @ b (np.matmul, into out if given): every matrix product of the linear layers and MLPs."""
    for census in _CENSUSES:
        census.add(a, b)
    return np.matmul(a, b, out=out)

# ----------------------------------------------------------------------------------------
# Affine layer and element-wise non-linearities
# ----------------------------------------------------------------------------------------

def linear_forward(x, W, b):
    """out = x W + b over the last axis of x.

    Symbol | Shape    | Meaning
    x      | (..., I) | inputs; any leading axes
    W      | (I, O)   | weights
    b      | (O,)     | bias
    out    | (..., O) |
    """
    x = _floats(x)
    out = matmul(x, W)                                    # (..., O)
    if np.result_type(out, b) == out.dtype:
        out += b                                          # in place: no (..., O) temporary
    else:
        out = out + b                                     # (mixed precisions promote)
    return out, (x, W)


def linear_backward(dout, cache, input_grad=True, dx_out=None, db=None):
    """(dx, dW, db) for :func:`linear_forward`; leading axes are flattened into rows.

    With input_grad=False, dx is None and its matrix product is skipped (a network's first
    layer, whose inputs are data). dx_out, an array of dx's shape (a view is fine), receives dx
    without a temporary. db, if given, is dout's column sums, already taken by the caller.

    With one output (O = 1, a STOP net's last layer) dx = dout W^T is an outer product: one
    multiply per entry, which a broadcast multiply gives exactly (the same values as the
    product) at a fraction of its cost (the BLAS runs an outer product at ~1 % of its rate).
    """
    x, W = cache
    dout = _floats(dout)
    x2 = x.reshape(-1, W.shape[0])                        # (N, I)
    d2 = dout.reshape(-1, W.shape[1])                     # (N, O)
    dx = None
    if input_grad and W.shape[1] == 1 and dout.dtype == W.dtype:
        dx = np.multiply(dout, W[:, 0], out=dx_out)       # (..., I) dout_n W_i: the outer product
    elif input_grad:
        dx = matmul(dout, W.T, out=dx_out)                # (..., I) d(xW)/dx = W^T
    dW = matmul(x2.T, d2)                                 # (I, O)    sum over rows of x^T dout
    if db is None:
        db = d2.sum(axis=0)                               # (O,)      b is broadcast over rows
    return dx, dW, db


def relu_inplace(h, bias=None):
    """h <- max(h + bias, 0) in place (bias (O,) over the last axis, or None: h alone); returns
    the cache for :func:`relu_backward`: the derivative, the (..., ) boolean mask h > 0
    (float32: h >= FLUSH_BELOW, so that the activation is flushed in the same multiply; a
    pre-activation below 2^-100 gives 0 and derivative 0). The bias is added block by block
    with the rest, the values are those of h += bias first.

    A multiply by the mask is about ten times faster than np.where on these shapes
    (bench/bench_train.py); negative entries become -0.0, which every later sum and product
    treats as 0.
    """
    keep = np.empty(h.shape, bool)                        # (...)
    threshold, compare = ((FLUSH_BELOW, np.greater_equal) if h.dtype == np.float32
                          else (0.0, np.greater))
    for hc, kc in _row_blocks(h, keep):                   # cache-sized row blocks: the passes
        if bias is not None:                              # run while the block is in cache
            hc += bias
        compare(hc, threshold, out=kc)
        np.multiply(hc, kc, out=hc)
    return keep


def relu_forward(x):
    """out = max(x, 0) as a new array; the cache is the (..., ) boolean mask x > 0."""
    out = np.array(_floats(x))                            # (...) a copy
    return out, relu_inplace(out)


def relu_backward(dout, cache):
    """dx = dout where x > 0, else 0 (the subgradient at 0 is taken as 0)."""
    return dout * cache


def tanh_inplace(h):
    """h <- tanh(h) in place; returns the cache for :func:`tanh_backward`: the derivative
    1 - tanh(h)^2 (not h, which a later dropout may scale in place)."""
    np.tanh(h, out=h)                                     # (...) tanh(x) = x for tiny x
    flush_subnormals(h)
    return 1.0 - h ** 2


def tanh_forward(x):
    """out = tanh(x) as a new array; the cache is the derivative 1 - out^2."""
    out = np.array(_floats(x))                            # (...) a copy
    return out, tanh_inplace(out)


def tanh_backward(dout, cache):
    """dx = dout (1 - tanh(x)^2)."""
    return dout * cache


def _check_rate(rate, name):
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0.0 <= rate < 1.0:
        raise ValueError(f"{name} must be a real number in [0, 1), got {rate!r}")
    return float(rate)


class Dropout:
    """Inverted dropout while training, as one value: drop probability rate in [0, 1) and the
    np.random.Generator that draws the masks. Layers take a Dropout or None (no dropout: every
    evaluation, and training without it)."""

    __slots__ = ("rate", "rng")

    def __init__(self, rate, rng):
        self.rate = _check_rate(rate, "dropout rate")
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"dropout rng must be a numpy Generator, got {type(rng).__name__}")
        self.rng = rng

    def __repr__(self):
        return f"Dropout(rate={self.rate})"


def dropout_forward(x, dropout):
    """Inverted dropout: each unit is kept with probability 1 - rate and scaled by 1 / (1 - rate),
    so E[out] = x; with dropout None (or rate 0) it is the identity.

    Symbol  | Shape | Meaning
    x       | (...) | inputs
    dropout |       | a Dropout (rate, rng) or None
    out     | (...) | x * mask
    cache   | (...) | mask: 0 for dropped units, 1 / (1 - rate) for kept ones; None if identity
    """
    x = _floats(x)
    mask = _dropout_mask(x.shape, x.dtype, dropout)
    return (x, None) if mask is None else (x * mask, mask)


def _dropout_mask(shape, dtype, dropout):
    """The mask of :func:`dropout_forward` for an array of this shape and dtype, or None. The
    uniform draws are float64 whatever the dtype, so both precisions drop the same units."""
    if dropout is not None and not isinstance(dropout, Dropout):
        raise ValueError(f"dropout must be an nn.Dropout or None, got {dropout!r}")
    if dropout is None or dropout.rate == 0.0:
        return None
    keep = dropout.rng.random(shape) >= dropout.rate      # (...) P(keep) = 1 - rate
    return np.multiply(keep, 1.0 / (1.0 - dropout.rate), dtype=dtype)  # (...) no float64 temporary


def dropout_backward(dout, cache):
    """dx = dout * mask: the same units are dropped and scaled as in the forward pass."""
    return dout if cache is None else dout * cache


# ----------------------------------------------------------------------------------------
# Multi-layer perceptron: hidden layers linear -> activation -> dropout, output layer linear
# ----------------------------------------------------------------------------------------

_ACTIVATIONS = {"relu": (relu_forward, relu_backward), "tanh": (tanh_forward, tanh_backward)}
_ACTIVATIONS_INPLACE = {"relu": relu_inplace, "tanh": tanh_inplace}


def _check_activation(activation):
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
    return _ACTIVATIONS[activation]


def mlp_init(rng, sizes, activation="relu"):
    """Parameters [(W_1, b_1), ..., (W_n, b_n)] for an MLP with widths sizes = [I, ..., O].

    Every layer, the output layer included, draws W uniformly from [-bound, bound]:
    - activation="relu": He/Kaiming uniform, bound = sqrt(6 / fan_in)  (Var W = 2 / fan_in);
    - activation="tanh": Glorot/Xavier uniform, bound = sqrt(6 / (fan_in + fan_out)).
    Biases are zero. fan_in = I of the layer, fan_out = O of the layer. float64 (a float32 run
    rounds these values, so both precisions start from the same draws).
    """
    _check_activation(activation)
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
    return deriv, mask


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
    deriv, mask = cache
    if mask is not None:
        dh *= mask                                        # dropout_backward, in place
    if flush:
        return _times_derivative_flushed(dh, deriv)
    if deriv is not None:
        dh *= deriv                                       # relu_backward / tanh_backward
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
            caches.append((lin_cache, None))
            break
        out = matmul(h, W)                                # (..., O_i) x W, then + b with the
        if np.result_type(out, b) != out.dtype:           # activation (mixed precisions promote)
            out = out + b
            b = None
        caches.append(((h, W), _hidden_inplace(out, activation, dropout, bias=b)))
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
    for i, (lin_cache, hidden_cache) in reversed(list(enumerate(cache))):
        sums = None
        if hidden_cache is not None:                      # dh is a fresh array here
            sums = _hidden_backward_inplace(dh, hidden_cache)
        dh, dW, db = linear_backward(dh, lin_cache, input_grad=input_grad or i > 0,
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
            caches.append((None, None))
            continue
        hidden_cache = _hidden_inplace(h, activation, dropout, activated=joint)  # h: view of z
        out, rest_cache = mlp_forward(layers[1:], h, activation, dropout)
        outs.append(out)
        caches.append((hidden_cache, rest_cache))
    return outs[0], outs[1], (x, n_a, H_a, W_b.shape[1], caches, deriv, first[0])


def mlp_pair_backward(dout_a, dout_b, cache, input_grad=False):
    """(grads_a, grads_b) for :func:`mlp_pair_forward`, each [(dW, db), ...] matching its layers;
    with input_grad, (grads_a, grads_b, dx) where dx (N, I) = [dz_a | dz_b] [W_a1 | W_b1]^T is
    the gradient w.r.t. the shared inputs (features of a convolutional core), both nets' in one
    product.

    The two first layers' gradients come from one product: x^T [dz_a (0 past row n_a) | dz_b].
    """
    x, n_a, H_a, H_b, caches, deriv, first_W = cache
    dz = np.empty((x.shape[0], H_a + H_b), np.result_type(x, dout_a, dout_b))  # (N, H_a + H_b)
    dz[n_a:, :H_a] = 0.0                                  # net a never read these rows
    rest = []
    for dout, dz_head, (hidden_cache, rest_cache) in (
            (dout_a, dz[:n_a, :H_a], caches[0]), (dout_b, dz[:, H_a:], caches[1])):
        if rest_cache is None:
            dz_head[...] = dout
            rest.append([])
            continue
        _, grads = mlp_backward(dout, rest_cache, dx_out=dz_head)   # writes dh into dz
        _hidden_backward_inplace(dz_head, hidden_cache, flush=False)  # dropout; activation if not joint
        rest.append(grads)
    db = _times_derivative_flushed(dz, deriv)            # joint activation (dz[n_a:, :H_a] is 0);
                                                          # dz was written by products above
    # z = x W + b for both nets at once
    dW = matmul(x.T, dz)                                  # (I, H_a + H_b)
    if db is None:
        db = dz.sum(axis=0)                               # (H_a + H_b,)
    grads = ([(dW[:, :H_a], db[:H_a])] + rest[0], [(dW[:, H_a:], db[H_a:])] + rest[1])
    if not input_grad:
        return grads
    return grads + (matmul(dz, first_W.T),)               # (N, I) d(x W)/dx = W^T, both nets


# ----------------------------------------------------------------------------------------
# Convolution (channels-last, 'valid'), and the convolutional core of the image policies
# ----------------------------------------------------------------------------------------

CONV_CHUNK_BYTES = 2 ** 21
"""The patch matrix of a convolution is built and multiplied this many bytes at a time (a few
images per piece): a piece stays in the core's cache between its copy and its product, and a
batch of thousands of images never holds its whole patch matrix (bench/bench_conv.py)."""


def conv_output_size(size, kernel, stride):
    """Output length of a 'valid' convolution along one axis: floor((size - kernel) / stride) + 1
    (0 when the kernel does not fit)."""
    return max(0, (size - kernel) // stride + 1)


def _check_conv(x, W, b, stride):
    """(x, W, b, stride) checked: x (N, H, W, C) and W (kh, kw, C, O) floats of one dtype, b (O,),
    a positive integer stride, a kernel that fits the image."""
    x = _floats(x)
    W = np.asarray(W)
    if x.ndim != 4 or W.ndim != 4 or W.shape[2] != x.shape[3]:
        raise ValueError(f"conv2d: expected x (N, H, W, C) and W (kh, kw, C, O) with the same C, "
                         f"got x {x.shape} and W {W.shape}")
    if W.dtype != x.dtype or np.asarray(b).shape != (W.shape[3],):
        raise ValueError(f"conv2d: expected W of x's dtype {x.dtype} and b of shape ({W.shape[3]},), "
                         f"got W {W.dtype} and b {np.asarray(b).shape}")
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
        raise ValueError(f"conv2d: stride must be a positive integer, got {stride!r}")
    if W.shape[0] > x.shape[1] or W.shape[1] > x.shape[2]:
        raise ValueError(f"conv2d: kernel {W.shape[:2]} larger than the image {x.shape[1:3]}")
    return x, W, int(stride)


def _patches(x, kh, kw, stride, fold=1):
    """The (N, Ho, Wo / g, kh, s (g - 1) + kw, C) view of x whose [n, i, J] is the window under
    the g = fold output pixels (i, g J), ..., (i, g J + g - 1): x[n, s i + p, s g J + q', c] at
    [n, i, J, p, q', c]; with g = 1 the window under pixel (i, j). No copy (a strided view).
    g must divide Wo."""
    N, H, W_, C = x.shape
    Ho, Wo = conv_output_size(H, kh, stride), conv_output_size(W_, kw, stride)
    sn, sh, sw, sc = x.strides
    return np.lib.stride_tricks.as_strided(x, (N, Ho, Wo // fold, kh, stride * (fold - 1) + kw, C),
                                           (sn, stride * sh, fold * stride * sw, sh, sw, sc), writeable=False)


FOLD_MAX_K = 100
"""A convolution whose patch rows are short (kh kw C <= FOLD_MAX_K) and whose output is narrow
(O < 2 GEMM_WIDTH) computes g = 3 or 2 neighbouring output pixels of a row per patch-matrix row
(`_fold`): the copies move runs of s (g - 1) + kw pixels instead of kw, there are g times fewer
rows, and the product has g O columns instead of O, for (s (g - 1) + kw) / kw times the
multiply-adds (the zeros of the folded weights). On the paper's first layer (112 x 112 x 3,
5 x 5, stride 2, 10 channels, g = 3) its forward and backward passes take 0.134-0.140 +
0.164-0.170 ms a frame instead of 0.165-0.169 + 0.202-0.203 (bench/bench_conv.py's per-layer
profile, AMD EPYC, float32, one thread). The second layer (K = 250, Wo = 25, g = 5 possible)
gained nothing in its forward pass from it (0.068 -> 0.071 ms, measured once), so longer rows
stay unfolded."""


def _fold(K, O, Wo):
    """g, the output pixels of a row one patch-matrix row computes (FOLD_MAX_K): 3 or 2 where
    it divides Wo and the layer is short and narrow, else 1."""
    if K > FOLD_MAX_K or O >= 2 * GEMM_WIDTH:
        return 1
    return next((g for g in (3, 2) if Wo % g == 0), 1)


def _folded_windows(x, W, stride):
    """(windows, g, Ho, Wo) of conv2d(x, W, stride): the strided view `_patches` with the fold g
    that `_fold` picks for this layer; the forward pass and dW read the same one."""
    kh, kw, C, O = W.shape
    Ho, Wo = conv_output_size(x.shape[1], kh, stride), conv_output_size(x.shape[2], kw, stride)
    g = _fold(kh * kw * C, O, Wo)
    return _patches(x, kh, kw, stride, g), g, Ho, Wo


def _folded_weights(W, stride, fold):
    """W_mat of g = fold pixels a row: (kh (s (g - 1) + kw) C, g O) with
    [(p, q', c), (r, o)] = W[p, q' - s r, c, o] where 0 <= q' - s r < kw, else 0; with g = 1 W
    reshaped to (kh kw C, O)."""
    kh, kw, C, O = W.shape
    if fold == 1:
        return W.reshape(kh * kw * C, O)
    s = stride
    V = np.zeros((kh, s * (fold - 1) + kw, C, fold, O), W.dtype)
    for r in range(fold):
        V[:, s * r:s * r + kw, :, r, :] = W
    return V.reshape(kh * (s * (fold - 1) + kw) * C, fold * O)


def _chunks(N, rows_per_image, K, itemsize):
    """Slices of the N images whose patch matrices (rows_per_image x K each) fill about
    CONV_CHUNK_BYTES, at least one image each."""
    per = max(1, CONV_CHUNK_BYTES // max(1, rows_per_image * K * itemsize))
    return [slice(n, min(N, n + per)) for n in range(0, N, per)]


GEMM_WIDTH = 8
"""A convolution's products are computed GEMM_WIDTH columns at a time: a weight matrix whose
column count is not a multiple of it gets zero columns up to the next multiple (10 -> 16,
5 -> 8), and only the real columns are kept. OpenBLAS's float32 kernels take longer for 10
columns than for 16 (bench/bench_conv.py), so the zeros cost nothing and save time."""


def _padded_columns(M):
    """M (K, O) with zero columns appended up to a multiple of GEMM_WIDTH (M itself if none)."""
    extra = -M.shape[1] % GEMM_WIDTH
    return M if extra == 0 else np.concatenate([M, np.zeros((M.shape[0], extra), M.dtype)], axis=1)


def _patch_products(windows, W_mat, out_rows):
    """out_rows = P W_mat for the patch matrix P of windows (N, Ho, Wo, a, b, C), built and
    multiplied a few images at a time (im2col + GEMM). out_rows: (N Ho Wo, O) contiguous."""
    N, Ho, Wo = windows.shape[:3]
    K, O = W_mat.shape
    W_pad = _padded_columns(W_mat)                        # (K, O') O' >= O
    pieces = _chunks(N, Ho * Wo, K, windows.itemsize)
    per = pieces[0].stop - pieces[0].start if pieces else 0
    buf = np.empty((per,) + windows.shape[1:], windows.dtype)
    prod = np.empty((per * Ho * Wo, W_pad.shape[1]), windows.dtype)
    for piece in pieces:
        m = (piece.stop - piece.start) * Ho * Wo
        np.copyto(buf[:piece.stop - piece.start], windows[piece])     # im2col of these images
        rows = slice(piece.start * Ho * Wo, piece.stop * Ho * Wo)
        if W_pad is W_mat:
            matmul(buf[:piece.stop - piece.start].reshape(m, K), W_mat, out=out_rows[rows])
        else:
            matmul(buf[:piece.stop - piece.start].reshape(m, K), W_pad, out=prod[:m])  # (m, O')
            out_rows[rows] = prod[:m, :O]


def conv2d_forward(x, W, b, stride):
    """2-D convolution (cross-correlation), channels-last, 'valid' padding; spec/policy.md eq. (11).

        out[n, i, j, o] = b[o] + sum_{p < kh, q < kw, c < C} x[n, s i + p, s j + q, c] W[p, q, c, o]

    computed as im2col + GEMM: the windows of a few images at a time are copied into a patch
    matrix P (rows (n, i, j), columns (p, q, c)), and out = P W_mat + b with W_mat = W reshaped
    to (kh kw C, O), one `matmul` per piece (CONV_CHUNK_BYTES; GEMM_WIDTH). A short, narrow
    layer computes g neighbouring pixels of a row per row of P (FOLD_MAX_K). The patch matrix
    is not kept: the backward pass builds it again from x, so the cache holds x, which is
    kh kw / s^2 times smaller.

    Symbol | Shape            | Meaning
    x      | (N, H, W, C)     | images (float32 or float64; W and b of the same dtype)
    W      | (kh, kw, C, O)   | kernels
    b      | (O,)             | bias
    stride | int              | s, the same along both axes
    out    | (N, Ho, Wo, O)   | Ho = floor((H - kh) / s) + 1, Wo likewise (conv_output_size)
    """
    x, W, stride = _check_conv(x, W, b, stride)
    N, O = x.shape[0], W.shape[3]
    windows, g, Ho, Wo = _folded_windows(x, W, stride)   # (N, Ho, Wo / g, kh, s (g - 1) + kw, C) a view
    out = np.empty((N, Ho, Wo, O), x.dtype)               # rows (n, i, J) x columns (r, o): the same memory
    _patch_products(windows, _folded_weights(W, stride, g), out.reshape(N * Ho * Wo // g, g * O))
    out += np.asarray(b, x.dtype)                         # (N, Ho, Wo, O) bias on every pixel
    return out, (x, W, stride)


def _input_gradient_weights(W, stride):
    """The weights of dx as one product (spec/policy.md eq. (14)): V (a b O, s s C) with
    V[(u, v, o), (r, t, c)] = W[s (a - 1 - u) + r, s (b - 1 - v) + t, c, o] where that index
    lies inside the kernel, else 0; a = ceil(kh / s), b = ceil(kw / s)."""
    kh, kw, C, O = W.shape
    s = stride
    a, b = -(-kh // s), -(-kw // s)
    V = np.zeros((a, b, O, s, s, C), W.dtype)
    for u in range(a):
        for r in range(s):
            p = s * (a - 1 - u) + r
            for v in range(b):
                for t in range(s):
                    q = s * (b - 1 - v) + t
                    if p < kh and q < kw:
                        V[u, v, :, r, t, :] = W[p, q].T   # (O, C)
    return V.reshape(a * b * O, s * s * C)


def conv2d_backward(dout, cache, input_grad=True):
    """(dx, dW, db) for :func:`conv2d_forward`; spec/policy.md eq. (12), (13), (14).

        dW[p, q, c, o] = sum_{n, i, j} x[n, s i + p, s j + q, c] dout[n, i, j, o]     (= P^T dout)
        db[o]          = sum_{n, i, j} dout[n, i, j, o]
        dx[n, s A + r, s B + t, c] = sum_{u, v, o} dpad[n, A + u, B + v, o] V[(u, v, o), (r, t, c)]

    dW rebuilds the patch matrix P from the cached x piece by piece, as the forward pass did
    (folded alike: the g pixels' columns of P^T dout are then added at their taps).
    dx is computed by sub-pixel phases: pixel (s A + r, s B + t) of the input is read by the
    windows i = A - u' with kernel row p = s u' + r (u' >= 0), so for every phase (r, t) dx is a
    stride-1 correlation of dout (zero-padded by a - 1 in front: dpad) with the kernel taps of
    that phase, and the s^2 phases together are one im2col + GEMM with V
    (`_input_gradient_weights`), whose output is dx with (A, r) and (B, t) interleaved: no
    scatter-add. input_grad=False returns dx = None and skips it (a first layer, whose input is
    data).
    """
    x, W, stride = cache
    kh, kw, C, O = W.shape
    s = stride
    N = x.shape[0]
    windows, g, Ho, Wo = _folded_windows(x, W, s)         # as the forward pass: (N, Ho, Wo / g, kh, kw', C)
    R, kw_ = Ho * Wo // g, windows.shape[4]               # rows of P per image, the windows' width
    K = kh * kw_ * C
    dout = _floats(dout)
    d_rows = dout.reshape(N * R, g * O)                   # (N Ho Wo / g, g O): rows (n, i, J), columns (r, o)
    db = d_rows.reshape(-1, O).sum(axis=0)                # (O,)
    O_pad = g * O + (-g * O % GEMM_WIDTH)
    dW = np.zeros((K, O_pad), x.dtype)
    part = np.empty_like(dW)
    pieces = _chunks(N, R, K, x.itemsize)
    per = pieces[0].stop - pieces[0].start if pieces else 0
    buf = np.empty((per,) + windows.shape[1:], x.dtype)
    d_buf = np.zeros((per * R, O_pad), x.dtype)           # dout's rows of a piece, zero columns past g O
    for piece in pieces:
        n = piece.stop - piece.start
        m = n * R
        np.copyto(buf[:n], windows[piece])
        d_buf[:m, :g * O] = d_rows[piece.start * R:piece.stop * R]
        dW += matmul(buf[:n].reshape(m, K).T, d_buf[:m], out=part)   # (K, O') P^T dout
    folded = dW[:, :g * O].reshape(kh, kw_, C, g, O)      # [p, q', c, r, o]: the tap q = q' - s r of pixel r
    dW = np.ascontiguousarray(folded[:, :kw, :, 0])       # (kh, kw, C, O)
    for r in range(1, g):
        dW += folded[:, s * r:s * r + kw, :, r]
    if not input_grad:
        return None, dW, db
    a, b = -(-kh // s), -(-kw // s)
    H, W_ = x.shape[1:3]
    A, B = -(-H // s), -(-W_ // s)                        # phase grids: rows s A + r, columns s B + t
    padded = np.zeros((N, A + a - 1, B + b - 1, O), x.dtype)   # dout, a - 1 zeros in front
    padded[:, a - 1:a - 1 + Ho, b - 1:b - 1 + Wo] = dout
    phases = np.empty((N, A, B, s, s, C), x.dtype)        # dx by phase: [n, A, B, r, t, c]
    _patch_products(_patches(padded, a, b, 1), _input_gradient_weights(W, s),
                    phases.reshape(N * A * B, s * s * C))
    interleaved = phases.transpose(0, 1, 3, 2, 4, 5)      # [n, A, r, B, t, c]: dx's order, a view
    if A * s == H and B * s == W_:                        # one copy, straight into dx
        dx = np.empty_like(x)
        np.copyto(dx.reshape(N, A, s, B, s, C), interleaved)
        return dx, dW, db
    return np.ascontiguousarray(interleaved.reshape(N, A * s, B * s, C)[:, :H, :W_]), dW, db


def conv_init(rng, in_channels, channels, kernels):
    """Parameters [(W_1, b_1), ...] of a stack of convolutions with channels [O_1, ...] and
    square kernels [k_1, ...] on in_channels input channels: W_i ~ U(-c, c), c = sqrt(6 / fan_in)
    with fan_in = k_i^2 C_i (He uniform, as mlp_init for ReLU), b_i = 0; float64."""
    layers, C = [], int(in_channels)
    for O, k in zip(channels, kernels):
        bound = np.sqrt(6.0 / (k * k * C))
        layers.append((rng.uniform(-bound, bound, size=(k, k, C, O)), np.zeros(O)))
        C = O
    return layers


def convnet_output_shape(image_shape, channels, kernels, strides):
    """(Ho, Wo, O) of the last layer of a convnet on images of image_shape (H, W, C)."""
    H, W_ = image_shape[:2]
    for k, s in zip(kernels, strides):
        H, W_ = conv_output_size(H, k, s), conv_output_size(W_, k, s)
    return H, W_, channels[-1]


def convnet_forward(layers, strides, x, activation="relu"):
    """The convolutional core: each layer conv2d -> activation, then the last layer's maps
    flattened per image; spec/policy.md eq. (15).

    Symbol | Shape          | Meaning
    layers |                | [(W_i (k_i, k_i, C_i, O_i), b_i (O_i,)), ...] as from conv_init
    x      | (N, H, W, C)   | images (normalised), float32 or float64
    out    | (N, F)         | F = Ho Wo O of the last layer, in (i, j, o) order

    Every activation is flushed of float32 subnormals (relu_inplace, tanh_inplace), so each
    layer's patch matrix is too (spec/training.md eq. (12)).
    """
    _check_activation(activation)
    h = _floats(x)
    caches = []
    for (W, b), s in zip(layers, strides):
        h, conv_cache = conv2d_forward(h, W, b, s)        # (N, Ho, Wo, O)
        caches.append((conv_cache, _ACTIVATIONS_INPLACE[activation](h)))
    return h.reshape(h.shape[0], int(np.prod(h.shape[1:]))), (caches, h.shape)


def convnet_backward(dout, cache, input_grad=False):
    """(dx, grads) for :func:`convnet_forward`; grads = [(dW, db), ...] matching layers; dx is
    None unless input_grad (the core's input is an image: nothing upstream to train)."""
    caches, shape = cache
    dh = np.array(_floats(dout), copy=True).reshape(shape)   # (N, Ho, Wo, O) ours to write
    grads = []
    for i in reversed(range(len(caches))):
        conv_cache, deriv = caches[i]
        _times_derivative_flushed(dh, deriv)              # activation backward; float32 flushed
        dh, dW, db = conv2d_backward(dh, conv_cache, input_grad=input_grad or i > 0)
        grads.append((dW, db))
    return dh, grads[::-1]


# ----------------------------------------------------------------------------------------
# Sigmoid helpers, stable for any finite input
# ----------------------------------------------------------------------------------------

def sigmoid(x):
    """sigma(x) = 1 / (1 + exp(-x)), computed as exp(-log(1 + exp(-x))): no overflow, and
    relative accuracy is kept for large negative x (sigma(-40) ~ 4e-18, not 0)."""
    return np.exp(-np.logaddexp(0.0, -_floats(x)))


def log_sigmoid_pair(x):
    """(log sigma(x), log sigma(-x)) = (-log(1 + e^-x), -log(1 + e^x)) via np.logaddexp.

    Finite for every finite x and exact in the tails: log sigma(-1000) = -1000,
    log sigma(1000) = 0. Derivatives (used by :func:`log_sigmoid_pair_backward`):
    d log sigma(x) / dx = sigma(-x),   d log sigma(-x) / dx = -sigma(x).
    """
    x = _floats(x)
    return -np.logaddexp(0.0, -x), -np.logaddexp(0.0, x)


def log_sigmoid_pair_backward(d_pos, d_neg, x):
    """dx for :func:`log_sigmoid_pair` given upstream gradients of both outputs."""
    return d_pos * sigmoid(-x) - d_neg * sigmoid(x)


# ----------------------------------------------------------------------------------------
# GRU (Cho et al., 2014), gate convention of torch.nn.GRU
# ----------------------------------------------------------------------------------------

def gru_init(rng, input_dim, hidden_dim):
    """GRU parameters, gates packed in the order (r, z, n) along the last axis.

    The cell, for input x (B, I) and previous state h (B, Hd):
        r  = sigma(x W_ir + b_ir + h W_hr + b_hr)            reset gate
        z  = sigma(x W_iz + b_iz + h W_hz + b_hz)            update gate
        n  = tanh(x W_in + b_in + r * (h W_hn + b_hn))       candidate
        h' = (1 - z) * n + z * h
    with W_x = [W_ir | W_iz | W_in], W_h = [W_hr | W_hz | W_hn], b_x, b_h likewise.
    Every entry is drawn from U(-1/sqrt(Hd), 1/sqrt(Hd)), as torch.nn.GRU does.

    Key | Shape     | Meaning
    W_x | (I, 3Hd)  | input-to-gate weights
    W_h | (Hd, 3Hd) | state-to-gate weights
    b_x | (3Hd,)    | input-side biases
    b_h | (3Hd,)    | state-side biases (b_hn stays inside r * (...))
    """
    k = 1.0 / np.sqrt(hidden_dim)
    shapes = {"W_x": (input_dim, 3 * hidden_dim), "W_h": (hidden_dim, 3 * hidden_dim),
              "b_x": (3 * hidden_dim,), "b_h": (3 * hidden_dim,)}
    return {key: rng.uniform(-k, k, size=shape) for key, shape in shapes.items()}


def _check_sequences(x, lengths):
    """x as float64 (B, T, I) and lengths as int64 (B,) in [1, T]; None means every row is full."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"x must have shape (B, T, I), got {x.shape}")
    B, T, _ = x.shape
    if lengths is None:
        return x, np.full(B, T, dtype=np.int64)
    arr = np.asarray(lengths)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"lengths must hold integers, got dtype {arr.dtype}")
    if arr.shape != (B,):
        raise ValueError(f"lengths must have shape (B,) = ({B},), got {arr.shape}")
    if B and (arr.min() < 1 or arr.max() > T):
        raise ValueError(f"lengths must lie in [1, T] = [1, {T}], "
                         f"got values in [{arr.min()}, {arr.max()}]")
    return x, arr.astype(np.int64)


def _reverse_index(lengths, T):
    """(B, T) time index that reverses each row's valid part t < T_b and fixes the padding.

    It is its own inverse, so the same gather maps into and out of reversed time.
    """
    t = np.arange(T)[None, :]                             # (1, T)
    return np.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)  # (B, T)


def _gru_scan_forward(params, x, valid):
    """The recurrence from t = 0 with h_0 = 0 on checked inputs; valid (B, T) marks t < T_b."""
    W_x, W_h, b_x, b_h = params["W_x"], params["W_h"], params["b_x"], params["b_h"]
    B, T, _ = x.shape
    Hd = W_h.shape[0]
    x = np.where(valid[..., None], x, 0.0)                # (B, T, I) padding -> 0
    gx = x @ W_x + b_x                                    # (B, T, 3Hd) input side, all steps
    h = np.zeros((B, Hd))                                 # (B, Hd) h_0
    H = np.zeros((B, T, Hd))
    steps = []
    for t in range(T):
        gh = h @ W_h + b_h                                # (B, 3Hd)
        r = sigmoid(gx[:, t, :Hd] + gh[:, :Hd])           # (B, Hd)
        z = sigmoid(gx[:, t, Hd:2 * Hd] + gh[:, Hd:2 * Hd])  # (B, Hd)
        n = np.tanh(gx[:, t, 2 * Hd:] + r * gh[:, 2 * Hd:])  # (B, Hd)
        h_new = (1.0 - z) * n + z * h                     # (B, Hd)
        m = valid[:, t, None]                             # (B, 1)
        steps.append((h, r, z, n, gh[:, 2 * Hd:]))
        H[:, t] = np.where(m, h_new, 0.0)
        h = np.where(m, h_new, h)                         # state frozen past the row's end
    return H, (x, valid, params, steps)


def _gru_scan_backward(dH, cache):
    """(dx, dparams) for :func:`_gru_scan_forward`: backpropagation through time."""
    x, valid, params, steps = cache
    W_x, W_h = params["W_x"], params["W_h"]
    B, T, _ = x.shape
    Hd = W_h.shape[0]
    dH = np.where(valid[..., None], dH, 0.0)              # (B, T, Hd) padding ignored
    dgx = np.zeros((B, T, 3 * Hd))                        # (B, T, 3Hd)
    dW_h = np.zeros_like(W_h)                             # (Hd, 3Hd)
    db_h = np.zeros(3 * Hd)                               # (3Hd,)
    dh_next = np.zeros((B, Hd))                           # (B, Hd) dL/dh_t from steps > t
    for t in reversed(range(T)):
        h, r, z, n, ghn = steps[t]
        m = valid[:, t, None]                             # (B, 1)
        dh_new = np.where(m, dH[:, t] + dh_next, 0.0)     # (B, Hd) h_t = h_new where valid
        dh = np.where(m, 0.0, dh_next)                    # (B, Hd) h_t = h_{t-1} where frozen
        # h' = (1 - z) n + z h
        dn = dh_new * (1.0 - z)                           # (B, Hd)
        dz = dh_new * (h - n)                             # (B, Hd)
        dh += dh_new * z
        # n = tanh(a_n), a_n = gx_n + r * ghn
        da_n = dn * (1.0 - n ** 2)                        # (B, Hd)
        dr = da_n * ghn                                   # (B, Hd)
        # r = sigma(a_r), z = sigma(a_z); sigma' = sigma (1 - sigma)
        da_r = dr * r * (1.0 - r)                         # (B, Hd)
        da_z = dz * z * (1.0 - z)                         # (B, Hd)
        dgx[:, t] = np.concatenate([da_r, da_z, da_n], axis=1)          # (B, 3Hd)
        dgh = np.concatenate([da_r, da_z, da_n * r], axis=1)            # (B, 3Hd)
        # gh = h W_h + b_h
        dW_h += h.T @ dgh
        db_h += dgh.sum(axis=0)
        dh += dgh @ W_h.T
        dh_next = dh
    # gx = x W_x + b_x for all steps at once
    dx, dW_x, db_x = linear_backward(dgx, (x, W_x))       # dx: (B, T, I)
    dx = np.where(valid[..., None], dx, 0.0)              # exactly 0 at padding (dgx is 0 there)
    return dx, {"W_x": dW_x, "W_h": dW_h, "b_x": db_x, "b_h": db_h}


def gru_forward(params, x, lengths, reverse=False):
    """Run the GRU of :func:`gru_init` over padded sequences from h_0 = 0.

    Row b is read at t = 0 .. T_b - 1 (reverse=False) or t = T_b - 1 .. 0 (reverse=True): each row
    starts at its own end, so padding never reaches a valid output. The reverse pass reverses each
    row's valid part in time, runs the forward recurrence and reverses the result back. Padding in
    x is ignored (it may hold anything, NaN included) and H is exactly 0 there.

    Symbol  | Shape       | Meaning
    x       | (B, T, I)   | inputs
    lengths | (B,)        | ints in [1, T]; None means T for every row
    H       | (B, T, Hd)  | H[b, t] = state after reading x[b, t]; 0 for t >= T_b
    """
    x, lengths = _check_sequences(x, lengths)
    B, T, _ = x.shape
    valid = np.arange(T)[None, :] < lengths[:, None]      # (B, T)
    if not reverse:
        H, scan_cache = _gru_scan_forward(params, x, valid)
        return H, (scan_cache, None)
    rows = np.arange(B)[:, None]                          # (B, 1)
    idx = _reverse_index(lengths, T)                      # (B, T) an involution
    H, scan_cache = _gru_scan_forward(params, x[rows, idx], valid)  # (B, T, Hd) reversed time
    return H[rows, idx], (scan_cache, idx)


def gru_backward(dH, cache):
    """(dx, dparams) for :func:`gru_forward`; dparams has the keys of params.

    dH at padding is ignored; dx at padding is exactly 0.
    """
    scan_cache, idx = cache
    dH = np.asarray(dH, dtype=np.float64)                 # (B, T, Hd)
    if idx is None:
        return _gru_scan_backward(dH, scan_cache)
    rows = np.arange(idx.shape[0])[:, None]               # (B, 1)
    # the gathers x -> x[rows, idx] and H -> H[rows, idx] are permutations: their adjoint is
    # the same gather (idx is its own inverse)
    dx, dparams = _gru_scan_backward(dH[rows, idx], scan_cache)
    return dx[rows, idx], dparams


def bigru_forward(params_fwd, params_bwd, x, lengths):
    """Bidirectional GRU: H = [forward GRU | reverse GRU] along the last axis.

    Symbol | Shape        | Meaning
    x      | (B, T, I)    | inputs
    H      | (B, T, 2Hd)  | [:Hd] reads t = 0..T_b-1, [Hd:] reads t = T_b-1..0; 0 at padding
    """
    H_f, cache_f = gru_forward(params_fwd, x, lengths)                 # (B, T, Hd)
    H_b, cache_b = gru_forward(params_bwd, x, lengths, reverse=True)   # (B, T, Hd)
    return np.concatenate([H_f, H_b], axis=-1), (cache_f, cache_b, H_f.shape[-1])


def bigru_backward(dH, cache):
    """(dx, dparams_fwd, dparams_bwd) for :func:`bigru_forward`; x feeds both directions."""
    cache_f, cache_b, Hd = cache
    dx_f, dparams_fwd = gru_backward(dH[..., :Hd], cache_f)
    dx_b, dparams_bwd = gru_backward(dH[..., Hd:], cache_b)
    return dx_f + dx_b, dparams_fwd, dparams_bwd


# ----------------------------------------------------------------------------------------
# Log-probabilities
# ----------------------------------------------------------------------------------------

def log_softmax_forward(x):
    """out = x - log sum_k exp(x_k) along the last axis (max-shifted); the cache is out.

    Entries of -inf are allowed (probability 0) as long as each slice has a finite one.
    """
    x = _floats(x)
    m = np.max(x, axis=-1, keepdims=True)                 # (..., 1)
    out = x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))  # (..., K)
    return out, out


def log_softmax_backward(dout, cache):
    """dx = dout - softmax(x) * sum_k dout_k  (the Jacobian is I - 1 softmax^T per slice)."""
    p = np.exp(cache)                                     # (..., K)
    return dout - p * np.sum(dout, axis=-1, keepdims=True)


def gaussian_logpdf_forward(mu, a, sigma):
    """log N(a; mu, sigma^2 I) summed over the last axis, with a fixed scalar sigma > 0:
    logp = -|a - mu|^2 / (2 sigma^2) - A log sigma - (A / 2) log(2 pi).

    Symbol | Shape    | Meaning
    mu     | (..., A) | mean (the policy output)
    a      | (..., A) | action
    logp   | (...)    |
    """
    if isinstance(sigma, bool) or not isinstance(sigma, numbers.Real) or not sigma > 0:
        raise ValueError(f"sigma must be a positive real number, got {sigma!r}")
    mu = _floats(mu)
    diff = np.asarray(a, dtype=mu.dtype) - mu             # (..., A) in mu's precision
    A = diff.shape[-1]
    # the constants as Python floats, which do not promote a float32 sum to float64
    logp = (-0.5 * np.sum(diff ** 2, axis=-1) / sigma ** 2
            - float(A * np.log(sigma)) - float(0.5 * A * np.log(2.0 * np.pi)))  # (...)
    return logp, (diff, sigma)


def gaussian_logpdf_backward(dlogp, cache):
    """dmu = dlogp (a - mu) / sigma^2."""
    diff, sigma = cache
    return np.asarray(dlogp, dtype=diff.dtype)[..., None] * diff / sigma ** 2  # (..., A)


def gaussian_logstd_forward(mu, a, logstd):
    """log N(a; mu, diag(exp(2 logstd))) summed over the last axis, with a learned per-dimension
    log standard deviation (spec/policy.md eq. (9)):
    logp = -sum_d [ (a_d - mu_d)^2 exp(-2 s_d) / 2 + s_d ] - (A / 2) log(2 pi).

    Symbol | Shape    | Meaning
    mu     | (..., A) | mean (the policy output)
    a      | (..., A) | action
    logstd | (A,)     | s = log sigma per action dimension, any finite value
    logp   | (...)    |
    """
    mu = _floats(mu)
    s = np.asarray(logstd, dtype=mu.dtype)                # (A,)
    if s.shape != mu.shape[-1:] or not np.isfinite(s).all():
        raise ValueError(f"logstd must hold {mu.shape[-1]} finite numbers, got {np.asarray(logstd)!r}")
    diff = np.asarray(a, dtype=mu.dtype) - mu             # (..., A)
    inv_var = np.exp(-2.0 * s)                            # (A,)
    logp = (-0.5 * np.sum(diff ** 2 * inv_var, axis=-1) - np.sum(s)
            - float(0.5 * diff.shape[-1] * np.log(2.0 * np.pi)))                      # (...)
    return logp, (diff, inv_var)


def gaussian_logstd_backward(dlogp, cache):
    """(dmu (..., A), dlogstd (A,)): dmu = dlogp (a - mu) exp(-2 s); dlogstd_d = sum over the
    leading axes of dlogp ((a_d - mu_d)^2 exp(-2 s_d) - 1); spec/policy.md eq. (10)."""
    diff, inv_var = cache
    g = np.asarray(dlogp, dtype=diff.dtype)[..., None]   # (..., 1)
    dmu = g * diff * inv_var                              # (..., A)
    dlogstd = np.sum(g * (diff ** 2 * inv_var - 1.0), axis=tuple(range(diff.ndim - 1)))   # (A,)
    return dmu, dlogstd


def categorical_logp_forward(logits, a_int):
    """logp = log_softmax(logits)[..., a_int]: log-probability of integer actions.

    Symbol | Shape    | Meaning
    logits | (..., K) | unnormalised log-probabilities
    a_int  | (...)    | ints in [0, K)
    logp   | (...)    |
    """
    logits = _floats(logits)
    a_int = np.asarray(a_int)
    K = logits.shape[-1]
    if a_int.dtype.kind not in "iu" or a_int.shape != logits.shape[:-1]:
        raise ValueError(f"a_int must hold integers of shape {logits.shape[:-1]}, "
                         f"got dtype {a_int.dtype}, shape {a_int.shape}")
    if a_int.size and (a_int.min() < 0 or a_int.max() >= K):
        raise ValueError(f"a_int must lie in [0, K) = [0, {K}), "
                         f"got values in [{a_int.min()}, {a_int.max()}]")
    logq, lsm_cache = log_softmax_forward(logits)         # (..., K)
    logp = np.take_along_axis(logq, a_int[..., None], axis=-1)[..., 0]  # (...)
    return logp, (lsm_cache, a_int)


def categorical_logp_backward(dlogp, cache):
    """dlogits = dlogp (onehot(a) - softmax(logits))."""
    lsm_cache, a_int = cache
    dlogq = np.zeros(lsm_cache.shape, lsm_cache.dtype)    # (..., K) only entry a is read
    np.put_along_axis(dlogq, a_int[..., None], np.asarray(dlogp, dtype=lsm_cache.dtype)[..., None],
                      axis=-1)
    return log_softmax_backward(dlogq, lsm_cache)
