"""What the policy node reads, chosen from the contract: messages in, the contract's named signals out.

:func:`make_inputs` picks the input set from contract facts alone (the action kind and the signals the observation
reads), never from the task's name:

- :class:`OdometryInputs` (action kind ``rpm``: multirotors): ``nav_msgs/Odometry`` (world pose, body twist, REP
  105) becomes ``pos_w`` (position minus the hover point), ``rot_mat``, ``lin_vel_w``, ``ang_vel_b``. The hover point is
  the ``target_position_m`` parameter (the odometry frame, m; unset: the contract's ``extra.target_position_m``) and
  moves with ``geometry_msgs/PointStamped`` on ``target_topic``, each new point refused when it lies farther from
  the robot than the contract's training envelope (``extra.training_envelope.init_pos_radius_m``): the policy never
  learned to fly a larger step. A moving target also sends its velocity (``geometry_msgs/TwistStamped``
  on ``target_velocity_topic``, linear, odometry frame, at most ``max_target_speed_m_s``): ``lin_vel_w`` becomes the
  robot's velocity minus the target's for odometry stamped up to ``target_velocity_timeout_s`` after the setpoint,
  0 after that (a silent commander leaves a fixed target, never a phantom velocity).
- :class:`ArmInputs` (``position`` / ``torque``: manipulators): ``sensor_msgs/JointState`` (joints by name), the tool,
  goal and object poses (``geometry_msgs/PoseStamped``) and camera images (``sensor_msgs/Image``). Each joint state
  (the robot's own clock) merges the newest of every required input into one set of signals, provided each is fresh:
  a tool or object pose older than ``watchdog_s`` or an image older than ``image_timeout_s`` makes the joint state
  count as stale, so a silent sensor trips the watchdog like silent joints (the latched goal never ages).
- :class:`LeggedInputs` (``position`` commands of a policy that reads ``projected_gravity``: legged robots):
  ``sensor_msgs/JointState`` (joints by name; ``joint_pos_rel`` is the position minus the contract's default pose,
  ``action.offset``), ``sensor_msgs/Imu`` (gyro and attitude, REP 145) and a ``geometry_msgs/Twist`` velocity
  command on ``cmd_vel_topic``. Each joint state merges the newest IMU message (older than ``watchdog_s``: stale) and
  command. A command outside the contract's training envelope is refused; with none, or none for
  ``cmd_vel_timeout_s``, the command is zero (stand). A joint position more than :data:`JOINT_RANGE_MARGIN_RAD`
  outside the contract's range is refused naming the joint: a flipped sign or another zero in the driver.

Every message passes the same gate before it counts: its header (stamp age within ``max_input_age_s``; its frame
``frame_id`` where one is set; odometry's ``child_frame_id`` a body frame), its values in float32
(:mod:`robot_rl_ros.messages`), and the policy's own signal check (scaled values finite in float32,
``OnnxPolicy.check_signals``). A message that fails is counted and logged through ``reject`` and never reaches the
policy nor feeds the watchdog; one that passes calls ``accept``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from geometry_msgs.msg import PointStamped, PoseStamped, Twist, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from robot_rl_ros.instruction_encoder import instruction_embedder
from robot_rl_ros.messages import (
    MessageError,
    as_float32,
    check_header,
    check_odometry_frames,
    header_ns,
    image_signals,
    imu_signals,
    joint_state_signals,
    odometry_signals,
    pose_signals,
    position_signal,
    target_velocity,
    velocity_at,
    velocity_command,
)
from sensor_msgs.msg import Image, Imu, JointState
from std_msgs.msg import String

from policies.runtime import ContractError, OnnxPolicy
from policies.runtime.contract import Contract
from policies.runtime.onnx_policy import LAST_ACTION_SIGNAL
from policies.runtime.text import printable

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""Operator inputs (e-stop, goal, target): reliable and transient-local, so the last one sent before the node started
still arrives."""
ODOMETRY_SIGNALS = frozenset({"pos_w", "rot_mat", "lin_vel_w", "ang_vel_b", LAST_ACTION_SIGNAL})
ARM_SIGNALS = {
    "joint_pos": "joints",
    "joint_vel": "joints",
    "finger_pos": "joints",
    "tcp_pos": "tcp",
    "tcp_rot6": "tcp",
    "target_pos": "goal",
    "target_rot6": "goal",
    "goal_xy": "goal",
    "object_pos": "object",
    "objects_pos": "objects",
    LAST_ACTION_SIGNAL: "",
}
"""Contract signals a manipulator policy may read -> the input that provides them."""
LEGGED_SIGNALS = frozenset(
    {"base_ang_vel", "projected_gravity", "velocity_command", "joint_pos_rel", "joint_vel", LAST_ACTION_SIGNAL}
)
"""Contract signals a legged policy may read (``base_lin_vel``, an estimator's output, has no topic yet)."""
JOINT_RANGE_MARGIN_RAD = 0.1
"""How far beyond the contract's joint range a measured position may lie (compliance at the hard stops) before the
joint state is refused, rad."""
ENVELOPE_KEYS = {"linear.x": "lin_vel_x_m_s", "linear.y": "lin_vel_y_m_s", "angular.z": "yaw_rate_rad_s"}
"""Twist component -> the contract's ``extra.training_envelope`` range."""
OBJECT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
"""A tracked object's name (``extra.objects``): one token of a ROS topic name."""
Accept = Callable[[dict[str, np.ndarray], str, Any], None]
Reject = Callable[[str, Exception], None]


