"""taco_ref.plumbing.provenance: the machine facts a collection's and a figure's last bits depend on."""
import json
import os
import subprocess
import sys

import pytest

from taco_ref.plumbing import provenance


def test_machine_is_json_and_names_the_cpu_and_architecture():
    m = provenance.machine()
    assert set(m) == {"cpu", "machine", "blas", "numpy_simd"}
    assert json.loads(json.dumps(m)) == m
    assert isinstance(m["machine"], str) and m["machine"]
    if sys.platform.startswith("linux"):
        assert isinstance(m["cpu"], str) and m["cpu"]
    assert m["numpy_simd"] is None or all(isinstance(s, str) for s in m["numpy_simd"])


def _cores(env):
    code = "import json; from taco_ref.plumbing import provenance; print(json.dumps(provenance.blas_cores()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_blas_cores_reads_the_kernels_openblas_chose_at_load_time():
    """The core name is read from the library, not assumed: OPENBLAS_CORETYPE, which overrides
    OpenBLAS's choice, shows up in it (Nehalem: SSE4.2, runs on every x86-64 CPU of the last 15
    years)."""
    chosen = _cores(dict(os.environ))
    if not chosen:
        pytest.skip("no OpenBLAS loaded with numpy here (another BLAS, or not Linux)")
    assert all(isinstance(v, str) and v for v in chosen.values())
    if os.uname().machine != "x86_64":
        pytest.skip("the override below names an x86-64 kernel")
    forced = _cores(dict(os.environ, OPENBLAS_CORETYPE="Nehalem"))
    assert set(forced) == set(chosen) and set(forced.values()) == {"Nehalem"}


def test_a_forced_kernel_is_recorded_where_data_are_collected():
    """A set of demonstrations names the machine that collected it (its meta, collected_on)."""
    code = ("import json, taco_sim; d = taco_sim.get('navworld').collect(2, 2, 0); "
            "print(json.dumps(d.meta['collected_on']))")
    env = dict(os.environ, OPENBLAS_CORETYPE="Nehalem")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    on = json.loads(out.stdout)
    assert on["cpu"] == provenance.machine()["cpu"]
    if on["blas"] and os.uname().machine == "x86_64":
        assert set(on["blas"].values()) == {"Nehalem"}
