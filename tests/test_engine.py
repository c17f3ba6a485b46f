"""taco_app.grid.engine: the experiment grid on real processes, locally and on a real Dask cluster
(a `dask scheduler` and two `dask worker` processes on 127.0.0.1): resume, forced and changed
cells, a raising cell, a worker killed mid-grid, an interrupted grid, local against Dask figures.

Every grid here is real and tiny: Nav-World, TACO and GT-BC, a few demonstrations and epochs.
"""
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from taco_ref.plumbing import files
from taco_app import report
from taco_app.processes import end_processes
from taco_app.grid import store as cells_mod, engine

pytestmark = pytest.mark.slow

# cells of about a second each, so that a grid of six lasts a few seconds on two workers
SETTINGS = ["act_hidden=[16]", "stop_hidden=[16]", "epochs=40", "patience=40"]
GRID = ["navworld", "--sizes", "40", "--seeds", "0", "1", "2", "--algos", "taco", "gtbc",
        "--n-tasks", "4", "--n-align", "5"] + [a for s in SETTINGS for a in ("--set", s)]
N_CELLS = 6


def cells(**config):
    base = dict(act_hidden=[16], stop_hidden=[16], epochs=40, patience=40)
    return [dict(domain="navworld", algo=a, size=40, seed=s, train_sketch_len=3, n_tasks=4, n_align=5,
                 test_lengths=None, config=dict(base, **config))
            for s in (0, 1, 2) for a in ("taco", "gtbc")]


def env():
    out = dict(os.environ)
    out.pop(engine.SCHEDULER_ENV, None)
    return out


def _default_sigint():
    # a test run started in the background of a non-interactive shell inherits SIGINT ignored,
    # and Python keeps it ignored; a user's `taco` gets Ctrl-C with the default disposition
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def taco(*args, **kwargs):
    """`taco ...` in a new process (its own session: a Ctrl-C goes to it and its workers)."""
    return subprocess.Popen([sys.executable, "-m", "taco_app.cli", *args], env=env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=_default_sigint, **kwargs)


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def cell_files(out):
    root = os.path.join(out, "cells")
    return sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(root) for f in fs
                  if f.endswith(".json") and not f.startswith(files.TEMP_PREFIX))   # not one being written


