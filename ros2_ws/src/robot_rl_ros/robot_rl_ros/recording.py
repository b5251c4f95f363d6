"""Recording a deployed policy to MCAP (ROS 2 message encoding) and reading the recording back.

The policy node writes what *it* saw and did, in the order it happened: every input message it accepted (odometry
and hover targets; joint states, tool, goal and object poses, camera images and instructions; the IMU and velocity
commands), every e-stop message, every command it published, the energy tank's state, and every change of its fault
(``std_msgs/String``). Log times are the node's monotonic clock in nanoseconds. The file opens in Foxglove Studio or
with ``ros2 bag`` (message definitions are embedded, generated from the installed message classes). The model and
its contract are stored as MCAP metadata ``robot_rl`` (written first) so ``robot_rl_ros.playback`` can re-run exactly
that policy (``robot-rl replay``) or turn the run into a dataset (``robot-rl dataset from-mcap``).

**Crash-safe.** The file is written in place under its final name (an existing file is never replaced) as chunks,
each flushed to the operating system at least every :data:`FLUSH_INTERVAL_S` (also while nothing is written:
:meth:`Recorder.tick`), and finished (summary, index, footer) on every way out of ``robot-rl deploy``: the end of the
run, Ctrl-C, SIGTERM and exceptions. After a SIGKILL or a power cut the file holds everything up to its last flushed
chunk; :func:`read_log` reads such a file as far as it goes and says how far.

Reading trusts nothing in the file: metadata, contract and commands are checked where they are read
(:func:`read_metadata`, :func:`recorded_command`), and a malformed one is refused as corrupt, naming what and where.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mcap.exceptions import EndOfFile
from mcap.records import Channel, Message, Metadata, Schema
from mcap.stream_reader import StreamReader
from mcap_ros2.decoder import DecoderFactory
from mcap_ros2.writer import Writer
from robot_rl_ros.commands import COMMAND_TYPES, command_values

from policies.runtime import load_contract
from policies.runtime.contract import Contract
from policies.runtime.text import printable

PRIMITIVES = {"double": "float64", "float": "float32", "boolean": "bool", "octet": "byte"}
COMMAND_MESSAGES = {
    "float64_multi_array": "std_msgs/msg/Float64MultiArray",
    "joint_state": "sensor_msgs/msg/JointState",
}
TOPICS = {"odom": "nav_msgs/msg/Odometry", "estop": "std_msgs/msg/Bool", "fault": "std_msgs/msg/String",
          "target": "geometry_msgs/msg/PointStamped", "target_velocity": "geometry_msgs/msg/TwistStamped"}  # fmt: skip
"""Recorded topics besides ``/command`` (whose type is the node's ``command_type``)."""
INPUT_TOPICS = {"joint_states": "sensor_msgs/msg/JointState", "tcp": "geometry_msgs/msg/PoseStamped",
                "goal": "geometry_msgs/msg/PoseStamped", "object": "geometry_msgs/msg/PoseStamped",
                "instruction": "std_msgs/msg/String", "imu": "sensor_msgs/msg/Imu",
                "cmd_vel": "geometry_msgs/msg/Twist", "tank": "std_msgs/msg/Float64MultiArray"}  # fmt: skip
"""Manipulator and legged inputs, and the energy tank's state (energy J, alpha, injected J), as the node accepted
them; a contract's objects and cameras add ``object_pose/<name>`` and ``<camera>/image_raw``
(:func:`_contract_topics`)."""
COMMAND_TIMEOUT_KEY = "cmd_vel_timeout_s"
"""Metadata key of a legged node's ``cmd_vel_timeout_s`` (how long a velocity command applies), s."""
FLUSH_INTERVAL_S = 0.5
"""Longest time recorded messages stay in memory before they are written to the file, s."""
CHUNK_BYTES = 256 * 1024
"""A chunk is also written once it holds this much."""


class RecordingError(ValueError):
    """A recording is missing, unreadable, or lacks what a replay needs."""


def _ros_type(t: str) -> str:
    """``rosidl`` field type (``double[36]``, ``sequence<double>``) -> ``.msg`` (``float64[36]``, ``float64[]``)."""
    if t.startswith("sequence<"):
        inner, _, bound = t[len("sequence<") : -1].partition(",")
        return _ros_type(inner.strip()) + (f"[<={bound.strip()}]" if bound else "[]")
    if "[" in t:
        base, _, n = t.partition("[")
        return f"{_ros_type(base)}[{n}"
    if t.startswith("string<"):
        return "string<=" + t[len("string<") : -1]
    return PRIMITIVES.get(t, t)


def _nested(t: str) -> str | None:
    base = t[len("sequence<") : -1].split(",")[0] if t.startswith("sequence<") else t
    base = base.split("[")[0]
    return base if "/" in base else None


def _contract_topics(c: Contract) -> dict[str, str]:
    """The topics a policy's own inputs add: each tracked object's pose (``extra.objects``) and each camera's image
    (``chunk.cameras``); names the node would refuse are left out (the node refuses the model at configure)."""
    from robot_rl_ros.inputs import OBJECT_NAME

    objects = c.extra.get("objects")
    names = [o for o in objects if isinstance(o, str) and OBJECT_NAME.fullmatch(o)] if isinstance(objects, list) else []
    topics = {f"object_pose/{o}": "geometry_msgs/msg/PoseStamped" for o in names}
    cameras = c.chunk.cameras if c.chunk is not None else {}
    return {**topics, **{f"{cam}/image_raw": "sensor_msgs/msg/Image" for cam in cameras}}


def _message_class(name: str) -> Any:
    pkg, _, kind = name.partition("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), kind.split("/")[-1])


def msgdef(cls: Any) -> str:
    """The ``ros2msg`` definition text of a message class with every nested definition appended."""

    def body(c: Any) -> str:
        return "\n".join(f"{_ros_type(t)} {n}" for n, t in c.get_fields_and_field_types().items())

    seen: list[str] = []

    def visit(c: Any) -> None:
        for t in c.get_fields_and_field_types().values():
            dep = _nested(t)
            if dep and dep not in seen:
                seen.append(dep)
                visit(_message_class(dep))

    visit(cls)
    return body(cls) + "".join(f"\n{'=' * 80}\nMSG: {d}\n{body(_message_class(d))}" for d in seen)


def to_plain(value: Any) -> Any:
    """A message as nested dicts and lists (what the MCAP serializer takes)."""
    if hasattr(value, "get_fields_and_field_types"):
        return {n: to_plain(getattr(value, n)) for n in value.get_fields_and_field_types()}
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    return value


class Recorder:
    """Writes one MCAP file, crash-safe (see the module docstring).

    Args:
        path: The recording to create; it must not exist.
        model: The policy file the node runs (its contract goes into the metadata).
        control_period_s: The period the node runs at, if not the contract's (``control_rate_hz``).
        command_type: The node's ``command_type`` (the ``/command`` messages' type).
        target: A multirotor node's hover point when recording starts (odometry frame, m; default: the contract's).
        velocity_timeout_s: The node's ``target_velocity_timeout_s`` (how long a velocity setpoint applies).
        command_timeout_s: A legged node's ``cmd_vel_timeout_s`` (how long a velocity command applies).

    Raises:
        RecordingError: ``path`` exists, or the model is not one whose inputs are recorded; nothing is written.
    """

    def __init__(
        self,
        path: Path,
        model: Path,
        control_period_s: float | None = None,
        command_type: str = "float64_multi_array",
        target: list[float] | None = None,
        velocity_timeout_s: float | None = None,
        command_timeout_s: float | None = None,
    ) -> None:
        loaded = load_contract(model)
        if command_type not in COMMAND_TYPES:
            raise RecordingError(f"command_type '{command_type}' is not one of {', '.join(COMMAND_TYPES)}")
        self.path = Path(path)
        try:
            self._file = open(self.path, "xb")  # noqa: SIM115 - closed in close(); never replaces a file
        except FileExistsError:
            raise RecordingError(f"recording '{path}' already exists; recordings are never overwritten") from None
        self._writer = Writer(self._file, chunk_size=CHUNK_BYTES)
        topics = {**TOPICS, **INPUT_TOPICS, **_contract_topics(loaded), "command": COMMAND_MESSAGES[command_type]}
        self._schemas = {k: self._writer.register_msgdef(t, msgdef(_message_class(t))) for k, t in topics.items()}
        meta = {"model_path": str(Path(model).resolve()), "contract": loaded.to_json(), "command_type": command_type}
        if control_period_s is not None:  # the node ran at another rate than the contract's (control_rate_hz)
            meta["control_period_s"] = repr(float(control_period_s))
        if target is not None:  # the node's target_position_m parameter
            meta["target_position_m"] = json.dumps([float(v) for v in target])
        if velocity_timeout_s is not None:
            meta["target_velocity_timeout_s"] = repr(float(velocity_timeout_s))
        if command_timeout_s is not None:
            meta[COMMAND_TIMEOUT_KEY] = repr(float(command_timeout_s))
        self._writer.add_metadata("robot_rl", meta)  # first: a file cut short still says what it recorded
        self._writer._writer.flush()
        self._flushed = time.monotonic()
        self.count = 0
        self.closed = False

    def write(self, kind: str, msg: Any, t_ns: int) -> None:
        """Log ``msg`` on topic ``/<kind>`` at ``t_ns`` (a kind that is not recorded is ignored)."""
        if self.closed or kind not in self._schemas:
            return
        self._writer.write_message(f"/{kind}", self._schemas[kind], to_plain(msg), log_time=t_ns, publish_time=t_ns)
        self.count += 1
        self.tick()

    def tick(self) -> None:
        """Write the chunk in memory to the file if it is older than :data:`FLUSH_INTERVAL_S`."""
        if not self.closed and time.monotonic() - self._flushed >= FLUSH_INTERVAL_S:
            self._writer._writer.flush()
            self._flushed = time.monotonic()

    def close(self) -> None:
        """Finish the file (summary, index, footer) and sync it to disk; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            self._writer.finish()
            self._file.flush()
            os.fsync(self._file.fileno())
        finally:
            self._file.close()


@dataclass
class Log:
    """A recording read back: its ``robot_rl`` metadata, every message ``(log time ns, topic, decoded message)`` in
    file order, and whether the file was finished."""

    meta: dict[str, str]
    messages: list[tuple[int, str, Any]]  # log time ns, topic, decoded message
    complete: bool


def read_log(path: Path) -> Log:
    """Every message of a recording (decoded), its metadata, and whether the file was finished; a file cut short
    is read up to its last whole chunk.

    Raises:
        RecordingError: The file is missing, not an MCAP file, or holds no ``robot_rl`` metadata.
    """
    if not path.is_file():
        raise RecordingError(f"recording '{path}' does not exist")
    meta: dict[str, str] | None = None
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    decoders = DecoderFactory()
    messages: list[tuple[int, str, Any]] = []
    complete = False
    with open(path, "rb") as f:
        try:
            for record in StreamReader(f, record_size_limit=256 << 20).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                elif isinstance(record, Channel):
                    channels[record.id] = record
                elif isinstance(record, Metadata) and record.name == "robot_rl":
                    meta = dict(record.metadata)
                elif isinstance(record, Message):
                    channel = channels.get(record.channel_id)
                    if channel is None:
                        raise RecordingError(f"recording '{path}': a message names no recorded channel")
                    decode = decoders.decoder_for(channel.message_encoding, schemas.get(channel.schema_id))
                    if decode is None:
                        raise RecordingError(f"recording '{path}': channel {channel.topic} has no ROS 2 schema")
                    messages.append((record.log_time, channel.topic, decode(record.data)))
            complete = True
        except RecordingError:
            raise
        except Exception as exc:  # a file cut short ends in the middle of a record; anything else is damage
            if not _truncated(exc):
                raise RecordingError(f"recording '{path}' could not be read ({type(exc).__name__}: {exc})") from None
    if meta is None:
        empty = " (the file is empty)" if path.stat().st_size == 0 else ""
        raise RecordingError(f"'{path}' is not a robot-rl recording (no 'robot_rl' metadata){empty}")
    return Log(meta, messages, complete)


def _truncated(exc: Exception) -> bool:
    """Whether ``exc`` is how the MCAP reader meets the end of a file cut short: inside a record (``EndOfFile``) or
    inside a record's length prefix (a short read that ``struct`` cannot unpack)."""
    return isinstance(exc, EndOfFile) or (isinstance(exc, struct.error) and "requires a buffer of" in str(exc))


def read_metadata(path: Path, meta: dict[str, str]) -> tuple[float | None, list[float], float]:
    """The control period, hover target and velocity-setpoint timeout the metadata records, each checked (and its
    contract)."""
    for key in ("model_path", "contract"):
        if not meta.get(key):
            raise RecordingError(f"recording '{path}' is corrupt: metadata robot_rl has no '{key}'")
    try:
        contract = Contract.from_json(meta["contract"])
    except ValueError as exc:  # ContractError: not JSON, nested too deep, malformed
        raise RecordingError(f"recording '{path}' is corrupt: metadata robot_rl.contract: {printable(exc)}") from None
    period = _seconds(path, meta, "control_period_s")
    command_type = meta.get("command_type", "float64_multi_array")
    if command_type not in COMMAND_TYPES:
        raise RecordingError(f"recording '{path}' is corrupt: command_type '{printable(command_type)}' is unknown")
    target = contract.extra.get("target_position_m", [0.0, 0.0, 0.0])
    if "target_position_m" in meta:
        try:
            target = [float(v) for v in json.loads(meta["target_position_m"])]
        except (ValueError, TypeError):
            target = []
        if len(target) != 3 or not all(math.isfinite(v) for v in target):
            raise RecordingError(f"recording '{path}' is corrupt: metadata robot_rl.target_position_m is malformed")
    timeout = _seconds(path, meta, "target_velocity_timeout_s")  # none in recordings from before velocity setpoints
    return period, target, math.inf if timeout is None else timeout


def read_command_timeout(path: Path, meta: dict[str, str]) -> float:
    """A legged recording's ``cmd_vel_timeout_s``, checked.

    Raises:
        RecordingError: It is not recorded (a recording made before legged runs could be played back) or is not a
            positive number of seconds.
    """
    timeout = _seconds(path, meta, COMMAND_TIMEOUT_KEY)
    if timeout is None:
        raise RecordingError(
            f"recording '{path}' does not say how long a velocity command applied (metadata robot_rl has no "
            f"'{COMMAND_TIMEOUT_KEY}': it was made before legged recordings could be played back); its inputs open in "
            "Foxglove or the MCAP reader"
        )
    return timeout


def _seconds(path: Path, meta: dict[str, str], key: str) -> float | None:
    """Metadata ``key`` as a positive number of seconds (``None``: not recorded).

    Raises:
        RecordingError: It is recorded but is not a positive finite number.
    """
    if key not in meta:
        return None
    try:
        value = float(meta[key])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise RecordingError(
            f"recording '{path}' is corrupt: metadata robot_rl.{key} is '{printable(meta[key])}', not a positive "
            "number of seconds"
        )
    return value


def recorded_command(path: Path, msg: Any, contract: Contract, t_ns: int, t0_ns: int) -> np.ndarray:
    """A recorded command ``[A]`` (float32), refused as corrupt when malformed or not finite."""
    where = f"recording '{path}' is corrupt: the command at {(t_ns - t0_ns) * 1e-9:.3f} s"
    try:
        values = command_values(msg, contract)
    except (ValueError, TypeError, AttributeError) as exc:
        raise RecordingError(f"{where}: {printable(exc)}") from None
    with np.errstate(over="ignore"):
        out = values.astype(np.float32)
    if not np.isfinite(out).all():
        raise RecordingError(f"{where} holds non-finite values {values.tolist()}")
    return out
