"""ament_python build of robot_rl_ros (colcon build on a ROS 2 machine); here the same code runs from the wheels."""

from glob import glob

from setuptools import setup

PACKAGE = "robot_rl_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        (f"share/{PACKAGE}/robots", glob("robots/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="robot-rl",
    description="robot-rl policies on ROS 2: lifecycle policy node with safety layer, simulated robot",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "policy_node = robot_rl_ros.entry:policy_node",
            "sim_robot_node = robot_rl_ros.entry:sim_robot_node",
        ],
    },
)
