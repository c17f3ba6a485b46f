"""Statistics the reports need beyond NumPy. SciPy is imported only here and only when a t
interval is asked for; the core install (numpy, pyyaml) has no SciPy, and the 95 % intervals every
report uses are computed without it (T975)."""
from statistics import NormalDist

import numpy as np

from taco_ref import evaluate


class MissingSciPy(ImportError):
    """A statistic that needs SciPy, asked for on an install without it; the message says what to
    install (`taco` exits with its I/O code, as for a missing MuJoCo)."""

T975 = (12.706204736175, 4.302652729749, 3.182446305284, 2.776445105198, 2.570581835636, 2.446911851145,
        2.364624251593, 2.306004135204, 2.262157162798, 2.228138851986, 2.200985160092, 2.178812829667,
        2.160368656463, 2.144786687918, 2.13144954556, 2.119905299221, 2.109815577833, 2.100922040241,
        2.093024054408, 2.085963447266, 2.079613844728, 2.073873067904, 2.068657610419, 2.063898561628,
        2.059538552753, 2.055529438643, 2.05183051648, 2.048407141795, 2.045229642133, 2.042272456301)
"""Student's t quantile at 0.975 for 1-30 degrees of freedom (scipy.stats.t.ppf, to 12 decimals):
the intervals of every report, without SciPy on the core install."""


def _t975(dof):
    """t quantile at 0.975: T975 up to 30 degrees of freedom, beyond them the Cornish-Fisher
    expansion in the normal quantile z to the fourth order of 1/dof (within 3e-8 of scipy's
    from 31 on; Abramowitz and Stegun 26.7.5)."""
    if dof <= len(T975):
        return T975[dof - 1]
    z = NormalDist().inv_cdf(0.975)
    g = ((z ** 3 + z) / 4, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
         (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
         (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(gi / dof ** (i + 1) for i, gi in enumerate(g))


def t_quantile(q, dof):
    """Student's t quantile at q with dof degrees of freedom: scipy.stats.t.ppf, or without SciPy
    at q = 0.975 (the 95 % intervals of the reports) _t975; MissingSciPy naming what to
    install for another q on an install without SciPy."""
    try:
        from scipy import stats
    except ModuleNotFoundError as err:
        if q == 0.975 and int(dof) == dof and dof >= 1:
            return _t975(int(dof))
        raise MissingSciPy("a t quantile other than the 95 % interval's needs SciPy, which is not "
                             "installed: pip install 'taco_ref[dial]' (or pip install scipy)") from err
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


def effective_tasks(domain, sketches):
    """How many independent test tasks the sketches are worth (spec/evaluation.md eq. (14)): on a
    domain whose tasks each draw their own layout, every sketch; on one whose test tasks share
    one layout (Domain.one_layout: the Dial's standard keypad) the distinct sub-task transitions
    (START -> b_1 and b_i -> b_{i+1}) they contain, when fewer. A sub-policy that fails one move
    on the one layout fails every sketch that makes it, so M sketches carry no more independent
    evidence than their distinct moves."""
    if not domain.one_layout:
        return len(sketches)
    moves = set()
    for row in sketches:
        previous = -1
        for k in evaluate.unpad(row):
            moves.add((previous, int(k)))
            previous = int(k)
    return min(len(sketches), len(moves))


def pooled_interval(pairs, effective=None):
    """(d, lo, hi): the paired interval (eq. (6)) of every seed's tasks pooled, counted as
    sum(effective) independent tasks where effective is given (eq. (14)): eq. (13)'s floor."""
    return evaluate.paired_difference_interval([c for a, _ in pairs for c in a], [c for _, b in pairs for c in b],
                                               effective=None if effective is None else sum(effective))


def seeds_difference_interval(pairs, effective=None):
    """(mean, lo, hi): the mean over seeds of the paired difference of task accuracy p_a - p_b
    and its 95 % interval (spec/evaluation.md eq. (13)); lo and hi are None for one seed.
    pairs: one (outcomes_a, outcomes_b) per seed, the two models' 0/1 outcomes on that seed's
    test tasks (task j the same task in both). effective: one number per seed, the independent
    tasks its outcomes are worth (effective_tasks); None: every task independent.

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
    d, lo, hi = pooled_interval(pairs, effective)
    # the pooled interval is centred on the pooled difference, which is the mean over seeds when
    # every seed has as many tasks; with unequal counts its width is kept, around the mean
    return mean, min(t_lo, mean - (d - lo)), max(t_hi, mean + (hi - d))


def seeds_to_decide(values, decided_half, floor=0.0, most=10_000):
    """The least number of seeds n whose 95 % t interval, at the mean and sample spread of
    values, would be narrower than decided_half on each side, the half-width a verdict needs
    (taco_app.claims: the distance from the mean to the nearest bound that decides it); floor:
    a half-width the pooled test tasks give at len(values) seeds, shrinking as 1/sqrt(n) (eq.
    (13)'s). None when no n up to `most` does (the mean sits on the bound)."""
    v = np.asarray(values, dtype=float)
    if decided_half <= 0 or len(v) < 2:
        return None
    sd, n0 = float(v.std(ddof=1)), len(v)
    for n in range(2, most + 1):
        half = max(t_quantile(0.975, n - 1) * sd / np.sqrt(n), floor * np.sqrt(n0 / n))
        if half < decided_half:
            return n
    return None
