from glob import glob

from setuptools import setup

package_name = 'taco_bridge'

setup(
    name=package_name,
    version='0.1.0',
    packages=[package_name],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml', 'README.md']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*.yaml')),
        ('share/' + package_name + '/systemd', glob('systemd/*.service')),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='taco_ref maintainers',
    maintainer_email='taco_ref@example.invalid',
    description='TACO sub-policies on a JACO2 arm: managed policy node with the ExecuteSketch action, '
                'MuJoCo sim node, launch file.',
    license='Apache-2.0',
    extras_require={'test': ['pytest']},
    entry_points={
        'console_scripts': [
            'policy_node = taco_bridge.policy_node:main',
            'sim_node = taco_bridge.sim_node:main',
            'send = taco_bridge.send:main',
        ],
    },
)
