"""The experiment grid's engine: where its tasks run, what happens when one fails, progress.

A grid has two kinds of task (taco_app/grid/cell.py): `collect(spec)` -> Demos, once for
each distinct data set the grid's unfinished cells need, and `run_cell(cell, demos, test_demos)`
-> the cell's record, once per cell, submitted as soon as both its data sets exist. The data
travel through the engine (spec/evaluation.md §6): no task reads or writes a shared file, and
only this process, the driver, writes OUT (the cell files and failures.json).

Executor           | Where the tasks run
Local(workers)     | this machine: a spawn-context process pool of `workers` processes, one BLAS
                   | thread each (`_single_threaded`); workers <= 1 runs them in this process
Dask(address)      | a Dask distributed cluster (`dask scheduler`, `dask worker ADDRESS
                   | --nthreads 1`), the optional extra `dist`, imported only here

`executor(scheduler, workers)` picks one (the scheduler address, else the environment variable
TACO_SCHEDULER, else Local). `run_grid` drives either the same way:

- a cell whose cell file holds its key is not run again (`force` runs it); the grid's results
  directory is read and written only through its cells.Store (which also turns an earlier
  version's results.json entries into cell files);
- a task whose worker died (Local: the pool broke; Dask: the scheduler gave up rescheduling it,
  KilledWorker) is submitted again, at most `retries` more times;
- data of a domain too large for memory (the image Dial) is collected into frame directories
  under OUT/data and passed to its cells as a path (experiment.collect), reused by later runs;
  its cells train with a checkpoint after every epoch under OUT/runs and continue there when
  the grid is run again (experiment.run_dir_of);
- a task that raises is a failure at once (collection and training are deterministic: running
  it again would raise again); a failed data set fails its cells; the others go on;
- progress(status) after every finished task and every few seconds: done/total, running,
  failed, elapsed and ETA (`Progress` writes it on stderr).
"""
import concurrent.futures
import contextlib
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from taco_app.grid import keys as cellkeys, store as cells_mod, cell as experiment
from taco_app.processes import end_processes

SCHEDULER_ENV = "TACO_SCHEDULER"
"""Environment variable holding the Dask scheduler's address when --scheduler is not given."""
CONNECT_TIMEOUT = 30
"""Seconds a Dask client tries to reach its scheduler."""


@contextlib.contextmanager
def _single_threaded():
    """Worker processes started meanwhile (spawned, so that their BLAS reads these variables
    when numpy loads) use one BLAS thread each: one cell per core. With OpenBLAS's default of a
    thread per core in every worker, the small products of a cell oversubscribe the cores: three
    TACO epochs on 400 Nav-World demonstrations took 14.1 s instead of 2.1 s while two other
    training processes ran. The thread count also changes float64 sums in the last bit, so a
    cell's figures are reproducible at a fixed count only (a Dask worker's nanny sets the same
    variables to 1 by default). The caller's environment is restored afterwards."""
    saved = {v: os.environ.get(v) for v in experiment.BLAS_THREAD_VARS}
    os.environ.update({v: "1" for v in experiment.BLAS_THREAD_VARS})
    try:
        yield
    finally:
        for v, value in saved.items():
            if value is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = value


def _task_traceback(exc):
    """The traceback text of an exception raised in a task: the worker's, which a process pool
    attaches as __cause__ (Local.submit keeps it as taco_traceback when the task ran here)."""
    for text in (getattr(exc, "taco_traceback", None), getattr(exc.__cause__, "tb", None)):
        if isinstance(text, str):
            return text
    return "".join(traceback.format_exception(exc))


