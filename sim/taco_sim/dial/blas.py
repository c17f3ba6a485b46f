"""Collections whose bits follow the BLAS kernels, pinned to one kernel so that a seed gives the
same demonstrations on every x86-64 CPU (spec/data.md §6, "The same seed on every CPU").

The Dial's expert calls BLAS and LAPACK through numpy and scipy (its inverse kinematics is
scipy.optimize.least_squares); OpenBLAS picks its kernels for the CPU when it loads, and another
kernel rounds differently in the last bit, which the physics turns into other draws of the
demonstrations (docs/findings.md, "Reproducing a collection bit for bit"): a Zen 2 or Zen 3
(Haswell kernels) and a Zen 4 or a Xeon with AVX-512 (SkylakeX kernels) collected different
sets from one seed, and cells of one grid computed on both trained on different data.

`pinned(collect, kernel, domain)` wraps a domain's collect so that it always runs under
`OPENBLAS_CORETYPE=kernel` (the Dial: Haswell, which every x86-64 CPU with AVX2 runs): in this
process when its OpenBLAS libraries already run that kernel, else in a child Python started with
the variable set (the variable is read once, when OpenBLAS loads, so the switch needs a new
process). The child writes the set to a temporary file (or the frame directory asked for) and
the caller reads it back, so the result is the same Demos either way. A CPU without AVX2 cannot
run the kernel: ValueError saying so. On another architecture nothing is pinned (the data's meta
records the kernels it ran: meta.collected_on).
"""
import functools
import json
import os
import subprocess
import sys
import tempfile

KERNEL_ENV = "OPENBLAS_CORETYPE"


def kernels():
    """{library: core} of the OpenBLAS libraries numpy and scipy load in this process (scipy's
    only loads with scipy.linalg, which is imported here first)."""
    import scipy.linalg  # noqa: F401  (loads scipy's OpenBLAS, which the Dial's expert uses)
    from taco_ref.data import collected_on
    return collected_on()["blas"]


def runs_kernel(kernel):
    """Whether every OpenBLAS library loaded here runs `kernel` (False when none can be named)."""
    cores = kernels()
    return bool(cores) and all(core.lower() == kernel.lower() for core in cores.values())


def _has_avx2():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


def pinned(collect, kernel, domain):
    """collect(n, sketch_len, seed, **kwargs) of `domain` run under OPENBLAS_CORETYPE=kernel (module
    docstring); progress callbacks are not carried into a child (it collects silently)."""
    @functools.wraps(collect)
    def run(n, sketch_len, seed, **kwargs):
        import platform
        if platform.machine() not in ("x86_64", "AMD64") or runs_kernel(kernel):
            return collect(n, sketch_len, seed, **kwargs)
        if not _has_avx2():
            raise ValueError(f"collect {domain}: its demonstrations are pinned to OpenBLAS's {kernel} kernels "
                             f"(spec/data.md §6), which need a CPU with AVX2; this one has none")
        return _in_child(domain, kernel, n, sketch_len, seed, kwargs)
    run.pinned_kernel = kernel
    return run


def _in_child(domain, kernel, n, sketch_len, seed, kwargs):
    """The collection in a child Python with OPENBLAS_CORETYPE=kernel; the Demos read back."""
    from taco_ref.data import load
    kwargs = {k: v for k, v in kwargs.items() if k != "progress"}
    with tempfile.TemporaryDirectory(prefix="taco-pinned-") as tmp:
        out = kwargs.get("out") or os.path.join(tmp, "demos.npz")
        request = {"domain": domain, "n": int(n), "sketch_len": sketch_len, "seed": int(seed),
                   "kwargs": kwargs, "save": None if kwargs.get("out") else out}
        env = dict(os.environ, **{KERNEL_ENV: kernel})
        done = subprocess.run([sys.executable, "-m", "taco_sim.dial.blas", json.dumps(request)], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"collect {domain} under {KERNEL_ENV}={kernel} in a child process failed: {last}")
        return load(out)


def main(argv=None):
    """The child: collect the request (JSON) and save it (a frame directory saves itself)."""
    request = json.loads((argv or sys.argv[1:])[0])
    import taco_sim
    from taco_ref.data import save
    dom = taco_sim.get(request["domain"])
    demos = dom.collect(request["n"], request["sketch_len"], request["seed"], **request["kwargs"])
    if request["save"]:
        save(demos, request["save"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
