"""Console scripts of the package (``policy_node``, ``sim_robot_node``), installed by pip and by colcon.

Each imports its node's module only when it runs, inside a guard: Ctrl-C while Python loads rclpy, numpy and
onnxruntime (a second or more) ends the process with one line and status 130 instead of a traceback.
"""

from __future__ import annotations

import importlib
import sys


def _run(module: str) -> None:
    try:
        main = importlib.import_module(f"robot_rl_ros.{module}").main
    except KeyboardInterrupt:
        sys.stderr.write(f"{module}: interrupted (Ctrl-C) while starting\n")
        raise SystemExit(130) from None
    main()


def policy_node() -> None:
    """``policy_node [--executor single|events] --ros-args ...`` (robot_rl_ros.policy_node)."""
    _run("policy_node")


def sim_robot_node() -> None:
    """``sim_robot_node --ros-args ...`` (robot_rl_ros.sim_robot_node)."""
    _run("sim_robot_node")
