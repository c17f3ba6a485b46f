"""Bounds and checks of config values that the config and the algorithms' own sections both
use: a leaf module (NumPy-free, it imports nothing of taco_ref), so that taco_ref.config, which
builds TrainConfig from the algorithms' sections, and the algorithms, which check their own
fields, never import each other."""

DTYPES = ("float64", "float32")
"""Float types a net may compute in."""
MAX_WIDTH, MAX_LAYERS = 65536, 16
"""Bounds on the hidden sizes a config may ask for (the paper's largest layer is 400 wide)."""


def check_sizes(name, sizes):
    """ValueError naming the field unless sizes is a list of 1 to MAX_LAYERS widths in [1, MAX_WIDTH]."""
    if (not isinstance(sizes, list) or not 1 <= len(sizes) <= MAX_LAYERS
            or not all(isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= MAX_WIDTH
                       for h in sizes)):
        raise ValueError(f"{name} must be a list of 1 to {MAX_LAYERS} integers in "
                         f"[1, {MAX_WIDTH}], got {sizes!r}")
