"""Running one node as a console script (``policy_node``, ``sim_robot_node``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import rclpy


def spin_node(make: Callable[[], Any], args: list[str] | None = None) -> None:
    """``rclpy.init``, build the node, spin until Ctrl-C, then destroy it and shut down."""
    rclpy.init(args=args)
    node = make()
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
