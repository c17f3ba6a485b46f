"""taco-bridge-send: execute one sketch through the taco/execute_sketch action and follow it.

    taco-bridge-send "0 5 1 6"            # prints feedback and the result, exits 0 on done
    taco-bridge-send "0 5 1 6" --time-limit 30
    taco-bridge-send stop                 # cancels every goal and halts whatever runs

The same as `ros2 action send_goal --feedback /taco/execute_sketch
taco_bridge_msgs/action/ExecuteSketch "{sketch: ['0', '5', '1', '6']}"`, for machines with the
PyPI wheels and no ROS 2 command line (source the workspace's install/setup.bash first: the
action's type is built there). A goal is a handshake: the node accepts or rejects it (the reason
is printed from taco/status), feedback follows the run, the result says how it ended. Ctrl-C
cancels the goal: the arm halts at once and the result reports what was done. Topic and action
names are relative: `--ros-args -r __ns:=/arm1` talks to that arm.

It trusts no claim it can check: when a keypad publishes on dial/pressed (the simulation), the
keys it registered during the run must be the sketch, or the run counts as failed even if the
result said done. Exit code: 0 when the run is done (and, with a keypad, the keypad registered
the sketch) or after `stop`; 1 when the goal is rejected or the run ends otherwise, or on a
keypad mismatch; 2 when no action server answers within --timeout seconds; 130 after Ctrl-C.
"""
import argparse
import json
import re
import signal
import sys
import time

import rclpy
from action_msgs.msg import GoalStatus
from action_msgs.srv import CancelGoal
from rclpy.action import ActionClient
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import String

ACTION = 'taco/execute_sketch'
STATUS_NAMES = {GoalStatus.STATUS_SUCCEEDED: 'SUCCEEDED', GoalStatus.STATUS_ABORTED: 'ABORTED',
                GoalStatus.STATUS_CANCELED: 'CANCELED'}


class SketchSender(Node):
    """An action client of taco/execute_sketch that records taco/status and dial/pressed."""

    def __init__(self, action_type):
        super().__init__('taco_send')
        self.client = ActionClient(self, action_type, ACTION)
        self.cancel_all = self.create_client(CancelGoal, f'{ACTION}/_action/cancel_goal')
        self.stop_pub = self.create_publisher(String, 'taco/sketch', 10)
        self.statuses, self.presses = [], []
        self.create_subscription(String, 'taco/status',
                                 lambda m: self.statuses.append(json.loads(m.data)), 10)
        self.pressed_sub = self.create_subscription(String, 'dial/pressed', self.on_press, 10)

    def on_press(self, msg):
        self.presses.append(msg.data)
        print('pressed', msg.data, flush=True)

    def spin_until(self, done, deadline):
        while not done() and time.monotonic() < deadline:
            rclpy.spin_once(self, timeout_sec=0.05)
        return done()


def show_feedback(feedback_msg):
    f = feedback_msg.feedback
    active = f'{f.active} ({f.subtask}), P(STOP) {f.stop_probability:.3f}' if f.active >= 0 else 'none'
    print(f'feedback: active {active}, {f.elapsed:.2f} s, completed {" ".join(f.completed) or "-"}, '
          f'pressed {" ".join(f.pressed) or "-"}', flush=True)


def stop(node, deadline):
    """Cancel every goal of the action and send "stop" on the topic (a sketch sent there); 0 once
    the node's status says nothing runs."""
    if node.cancel_all.wait_for_service(timeout_sec=max(0.0, deadline - time.monotonic())):
        future = node.cancel_all.call_async(CancelGoal.Request())           # empty: every goal
        node.spin_until(future.done, deadline)
        if future.done() and future.result() is not None:
            print(f'canceled {len(future.result().goals_canceling)} goal(s)', flush=True)
    node.spin_until(lambda: node.stop_pub.get_subscription_count() > 0, deadline)
    node.stop_pub.publish(String(data='stop'))
    t0 = time.monotonic()
    seen = len(node.statuses)
    if node.spin_until(lambda: any(s['state'] != 'running' for s in node.statuses[seen:]), deadline):
        print('halted', flush=True)
        return 0
    print(f'no status confirmed the halt within {time.monotonic() - t0:.1f} s', flush=True)
    return 2


