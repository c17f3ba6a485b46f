"""Dial demo: the TACO policy node (managed), and the simulated JACO2 + dial pad unless use_sim:=false.

    ros2 launch taco_bridge dial.launch.py                       # simulation, shipped Dial model
    ros2 launch taco_bridge dial.launch.py use_sim:=false params_file:=/path/to/jaco2.yaml
    ros2 launch taco_bridge dial.launch.py namespace:=arm1       # topics and action under /arm1
    ros2 launch taco_bridge dial.launch.py command_interface:=velocity   # joint velocity commands
    ros2 launch taco_bridge dial.launch.py autostart:=false      # then: ros2 lifecycle set ...
    ros2 launch taco_bridge dial.launch.py disturbance:=harder   # the simulated arm disturbed
    ros2 action send_goal --feedback /taco/execute_sketch taco_bridge_msgs/action/ExecuteSketch \
        "{sketch: ['0', '5', '1', '6']}"

Launch arguments:
  use_sim      true: start the sim node (taco_sim.dial's MuJoCo arm) as well
  params_file  ROS parameter file for both nodes (default: this package's config/dial.yaml)
  model        taco_ref model directory; given: overrides params_file's `model`
  rate         policy control rate in Hz; given: overrides params_file's `rate`
  namespace    ROS namespace of both nodes and so of all their (relative) topics and the action
  command_interface  effort or velocity; given: overrides params_file's `command_interface` of
               both nodes (and so their default command topic and the policy's default model)
  autostart    true (default): the policy node configures and activates itself (its parameter
               autostart); false: it stays unconfigured until `ros2 lifecycle set
               /taco_policy configure` and `... activate`
  disturbance  a named test condition of taco_sim.dial.disturb (harder, noise-5, push, delay,
               start, ...): the sim node's arm meets its disturbance; empty (default): none

`model`, `rate` and `command_interface` override the parameter file only when given on the
command line: left out, the file's values apply (and the nodes' defaults where the file is
silent).

Why autostart is the node's own parameter rather than launch_ros ChangeState events: a
ChangeState event makes the launch wait for the node's change_state service in a thread, and
when a node fails at start-up (a bad parameter) the launch shuts down under that wait, which then
ends in a stray "Caught exception in launch: cannot use Destroyable because destruction was
requested" (2 of 4 tries with command_interface:=torque). The node's own transitions race with
nothing. The policy node is therefore started as a plain launch_ros `Node` (it is a managed node
all the same: `ros2 lifecycle set` drives it): a `LifecycleNode` action makes the launch start
an rclpy context of its own, whose shutdown handler waits up to 1 s for that context's spinning
thread (launch_ros's ROS adapter spins with a 1 s timeout) before the launch goes on to signal
its nodes, so the arm kept dialling for up to 1 s after a SIGINT to the launch.

Ending. When either node exits the launch shuts down: a policy node that died must not leave
the simulated arm running on alone, nor a sim that died a policy node commanding nothing. A node
that exits with an error (a bad parameter: `cannot start: ...`; with autostart, a model it
cannot load) makes the launch exit with code 1 ("Caught exception in launch: taco_policy exited
with code 1"), once: what the other node does while the launch shuts down is not reported
again. A policy node shut down through its lifecycle (`ros2 lifecycle set /taco_policy
shutdown`) exits 0 and the launch ends with it, exit code 0. Stop the launch with
SIGINT (Ctrl-C; systemd: KillSignal=SIGINT): on SIGTERM `ros2 launch` exits at once without
stopping its nodes; they then notice that their parent has gone and stop by themselves (zero
command, exit), see the package README.

Stopping. On SIGINT, `ros2 launch` sends SIGINT to its nodes itself only when it runs
non-interactive (its standard input is not a terminal: docker, systemd); in a terminal it
assumes that Ctrl-C reached the whole process group, and a SIGINT sent to the launch alone
(`kill -INT`, `docker stop` of a container started with -t) would reach the nodes only as the
SIGTERM that follows sigterm_timeout (5 s) later. The launch's OnShutdown handler
(`forward_sigint`) sends them the SIGINT in that case; a node that gets the signal twice (from
the terminal and from here) stops once.
"""
import signal

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.conditions import IfCondition
from launch.event_handlers import OnShutdown
from launch.events.process import SignalProcess
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


