"""Recording a deployed policy to MCAP (ROS 2 message encoding) and replaying it offline.

The policy node writes what *it* saw and did, in the order it happened: every odometry message it accepted, every
e-stop message, every command it published, and every change of its fault (``std_msgs/String``). Log times are the
node's monotonic clock in nanoseconds. The file opens in Foxglove Studio or with ``ros2 bag`` (message definitions
are embedded, generated from the installed message classes). The model and its contract are stored as MCAP
metadata ``robot_rl`` so :func:`replay` can re-run exactly that policy.

:func:`replay` walks the log: odometry updates the latest signals, each recorded command is one control step; the
policy (``policies.runtime.OnnxPolicy``, numpy + onnxruntime) computes that step from the same signals and the
previously recorded command as ``last_action``, and the two commands are compared (steps under a fault are skipped:
the safety layer, not the policy, chose them).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mcap.writer import Writer as McapWriter
from mcap_ros2.reader import read_ros2_messages
from mcap_ros2.writer import Writer
from robot_rl_ros.messages import MessageError, odometry_signals

from policies.runtime import load_contract, open_policy
from policies.runtime.files import atomic_path

PRIMITIVES = {"double": "float64", "float": "float32", "boolean": "bool", "octet": "byte"}
TOPICS = {"odom": "nav_msgs/msg/Odometry", "estop": "std_msgs/msg/Bool", "command": "std_msgs/msg/Float64MultiArray",
          "fault": "std_msgs/msg/String"}  # fmt: skip


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
    """Writes one MCAP file atomically (visible under its name only once :meth:`close` finished it)."""

    def __init__(self, path: Path, model: Path, control_period_s: float | None = None) -> None:
        loaded = load_contract(model)
        if loaded.action.kind != "rpm":  # checked before anything is written
            raise RecordingError(
                f"recordings cover multirotor policies (odometry in, rotor speeds out); this model's action kind is "
                f"'{loaded.action.kind}', whose inputs (joint states, poses, images) are not recorded yet"
            )
        self.path = path
        self._ctx = atomic_path(path)
        tmp = self._ctx.__enter__()
        self._file = open(tmp, "wb")  # noqa: SIM115 - closed in close()
        self._writer = Writer(self._file)
        self._schemas = {k: self._writer.register_msgdef(t, msgdef(_message_class(t))) for k, t in TOPICS.items()}
        contract = loaded.to_json()
        self._meta = {"model_path": str(Path(model).resolve()), "contract": contract}
        if control_period_s is not None:  # the node ran at another rate than the contract's (control_rate_hz)
            self._meta["control_period_s"] = repr(float(control_period_s))
        self.count = 0

    def write(self, kind: str, msg: Any, t_ns: int) -> None:
        """Log ``msg`` on topic ``/<kind>`` at ``t_ns``."""
        self._writer.write_message(f"/{kind}", self._schemas[kind], to_plain(msg), log_time=t_ns, publish_time=t_ns)
        self.count += 1

    def abort(self) -> None:
        """Drop the unfinished file (nothing appears under the recording's name)."""
        self._file.close()
        error = RecordingError("recording aborted")
        self._ctx.__exit__(type(error), error, None)

    def close(self) -> None:
        """Finish the file (metadata, index) and move it into place."""
        mcap_writer: McapWriter = self._writer._writer  # the underlying writer takes metadata records
        mcap_writer.add_metadata("robot_rl", self._meta)
        self._writer.finish()
        self._file.close()
        self._ctx.__exit__(None, None, None)


@dataclass
class ReplayResult:
    """How the offline re-run compares with the recorded commands.

    Attributes:
        steps: Recorded control steps compared.
        skipped: Steps under a fault (chosen by the safety layer), not compared.
        max_divergence: Largest ``|recorded - replayed|`` in normalised command units.
        messages: Messages read.
    """

    steps: int
    skipped: int
    max_divergence: float
    messages: int


def replay(path: Path, model: Path | None = None) -> ReplayResult:
    """Re-run the recorded policy (or ``model``) on the recorded inputs; see the module docstring.

    Raises:
        RecordingError: The file is missing or not a robot-rl recording.
    """
    if not path.is_file():
        raise RecordingError(f"recording '{path}' does not exist")
    try:
        meta = _metadata(path)
        messages = list(read_ros2_messages(str(path)))
    except RecordingError:
        raise
    except Exception as exc:  # the mcap reader raises its own types for damaged files
        raise RecordingError(f"recording '{path}' could not be read ({type(exc).__name__}: {exc})") from None
    period = float(meta["control_period_s"]) if "control_period_s" in meta else None  # None: the contract's
    policy = open_policy(model or meta["model_path"], control_period_s=period)
    target = json.loads(meta["contract"]).get("extra", {}).get("target_position_m", [0.0, 0.0, 0.0])
    signals, fault, prev = None, "", np.asarray(policy.contract.action.offset, dtype=np.float32)[None]
    steps = skipped = 0
    worst = 0.0
    for m in sorted(messages, key=lambda m: m.log_time_ns):
        topic = m.channel.topic
        if topic == "/odom":
            try:
                signals = odometry_signals(m.ros_msg, target)
            except MessageError:
                continue
        elif topic == "/fault":
            fault = m.ros_msg.data
        elif topic == "/command":
            recorded = np.asarray(m.ros_msg.data, dtype=np.float32)[None]
            if fault or signals is None:
                skipped += 1
            else:
                replayed = policy({**signals, "last_action": policy.normalized_action(prev)})
                diff = np.abs(replayed - recorded) / np.asarray(policy.contract.action.scale, dtype=np.float32)
                worst = max(worst, float(diff.max()))
                steps += 1
            prev = recorded
    return ReplayResult(steps, skipped, worst, len(messages))


def _metadata(path: Path) -> dict[str, str]:
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        for record in make_reader(f).iter_metadata():
            if record.name == "robot_rl":
                return dict(record.metadata)
    raise RecordingError(f"'{path}' is not a robot-rl recording (no 'robot_rl' metadata)")
