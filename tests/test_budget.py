"""The inner loop's budget: `python -m pytest -m "not slow"` (hypothesis profile dev) takes at
most 60 s of CPU on the project's 2-core machine. Slow tier: it runs the inner loop once in a
child process and counts that process's CPU time and its children's. A test that needs more
belongs in the slow tier (CI runs both)."""
import os
import resource
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET_S = 60.0


@pytest.mark.slow
def test_the_inner_loop_fits_its_cpu_budget():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, HYPOTHESIS_PROFILE="dev")
    run = subprocess.run([sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert run.returncode == 0, run.stdout[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    print(f"inner loop: {summary}; {cpu:.1f} s of CPU (budget {BUDGET_S:g} s)")
    assert cpu <= BUDGET_S, (f"the inner loop took {cpu:.1f} s of CPU, over its {BUDGET_S:g} s: mark the "
                             f"costliest tests slow (pytest --durations=30 -m 'not slow')")
