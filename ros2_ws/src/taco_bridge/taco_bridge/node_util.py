"""Small helpers shared by the nodes: parameter tables and their checks, topic names, shutdown
on SIGINT / SIGTERM."""
import math
import signal
import sys

import rclpy
from rclpy.signals import SignalHandlerOptions
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import (NameValidationException, ParameterException,
                              ParameterUninitializedException)
from rclpy.validate_topic_name import validate_topic_name

READ_ONLY = 'read at start-up; read-only: restart the node to change it'


def declare(node, parameters, optional_types):
    """Declare every parameter of a {name: (default, description)} table up front, read-only.

    The nodes read their parameters once, at start-up (a control rate, a topic or a safety
    limit changed under a running sketch would be half applied), so every parameter is declared
    read_only: `ros2 param set` is refused with "parameter is read-only" instead of being
    accepted and ignored. A default of None declares an optional parameter of type
    optional_types[name], unset until a parameter file or the command line sets it. Numbers
    accept ints and floats alike (`-p rate:=25` works for a rate of 25.0).
    """
    for name, (default, description) in parameters.items():
        text = f'{description} ({READ_ONLY})'
        if default is None:
            node.declare_parameter(name, optional_types[name],
                                   ParameterDescriptor(description=text, read_only=True))
        else:
            dynamic = isinstance(default, (int, float)) and not isinstance(default, bool)
            node.declare_parameter(name, default, ParameterDescriptor(
                description=text, dynamic_typing=dynamic, read_only=True))


def number(params, name, low, high, low_open=True, high_open=False):
    """params[name] as a float in the range from low to high (open or closed at either end, as
    flagged); ValueError naming the parameter and the range otherwise (NaN, inf, text, bool)."""
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f'parameter {name}: expected a finite number, got {value!r}')
    if (value <= low if low_open else value < low) or (value >= high if high_open else value > high):
        raise ValueError(f'parameter {name}: expected {"(" if low_open else "["}{low:g}, {high:g}'
                         f'{")" if high_open else "]"}, got {value!r}')
    return float(value)


def topic(params, name):
    """params[name] as a topic name, checked by ROS's rules; ValueError naming the parameter."""
    value = params[name]
    try:
        validate_topic_name(value)
    except (NameValidationException, TypeError) as err:
        reason = ' '.join(str(err).split())
        raise ValueError(f'parameter {name}: {value!r} is not a valid topic name ({reason})')
    return value


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
    error is printed on one line after label: a bad parameter value, type or name, or a model
    that cannot be loaded), else 0."""
    received = stop_on_signals()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = make_node()
    except (ValueError, OSError, ParameterException, NameValidationException) as err:
        print(f'{label}: cannot start: {" ".join(str(err).split())}', file=sys.stderr)
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
