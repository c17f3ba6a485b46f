"""taco-bridge-send: publish one sketch on /taco/sketch and follow the run until it ends.

    taco-bridge-send "0 5 1 6"            # prints each press and status change, exits 0 on done
    taco-bridge-send stop                 # halts the arm (zero torque)

The same as `ros2 topic pub --once /taco/sketch std_msgs/msg/String "{data: '0 5 1 6'}"` plus
`ros2 topic echo /taco/status`, for machines with the PyPI wheels and no ROS 2 command line. It
waits for the policy node to subscribe before publishing (a message sent before discovery
completes is lost). Topic names are relative: `--ros-args -r __ns:=/arm1` talks to that arm.

It trusts no claim it can check: when a keypad publishes on dial/pressed (the simulation), the
keys it registered during the run must be the sketch, or the run counts as failed even if the
status said done. Exit code: 0 when the run reports done (and, with a keypad, the keypad
registered the sketch) or after a halt; 1 on error or a keypad mismatch; 2 when nothing
answers within --timeout seconds.
"""
import argparse
import json
import sys
import time

import rclpy
from rclpy.node import Node
from std_msgs.msg import String


class SketchSender(Node):
    """Publishes a sketch and records /taco/status and /dial/pressed."""

    def __init__(self):
        super().__init__('taco_send')
        self.pub = self.create_publisher(String, 'taco/sketch', 10)
        self.statuses, self.presses = [], []
        self.create_subscription(String, 'taco/status', self.on_status, 10)
        self.pressed_sub = self.create_subscription(String, 'dial/pressed', self.on_press, 10)

    def on_status(self, msg):
        status = json.loads(msg.data)
        if not self.statuses or status['state'] != self.statuses[-1]['state'] \
                or status['active'] != self.statuses[-1]['active']:
            print('status', msg.data, flush=True)
        self.statuses.append(status)

    def on_press(self, msg):
        self.presses.append(msg.data)
        print('pressed', msg.data, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog='taco-bridge-send', description=__doc__.split('\n')[0])
    ap.add_argument('sketch', help='e.g. "0 5 1 6"; "stop" or "" halts')
    ap.add_argument('--timeout', type=float, default=120.0, help='seconds to wait for the end')
    argv = sys.argv[1:] if argv is None else list(argv)
    ros_args = argv[argv.index('--ros-args'):] if '--ros-args' in argv else []
    args = ap.parse_args(argv[:len(argv) - len(ros_args)])
    rclpy.init(args=['taco-bridge-send'] + ros_args)
    node = SketchSender()
    deadline = time.monotonic() + args.timeout
    code = 2
    try:
        while node.pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        if node.pub.get_subscription_count():
            keypad = node.count_publishers(node.pressed_sub.topic_name) > 0
            node.presses.clear()
            node.pub.publish(String(data=args.sketch))
            if args.sketch.strip().lower() in ('', 'stop'):
                return 0
            started = False   # first a status of this run (running, or error: rejected) ...
            while time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.05)
                state = node.statuses[-1]['state'] if node.statuses else None
                started = started or state in ('running', 'error')
                if started and state in ('done', 'idle', 'error'):   # ... then its end
                    code = 1 if state == 'error' else 0
                    break
            if code == 0 and state == 'done' and keypad:
                settle = time.monotonic() + 0.3           # a last press still in flight
                while time.monotonic() < settle:
                    rclpy.spin_once(node, timeout_sec=0.05)
                sketch = node.statuses[-1]['sketch']
                if node.presses != sketch:
                    print(f'mismatch: the keypad registered {" ".join(node.presses) or "nothing"}, '
                          f'the sketch is {" ".join(sketch)}', flush=True)
                    code = 1
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
