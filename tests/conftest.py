"""Shared test set-up: hypothesis profiles chosen by HYPOTHESIS_PROFILE (dev, ci, intense)."""
import os

# MuJoCo picks its offscreen GL backend when it is first imported: EGL (Mesa's llvmpipe works
# without a GPU; .ci/run installs it) for every test module that renders.
os.environ.setdefault("MUJOCO_GL", "egl")

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("intense", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
