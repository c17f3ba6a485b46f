"""taco-bridge-send: publish one sketch on /taco/sketch and follow the run until it ends.

    taco-bridge-send "0 5 1 6"            # prints each press and status change, exits 0 on done
    taco-bridge-send stop                 # halts the arm (zero torque)

The same as `ros2 topic pub --once /taco/sketch std_msgs/msg/String "{data: '0 5 1 6'}"` plus
`ros2 topic echo /taco/status`, for machines with the PyPI wheels and no ROS 2 command line. It
waits for the policy node to subscribe before publishing (a message sent before discovery
completes is lost). Exit code: 0 when the run reports done (or after a halt), 1 on error,
2 when nothing answers within --timeout seconds.
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
        self.pub = self.create_publisher(String, '/taco/sketch', 10)
        self.statuses, self.presses = [], []
        self.create_subscription(String, '/taco/status', self.on_status, 10)
        self.create_subscription(String, '/dial/pressed', self.on_press, 10)

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
    args = ap.parse_args(argv)
    rclpy.init()
    node = SketchSender()
    deadline = time.monotonic() + args.timeout
    code = 2
    try:
        while node.pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        if node.pub.get_subscription_count():
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
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
