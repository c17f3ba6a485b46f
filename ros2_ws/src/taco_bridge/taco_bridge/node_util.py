"""Small helpers shared by the nodes: parameter tables, SIGTERM handling."""
import signal

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


def interrupt_on_sigterm():
    """Make SIGTERM raise KeyboardInterrupt like SIGINT does.

    The nodes call rclpy.init with SignalHandlerOptions.NO and this, so that on either signal
    spin() returns through KeyboardInterrupt while the context is still valid and a node can
    still publish on its way out (zero torque).
    """
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)
