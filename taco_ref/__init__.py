"""taco_ref: a NumPy reference implementation of TACO (Shiarlis et al., ICML 2018).

The alignment core lives in :mod:`taco_ref.align`; spec/ derives every equation it uses.
"""
__version__ = "0.1.0"
