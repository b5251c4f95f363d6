"""``policy_node``: a lifecycle node that runs an exported robot-rl policy behind the safety layer.

Lifecycle (``ros2 lifecycle set /policy_node configure`` ...):

- **configure** loads the ONNX file, checks its contract against the parameters (task, actuator names), runs the
  policy's self-test and a warm-up inference, and creates publishers and subscriptions. Any mismatch or a corrupt
  file is refused (the transition fails with a logged error naming it; the node stays unconfigured).
- **activate** resets the observation histories, starts the safety layer's fade-in and the control timer at the
  contract's control period. ``control_rate_hz`` overrides it (read at configure): integral observation terms, the
  rate limit and the energy tank then work with that period; whether the policy holds its criterion at that rate is
  measured with ``robot-rl eval RUN --control-rate HZ``.
- **deactivate** stops the timer; **cleanup** releases the policy and the communication objects.

Every period: the newest inputs -> signals -> ``OnnxPolicy`` (``ChunkedOnnxPolicy`` for action-chunk policies,
which plan inside the period every ``action_horizon`` steps) -> ``SafetyLayer`` (watchdog, latched e-stop and
faults, fade-in, limits) -> for manipulators the passivity filter (energy tank) -> ``std_msgs/Float64MultiArray``.

When a step runs (``trigger``):

- ``timer``: on the node's own timer, from the newest inputs. The timer's phase against the robot's sensor clock is
  arbitrary, so an input waits up to one period before it is used (measured in docs/ros2.md).
- ``input``: as soon as a new odometry message (multirotors) or joint state (manipulators; with the newest tool pose
  and goal) arrives, at most once per control period (faster inputs are decimated to the period), so the command
  answers the newest measurement with no waiting. The timer stays as the fall-back: with the inputs silent for 1.5
  periods it steps the loop (stale inputs, the watchdog counting) until the watchdog trips.

Which inputs, from the contract's action kind:

- multirotor (``rpm``): ``nav_msgs/Odometry`` on ``odom_topic``; rotor speeds out (contract unit and motor order);
- manipulator (``position`` or ``torque``): ``sensor_msgs/JointState`` on ``joint_states_topic`` (joints by name;
  the gripper's finger joint too where the contract reads ``finger_pos``), the tool pose the robot reports as
  ``geometry_msgs/PoseStamped`` on ``tcp_pose_topic``, the goal pose on ``goal_topic`` (a full pose for
  ``target_pos``/``target_rot6``, its x and y for ``goal_xy``) and an object tracker's estimate of the object's pose
  on ``object_pose_topic`` (``object_pos``), where the contract reads them; joint targets (rad, for ros2_control's
  forward position controller) or efforts (N m, forward effort controller) out, in the contract's joint order (a
  gripper command last, m per finger).
- cameras (action-chunk policies that see images, contract ``chunk.cameras``): ``sensor_msgs/Image`` per camera on
  ``<camera>/image_raw``, or the topic ``image_topics`` names (``["wrist=/wrist/color/image_raw"]``); 8-bit RGB or
  BGR (with or without alpha) of exactly the trained size. The newest image of every camera goes with each step;
  while any camera is silent for longer than ``image_timeout_s`` the inputs count as stale, so the watchdog trips
  just as it does for silent joint states. The energy tank
  (``policies.runtime.passivity``) scales set-point jumps (position) or torques so the energy the policy injects
  never exceeds what the tank holds; its parameters come from the contract's ``filter`` section, each overridable by
  a ``tank_*`` parameter (``-1``: keep the contract's). A signal of the contract that no topic provides is refused at
  configure, naming it.

A message with NaN, a wrong length, a missing joint or an unknown frame is rejected with a logged error and counted;
the node keeps running. Diagnostics (``diagnostic_msgs/DiagnosticArray`` on ``/diagnostics``, 2 Hz): loop period,
inference time, fault, rejected messages, and for manipulators the tank's energy, ``alpha`` and injected energy.

QoS: odometry, joint states, the tool pose and commands are *sensor data* (best effort, keep last 1): a late sample
is worth nothing, the newest one is what counts, and the watchdog catches a silent link. The e-stop and the goal are
reliable and transient-local, so a latched ``true`` or the last goal published before the node started still reach
it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.lifecycle import Node, State, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from robot_rl_ros.messages import (
    MessageError,
    image_signals,
    joint_state_signals,
    odometry_signals,
    pose_signals,
    position_signal,
)
from robot_rl_ros.spin import spin_node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64MultiArray, String

from policies.runtime import ContractError, OnnxPolicy, open_policy
from policies.runtime.contract import MAX_CONTROL_RATE_HZ
from policies.runtime.passivity import EnergyTank, TankParams
from policies.runtime.robot_check import check_robot
from policies.runtime.safety import SafetyConfig, SafetyLayer

ESTOP_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
MANIPULATOR_SIGNALS = {
    "joint_pos": "joint_states_topic",
    "joint_vel": "joint_states_topic",
    "tcp_pos": "tcp_pose_topic",
    "tcp_rot6": "tcp_pose_topic",
    "target_pos": "goal_topic",
    "target_rot6": "goal_topic",
    "goal_xy": "goal_topic",
    "finger_pos": "joint_states_topic",
    "object_pos": "object_pose_topic",
    "last_action": "",
}
"""Contract signals a manipulator policy may read, and the parameter naming the topic that provides each."""
PARAMETERS: dict[str, Any] = {
    "model_path": "",
    "expected_task": "",
    "expected_actuators": [""],
    "robot_description": "",
    "odom_topic": "odom",
    "command_topic": "command",
    "estop_topic": "estop",
    "watchdog_s": 0.1,
    "fade_in_s": 0.0,
    "max_rate": -1.0,
    "safe_mode": "zero",
    "safe_command": [0.0],
    "control_rate_hz": 0.0,
    "trigger": "timer",
    "joint_states_topic": "joint_states",
    "tcp_pose_topic": "tcp_pose",
    "goal_topic": "goal_pose",
    "object_pose_topic": "object_pose",
    "image_topics": [""],
    "image_timeout_s": 0.2,
    "passivity": True,
    "tank_init_j": -1.0,
    "tank_min_j": -1.0,
    "tank_max_j": -1.0,
    "tank_margin_j": -1.0,
}
"""Declared parameters and their defaults (the YAML files in ``config/`` set them under ``ros__parameters``)."""


class PolicyNode(Node):
    """See the module docstring."""

    def __init__(self, name: str = "policy_node", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        for key, default in PARAMETERS.items():
            self.declare_parameter(key, default)
        self.policy: OnnxPolicy | None = None
        self.safety: SafetyLayer | None = None
        self.rejected = 0
        self.published = 0
        self.fault = "unconfigured"
        self._signals: dict[str, np.ndarray] | None = None
        self._timer: Any = None
        self._pub: Any = None
        self._diag: Any = None
        self._subs: list[Any] = []
        self._periods: list[float] = []
        self._infer_s: list[float] = []
        self._last_tick: float | None = None
        self._odom_at = -1.0
        self.input_age_s: list[float] = []  # per tick: newest odometry's age when the command went out
        self.received = 0
        self.recorder: Any = None  # robot_rl_ros.recording.Recorder, set by robot-rl deploy --record
        self.manipulator = False
        self.tank: Any = None
        self.tank_state: tuple[float, float, float, float] | None = None
        self._inputs: dict[str, dict[str, np.ndarray]] = {}
        self._needed: set[str] = set()
        self._sources: set[str] = set()  # contract signals the policy reads
        self._arm_joints = 0
        self._finger = ""  # the gripper joint read as finger_pos ("" when the contract does not read it)
        self._stiffness = np.zeros(0)
        self._cameras: dict[str, tuple[int, int, str]] = {}  # camera -> (height, width, topic)
        self._images: dict[str, np.ndarray] = {}  # camera -> newest uint8 [1, H, W, 3]
        self._image_at: dict[str, float] = {}

    def p(self, key: str) -> Any:
        """A parameter's value."""
        return self.get_parameter(key).value

    # ------------------------------------------------------------------------------------------------ lifecycle
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        """Load and verify the policy; create publishers and subscriptions."""
        try:
            rate = float(self.p("control_rate_hz"))
            if not (math.isfinite(rate) and 0 <= rate <= MAX_CONTROL_RATE_HZ):
                raise ValueError(
                    f"parameter control_rate_hz is {rate}; expected Hz in (0, {MAX_CONTROL_RATE_HZ:g}], or 0 for the "
                    "contract's rate"
                )
            # chunk policies plan inside the period; integral terms integrate over the period the node runs at
            policy = open_policy(self.p("model_path"), control_period_s=1.0 / rate if rate > 0 else None)
            c = policy.contract
            if self.p("expected_task") and c.task != self.p("expected_task"):
                raise ContractError(
                    f"the model is for task '{c.task}', the parameters expect '{self.p('expected_task')}'"
                )
            expected = [a for a in self.p("expected_actuators") if a]
            if expected and expected != list(c.action.names):
                raise ContractError(f"the model commands {list(c.action.names)}, the parameters expect {expected}")
            if self.p("robot_description"):  # the integrator's facts about the real machine (robot_check.py)
                check_robot(c, _read_yaml(self.p("robot_description")), policy.control_period_s)
            if self.p("trigger") not in ("timer", "input"):
                raise ValueError(f"parameter trigger is '{self.p('trigger')}'; expected 'timer' or 'input'")
            self.manipulator = c.action.kind in ("position", "torque")
            if c.action.kind != "rpm" and not self.manipulator:
                raise ContractError(
                    f"action kind '{c.action.kind}': this node drives multirotors (rpm) and manipulators "
                    "(position, torque)"
                )
            if self.manipulator:
                unknown = [t.source for t in c.observation if t.source not in MANIPULATOR_SIGNALS]
                if unknown:
                    raise ContractError(f"no topic provides the contract's signal(s) {unknown} to this node")
                self._arm_joints = self._joint_count(c)
                self._finger = self._finger_joint(c)
                self.tank = self._make_tank(c) if self.p("passivity") else None
            self._cameras = self._camera_topics(c)
            policy.self_test()
            grey = [policy.grey_images(1)] if self._cameras else []  # type: ignore[attr-defined]
            policy.run_obs(np.zeros((1, policy.obs_dim), dtype=np.float32), *grey)  # warm-up
            a = c.action
            safe = tuple(self.p("safe_command")) if self.p("safe_mode") == "command" else ()
            max_rate = float(self.p("max_rate"))
            cfg = SafetyConfig(
                tuple(a.low), tuple(a.high), (max_rate,) * a.size, float(self.p("watchdog_s")),
                float(self.p("fade_in_s")), self.p("safe_mode"), safe,
            )  # fmt: skip
            self.safety = SafetyLayer(cfg, policy.control_period_s, np.asarray(a.offset, dtype=np.float32))
        except (FileNotFoundError, ContractError, ValueError, RuntimeError) as exc:
            self.get_logger().error(f"configure refused: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.policy = policy
        self.target = list(c.extra.get("target_position_m", [0.0, 0.0, 0.0]))
        self._pub = self.create_lifecycle_publisher(Float64MultiArray, self.p("command_topic"), qos_profile_sensor_data)
        self._diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(0.5, self._diagnostics)
        self._subs = [self.create_subscription(Bool, self.p("estop_topic"), self._on_estop, ESTOP_QOS)]
        if not self.manipulator:
            self._subs.append(
                self.create_subscription(Odometry, self.p("odom_topic"), self._on_odom, qos_profile_sensor_data)
            )
        else:
            self._sources = sources = {t.source for t in c.observation}
            self._inputs = {}
            self._needed = {"joints"} | ({"tcp"} if "tcp_pos" in sources else set())
            self._needed |= {"goal"} if sources & {"target_pos", "goal_xy"} else set()
            self._needed |= {"object"} if "object_pos" in sources else set()
            self._subs.append(
                self.create_subscription(
                    JointState, self.p("joint_states_topic"), self._on_joints, qos_profile_sensor_data
                )
            )
            if "tcp" in self._needed:
                self._subs.append(
                    self.create_subscription(
                        PoseStamped,
                        self.p("tcp_pose_topic"),
                        lambda m: self._on_pose(m, "tcp"),
                        qos_profile_sensor_data,
                    )
                )
            if "goal" in self._needed:  # the goal is an operator input: reliable, the last one latched
                self._subs.append(
                    self.create_subscription(
                        PoseStamped, self.p("goal_topic"), lambda m: self._on_pose(m, "goal"), ESTOP_QOS
                    )
                )
            if "object" in self._needed:
                self._subs.append(
                    self.create_subscription(
                        PoseStamped,
                        self.p("object_pose_topic"),
                        lambda m: self._on_pose(m, "object"),
                        qos_profile_sensor_data,
                    )
                )
            self._images, self._image_at = {}, {}
            for camera, (_, _, topic) in self._cameras.items():
                self._subs.append(
                    self.create_subscription(
                        Image, topic, lambda m, cam=camera: self._on_image(m, cam), qos_profile_sensor_data
                    )
                )
        self.fault = "inactive"
        self.get_logger().info(f"configured: task '{c.task}', {c.obs_dim} inputs, {a.size} {a.kind} commands")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        """Reset the histories, start the fade-in and the control timer."""
        assert self.policy is not None and self.safety is not None
        self.policy.reset()
        self._signals = None
        self.safety.activate(self._now())
        self._last_action = np.asarray(self.policy.contract.action.offset, dtype=np.float32)[None]
        self._setpoint: np.ndarray | None = None  # manipulators: the command in force (position kind)
        if self.tank is not None:
            self.tank.reset()
        period = self.policy.control_period_s  # the contract's, or 1 / control_rate_hz
        self._period, self._due, self._last_tick = period, float("-inf"), None
        self._on_input = self.p("trigger") == "input"
        self._timer = self.create_timer(period, self._fallback if self._on_input else self._tick)
        return super().on_activate(state)

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        """Stop the control timer (the last command does not stick: downstream watchdogs see silence)."""
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        """Release the policy and every communication object."""
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        if self._pub is not None:
            self.destroy_lifecycle_publisher(self._pub)
        self.destroy_timer(self._diag_timer)
        self.destroy_publisher(self._diag)
        self.policy, self.safety, self._pub, self._diag, self.fault = None, None, None, None, "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    # ------------------------------------------------------------------------------------------------- inputs
    def _now(self) -> float:
        return time.monotonic()

    def _on_odom(self, msg: Odometry) -> None:
        try:
            self._signals = odometry_signals(msg, self.target)
        except MessageError as exc:
            self.rejected += 1
            self.get_logger().error(f"odometry rejected: {exc}", throttle_duration_sec=1.0)
            return
        self._odom_at = self._now()
        self.received += 1
        if self.safety is not None:
            self.safety.input_received(self._odom_at)
        self._record("odom", msg)
        self._input_step()

    @staticmethod
    def _joint_count(c: Any) -> int:
        """Joints the manipulator contract measures (``joint_pos`` and ``joint_vel``, the first commands)."""
        sizes = {t.source: t.size for t in c.observation}
        missing = [s for s in ("joint_pos", "joint_vel") if s not in sizes]
        if missing:
            raise ContractError(f"a manipulator policy must read {missing}: the safety layer and the tank need them")
        n = sizes["joint_pos"]
        if sizes["joint_vel"] != n or n > c.action.size:
            raise ContractError(
                f"joint_pos ({n}) and joint_vel ({sizes['joint_vel']}) must name the same joints, at most "
                f"action.size ({c.action.size})"
            )
        return int(n)

    def _finger_joint(self, c: Any) -> str:
        """The gripper joint whose position is ``finger_pos`` (the first joint after the arm's), or ``""``."""
        if "finger_pos" not in {t.source for t in c.observation}:
            return ""
        if len(c.joint_names) <= self._arm_joints:
            raise ContractError(
                f"the contract reads finger_pos but names no gripper joint after the {self._arm_joints} arm joints "
                f"(joint_names: {list(c.joint_names)})"
            )
        return str(c.joint_names[self._arm_joints])

    def _camera_topics(self, c: Any) -> dict[str, tuple[int, int, str]]:
        """Camera -> (height, width, topic) for the contract's cameras; ``image_topics`` entries ``camera=topic``
        override the default ``<camera>/image_raw``."""
        cameras = dict(c.chunk.cameras) if c.chunk is not None else {}
        overrides: dict[str, str] = {}
        for entry in (e for e in self.p("image_topics") if e):
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
        if cameras and not self.manipulator:
            raise ContractError(f"the model sees cameras {sorted(cameras)}; camera inputs are read for manipulators")
        timeout = float(self.p("image_timeout_s"))
        if cameras and not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"parameter image_timeout_s is {timeout}; expected seconds > 0")
        return {
            name: (int(cam["height"]), int(cam["width"]), overrides.get(name, f"{name}/image_raw"))
            for name, cam in cameras.items()
        }

    def _make_tank(self, c: Any) -> EnergyTank:
        """The energy tank from the contract's ``filter`` section, ``tank_*`` parameters overriding; position
        commands also need the impedance stiffness (``extra.impedance.stiffness_nm_per_rad``) to price a jump."""
        section = dict(c.filter)
        for key in ("tank_init_j", "tank_min_j", "tank_max_j", "tank_margin_j"):
            if float(self.p(key)) >= 0:
                section[key] = float(self.p(key))
        n = self._arm_joints
        if c.action.kind == "position":
            k = np.asarray(c.extra.get("impedance", {}).get("stiffness_nm_per_rad", []), dtype=np.float64)
            if k.shape != (n,) or not (np.isfinite(k).all() and (k >= 0).all()):
                raise ContractError(
                    f"the passivity filter needs extra.impedance.stiffness_nm_per_rad with {n} finite values >= 0 "
                    f"for position commands, got {k.tolist()}"
                )
            self._stiffness = k
        return EnergyTank(TankParams.from_contract(section), n)

    def _on_joints(self, msg: JointState) -> None:
        assert self.policy is not None
        joints = self.policy.contract.joint_names[: self._arm_joints]
        try:
            self._inputs["joints"] = joint_state_signals(msg, joints, self._finger)
        except MessageError as exc:
            self.rejected += 1
            self.get_logger().error(f"joint_states rejected: {exc}", throttle_duration_sec=1.0)
            return
        self._record("joint_states", msg)
        self._input_arrived()
        if self._signals is not None:  # `trigger: input`: the joint state (the robot's own clock) starts the step
            self._input_step()

    def _on_pose(self, msg: PoseStamped, which: str) -> None:
        """``which``: ``tcp`` (the tool pose), ``goal`` (a pose, or its x and y for ``goal_xy``) or ``object``."""
        try:
            if which == "goal" and "goal_xy" in self._sources:
                self._inputs[which] = position_signal(msg, "goal_xy", axes=2)
            elif which == "object":
                self._inputs[which] = position_signal(msg, "object_pos")
            else:
                self._inputs[which] = pose_signals(msg, "tcp" if which == "tcp" else "target")
        except MessageError as exc:
            self.rejected += 1
            self.get_logger().error(f"{which} pose rejected: {exc}", throttle_duration_sec=1.0)
            return
        self._record(which, msg)
        if which == "tcp":
            self._input_arrived()

    def _on_image(self, msg: Image, camera: str) -> None:
        h, w, _ = self._cameras[camera]
        try:
            self._images[camera] = image_signals(msg, h, w)
        except MessageError as exc:
            self.rejected += 1
            self.get_logger().error(f"camera '{camera}' image rejected: {exc}", throttle_duration_sec=1.0)
            return
        self._image_at[camera] = self._now()

    def _input_arrived(self) -> None:
        """Every required manipulator input is in (and every camera's image is fresh): merge them into the signals
        and feed the watchdog."""
        if not self._needed <= set(self._inputs):
            return
        if self._cameras:
            now, timeout = self._now(), float(self.p("image_timeout_s"))
            stale = [c for c in self._cameras if now - self._image_at.get(c, -math.inf) > timeout]
            if stale:
                self.get_logger().error(
                    f"camera image(s) of {stale} missing or older than image_timeout_s {timeout:g} s",
                    throttle_duration_sec=1.0,
                )
                return
        merged: dict[str, np.ndarray] = {}
        for part in self._inputs.values():
            merged.update(part)
        self._signals = merged
        self._odom_at = self._now()
        self.received += 1
        if self.safety is not None:
            self.safety.input_received(self._odom_at)

    def _record(self, kind: str, msg: Any) -> None:
        if self.recorder is not None:
            self.recorder.write(kind, msg, time.monotonic_ns())

    def _on_estop(self, msg: Bool) -> None:
        self._record("estop", msg)
        if self.safety is not None:
            self.safety.estop(bool(msg.data))
            if msg.data:
                self.get_logger().warning("e-stop engaged (latched until re-activation)")

    # -------------------------------------------------------------------------------------------- control loop
    def _input_step(self) -> None:
        """``trigger: input``: step now, unless a step already ran in this control period (decimation).

        Steps are scheduled on a grid of the period: an input arriving up to half a period before its slot takes
        it, so inputs at the control rate step every time (jitter below half a period) and faster inputs step once
        per period."""
        if self._timer is None or not self._on_input:
            return
        now = self._now()
        if now >= self._due - 0.5 * self._period:
            self._due += self._period
            if self._due < now + 0.5 * self._period:  # the first step, or the loop fell behind: a new grid
                self._due = now + self._period
            self._tick()

    def _fallback(self) -> None:
        """``trigger: input``: the inputs have been silent for 1.5 periods: step on the timer (see the module
        docstring)."""
        now = self._now()
        if self._last_tick is None or now - self._last_tick > 1.5 * self._period:
            self._due = now + self._period
            self._tick()

    def _tick(self) -> None:
        assert self.policy is not None and self.safety is not None
        now = self._now()
        if self._last_tick is not None:
            self._periods.append(now - self._last_tick)
        self._last_tick = now
        command = None
        if self._signals is not None:
            t0 = time.perf_counter()
            try:
                signals = {**self._signals, "last_action": self.policy.normalized_action(self._last_action)}
                if self._cameras:
                    command = self.policy(signals, {c: self._images[c] for c in self._cameras})[0]  # type: ignore[call-arg]
                else:
                    command = self.policy(signals)[0]
            except ContractError as exc:
                self.get_logger().error(f"policy step refused: {exc}", throttle_duration_sec=1.0)
            self._infer_s.append(time.perf_counter() - t0)
        step = self.safety.step(now, command)
        if step.fault != self.fault:
            self._record("fault", String(data=step.fault))
        self.fault = step.fault
        out = step.command
        if (
            self.manipulator
            and getattr(self, "tank", None) is not None
            and self._signals is not None
            and not step.fault
        ):
            out = self._passivity(out)
        self._last_action = out[None]
        msg = Float64MultiArray()
        msg.data = [float(v) for v in out]
        if self._pub is not None:
            self._pub.publish(msg)
            self.published += 1
            if self._odom_at >= 0:
                self.input_age_s.append(self._now() - self._odom_at)
            self._record("command", msg)

    def _passivity(self, command: np.ndarray) -> np.ndarray:
        """Scale the command through the energy tank (set-point jumps for position, torques for torque)."""
        assert self._signals is not None and self.policy is not None
        c = self.policy.contract
        q = self._signals["joint_pos"][0].astype(np.float64)
        dq = self._signals["joint_vel"][0].astype(np.float64)
        n = len(q)
        out = command.astype(np.float64).copy()
        if c.action.kind == "position":
            previous = self._setpoint if self._setpoint is not None else q
            tank_step = self.tank.setpoint(out[:n], previous, q, dq, self._stiffness, self._period)
            out[:n] = tank_step.command
            self._setpoint = out[:n].copy()
        else:
            tank_step = self.tank.torque(out[:n], q, dq, self._period)
            out[:n] = tank_step.command
        self.tank_state = (tank_step.tank, tank_step.alpha, tank_step.injected, tank_step.harvested)
        self._record("tank", Float64MultiArray(data=[float(v) for v in self.tank_state]))
        return out.astype(np.float32)

    def _diagnostics(self) -> None:
        if self._diag is None:
            return
        periods, infer = self._periods[-500:], self._infer_s[-500:]
        values = {
            "fault": self.fault or "none",
            "loop_period_mean_ms": f"{1e3 * float(np.mean(periods)) if periods else 0.0:.3f}",
            "loop_period_max_ms": f"{1e3 * float(np.max(periods)) if periods else 0.0:.3f}",
            "inference_mean_ms": f"{1e3 * float(np.mean(infer)) if infer else 0.0:.3f}",
            "rejected_messages": str(self.rejected),
            "published_commands": str(self.published),
        }
        if self._image_at:
            age = self._now() - min(self._image_at.values())
            values["oldest_image_age_ms"] = f"{1e3 * age:.1f}"
        if self.tank_state is not None:
            tank, alpha, injected, _ = self.tank_state
            values.update({"tank_j": f"{tank:.4f}", "tank_alpha": f"{alpha:.3f}", "tank_injected_j": f"{injected:.5f}"})
        status = DiagnosticStatus(
            level=DiagnosticStatus.OK if not self.fault else DiagnosticStatus.ERROR,
            name=self.get_fully_qualified_name(),
            message=self.fault or "running",
            values=[KeyValue(key=k, value=v) for k, v in values.items()],
        )
        out = DiagnosticArray(status=[status])
        out.header.stamp = self.get_clock().now().to_msg()
        self._diag.publish(out)


def main(args: list[str] | None = None) -> None:
    """Console script: run the node until Ctrl-C (drive its lifecycle with ``ros2 lifecycle`` or a launch file)."""
    spin_node(PolicyNode, args)


def _read_yaml(path: str) -> Any:
    """A robot description file's contents (refused by name when missing or malformed)."""
    import yaml

    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise ContractError(f"robot_description '{path}' could not be read: {exc}") from None
