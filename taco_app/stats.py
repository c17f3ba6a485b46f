"""Statistics the reports need beyond NumPy. SciPy is imported only here and only when a t
interval is asked for: the core install (numpy, pyyaml) has no SciPy; the dial and test extras
bring it."""
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
