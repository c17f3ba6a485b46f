"""What a grid will cost before it runs: CPU seconds per demonstration pass of one cell, by domain
and algorithm, measured on committed grids (the median over their cells of cpu_seconds, or wall
seconds where a grid's cells predate cpu_seconds, over demonstration_passes). A cell's passes are
what its training reads: epochs x the whole passes an epoch makes over the training set
(spec/training.md eq. (11): a Nav-World set of 45 demonstrations is read 8 times an epoch, one of
900 once) x the training demonstrations. `taco experiment` and `taco demo` multiply, and say the
total before they start. An estimate, not a promise: cells with
early stopping end sooner, a loaded machine takes longer, another CPU differs
(tests/test_costs.py holds each figure to its grid's cells).
"""

COSTS = {
    # domain, algo: (CPU seconds per demonstration pass, the grid measured)
    ("navworld", "taco"): (7.01e-4, "navworld-recipe"),
    ("navworld", "gtbc"): (3.73e-4, "navworld-recipe"),
    ("navworld", "ctcbc-mlp"): (6.9e-4, "navworld-recipe"),
    ("navworld", "ctcbc-gru"): (4.34e-3, "navworld-recipe"),
    ("navworld", "compile"): (0.0203, "navworld"),
    ("dial", "taco"): (0.0343, "dial"),
    ("dial", "gtbc"): (0.0212, "dial"),
    ("dial", "ctcbc-mlp"): (7.65e-3, "archive/dial-stop-once"),
    ("dial", "ctcbc-gru"): (0.0275, "archive/dial-stop-once"),
    ("dial-image-small", "taco"): (0.148, "dial-image-small-trained-core"),
    ("dial-image-small", "gtbc"): (0.107, "dial-image-small-trained-core"),
    ("dial-image-small", "ctcbc-mlp"): (0.435, "dial-image-small-trained-core"),
    ("dial-image-small", "ctcbc-gru"): (0.535, "dial-image-small-trained-core"),
    ("dial-image", "taco"): (0.132, "dial-image"),
    ("dial-image", "gtbc"): (0.0975, "dial-image"),
    ("craft", "taco"): (4.06e-3, "archive/craft-planner"),
    ("craft", "gtbc"): (2.59e-3, "archive/craft-planner"),
    ("craft", "ctcbc-mlp"): (1.48e-3, "archive/craft-planner"),
    ("craft", "ctcbc-gru"): (2.58e-3, "archive/craft-planner"),
    ("craft-holdout", "taco"): (8.27e-3, "archive/craft-holdout-planner"),
    ("craft-holdout", "gtbc"): (6.52e-3, "archive/craft-holdout-planner"),
    ("craft-holdout", "ctcbc-mlp"): (1.52e-3, "archive/craft-holdout-planner"),
    ("craft-holdout", "ctcbc-gru"): (4.77e-3, "archive/craft-holdout-planner"),
}
SAME_COST = {"dial-velocity": "dial"}
"""Domains whose cells cost what another's do (the same arm, nets and data sizes)."""


def demonstration_passes(cell):
    """Demonstrations a cell's training reads: epochs x passes_per_epoch(epoch_size, n_train) x
    n_train, n_train its size less the held-out share (its config's, TrainConfig's defaults
    where it gives none)."""
    from taco_ref import data, train
    from taco_ref.config import TrainConfig
    cfg, default = cell["config"], TrainConfig
    n_train = cell["size"] - data.holdout_count(cell["size"], cfg.get("holdout_fraction", default.holdout_fraction))
    per_epoch = train.passes_per_epoch(cfg.get("epoch_size", default.epoch_size), n_train)
    return cfg.get("epochs", default.epochs) * per_epoch * n_train


def cell_seconds(cell):
    """Estimated CPU seconds of one cell (experiment.run's cell dict), or None when no grid of its
    domain and algorithm was measured."""
    domain = SAME_COST.get(cell["domain"], cell["domain"])
    found = COSTS.get((domain, cell["algo"]))
    if found is None:
        return None
    return found[0] * demonstration_passes(cell)


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
