"""taco-bridge-dial: the dial demo without a ROS 2 installation (what dial.launch.py starts).

    pip install -e ".[ros]"
    taco-bridge-build && source ros2_ws/install/setup.bash   # the action's interface package
    taco-bridge-dial                       # sim node + policy node, shipped Dial model
    taco-bridge-dial --command-interface velocity   # joint velocity commands, its shipped model
    # in another shell of the same environment:
    taco-bridge-send "0 5 1 6"             # or, with a ROS install: ros2 action send_goal ...

The two nodes run as two child processes (`python -m taco_bridge.sim_node` and
`python -m taco_bridge.policy_node`), as the launch file runs them: each gets its own
interpreter, so MuJoCo's stepping and the policy's control loop never wait for one another's
GIL, and each can be restarted or replaced (a real arm's driver instead of the sim) on its own.
The script forwards SIGINT / SIGTERM to both, and when either exits it stops the other and exits
with the first non-zero code.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

from taco_sim import dial


def node_commands(args):
    """[(name, argv)] of the nodes to start for the parsed arguments."""
    common = ['--ros-args'] + (['--params-file', args.params_file] if args.params_file else [])
    # like dial.launch.py: a value given on the command line overrides the parameter file,
    # one not given leaves the file's (or the node's default)
    rate = args.rate
    if rate is None and args.real_time_factor is not None:
        rate = args.real_time_factor / dial.CONTROL_DT
    # the policy node is a managed node: without a launch file to drive its transitions it
    # configures and activates itself
    policy = ([sys.executable, '-m', 'taco_bridge.policy_node'] + common
              + ['-r', '__node:=taco_policy', '-p', 'autostart:=true'])
    if rate is not None:
        policy += ['-p', f'rate:={float(rate)!r}']
    if args.model:
        policy += ['-p', f'model:={args.model}']
    if args.command_interface:
        policy += ['-p', f'command_interface:={args.command_interface}']
    commands = [('taco_policy', policy)]
    if not args.no_sim:
        sim = [sys.executable, '-m', 'taco_bridge.sim_node'] + common + ['-r', '__node:=taco_sim']
        if args.real_time_factor is not None:
            sim += ['-p', f'real_time_factor:={float(args.real_time_factor)!r}']
        if args.viewer:
            sim += ['-p', 'viewer:=true']
        if args.command_interface:
            sim += ['-p', f'command_interface:={args.command_interface}']
        commands.insert(0, ('taco_sim', sim))
    return commands


def parser():
    ap = argparse.ArgumentParser(prog='taco-bridge-dial', description=__doc__.split('\n')[0])
    ap.add_argument('--no-sim', action='store_true',
                    help='start only the policy node (a real arm publishes /joint_states)')
    ap.add_argument('--model', default='', help='model directory (default: the shipped Dial model)')
    ap.add_argument('--params-file', default='',
                    help='ROS parameter file (e.g. ros2_ws/src/taco_bridge/config/dial.yaml)')
    ap.add_argument('--rate', type=float, default=None,
                    help='policy control rate, Hz (default: 25 x --real-time-factor if given, '
                         'else the parameter file\'s or 25)')
    ap.add_argument('--real-time-factor', type=float, default=None,
                    help='simulated seconds per wall-clock second (default: the parameter '
                         'file\'s or 1)')
    ap.add_argument('--viewer', action='store_true', help='open the MuJoCo viewer')
    ap.add_argument('--command-interface', choices=('effort', 'velocity'), default=None,
                    help='joint torques or joint velocities, for both nodes (default: the parameter '
                         'file\'s or effort)')
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    procs = []

    def stop(signum=None, frame=None):
        for _, p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for name, cmd in node_commands(args):
        procs.append((name, subprocess.Popen(cmd, env=os.environ.copy())))
    code = 0
    try:
        while all(p.poll() is None for _, p in procs):
            time.sleep(0.1)
        code = next((p.returncode for _, p in procs if p.poll()), 0)
    finally:
        stop()
        deadline = time.monotonic() + 5.0
        for _, p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return code


if __name__ == '__main__':
    sys.exit(main())
