"""``sim_robot_node``: a robot-rl simulation standing in for the robot and its drivers.

**Multirotor** (``quadrotor-hover``): it publishes ``nav_msgs/Odometry`` (world pose, body twist: what a
motion-capture or state-estimator driver publishes) every control period and applies the newest rotor-speed command
it received (``std_msgs/Float64MultiArray``, RPM, contract motor order); it counts the steps taken with no new
command since the previous one (``stale_ticks``: the controller missed the period).

**Manipulator** (``panda-reach``, ``panda-push``, ``panda-lift``): it publishes what ros2_control's
``joint_state_broadcaster`` and the Franka driver publish — ``sensor_msgs/JointState`` (arm and finger joints) and
the tool pose (``geometry_msgs/PoseStamped``, base frame) — plus the episode's goal pose (latched, as an operator
would send it: the reach pose, or the push goal on the table), and applies the newest joint target command
(``Float64MultiArray``, rad, contract joint order; the gripper opening last where the task commands it) as a forward
position controller would. Cube tasks also publish the cube's position as the task's tracker reports it (delayed,
with its noise and per-episode bias while randomisation is on) on ``object_pose_topic``. With ``cameras`` set, each
named camera's view (``sensor_msgs/Image``, ``rgb8``, ``image_size`` square) is rendered every period and published
on ``<camera>/image_raw`` (``visual_randomization``: each episode looks different, as in ``robot-rl collect
--visual-randomization``). Each episode (the task's length) draws a new goal; the node counts episodes that met the
task's success test.

Common to both: Physics: the task's simulation with one world, stepped (and its sensors published) every control
period of the task's config, or at ``rate_hz`` (e.g. a motion-capture system at 250 Hz; the physics step is kept);
randomisation as configured; a crash or the end of an episode starts a new episode. Commands outside the rotor
limits are clamped, malformed ones are rejected and counted, and with no command at all the rotors hold their
last speed (as real ESCs do; the policy node's watchdog is what must catch silence).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_rl_ros.commands import COMMAND_TYPES, command_values
from robot_rl_ros.inputs import LATCHED
from robot_rl_ros.messages import fill_image, fill_joint_state, fill_odometry, fill_pose
from robot_rl_ros.params import SIM_ROBOT_NODE, declare
from robot_rl_ros.spin import spin_node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray

import sim
from sim.robots import panda
from sim.tasks.base import at_control_period

PARAMETERS = SIM_ROBOT_NODE
"""Declared parameters (:data:`robot_rl_ros.params.SIM_ROBOT_NODE`)."""


class SimRobotNode(Node):
    """See the module docstring."""

    def __init__(self, name: str = "sim_robot_node", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        declare(self, SIM_ROBOT_NODE)
        task = self.get_parameter("task").value
        from robot_rl.config import load_config

        self.manipulator = task.startswith("panda-")
        length = [] if self.manipulator else [f"env.episode_length_s={self.get_parameter('episode_length_s').value}"]
        cfg = load_config(task, None, length)
        rate = float(self.get_parameter("rate_hz").value)
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"parameter rate_hz is {rate}; expected Hz > 0, or 0 for the task's control rate")
        env_cfg = at_control_period(cfg.env, 1.0 / rate) if rate > 0 else cfg.env
        self.env = sim.make(task, 1, "cpu", env_cfg, seed=int(self.get_parameter("seed").value))
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
        self.stale_ticks = 0  # steps applied with no new command since the previous step (the controller was late)
        self._fresh = False
        self.position_errors: list[float] = []
        self.episodes: list[bool] = []  # manipulator: success of every finished episode
        self._goal_sent = -1
        if self.manipulator:
            param = self.get_parameter
            self._joints = self.create_publisher(JointState, param("joint_states_topic").value, qos_profile_sensor_data)
            self._tcp = self.create_publisher(PoseStamped, param("tcp_pose_topic").value, qos_profile_sensor_data)
            self._goal = self.create_publisher(PoseStamped, param("goal_topic").value, LATCHED)
            self._model_joints = [
                self.env._model.joint(j).name  # type: ignore[attr-defined]
                for j in range(self.env._model.njnt)  # type: ignore[attr-defined]
                if self.env._model.joint(j).name.startswith("panda_")  # type: ignore[attr-defined]
            ]
            joints = [self.env._model.joint(n) for n in self._model_joints]  # type: ignore[attr-defined]
            self._joint_adr = (
                np.array([int(j.qposadr[0]) for j in joints]),
                np.array([int(j.dofadr[0]) for j in joints]),
            )
            self._object = self.create_publisher(PoseStamped, param("object_pose_topic").value, qos_profile_sensor_data)
            self._renderer, self._images = self._make_renderer()
        self._odom = self.create_publisher(Odometry, self.get_parameter("odom_topic").value, qos_profile_sensor_data)
        command_type = self.get_parameter("command_type").value
        if command_type not in COMMAND_TYPES:
            raise ValueError(
                f"sim_robot_node: parameter command_type is '{command_type}'; expected one of {COMMAND_TYPES}"
            )
        kind = Float64MultiArray if command_type == "float64_multi_array" else JointState
        # best effort: it receives from a best-effort and from a reliable publisher alike
        self.create_subscription(
            kind, self.get_parameter("command_topic").value, self._on_command, qos_profile_sensor_data
        )
        self.create_timer(self.contract.control_period_s, self._tick)

    def _make_renderer(self) -> tuple[Any, dict[str, Any]]:
        """The camera renderer and one image publisher per camera named in ``cameras`` (none: no renderer)."""
        cameras = [c for c in self.get_parameter("cameras").value if c]
        if not cameras:
            return None, {}
        from sim.rendering import CameraRenderer, VisualRandomization

        size = int(self.get_parameter("image_size").value)
        visual = VisualRandomization() if self.get_parameter("visual_randomization").value else None
        seed = int(self.get_parameter("seed").value)
        renderer = CameraRenderer(self.env, {c: (size, size) for c in cameras}, visual, seed)
        return renderer, {c: self.create_publisher(Image, f"{c}/image_raw", qos_profile_sensor_data) for c in cameras}

    def _on_command(self, msg: Any) -> None:
        try:
            c = command_values(msg, self.contract)
        except ValueError as exc:
            c = np.full(0, np.nan)
            self.get_logger().error(f"command rejected: {exc}", throttle_duration_sec=1.0)
        if c.shape != self._offset.shape or not np.isfinite(c.astype(np.float32)).all():
            self.rejected += 1
            self.get_logger().error(f"command rejected: {c.tolist()}", throttle_duration_sec=1.0)
            return
        c = np.clip(c, self._low, self._high)
        if self.contract.action.reference:  # relative commands: what the robot measured is added back in the sim
            ref = self.env._q[0].numpy()  # type: ignore[attr-defined]
            c = c.copy()
            c[: ref.size] -= ref
        self._action = torch.from_numpy(((c - self._offset) / self._scale)[None].astype(np.float32))
        self._fresh = True

    def _tick(self) -> None:
        if self.manipulator:
            self._tick_arm()
            return
        _, _, terminated, _, _ = self.env.step(self._action)
        self.steps += 1
        self.stale_ticks += int(not self._fresh)
        self._fresh = False
        self.crashes += int(bool(terminated.any()))
        s = self.env.state  # type: ignore[attr-defined]
        self.position_errors.append(float(s.pos[0].norm()))
        msg = Odometry()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id, msg.child_frame_id = "world", "base_link"
        fill_odometry(msg, s.pos[0].numpy(), s.quat[0].numpy(), s.vel[0].numpy(), s.omega[0].numpy())
        self._odom.publish(msg)

    def _tick_arm(self) -> None:
        env: Any = self.env
        if self._goal_sent != len(self.episodes):  # a new episode: publish its goal (latched)
            goal = PoseStamped()
            goal.header.frame_id = "panda_link0"
            goal.header.stamp = self.get_clock().now().to_msg()
            if hasattr(env, "target_pos"):  # reach: a pose
                fill_pose(goal, env.target_pos[0].numpy(), env.target_rot[0].numpy())
            elif hasattr(env, "goal"):  # push: a point on the table
                fill_pose(goal, np.array([*env.goal[0].tolist(), panda.TABLE_HEIGHT]), np.eye(3))
            self._goal.publish(goal)
            self._goal_sent = len(self.episodes)
        _, _, terminated, truncated, info = env.step(self._action)
        self.steps += 1
        if bool((terminated | truncated).any()):
            self.episodes.append(bool(info.success[0]))
            self._action = torch.zeros_like(self._action)  # the next episode starts from rest
            if self._renderer is not None:
                self._renderer.redraw(np.array([0]))
        # the joint state last: a policy node stepping on it (trigger: input) then has this period's other inputs
        stamp = self.get_clock().now().to_msg()
        tcp = PoseStamped()
        tcp.header.stamp, tcp.header.frame_id = stamp, "panda_link0"
        fill_pose(tcp, env._tcp_pos[0].numpy(), env._tcp_rot[0].numpy())
        self._tcp.publish(tcp)
        if "object_pos" in env.last_signals:  # the tracker's estimate, as the policy sees it in training
            obj = PoseStamped()
            obj.header.stamp, obj.header.frame_id = stamp, "panda_link0"
            fill_pose(obj, env.last_signals["object_pos"][0].numpy(), np.eye(3))
            self._object.publish(obj)
        if self._renderer is not None:
            for camera, view in self._renderer.render().items():
                image = Image()
                image.header.stamp, image.header.frame_id = stamp, camera
                fill_image(image, view[0])
                self._images[camera].publish(image)
        js = JointState()
        js.header.stamp, js.header.frame_id = stamp, "panda_link0"
        qpos_adr, dof_adr = self._joint_adr
        fill_joint_state(
            js, self._model_joints, env.physics.qpos[0].numpy()[qpos_adr], env.physics.qvel[0].numpy()[dof_adr]
        )
        self._joints.publish(js)


def main(args: list[str] | None = None) -> None:
    """Console script: simulate until Ctrl-C."""
    spin_node(SimRobotNode, args)
