"""The deployment contract: everything a robot needs to feed a policy and apply its output.

Export writes the contract as JSON into the ONNX file's ``metadata_props`` under :data:`METADATA_KEY` and mirrors it
as ``contract.yaml`` beside the file. The same contract drives the observation builder in simulation and on the robot,
so training and deployment cannot drift.

Only the standard library is used here (YAML is imported lazily), so a robot needs nothing beyond numpy and
onnxruntime.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

CONTRACT_VERSION = 1
METADATA_KEY = "robot_rl.contract"
ActionKind = Literal["torque", "position", "rpm", "ee_delta", "normalized"]
ACTION_KINDS: tuple[str, ...] = ("torque", "position", "rpm", "ee_delta", "normalized")


class ContractError(ValueError):
    """A contract is malformed or does not match the model or signals it is used with."""


@dataclass(frozen=True)
class ObservationTerm:
    """One named slice of the policy input.

    The term contributes ``size * history`` values: the signal ``source`` multiplied by ``scale``, newest sample
    first, followed by ``history - 1`` older samples (one per control period).

    Attributes:
        name: Term name (unique within the contract).
        size: Values per sample.
        source: Robot signal the term is read from (see the task's signal table).
        scale: Multiplier applied to the raw signal before normalisation.
        history: Number of stacked samples (1 = current value only).
        unit: SI unit of the raw signal, for humans.
    """

    name: str
    size: int
    source: str
    scale: float = 1.0
    history: int = 1
    unit: str = ""

    @property
    def dim(self) -> int:
        """Number of policy inputs this term fills (``size * history``)."""
        return self.size * self.history


@dataclass(frozen=True)
class ActionSpec:
    """How the policy output maps to robot commands.

    The network's raw output ``a`` is clipped to ``[-1, 1]``; the exported graph then emits
    ``command = clip(offset + scale * a, low, high)`` in the unit of ``kind`` (N m, rad, RPM, ...).

    Attributes:
        size: Number of commands.
        names: One name per command (motors or joints).
        kind: Command type: ``torque``, ``position``, ``rpm``, ``ee_delta`` or ``normalized``.
        scale: Per-command scale (unit per normalised unit).
        offset: Per-command offset (command at ``a = 0``).
        low: Per-command lower limit.
        high: Per-command upper limit.
        unit: SI unit of the command, for humans.
    """

    size: int
    names: list[str]
    kind: str
    scale: list[float]
    offset: list[float]
    low: list[float]
    high: list[float]
    unit: str = ""


@dataclass
class Contract:
    """Deployment contract of one exported policy.

    Attributes:
        task: Registered task name the policy was trained on.
        control_period_s: Period at which the policy must be queried, seconds.
        observation: Input terms in order; their concatenation is the ONNX input ``obs`` ``[B, obs_dim]``.
        action: Output mapping; the ONNX output ``action`` is ``[B, action.size]`` in command units.
        joint_names: Actuated joints or motors in command order.
        default_pose: Nominal joint positions (empty for robots without joints, e.g. multirotors).
        normalization: Where observation normalisation lives (``"in_graph"``: baked into the ONNX graph).
        filter: Defaults for the passivity filter and safety layer (tank sizes in J, rate limits, ...).
        extra: Task-specific facts a deployment needs (hover target, physical parameters used, ...).
        input_name: ONNX input tensor name.
        output_name: ONNX output tensor name.
        version: Contract schema version.
    """

    task: str
    control_period_s: float
    observation: list[ObservationTerm]
    action: ActionSpec
    joint_names: list[str] = field(default_factory=list)
    default_pose: list[float] = field(default_factory=list)
    normalization: str = "in_graph"
    filter: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    input_name: str = "obs"
    output_name: str = "action"
    version: int = CONTRACT_VERSION

    def __post_init__(self) -> None:
        self.validate()

    @property
    def obs_dim(self) -> int:
        """Length of the flat policy input."""
        return sum(t.dim for t in self.observation)

    def validate(self) -> None:
        """Check internal consistency; raise :class:`ContractError` naming the first problem."""
        if self.version != CONTRACT_VERSION:
            raise ContractError(f"contract version {self.version} is not supported (expected {CONTRACT_VERSION})")
        if not (math.isfinite(self.control_period_s) and self.control_period_s > 0):
            raise ContractError(f"control_period_s must be positive, got {self.control_period_s}")
        names = [t.name for t in self.observation]
        if len(set(names)) != len(names):
            raise ContractError(f"observation term names must be unique, got {names}")
        for t in self.observation:
            if t.size < 1 or t.history < 1:
                raise ContractError(f"observation term '{t.name}': size and history must be >= 1")
        a = self.action
        if a.kind not in ACTION_KINDS:
            raise ContractError(f"action.kind '{a.kind}' is not one of {', '.join(ACTION_KINDS)}")
        for key in ("names", "scale", "offset", "low", "high"):
            if len(getattr(a, key)) != a.size:
                raise ContractError(f"action.{key} has {len(getattr(a, key))} entries, action.size is {a.size}")
        if any(lo > hi for lo, hi in zip(a.low, a.high, strict=True)):
            raise ContractError("action.low must not exceed action.high")

    # ----------------------------------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON/YAML ready)."""
        return asdict(self)

    def to_json(self) -> str:
        """Compact JSON, as stored in the ONNX metadata."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Contract:
        """Build and validate a contract from plain data, naming any unknown or missing key."""
        if not isinstance(data, dict):
            raise ContractError(f"contract must be a mapping, got {type(data).__name__}")
        data = dict(data)
        _check_keys("contract", data, cls)
        try:
            data["observation"] = [
                ObservationTerm(**_checked("observation term", t, ObservationTerm)) for t in data["observation"]
            ]
            data["action"] = ActionSpec(**_checked("action", data["action"], ActionSpec))
            return cls(**data)
        except KeyError as exc:  # missing section
            raise ContractError(f"malformed contract: missing key {exc}") from None
        except TypeError as exc:  # missing required field
            raise ContractError(f"malformed contract: {exc}") from exc

    @classmethod
    def from_json(cls, text: str) -> Contract:
        """Parse the JSON stored in an ONNX file."""
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ContractError(f"contract is not valid JSON: {exc}") from exc

    def save_yaml(self, path: str | Path) -> None:
        """Write the human-readable mirror ``contract.yaml``."""
        import yaml

        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def load_yaml(cls, path: str | Path) -> Contract:
        """Read a ``contract.yaml`` mirror."""
        import yaml

        return cls.from_dict(yaml.safe_load(Path(path).read_text()))


def _check_keys(what: str, data: dict[str, Any], cls: type) -> None:
    valid = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ContractError(f"unknown {what} key(s) {unknown}; valid keys: {sorted(valid)}")


def _checked(what: str, data: Any, cls: type) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ContractError(f"{what} must be a mapping, got {type(data).__name__}")
    _check_keys(what, data, cls)
    return data