class NodeFailed(RuntimeError):
    """Raised inside the launch to end it with exit code 1 (launch has no other way to set it)."""


def policy_parameters(params_file, model, rate, command_interface='', autostart=False):
    """The policy node's parameters: the file, then only the overrides given (non-empty), and
    autostart when true."""
    overrides = {'autostart': True} if autostart else {}
    if model:
        overrides['model'] = model
    if rate:
        overrides['rate'] = float(rate)
    if command_interface:
        overrides['command_interface'] = command_interface
    return [params_file] + ([overrides] if overrides else [])


def sim_parameters(params_file, command_interface='', disturbance=''):
    """The sim node's parameters: the file, then command_interface and disturbance if given
    (non-empty)."""
    overrides = {}
    if command_interface:
        overrides['command_interface'] = command_interface
    if disturbance:
        overrides['disturbance'] = disturbance
    return [params_file] + ([overrides] if overrides else [])


def on_node_exit(name):
    """A node's on_exit: shut the launch down; with exit code 1 (an exception) if the node
    failed. Nothing more when the launch is shutting down already: the first failure set the
    exit code, and a node stopped by the shutdown is no news (a second Shutdown event would also
    make launch_ros's ROS adapter fail to shut down twice: exit code 1 after Ctrl-C)."""
    def handler(event, context):
        if context is not None and context.is_shutdown:
            return None
        if event.returncode not in (0, None):
            raise NodeFailed(f'{name} exited with code {event.returncode}')
        return [Shutdown(reason=f'{name} exited')]
    return handler


def forward_sigint(processes):
    """An OnShutdown handler: SIGINT to the processes (launch actions) when the launch shuts down
    on a SIGINT that it does not forward itself (an interactive launch: see the module
    docstring); nothing otherwise (launch sends it, or the shutdown has another cause)."""
    def handler(event, context):
        if not event.due_to_sigint or context.noninteractive:
            return None
        return [EmitEvent(event=SignalProcess(
            signal_number=signal.SIGINT,
            process_matcher=lambda action: any(action is p for p in processes)))]
    return handler


def nodes(context):
    params_file, model, rate, interface, namespace, autostart, disturbance = (
        LaunchConfiguration(name).perform(context)
        for name in ('params_file', 'model', 'rate', 'command_interface', 'namespace', 'autostart',
                     'disturbance'))
    sim = Node(package='taco_bridge', executable='sim_node', name='taco_sim', output='screen',
               namespace=namespace, parameters=sim_parameters(params_file, interface, disturbance),
               condition=IfCondition(LaunchConfiguration('use_sim')),
               on_exit=on_node_exit('taco_sim'))
    # a managed node, started as a plain Node: the launch drives no transitions (module docstring)
    policy = Node(package='taco_bridge', executable='policy_node', name='taco_policy',
                  namespace=namespace, output='screen',
                  parameters=policy_parameters(params_file, model, rate, interface,
                                               autostart.lower() in ('true', '1', 'yes')),
                  on_exit=on_node_exit('taco_policy'))
    return [sim, policy,
            RegisterEventHandler(OnShutdown(on_shutdown=forward_sigint([sim, policy])))]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('use_sim', default_value='true',
                              description='start the MuJoCo JACO2 and dial pad simulation'),
        DeclareLaunchArgument(
            'params_file',
            default_value=PathJoinSubstitution([FindPackageShare('taco_bridge'), 'config', 'dial.yaml']),
            description='parameter file for the taco_sim and taco_policy nodes'),
        DeclareLaunchArgument('model', default_value='',
                              description='taco_ref model directory; empty: params_file\'s model'),
        DeclareLaunchArgument('rate', default_value='',
                              description='policy control rate (Hz); empty: params_file\'s rate'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of both nodes and their topics'),
        DeclareLaunchArgument('command_interface', default_value='',
                              description='effort or velocity; empty: params_file\'s'),
        DeclareLaunchArgument('autostart', default_value='true',
                              description='the policy node (a managed node) configures and '
                                          'activates itself; false: ros2 lifecycle set drives it'),
        DeclareLaunchArgument('disturbance', default_value='',
                              description='a named test condition of taco_sim.dial.disturb the '
                                          'simulated arm meets (harder, noise-5, ...); empty: none'),
        OpaqueFunction(function=nodes),
    ])
