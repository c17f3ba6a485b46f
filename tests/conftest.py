"""Shared test set-up: hypothesis profiles chosen by HYPOTHESIS_PROFILE (dev, ci, intense)."""
import os

import pytest
from hypothesis import HealthCheck, settings

# MuJoCo picks its offscreen GL backend when it is first imported; taco_sim.dial chooses EGL
# when there is no display and libEGL exists (Mesa's llvmpipe needs no GPU; .ci/run installs it).
import taco_sim.dial  # noqa: F401  (imported for its side effect)

# dev: the inner loop (`pytest -m "not slow"`, 60 s of CPU at most); ci: every property 100 times
settings.register_profile("dev", max_examples=10, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("intense", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="session")
def offscreen_gl():
    """Skip (with the reason) when MuJoCo cannot render offscreen here: EGL needs Debian's
    libegl1 libegl-mesa0 libgl1-mesa-dri, which .ci/run installs."""
    import mujoco
    try:
        model = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
        with mujoco.Renderer(model, 8, 8):
            pass
    except Exception as exc:  # mujoco raises several types for a missing GL platform
        pytest.skip(f"no offscreen GL for MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {exc}")


class _Hostile:
    """Unpickling this object creates the directory `marker`: proof that a pickle was run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


@pytest.fixture
def hostile():
    """hostile(marker): an object whose unpickling creates the directory marker (tests that
    loading never unpickles)."""
    return _Hostile


def pytest_terminal_summary(terminalreporter):
    """The fault-injection count (tests/test_faults.py): cases tried, clear errors, and the
    failures by class (targets: 0 crashes, 0 silently wrong, 0 work lost)."""
    import sys
    faults = sys.modules.get("test_faults") or sys.modules.get("tests.test_faults")
    results = getattr(faults, "RESULTS", None)
    if not results:
        return
    failed = {kind: sum(1 for _, k, ok in results if k == kind and not ok) for kind in ("crash", "silent", "lost")}
    terminalreporter.write_line(
        f"fault injection: {len(results)} cases tried, {sum(ok for *_, ok in results)} answered as "
        f"documented; crashes {failed['crash']}, silently wrong {failed['silent']}, "
        f"work lost {failed['lost']}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Note how many collected tests the quick tier (not marked slow) holds, before -m, -k or
    --deselect leave any out: tests/test_readme_block.py holds README's figure to it."""
    config.taco_quick_tests = sum(1 for item in items if item.get_closest_marker("slow") is None)
