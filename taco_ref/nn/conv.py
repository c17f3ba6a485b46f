"""Convolution (channels-last, 'valid') and the convolutional core of the image policies
(spec/policy.md §10)."""
from typing import NamedTuple

import numpy as np

from taco_ref.nn.layers import _floats, matmul
from taco_ref.nn.mlp_fast import _ACTIVATIONS_INPLACE, _check_activation, _times_derivative_flushed
from taco_ref.nn.workspace import array as _array


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


def _patch_products(windows, W_mat, out_rows, scope=None):
    """out_rows = P W_mat for the patch matrix P of windows (N, Ho, Wo, a, b, C), built and
    multiplied a few images at a time (im2col + GEMM). out_rows: (N Ho Wo, O) contiguous.
    scope: where the piece buffers live (nn.workspace), or None (fresh)."""
    N, Ho, Wo = windows.shape[:3]
    K, O = W_mat.shape
    W_pad = _padded_columns(W_mat)                        # (K, O') O' >= O
    pieces = _chunks(N, Ho * Wo, K, windows.itemsize)
    per = pieces[0].stop - pieces[0].start if pieces else 0
    buf = _array(scope, "patches", (per,) + windows.shape[1:], windows.dtype)
    prod = _array(scope, "products", (per * Ho * Wo, W_pad.shape[1]), windows.dtype)
    for piece in pieces:
        m = (piece.stop - piece.start) * Ho * Wo
        np.copyto(buf[:piece.stop - piece.start], windows[piece])     # im2col of these images
        rows = slice(piece.start * Ho * Wo, piece.stop * Ho * Wo)
        if W_pad is W_mat:
            matmul(buf[:piece.stop - piece.start].reshape(m, K), W_mat, out=out_rows[rows])
        else:
            matmul(buf[:piece.stop - piece.start].reshape(m, K), W_pad, out=prod[:m])  # (m, O')
            out_rows[rows] = prod[:m, :O]


def conv2d_forward(x, W, b, stride, scope=None):
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
    scope  |                  | where out and the piece buffers live (nn.workspace), or None:
           |                  | fresh arrays
    """
    x, W, stride = _check_conv(x, W, b, stride)
    N, O = x.shape[0], W.shape[3]
    windows, g, Ho, Wo = _folded_windows(x, W, stride)   # (N, Ho, Wo / g, kh, s (g - 1) + kw, C) a view
    out = _array(scope, "out", (N, Ho, Wo, O), x.dtype)   # rows (n, i, J) x columns (r, o): the same memory
    _patch_products(windows, _folded_weights(W, stride, g), out.reshape(N * Ho * Wo // g, g * O), scope)
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


def conv2d_backward(dout, cache, input_grad=True, scope=None):
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
    data). scope: where dx and the temporaries live (nn.workspace), or None (fresh); dW and db
    are always fresh.
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
    buf = _array(scope, "patches", (per,) + windows.shape[1:], x.dtype)
    d_buf = _array(scope, "d_rows", (per * R, O_pad), x.dtype, zero=True)   # dout's rows of a piece, zeros past g O
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
    padded = _array(scope, "d_padded", (N, A + a - 1, B + b - 1, O), x.dtype, zero=True)   # dout, a - 1 zeros in front
    padded[:, a - 1:a - 1 + Ho, b - 1:b - 1 + Wo] = dout
    phases = _array(scope, "dx_phases", (N, A, B, s, s, C), x.dtype)   # dx by phase: [n, A, B, r, t, c]
    _patch_products(_patches(padded, a, b, 1), _input_gradient_weights(W, s),
                    phases.reshape(N * A * B, s * s * C), None if scope is None else scope.sub("dx."))
    interleaved = phases.transpose(0, 1, 3, 2, 4, 5)      # [n, A, r, B, t, c]: dx's order, a view
    dx = _array(scope, "dx", x.shape, x.dtype)
    if A * s == H and B * s == W_:                        # one copy, straight into dx
        np.copyto(dx.reshape(N, A, s, B, s, C), interleaved)
    else:                                                 # the phase grids overhang: cut to H x W
        np.copyto(dx, interleaved.reshape(N, A * s, B * s, C)[:, :H, :W_])
    return dx, dW, db


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


def convnet_forward(layers, strides, x, activation="relu", scope=None):
    """The convolutional core: each layer conv2d -> activation, then the last layer's maps
    flattened per image; spec/policy.md eq. (15).

    Symbol | Shape          | Meaning
    layers |                | [(W_i (k_i, k_i, C_i, O_i), b_i (O_i,)), ...] as from conv_init
    x      | (N, H, W, C)   | images (normalised), float32 or float64
    out    | (N, F)         | F = Ho Wo O of the last layer, in (i, j, o) order
    scope  |                | where the activations and the backward pass's temporaries live
           |                | (nn.workspace: a training step's, reused the next step), or None

    Every activation is flushed of float32 subnormals (relu_inplace, tanh_inplace), so each
    layer's patch matrix is too (spec/training.md eq. (12)).
    """
    _check_activation(activation)
    h = _floats(x)
    caches = []
    for i, ((W, b), s) in enumerate(zip(layers, strides)):
        h, conv_cache = conv2d_forward(h, W, b, s, _layer(scope, i))   # (N, Ho, Wo, O)
        caches.append((conv_cache, _ACTIVATIONS_INPLACE[activation](h)))
    return h.reshape(h.shape[0], int(np.prod(h.shape[1:]))), ConvnetCache(caches, h.shape, scope)


class ConvnetCache(NamedTuple):
    """convnet_forward's cache: per layer (conv2d's cache, the activation's derivative), the last
    layer's output shape (N, Ho, Wo, O) and the workspace scope (or None)."""
    layers: list
    out_shape: tuple
    scope: object


def _layer(scope, i):
    """Layer i's part of scope (None stays None)."""
    return None if scope is None else scope.sub(f"layer{i}.")


def convnet_backward(dout, cache, input_grad=False):
    """(dx, grads) for :func:`convnet_forward`; grads = [(dW, db), ...] matching layers; dx is
    None unless input_grad (the core's input is an image: nothing upstream to train). With a
    workspace scope (the forward pass's), dx lives there too, and a forward pass of an earlier
    step raises."""
    caches, shape, scope = cache.layers, cache.out_shape, cache.scope
    if scope is not None:
        scope.check()
    dout = _floats(dout)
    dh = _array(scope, "d_features", shape, dout.dtype)   # (N, Ho, Wo, O) ours to write
    np.copyto(dh, dout.reshape(shape))
    grads = []
    for i in reversed(range(len(caches))):
        conv_cache, deriv = caches[i]
        _times_derivative_flushed(dh, deriv)              # activation backward; float32 flushed
        dh, dW, db = conv2d_backward(dh, conv_cache, input_grad=input_grad or i > 0,
                                     scope=_layer(scope, i))
        grads.append((dW, db))
    return dh, grads[::-1]