class Local:
    """Tasks on this machine: `workers` spawned processes, one BLAS thread each, or this process
    (workers <= 1, with its own BLAS threads; a task runs when `wait` is called, one per call, so
    run_grid writes each cell file before the next cell starts). Use as a context manager."""

    name = "local"

    def __init__(self, workers=2):
        self.workers = workers
        self._pool = None
        self._env = None
        self._queue = []                           # in this process: (future, fn, args) not run yet
        self._epochs = None                        # the folder where running cells note their epoch
        self._saved_epochs_env = None

    def __enter__(self):
        # each running cell notes its last epoch in a file here (experiment._epoch_file), for the
        # progress line; the workers, spawned later, find it in their environment
        self._epochs = tempfile.mkdtemp(prefix="taco-epochs-")
        self._saved_epochs_env = os.environ.get(experiment.EPOCHS_DIR_ENV)
        os.environ[experiment.EPOCHS_DIR_ENV] = self._epochs
        if self.workers > 1:
            # the pool spawns its processes as tasks arrive: keep one BLAS thread in force meanwhile
            self._env = _single_threaded()
            self._env.__enter__()
            self._pool = self._new_pool()
        return self

    def __exit__(self, *exc):
        if self._epochs is not None:
            if self._saved_epochs_env is None:
                os.environ.pop(experiment.EPOCHS_DIR_ENV, None)
            else:
                os.environ[experiment.EPOCHS_DIR_ENV] = self._saved_epochs_env
            shutil.rmtree(self._epochs, ignore_errors=True)
            self._epochs = None
        if self._pool is None:
            return
        if exc[0] is None:
            self._pool.shutdown(wait=True)
        else:                                      # an error or Ctrl-C: end the workers now
            with _sigint_ignored():                # a second Ctrl-C cannot cut this short
                processes = list((getattr(self._pool, "_processes", None) or {}).values())
                self._pool.shutdown(wait=False, cancel_futures=True)
                _end_processes(processes)
        self._env.__exit__(None, None, None)
        self._pool = None

    @staticmethod
    def check_workers():
        return []                                  # ours: one BLAS thread each, by construction

    def _new_pool(self):
        return concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                      initializer=_worker_init)

    def submit(self, fn, *args, name=None):
        if self._pool is not None:
            # the pool may start a worker here: one started with SIGINT ignored keeps it ignored
            # from its first instruction (a worker interrupted while it imports prints a traceback)
            with _sigint_ignored():
                return self._pool.submit(fn, *args)
        fut = concurrent.futures.Future()          # in this process: run when waited for
        self._queue.append((fut, fn, args))
        return fut

    def wait(self, futures, timeout):
        """The futures that are done; in this process, first run the oldest queued task among
        them, so that its result (a cell file) is handled before the next task starts."""
        waited = set(futures)
        queued = [q for q in self._queue if q[0] in waited]
        if self._pool is None and queued:
            fut, fn, args = queued[0]
            self._queue.remove(queued[0])
            try:
                fut.set_result(fn(*args))
            except Exception as exc:
                exc.taco_traceback = traceback.format_exc()
                fut.set_exception(exc)
            return {fut}
        return concurrent.futures.wait(futures, timeout, concurrent.futures.FIRST_COMPLETED).done

    @staticmethod
    def arg(fut):
        """What a finished task passes on to the tasks that need it: its value."""
        return fut.result()

    @staticmethod
    def lost(exc):
        return isinstance(exc, BrokenProcessPool)

    def recover(self):
        """A worker process died and broke the pool: replace it (once, however many tasks it took)."""
        try:
            self._pool.submit(int).result()
        except BrokenProcessPool:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()

    def running(self, futures):
        return min(max(self.workers, 1), sum(not f.done() for f in futures))

    def epochs(self, names):
        """{cell name: its last epoch's note} of the named cells that wrote one."""
        notes = {}
        for name in names:
            try:
                with open(os.path.join(self._epochs or "", name)) as f:
                    notes[name] = f.read().strip()
            except OSError:
                continue
        return notes

    @staticmethod
    def error(fut):
        exc = fut.exception()
        return f"{type(exc).__name__}: {exc}", _task_traceback(exc)


def _blas_threads():
    return {v: os.environ.get(v) for v in experiment.BLAS_THREAD_VARS}