def main(argv=None):
    ap = argparse.ArgumentParser(prog='taco-bridge-send', description=__doc__.split('\n')[0])
    ap.add_argument('sketch', help='e.g. "0 5 1 6" (names or ids, spaces or commas); "stop" halts')
    ap.add_argument('--time-limit', type=float, default=0.0,
                    help='seconds the whole run may take (0: none; max_subtask_time still applies)')
    ap.add_argument('--timeout', type=float, default=120.0,
                    help='seconds to wait for the action server and for the end of the run')
    argv = sys.argv[1:] if argv is None else list(argv)
    ros_args = argv[argv.index('--ros-args'):] if '--ros-args' in argv else []
    args = ap.parse_args(argv[:len(argv) - len(ros_args)])
    try:
        from taco_bridge_msgs.action import ExecuteSketch
    except ImportError:
        print('taco-bridge-send: the interface package taco_bridge_msgs is not importable: build '
              'ros2_ws (colcon build, or taco-bridge-build) and source its install/setup.bash',
              file=sys.stderr)
        return 2
    interrupted = []
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    rclpy.init(args=['taco-bridge-send'] + ros_args, signal_handler_options=SignalHandlerOptions.NO)
    node = SketchSender(ExecuteSketch)
    deadline = time.monotonic() + args.timeout
    try:
        if args.sketch.strip().lower() in ('', 'stop'):
            return stop(node, deadline)
        if not node.client.wait_for_server(timeout_sec=args.timeout):
            print(f'no action server {ACTION} answered within {args.timeout:g} s', flush=True)
            return 2
        keypad = node.count_publishers(node.pressed_sub.topic_name) > 0
        sketch = [t for t in re.split(r'[\s,]+', args.sketch) if t]
        node.presses.clear()
        sent = len(node.statuses)
        future = node.client.send_goal_async(ExecuteSketch.Goal(sketch=sketch, time_limit=args.time_limit),
                                             feedback_callback=show_feedback)
        if not node.spin_until(future.done, deadline):
            print('no answer to the goal', flush=True)
            return 2
        handle = future.result()
        if not handle.accepted:
            node.spin_until(lambda: any(s.get('rejected') for s in node.statuses[sent:]),
                            min(deadline, time.monotonic() + 1.0))
            reason = next((s['rejected']['reason'] for s in reversed(node.statuses[sent:])
                           if s.get('rejected')), 'the node gave no reason on taco/status')
            print(f'rejected: {reason}', flush=True)
            return 1
        print(f'accepted: goal {bytes(handle.goal_id.uuid).hex()}', flush=True)
        result_future = handle.get_result_async()
        canceling = False
        while not result_future.done() and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
            if interrupted and not canceling:
                print('canceling', flush=True)
                handle.cancel_goal_async()
                canceling = True
        if not result_future.done():
            print(f'no result within {args.timeout:g} s', flush=True)
            return 2
        response = result_future.result()
        r = response.result
        print(f'result: {STATUS_NAMES.get(response.status, response.status)} {r.state}: {r.message} '
              f'(completed {" ".join(r.completed) or "-"}; pressed {" ".join(r.pressed) or "-"}; '
              f'{r.steps} steps, {r.elapsed:.2f} s)', flush=True)
        code = 0 if r.success else 1
        if code == 0 and keypad:
            node.spin_until(lambda: False, time.monotonic() + 0.3)     # a last press still in flight
            if node.presses != list(r.completed):
                print(f'mismatch: the keypad registered {" ".join(node.presses) or "nothing"}, '
                      f'the sketch is {" ".join(sketch)}', flush=True)
                code = 1
        return 130 if interrupted else code
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    sys.exit(main())
