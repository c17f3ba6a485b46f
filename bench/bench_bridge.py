"""Benchmark of the ROS 2 bridge: sketch-to-first-command latency and the control rate held.

Starts the sim node and the policy node (python -m taco_bridge.sim_node / .policy_node, the
pip-installed package; real rclpy and Fast DDS, separate processes, DDS in a domain of its own
with peers found through localhost: ROS_STATIC_PEERS=127.0.0.1 under the default discovery range,
SUBNET, unless the environment sets them) and measures from this third process:

- latency: time from publishing a sketch on /taco/sketch to receiving the first effort command
  on /effort_controller/commands (a client's round trip: DDS in, parse, forward kinematics,
  one decision of the sub-policies, DDS out); `stop` between trials; median, 95th percentile,
  max over --trials trials;
- control rate: one sketch runs for --duration s (60 s; 10 s with --quick); commands received per
  second against the target `rate` (25 Hz), and the spread of the intervals between commands
  (median, 99th percentile, max; the target interval is 40 ms).

- with --frozen N: N trials of a frozen simulator: while a sketch runs, the sim node is stopped
  (SIGSTOP) at a random moment; the time from the last joint state this process received to the
  first zero command after it (the policy node's watchdog), and any non-zero command after that
  zero; then SIGCONT, "stop", and the next trial. Both times are taken in this process, so the
  transport of the joint state and of the command enter alike.

- with --sigterm N: N trials of SIGTERM at a random moment of a running PIN (what systemd and
  `docker stop` send): a policy node with the shipped Dial model (or --model) is started,
  dials "0 5 1 6" on the sim node, and gets SIGTERM 0.1-3 s after the sketch; a trial passes
  when the node exits 0 and the last command this process receives after the signal is zeros
  (the node waits for its subscribers' acknowledgement of the zero before it destroys its
  publisher); the time from the signal to that zero. Run it beside other jobs for a loaded box.

Transport: the policy node keeps Fast DDS to UDPv4 (taco_bridge.node_util.no_shared_memory_transport);
--policy-env FASTDDS_BUILTIN_TRANSPORTS=DEFAULT gives it the shared-memory transport back, for a
comparison in the same conditions. Under ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST rmw_fastrtps
adds shared memory to every node whatever the variable says.

Model: a random model with the Dial architecture (act and STOP nets [300, 200, 100], the cost of
one decision of the shipped model) whose STOP nets never fire, so that a run lasts as long as
the measurement; --model takes a model directory instead (whose sub-policies may stop early).

Usage (the workspace built and sourced: the policy node needs the action's interface package)::

    taco-bridge-build && source ros2_ws/install/setup.bash
    python bench/bench_bridge.py            # 60 s rate run, 50 latency trials
    python bench/bench_bridge.py --quick    # 10 s, 20 trials
    python bench/bench_bridge.py --quick --frozen 100   # and 100 frozen-simulator trials
    python bench/bench_bridge.py --quick --frozen 100 --policy-env FASTDDS_BUILTIN_TRANSPORTS=DEFAULT
    python bench/bench_bridge.py --sigterm 100          # SIGTERM trials only
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from taco_app.processes import end_processes


def random_dial_model(path):
    from taco_ref.model import Model, save
    from taco_ref.policy import PolicyConfig, init_params
    from taco_sim import dial
    cfg = PolicyConfig(state_dim=dial.STATE_DIM, n_subtasks=dial.K, action_dim=dial.ACTION_DIM,
                       act_hidden=[300, 200, 100], stop_hidden=[300, 200, 100])
    params = init_params(cfg, np.random.default_rng(0))
    params["stop.b3"] = params["stop.b3"] - 50.0                         # (K, 1): never STOP
    save(Model(params, cfg, dial.VOCAB, "gtbc"), path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--model", default="")
    ap.add_argument("--duration", type=float, default=None, help="rate run, s")
    ap.add_argument("--trials", type=int, default=None, help="latency trials")
    ap.add_argument("--rate", type=float, default=25.0)
    ap.add_argument("--frozen", type=int, default=0, help="frozen-simulator trials")
    ap.add_argument("--sigterm", type=int, default=0,
                    help="SIGTERM trials (only these: no latency, rate or frozen measurements)")
    ap.add_argument("--policy-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for the policy node's process alone "
                         "(e.g. FASTDDS_BUILTIN_TRANSPORTS=DEFAULT); repeatable")
    args = ap.parse_args()
    duration = args.duration or (10.0 if args.quick else 60.0)
    trials = args.trials or (20 if args.quick else 50)
    os.environ["ROS_DOMAIN_ID"] = str(1 + (os.getpid() + 50) % 100)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "SUBNET")   # not LOCALHOST: docstring
    os.environ.setdefault("ROS_STATIC_PEERS", "127.0.0.1")
    policy_env = dict(os.environ)
    for item in args.policy_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--policy-env: expected KEY=VALUE, got {item!r}")
        policy_env[key] = value

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray, String

    if args.sigterm:
        return sigterm_trials(args.sigterm, args.model, policy_env)
    tmp = tempfile.mkdtemp(prefix="bench_bridge_")
    model = args.model or random_dial_model(os.path.join(tmp, "model"))
    common = ["--ros-args", "-p", f"max_subtask_time:={10 * duration + 60.0!r}", "-p", "autostart:=true"]
    procs = [subprocess.Popen([sys.executable, "-m", "taco_bridge.sim_node", "--ros-args"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([sys.executable, "-m", "taco_bridge.policy_node"] + common +
                              ["-p", f"model:={model}", "-p", f"rate:={args.rate!r}"],
                              env=policy_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    rclpy.init()
    rmw = rclpy.get_rmw_implementation_identifier()
    node = rclpy.create_node("bench_bridge")
    pub = node.create_publisher(String, "/taco/sketch", 10)
    commands = []                                                         # (t, nonzero)
    node.create_subscription(Float64MultiArray, "/effort_controller/commands",
                             lambda m: commands.append((time.monotonic(), any(m.data))), 1000)
    joint_times, statuses = [], []
    node.create_subscription(JointState, "/joint_states", lambda m: joint_times.append(time.monotonic()), 1000)
    node.create_subscription(String, "/taco/status",
                             lambda m: statuses.append((time.monotonic(), json.loads(m.data))), 1000)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    try:
        deadline = time.monotonic() + 60
        while (pub.get_subscription_count() == 0 or node.count_publishers("/joint_states") == 0
               or node.count_publishers("/effort_controller/commands") == 0):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                sys.exit("the nodes did not come up")
            time.sleep(0.05)
        time.sleep(1.0)

        def first_command_after(t0, timeout=5.0):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                hit = next((t for t, nz in list(commands) if t >= t0 and nz), None)
                if hit is not None:
                    return hit
                time.sleep(0.0005)
            return None

        latencies, lost = [], 0
        for i in range(trials):
            t0 = time.monotonic()
            pub.publish(String(data=str(i % 10)))
            t1 = first_command_after(t0)
            if t1 is None:
                lost += 1
            else:
                latencies.append(t1 - t0)
            pub.publish(String(data="stop"))
            time.sleep(0.15)
        lat = np.array(latencies) * 1e3                                   # ms

        pub.publish(String(data="0 5 1 6"))
        time.sleep(1.0)                                                   # settle
        start = time.monotonic()
        time.sleep(duration)
        stop = time.monotonic()
        pub.publish(String(data="stop"))
        ts = np.array([t for t, _ in list(commands) if start <= t < stop])
        gaps = np.diff(ts) * 1e3                                          # ms
        rate = (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 else 0.0

        def fresh_after(t0):
            """A status sent after t0 with a joint state younger than 0.1 s, and one received here."""
            return (any(t > t0 and s.get("joint_state_age") is not None and s["joint_state_age"] < 0.1
                        for t, s in list(statuses)) and any(t > t0 for t in list(joint_times)))

        def restart_sim(seed):
            """A fresh sim (the random model drives the arm anywhere, and a pose past the joint
            ranges would end the next run at once); True once the policy node has matched it."""
            procs[0].send_signal(signal.SIGINT)
            try:
                procs[0].wait(timeout=30)
            except subprocess.TimeoutExpired:
                procs[0].kill()
            procs[0] = subprocess.Popen([sys.executable, "-m", "taco_bridge.sim_node", "--ros-args",
                                         "-p", f"seed:={seed}"],
                                        stdout=sim_log, stderr=subprocess.STDOUT)
            t_start = time.monotonic()
            while time.monotonic() < t_start + 120 and procs[0].poll() is None:
                if fresh_after(t_start + 0.5):           # the old sim's states are 0.5 s old by then
                    return True
                time.sleep(0.05)
            return False

        frozen, late, missing, skipped = [], 0, 0, 0
        rng = np.random.default_rng(0)
        sim_log = open(os.path.join(tmp, "sim.log"), "w")
        for i in range(args.frozen):
            if not any(restart_sim(i) for _ in range(3)):
                skipped += 1
                continue
            pub.publish(String(data="0 5 1 6"))
            time.sleep(rng.uniform(0.3, 1.0))
            procs[0].send_signal(signal.SIGSTOP)
            t_stop = time.monotonic()
            time.sleep(1.0)
            procs[0].send_signal(signal.SIGCONT)
            last = max(t for t in list(joint_times) if t <= t_stop + 0.05)
            after = [(t, nz) for t, nz in list(commands) if t > last]
            zero = next((t for t, nz in after if not nz), None)
            pub.publish(String(data="stop"))
            if zero is None:
                missing += 1
                continue
            frozen.append(zero - last)
            late += any(nz for t, nz in after if t > zero and t < t_stop + 1.0)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        end_processes(procs, signal.SIGINT, grace=5)

    print(f"setup: sim node + policy node as separate processes, rclpy with {rmw}, discovery range "
          f"{os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE']}, static peers {os.environ.get('ROS_STATIC_PEERS') or 'none'}, "
          f"{os.cpu_count()} cores; model "
          f"{'random (Dial architecture, never stops)' if not args.model else model}"
          + (f"; policy node's environment: {' '.join(args.policy_env)}" if args.policy_env else ""))
    print(f"latency sketch -> first command: {len(lat)} trials ({lost} without a command in 5 s): "
          f"median {np.median(lat):.2f} ms, p95 {np.percentile(lat, 95):.2f} ms, max {lat.max():.2f} ms")
    print(f"control rate over {stop - start:.1f} s: {rate:.2f} Hz held against a target of "
          f"{args.rate:g} Hz ({100 * rate / args.rate:.1f} %); {len(ts)} commands; interval median "
          f"{np.median(gaps):.2f} ms, p99 {np.percentile(gaps, 99):.2f} ms, max {gaps.max():.2f} ms "
          f"(target {1e3 / args.rate:.1f} ms)")
    if args.frozen and frozen:
        fz = np.array(frozen) * 1e3                                       # ms
        timeout = 250.0                                                   # joint_state_timeout
        print(f"frozen simulator: {args.frozen - skipped} trials ({skipped} skipped: the sim did not come "
              f"up); a zero command within joint_state_timeout ({timeout:.0f} ms) of the last joint state "
              f"in {int(np.sum(fz <= timeout))} (none at all in {missing}); after it: median "
              f"{np.median(fz):.0f} ms, p95 "
              f"{np.percentile(fz, 95):.0f} ms, max {fz.max():.0f} ms; a non-zero command after the "
              f"zero in {late}")


def sigterm_trials(n, model, policy_env):
    """--sigterm (module docstring): prints one summary line; exit code 1 unless all n passed."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import Float64MultiArray, String

    rclpy.init()
    node = rclpy.create_node("bench_bridge_sigterm")
    pub = node.create_publisher(String, "/taco/sketch", 10)
    commands, statuses = [], []                                           # (t, nonzero), (t, dict)
    node.create_subscription(Float64MultiArray, "/effort_controller/commands",
                             lambda m: commands.append((time.monotonic(), any(m.data))), 1000)
    node.create_subscription(String, "/taco/status",
                             lambda m: statuses.append((time.monotonic(), json.loads(m.data))), 1000)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    sim = subprocess.Popen([sys.executable, "-m", "taco_bridge.sim_node", "--ros-args"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rng = np.random.default_rng(0)
    passed, failures, zero_ms, skipped = 0, [], [], 0

    def wait(predicate, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.01)
        return False

    try:
        for i in range(n):
            t_start = time.monotonic()
            policy = subprocess.Popen([sys.executable, "-m", "taco_bridge.policy_node", "--ros-args",
                                       "-p", "autostart:=true"] + (["-p", f"model:={model}"] if model else []),
                                      env=policy_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ready = wait(lambda: any(t > t_start and s["lifecycle"] == "active" and s.get("joint_state_age")
                                     is not None for t, s in list(statuses)), 120)
            t_send = time.monotonic()
            pub.publish(String(data="0 5 1 6"))
            running = ready and wait(lambda: any(t > t_send and s["state"] == "running"
                                                 for t, s in list(statuses)), 10)
            if not running:
                skipped += 1
                policy.kill()
                policy.wait()
                continue
            time.sleep(rng.uniform(0.1, 3.0))
            t_sig = time.monotonic()
            policy.send_signal(signal.SIGTERM)
            try:
                code = policy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                policy.kill()
                code = "hung"
            time.sleep(0.3)
            after = [(t, nz) for t, nz in list(commands) if t >= t_sig]
            ok = code == 0 and bool(after) and not after[-1][1]
            if ok:
                passed += 1
                zero_ms.append(1e3 * (next(t for t, nz in after if not nz) - t_sig))
            else:
                failures.append(f"trial {i}: exit {code}, commands after the signal {[nz for _, nz in after]}")
            print(f"\rSIGTERM trials: {i + 1}/{n}, {passed} with a zero command last", end="", file=sys.stderr)
        print(file=sys.stderr)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        end_processes([sim], signal.SIGINT, grace=10)
    zero = np.array(zero_ms) if zero_ms else np.array([np.nan])
    load = os.getloadavg()
    print(f"SIGTERM mid-PIN: {passed} of {n - skipped} trials ended with a zero command last and exit 0 "
          f"({skipped} skipped: the node or the PIN did not start); signal -> zero: median "
          f"{np.nanmedian(zero):.0f} ms, max {np.nanmax(zero):.0f} ms; load average {load[0]:.1f} "
          f"on {os.cpu_count()} cores; discovery range {os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE']}")
    for line in failures:
        print(line)
    return 0 if passed == n - skipped and not skipped else 1


if __name__ == "__main__":
    sys.exit(main())
