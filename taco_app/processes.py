"""Ending child processes: one signal, one shared grace period, SIGKILL for the rest, every one
reaped. For the grid's worker pool, the test fixtures that start servers and nodes, and the
bridge's benchmarks."""
import signal
import subprocess
import time


def end_processes(processes, signum=signal.SIGTERM, grace=2.0):
    """Send signum to each of processes (subprocess.Popen or multiprocessing.Process) that is
    still running, wait until all have exited or grace seconds have passed, then SIGKILL and
    reap the ones left. Returns the processes that had to be killed."""
    processes = list(processes)
    for p in processes:
        if _alive(p):
            _signal(p, signum)
    deadline = time.monotonic() + grace
    killed = []
    for p in processes:
        _wait(p, max(0.0, deadline - time.monotonic()))
        if _alive(p):
            p.kill()
            _wait(p, None)
            killed.append(p)
    return killed


def _alive(p):
    return p.poll() is None if isinstance(p, subprocess.Popen) else p.is_alive()


def _signal(p, signum):
    if isinstance(p, subprocess.Popen):
        p.send_signal(signum)
    elif signum == signal.SIGTERM:
        p.terminate()
    else:
        import os
        os.kill(p.pid, signum)


def _wait(p, timeout):
    if isinstance(p, subprocess.Popen):
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    else:
        p.join(timeout)
