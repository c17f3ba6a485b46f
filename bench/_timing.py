"""Shared by the benchmarks: the first step of each (`preamble`: BLAS threads and sys.path),
interleaved timing, the machine's GEMM limit and a line on numpy's BLAS threads.

A bench imports this module before numpy and calls preamble() first: numpy's BLAS fixes its
thread count when numpy is imported, so this module imports numpy only inside the functions
that need it."""
import gc
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The source tree bench/ sits in."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""The environment variables that set BLAS's and OpenMP's thread counts."""


def preamble(threads=1, keep=False, sim=False):
    """A bench's first step, before numpy (or torch) is imported: BLAS and OpenMP get `threads`
    threads (keep: only where the environment sets no count, which then wins), and the source
    tree comes first on sys.path (sim: its sim/ folder before it), so that a bench measures the
    checkout it sits in."""
    for var in THREAD_VARIABLES:
        if keep:
            os.environ.setdefault(var, str(threads))
        else:
            os.environ[var] = str(threads)
    sys.path.insert(0, ROOT)
    if sim:
        sys.path.insert(0, os.path.join(ROOT, "sim"))


def import_torch(threads):
    """(torch, None) with `threads` intra-op threads and 1 inter-op thread, or (None, reason)."""
    try:
        import torch
    except ImportError as exc:
        return None, f"import torch failed: {exc}"
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work has started
        pass
    return torch, None


def cpu_model():
    """'vendor, model name' of the first CPU (Linux /proc/cpuinfo; else platform's processor)."""
    import platform
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        pass
    vendor = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(fields.get("vendor_id"), fields.get("vendor_id"))
    model = fields.get("model name") or platform.processor() or platform.machine()
    return f"{vendor}, {model}" if vendor else model


def numpy_blas_parts():
    """numpy's BLAS and the thread variables, as parts of a setup line."""
    import numpy as np
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        parts = [f"numpy BLAS {blas.get('name')} {blas.get('version')}"]
    except Exception:  # older numpy: no dict mode
        parts = ["numpy BLAS unknown"]
    parts.append(" ".join(f"{v}={os.environ.get(v)}" for v in THREAD_VARIABLES))
    return parts


def interleaved_medians(fns, repeats, warmup=1):
    """Median wall time (s) of each fn over `repeats` rounds, after `warmup` rounds, and the
    median process CPU time (s, all threads) of the same calls.

    One round calls every fn once, in an order that rotates from round to round, so that a
    slow spell of the machine (shared CPUs) hits all sides of a ratio alike. gc is off while
    timing, as in timeit. CPU time does not count time spent descheduled, so on a busy
    machine it is the steadier of the two figures (the targets use wall time).
    """
    import numpy as np
    wall, cpu = interleaved_times(fns, repeats, warmup)
    return [float(np.median(t)) for t in wall], [float(np.median(t)) for t in cpu]


def interleaved_times(fns, repeats, warmup=1):
    """Every call's wall and process CPU time (s) of :func:`interleaved_medians`: two lists
    (one per fn) of `repeats` times each."""
    import numpy as np
    for _ in range(warmup):
        for fn in fns:
            fn()
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    wall, cpu = [[] for _ in fns], [[] for _ in fns]
    try:
        for r in range(repeats):
            for i in np.roll(np.arange(len(fns)), r):
                start, start_cpu = time.perf_counter(), time.process_time()
                fns[i]()
                wall[i].append(time.perf_counter() - start)
                cpu[i].append(time.process_time() - start_cpu)
    finally:
        if gc_was_enabled:
            gc.enable()
    return wall, cpu


GEMM_N = 2000
"""The GEMM-limit probe: (GEMM_N, GEMM_N) @ (GEMM_N, GEMM_N)."""


def gemm_probe(dtype, n=GEMM_N):
    """(call, flop): one np.matmul of two (n, n) matrices of dtype, the GEMM-limit probe."""
    import numpy as np
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    return (lambda: a @ b), 2 * n ** 3


def gemm_limit(dtype, repeats, n=GEMM_N):
    """The machine's practical GEMM rate (GFLOP/s) from np.matmul on (n, n) @ (n, n): the best
    of `repeats` calls (a limit: one slow call on a shared machine must not lower it), over
    wall time and over process CPU time."""
    probe, flop = gemm_probe(dtype, n)
    probe()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        probe()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return flop / min(wall) / 1e9, flop / min(cpu) / 1e9
