"""A recording played back: what the policy node had at each control step, rebuilt offline.

:func:`walk` turns a recording (``robot_rl_ros.recording``) into control steps. Each recorded ``/command`` is one
step; its inputs are the newest recorded messages before it, read as the node read them (``robot_rl_ros.messages``;
the node records only the messages it accepted, so one that does not read is damage and refused as corrupt):

- multirotors (``rpm``): odometry with the hover point (``/target``) and the velocity setpoint (``/target_velocity``,
  applied to odometry stamped within the recorded timeout), as :class:`~robot_rl_ros.inputs.OdometryInputs`;
- manipulators (``position`` / ``torque``): joint states, the tool, goal and object poses, each camera's newest image
  and the operator's instruction, as :class:`~robot_rl_ros.inputs.ArmInputs` (:class:`~robot_rl_ros.inputs.ArmLayout`);
- legged robots (``position`` commands from an IMU): joint states, the newest IMU message and the velocity command
  (zero once older than the recorded ``cmd_vel_timeout_s``, measured in log time), as
  :class:`~robot_rl_ros.inputs.LeggedInputs`. A velocity command moves the robot like a multirotor's setpoint; it is
  not a new task.

A step taken under a fault (the safety layer, not the policy, chose its command) or before every input had arrived
carries no signals. The node records its fault at each activation (``waiting for input``: histories restart) and
whenever it changes, so a step after a recorded fault message is marked ``restarted``; one after an operator's new
goal pose or instruction (each sent when it changes) is marked ``new_task``. A fault latches until the node is
activated again, which forgets its inputs, so the walker forgets them at each fault message too (the node's steps
after one all come after such an activation).

:func:`replay` (``robot-rl replay``) re-runs a multirotor policy (``policies.runtime.OnnxPolicy``, numpy +
onnxruntime) on each step's signals, with the previously recorded command as ``last_action``, and compares its
command with the recorded one. ``robot_rl.imitation.from_recording`` writes the steps into a dataset.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from robot_rl_ros.inputs import ArmLayout, camera_topics, command_ranges
from robot_rl_ros.messages import (
    MessageError,
    header_ns,
    image_signals,
    imu_signals,
    joint_state_signals,
    odometry_signals,
    position_signal,
    velocity_at,
    velocity_command,
)
from robot_rl_ros.recording import Log, RecordingError, read_command_timeout, read_log, read_metadata, recorded_command

from policies.runtime import ContractError, OnnxPolicy, open_policy
from policies.runtime.contract import Contract
from policies.runtime.text import check_instruction, printable


@dataclass
class Step:
    """One recorded control step.

    Attributes:
        t_ns: Log time of its command, ns (the node's clock: monotonic, or the simulated time with
            ``use_sim_time``).
        command: The published command ``[1, A]`` float32, the contract's units.
        signals: The contract's signals the node computed it from, ``{source: [1, size]}`` (``last_action`` not
            included), or ``None``: a fault held the command, or an input had not arrived yet.
        images: Camera -> the newest image before the command, RGB ``uint8 [1, H, W, 3]`` (manipulators with cameras).
        instruction: The instruction the policy followed (language policies), else ``None``.
        fault: The node's fault at the step (``""``: none).
        restarted: A fault message (a fault, its end, or an activation) came since the previous step: the policy's
            histories may have restarted.
        new_task: An operator's goal pose or instruction (sent when it changes) came since the previous step.
    """

    t_ns: int
    command: np.ndarray
    signals: dict[str, np.ndarray] | None
    images: dict[str, np.ndarray] = field(default_factory=dict)
    instruction: str | None = None
    fault: str = ""
    restarted: bool = False
    new_task: bool = False


class _Odometry:
    """A multirotor's inputs: odometry, the hover point and the velocity setpoint (see the module docstring)."""

    def __init__(self, target: list[float], timeout_s: float) -> None:
        self.target, self.timeout_s = target, timeout_s
        self.velocity: np.ndarray | None = None
        self.velocity_ns = 0
        self.signals: dict[str, np.ndarray] | None = None
        self.images: dict[str, np.ndarray] = {}
        self.instruction: str | None = None
        self.new_task = False  # a hover point that moves is a setpoint, not a new task

    def reset(self) -> None:
        """Forget the velocity setpoint, as the node does at activation (the hover point stays)."""
        self.velocity, self.velocity_ns, self.signals = None, 0, None

    def read(self, topic: str, msg: Any, t_ns: int) -> None:
        if topic == "/odom":
            moving = velocity_at(self.velocity, self.velocity_ns, header_ns(msg.header), self.timeout_s)
            self.signals = odometry_signals(msg, self.target, moving)
        elif topic == "/target":
            self.target = [msg.point.x, msg.point.y, msg.point.z]
        elif topic == "/target_velocity":  # recorded only once the node accepted it
            self.velocity = np.asarray([msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z], np.float64)
            self.velocity_ns = header_ns(msg.header)


