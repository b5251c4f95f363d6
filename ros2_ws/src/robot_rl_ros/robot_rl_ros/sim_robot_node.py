"""``sim_robot_node``: robot-rl's quadrotor simulation standing in for a Crazyflie and its driver.

It publishes ``nav_msgs/Odometry`` (world pose, body twist: what a motion-capture or state-estimator driver
publishes) every control period and applies the newest rotor-speed command it received
(``std_msgs/Float64MultiArray``, RPM, contract motor order). Physics: ``sim.tasks.quadrotor_hover`` with one world,
randomisation as configured; a crash or the end of an episode starts a new episode. Commands outside the rotor
limits are clamped, malformed ones are rejected and counted, and with no command at all the rotors hold their
last speed (as real ESCs do; the policy node's watchdog is what must catch silence).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_rl_ros.messages import fill_odometry
from robot_rl_ros.spin import spin_node
from std_msgs.msg import Float64MultiArray

import sim

PARAMETERS: dict[str, Any] = {
    "task": "quadrotor-hover",
    "odom_topic": "odom",
    "command_topic": "command",
    "randomize": False,
    "seed": 0,
    "episode_length_s": 3600.0,
}


class SimRobotNode(Node):
    """See the module docstring."""

    def __init__(self, name: str = "sim_robot_node", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        for key, default in PARAMETERS.items():
            self.declare_parameter(key, default)
        task = self.get_parameter("task").value
        from robot_rl.config import load_config

        cfg = load_config(task, None, [f"env.episode_length_s={self.get_parameter('episode_length_s').value}"])
        self.env = sim.make(task, 1, "cpu", cfg.env, seed=int(self.get_parameter("seed").value))
        self.env.set_randomization(bool(self.get_parameter("randomize").value))
        self.contract = self.env.contract(["policy"])
        self.env.reset(seed=int(self.get_parameter("seed").value))
        a = self.contract.action
        self._offset, self._scale = np.asarray(a.offset), np.asarray(a.scale)
        self._low, self._high = np.asarray(a.low), np.asarray(a.high)
        self._action = torch.zeros(1, a.size)
        self.rejected = 0
        self.steps = 0
        self.crashes = 0
        self.position_errors: list[float] = []
        self._odom = self.create_publisher(Odometry, self.get_parameter("odom_topic").value, qos_profile_sensor_data)
        self.create_subscription(
            Float64MultiArray, self.get_parameter("command_topic").value, self._on_command, qos_profile_sensor_data
        )
        self.create_timer(self.contract.control_period_s, self._tick)

    def _on_command(self, msg: Float64MultiArray) -> None:
        c = np.asarray(msg.data, dtype=np.float64)
        if c.shape != self._offset.shape or not np.isfinite(c).all():
            self.rejected += 1
            self.get_logger().error(f"command rejected: {c.tolist()}", throttle_duration_sec=1.0)
            return
        c = np.clip(c, self._low, self._high)
        self._action = torch.from_numpy(((c - self._offset) / self._scale)[None].astype(np.float32))

    def _tick(self) -> None:
        _, _, terminated, _, _ = self.env.step(self._action)
        self.steps += 1
        self.crashes += int(bool(terminated.any()))
        s = self.env.state  # type: ignore[attr-defined]
        self.position_errors.append(float(s.pos[0].norm()))
        msg = Odometry()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id, msg.child_frame_id = "world", "base_link"
        fill_odometry(msg, s.pos[0].numpy(), s.quat[0].numpy(), s.vel[0].numpy(), s.omega[0].numpy())
        self._odom.publish(msg)


def main(args: list[str] | None = None) -> None:
    """Console script: simulate until Ctrl-C."""
    spin_node(SimRobotNode, args)
