"""Benchmark of stopping the ROS 2 bridge's launch: from a stop signal to the zero command.

Each trial starts `ros2 launch taco_bridge dial.launch.py` (the real launch system: the `ros2`
command on PATH, the workspace's install sourced), lets the policy node dial a long sketch with
the shipped model on the sim node, and at a random moment of the run (0.2-1.5 s after the first
command) stops the launch with one of four signals:

  sigint-launch   SIGINT to the `ros2 launch` process alone (`kill -INT`, `docker stop` with
                  STOPSIGNAL SIGINT, systemd's KillSignal=SIGINT with KillMode=mixed)
  sigterm-launch  SIGTERM to the launch process alone (`docker stop`'s default signal)
  sigint-group    SIGINT to the launch's whole process group (Ctrl-C in its terminal)
  sigterm-group   SIGTERM to the whole group (systemd's default KillMode=control-group)

This process subscribes to the command topic and measures, per trial: the time from the signal
to the first zero command it receives, the non-zero commands received after the signal (before
that zero, and after it), the launch's exit code and the time from the signal to its exit (after
a SIGTERM to the launch alone the nodes learn of the stop only from that exit), and any node the
launch reports as "process has died" or any "not acknowledged" warning in its output. A trial ends when no process of the
launch's process group is left.

`ros2 launch` runs non-interactive when its standard input is not a terminal (the default here,
as under docker or systemd): it then forwards SIGINT to the nodes itself. `--stdin tty` gives it
a pseudo-terminal instead (interactive: `ros2 launch` leaves SIGINT to the terminal, which sends
it to the whole group; the launch file forwards it when it reached the launch alone).

Usage (the workspace built, its install/setup.bash sourced, and the launch packages installed)::

    python bench/bench_bridge_stop.py --trials 100                   # 100 per case, 4 cases
    python bench/bench_bridge_stop.py --trials 25 --cases sigint-launch --stdin tty
    python bench/bench_bridge_stop.py --trials 10 --interface velocity --out stop.json
    python bench/bench_bridge_stop.py --table stop.json more.json    # the README's table, pooled

DDS stays in a domain of its own (ROS_DOMAIN_ID, default 61-100 by this process's id), peers found through localhost
(ROS_STATIC_PEERS=127.0.0.1, discovery range SUBNET) unless the environment sets them.
"""
import argparse
import json
import os
import pty
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import cpu_model  # noqa: E402

CASES = {
    "sigint-launch": (signal.SIGINT, False),
    "sigterm-launch": (signal.SIGTERM, False),
    "sigint-group": (signal.SIGINT, True),
    "sigterm-group": (signal.SIGTERM, True),
}
"""case -> (signal, sent to the whole process group)."""
SKETCH = "0 5 1 6 2 7 3 8 4 9 0 5 1 6 2 7 3 8 4 9"
"""A long PIN without back-to-back repeats: it is still being dialled when the signal comes."""
TOPICS = {"effort": "/effort_controller/commands", "velocity": "/velocity_controller/commands"}