class _Arm:
    """A manipulator's inputs: joint states, poses, images and the instruction (see the module docstring)."""

    def __init__(self, contract: Contract) -> None:
        self.layout = ArmLayout.of(contract)
        self.cameras = {name: (h, w) for name, (h, w, _) in camera_topics(contract, []).items()}
        self.parts: dict[str, dict[str, np.ndarray]] = {}
        self.objects: dict[str, np.ndarray] = {}
        self.images: dict[str, np.ndarray] = {}
        self.instruction: str | None = None
        self.signals: dict[str, np.ndarray] | None = None
        self.new_task = False

    def reset(self) -> None:
        """Forget every input but the instruction, as the node does at activation."""
        self.parts, self.objects, self.images, self.signals = {}, {}, {}, None

    def read(self, topic: str, msg: Any, t_ns: int) -> None:
        kind = topic[1:]
        if kind == "joint_states":  # the node merges the newest of every input on each joint state
            self.parts["joints"] = joint_state_signals(msg, self.layout.joints, self.layout.finger)
            ready = self.layout.needed <= set(self.parts) and set(self.images) == set(self.cameras)
            if ready and (self.instruction is not None or not self.layout.language):
                self.signals = {k: v for part in self.parts.values() for k, v in part.items()}
        elif kind in ("tcp", "goal", "object") and kind in self.layout.needed:
            self.parts[kind] = self.layout.pose(kind, msg)
            self.new_task |= kind == "goal"
        elif kind.startswith("object_pose/") and kind[len("object_pose/") :] in self.layout.objects:
            name = kind[len("object_pose/") :]
            self.objects[name] = position_signal(msg, name)[name][0]
            if len(self.objects) == len(self.layout.objects):
                self.parts["objects"] = self.layout.objects_part(self.objects)
        elif kind.endswith("/image_raw") and kind[: -len("/image_raw")] in self.cameras:
            camera = kind[: -len("/image_raw")]
            if isinstance(msg.data, list):  # the MCAP decoder may give a byte array as a list of ints
                msg.data = bytes(msg.data)
            self.images[camera] = image_signals(msg, *self.cameras[camera])
        elif kind == "instruction" and self.layout.language:  # the node accepted only instruction text
            self.instruction = check_instruction(msg.data, "the instruction")
            self.new_task = True


class _Legged:
    """A legged robot's inputs: joint states, the IMU and the velocity command (see the module docstring)."""

    def __init__(self, contract: Contract, command_timeout_s: float) -> None:
        self.joints = list(contract.action.names)
        self.default = np.asarray(contract.action.offset, dtype=np.float64)
        self.ranges = command_ranges(contract)
        self.timeout_ns = command_timeout_s * 1e9
        self.images: dict[str, np.ndarray] = {}
        self.instruction: str | None = None
        self.new_task = False  # a velocity command is a setpoint, not a new task
        self.reset()

    def reset(self) -> None:
        """Forget every input, as the node does at activation (the robot stands until a new command)."""
        self.imu: dict[str, np.ndarray] | None = None
        self.command = np.zeros((1, 3), dtype=np.float32)
        self.command_ns = -np.inf
        self.signals: dict[str, np.ndarray] | None = None

    def read(self, topic: str, msg: Any, t_ns: int) -> None:
        if topic == "/imu":
            self.imu = imu_signals(msg)
        elif topic == "/cmd_vel":  # recorded only once the node accepted it (within the training envelope)
            self.command, self.command_ns = velocity_command(msg, self.ranges), t_ns
        elif topic == "/joint_states" and self.imu is not None:  # the node merges on each joint state
            part = joint_state_signals(msg, self.joints)
            fresh = t_ns - self.command_ns <= self.timeout_ns
            command = self.command if fresh else np.zeros_like(self.command)
            rel = (part["joint_pos"][0].astype(np.float64) - self.default).astype(np.float32)[None]
            self.signals = {**part, **self.imu, "joint_pos_rel": rel, "velocity_command": command}


def open_recorded_policy(path: Path, log: Log, model: Path | None = None) -> OnnxPolicy:
    """The policy a recording ran (or ``model``), at the recorded control period.

    Raises:
        RecordingError: The metadata is corrupt, or the model cannot be opened (named).
    """
    period, _, _ = read_metadata(path, log.meta)
    where = model or Path(log.meta["model_path"])
    try:
        return open_policy(where, control_period_s=period)
    except FileNotFoundError:
        raise RecordingError(
            f"recording '{path}' ran '{printable(str(where))}', which does not exist here; pass the policy file "
            "with --model"
        ) from None
    except (ContractError, ValueError) as exc:
        raise RecordingError(f"recording '{path}': its policy '{printable(str(where))}': {printable(exc)}") from None


