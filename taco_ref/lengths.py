"""Per-row lengths of a padded batch, checked where they enter: the alignment's traj_len and
sketch_len (spec/align.md §9) and the GRU's lengths share this one check, so their errors read
alike."""
import numpy as np


def checked_lengths(x, name, B, bound, symbol):
    """Validated per-row lengths (B,) int64 in [1, bound]; None means bound for every row.

    name is the argument's name and symbol the bound's (T or L), both as the error gives them.
    """
    if x is None:
        return np.full(B, bound, dtype=np.int64)
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.shape != (B,):
        raise ValueError(f"{name} must have shape (B,) = ({B},), got {arr.shape}")
    if B and (arr.min() < 1 or arr.max() > bound):
        raise ValueError(f"{name} must lie in [1, {symbol}] = [1, {bound}], "
                         f"got values in [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)
