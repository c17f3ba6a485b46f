"""Small helpers shared by the nodes: parameter tables, shutdown on SIGINT / SIGTERM."""
import signal
import sys

import rclpy
from rclpy.signals import SignalHandlerOptions
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException


def declare(node, parameters, optional_types):
    """Declare every parameter of a {name: (default, description)} table up front.

    A default of None declares an optional parameter of type optional_types[name], unset until
    a parameter file or the command line sets it. Numbers accept ints and floats alike
    (`-p rate:=25` works for a rate of 25.0).
    """
    for name, (default, description) in parameters.items():
        if default is None:
            node.declare_parameter(name, optional_types[name],
                                   ParameterDescriptor(description=description))
        else:
            dynamic = isinstance(default, (int, float)) and not isinstance(default, bool)
            node.declare_parameter(name, default, ParameterDescriptor(
                description=description, dynamic_typing=dynamic))


def value(node, name):
    """A parameter's value; None for an optional one left unset."""
    try:
        return node.get_parameter(name).value
    except ParameterUninitializedException:
        return None


def stop_on_signals():
    """Install SIGINT and SIGTERM handlers that only record the signal; returns the record (a list).

    The nodes call rclpy.init with SignalHandlerOptions.NO, call this first thing, and spin with
    spin_until. A handler that raised KeyboardInterrupt could fire inside rclpy while it converts
    a message (seen as a RuntimeError from take_message and a non-zero exit); recording the
    signal and checking it between callbacks cannot, and leaves the context valid so that a node
    can still publish on its way out (zero torque).
    """
    received = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: received.append(signum))
    return received


def spin_until(node, received, period=0.1):
    """Spin node until stop_on_signals' record is non-empty (checked at least every period s)."""
    while not received and rclpy.ok():
        rclpy.spin_once(node, timeout_sec=period)


def run(make_node, label, args=None, on_exit=None):
    """A node's main(): rclpy up (without rclpy's signal handlers), make_node(), spin until
    SIGINT / SIGTERM, then on_exit(node) (e.g. a last zero-torque command) while the context is
    still valid, and shut down. Returns the exit code: 1 when the node cannot be made (the
    ValueError / OSError is printed after label), else 0."""
    received = stop_on_signals()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = make_node()
    except (ValueError, OSError) as err:
        print(f'{label}: cannot start: {err}', file=sys.stderr)
        rclpy.try_shutdown()
        return 1
    try:
        spin_until(node, received)
    finally:
        if on_exit is not None:
            on_exit(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