def walk(path: Path, log: Log, contract: Contract) -> Iterator[Step]:
    """The recorded control steps in log order (see the module docstring).

    Raises:
        RecordingError: The recording's metadata or a recorded input or command is malformed (named with its topic
            and time).
    """
    _, target, timeout = read_metadata(path, log.meta)
    kind = contract.action.kind
    legged = kind == "position" and "projected_gravity" in {t.source for t in contract.observation}
    command_timeout = read_command_timeout(path, log.meta) if legged else math.inf
    inputs: _Odometry | _Arm | _Legged
    try:
        if kind == "rpm":
            inputs = _Odometry(target, timeout)
        elif legged:
            inputs = _Legged(contract, command_timeout)
        elif kind in ("position", "torque"):
            inputs = _Arm(contract)
        else:
            raise ContractError(f"action kind '{printable(kind)}' is not one the policy node runs")
    except (ContractError, ValueError) as exc:
        raise RecordingError(f"recording '{path}' is corrupt: its contract: {printable(exc)}") from None
    messages = sorted(log.messages, key=lambda m: m[0])
    t0 = messages[0][0] if messages else 0
    fault, restarted = "", False
    for t_ns, topic, msg in messages:
        if topic == "/fault":
            fault, restarted = str(msg.data), True
            if fault:  # latched until an activation, which forgets the inputs
                inputs.reset()
        elif topic == "/command":
            command = recorded_command(path, msg, contract, t_ns, t0)[None]
            signals = None if fault else inputs.signals
            yield Step(
                t_ns, command, signals, dict(inputs.images), inputs.instruction, fault, restarted, inputs.new_task
            )
            restarted = inputs.new_task = False
        else:
            try:
                inputs.read(topic, msg, t_ns)
            except (MessageError, AttributeError, TypeError, ValueError) as exc:
                raise RecordingError(
                    f"recording '{path}' is corrupt: the {topic} message at {(t_ns - t0) * 1e-9:.3f} s: "
                    f"{printable(exc)}"
                ) from None


@dataclass
class ReplayResult:
    """How the offline re-run compares with the recorded commands.

    Attributes:
        steps: Recorded control steps compared.
        skipped: Steps under a fault (chosen by the safety layer), not compared.
        max_divergence: Largest ``|recorded - replayed|`` in normalised command units.
        messages: Messages read.
        complete: Whether the file was finished; ``False``: it was cut short (SIGKILL, power cut) and read as far
            as its last whole chunk.
        duration_s: Log time from the first to the last message read, s.
    """

    steps: int
    skipped: int
    max_divergence: float
    messages: int
    complete: bool = True
    duration_s: float = 0.0

    def line(self, path: Path) -> str:
        """One summary line."""
        cut = "" if self.complete else (
            f"; the file was not finished (the recording process was killed?): read up to {self.duration_s:.2f} s, "
            "its last flushed chunk"
        )  # fmt: skip
        return (
            f"{path}: {self.messages} messages over {self.duration_s:.2f} s, {self.steps} control steps replayed, "
            f"{self.skipped} under a fault skipped; max divergence {self.max_divergence:.3g} (normalised command "
            f"units){cut}"
        )


def replay(path: Path, model: Path | None = None) -> ReplayResult:
    """Re-run the recorded policy (or ``model``) on the recorded inputs; see the module docstring.

    Raises:
        RecordingError: The file is missing, not a robot-rl recording, not a multirotor's, or corrupt (named).
    """
    log = read_log(path)
    policy = open_recorded_policy(path, log, model)
    if policy.contract.action.kind != "rpm":
        raise RecordingError(
            f"replay re-runs multirotor recordings (odometry in, rotor speeds out); '{path}' is a run of a "
            f"'{policy.contract.action.kind}' policy: its inputs open in Foxglove or the MCAP reader, and "
            "`robot-rl dataset from-mcap` turns it into a dataset"
        )
    prev = np.asarray(policy.contract.action.offset, dtype=np.float32)[None]
    steps = skipped = 0
    worst = 0.0
    for step in walk(path, log, policy.contract):
        if step.signals is None:
            skipped += 1
        else:
            replayed = policy({**step.signals, "last_action": policy.normalized_action(prev)})
            diff = np.abs(replayed - step.command) / np.asarray(policy.contract.action.scale, dtype=np.float32)
            worst = max(worst, float(diff.max()))
            steps += 1
        prev = step.command
    duration = (log.messages[-1][0] - log.messages[0][0]) * 1e-9 if log.messages else 0.0
    return ReplayResult(steps, skipped, worst, len(log.messages), log.complete, duration)
