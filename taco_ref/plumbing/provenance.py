"""Where a set of demonstrations or a figure was computed: the machine facts that change its bits.

Collection is deterministic given its seed on one kind of machine, not across kinds: the Dial's
expert calls BLAS and LAPACK through numpy and scipy (its inverse kinematics is
scipy.optimize.least_squares), which run the OpenBLAS kernels chosen for the CPU at load time,
and another kernel rounds differently in the last bit. The physics amplifies that bit into
other trajectories (the same distribution of demonstrations, other draws of it), so two machines
can record other fingerprints for the same seed (spec/data.md §6; docs/findings.md,
"Reproducing a collection bit for bit"). `machine()` names what decides it, so that a record
says which machine its data belong to.
"""
import ctypes
import os
import platform

import numpy as np

_CORENAME_SYMBOLS = ("openblas_get_corename", "openblas_get_corename64_",
                     "scipy_openblas_get_corename", "scipy_openblas_get_corename64_")


def cpu_model():
    """The CPU's model name with its family and model numbers (Linux: /proc/cpuinfo; a virtual
    machine may name only the vendor's line, "AMD EPYC (family 25, model 1)", the numbers then
    tell Zen 3 from Zen 4), else platform.processor(), else None."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break                                   # the first processor is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name")
    if name and "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name or platform.processor() or None


def blas_cores():
    """{library file name: OpenBLAS core name} of every OpenBLAS loaded in this process (numpy's,
    and scipy's once scipy.linalg is imported): the kernels it runs, chosen for this CPU when the
    library loaded (OPENBLAS_CORETYPE overrides the choice). Empty where none can be named (not
    Linux, or another BLAS)."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.lower() and ".so" in line.split()[-1]})
    except OSError:
        return {}
    cores = {}
    for path in paths:
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError:
            continue
        for symbol in _CORENAME_SYMBOLS:
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                cores[os.path.basename(path)] = fn().decode(errors="replace")
                break
    return cores


def numpy_simd():
    """The SIMD extensions numpy's dispatched loops use on this CPU (e.g. ['X86_V3']); None where
    numpy does not say."""
    try:
        return list(np.show_config(mode="dicts")["SIMD Extensions"]["found"])
    except (KeyError, TypeError, ValueError):
        return None


def machine():
    """What decides the last bits of a collection or a figure besides the software's versions:
    {cpu, machine (the architecture), blas (blas_cores()), numpy_simd}; JSON-ready."""
    return {"cpu": cpu_model(), "machine": platform.machine() or None, "blas": blas_cores(),
            "numpy_simd": numpy_simd()}