def _worker_init():
    """A local worker's initializer. Ctrl-C in a terminal sends SIGINT to the whole process group:
    a worker would take it as its task's exception, report it and start the next task. The
    parent alone answers it, by ending its workers (Local.__exit__); workers are started with
    SIGINT ignored (Local.submit) and keep it so here. Should the parent die
    without doing so (killed), Linux sends the worker SIGTERM (PR_SET_PDEATHSIG), so no worker
    computes on for nobody."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored inside (in the main thread; elsewhere signals cannot be set, and none arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _end_processes(processes, grace=2.0):
    """Terminate a ProcessPoolExecutor's worker processes and reap them (SIGKILL after grace
    seconds): shutdown(cancel_futures=True) drops queued tasks but lets running ones finish,
    which for a cell is many minutes. The pool has no public way to do this before Python 3.14
    (terminate_workers); its process table (read before shutdown, which drops it) is the one
    place the processes are listed."""
    end_processes(processes, signal.SIGTERM, grace)


class Dask:
    """Tasks on a Dask distributed cluster whose scheduler listens at address (tcp://HOST:PORT).
    The data futures stay on the cluster: a cell task receives them from the worker that holds
    them, and a data set lost with its worker is collected again by the scheduler."""

    name = "dask"

    def __init__(self, address):
        try:
            import distributed
        except ImportError:
            raise ValueError(f"--scheduler {address}: Dask distributed is not installed; it is the "
                             f"optional extra 'dist': pip install -e '.[dist]'") from None
        self._distributed = distributed
        self.address = address
        self._submitted = []                       # every future, to cancel on an interrupt
        try:
            self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as err:
            raise ValueError(f"--scheduler {address}: cannot connect to a Dask scheduler there "
                             f"({' '.join(str(err).split())})") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:                     # an error or Ctrl-C: our tasks stop too
            with _sigint_ignored():
                self.client.cancel(list(self._submitted), force=True)
                self.client.close()
            return
        self.client.close()

    def check_workers(self):
        """Lines of warning for workers whose BLAS may use more than one thread (their cells'
        figures can then differ from a local run's in the last bits), or none."""
        threads = self.client.run(_blas_threads)
        return [f"worker {w}: {' '.join(f'{k}={v}' for k, v in t.items())} (not 1: figures may differ "
                f"in the last bits from a local run)" for w, t in threads.items()
                if any(v != "1" for v in t.values())]

    def submit(self, fn, *args, name="task"):
        fut = self.client.submit(fn, *args, key=f"taco-{name}-{uuid.uuid4().hex[:8]}", pure=False)
        self._submitted.append(fut)
        return fut

    def wait(self, futures, timeout):
        try:
            return set(self._distributed.wait(futures, timeout=timeout, return_when="FIRST_COMPLETED").done)
        except TimeoutError:
            return set()

    @staticmethod
    def arg(fut):
        """What a finished task passes on: the future itself (its data stay on the cluster)."""
        return fut

    def lost(self, exc):
        return isinstance(exc, (self._distributed.KilledWorker, concurrent.futures.CancelledError))

    def recover(self):
        pass                                       # the scheduler has already replaced the worker

    def running(self, futures):
        """Our tasks executing now: those the scheduler has placed on a worker, at most its threads
        (a worker also holds a few queued ones)."""
        ours = {f.key for f in futures}
        threads = self.client.nthreads()
        return sum(min(threads.get(w, 1), sum(k in ours for k in keys))
                   for w, keys in self.client.processing().items())

    @staticmethod
    def error(fut):
        exc = fut.exception()
        tb = fut.traceback()
        text = "".join(traceback.format_tb(tb)) if tb is not None else ""
        return f"{type(exc).__name__}: {exc}", text + f"{type(exc).__name__}: {exc}\n"


def executor(scheduler=None, workers=2):
    """Dask(scheduler or $TACO_SCHEDULER) when either is set, else Local(workers)."""
    address = scheduler or os.environ.get(SCHEDULER_ENV)
    return Dask(address) if address else Local(workers)


@dataclass
class Grid:
    """What run_grid did. results: one row per cell (cells.flat; None for a failed cell),
    in the order given; failures: {key, cell, error, traceback, attempts} per failed cell."""

    results: list
    failures: list = field(default_factory=list)
    reused: int = 0
    computed: int = 0
    stale: int = 0
    migrated: int = 0
    seconds: float = 0.0


def run_grid(cells, ex, out_dir=None, retries=2, force=False, progress=None, refresh=5.0, expected=None):
    """Run cells (dicts as experiment.run takes them) on executor ex; returns a Grid.

    With out_dir, every finished cell is written at once to its cell file, and cells already
    finished there are reused unless force; failures go to out_dir/failures.json (removed when
    a run has none). Without it nothing is written (taco demo). expected: the wall seconds the
    grid is expected to take (taco_app.grid.costs), the ETA until the first cell finishes."""
    start = time.time()
    keys = [experiment.cell_key(c) for c in cells]         # validates every config before anything runs
    if len(set(keys)) != len(keys):
        raise ValueError("the grid lists a cell twice")
    grid = Grid(results=[None] * len(cells))
    store = None if out_dir is None else cells_mod.Store(out_dir)
    if store is not None and not force:
        for i, cell in enumerate(cells):
            record = store.finished(cell)
            if record is not None:
                grid.results[i] = cells_mod.flat(record)
        grid.migrated = store.migrated
    todo = [i for i in range(len(cells)) if grid.results[i] is None]
    grid.reused = len(cells) - len(todo)
    if store is not None:                # a cell trains on the data its finished partners did
        records = cells_mod.load_cells(out_dir)
        cells = [dict(c, partners=cells_mod.partner_data(records, c)) if i in todo else c
                 for i, c in enumerate(cells)]
    if store is not None and not force:
        grid.stale = sum(os.path.exists(store.path(cells[i])) for i in todo)

    needs = {i: experiment.data_specs(cells[i]) for i in todo}
    data_dir = None if out_dir is None else os.path.join(os.path.abspath(out_dir), "data")  # frame directories
    data = {}                                 # spec -> {"arg": ..., "users": cells still to finish}
    for i in todo:
        for spec in needs[i]:
            data.setdefault(spec, {"arg": None, "ready": False, "users": set()})["users"].add(i)
    pending, attempts, failed = {}, {}, set()

    def submit(kind, what):
        if kind == "data":
            fut = ex.submit(experiment.collect, what, data_dir,
                            name=f"collect-{what[0]}-n{what[1]}-seed{what[3]}")
        else:
            fut = ex.submit(experiment.run_cell, cells[what], *(data[s]["arg"] for s in needs[what]),
                            experiment.run_dir_of(out_dir, cells[what]),
                            name=experiment.cell_name(cells[what]))
        pending[fut] = (kind, what)

    def release(i):
        for spec in needs[i]:
            data[spec]["users"].discard(i)
            if not data[spec]["users"]:
                data[spec]["arg"] = None       # nothing left needs it: let it go (Dask: forget it)

    def fail(i, error, tb, n):
        if i in failed:
            return
        failed.add(i)
        grid.failures.append({"key": keys[i], "cell": cellkeys.cell_fields(cells[i]),
                              "error": error, "traceback": tb, "attempts": n})
        release(i)
        if store is not None:
            store.write_failures(grid.failures)

    def status():
        done = grid.computed
        elapsed = time.time() - start
        left = len(todo) - done - len(failed)
        eta = elapsed / done * left if done else (max(expected - elapsed, 0.0) if expected else None)
        running = [experiment.cell_name(cells[what]) for kind, what in pending.values() if kind == "cell"]
        epochs = ex.epochs(running) if hasattr(ex, "epochs") else {}
        return {"done": grid.reused + done, "total": len(cells), "running": ex.running(list(pending)),
                "failed": len(failed), "elapsed": elapsed, "eta": eta, "engine": ex.name,
                "epochs": [epochs[name] for name in running if name in epochs]}

    for spec in data:
        submit("data", spec)
    if progress:
        progress(status())
    while pending:
        finished = ex.wait(list(pending), refresh)
        for fut in finished:
            kind, what = pending.pop(fut)
            exc = fut.exception()
            if exc is None and kind == "data":
                data[what].update(arg=ex.arg(fut), ready=True)
                for i in sorted(data[what]["users"]):
                    if i not in failed and all(data[s]["ready"] for s in needs[i]):
                        submit("cell", i)
            elif exc is None:
                record = fut.result()
                if store is not None:
                    store.write(record)
                grid.results[what] = cells_mod.flat(record)
                grid.computed += 1
                release(what)
            elif ex.lost(exc) and attempts.get((kind, what), 0) < retries:
                attempts[(kind, what)] = attempts.get((kind, what), 0) + 1
                ex.recover()
                submit(kind, what)
            else:
                n = attempts.get((kind, what), 0) + 1
                error, tb = ex.error(fut)
                if ex.lost(exc):
                    error = f"its worker died ({n} attempts): {error}"
                if kind == "data":
                    for i in sorted(data[what]["users"]):
                        fail(i, f"collecting its data {what}: {error}", tb, n)
                else:
                    fail(what, error, tb, n)
        if progress:
            progress(status())
    grid.seconds = time.time() - start
    if store is not None and not grid.failures:
        store.write_failures([])
    return grid


def _clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_line(s):
    """cells done/total, running, failed, elapsed, ETA, and each running cell's last epoch (the
    local engine's)."""
    eta = _clock(s["eta"]) if s["eta"] is not None else "?"
    line = (f"cells {s['done']}/{s['total']} done, {s['running']} running, {s['failed']} failed "
            f"({s['engine']}); elapsed {_clock(s['elapsed'])}, ETA {eta}")
    return line + "".join(f" | {note}" for note in s.get("epochs") or ())


class Progress:
    """run_grid's progress on a stream (stderr): progress_line rewritten in place on a terminal;
    elsewhere (a log file) one line whenever the counts change."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.last = None

    def __call__(self, s):
        line = progress_line(s)
        counts = line.split(";")[0]
        if self.stream.isatty():          # one terminal line, cut to its width, so \r rewrites it
            line = line[:max(shutil.get_terminal_size().columns - 1, 20)]
            print(f"\r{line}\033[K", end="", file=self.stream, flush=True)
        elif counts != self.last:
            print(line, file=self.stream, flush=True)
        self.last = counts

    def end(self):
        if self.stream.isatty() and self.last is not None:
            print(file=self.stream, flush=True)


def summary(grid):
    """Lines for the end of a grid: counts, wall time, and every failure with its error."""
    lines = [f"{grid.computed} cells computed, {grid.reused} reused ({grid.migrated} of them converted "
             f"from results.json), {len(grid.failures)} failed; {grid.seconds:.0f} s"]
    if grid.stale:
        lines.append(f"{grid.stale} cell files held another config (cell_key): recomputed")
    lines += [f"FAILED {experiment.cell_name(f['cell'])}: {f['error']}" for f in grid.failures]
    return lines
