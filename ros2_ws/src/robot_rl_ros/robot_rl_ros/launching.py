"""The one launch description both launch files return (``launch/sim.launch.py``, ``launch/robot.launch.py``).

Arguments: ``params`` (a ``ros__parameters`` YAML file; default: the setup's file in ``config/``), ``model`` (the
exported ``policy.onnx``), ``namespace``, ``executor`` (``policy_node``'s: ``single`` or ``events``). Nodes:
``policy_node`` (lifecycle; configure and activate it with ``ros2 lifecycle set``) and, for a simulation,
``sim_robot_node``. ``launch`` and ``launch_ros`` are imported only here and only when a launch file runs (they
cannot be installed from PyPI; ``robot-rl deploy`` runs the same graph without them).
"""

from __future__ import annotations

import os
from typing import Any


def description(default_params: str, sim: bool) -> Any:
    """The ``LaunchDescription``: ``default_params`` names a file in the package's ``config/``, ``sim`` adds
    ``sim_robot_node``."""
    from ament_index_python.packages import get_package_share_directory
    from launch import LaunchDescription  # type: ignore[attr-defined, unused-ignore]
    from launch.actions import DeclareLaunchArgument
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import LifecycleNode, Node

    share = get_package_share_directory("robot_rl_ros")
    params = LaunchConfiguration("params")
    namespace = LaunchConfiguration("namespace")
    nodes: list[Any] = []
    if sim:
        nodes.append(
            Node(
                package="robot_rl_ros",
                executable="sim_robot_node",
                name="sim_robot_node",
                namespace=namespace,
                parameters=[params],
            )
        )
    nodes.append(
        LifecycleNode(
            package="robot_rl_ros",
            executable="policy_node",
            name="policy_node",
            namespace=namespace,
            parameters=[params, {"model_path": LaunchConfiguration("model")}],
            arguments=["--executor", LaunchConfiguration("executor")],
        )
    )
    return LaunchDescription(
        [
            DeclareLaunchArgument("params", default_value=os.path.join(share, "config", default_params)),
            DeclareLaunchArgument("model", description="exported policy.onnx"),
            DeclareLaunchArgument("namespace", default_value=""),
            DeclareLaunchArgument(
                "executor", default_value="single", description="policy_node's executor: single or events"
            ),
            *nodes,
        ]
    )
