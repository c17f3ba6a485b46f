"""Dial demo: the TACO policy node, and the simulated JACO2 + dial pad unless use_sim:=false.

    ros2 launch taco_bridge dial.launch.py                       # simulation, shipped Dial model
    ros2 launch taco_bridge dial.launch.py use_sim:=false params_file:=/path/to/jaco2.yaml
    ros2 launch taco_bridge dial.launch.py namespace:=arm1       # topics under /arm1
    ros2 launch taco_bridge dial.launch.py command_interface:=velocity   # joint velocity commands
    ros2 topic pub --once /taco/sketch std_msgs/msg/String "{data: '0 5 1 6'}"

Launch arguments:
  use_sim      true: start the sim node (taco_sim.dial's MuJoCo arm) as well
  params_file  ROS parameter file for both nodes (default: this package's config/dial.yaml)
  model        taco_ref model directory; given: overrides params_file's `model`
  rate         policy control rate in Hz; given: overrides params_file's `rate`
  namespace    ROS namespace of both nodes and so of all their (relative) topics
  command_interface  effort or velocity; given: overrides params_file's `command_interface` of
               both nodes (and so their default command topic and the policy's default model)

`model`, `rate` and `command_interface` override the parameter file only when given on the
command line: left out, the file's values apply (and the nodes' defaults where the file is
silent). When either node
exits, for whatever reason, the launch shuts down: a policy node that died must not leave the
simulated arm running on alone, nor a sim that died a policy node commanding nothing.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, Shutdown
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def policy_parameters(params_file, model, rate, command_interface=''):
    """The policy node's parameters: the file, then only the overrides given (non-empty)."""
    overrides = {}
    if model:
        overrides['model'] = model
    if rate:
        overrides['rate'] = float(rate)
    if command_interface:
        overrides['command_interface'] = command_interface
    return [params_file] + ([overrides] if overrides else [])


def sim_parameters(params_file, command_interface=''):
    """The sim node's parameters: the file, then command_interface if given (non-empty)."""
    return [params_file] + ([{'command_interface': command_interface}] if command_interface else [])


def nodes(context):
    params_file, model, rate, interface = (
        LaunchConfiguration(name).perform(context)
        for name in ('params_file', 'model', 'rate', 'command_interface'))
    namespace = LaunchConfiguration('namespace')
    return [Node(package='taco_bridge', executable='sim_node', name='taco_sim', output='screen',
                 namespace=namespace, parameters=sim_parameters(params_file, interface),
                 condition=IfCondition(LaunchConfiguration('use_sim')),
                 on_exit=Shutdown(reason='taco_sim exited')),
            Node(package='taco_bridge', executable='policy_node', name='taco_policy',
                 namespace=namespace, output='screen',
                 parameters=policy_parameters(params_file, model, rate, interface),
                 on_exit=Shutdown(reason='taco_policy exited'))]


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
        OpaqueFunction(function=nodes),
    ])
