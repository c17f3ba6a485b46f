"""What a grid will cost before it runs: CPU seconds per training demonstration of one cell, by
domain and algorithm, measured on committed grids (the median over their cells of
cpu_seconds / size, or wall seconds where a grid's cells predate cpu_seconds), at the epochs of
the config those cells ran. `taco experiment` multiplies by each cell's size and its epochs over
the measured ones, and says the total before it starts. An estimate, not a promise: cells with
early stopping end sooner, a loaded machine takes longer, another CPU differs
(tests/test_costs.py holds each figure to its grid's cells).
"""

COSTS = {
    # domain, algo: (CPU seconds per demonstration, epochs of the measured config, the grid)
    ("navworld", "taco"): (0.077, 300, "navworld-demo-float32"),
    ("navworld", "gtbc"): (0.033, 300, "navworld-demo-float32"),
    ("navworld", "ctcbc-mlp"): (0.060, 300, "navworld-demo-float32"),
    ("navworld", "ctcbc-gru"): (0.63, 300, "archive/navworld-constant"),
    ("navworld", "compile"): (44.0, 300, "navworld"),
    ("dial", "taco"): (1.7, 60, "dial"),
    ("dial", "gtbc"): (0.99, 60, "dial"),
    ("dial", "ctcbc-mlp"): (0.41, 60, "archive/dial-stop-once"),
    ("dial", "ctcbc-gru"): (1.49, 60, "archive/dial-stop-once"),
    ("dial-image-small", "taco"): (8.0, 60, "dial-image-small-trained-core"),
    ("dial-image-small", "gtbc"): (5.8, 60, "dial-image-small-trained-core"),
    ("dial-image-small", "ctcbc-mlp"): (23.5, 60, "dial-image-small-trained-core"),
    ("dial-image-small", "ctcbc-gru"): (28.9, 60, "dial-image-small-trained-core"),
    ("dial-image", "taco"): (7.1, 60, "dial-image"),
    ("dial-image", "gtbc"): (5.3, 60, "dial-image"),
    ("craft", "taco"): (0.55, 150, "archive/craft-planner"),
    ("craft", "gtbc"): (0.35, 150, "archive/craft-planner"),
    ("craft", "ctcbc-mlp"): (0.20, 150, "archive/craft-planner"),
    ("craft", "ctcbc-gru"): (0.35, 150, "archive/craft-planner"),
    ("craft-holdout", "taco"): (1.1, 150, "archive/craft-holdout-planner"),
    ("craft-holdout", "gtbc"): (0.88, 150, "archive/craft-holdout-planner"),
    ("craft-holdout", "ctcbc-mlp"): (0.21, 150, "archive/craft-holdout-planner"),
    ("craft-holdout", "ctcbc-gru"): (0.64, 150, "archive/craft-holdout-planner"),
}
SAME_COST = {"dial-velocity": "dial"}
"""Domains whose cells cost what another's do (the same arm, nets and data sizes)."""


def cell_seconds(cell):
    """Estimated CPU seconds of one cell (experiment.run's cell dict), or None when no grid of its
    domain and algorithm was measured."""
    domain = SAME_COST.get(cell["domain"], cell["domain"])
    found = COSTS.get((domain, cell["algo"]))
    if found is None:
        return None
    per_demo, epochs, _ = found
    ran = cell["config"].get("epochs", epochs)
    return per_demo * cell["size"] * ran / epochs


def wall_seconds(cells, workers):
    """Expected wall seconds of cells on workers local processes (the longest first, each on the
    first free worker), or None when a cell has no measured cost."""
    seconds = sorted((cell_seconds(c) for c in cells), key=lambda s: -(s or 0))
    if any(s is None for s in seconds):
        return None
    busy = [0.0] * max(1, workers)
    for s in seconds:
        busy[busy.index(min(busy))] += s
    return max(busy)


def announce(cells, todo, workers):
    """The line `taco experiment` prints before it starts: how many cells, how many are already
    finished, and the estimated CPU time of the rest (and its wall time on `workers`)."""
    seconds = [cell_seconds(c) for c in todo]
    known = [s for s in seconds if s is not None]
    head = (f"{len(cells)} cell{'s' if len(cells) != 1 else ''}: {len(cells) - len(todo)} already "
            f"finished in --out, {len(todo)} to compute")
    if not todo:
        return head
    return head + (": " if any(s is not None for s in seconds) else " ") + estimate(todo, workers)


def estimate(cells, workers):
    """The cost of computing cells on workers local processes, in words: the CPU time and the
    wall time (the longest cells first, wall_seconds), as the committed grids measured them."""
    seconds = [cell_seconds(c) for c in cells]
    known = [s for s in seconds if s is not None]
    if not known:
        return "(no measured cost for this domain and algorithm)"
    hours = sum(known) / 3600
    wall = (wall_seconds(cells, workers) or sum(known) / max(1, min(workers, len(cells)))) / 3600
    missing = "" if len(known) == len(cells) else f", {len(cells) - len(known)} cells without a measured cost"
    about = "" if hours < 1 / 60 else "about "
    return (f"{about}{_hours(hours)} of CPU, {_hours(wall)} on {workers} worker"
            f"{'s' if workers != 1 else ''}{missing} (measured on committed grids; early stopping ends "
            f"some sooner)")


def _hours(h):
    if h < 1 / 60:
        return "under a minute"
    return f"{60 * h:.0f} min" if h < 1 else f"{h:.1f} h"
