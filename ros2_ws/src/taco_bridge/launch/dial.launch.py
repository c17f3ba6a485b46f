"""Dial demo: the TACO policy node, and the simulated JACO2 + dial pad unless use_sim:=false.

    ros2 launch taco_bridge dial.launch.py                       # simulation, shipped Dial model
    ros2 launch taco_bridge dial.launch.py use_sim:=false params_file:=/path/to/jaco2.yaml
    ros2 topic pub --once /taco/sketch std_msgs/msg/String "{data: '0 5 1 6'}"

Arguments
  use_sim      true: start the sim node (taco_sim.dial's MuJoCo arm) as well
  model        taco_ref model directory; empty: the shipped Dial model
  params_file  ROS parameter file for both nodes (default: this package's config/dial.yaml)
  rate         policy control rate in Hz (25: the rate the Dial policies were trained at)
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    use_sim = LaunchConfiguration('use_sim')
    model = LaunchConfiguration('model')
    params_file = LaunchConfiguration('params_file')
    rate = LaunchConfiguration('rate')
    return LaunchDescription([
        DeclareLaunchArgument('use_sim', default_value='true',
                              description='start the MuJoCo JACO2 and dial pad simulation'),
        DeclareLaunchArgument('model', default_value='',
                              description='taco_ref model directory (empty: the shipped Dial model)'),
        DeclareLaunchArgument(
            'params_file',
            default_value=PathJoinSubstitution([FindPackageShare('taco_bridge'), 'config', 'dial.yaml']),
            description='parameter file for the taco_sim and taco_policy nodes'),
        DeclareLaunchArgument('rate', default_value='25.0', description='policy control rate (Hz)'),
        Node(package='taco_bridge', executable='sim_node', name='taco_sim', output='screen',
             parameters=[params_file], condition=IfCondition(use_sim)),
        Node(package='taco_bridge', executable='policy_node', name='taco_policy', output='screen',
             parameters=[params_file, {'model': ParameterValue(model, value_type=str),
                                       'rate': ParameterValue(rate, value_type=float)}]),
    ])
