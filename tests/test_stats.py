"""The interval over seeds of a paired difference of task accuracy (taco_app.stats)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from scipy import stats as scipy_stats

from taco_app import stats
from taco_ref import evaluate


def _t_interval(diffs):
    d = np.asarray(diffs, dtype=float)
    half = scipy_stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return d.mean() - half, d.mean() + half


@given(st.integers(2, 5), st.integers(1, 60), st.floats(0, 1), st.floats(0, 1), st.integers(0, 2**31))
def test_the_interval_over_seeds_is_never_narrower_than_the_pooled_tasks_allow(n, m, pa, pb, seed):
    """spec/evaluation.md eq. (13): for any seeds' outcomes the interval holds the t interval
    over the seeds and the pooled paired interval (eq. 6) moved onto the mean; with every
    task of every seed completed by both models it is the pooled interval, not [0, 0]."""
    rng = np.random.default_rng(seed)
    pairs = [((rng.random(m) < pa).astype(int), (rng.random(m) < pb).astype(int)) for _ in range(n)]
    mean, lo, hi = stats.seeds_difference_interval(pairs)
    diffs = [evaluate.paired_difference_interval(a, b)[0] for a, b in pairs]
    assert mean == pytest.approx(np.mean(diffs))
    t_lo, t_hi = _t_interval(diffs)
    d, p_lo, p_hi = evaluate.paired_difference_interval(np.concatenate([a for a, _ in pairs]),
                                                        np.concatenate([b for _, b in pairs]))
    assert d == pytest.approx(mean)                    # as many tasks in every seed
    assert lo <= min(t_lo, p_lo) + 1e-12 and hi >= max(t_hi, p_hi) - 1e-12
    assert lo == pytest.approx(min(t_lo, p_lo)) and hi == pytest.approx(max(t_hi, p_hi))

    ceiling = [("1" * 500, "1" * 500)] * 3             # every seed completes every PIN
    mean, lo, hi = stats.seeds_difference_interval(ceiling)
    _, p_lo, p_hi = evaluate.paired_difference_interval("1" * 1500, "1" * 1500)
    assert mean == 0 and lo == pytest.approx(p_lo) and hi == pytest.approx(p_hi) and lo < 0 < hi


def test_the_interval_over_seeds_is_the_t_interval_when_the_seeds_disagree():
    """spec/evaluation.md eq. (13): seeds whose differences spread more than their tasks' own
    uncertainty get the plain t interval; one seed gets no interval; no seed is an error."""
    rng = np.random.default_rng(1)
    pairs = []
    for pa, pb in [(0.9, 0.5), (0.6, 0.6), (0.5, 0.9)]:
        pairs.append(((rng.random(400) < pa).astype(int), (rng.random(400) < pb).astype(int)))
    mean, lo, hi = stats.seeds_difference_interval(pairs)
    diffs = [a.mean() - b.mean() for a, b in pairs]
    assert (lo, hi) == pytest.approx(_t_interval(diffs))
    assert stats.seeds_difference_interval(pairs[:1])[1:] == (None, None)
    with pytest.raises(ValueError, match="pair"):
        stats.seeds_difference_interval([])


def test_the_95_percent_t_quantile_needs_no_scipy():
    """The core install has no SciPy, and a multi-seed grid computed every cell before failing
    on its report: the 95 % quantile comes from T975 and, beyond 30 degrees of freedom, the
    Cornish-Fisher expansion, within 3e-8 of scipy.stats.t.ppf at every dof to 400 and beyond."""
    from taco_app import stats
    for dof in [*range(1, 401), 1000, 5000, 10 ** 6]:
        assert abs(stats._t975(dof) - scipy_stats.t.ppf(0.975, dof)) < 3e-8, dof


def test_a_grid_reports_its_intervals_on_the_core_install(monkeypatch):
    """With SciPy unimportable, t_quantile still gives the 95 % quantile (the report's t
    intervals) and names what to install for any other."""
    import builtins
    from taco_app import stats
    real = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name == "scipy" or name.startswith("scipy."):
            raise ModuleNotFoundError("No module named 'scipy'", name="scipy")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_scipy)
    assert stats.t_quantile(0.975, 4) == stats.T975[3]
    mean, lo, hi = stats.t_interval([1.0, 2.0, 3.0])
    assert (lo, hi) == (2.0 - stats.T975[1] / np.sqrt(3), 2.0 + stats.T975[1] / np.sqrt(3))
    with pytest.raises(stats.MissingSciPy, match="pip install"):
        stats.t_quantile(0.9, 4)