def figures(out):
    return {p: json.load(open(os.path.join(out, p)))["figures"] for p in cell_files(out)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny grid run locally, uninterrupted (two worker processes): its OUT directory."""
    out = str(tmp_path_factory.mktemp("reference"))
    code, _, err = finish(taco("experiment", *GRID, "--workers", "2", "--out", out))
    assert code == 0, err
    assert len(cell_files(out)) == N_CELLS
    return out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dask_cluster(tmp_path):
    """A real Dask cluster on 127.0.0.1 as the README starts one: `dask scheduler` and two
    `dask worker ... --nthreads 1` processes (each under its nanny, which gives its worker one
    BLAS thread). Yields (address, the worker processes); everything is stopped afterwards."""
    distributed = pytest.importorskip("distributed", reason="the 'dist' extra is not installed")
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    if not os.path.exists(dask):
        pytest.skip("no `dask` command beside this Python")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "cluster.log", "w")
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=log, stderr=subprocess.STDOUT, env=env())]
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--nworkers", "1",
                                           "--host", "127.0.0.1", "--no-dashboard"],
                                          stdout=log, stderr=subprocess.STDOUT, env=env()))
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address, procs[1:]
    finally:
        end_processes(reversed(procs), signal.SIGTERM, grace=30)
        log.close()


def test_a_grid_on_dask_gives_the_local_figures_and_report(dask_cluster, reference, tmp_path):
    """The same grid through --scheduler: the same cell files' figures and data fingerprints,
    byte-identical results.md."""
    address, _ = dask_cluster
    out = str(tmp_path / "dask")
    code, _, err = finish(taco("experiment", *GRID, "--scheduler", address, "--out", out))
    assert code == 0, err
    assert "(dask)" in err and f"{N_CELLS} cells computed, 0 reused" in err
    assert figures(out) == figures(reference)
    for p in cell_files(out):
        mine, local = (json.load(open(os.path.join(d, p))) for d in (out, reference))
        assert mine["data"] == local["data"] and mine["key"] == local["key"]
        assert mine["threads"]["OPENBLAS_NUM_THREADS"] == "1"
    assert open(os.path.join(out, "results.md")).read() == open(os.path.join(reference, "results.md")).read()


def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_worker_killed_mid_grid_loses_no_cell(dask_cluster, reference, tmp_path):
    """SIGKILL the worker process that is running a cell: the grid still completes, every cell
    computed once, with the local figures."""
    distributed = pytest.importorskip("distributed")
    address, workers = dask_cluster
    out = str(tmp_path / "killed")
    grid = taco("experiment", *GRID, "--scheduler", address, "--out", out)
    killed = None
    with distributed.Client(address, timeout=30) as client:
        deadline = time.time() + 120
        while killed is None and time.time() < deadline and grid.poll() is None:
            for worker, keys in client.processing().items():
                if any(k.startswith("taco-navworld-") for k in keys):      # a cell, not a data set
                    pid = client.run(os.getpid, workers=[worker])[worker]
                    # the worker process is the child of a nanny this test started
                    assert _parent(pid) in {w.pid for w in workers}
                    os.kill(pid, signal.SIGKILL)
                    killed = worker
                    break
            time.sleep(0.05)
    code, _, err = finish(grid)
    assert killed is not None, "no cell was seen running"
    assert code == 0, err
    assert f"{N_CELLS} cells computed, 0 reused" in err and "0 failed" in err
    assert len(cell_files(out)) == N_CELLS
    assert figures(out) == figures(reference)


def test_an_interrupted_local_grid_resumes_without_recomputing(reference, tmp_path):
    """Ctrl-C (SIGINT to the grid's process group) after the first cell file: exit 130; the same
    command again computes only the missing cells, leaves the finished files untouched, and
    writes the report of an uninterrupted run."""
    out = str(tmp_path / "stopped")
    grid = taco("experiment", *GRID, "--workers", "2", "--out", out)
    deadline = time.time() + 120
    while not cell_files(out) and time.time() < deadline and grid.poll() is None:
        time.sleep(0.02)
    os.killpg(grid.pid, signal.SIGINT)
    code, _, err = finish(grid)
    assert code == 130, err
    assert "interrupted; the same command again runs only the unfinished cells" in err
    done = cell_files(out)
    assert 1 <= len(done) < N_CELLS
    stamps = {p: (os.stat(os.path.join(out, p)).st_mtime_ns, open(os.path.join(out, p)).read()) for p in done}
    code, _, err = finish(taco("experiment", *GRID, "--workers", "2", "--out", out))
    assert code == 0, err
    assert f"{N_CELLS - len(done)} cells computed, {len(done)} reused" in err
    assert {p: (os.stat(os.path.join(out, p)).st_mtime_ns, open(os.path.join(out, p)).read()) for p in done} == stamps
    assert figures(out) == figures(reference)
    assert open(os.path.join(out, "results.md")).read() == open(os.path.join(reference, "results.md")).read()


def group_pids(pgid):
    """The processes of process group pgid (Linux /proc), zombies excluded."""
    pids = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(name))
    return pids


LONG = ["--set", "epochs=100000", "--set", "patience=100000"]
"""Cells that would train for hours."""


@pytest.mark.parametrize("command,presses", [("experiment", 1), ("experiment", 2), ("demo", 1)])
def test_ctrl_c_stops_a_grid_of_long_cells_within_seconds(tmp_path, command, presses):
    """One Ctrl-C (SIGINT to the process group, as a terminal sends it) while both workers are
    deep in cells that would run for hours: the command (taco experiment, or taco demo, which
    runs the same engine) ends within 5 s with exit 130, one line and no traceback, and no
    process of its group is left; a second Ctrl-C right after the first changes none of that."""
    if command == "experiment":
        grid = taco("experiment", "navworld", "--sizes", "40", "--seeds", "0", "1", "--algos", "gtbc",
                    "--n-tasks", "4", "--n-align", "5", *LONG, "--workers", "2", "--out", str(tmp_path / "long"))
    else:
        grid = taco("demo", "--n", "40", "--n-tasks", "4", "--algos", "taco", "gtbc", *LONG, cwd=tmp_path)
    deadline = time.time() + 120
    while len(group_pids(grid.pid)) < 3 and time.time() < deadline:        # the command and 2 workers
        time.sleep(0.1)
    time.sleep(3.0)                                                          # the cells are training
    assert grid.poll() is None and len(group_pids(grid.pid)) >= 3
    start = time.time()
    for i in range(presses):
        os.killpg(grid.pid, signal.SIGINT)
        time.sleep(0.05)
    code, _, err = finish(grid, timeout=30)
    assert time.time() - start < 5.0
    assert code == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"taco {command}: interrupted"), err
    deadline = time.time() + 5
    while group_pids(grid.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert group_pids(grid.pid) == []
    assert cell_files(str(tmp_path / "long")) == []


def test_ctrl_c_on_a_dask_grid_cancels_its_tasks(dask_cluster, tmp_path):
    """Ctrl-C while the cluster's workers run the grid's cells: exit 130 within 5 s without a
    traceback, and the scheduler holds none of the grid's tasks afterwards (the client
    cancelled them; the cluster itself keeps running)."""
    distributed = pytest.importorskip("distributed")
    address, _ = dask_cluster
    grid = taco("experiment", "navworld", "--sizes", "40", "--seeds", "0", "1", "--algos", "gtbc",
                "--n-tasks", "4", "--n-align", "5", *LONG, "--scheduler", address, "--out", str(tmp_path / "d"))
    with distributed.Client(address, timeout=30) as client:
        deadline = time.time() + 120
        while time.time() < deadline and grid.poll() is None and not any(
                k.startswith("taco-navworld-") for keys in client.processing().values() for k in keys):
            time.sleep(0.05)
        assert grid.poll() is None, "the grid ended before a cell ran"
        start = time.time()
        os.killpg(grid.pid, signal.SIGINT)
        code, _, err = finish(grid, timeout=30)
        assert time.time() - start < 5.0
        assert code == 130 and "Traceback" not in err, err
        deadline = time.time() + 10
        while time.time() < deadline and any(k.startswith("taco-") for keys in client.processing().values()
                                             for k in keys):
            time.sleep(0.1)
        assert not any(k.startswith("taco-") for keys in client.processing().values() for k in keys)


def test_finished_cells_are_reused_changed_ones_rerun_and_force_reruns_all(tmp_path):
    grid_cells = cells(epochs=3, patience=3)[:2]
    with engine.Local(1) as ex:
        first = engine.run_grid(grid_cells, ex, out_dir=tmp_path)
        stamps = [os.stat(cells_mod.cell_path(tmp_path, c)).st_mtime_ns for c in grid_cells]
        again = engine.run_grid(grid_cells, ex, out_dir=tmp_path)
        assert (again.computed, again.reused) == (0, 2) and again.results == first.results
        assert [os.stat(cells_mod.cell_path(tmp_path, c)).st_mtime_ns for c in grid_cells] == stamps
        changed = [dict(grid_cells[0], config=dict(grid_cells[0]["config"], lr=1e-3)), grid_cells[1]]
        third = engine.run_grid(changed, ex, out_dir=tmp_path)
        assert (third.computed, third.reused, third.stale) == (1, 1, 1)
        assert cells_mod.Store(tmp_path).finished(changed[0])["config"]["lr"] == 1e-3
        forced = engine.run_grid(changed, ex, out_dir=tmp_path, force=True)
        assert (forced.computed, forced.reused) == (2, 0)


def test_in_this_process_each_cell_file_is_written_before_the_next_cell_starts(tmp_path):
    """--workers 1 runs the cells in the grid's own process: a grid stopped there keeps every cell
    it finished, so each is written (and progress reported) before the next one runs."""
    grid_cells = cells(epochs=3, patience=3)[:3]
    seen = []

    def progress(status):
        seen.append((status["done"], len(cell_files(tmp_path))))

    with engine.Local(1) as ex:
        grid = engine.run_grid(grid_cells, ex, out_dir=tmp_path, progress=progress)
    assert grid.computed == 3
    assert [files_on_disk for done, files_on_disk in seen if done] == [1, 2, 3], seen


def test_a_cells_epoch_note_is_written_whole_and_read_back_by_name(tmp_path):
    """experiment._epoch_file keeps one line per cell (the progress line's part, not the
    losses), replaced whole; Local.epochs reads the named cells' notes, skipping the silent."""
    from taco_app.grid import cell as experiment
    cell = cells()[0]
    note = experiment._epoch_file(cell, str(tmp_path))
    note("[taco policy] epoch  12  train  -3.1000  held-out  -2.9000  best  -2.9000     4.1s")
    note("[taco policy] epoch  13  train  -3.2000  held-out  -3.0000  best  -3.0000     4.4s")
    ex = engine.Local(1)
    ex._epochs = str(tmp_path)
    name = experiment.cell_name(cell)
    assert ex.epochs([name, "navworld-gtbc-n40-seed9"]) == {name: "taco n40 s0: [taco policy] epoch  13"}
    assert os.listdir(tmp_path) == [name]                    # no temporary left beside it
    status = {"done": 0, "total": 2, "running": 1, "failed": 0, "elapsed": 3.0, "eta": None,
              "engine": "local", "epochs": ["taco n40 s0: [taco policy] epoch  13"]}
    assert engine.progress_line(status).endswith("ETA ? | taco n40 s0: [taco policy] epoch  13")


@pytest.mark.slow
def test_the_progress_line_shows_each_running_cells_epoch(tmp_path):
    """`taco demo` sat at "cells 0/3 done" for minutes: the local engine's workers note each
    cell's last epoch in a folder of its own, the progress line appends them, and the folder
    and its environment variable are gone once the grid ends."""
    from taco_app.grid import cell as experiment
    grid_cells = cells(epochs=25, patience=25)[:2]
    lines, folders = [], []

    def progress(status):
        lines.append(engine.progress_line(status))
        folders.append(os.environ.get(experiment.EPOCHS_DIR_ENV))

    before = os.environ.get(experiment.EPOCHS_DIR_ENV)
    with engine.Local(2) as ex:
        grid = engine.run_grid(grid_cells, ex, progress=progress, refresh=0.1)
    assert grid.computed == 2
    notes = [note for line in lines for note in line.split(" | ")[1:]]
    assert notes, lines
    for note in notes:
        assert re.fullmatch(r"(taco|gtbc) n40 s0: \[(taco|gtbc) (warmup|policy)\] epoch +\d+", note), note
    assert len({n for n in notes}) > 2                   # the epochs move on between refreshes
    assert folders[0] and not os.path.exists(folders[0])
    assert os.environ.get(experiment.EPOCHS_DIR_ENV) == before


def test_a_raising_cell_is_reported_with_its_error_and_the_others_finish(tmp_path):
    grid_cells = cells(epochs=3, patience=3)[:4]
    grid_cells[1] = dict(grid_cells[1], config=dict(grid_cells[1]["config"], lr=1e12))   # diverges
    with engine.Local(2) as ex:
        grid = engine.run_grid(grid_cells, ex, out_dir=tmp_path, retries=2)
    assert grid.computed == 3 and len(grid.failures) == 1
    failure = grid.failures[0]
    assert failure["error"].startswith("DivergedError: training diverged")
    assert failure["attempts"] == 1                              # raised: not submitted again
    assert "train.py" in failure["traceback"] and failure["cell"]["algo"] == grid_cells[1]["algo"]
    assert grid.results[1] is None and all(grid.results[i] for i in (0, 2, 3))
    assert json.load(open(tmp_path / "failures.json"))[0]["error"] == failure["error"]
    text, _, _ = report.write_report([str(tmp_path)])
    assert "Failed in the last run (1 cells)" in text and "DivergedError" in text
    assert any("FAILED navworld-gtbc-n40-seed0: DivergedError" in line for line in engine.summary(grid))
    fixed = [c for i, c in enumerate(grid_cells) if i != 1]
    with engine.Local(1) as ex:
        again = engine.run_grid(fixed, ex, out_dir=tmp_path)
    assert again.reused == 3 and not os.path.exists(tmp_path / "failures.json")


def test_a_local_worker_killed_mid_grid_is_replaced_and_its_cells_rerun(tmp_path):
    """SIGKILL one of the local pool's processes while cells run: the pool is replaced, the
    cells it held are submitted again, every cell finishes once."""
    grid_cells = cells()
    result = {}

    def drive():
        with engine.Local(2) as ex:
            result["grid"] = engine.run_grid(grid_cells, ex, out_dir=tmp_path, retries=2)

    before = {p.pid for p in multiprocessing.active_children()}
    thread = threading.Thread(target=drive)
    thread.start()
    deadline = time.time() + 120
    while not cell_files(tmp_path) and time.time() < deadline and thread.is_alive():
        time.sleep(0.02)
    ours = [p for p in multiprocessing.active_children() if p.pid not in before]
    assert ours, "no pool process seen"
    os.kill(ours[0].pid, signal.SIGKILL)
    thread.join(timeout=300)
    grid = result["grid"]
    assert grid.computed == N_CELLS and not grid.failures
    assert len(cell_files(tmp_path)) == N_CELLS


def test_without_a_scheduler_the_engine_is_local_and_an_unreachable_one_is_one_line(monkeypatch):
    monkeypatch.delenv(engine.SCHEDULER_ENV, raising=False)
    assert isinstance(engine.executor(None, 2), engine.Local)
    pytest.importorskip("distributed")
    monkeypatch.setattr(engine, "CONNECT_TIMEOUT", 3)
    monkeypatch.setenv(engine.SCHEDULER_ENV, f"tcp://127.0.0.1:{_free_port()}")     # nothing listens
    with pytest.raises(ValueError, match=r"^--scheduler tcp://127.0.0.1:\d+: cannot connect") as err:
        engine.executor(None, 2)
    assert "\n" not in str(err.value)
