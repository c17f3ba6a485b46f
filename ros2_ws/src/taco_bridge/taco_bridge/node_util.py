"""Small helpers shared by the nodes: parameter tables and their checks, topic names, shutdown
on SIGINT / SIGTERM / SIGHUP and when the parent process exits."""
import math
import os
import signal
import sys

import rclpy
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import (NameValidationException, ParameterException,
                              ParameterUninitializedException)
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.validate_topic_name import validate_topic_name

RCLError = _rclpy.RCLError
"""rcl's error type (the implementation's; rclpy exports no public name for it)."""
READ_ONLY = 'read at start-up; read-only: restart the node to change it'


def declare(node, parameters, derive=None, resolve_empty=None):
    """Declare every parameter of a {name: (default, description)} table up front, read-only.

    The nodes read their parameters once, at start-up (a control rate, a topic or a safety
    limit changed under a running sketch would be half applied), so every parameter is declared
    read_only: `ros2 param set` is refused ("Trying to set a read-only parameter") instead of
    being accepted and ignored. A default of None is derived from the parameters declared before
    it, `derive(name, {name: value})`, so that every parameter has a value and `ros2 param dump`
    shows them all. Numbers accept ints and floats alike (`-p rate:=25` works for a rate of 25.0).
    A parameter for which `resolve_empty(name, {name: value})` returns a value (not None) takes
    that value when it is left empty (''), so that a dump shows what is in use (the policy node's
    model: the shipped one); it is read-only from then on, as the others.
    """
    values = {}
    for name, (default, description) in parameters.items():
        text = f'{description} ({READ_ONLY})'
        if default is None:
            default = derive(name, values)
        dynamic = isinstance(default, (int, float)) and not isinstance(default, bool)
        resolved = None if resolve_empty is None else resolve_empty(name, values)
        node.declare_parameter(name, default, ParameterDescriptor(
            description=text, dynamic_typing=dynamic, read_only=resolved is None))
        if resolved is not None:
            if value(node, name) == '':
                node.set_parameters([Parameter(name, value=resolved)])
            node.set_descriptor(name, ParameterDescriptor(             # a new one: read-only now
                description=text, type=node.describe_parameter(name).type, read_only=True))
        values[name] = value(node, name)


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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a node (stop_on_signals)."""


def stop_on_signals(on_first=None):
    """Install SIGINT, SIGTERM and SIGHUP handlers that record the signal; returns the record
    (a list). on_first (a list of callables, filled later: the node does not exist yet) is
    called with the signal number at the first stop signal, from the handler itself.

    The nodes call rclpy.init with SignalHandlerOptions.NO, call this first thing, and spin with
    spin_until. A handler that raised KeyboardInterrupt could fire inside rclpy while it converts
    a message (seen as a RuntimeError from take_message and a non-zero exit); recording the
    signal and checking it between callbacks cannot, and leaves the context valid so that a node
    can still publish on its way out (zero torque). SIGHUP: the terminal it ran in was closed.

    Python runs a handler in the main thread between two bytecodes, so it never interrupts rclpy
    inside a call: a callback of on_first may publish (the policy node's immediate zero command:
    a control tick being computed when the signal comes would otherwise delay it by the tick).
    """
    received = []

    def handler(signum, frame):
        received.append(signum)
        if len(received) == 1:
            for callback in on_first or ():
                callback(signum)
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    return received


PR_SET_PDEATHSIG = 1
"""prctl option: the signal the kernel sends this process when the thread that started it exits."""


def stop_when_parent_dies(signum=signal.SIGTERM):
    """Ask the kernel for signum when the process that started this one exits (Linux; False
    elsewhere, or if the call fails). On SIGTERM `ros2 launch` exits at once without stopping its
    nodes; with this the node hears of it at once, not at its next check of its parent
    (stop_pending, every PARENT_CHECK_PERIOD), which stays as the fallback. A parent that had
    exited already is caught by that check."""
    if not sys.platform.startswith('linux'):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


PARENT_CHECK_PERIOD = 0.02
"""s: spin_until checks at least this often whether the parent has exited (`ros2 launch`
killed by SIGTERM: the zero command must follow within 100 ms)."""


def ignore_stop_signals():
    """Ignore SIGINT, SIGTERM and SIGHUP from now on: the node is stopping already.

    A stop often comes as two signals: Ctrl-C reaches the whole process group and the launch
    forwards a SIGINT of its own. rclpy.try_shutdown uninstalls signal handlers and the
    interpreter restores the default action of every signal it handled when it finalizes; a
    second SIGINT landing then killed a node that was exiting cleanly ("process has died [exit
    code -2]", 1 in 3 Ctrl-Cs of the velocity launch). An ignored signal stays ignored to the
    end; the way out is bounded (the zero command's acknowledgement, 0.5 s at most)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def stop_pending(node):
    """True once a stop has come: a stop signal, or the exit of the process that started this one
    (node.parent_pid, set by run; recorded in node.stop_signals as 'parent exited', with one
    warning, the first time it is seen).

    The parent's exit counts as a stop signal: on SIGTERM (what systemd and `docker stop` send)
    `ros2 launch` exits at once without stopping its children (its own log says "using SIGTERM
    can result in orphaned processes"); a node that drives an arm must not run on unsupervised.
    The test is a change of os.getppid(): a node whose parent exits is re-parented (to init or a
    subreaper). It costs one system call, so the policy node's control tick asks it before it
    computes a command: a tick that the executor runs after the parent's exit sends nothing.
    """
    received = node.stop_signals
    parent = getattr(node, 'parent_pid', None)
    if not received and parent is not None and os.getppid() != parent:
        node.get_logger().warning(f'the process that started this node (pid {parent}) exited: '
                                  'shutting down')
        received.append('parent exited')
    return bool(received)


def spin_until(node, period=PARENT_CHECK_PERIOD):
    """Spin node until a stop is pending (stop_pending: a signal, or the parent's exit, checked
    at least every period s) or the node says it has finished (its attribute `finished` true: the
    policy node after its lifecycle shutdown)."""
    while not stop_pending(node) and rclpy.ok() and not getattr(node, 'finished', False):
        rclpy.spin_once(node, timeout_sec=period)


FASTDDS_TRANSPORTS = 'FASTDDS_BUILTIN_TRANSPORTS'


def no_shared_memory_transport(env=None):
    """Make Fast DDS give this process's participant the UDPv4 transport alone, unless the
    user chose its transports (FASTDDS_BUILTIN_TRANSPORTS set, even to DEFAULT); call it before
    rclpy.init. Returns the value in force.

    Fast DDS's shared-memory transport pushes a message into the receiving process's port under
    an inter-process mutex; a subscriber stopped (SIGSTOP, a debugger, a frozen driver) while it
    holds that mutex blocks every publish into its port until it runs again, and rclpy's publish
    holds the interpreter lock, so the whole node stops. Over UDP a publish to a stopped process
    returns at once (the datagram waits in, or is dropped from, the socket's buffer).
    bench/bench_bridge.py --frozen measures both. Other RMW implementations ignore the variable.
    rmw_fastrtps under ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST (or ROS_LOCALHOST_ONLY=1) sets its
    own transports, shared memory among them, whatever this says: see `shared_memory_forced`.
    """
    env = os.environ if env is None else env
    return env.setdefault(FASTDDS_TRANSPORTS, 'UDPv4')


def shared_memory_forced(rmw, env=None):
    """Why rmw_fastrtps will use shared memory although FASTDDS_BUILTIN_TRANSPORTS asks for
    UDPv4 alone (its localhost-only discovery adds its own transports), or None."""
    env = os.environ if env is None else env
    if not rmw.startswith('rmw_fastrtps') or env.get(FASTDDS_TRANSPORTS) != 'UDPv4':
        return None
    if env.get('ROS_LOCALHOST_ONLY') == '1':
        return 'ROS_LOCALHOST_ONLY=1'
    if env.get('ROS_AUTOMATIC_DISCOVERY_RANGE') == 'LOCALHOST':
        return 'ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST'
    return None


def run(make_node, label, args=None, start=None, on_exit=None):
    """A node's main(): rclpy up (without rclpy's signal handlers), make_node(), start(node),
    spin until SIGINT / SIGTERM / SIGHUP or the parent's exit, then on_exit(node) (e.g. a last
    zero-torque command) while the context is still valid, and shut down. The node's attributes
    stop_signals (the record of the signals received) and parent_pid (the parent at start) let a
    callback ask stop_pending(node): a signal that comes while the executor waits is handled
    before the callback that ends the wait runs, and the parent's exit is seen by the callback
    itself, so a control tick can leave the command to on_exit (no fresh command after a stop
    it can know of). Returns the exit code:
    1 when the node cannot be made or started (the error is printed on one line after label: a
    bad parameter value, type or name, or a model that cannot be loaded), else 0."""
    on_first = []
    received = stop_on_signals(on_first)
    parent = os.getppid()                      # before anything slow: an early exit counts too
    stop_when_parent_dies()
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except RCLError as err:                    # e.g. a --ros-args argument rcl cannot parse
        print(f'{label}: cannot start: {" ".join(str(err).split())}', file=sys.stderr)
        return 1
    node = None
    try:
        node = make_node()
        node.stop_signals = received      # a node may look: the policy node's control tick does
        node.parent_pid = parent          # (through stop_pending)
        if hasattr(node, 'on_stop_signal'):
            on_first.append(node.on_stop_signal)
            if received:                  # a signal came while the node was being made
                node.on_stop_signal(received[0])
        if start is not None:
            start(node)
    except (ValueError, OSError, ParameterException, NameValidationException) as err:
        print(f'{label}: cannot start: {" ".join(str(err).split())}', file=sys.stderr)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        return 1
    try:
        spin_until(node)
    finally:
        ignore_stop_signals()
        if on_exit is not None:
            on_exit(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
