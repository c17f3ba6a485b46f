"""The package's own checks (colcon test): layout, manifest and parameter file agree."""
import ast
import os
import xml.etree.ElementTree as ET

import yaml

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_layout():
    for path in ('package.xml', 'setup.py', 'taco_bridge/keypad.py', 'setup.cfg', 'resource/taco_bridge',
                 'launch/dial.launch.py', 'config/dial.yaml', 'README.md', 'taco_bridge/__init__.py',
                 'taco_bridge/policy_node.py', 'taco_bridge/sim_node.py', 'taco_bridge/control.py',
                 'taco_bridge/send.py', 'taco_bridge/workspace.py', 'systemd/taco-bridge.service',
                 '../taco_bridge_msgs/package.xml', '../taco_bridge_msgs/CMakeLists.txt',
                 '../taco_bridge_msgs/action/ExecuteSketch.action'):
        assert os.path.exists(os.path.join(PACKAGE, path)), path


def test_exec_depends_cover_ros_imports():
    root = ET.parse(os.path.join(PACKAGE, 'package.xml')).getroot()
    assert root.find('name').text == 'taco_bridge'
    assert root.find('export/build_type').text == 'ament_python'
    depends = {e.text for e in root.findall('exec_depend')}
    ros_packages = {'rclpy', 'std_msgs', 'sensor_msgs', 'rcl_interfaces', 'launch', 'launch_ros',
                    'action_msgs', 'diagnostic_msgs', 'lifecycle_msgs', 'taco_bridge_msgs'}
    imported = set()
    for folder in ('taco_bridge', 'launch'):
        for name in os.listdir(os.path.join(PACKAGE, folder)):
            if name.endswith('.py'):
                with open(os.path.join(PACKAGE, folder, name)) as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.ImportFrom) and node.module:
                        imported.add(node.module.split('.')[0])
                    elif isinstance(node, ast.Import):
                        imported.update(a.name.split('.')[0] for a in node.names)
    missing = (imported & ros_packages) - depends
    assert not missing, f'imported but not exec_depend: {missing}'


def test_config_names_the_launch_file_nodes():
    with open(os.path.join(PACKAGE, 'config', 'dial.yaml')) as f:
        config = yaml.safe_load(f)
    assert set(config) == {'/**/taco_sim', '/**/taco_policy'}
    with open(os.path.join(PACKAGE, 'launch', 'dial.launch.py')) as f:
        launch_text = f.read()
    for key in config:
        node = key.rsplit('/', 1)[-1]
        assert f"name='{node}'" in launch_text
        assert 'ros__parameters' in config[key]


def test_license_is_declared():
    root = ET.parse(os.path.join(PACKAGE, 'package.xml')).getroot()
    assert root.find('license').text == 'Apache-2.0'
    with open(os.path.join(PACKAGE, 'setup.py')) as f:
        setup_text = f.read()
    assert "license='Apache-2.0'" in setup_text and 'tests_require' not in setup_text


def test_interface_package():
    """taco_bridge_msgs: an ament_cmake interface package whose action has the fields the policy
    node fills (goal sketch and time_limit, result success and message, feedback)."""
    msgs = os.path.join(os.path.dirname(PACKAGE), 'taco_bridge_msgs')
    root = ET.parse(os.path.join(msgs, 'package.xml')).getroot()
    assert root.find('name').text == 'taco_bridge_msgs'
    assert root.find('export/build_type').text == 'ament_cmake'
    assert root.find('member_of_group').text == 'rosidl_interface_packages'
    with open(os.path.join(msgs, 'action', 'ExecuteSketch.action')) as f:
        parts = [[line.split('#')[0].split() for line in part.splitlines()]
                 for part in f.read().split('\n---\n')]
    goal, result, feedback = ({name: kind for kind, name in (f for f in part if f)} for part in parts)
    assert goal == {'sketch': 'string[]', 'time_limit': 'float64'}
    assert result['success'] == 'bool' and result['message'] == 'string' and result['completed'] == 'string[]'
    assert {'active', 'subtask', 'stop_probability', 'elapsed', 'pressed'} <= set(feedback)
