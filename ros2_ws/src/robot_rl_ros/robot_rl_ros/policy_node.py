"""``policy_node``: a lifecycle node that runs an exported robot-rl policy behind the safety layer.

Lifecycle (``ros2 lifecycle set /policy_node configure`` ...):

- **configure** loads the ONNX file, checks its contract against the parameters (task, actuator names, the robot
  description), runs the policy's self-test and a warm-up inference, and creates the inputs the contract reads
  (:mod:`robot_rl_ros.inputs`: odometry for multirotors, joint states, poses and images for manipulators, joint
  states, the IMU and a velocity command for legged robots) and the command publisher (:mod:`robot_rl_ros.commands`;
  with ``gains_topic``, the latched gains). Any mismatch or a corrupt file is refused (the transition fails with a
  logged error naming it; the node stays unconfigured).
- **activate** resets the observation histories and starts the control timer at the contract's control period
  (``control_rate_hz`` overrides it: integral observation terms, the rate limit and the energy tank then work with
  that period). Nothing is published until the first fresh input after activation arrives: then the watchdog arms
  and the fade-in starts (a robot activated before its sensors flow is not sent a blind command).
- **deactivate** stops the timer; **cleanup** releases the policy and the communication objects.

**Faults.** The safety layer latches a fault on a stale input (watchdog), an e-stop, a non-finite command, or any
exception inside a control step (the policy, the energy tank, the safety layer itself). From then on every period
sends the safe command, and the node moves itself to **inactive**, so ``ros2 lifecycle get /policy_node`` shows
it; the safe command keeps going out while it is inactive. ``activate`` clears the fault (unless the e-stop is still
engaged) and waits for fresh input again.

Every period: the newest accepted inputs -> ``OnnxPolicy`` (``ChunkedOnnxPolicy`` for action-chunk policies) ->
``SafetyLayer`` (watchdog, latched e-stop and faults, fade-in, limits) -> for joint commands the passivity filter
(energy tank) -> the command publisher.

When a step runs (``trigger``): ``timer``: on the node's own timer, from the newest inputs. ``input``: as soon as a
new odometry message (multirotors) or joint state (manipulators, legged robots) is accepted, at most once per control
period (faster inputs are decimated on a grid of the period). Each input is stepped on at most once: one that comes
too early for its slot is stepped at the slot by the node's timer (unless a newer one took its place), and with no
new input the node sends nothing until the watchdog trips, then the safe command (the robot holds the last command
meanwhile; its own timeout is longer: docs/ros2.md, "When a step runs").

A message with NaN, a value beyond float32, a wrong length, a duplicate or missing joint, a stale or future stamp,
the wrong frame or a twist in the world frame is rejected with a logged error and counted; it never feeds the
watchdog, and the node keeps running. Diagnostics (``diagnostic_msgs/DiagnosticArray`` on ``/diagnostics``, 2 Hz):
loop period, inference time, fault, rejected messages, and for joint commands the tank's energy, ``alpha`` and the
energy injected. Parameters: :data:`robot_rl_ros.params.POLICY_NODE`.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from lifecycle_msgs.msg import State as StateMsg
from rclpy.clock import ROSClock
from rclpy.exceptions import ParameterUninitializedException
from rclpy.lifecycle import Node, State, TransitionCallbackReturn
from robot_rl_ros.commands import CommandPublisher, gains_message
from robot_rl_ros.inputs import LATCHED, ArmInputs, Inputs, make_inputs
from robot_rl_ros.params import POLICY_NODE, ParamError, declare
from robot_rl_ros.spin import spin_node
from std_msgs.msg import Bool, Float64MultiArray, String

from policies.runtime import ContractError, OnnxPolicy, open_policy
from policies.runtime.contract import MAX_CONTROL_RATE_HZ
from policies.runtime.passivity import EnergyTank, TankParams, impedance_stiffness
from policies.runtime.realtime import MODES, RealTime
from policies.runtime.robot_check import check_robot
from policies.runtime.safety import SafetyConfig, SafetyLayer
from policies.runtime.text import printable

ESTOP_QOS = LATCHED
MAX_ONNX_THREADS = 64
"""Largest ``onnx_threads`` accepted (a typo such as 1000 would oversubscribe the robot's computer)."""
PARAMETERS = POLICY_NODE
"""Declared parameters (:data:`robot_rl_ros.params.POLICY_NODE`)."""


class PolicyNode(Node):
    """See the module docstring.

    Raises:
        ParamError: A parameter is unknown or of the wrong type (before anything is declared).
    """

    def __init__(self, name: str = "policy_node", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        declare(self, POLICY_NODE)
        self.policy: OnnxPolicy | None = None
        self.safety: SafetyLayer | None = None
        self.inputs: Inputs | None = None
        self.out: CommandPublisher | None = None
        self.rejected = 0
        self.published = 0
        self.received = 0
        self.fault = "unconfigured"
        self.recorder: Any = None  # robot_rl_ros.recording.Recorder, set by robot-rl deploy --record
        self.tank: EnergyTank | None = None
        self.tank_state: tuple[float, float, float, float] | None = None
        self.input_age_s: list[float] = []  # per command: the newest input's age when it went out
        self._signals: dict[str, np.ndarray] | None = None
        self._stiffness = np.zeros(0)
        self._timer: Any = None
        self._diag: Any = None
        self._diag_timer: Any = None
        self._estop_sub: Any = None
        self._gains: Any = None
        self._periods: list[float] = []
        self._infer_s: list[float] = []
        self._last_tick: float | None = None
        self._input_at = -1.0
        self._running = False  # a fresh input arrived since activation: the loop publishes
        self._on_input = False

    def p(self, key: str) -> Any:
        """A parameter's value (``None`` for one declared without a value and never set)."""
        try:
            return self.get_parameter(key).value
        except ParameterUninitializedException:
            return None

    def now(self) -> float:
        """The loop's clock, s (:meth:`now_ns`)."""
        return self.now_ns() * 1e-9

    def now_ns(self) -> int:
        """The loop's clock, ns: with ``use_sim_time`` the ROS clock, i.e. the simulator's ``/clock`` (the watchdog,
        the fade-in, the rate limit and a recording's log time then follow simulated time: a simulation that runs
        slower than real time, or waits in lockstep, is not taken for a late sensor); otherwise the monotonic clock."""
        clock = self.get_clock()
        if isinstance(clock, ROSClock) and clock.ros_time_is_active:
            return int(clock.now().nanoseconds)
        return time.monotonic_ns()

    # ------------------------------------------------------------------------------------------------ lifecycle
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        """Load and verify the policy; create inputs, the command publisher and the e-stop subscription."""
        try:
            policy = self._load_policy()
            self.inputs = make_inputs(self, policy, self._accept, self._reject)
            joints = self.inputs.tank_joints
            trained = policy.contract.filter.get("trained_with_tank_j")
            if trained is not None and not self.p("passivity"):
                raise ContractError(
                    f"the policy was trained behind a {trained:g} J energy tank (contract filter.trained_with_tank_j) "
                    "and commands set-point jumps only the tank makes gentle; keep passivity:=true"
                )
            self.tank = self._make_tank(policy, joints) if joints and self.p("passivity") else None
            a = policy.contract.action
            safe = tuple(self.p("safe_command")) if self.p("safe_mode") == "command" else ()
            max_rate = float(self.p("max_rate"))
            cfg = SafetyConfig(
                tuple(a.low), tuple(a.high), (max_rate,) * a.size, float(self.p("watchdog_s")),
                float(self.p("fade_in_s")), self.p("safe_mode"), safe,
            )  # fmt: skip
            self.safety = SafetyLayer(cfg, policy.control_period_s, np.asarray(a.offset, dtype=np.float32))
            self.out = CommandPublisher(
                self, self.p("command_topic"), policy.contract, self.p("command_type"), self.p("command_reliability")
            )
            if self.p("gains_topic"):
                gains = gains_message(policy.contract)
                self._gains = self.create_publisher(Float64MultiArray, self.p("gains_topic"), LATCHED)
                self._gains.publish(gains)
        except (FileNotFoundError, ContractError, ValueError, RuntimeError) as exc:
            self.get_logger().error(f"configure refused: {printable(exc)}")
            self._release()
            return TransitionCallbackReturn.FAILURE
        self.policy = policy
        self._diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(0.5, self._diagnostics)
        self._estop_sub = self.create_subscription(Bool, self.p("estop_topic"), self._on_estop, LATCHED)
        self.fault = "inactive"
        c = policy.contract
        self.get_logger().info(f"configured: task '{c.task}', {c.obs_dim} inputs, {a.size} {a.kind} commands")
        return TransitionCallbackReturn.SUCCESS

    def _load_policy(self) -> OnnxPolicy:
        rate = float(self.p("control_rate_hz"))
        if not (math.isfinite(rate) and 0 <= rate <= MAX_CONTROL_RATE_HZ):
            raise ValueError(
                f"parameter control_rate_hz is {rate}; expected Hz in (0, {MAX_CONTROL_RATE_HZ:g}], or 0 for the "
                "contract's rate"
            )
        if self.p("trigger") not in ("timer", "input"):
            raise ValueError(f"parameter trigger is '{self.p('trigger')}'; expected 'timer' or 'input'")
        threads, chunking = self.p("onnx_threads"), self.p("chunking")
        if not 1 <= threads <= MAX_ONNX_THREADS:
            raise ValueError(f"parameter onnx_threads is {threads}; expected 1..{MAX_ONNX_THREADS}")
        if chunking not in ("", *MODES):
            raise ValueError(f"parameter chunking is '{printable(chunking)}'; expected '', {', '.join(MODES)}")
        # chunk policies plan inside the period (or on a thread); integral terms integrate over the node's period
        runner: dict[str, Any] = {"control_period_s": 1.0 / rate if rate > 0 else None, "intra_op_threads": threads}
        if chunking:  # open_policy refuses it for a policy that plans no chunks
            runner["timing"] = RealTime(chunking, 1, threaded=True)
        policy = open_policy(self.p("model_path"), **runner)
        c = policy.contract
        if self.p("expected_task") and c.task != self.p("expected_task"):
            raise ContractError(f"the model is for task '{c.task}', the parameters expect '{self.p('expected_task')}'")
        expected = [a for a in self.p("expected_actuators") if a]
        if expected and expected != list(c.action.names):
            raise ContractError(f"the model commands {list(c.action.names)}, the parameters expect {expected}")
        if self.p("robot_description"):  # the integrator's facts about the real machine (robot_check.py)
            check_robot(c, _read_yaml(self.p("robot_description")), policy.control_period_s)
        policy.self_test()
        cameras = c.chunk is not None and c.chunk.cameras
        grey = [policy.grey_images(1)] if cameras else []  # type: ignore[attr-defined]
        if not (c.chunk is not None and c.chunk.language):  # a language policy's self-test planned with each
            policy.run_obs(np.zeros((1, policy.obs_dim), dtype=np.float32), *grey)  # instruction: its warm-up
        return policy

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        """Reset the histories and start the control timer; the loop publishes once a fresh input arrives."""
        assert self.policy is not None and self.safety is not None and self.inputs is not None
        self._stop_timer()
        self.policy.reset()
        self.inputs.reset()
        self._signals, self._running = None, False
        self._pending = False  # an accepted input not stepped on yet (``trigger: input``)
        self.safety.activate(self.now())  # clears a latched fault (not an engaged e-stop)
        self.fault = self.safety.fault or "waiting for input"
        self.record("fault", String(data=self.fault))  # a recording shows each activation (histories restart)
        self._last_action = np.asarray(self.policy.contract.action.offset, dtype=np.float32)[None]
        self._setpoint: np.ndarray | None = None  # joint commands: the set-points in force (position kind)
        if self.tank is not None:
            self.tank.reset()
        period = self.policy.control_period_s  # the contract's, or 1 / control_rate_hz
        self._period, self._due, self._last_tick = period, float("-inf"), None
        self._on_input = self.p("trigger") == "input"
        self._timer = self.create_timer(period, self._fallback if self._on_input else self._tick)
        return super().on_activate(state)

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        """Stop the control timer, unless a fault brought the node here: then the safe command keeps going out."""
        if not (self.safety is not None and self.safety.fault and self._running):
            self._stop_timer()
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        """Release the policy and every communication object."""
        self._stop_timer()
        self._release()
        self.policy, self.safety, self.fault = None, None, "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        """Stop everything (the node is going away)."""
        self._stop_timer()
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None

    def _release(self) -> None:
        executor = getattr(self.policy, "executor", None)  # a chunk policy's planner thread
        if executor is not None:
            executor.close()
        if self.inputs is not None:
            for sub in self.inputs.subscriptions:
                self.destroy_subscription(sub)
            self.inputs = None
        if self.out is not None:
            self.out.destroy()
            self.out = None
        for timer in (self._diag_timer,):
            if timer is not None:
                self.destroy_timer(timer)
        if self._diag is not None:
            self.destroy_publisher(self._diag)
        if self._estop_sub is not None:
            self.destroy_subscription(self._estop_sub)
        if self._gains is not None:
            self.destroy_publisher(self._gains)
        self._diag_timer = self._diag = self._estop_sub = self._gains = None

    def _make_tank(self, policy: OnnxPolicy, n: int) -> EnergyTank:
        """The energy tank of the first ``n`` commands from the contract's ``filter`` section, ``tank_*`` parameters
        overriding; position commands also need the impedance stiffness (``extra.impedance.stiffness_nm_per_rad``)
        to price a jump."""
        c = policy.contract
        section = dict(c.filter)
        for key in ("tank_init_j", "tank_min_j", "tank_max_j", "tank_margin_j", "tank_power_w"):
            if float(self.p(key)) >= 0:
                section[key] = float(self.p(key))
        if c.action.kind == "position":
            self._stiffness = impedance_stiffness(c, n)
        return EnergyTank(TankParams.from_contract(section), n)

    # ------------------------------------------------------------------------------------------------- inputs
    def _accept(self, signals: dict[str, np.ndarray], kind: str, msg: Any) -> None:
        """A complete, valid set of inputs arrived (:mod:`robot_rl_ros.inputs`): it feeds the watchdog and, with
        ``trigger: input``, starts a step."""
        self._signals = signals
        self._input_at = self.now()
        self.received += 1
        if kind:
            self.record(kind, msg)
        if self.safety is None or self._timer is None:
            return
        if not self._running and self._state_machine.current_state[0] == StateMsg.PRIMARY_STATE_ACTIVE:
            self._running = True  # the first fresh input after activation: the watchdog arms, the fade-in starts
            self.safety.activate(self._input_at)
            if not self.safety.fault:
                self.fault = ""
                self.record("fault", String(data=""))
        self.safety.input_received(self._input_at)
        self._pending = True
        if self._on_input:
            self._input_step()

    def _reject(self, what: str, exc: Exception) -> None:
        self.rejected += 1
        self.get_logger().error(f"{what} rejected: {printable(exc)}", throttle_duration_sec=1.0)

    def record(self, kind: str, msg: Any) -> None:
        """Log ``msg`` on topic ``/<kind>`` of the recording, if one is being made."""
        if self.recorder is not None:
            self.recorder.write(kind, msg, self.now_ns())

    def _on_estop(self, msg: Bool) -> None:
        self.record("estop", msg)
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
        now = self.now()
        if self._due - now > 1.5 * self._period:  # the clock went back (a simulator restarted its /clock): the
            self._due = float("-inf")  # step runs, and latches the fault (_tick)
        if now >= self._due - 0.5 * self._period:
            self._due += self._period
            if self._due < now + 0.5 * self._period:  # the first step, or the loop fell behind: a new grid
                self._due = now + self._period
            self._tick()

    def _fallback(self) -> None:
        """``trigger: input``, each period of the node's timer: the input that came too early for its slot is
        stepped on now that the slot has come; with none new, nothing is sent until the watchdog trips or while a
        fault holds (then the safe command).

        A step on an input already stepped on would feed the policy an observation that time passed and the sample
        did not (not one it saw in training) and integrate its integral terms twice; in a lockstep simulation it
        also answered one sample twice, so the robot ran a period behind its controller from then on."""
        assert self.safety is not None
        if self._pending:
            self._input_step()
        elif self._running and (self.safety.fault or self.safety.stale(self.now())):
            self._tick()

    def _tick(self) -> None:
        """One control period; any exception inside latches a fault and the safe command goes out instead."""
        if not self._running or self.safety is None or self.out is None:
            return  # activated, waiting for the first fresh input: nothing is sent blind
        now = self.now()
        self._pending = False
        went_back = self._last_tick is not None and now < self._last_tick
        if self._last_tick is not None and not went_back:
            self._periods.append(now - self._last_tick)
        try:
            if went_back:  # the watchdog, fade-in and rate limit would measure negative ages: hold the robot
                assert self._last_tick is not None
                self.safety.latch(
                    f"the node's clock went back {self._last_tick - now:.3f} s (use_sim_time: did the simulator "
                    "restart its /clock?)"
                )
            self._last_tick = now
            out, fault = self._control(now)
        except Exception as exc:  # the policy, the tank or the safety layer broke: latch, send the safe command
            fault = f"internal error in the control step ({type(exc).__name__}: {printable(exc)})"
            self.get_logger().error(fault, throttle_duration_sec=1.0)
            out = self._safe_command(fault)
        if fault != self.fault:
            self.record("fault", String(data=fault))
            newly = bool(fault) and not self.fault
            self.fault = fault
            if newly:
                self.get_logger().error(f"fault latched: {fault}; safe command until re-activation")
        self._last_action = out[None]
        msg = self.out.publish(out)
        self.published += 1
        if self._input_at >= 0:
            self.input_age_s.append(self.now() - self._input_at)
        self.record("command", msg)
        if self.fault and self._state_machine.current_state[0] == StateMsg.PRIMARY_STATE_ACTIVE:
            self.trigger_deactivate()  # shows the fault in the lifecycle; the safe command keeps going out

    def _control(self, now: float) -> tuple[np.ndarray, str]:
        """Policy -> safety layer -> energy tank: the command ``[A]`` and the fault after this period."""
        assert self.policy is not None and self.safety is not None
        command = None
        if self._signals is not None and not self.safety.fault:
            t0 = time.perf_counter()
            signals = {**self._signals, "last_action": self.policy.normalized_action(self._last_action)}
            if isinstance(self.inputs, ArmInputs) and self.inputs.cameras:
                command = self.policy(signals, dict(self.inputs.images))[0]  # type: ignore[call-arg]
            else:
                command = self.policy(signals)[0]
            self._infer_s.append(time.perf_counter() - t0)
        step = self.safety.step(now, command)
        out = step.command
        if self.tank is not None and self._signals is not None and not step.fault:
            out = self._passivity(out)
            self.safety.sent(out)  # a fault holds, and the rate limit starts from, what the tank let through
        if not np.isfinite(out).all():
            raise RuntimeError("the command after the safety layer is not finite")
        return out, step.fault

    def _safe_command(self, reason: str) -> np.ndarray:
        """The safe command after an exception in the control step (the fault latched with ``reason``)."""
        assert self.safety is not None
        try:
            self.safety.latch(reason)
            return self.safety.step(self.now(), None).command
        except Exception:  # the safety layer itself is broken: its configured safe command, computed here
            cfg = self.safety.cfg
            value = np.zeros(len(cfg.low)) if cfg.safe_mode != "command" else np.asarray(cfg.safe_command)
            if cfg.safe_mode == "hold":
                value = self._last_action[0]
            return np.clip(np.asarray(value, dtype=np.float32), cfg.low, cfg.high).astype(np.float32)

    def _passivity(self, command: np.ndarray) -> np.ndarray:
        """Scale the command through the energy tank (set-point jumps for position, torque for torque)."""
        assert self._signals is not None and self.policy is not None and self.tank is not None
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
        self.record("tank", Float64MultiArray(data=[float(v) for v in self.tank_state]))
        return out.astype(np.float32)

    def _diagnostics(self) -> None:
        if self._diag is None:
            return
        periods, infer = self._periods[-500:], self._infer_s[-500:]
        values = {
            "fault": self.fault or "none",
            "lifecycle_state": self._state_machine.current_state[1],
            "loop_period_mean_ms": f"{1e3 * float(np.mean(periods)) if periods else 0.0:.3f}",
            "loop_period_max_ms": f"{1e3 * float(np.max(periods)) if periods else 0.0:.3f}",
            "inference_mean_ms": f"{1e3 * float(np.mean(infer)) if infer else 0.0:.3f}",
            "rejected_messages": str(self.rejected),
            "published_commands": str(self.published),
        }
        if isinstance(self.inputs, ArmInputs) and self.inputs.image_at:
            age = self.now() - min(self.inputs.image_at.values())
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
    from policies.runtime import yamlfile

    try:
        return yamlfile.load(path, "robot_description")
    except yamlfile.YamlFileError as exc:
        raise ContractError(str(exc)) from None


__all__ = ["ESTOP_QOS", "PARAMETERS", "ParamError", "PolicyNode", "main"]