class Listener:
    """An rclpy node in this process: records commands and statuses, publishes sketches."""

    def __init__(self, command_topic):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import Float64MultiArray, String
        self.String = String
        self.node = rclpy.create_node(f"bench_bridge_stop_{os.getpid()}")
        self.sketch_pub = self.node.create_publisher(String, "/taco/sketch", 10)
        self.commands, self.statuses = [], []            # [(t, data)], [(t, dict)]
        self.node.create_subscription(Float64MultiArray, command_topic,
                                      lambda m: self.commands.append((time.monotonic(), list(m.data))), 100)
        self.node.create_subscription(String, "/taco/status",
                                      lambda m: self.statuses.append((time.monotonic(), json.loads(m.data))),
                                      100)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def wait_for(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            time.sleep(0.005)
        return None

    def status_after(self, t0, predicate):
        return next((s for t, s in list(self.statuses) if t >= t0 and predicate(s)), None)


def group_members(pgid):
    """Pids of the live processes (not zombies) in process group pgid."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":              # fields[0] state, [2] pgrp
            pids.append(int(entry))
    return pids


def start_launch(interface, stdin_mode, log):
    """`ros2 launch taco_bridge dial.launch.py` as the leader of a new process group, with SIGINT
    at its default (a shell started this one in the background with SIGINT ignored)."""
    cmd = ["ros2", "launch", "taco_bridge", "dial.launch.py"]
    if interface != "effort":
        cmd.append(f"command_interface:={interface}")
    master = None
    if stdin_mode == "tty":
        master, slave = pty.openpty()
        stdin = slave
    else:
        stdin = subprocess.DEVNULL

    def child_setup():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setpriority(os.PRIO_PROCESS, 0, BASE_NICE)        # the launch at the default priority

    proc = subprocess.Popen(cmd, stdin=stdin, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=child_setup)
    if master is not None:
        os.close(slave)
    return proc, master


BASE_NICE = os.getpriority(os.PRIO_PROCESS, 0)
"""The nice value this process started with: the launch and its nodes run at it (--nice)."""
HALT = re.compile(r"\[(\d+\.\d+)\] \[taco_policy\]: run \w+")


def node_halt_ms(text, wall_sig):
    """ms from the signal to the policy node's log line that its run halted (its own clock,
    after its zero command from the signal handler was published): how soon the node acted,
    whatever delivery to the subscriber took. None without such a line."""
    for line in text.splitlines():
        m = HALT.search(line)
        if m and float(m.group(1)) >= wall_sig - 1.0:
            return 1e3 * (float(m.group(1)) - wall_sig)
    return None


def trial(lis, case, interface, stdin_mode, rng, logdir, index):
    """One trial; returns a dict of its measurements (or {'error': ...})."""
    sig, group = CASES[case]
    log_path = os.path.join(logdir, f"{case}-{index}.log")
    log = open(log_path, "w")
    t_start = time.monotonic()
    proc, master = start_launch(interface, stdin_mode, log)
    out = {"case": case, "trial": index}
    try:
        ready = lis.wait_for(lambda: lis.status_after(
            t_start, lambda s: s.get("lifecycle") == "active" and s.get("joint_state_age") is not None), 120)
        if not ready:
            return dict(out, error="the policy node did not come up")
        lis.wait_for(lambda: lis.sketch_pub.get_subscription_count() > 0, 30)
        t_send = time.monotonic()
        lis.sketch_pub.publish(lis.String(data=SKETCH))
        first = lis.wait_for(lambda: next((t for t, c in list(lis.commands) if t >= t_send and any(c)), None),
                             10)
        if first is None:
            return dict(out, error="no command of the run")
        time.sleep(rng.uniform(0.2, 1.5))
        t_sig, wall_sig = time.monotonic(), time.time()
        if group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        t_exit = time.monotonic()
        lis.wait_for(lambda: not group_members(proc.pid), 30)
        t_gone = time.monotonic()
        time.sleep(0.3)                                     # late deliveries
        after = [(t, c) for t, c in list(lis.commands) if t >= t_sig]
        zero = next((t for t, c in after if not any(c)), None)
        running_before = any(any(c) for t, c in list(lis.commands) if t_send <= t < t_sig)
        log.flush()
        text = open(log_path).read()
        out.update({
            "zero_ms": None if zero is None else 1e3 * (zero - t_sig),
            "nonzero_after_signal": sum(1 for t, c in after if any(c) and (zero is None or t < zero)),
            "nonzero_after_zero": 0 if zero is None else sum(1 for t, c in after if t > zero and any(c)),
            "running_before": running_before,
            "launch_exit": code,
            "signal_time": wall_sig,
            "launch_exit_ms": None if code is None else 1e3 * (t_exit - t_sig),
            "all_gone_ms": 1e3 * (t_gone - t_sig),
            "died": [line.strip() for line in text.splitlines() if "process has died" in line],
            "not_acknowledged": sum("not acknowledged" in line for line in text.splitlines()),
            "node_halt_ms": node_halt_ms(text, wall_sig),
        })
        return out
    finally:
        for pid in group_members(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if master is not None:
            os.close(master)
        log.close()


def summary(rows):
    """Per case: trials, zero within 100 ms, median / p99 / max delay, non-zero after the signal."""
    lines = []
    for case in CASES:
        r = [x for x in rows if x["case"] == case]
        if not r:
            continue
        ok = [x for x in r if "error" not in x]
        d = np.array([x["zero_ms"] for x in ok if x["zero_ms"] is not None])
        within = int(np.sum(d <= 100.0))
        line = (f"{case:15s} trials {len(r):3d} (failed to start: {len(r) - len(ok)})  "
                f"zero within 100 ms: {within} of {len(ok)}  no zero: {len(ok) - len(d)}")
        if len(d):
            line += (f"  delay median {np.median(d):.1f} ms, p99 {np.percentile(d, 99):.1f} ms, "
                     f"max {d.max():.1f} ms")
        exits = [x["launch_exit_ms"] for x in ok if x.get("launch_exit_ms") is not None]
        if exits:
            line += f"  launch exit median {np.median(exits):.1f} ms, max {max(exits):.1f} ms"
        line += (f"  non-zero commands after the signal: {sum(x['nonzero_after_signal'] for x in ok)} "
                 f"(in {sum(1 for x in ok if x['nonzero_after_signal'])} trials), after the zero: "
                 f"{sum(x['nonzero_after_zero'] for x in ok)}  launch exit codes "
                 f"{sorted({x['launch_exit'] for x in ok}, key=str)}  died: "
                 f"{sum(len(x['died']) for x in ok)}  not-acknowledged warnings: "
                 f"{sum(x['not_acknowledged'] for x in ok)}")
        lines.append(line)
    return lines


def markdown(rows):
    """The README's table: per case, trials, zero within 100 ms, median / p99 / max delay (ms),
    the policy node's own halt after the signal (its log line, median / max ms),
    non-zero commands received after the signal (trials with any), after the zero, and the
    launch's return codes (subprocess's: -15 for a process ended by SIGTERM)."""
    out = ["| signal, sent to | trials | zero within 100 ms | median / p99 / max (ms) | node halted: "
           "median / max (ms) | non-zero commands after the signal (trials) | non-zero after the zero | "
           "launch's return code |",
           "|---|---:|---:|---|---|---:|---:|---|"]
    names = {"sigint-launch": "SIGINT, the launch process", "sigterm-launch": "SIGTERM, the launch process",
             "sigint-group": "SIGINT, the process group", "sigterm-group": "SIGTERM, the process group"}
    for case in CASES:
        ok = [x for x in rows if x["case"] == case and "error" not in x]
        if not ok:
            continue
        d = np.array([x["zero_ms"] for x in ok if x["zero_ms"] is not None])
        codes = sorted({x["launch_exit"] for x in ok}, key=str)
        halt = np.array([x["node_halt_ms"] for x in ok if x.get("node_halt_ms") is not None])
        halted = f"{np.median(halt):.1f} / {halt.max():.1f}" if halt.size else "-"
        out.append(f"| {names[case]} | {len(ok)} | {int(np.sum(d <= 100.0))} of {len(ok)} | "
                   f"{np.median(d):.1f} / {np.percentile(d, 99):.1f} / {d.max():.1f} | {halted} | "
                   f"{sum(x['nonzero_after_signal'] for x in ok)} "
                   f"({sum(1 for x in ok if x['nonzero_after_signal'])}) | "
                   f"{sum(x['nonzero_after_zero'] for x in ok)} | {', '.join(map(str, codes))} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="print the markdown table of the trials saved with --out (several files: "
                         "pooled) and exit")
    ap.add_argument("--trials", type=int, default=100, help="trials per case")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    ap.add_argument("--interface", choices=sorted(TOPICS), default="effort")
    ap.add_argument("--stdin", choices=("null", "tty"), default="null",
                    help="the launch's standard input: null (non-interactive) or a pseudo-terminal")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="write every trial's measurements here (JSON)")
    ap.add_argument("--nice", type=int, default=0,
                    help="this process's nice value (negative needs CAP_SYS_NICE): the subscriber that "
                         "stands in for the arm, whose driver runs at a raised priority on a robot; the "
                         "launch and its nodes keep the default")
    args = ap.parse_args()
    if args.table:
        rows = []
        for path in args.table:
            with open(path) as f:
                rows += json.load(f)
        print("\n".join(markdown(rows)))
        failed = sum(1 for x in rows if "error" in x)
        loads = [x["load"] for x in rows]
        print(f"\n{len(rows)} trials ({failed} whose launch did not come up, left out); load average "
              f"{min(loads):.1f}-{max(loads):.1f}; died: {sum(len(x.get('died', [])) for x in rows)}; "
              f"not-acknowledged warnings: {sum(x.get('not_acknowledged', 0) for x in rows)}")
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}")
    if args.nice:
        os.nice(args.nice)                              # the launch is put back (child_setup)
    os.environ.setdefault("ROS_DOMAIN_ID", str(61 + os.getpid() % 40))   # a stray run elsewhere stays apart
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "SUBNET")
    os.environ.setdefault("ROS_STATIC_PEERS", "127.0.0.1")
    logdir = tempfile.mkdtemp(prefix="bench_bridge_stop_")
    os.environ.setdefault("ROS_LOG_DIR", logdir)
    import rclpy
    from rclpy.signals import SignalHandlerOptions
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)      # Ctrl-C: the summary so far
    lis = Listener(TOPICS[args.interface])
    rng = np.random.default_rng(args.seed)
    print(f"CPU: {cpu_model()}; load average {os.getloadavg()[0]:.2f}; interface {args.interface}; "
          f"stdin {args.stdin}; logs in {logdir}", flush=True)
    rows = []
    try:
        for i in range(args.trials):                  # the cases interleaved: same conditions
            for case in cases:
                row = trial(lis, case, args.interface, args.stdin, rng, logdir, i)
                row["load"] = os.getloadavg()[0]
                rows.append(row)
                print(json.dumps(row), flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        print(f"\nCPU: {cpu_model()}; load average at the end {os.getloadavg()[0]:.2f}; interface "
              f"{args.interface}; stdin {args.stdin}")
        for line in summary(rows):
            print(line)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=1)
        lis.executor.shutdown()
        lis.node.destroy_node()
        lis.thread.join(timeout=5)
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
