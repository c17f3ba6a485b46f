"""taco_app.processes.end_processes: one signal, one shared grace, SIGKILL for the rest, all reaped,
for subprocess.Popen and multiprocessing.Process alike."""
import multiprocessing
import signal
import subprocess
import sys
import time

from taco_app.processes import end_processes

IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"


def _sleep():
    time.sleep(60)


def test_a_process_that_ignores_the_signal_is_killed_after_the_grace_and_the_others_are_not():
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout.readline().strip() == "up"                   # its handler is in place
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    worker = multiprocessing.get_context("fork").Process(target=_sleep)
    worker.start()
    t0 = time.monotonic()
    killed = end_processes([stubborn, polite, worker], signal.SIGTERM, grace=1.0)
    took = time.monotonic() - t0
    assert killed == [stubborn] and stubborn.returncode == -signal.SIGKILL
    assert polite.returncode == -signal.SIGTERM and worker.exitcode == -signal.SIGTERM
    assert 1.0 <= took < 10.0                                            # one grace for all
    stubborn.stdout.close()


def test_other_signals_and_finished_processes():
    """SIGINT (a Ctrl-C) ends a Python child (KeyboardInterrupt, then the default action); a process that has
    already exited is reaped and left as it was. The child takes Ctrl-C as an interactive Python
    does even when this test runs in the background, whose children inherit SIGINT ignored (and
    a Python started so keeps ignoring it)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                              "signal.signal(signal.SIGINT, signal.default_int_handler); "
                              "print('up', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "up"
    assert end_processes([done, child], signal.SIGINT, grace=5.0) == []
    assert done.returncode == 0 and child.returncode == -signal.SIGINT   # ended by the signal itself
    child.stdout.close()
