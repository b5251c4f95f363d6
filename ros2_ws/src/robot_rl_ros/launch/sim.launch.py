"""Simulated robot + policy: ``ros2 launch robot_rl_ros sim.launch.py model:=policy.onnx [params:=...]``.

The same graph runs without ``ros2 launch`` as ``robot-rl deploy --params <file> --sim``.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("robot_rl_ros")
    params = LaunchConfiguration("params")
    model = LaunchConfiguration("model")
    namespace = LaunchConfiguration("namespace")
    return LaunchDescription(
        [
            DeclareLaunchArgument("params", default_value=os.path.join(share, "config", "quadrotor_sim.yaml")),
            DeclareLaunchArgument("model", description="exported policy.onnx"),
            DeclareLaunchArgument("namespace", default_value=""),
            DeclareLaunchArgument(
                "executor", default_value="single", description="policy_node's executor: single or events"
            ),
            Node(
                package="robot_rl_ros",
                executable="sim_robot_node",
                name="sim_robot_node",
                namespace=namespace,
                parameters=[params],
            ),
            LifecycleNode(
                package="robot_rl_ros",
                executable="policy_node",
                name="policy_node",
                namespace=namespace,
                parameters=[params, {"model_path": model}],
                arguments=["--executor", LaunchConfiguration("executor")],
            ),
        ]
    )