class Inputs:
    """Shared gate of every input set (see the module docstring).

    Args:
        node: The policy node (parameters, clock, subscriptions, logger).
        policy: The loaded policy (its contract and signal check).
        accept: ``accept(signals, kind, msg)``: a complete, valid set of signals arrived (``kind``: recording topic).
        reject: ``reject(what, error)``: a message was refused.
    """

    def __init__(self, node: Any, policy: OnnxPolicy, accept: Accept, reject: Reject) -> None:
        self.node, self.policy, self.contract = node, policy, policy.contract
        self._accept, self._reject = accept, reject
        self.max_age_s = float(node.p("max_input_age_s"))
        if not math.isfinite(self.max_age_s):
            raise ValueError(f"parameter max_input_age_s is {self.max_age_s}; expected seconds (<= 0: no check)")
        self.frame_id = str(node.p("frame_id"))
        self.subscriptions: list[Any] = []
        self.tank_joints = 0
        """Leading command entries the energy tank filters (0: none, e.g. rotor speeds)."""

    def now_ns(self) -> int:
        """The node's ROS clock, ns (the clock sensors stamp with)."""
        return int(self.node.get_clock().now().nanoseconds)

    def checked(self, signals: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``signals`` if the policy would accept them (its own check, with a placeholder ``last_action``)."""
        if LAST_ACTION_SIGNAL in {t.source for t in self.contract.observation}:
            placeholder = np.zeros((1, self.contract.action.size), dtype=np.float32)
            self.policy.check_signals({**signals, LAST_ACTION_SIGNAL: placeholder})
        else:
            self.policy.check_signals(signals)
        return signals

    def guarded(self, what: str, handle: Callable[[Any], None]) -> Callable[[Any], None]:
        """A subscription callback that refuses a bad message through ``reject`` instead of raising."""

        def callback(msg: Any) -> None:
            try:
                handle(msg)
            except (MessageError, ContractError) as exc:
                self._reject(what, exc)
            except Exception as exc:  # a message no check foresaw: refused, the node keeps running
                self._reject(what, RuntimeError(f"{type(exc).__name__}: {exc}"))

        return callback

    def subscribe(self, kind: type, topic: str, what: str, handle: Callable[[Any], None], qos: Any) -> None:
        """Subscribe ``handle`` (guarded) to ``topic``."""
        self.subscriptions.append(self.node.create_subscription(kind, topic, self.guarded(what, handle), qos))

    def reset(self) -> None:
        """Forget the inputs of an earlier activation."""


class OdometryInputs(Inputs):
    """Multirotor: odometry and the hover point (see the module docstring)."""

    def __init__(self, node: Any, policy: OnnxPolicy, accept: Accept, reject: Reject) -> None:
        super().__init__(node, policy, accept, reject)
        c = self.contract
        sources = {t.source for t in c.observation}
        if not sources <= ODOMETRY_SIGNALS:
            raise ContractError(f"no topic provides the contract's signal(s) {sorted(sources - ODOMETRY_SIGNALS)}")
        self.child_frame_id = str(node.p("child_frame_id"))
        given = node.p("target_position_m")
        default = c.extra.get("target_position_m", [0.0, 0.0, 0.0])
        self.target = np.asarray(default if given is None else given, dtype=np.float64)
        if self.target.shape != (3,):
            raise ValueError(f"parameter target_position_m has {self.target.size} values; expected x, y, z in m")
        envelope = c.extra.get("training_envelope", {})
        self.radius = float(envelope.get("init_pos_radius_m", 0.0)) if isinstance(envelope, dict) else 0.0
        self.position: np.ndarray | None = None  # the robot's newest position in the odometry frame
        self.targets_refused = 0
        self.subscribe(Odometry, node.p("odom_topic"), "odometry", self._on_odom, qos_profile_sensor_data)
        if node.p("target_topic"):
            if not self.radius > 0:
                raise ContractError(
                    "parameter target_topic is set, but the contract states no training envelope "
                    "(extra.training_envelope.init_pos_radius_m) to bound a new target by"
                )
            self.subscribe(PointStamped, node.p("target_topic"), "target", self._on_target, LATCHED)
        self.velocity: np.ndarray | None = None  # the newest velocity setpoint, m/s, and its stamp
        self.velocity_ns = 0
        self.velocity_timeout_s = float(node.p("target_velocity_timeout_s"))
        self.max_speed = float(node.p("max_target_speed_m_s"))
        if node.p("target_velocity_topic"):
            if not node.p("target_topic"):
                raise ValueError("parameter target_velocity_topic needs target_topic: a velocity without its position")
            if not (math.isfinite(self.velocity_timeout_s) and self.velocity_timeout_s > 0):
                raise ValueError(f"parameter target_velocity_timeout_s must be > 0 s, got {self.velocity_timeout_s}")
            if not (math.isfinite(self.max_speed) and self.max_speed > 0):
                raise ValueError(f"parameter max_target_speed_m_s must be > 0 m/s, got {self.max_speed}")
            topic = node.p("target_velocity_topic")
            self.subscribe(TwistStamped, topic, "target velocity", self._on_target_velocity, qos_profile_sensor_data)

    def _on_odom(self, msg: Odometry) -> None:
        check_header(msg.header, self.now_ns(), self.max_age_s, "odometry", self.frame_id)
        check_odometry_frames(msg, self.child_frame_id)
        moving = velocity_at(self.velocity, self.velocity_ns, header_ns(msg.header), self.velocity_timeout_s)
        signals = self.checked(odometry_signals(msg, self.target, moving))
        self.position = signals["pos_w"][0].astype(np.float64) + self.target
        self._accept(signals, "odom", msg)

    def _on_target(self, msg: PointStamped) -> None:
        """A new hover point (odometry frame), bounded by the training envelope around the robot's position."""
        check_header(msg.header, self.now_ns(), 0.0, "target", self.frame_id)
        p = msg.point
        new = as_float32([p.x, p.y, p.z], "target").astype(np.float64)
        origin = self.position if self.position is not None else self.target
        step = float(np.linalg.norm(new - origin))
        if step > self.radius:
            self.targets_refused += 1
            where = "the robot" if self.position is not None else "the current target (no odometry yet)"
            raise MessageError(
                f"target {new.round(3).tolist()} is {step:.3f} m from {where}, beyond the training envelope's "
                f"{self.radius:g} m; send intermediate targets"
            )
        self.target = new
        self.node.get_logger().info(f"target {new.round(3).tolist()} m")
        self.node.record("target", msg)

    def _on_target_velocity(self, msg: TwistStamped) -> None:
        """The moving target's velocity (odometry frame), applied to odometry stamped within the timeout."""
        check_header(msg.header, self.now_ns(), self.max_age_s, "target velocity", self.frame_id)
        self.velocity = target_velocity(msg, self.max_speed)
        self.velocity_ns = header_ns(msg.header)
        self.node.record("target_velocity", msg)

    def reset(self) -> None:
        """Forget the velocity setpoint of an earlier activation (the position target stays, as its parameter)."""
        self.velocity, self.velocity_ns = None, 0


class ArmInputs(Inputs):
    """Manipulator: joint states, tool / goal / object poses and camera images (see the module docstring)."""

    def __init__(self, node: Any, policy: OnnxPolicy, accept: Accept, reject: Reject) -> None:
        super().__init__(node, policy, accept, reject)
        c = self.contract
        self.layout = layout = ArmLayout.of(c)
        self.sources, self.needed, self.finger = layout.sources, layout.needed, layout.finger
        self.arm_joints = self.tank_joints = len(layout.joints)
        self.cameras = camera_topics(c, node.p("image_topics"))
        self.image_timeout_s = float(node.p("image_timeout_s"))
        if self.cameras and not (math.isfinite(self.image_timeout_s) and self.image_timeout_s > 0):
            raise ValueError(f"parameter image_timeout_s is {self.image_timeout_s}; expected seconds > 0")
        self.pose_timeout_s = float(node.p("watchdog_s"))
        self.parts: dict[str, dict[str, np.ndarray]] = {}
        self.part_at: dict[str, float] = {}
        self.images: dict[str, np.ndarray] = {}  # camera -> newest uint8 [1, H, W, 3]
        self.image_at: dict[str, float] = {}
        sensor = qos_profile_sensor_data
        self.subscribe(JointState, node.p("joint_states_topic"), "joint_states", self._on_joints, sensor)
        if "tcp" in self.needed:
            self.subscribe(PoseStamped, node.p("tcp_pose_topic"), "tcp pose", lambda m: self._on_pose(m, "tcp"), sensor)
        if "goal" in self.needed:  # an operator input: reliable, the last one latched
            self.subscribe(PoseStamped, node.p("goal_topic"), "goal pose", lambda m: self._on_pose(m, "goal"), LATCHED)
        if "object" in self.needed:
            topic = node.p("object_pose_topic")
            self.subscribe(PoseStamped, topic, "object pose", lambda m: self._on_pose(m, "object"), sensor)
        self.objects = list(layout.objects)
        self.object_seen: dict[str, np.ndarray] = {}  # object -> newest position [3]
        self.object_at: dict[str, float] = {}
        for name in self.objects:
            topic = f"{node.p('object_pose_topic')}/{name}"
            self.subscribe(PoseStamped, topic, f"object '{name}' pose", self._object_handler(name), sensor)
        for camera, (_, _, topic) in self.cameras.items():
            self.subscribe(Image, topic, f"camera '{camera}' image", self._image_handler(camera), sensor)
        self.language = layout.language
        self.instruction: str | None = None
        """The instruction the policy follows (``None``: none yet; the policy waits for one). It outlives a
        re-activation, as the operator's latched message does."""
        self.table: dict[str, Any] = c.chunk.language.get("instructions", {}) if c.chunk is not None else {}
        """The contract's instruction texts -> their embeddings (empty: no language)."""
        self.embed = (
            instruction_embedder(c.chunk.language) if c.chunk and self.table and node.p("embed_instructions") else None
        )
        """Embeds a text outside the table (``embed_instructions``; ``None``: such a text is refused)."""
        self.max_distance = float(node.p("instruction_max_distance"))
        """An embedded text farther than this from every text of the table is refused (``embed_instructions``)."""
        if self.embed is not None and not (math.isfinite(self.max_distance) and self.max_distance > 0):
            raise ValueError(f"parameter instruction_max_distance is {self.max_distance}; expected a distance > 0")
        if self.language:
            topic = node.p("instruction_topic")
            self.subscribe(String, topic, "instruction", self._on_instruction, LATCHED)  # an operator input

    @property
    def joints(self) -> list[str]:
        """The arm joints the contract measures, in its order."""
        return list(self.layout.joints)

    def reset(self) -> None:
        """Forget every input: after activation the policy waits for fresh ones (the instruction stays)."""
        self.parts, self.part_at, self.images, self.image_at = {}, {}, {}, {}
        self.object_seen, self.object_at = {}, {}

    def _on_joints(self, msg: JointState) -> None:
        check_header(msg.header, self.now_ns(), self.max_age_s, "joint_states")
        self.parts["joints"] = joint_state_signals(msg, self.joints, self.finger)
        self.node.record("joint_states", msg)
        self._merge("joint_states", msg)

    def _on_pose(self, msg: PoseStamped, which: str) -> None:
        """``which``: ``tcp`` (the tool pose), ``goal`` (a pose, or its x and y for ``goal_xy``) or ``object``."""
        age = 0.0 if which == "goal" else self.max_age_s  # a latched goal may have been sent long ago
        check_header(msg.header, self.now_ns(), age, f"{which} pose", self.frame_id)
        self.parts[which] = self.layout.pose(which, msg)
        self.part_at[which] = self.node.now()
        self.node.record(which, msg)

    def _object_handler(self, name: str) -> Callable[[PoseStamped], None]:
        return lambda msg: self._on_object(msg, name)

    def _on_object(self, msg: PoseStamped, name: str) -> None:
        """One of several tracked objects (``objects_pos``: the contract's ``extra.objects``, in that order)."""
        check_header(msg.header, self.now_ns(), self.max_age_s, f"object '{name}' pose", self.frame_id)
        self.object_seen[name] = position_signal(msg, name)[name][0]
        self.object_at[name] = self.node.now()
        self.node.record(f"object_pose/{name}", msg)
        if len(self.object_seen) == len(self.objects):
            self.parts["objects"] = self.layout.objects_part(self.object_seen)
            self.part_at["objects"] = min(self.object_at.values())  # the oldest of them

    def _on_instruction(self, msg: String) -> None:
        """A new instruction: it takes effect at the policy's next plan. One the policy cannot follow (not instruction
        text, or not in its table: ``ChunkedOnnxPolicy.set_instruction``, unless ``embed_instructions`` embeds it) is
        refused and the previous one stays, as is a text the encoder places farther than ``instruction_max_distance``
        from every instruction of the table ("stop", "hello", "": the policy would read it as the nearest task)."""
        text = msg.data
        try:
            if self.embed is not None and text not in self.table:
                embedding = self.embed(text)
                nearest, distance = self.policy.nearest_instruction(embedding)  # type: ignore[attr-defined]
                if not distance <= self.max_distance:  # a text unlike every trained one is not read as one of them
                    raise ValueError(
                        f"instruction '{printable(text[:80])}' lies {distance:.2f} from every instruction the policy "
                        f"was trained on (nearest: '{nearest}'; instruction_max_distance {self.max_distance:g})"
                    )
                self.policy.set_instruction_embedding(embedding)  # type: ignore[attr-defined]
            else:
                self.policy.set_instruction(text)  # type: ignore[attr-defined]
        except (ContractError, ValueError) as exc:  # the encoder's refusals are ValueErrors (LanguageError)
            raise MessageError(str(exc)) from None
        self.node.record("instruction", msg)
        if text != self.instruction:
            self.node.get_logger().info(f"instruction: '{text}'")
        self.instruction = text

    def _image_handler(self, camera: str) -> Callable[[Image], None]:
        return lambda msg: self._on_image(msg, camera)

    def _on_image(self, msg: Image, camera: str) -> None:
        h, w, _ = self.cameras[camera]
        check_header(msg.header, self.now_ns(), self.max_age_s, f"camera '{camera}' image")
        self.images[camera] = image_signals(msg, h, w)
        self.image_at[camera] = self.node.now()
        self.node.record(f"{camera}/image_raw", msg)

    def _merge(self, kind: str, msg: Any) -> None:
        """A joint state arrived: merge it with the newest of every other required input and accept them; while one
        has not arrived yet, wait; when one is stale, refuse (it does not feed the watchdog)."""
        now = self.node.now()
        if not self.needed <= set(self.parts) or (self.language and self.instruction is None):
            return  # the other inputs (or the instruction) have not arrived yet: wait, nothing is refused
        poses: list[str] = [w for w in ("tcp", "object", "objects") if w in self.needed]
        old = [w for w in poses if now - self.part_at[w] > self.pose_timeout_s]
        if old:
            raise MessageError(f"the {' and '.join(old)} pose is older than watchdog_s {self.pose_timeout_s:g} s")
        if self.cameras:
            stale = [c for c in self.cameras if now - self.image_at.get(c, -math.inf) > self.image_timeout_s]
            if stale:
                raise MessageError(
                    f"camera image(s) of {stale} missing or older than image_timeout_s {self.image_timeout_s:g} s"
                )
        merged: dict[str, np.ndarray] = {}
        for part in self.parts.values():
            merged.update(part)
        self._accept(self.checked(merged), "", msg)


def command_ranges(contract: Contract) -> dict[str, tuple[float, float]]:
    """The velocity command's training envelope, ``{"linear.x": (lo, hi), "linear.y": ..., "angular.z": ...}``
    (m/s, rad/s), from the contract's ``extra.training_envelope`` (a legged policy's).

    Raises:
        ContractError: A range is missing or is not a finite ``[low, high]`` pair with ``low <= high`` (named).
    """
    envelope = contract.extra.get("training_envelope", {})
    envelope = envelope if isinstance(envelope, dict) else {}
    ranges: dict[str, tuple[float, float]] = {}
    for component, key in ENVELOPE_KEYS.items():
        raw = envelope.get(key)
        bad = ContractError(f"the contract's extra.training_envelope.{key} is not a [low, high] range: {raw!r}")
        try:
            lo, hi = (float(v) for v in raw)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise bad from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise bad
        ranges[component] = (lo, hi)
    return ranges


class LeggedInputs(Inputs):
    """Legged robot: joint states, the IMU and a velocity command (see the module docstring)."""

    def __init__(self, node: Any, policy: OnnxPolicy, accept: Accept, reject: Reject) -> None:
        super().__init__(node, policy, accept, reject)
        c = self.contract
        sources = {t.source for t in c.observation}
        unknown = sorted(sources - LEGGED_SIGNALS)
        if unknown:
            raise ContractError(f"no topic provides the contract's signal(s) {unknown} to this node")
        a = c.action
        self.tank_joints = a.size
        self.joints = list(a.names)
        self.default = np.asarray(a.offset, dtype=np.float64)
        self.low = np.asarray(a.low, dtype=np.float64) - JOINT_RANGE_MARGIN_RAD
        self.high = np.asarray(a.high, dtype=np.float64) + JOINT_RANGE_MARGIN_RAD
        self.ranges = command_ranges(c)
        self.imu_frame_id = str(node.p("imu_frame_id"))
        self.imu_timeout_s = float(node.p("watchdog_s"))
        self.command_timeout_s = float(node.p("cmd_vel_timeout_s"))
        if not (math.isfinite(self.command_timeout_s) and self.command_timeout_s > 0):
            raise ValueError(f"parameter cmd_vel_timeout_s is {self.command_timeout_s}; expected seconds > 0")
        self.reset()
        sensor = qos_profile_sensor_data
        self.subscribe(JointState, node.p("joint_states_topic"), "joint_states", self._on_joints, sensor)
        self.subscribe(Imu, node.p("imu_topic"), "imu", self._on_imu, sensor)
        # best effort: it receives from teleops publishing reliably (ROS 2's default) as well
        self.subscribe(Twist, node.p("cmd_vel_topic"), "cmd_vel", self._on_cmd_vel, sensor)

    def reset(self) -> None:
        """Forget every input (after activation the robot stands until a new command arrives)."""
        self.imu: dict[str, np.ndarray] | None = None
        self.imu_at = -math.inf
        self.command = np.zeros((1, 3), dtype=np.float32)
        self.command_at = -math.inf

    def _on_imu(self, msg: Imu) -> None:
        check_header(msg.header, self.now_ns(), self.max_age_s, "imu", self.imu_frame_id)
        self.imu = imu_signals(msg)
        self.imu_at = self.node.now()
        self.node.record("imu", msg)

    def _on_cmd_vel(self, msg: Twist) -> None:
        self.command = velocity_command(msg, self.ranges)
        self.command_at = self.node.now()
        self.node.record("cmd_vel", msg)

    def _on_joints(self, msg: JointState) -> None:
        check_header(msg.header, self.now_ns(), self.max_age_s, "joint_states")
        part = joint_state_signals(msg, self.joints)
        q = part["joint_pos"][0].astype(np.float64)
        outside = np.flatnonzero((q < self.low) | (q > self.high))
        if outside.size:
            j = int(outside[0])
            lo, hi = self.low[j] + JOINT_RANGE_MARGIN_RAD, self.high[j] - JOINT_RANGE_MARGIN_RAD
            raise MessageError(
                f"joint_states: {self.joints[j]} is at {q[j]:.3f} rad, outside its range [{lo:.3f}, {hi:.3f}] rad in "
                f"the contract by more than {JOINT_RANGE_MARGIN_RAD:g} rad (a flipped sign or another zero position "
                "in the driver?)"
            )
        self.node.record("joint_states", msg)
        now = self.node.now()
        if self.imu is None:
            return  # the IMU has not spoken yet (discovery): wait, nothing is refused
        if now - self.imu_at > self.imu_timeout_s:
            raise MessageError(f"the imu is older than watchdog_s {self.imu_timeout_s:g} s")
        command = self.command if now - self.command_at <= self.command_timeout_s else np.zeros_like(self.command)
        rel = (q - self.default).astype(np.float32)[None]
        signals = {**part, **self.imu, "joint_pos_rel": rel, "velocity_command": command}
        self._accept(self.checked(signals), "", msg)


def make_inputs(node: Any, policy: OnnxPolicy, accept: Accept, reject: Reject) -> Inputs:
    """The input set for ``policy``'s contract (see the module docstring).

    Raises:
        ContractError: The contract's action kind or signals are not ones this node reads (named).
        ValueError: A parameter of the inputs is malformed (named).
    """
    kind = policy.contract.action.kind
    if kind == "rpm":
        return OdometryInputs(node, policy, accept, reject)
    if kind == "position" and "projected_gravity" in {t.source for t in policy.contract.observation}:
        return LeggedInputs(node, policy, accept, reject)
    if kind in ("position", "torque"):
        return ArmInputs(node, policy, accept, reject)
    raise ContractError(
        f"action kind '{kind}': this node drives multirotors (rpm), manipulators (position, torque) and legged robots "
        "(position)"
    )


@dataclass(frozen=True)
class ArmLayout:
    """What a manipulator contract reads and which inputs provide it (the node's and a recording's view alike).

    Attributes:
        sources: The contract's observation signals.
        needed: The inputs they need: ``joints``, ``tcp``, ``goal``, ``object``, ``objects``.
        joints: The arm joints the contract measures, in its order (``joint_pos``, ``joint_vel``; the first
            commands, the ones the tank filters).
        finger: The gripper joint whose position is ``finger_pos``, or ``""``.
        objects: The tracked objects whose positions ``objects_pos`` concatenates (``extra.objects``), or none.
        language: Whether the policy follows an instruction.
    """

    sources: frozenset[str]
    needed: frozenset[str]
    joints: tuple[str, ...]
    finger: str
    objects: tuple[str, ...]
    language: bool

    @classmethod
    def of(cls, c: Any) -> ArmLayout:
        """The layout of contract ``c``.

        Raises:
            ContractError: The contract reads a signal no manipulator input provides, or its joints or objects are
                malformed (named).
        """
        sources = frozenset(t.source for t in c.observation)
        unknown = sorted(sources - set(ARM_SIGNALS))
        if unknown:
            raise ContractError(f"no topic provides the contract's signal(s) {unknown} to this node")
        n = _joint_count(c)
        needed = frozenset(ARM_SIGNALS[s] for s in sources) - {""}
        objects = tuple(_object_names(c)) if "objects" in needed else ()
        language = bool(c.chunk is not None and c.chunk.language)
        return cls(sources, needed, tuple(c.joint_names[:n]), _finger_joint(c, n), objects, language)

    def pose(self, which: str, msg: PoseStamped) -> dict[str, np.ndarray]:
        """The signals of a ``tcp`` (tool), ``goal`` (a pose, or its x and y for ``goal_xy``) or single ``object``
        pose message.

        Raises:
            MessageError: A value the policy reads is not finite in float32 (or not a unit quaternion).
        """
        if which == "goal" and "goal_xy" in self.sources:
            return position_signal(msg, "goal_xy", axes=2)
        if which == "object":
            return position_signal(msg, "object_pos")
        return pose_signals(msg, "tcp" if which == "tcp" else "target")

    def objects_part(self, seen: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``objects_pos`` ``[1, 3 * len(objects)]`` from each object's newest position ``[3]``."""
        return {"objects_pos": np.concatenate([seen[o] for o in self.objects])[None]}


def _joint_count(c: Any) -> int:
    """Joints the manipulator contract measures (``joint_pos`` and ``joint_vel``, the first commands)."""
    sizes = {t.source: t.size for t in c.observation}
    missing = [s for s in ("joint_pos", "joint_vel") if s not in sizes]
    if missing:
        raise ContractError(f"a manipulator policy must read {missing}: the safety layer and the tank need them")
    n = sizes["joint_pos"]
    if sizes["joint_vel"] != n or n > c.action.size or n > len(c.joint_names):
        raise ContractError(
            f"joint_pos ({n}) and joint_vel ({sizes['joint_vel']}) must name the same joints, at most "
            f"action.size ({c.action.size}) and the contract's {len(c.joint_names)} joint_names"
        )
    return int(n)


def _finger_joint(c: Any, arm_joints: int) -> str:
    """The gripper joint whose position is ``finger_pos`` (the first joint after the arm's), or ``""``."""
    if "finger_pos" not in {t.source for t in c.observation}:
        return ""
    if len(c.joint_names) <= arm_joints:
        raise ContractError(
            f"the contract reads finger_pos but names no gripper joint after the {arm_joints} arm joints "
            f"(joint_names: {list(c.joint_names)})"
        )
    return str(c.joint_names[arm_joints])


def _object_names(c: Any) -> list[str]:
    """The objects whose positions ``objects_pos`` concatenates, in order: the contract's ``extra.objects`` (each a
    name, ``<object_pose_topic>/<name>`` on the robot), three coordinates each."""
    names = c.extra.get("objects")
    size = next(t.size for t in c.observation if t.source == "objects_pos")
    if not isinstance(names, list) or not names or 3 * len(names) != size:
        raise ContractError(
            f"the contract reads objects_pos ({size} values) but its extra.objects does not name {size // 3} objects"
        )
    for i, name in enumerate(names):
        if not isinstance(name, str) or not OBJECT_NAME.fullmatch(name):
            shown = printable(str(name)[:40]) if isinstance(name, str) else type(name).__name__
            raise ContractError(
                f"the contract's extra.objects[{i}] '{shown}' is not an object name (a letter or _, then letters, "
                "digits or _; at most 32: it becomes a topic name)"
            )
    if len(set(names)) != len(names):
        raise ContractError(f"the contract's extra.objects names an object twice: {names}")
    return [str(n) for n in names]


def camera_topics(c: Any, entries: list[str]) -> dict[str, tuple[int, int, str]]:
    """Camera -> (height, width, topic) for the contract's cameras; ``image_topics`` entries ``camera=topic``
    override the default ``<camera>/image_raw``."""
    cameras = dict(c.chunk.cameras) if c.chunk is not None else {}
    overrides: dict[str, str] = {}
    for entry in (e for e in entries if e):
        camera, sep, topic = entry.partition("=")
        if not sep or not camera or not topic:
            raise ValueError(f"parameter image_topics entry '{entry}' is not 'camera=topic'")
        if camera in overrides:
            raise ValueError(f"parameter image_topics names camera '{camera}' twice")
        if camera not in cameras:
            raise ValueError(
                f"parameter image_topics names camera '{camera}'; the model sees {sorted(cameras) or 'none'}"
            )
        overrides[camera] = topic
    return {
        name: (int(cam["height"]), int(cam["width"]), overrides.get(name, f"{name}/image_raw"))
        for name, cam in cameras.items()
    }
