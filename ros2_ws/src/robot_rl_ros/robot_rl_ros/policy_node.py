"""``policy_node``: a lifecycle node that runs an exported robot-rl policy behind the safety layer.

Lifecycle (``ros2 lifecycle set /policy_node configure`` ...):

- **configure** loads the ONNX file, checks its contract against the parameters (task, actuator names), runs the
  policy's self-test and a warm-up inference, and creates publishers and subscriptions. Any mismatch or a corrupt
  file is refused (the transition fails with a logged error naming it; the node stays unconfigured).
- **activate** resets the observation histories, starts the safety layer's fade-in and the control timer at the
  contract's control period.
- **deactivate** stops the timer; **cleanup** releases the policy and the communication objects.

Every period: the newest odometry -> signals -> ``OnnxPolicy`` -> ``SafetyLayer`` (watchdog, latched e-stop and
faults, fade-in, limits) -> ``std_msgs/Float64MultiArray`` (rotor speeds in the contract's unit, motor order of the
contract). A message with NaN, a wrong length or an unknown frame is rejected with a logged error and counted; the
node keeps running. Diagnostics (``diagnostic_msgs/DiagnosticArray`` on ``/diagnostics``, 2 Hz): loop period, inference
time, fault, rejected messages.

QoS: odometry and commands are *sensor data* (best effort, keep last 1): a late sample is worth nothing, the newest
one is what counts, and the watchdog catches a silent link. The e-stop is reliable and transient-local, so a
latched ``true`` published before the node started still reaches it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rclpy.lifecycle import Node, State, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from robot_rl_ros.messages import MessageError, odometry_signals
from robot_rl_ros.spin import spin_node
from std_msgs.msg import Bool, Float64MultiArray, String

from policies.runtime import ContractError, OnnxPolicy
from policies.runtime.safety import SafetyConfig, SafetyLayer

ESTOP_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
PARAMETERS: dict[str, Any] = {
    "model_path": "",
    "expected_task": "",
    "expected_actuators": [""],
    "odom_topic": "odom",
    "command_topic": "command",
    "estop_topic": "estop",
    "watchdog_s": 0.1,
    "fade_in_s": 0.0,
    "max_rate": -1.0,
    "safe_mode": "zero",
    "safe_command": [0.0],
    "control_rate_hz": 0.0,
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

    def p(self, key: str) -> Any:
        """A parameter's value."""
        return self.get_parameter(key).value

    # ------------------------------------------------------------------------------------------------ lifecycle
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        """Load and verify the policy; create publishers and subscriptions."""
        try:
            policy = OnnxPolicy(self.p("model_path"))
            c = policy.contract
            if self.p("expected_task") and c.task != self.p("expected_task"):
                raise ContractError(
                    f"the model is for task '{c.task}', the parameters expect '{self.p('expected_task')}'"
                )
            expected = [a for a in self.p("expected_actuators") if a]
            if expected and expected != list(c.action.names):
                raise ContractError(f"the model commands {list(c.action.names)}, the parameters expect {expected}")
            if c.action.kind != "rpm":
                raise ContractError(
                    f"action kind '{c.action.kind}': this node drives multirotors (rpm commands) so far"
                )
            policy.self_test()
            policy.run_obs(np.zeros((1, policy.obs_dim), dtype=np.float32))  # warm-up
            a = c.action
            safe = tuple(self.p("safe_command")) if self.p("safe_mode") == "command" else ()
            rate = float(self.p("max_rate"))
            cfg = SafetyConfig(
                tuple(a.low), tuple(a.high), (rate,) * a.size, float(self.p("watchdog_s")), float(self.p("fade_in_s")),
                self.p("safe_mode"), safe,
            )  # fmt: skip
            self.safety = SafetyLayer(cfg, c.control_period_s, np.asarray(a.offset, dtype=np.float32))
        except (FileNotFoundError, ContractError, ValueError, RuntimeError) as exc:
            self.get_logger().error(f"configure refused: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.policy = policy
        self.target = list(c.extra.get("target_position_m", [0.0, 0.0, 0.0]))
        self._pub = self.create_lifecycle_publisher(Float64MultiArray, self.p("command_topic"), qos_profile_sensor_data)
        self._diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(0.5, self._diagnostics)
        self._subs = [
            self.create_subscription(Odometry, self.p("odom_topic"), self._on_odom, qos_profile_sensor_data),
            self.create_subscription(Bool, self.p("estop_topic"), self._on_estop, ESTOP_QOS),
        ]
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
        rate = float(self.p("control_rate_hz"))
        period = 1.0 / rate if rate > 0 else self.policy.contract.control_period_s  # 0: the contract's period
        self._timer = self.create_timer(period, self._tick)
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
                command = self.policy(signals)[0]
            except ContractError as exc:
                self.get_logger().error(f"policy step refused: {exc}", throttle_duration_sec=1.0)
            self._infer_s.append(time.perf_counter() - t0)
        step = self.safety.step(now, command)
        if step.fault != self.fault:
            self._record("fault", String(data=step.fault))
        self.fault = step.fault
        self._last_action = step.command[None]
        msg = Float64MultiArray()
        msg.data = [float(v) for v in step.command]
        if self._pub is not None:
            self._pub.publish(msg)
            self.published += 1
            if self._odom_at >= 0:
                self.input_age_s.append(self._now() - self._odom_at)
            self._record("command", msg)

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
