"""Log-probabilities: log-softmax, the Gaussian (fixed and learned sigma) and categorical action
log-likelihoods."""
import numbers

import numpy as np

from taco_ref.nn.layers import _floats


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
