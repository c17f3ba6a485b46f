"""The basic layers: the float32 subnormal flush, the one matrix product (`matmul`) and its census,
the affine layer, ReLU and tanh, and the stable sigmoid helpers (spec/training.md eq. (12))."""
import contextlib

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
