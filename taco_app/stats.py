"""Statistics the reports need beyond NumPy. SciPy is imported only here and only when a t
interval is asked for: the core install (numpy, pyyaml) has no SciPy; the dial and test extras
bring it."""
import numpy as np

from taco_ref import evaluate
from taco_sim.domain import MissingPackage


def t_quantile(q, dof):
    """Student's t quantile at q with dof degrees of freedom (scipy.stats.t.ppf); MissingPackage
    naming what to install when SciPy is not installed."""
    try:
        from scipy import stats
    except ModuleNotFoundError as err:
        raise MissingPackage("a t interval over seeds needs SciPy, which is not installed: "
                             "pip install 'taco_ref[dial]' (or pip install scipy)") from err
    return float(stats.t.ppf(q, dof))


def t_interval(values):
    """(mean, lo, hi): the mean of values and its 95 % Student t interval; lo and hi are None
    for fewer than two values."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if len(v) < 2:
        return mean, None, None
    half = float(t_quantile(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return mean, mean - half, mean + half


def seeds_difference_interval(pairs):
    """(mean, lo, hi): the mean over seeds of the paired difference of task accuracy p_a - p_b
    and its 95 % interval (spec/evaluation.md eq. (13)); lo and hi are None for one seed.
    pairs: one (outcomes_a, outcomes_b) per seed, the two models' 0/1 outcomes on that seed's
    test tasks (task j the same task in both).

    The interval is the t interval over the seeds' differences, widened where needed to hold the
    paired interval (eq. (6)) of every seed's tasks pooled. The t interval alone rests on the
    seeds' sample spread, which with a few seeds can be near 0 by chance, and is exactly 0 when
    every seed completes every task (or none): [+0.0, +0.0] would claim a certainty that a few
    hundred test tasks cannot give. The pooled paired interval is what the test tasks alone leave
    uncertain, so no interval over seeds is narrower than it."""
    if not pairs:
        raise ValueError("seeds_difference_interval: expected one (outcomes_a, outcomes_b) pair "
                         "per seed, got none")
    mean, t_lo, t_hi = t_interval([evaluate.paired_difference_interval(a, b)[0] for a, b in pairs])
    if t_lo is None:
        return mean, None, None
    pooled_a = [c for a, _ in pairs for c in a]
    pooled_b = [c for _, b in pairs for c in b]
    d, lo, hi = evaluate.paired_difference_interval(pooled_a, pooled_b)
    # the pooled interval is centred on the pooled difference, which is the mean over seeds when
    # every seed has as many tasks; with unequal counts its width is kept, around the mean
    return mean, min(t_lo, mean - (d - lo)), max(t_hi, mean + (hi - d))
