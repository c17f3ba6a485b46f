"""ament_copyright over the package (colcon test; the ROS 2 packages' standard lint test)."""
import pytest

ament_copyright = pytest.importorskip(
    'ament_copyright.main', reason='ament_copyright is not on PyPI: it runs under a ROS 2 install '
                                   '(apt install ros-$ROS_DISTRO-ament-copyright)')


@pytest.mark.linter
@pytest.mark.copyright
def test_copyright():
    rc = ament_copyright.main(argv=['.', 'test'])
    assert rc == 0, 'found errors'
