"""``sim_robot_node``: a robot-rl simulation standing in for the robot and its drivers.

It knows no robot: every control period it steps the task's simulation (one world) with the newest command and
publishes what the task reports (``measurements()``, the vocabulary of :mod:`sim.measurements`) as the robot's
drivers would, in the task's order:

- ``Odometry`` -> ``nav_msgs/Odometry`` (world pose, *body* twist: REP 105), what motion capture or a state
  estimator publishes (the quadrotor);
- ``Pose`` -> ``geometry_msgs/PoseStamped`` in the robot's base frame: the tool pose the Franka driver reports, a
  cube tracker's estimate (delayed, noisy and biased while randomisation is on, as the policy saw it in training),
  and the episode's goal (reliable and latched, sent when it changes, as an operator would);
- ``Imu`` -> ``sensor_msgs/Imu`` (attitude, gyro, accelerometer in the IMU frame: REP 145; legged robots);
- ``VelocityCommand`` -> ``geometry_msgs/Twist`` on ``cmd_vel``: each episode's velocity command, every period, as
  an operator's teleop sends it (legged robots);
- ``Instruction`` -> ``std_msgs/String`` on ``instruction``: each episode's instruction, reliable and latched, sent
  when it changes, as an operator would (language-conditioned tasks);
- camera images (``cameras``, rendered every period: ``sensor_msgs/Image`` on ``<camera>/image_raw``);
- ``JointStates`` -> ``sensor_msgs/JointState`` (arm and fingers, or legs, ``joint_state_broadcaster``) last, so
  that a node stepping on them (``trigger: input``) has the period's other inputs.

Each record is published on the topic of its name, or the one its ``<name>_topic`` parameter gives. Commands arrive
as ``std_msgs/Float64MultiArray`` or ``sensor_msgs/JointState`` (``command_type``), in the contract's units and
order; relative commands (``action.reference: joint_pos``) are taken relative to the joint positions it published.
Commands outside the limits are clamped, malformed ones are rejected and counted, and with no command at all the
actuators hold the last one (as real ESCs and forward controllers do; the policy node's watchdog is what must catch
silence). The node counts the periods it stepped with no new command (``stale_ticks``: the controller was late),
crashes (terminations), every finished episode's success, and for odometry the distance of the body from the origin
(the hover point in the simulation's world).

Physics: the task's simulation with its training config (``configs/<task>.yaml``; ``env_overrides`` ``key=value``
over it, e.g. ``instructions=wrong-colour``), stepped (and its sensors
published) every control period, or at ``rate_hz`` (a motion-capture system at 250 Hz, say; the physics step is
kept); randomisation as configured; a finished episode starts the next.

Time: in real time by default, as the robot would be, so a controller that falls behind loses control periods
(``stale_ticks``). With ``lockstep`` the simulated time waits instead: a period is stepped only once the command
answering the sensors last published has arrived (Gazebo's lockstep, CARLA's synchronous mode), or after
``lockstep_timeout_s`` of silence, holding the last command. Until the first command the world waits at the start:
its sensors go out once a controller is connected (a subscriber to the sensors it steps on and a publisher of
commands, both matched), and again after each ``lockstep_timeout_s`` without an answer (one that activates later
gets them). Not every period: a controller steps on each message, so a start repeated every period while discovery
and activation finish ran the hover policy 70-130 times on one frozen sample, winding up its integral term and
filling its action history before the flight began (docs/ros2.md, "When a step runs"). A flight then goes as it
would on a machine that keeps pace, whatever else loads this one; how fast the node answers is measured by
``bench/ros2_latency.py``.

With ``publish_clock`` the node publishes the simulated time on ``/clock`` (``rosgraph_msgs/Clock``, as Gazebo does)
and stamps every message with it: it starts at the wall-clock time the node started and advances one period per
step, so a lockstep run's stamps are a period apart however long the machine took. Nodes started with
``use_sim_time: true`` follow it (the policy node's stamp checks, watchdog and recording then run in simulated
time; in lockstep it must step on its inputs, ``trigger: input``: on a timer it would wait for the time to advance,
which waits for it). The node itself keeps its own clock: ``use_sim_time`` with ``publish_clock`` is refused. In
lockstep with ``publish_clock`` a period is stepped as soon as its command arrives, not at the next tick of the node's
timer: the simulation then runs as fast as the controller answers, faster than real time where the machine allows
(without ``/clock`` the stamps are the wall clock's, and a controller on it would take inputs that come faster than
its period for a loop running ahead, stepping on them at most once per period).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped, Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.time import Time
from robot_rl_ros.commands import COMMAND_TYPES, command_values
from robot_rl_ros.inputs import LATCHED
from robot_rl_ros.messages import fill_image, fill_imu, fill_joint_state, fill_odometry, fill_pose, fill_twist
from robot_rl_ros.params import SIM_ROBOT_NODE, declare
from robot_rl_ros.spin import spin_node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, Imu, JointState
from std_msgs.msg import Float64MultiArray, String

import sim
from sim import measurements as m
from sim.tasks.base import at_control_period

PARAMETERS = SIM_ROBOT_NODE
"""Declared parameters (:data:`robot_rl_ros.params.SIM_ROBOT_NODE`)."""


class SimRobotNode(Node):
    """See the module docstring."""

    def __init__(self, name: str = "sim_robot_node", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        declare(self, SIM_ROBOT_NODE)
        param = self.get_parameter
        task, seed = param("task").value, int(param("seed").value)
        length = float(param("episode_length_s").value)
        overrides = [o for o in param("env_overrides").value if o]
        env_cfg = sim.train_env_config(task, [*overrides, *([f"episode_length_s={length}"] if length > 0 else [])])
        if getattr(env_cfg, "passivity", None) is not None:  # the robot has no tank: the policy node's is the one
            env_cfg = dataclasses.replace(env_cfg, passivity=type(env_cfg.passivity)())
        rate = float(param("rate_hz").value)
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"parameter rate_hz is {rate}; expected Hz > 0, or 0 for the task's control rate")
        self._lockstep = bool(param("lockstep").value)
        self._lockstep_timeout_s = float(param("lockstep_timeout_s").value)
        if not (math.isfinite(self._lockstep_timeout_s) and self._lockstep_timeout_s > 0):
            raise ValueError(f"parameter lockstep_timeout_s is {self._lockstep_timeout_s}; expected s > 0")
        self._clock_out: Any = None
        if param("publish_clock").value:
            if param("use_sim_time").value:
                raise ValueError(
                    "sim_robot_node publishes /clock (publish_clock: true) and cannot also follow it "
                    "(use_sim_time: true); set use_sim_time on the other nodes only"
                )
            # reliable: matches rclpy's best-effort /clock subscription and a reliable one alike
            self._clock_out = self.create_publisher(
                Clock, "/clock", QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
            )
        self._sim_ns = time.time_ns()  # the simulated time with publish_clock, ns (see the module docstring)
        env_cfg = at_control_period(env_cfg, 1.0 / rate) if rate > 0 else env_cfg
        self.env: Any = sim.make(task, 1, "cpu", env_cfg, seed=seed)
        self.env.set_randomization(bool(param("randomize").value))
        self.contract = self.env.contract(["policy"])
        self.env.reset(seed=seed)
        a = self.contract.action
        if a.reference not in ("", "joint_pos"):
            raise ValueError(f"commands relative to '{a.reference}' are not simulated (joint_pos only)")
        self._offset, self._scale = np.asarray(a.offset), np.asarray(a.scale)
        self._low, self._high = np.asarray(a.low), np.asarray(a.high)
        self._action = torch.zeros(1, a.size)
        self.rejected = 0
        self.steps = 0
        self.crashes = 0
        self.stale_ticks = 0  # steps applied with no new command since the previous step (the controller was late)
        self._fresh = False
        self._commanded = False  # a valid command has arrived (lockstep waits for the first without a timeout)
        self._published_at = time.monotonic()  # wall time of the last sensors published (lockstep's timeout)
        self.position_errors: list[float] = []  # odometry: distance of the body from the world's origin, m
        self.episodes: list[bool] = []  # success of every finished episode
        self.episode_metrics: list[dict[str, Any]] = []  # the task's figures of every finished episode (numbers, lists)
        self._topic_publishers: dict[str, Any] = {}
        self._latched: dict[str, np.ndarray | str] = {}
        self._joints: dict[str, float] = {}  # joint -> position last published (the reference of relative commands)
        self._renderer, self._images = self._make_renderer()
        command_type = param("command_type").value
        if command_type not in COMMAND_TYPES:
            raise ValueError(f"parameter command_type is '{command_type}'; expected one of {', '.join(COMMAND_TYPES)}")
        kind = Float64MultiArray if command_type == "float64_multi_array" else JointState
        # best effort: it receives from a best-effort and from a reliable publisher alike
        self._commands = self.create_subscription(
            kind, param("command_topic").value, self._on_command, qos_profile_sensor_data
        )
        start = self.env.measurements(0)
        self._publish(start)
        self._stepped_on = start[-1].name  # the record a controller steps on (published last)
        self._offered = False  # lockstep: the start's sensors went out to a connected controller
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
            ref = np.array([self._joints[j] for j in self.contract.joint_names[: self._reference_size()]])
            c = c.copy()
            c[: ref.size] -= ref
        self._action = torch.from_numpy(((c - self._offset) / self._scale)[None].astype(np.float32))
        self._fresh = self._commanded = True
        if self._lockstep and self._clock_out is not None:  # simulated time is its own: step now, not at the tick
            self._step()

    def _reference_size(self) -> int:
        return next(t.size for t in self.contract.observation if t.source == self.contract.action.reference)

    def _tick(self) -> None:
        if self._lockstep and not self._fresh:
            if not self._commanded:  # no controller yet: the start's sensors for one that has connected, no step
                waited = time.monotonic() - self._published_at >= self._lockstep_timeout_s
                if self._controller_connected() and (waited or not self._offered):
                    self._publish(self.env.measurements(0), stepped=False)
                    self._offered = True
                return
            if time.monotonic() - self._published_at < self._lockstep_timeout_s:
                return  # the controller has not answered the last sensors yet: simulated time waits for it
        self._step()

    def _step(self) -> None:
        """One period with the newest command; the next period's sensors go out."""
        _, _, terminated, truncated, info = self.env.step(self._action)
        self.steps += 1
        self._sim_ns += round(self.contract.control_period_s * 1e9)
        self.stale_ticks += int(not self._fresh)
        self._fresh = False
        self.crashes += int(bool(terminated.any()))
        if bool((terminated | truncated).any()):
            self.episodes.append(bool(info.success[0]))
            self.episode_metrics.append({k: v[0].tolist() for k, v in info.episode_metrics.items()})
            self._action = torch.zeros_like(self._action)  # the next episode starts from rest
            if self._renderer is not None:
                self._renderer.redraw(np.array([0]))
        self._publish(self.env.measurements(0))

    def _controller_connected(self) -> bool:
        """A controller is matched both ways: a subscriber to the last record's topic (the one a controller steps
        on) and a publisher of commands."""
        sensors = self._topic_publishers.get(self._stepped_on)
        return sensors is not None and sensors.get_subscription_count() > 0 and self._commands.get_publisher_count() > 0

    def _publish(self, records: list[m.Measurement], stepped: bool = True) -> None:
        """Publish ``records`` in order, the camera images just before the last one (the joint states); ``stepped``:
        they are a new period's (counted in ``position_errors``), not lockstep's repeat before the first command."""
        if self._clock_out is not None:
            stamp = Time(nanoseconds=self._sim_ns).to_msg()
            self._clock_out.publish(Clock(clock=stamp))  # before the sensors: a node following it is up to date
        else:
            stamp = self.get_clock().now().to_msg()
        self._published_at = time.monotonic()
        for k, record in enumerate(records):
            if stepped and isinstance(record, m.Odometry):
                self.position_errors.append(float(np.linalg.norm(record.position)))
            if k == len(records) - 1 and self._renderer is not None:
                for camera, view in self._renderer.render().items():
                    image = Image()
                    image.header.stamp, image.header.frame_id = stamp, camera
                    fill_image(image, view[0])
                    self._images[camera].publish(image)
            msg = self._message(record)
            if msg is None:
                continue
            if hasattr(msg, "header"):  # a Twist has none
                msg.header.stamp = stamp
            self._publisher(record, type(msg)).publish(msg)

    def _message(self, record: m.Measurement) -> Any:
        """The ROS message of one record (``None``: a latched record that has not changed)."""
        if isinstance(record, m.Odometry):
            msg = Odometry()
            msg.header.frame_id, msg.child_frame_id = record.frame_id, record.child_frame_id
            fill_odometry(msg, record.position, record.quat, record.velocity, record.angular_velocity)
            return msg
        if isinstance(record, m.Imu):
            msg = Imu()
            msg.header.frame_id = record.frame_id
            fill_imu(msg, record.quat, record.angular_velocity, record.linear_acceleration)
            return msg
        if isinstance(record, m.VelocityCommand):
            msg = Twist()
            fill_twist(msg, record.linear, record.angular)
            return msg
        if isinstance(record, m.Instruction):
            if self._latched.get(record.name) == record.text:
                return None
            self._latched[record.name] = record.text
            msg = String()
            msg.data = record.text
            return msg
        if isinstance(record, m.JointStates):
            msg = JointState()
            msg.header.frame_id = record.frame_id
            fill_joint_state(msg, record.joints, record.position, record.velocity)
            self._joints = dict(zip(record.joints, (float(v) for v in record.position), strict=True))
            return msg
        if record.latched:
            value = np.concatenate((record.position.ravel(), record.rotation.ravel()))
            if np.array_equal(self._latched.get(record.name, np.empty(0)), value):
                return None
            self._latched[record.name] = value
        msg = PoseStamped()
        msg.header.frame_id = record.frame_id
        fill_pose(msg, record.position, record.rotation)
        return msg

    def _publisher(self, record: m.Measurement, kind: type) -> Any:
        """The publisher of a record's topic (``<name>_topic`` parameter, else the name), made on first use."""
        if record.name not in self._topic_publishers:
            base, sep, item = record.name.partition("/")  # object_pose/red: under object_pose_topic
            key = f"{base}_topic"
            topic = self.get_parameter(key).value if self.has_parameter(key) else base
            topic = f"{topic}/{item}" if sep else topic
            latched = (isinstance(record, m.Pose) and record.latched) or isinstance(record, m.Instruction)
            self._topic_publishers[record.name] = self.create_publisher(
                kind, topic, LATCHED if latched else qos_profile_sensor_data
            )
        return self._topic_publishers[record.name]


def main(args: list[str] | None = None) -> None:
    """Console script: simulate until Ctrl-C."""
    spin_node(SimRobotNode, args)
