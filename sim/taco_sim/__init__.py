"""taco_sim: the domains (Nav-World, the MuJoCo JACO Dial pad), each registered on the domain
contract of taco_sim.domain: ``taco_sim.get("navworld")`` is the Domain, ``taco_sim.names()``
lists them."""
import numpy as np

from taco_sim.domain import (Domain, DomainUnavailable, available_names, get, names, package_file, register,
                             shipped_models)

__all__ = ["Domain", "DomainUnavailable", "available_names", "get", "names", "package_file", "register",
           "shipped_models", "sketch_array"]


def sketch_array(sketches, K, sketch_len=None, what="sub-task ids"):
    """sketches as an (n, L) int64 array of ids in [0, K) (one (L,) sketch becomes (1, L));
    ValueError naming the problem otherwise. Each domain adds its own rule on the order."""
    arr = np.asarray(sketches)
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] < 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"sketch: expected integer {what} of shape (L,) or (n, L), got {arr.shape}")
    arr = arr.astype(np.int64)
    if sketch_len is not None and arr.shape[1] != sketch_len:
        raise ValueError(f"sketches: expected length sketch_len = {sketch_len}, got {arr.shape[1]}")
    out_of_range = ((arr < 0) | (arr >= K)).any(axis=1)                 # (n,)
    if out_of_range.any():
        raise ValueError(f"sketch: {what} must be in [0, {K}), got {arr[out_of_range][0].tolist()}")
    return arr
