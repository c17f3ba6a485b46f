"""ament_flake8 over the package (colcon test; the ROS 2 packages' standard lint test)."""
import os

import pytest

ament_flake8 = pytest.importorskip(
    'ament_flake8.main', reason='ament_flake8 not installed: pip install ros-ament-flake8, or '
                                'apt install ros-$ROS_DISTRO-ament-flake8')


PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE_LENGTH = 110
"""taco_ref's line length (ament's default is 99)."""


@pytest.mark.linter
@pytest.mark.flake8
def test_flake8():
    rc, errors = ament_flake8.main_with_errors(argv=[PACKAGE, '--linelength', str(LINE_LENGTH)])
    assert rc == 0, f'found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
