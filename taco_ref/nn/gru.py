"""GRU (Cho et al., 2014), gate convention of torch.nn.GRU, and the bidirectional GRU of CTC-BC."""
import numpy as np

from taco_ref.lengths import checked_lengths
from taco_ref.nn.layers import linear_backward, sigmoid


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
    return x, checked_lengths(lengths, "lengths", B, T, "T")


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
