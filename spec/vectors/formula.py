"""Expand the compact inputs of the long conformance cases (spec/vectors/README.md, "Formula inputs").

A long case stores an input array not as numbers but as a formula object:

    {"formula": "splitmix64-dyadic", "shape": [B, T, L], "seed": s,
     "lo": lo, "hi": hi, "step": step,
     "set": [{"b": [b0, b1], "t": [t0, t1], "l": [l0, l1], "value": v}, ...]}

Entry i (flat index in row-major order) is lo + step * (splitmix64(seed, i) mod m), with
m = (hi - lo) / step + 1, an integer. step is a power of two and lo, hi are multiples of it, so
every value is a float64 computed exactly, the same in every language. Then each "set" block
(half-open index ranges; for a (B, L) array the "t" range is absent) is overwritten with its
value, in order; value may be "-inf", "inf" or "nan".

splitmix64 (Steele, Lea and Flood 2014) with counter i:
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) mod 2^64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) mod 2^64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) mod 2^64
    z = z ^ (z >> 31)

Plain Python (no numpy), so that it reads as the definition. ``expand(obj)`` returns nested
lists of floats with the object's shape.
"""
import math

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
NAME = "splitmix64-dyadic"


def splitmix64(seed, i):
    z = (seed + (i + 1) * GAMMA) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _number(v):
    return float(v) if isinstance(v, str) else v


def _nest(flat, shape):
    if len(shape) == 1:
        return flat
    n = len(flat) // shape[0]
    return [_nest(flat[k * n:(k + 1) * n], shape[1:]) for k in range(shape[0])]


def expand(obj):
    """The array a formula object stands for, as nested lists of floats."""
    if obj.get("formula") != NAME:
        raise ValueError(f"unknown formula {obj.get('formula')!r}; expected {NAME!r}")
    shape, seed = list(obj["shape"]), obj["seed"]
    lo, hi, step = (_number(obj[k]) for k in ("lo", "hi", "step"))
    m = round((hi - lo) / step) + 1
    if lo + (m - 1) * step != hi or math.frexp(step)[0] != 0.5:
        raise ValueError("formula: step must be a power of two dividing hi - lo")
    n = math.prod(shape)
    flat = [lo + step * (splitmix64(seed, i) % m) for i in range(n)]
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    axes = ("b", "t", "l") if len(shape) == 3 else ("b", "l")
    for block in obj.get("set", []):
        value = _number(block["value"])
        ranges = [range(*block[a]) for a in axes]
        for idx in _product(ranges):
            flat[sum(i * s for i, s in zip(idx, strides))] = value
    return _nest(flat, shape)


def _product(ranges):
    if not ranges:
        yield ()
        return
    for i in ranges[0]:
        for rest in _product(ranges[1:]):
            yield (i,) + rest
