"""Dropout (the STOP nets', paper appendix A): the mask and its forward/backward pair."""
import numbers

import numpy as np

from taco_ref.nn.layers import _floats


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
