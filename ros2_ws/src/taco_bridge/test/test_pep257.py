"""ament_pep257 over the package (colcon test; the ROS 2 packages' standard lint test)."""
import os

import pytest

ament_pep257 = pytest.importorskip(
    'ament_pep257.main', reason='ament_pep257 not installed: pip install ros-ament-pep257, or '
                                'apt install ros-$ROS_DISTRO-ament-pep257')


PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOUSE_STYLE = 'D100,D101,D102,D103,D104,D105,D107,D200,D205,D209,D212,D213,D400,D401,D403,D415'
"""Checks left out for taco_ref's docstring style: a summary that may run on over several lines
and end in a colon or a shape table, and no docstring where the name says it all."""


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257():
    rc = ament_pep257.main(argv=[PACKAGE, '--add-ignore', HOUSE_STYLE])
    assert rc == 0, 'found code style errors / warnings'
