"""A policy node under test and a peer node that plays the robot, over real DDS (shared by the ROS 2 tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from robot_rl_ros.graph import read_params
from robot_rl_ros.policy_node import PolicyNode
from robot_rl_ros.spin import spin_for
from std_msgs.msg import Float64MultiArray

PKG = Path(__file__).resolve().parents[2] / "ros2_ws" / "src" / "robot_rl_ros"


def stamp(msg: Any, node: Any, age_s: float = 0.0) -> Any:
    t = node.get_clock().now().nanoseconds - round(age_s * 1e9)
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t, 1_000_000_000)
    return msg


class Rig:
    """A policy node (parameters of ``config``, overridden) and a peer that plays the robot."""

    def __init__(self, config: str, model: Path, ns: str, **overrides: Any) -> None:
        values = {**read_params(PKG / "config" / config)["policy_node"], "model_path": str(model), **overrides}
        values.setdefault("fade_in_s", 0.0)
        self.node = PolicyNode(namespace=ns, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
        self.peer = rclpy.create_node("peer", namespace=ns)
        self.commands: list[Any] = []
        self.executor = SingleThreadedExecutor()
        for n in (self.node, self.peer):
            self.executor.add_node(n)

    def listen(self, kind: type = Float64MultiArray, qos: Any = qos_profile_sensor_data) -> None:
        self.peer.create_subscription(kind, "command", self.commands.append, qos)

    def start(self) -> None:
        assert self.node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert self.node.trigger_activate() == TransitionCallbackReturn.SUCCESS

    def spin(self, seconds: float, publish: Callable[[], None] | None = None, every: float = 0.02) -> None:
        spin_for(self.executor, seconds, publish, every)

    def spin_until_commanding(
        self, publish: Callable[[], None], every: float, timeout_s: float = 5.0, count: int = 1
    ) -> None:
        """Spin while publishing until the node has sent ``count`` commands and holds no fault (DDS discovery
        between the two nodes takes longer on a loaded machine), at most ``timeout_s``.

        Only good input is published here, so a watchdog fault means the loaded machine stalled the peer for longer
        than ``watchdog_s`` before the test began (once in CI: 0.41 s against 0.3 s). The operator's recovery,
        re-activation, clears it, and the commands counted restart; any other fault stays and fails the caller."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and (self.node.fault != "" or len(self.commands) < count):
            if self.node.fault == "watchdog" and self.state() == "inactive":
                assert self.node.trigger_activate() == TransitionCallbackReturn.SUCCESS
                self.commands.clear()
            self.spin(0.1, publish, every)

    def state(self) -> str:
        return str(self.node._state_machine.current_state[1])

    def values(self) -> list[list[float]]:
        return [list(m.data) for m in self.commands]

    def close(self) -> None:
        self.node.destroy_node()
        self.peer.destroy_node()
