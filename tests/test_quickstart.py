"""The Python quick-start of taco_ref's docstring and docs/python.md, run as doctests: what a
user copies first must run as written. Slow tier: each trains a model and runs the shipped Dial
model (about 10 s)."""
import doctest
import os

import pytest

import taco_ref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_the_package_docstring_quick_start_runs():
    failed, attempted = doctest.testmod(taco_ref, optionflags=doctest.ELLIPSIS, report=True)
    assert attempted >= 10 and failed == 0


@pytest.mark.slow
def test_docs_python_runs():
    failed, attempted = doctest.testfile(os.path.join(ROOT, "docs", "python.md"), module_relative=False,
                                         optionflags=doctest.ELLIPSIS, report=True)
    assert attempted >= 10 and failed == 0
