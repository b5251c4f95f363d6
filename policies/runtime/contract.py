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

from policies.runtime.text import MAX_NAME, TextError, check_instruction, check_name, check_task, check_unit

CONTRACT_VERSION = 1
METADATA_KEY = "robot_rl.contract"
ActionKind = Literal["torque", "position", "rpm", "ee_delta", "normalized"]
ACTION_KINDS: tuple[str, ...] = ("torque", "position", "rpm", "ee_delta", "normalized")
NORMALIZATIONS: tuple[str, ...] = ("in_graph",)
MAX_TERM_SIZE = 1 << 20
"""Largest number of values in one observation term or action (guards against absurd sizes in a file)."""
MAX_HISTORY = 1000
"""Longest observation history (control steps) a contract may ask for."""
MAX_IMAGE_SIDE = 4096
"""Largest camera image side a contract may declare, pixels."""
MIN_CONTROL_PERIOD_S = 1e-4
"""Shortest period a policy is run at, s (10 kHz). Every place a rate enters checks against it: the runtime's
``control_period_s``, the ROS 2 node's ``control_rate_hz``, the native node's ``--rate``, ``eval --control-rate``."""
MAX_CONTROL_RATE_HZ = 1.0 / MIN_CONTROL_PERIOD_S
"""The same bound as a rate, Hz."""
MAX_DEPTH = 16
MAX_LANGUAGE_DIM = 32768
"""Widest instruction input accepted (a pooled embedding, or ``tokens`` rows of one, flattened: 64 x 384 fit)."""
MAX_LANGUAGE_TOKENS = 64
"""Most instruction tokens a contract's ``chunk.language.tokens`` may declare."""
MAX_INSTRUCTIONS = 1024
"""Most instructions a contract's embedding table may hold."""
"""Deepest nesting of mappings and lists a contract may hold (the task facts of ``extra`` are a few levels deep); a
deeper file is refused instead of exhausting the interpreter's recursion."""


class ContractError(ValueError):
    """A contract is malformed or does not match the model or signals it is used with."""


@dataclass(frozen=True)
class ObservationTerm:
    """One named slice of the policy input.

    The term contributes ``size * history`` values: the signal ``source`` multiplied by ``scale``, newest sample
    first, followed by ``history - 1`` older samples (one per control period).

    With ``integral_limit > 0`` the term reads the running integral of the signal instead of the signal:
    ``I_k = clip(I_{k-1} + dt * s_k, -integral_limit, integral_limit)`` per element, ``dt`` the contract's control
    period and ``I`` zero before an episode's first sample (integral action: it lets a policy remove steady-state
    offsets, e.g. of a position error under an unknown mass or thrust). With ``integral_band > 0`` an element
    integrates only while ``|s_k| < integral_band`` (conditional integration, the anti-windup of PID controllers):
    the approach to a far setpoint does not wind the integral up, so near the setpoint it holds the offset alone.

    Attributes:
        name: Term name (unique within the contract).
        size: Values per sample.
        source: Robot signal the term is read from (see the task's signal table).
        scale: Multiplier applied to the raw signal before normalisation.
        history: Number of stacked samples (1 = current value only).
        unit: SI unit of the raw signal, for humans.
        integral_limit: ``> 0``: integrate the signal, clipped to this magnitude (``unit`` x s); ``0``: no.
        integral_band: ``> 0``: integrate only samples within this magnitude (``unit``); ``0``: every sample.
    """

    name: str
    size: int
    source: str
    scale: float = 1.0
    history: int = 1
    unit: str = ""
    integral_limit: float = 0.0
    integral_band: float = 0.0

    @property
    def dim(self) -> int:
        """Number of policy inputs this term fills (``size * history``)."""
        return self.size * self.history


@dataclass(frozen=True)
class ActionSpec:
    """How the policy output maps to robot commands.

    The network's raw output ``a`` is clipped to ``[-1, 1]``; the exported graph then emits
    ``command = clip(offset + scale * a, low, high)`` in the unit of ``kind`` (N m, rad, RPM, ...). With a
    ``reference`` signal the command is relative to that signal's current value (for example joint targets relative
    to the measured joint positions): ``command = clip(offset + reference + scale * a, low, high)``, where
    ``reference`` is the newest sample of the observation term reading that signal, unscaled, added to the first
    ``k`` commands (``k`` = the signal's size; later commands, e.g. a gripper, stay absolute).

    Attributes:
        size: Number of commands.
        names: One name per command (motors or joints).
        kind: Command type: ``torque``, ``position``, ``rpm``, ``ee_delta`` or ``normalized``.
        scale: Per-command scale (unit per normalised unit).
        offset: Per-command offset (command at ``a = 0``).
        low: Per-command lower limit.
        high: Per-command upper limit.
        unit: SI unit of the command, for humans.
        reference: Source signal the command is relative to (``""``: absolute commands).
    """

    size: int
    names: list[str]
    kind: str
    scale: list[float]
    offset: list[float]
    low: list[float]
    high: list[float]
    unit: str = ""
    reference: str = ""


@dataclass(frozen=True)
class ChunkSpec:
    """How an action-chunk policy (diffusion, chunked behaviour cloning) is queried and executed.

    The graph takes the last ``obs_horizon`` observation vectors (each laid out by ``Contract.observation``), oldest
    first, as ``obs [B, obs_horizon, obs_dim]`` and, for stochastic samplers, an initial standard-normal sample
    ``noise [B, pred_horizon, action.size]``; it returns ``pred_horizon`` actions ``[B, pred_horizon, action.size]``
    in normalised units ``[-1, 1]``. The first ``action_horizon`` are executed, one per control period, each mapped
    to a command by ``action`` at the step it is applied (a ``reference`` is read then, not at planning time); then
    the policy plans again. With ``ensemble_decay`` set, the policy plans every step and each command averages every
    plan made for that step, older plans weighted ``exp(ensemble_decay)`` times more than the next newer: ``m > 0``
    favours older plans (Zhao et al., ACT temporal ensembling), ``m < 0`` newer ones, ``0`` weighs all alike.

    Attributes:
        obs_horizon: Observations per query ``To``.
        pred_horizon: Actions per query ``Tp``.
        action_horizon: Actions executed per query ``Ta`` (``<= Tp``).
        noise_input: Name of the graph's noise input (``""``: deterministic graph, no noise input).
        sampler: Sampler facts (name, steps, schedule), for humans and checks.
        ensemble_decay: Temporal-ensembling weight ``m`` (``None``: receding horizon without ensembling).
        cameras: Camera inputs of the graph (empty: none): camera name -> ``input`` (the graph input's name, fed
            ``uint8 [B, obs_horizon, height, width, 3]`` RGB images of the same steps as ``obs``), ``height`` and
            ``width`` (pixels), and ``mount``: where the camera was in training (body, position in m and
            orientation in that body's frame, field of view), so the real camera can be mounted to match.
        language: For a language-conditioned policy (empty: none): ``input`` (the graph input, fed the instruction's
            embedding ``float [B, dim]``), ``dim``, ``tokens`` (where present: the input is that many rows of the
            encoder's per-token outputs, flattened, zero rows after the text's last token), ``subspace`` (where
            present: the graph reads the embedding projected onto a span of that many dimensions, its training
            instructions', :mod:`policies.nets.instruction_subspace`; a fact for humans), ``nearest`` (where
            present: the graph reads every embedding as the nearest of that many training instructions' embeddings;
            a fact for humans), ``encoder`` (the frozen
            sentence encoder it was trained with: ``name``, ``package``, ``version``, ``sha256`` of its weights) and
            ``instructions``: instruction text -> its embedding (``dim`` numbers), so that a robot runs the known
            instructions without the encoder.
        guide: For a sampler that inpaints (real-time chunking; empty: none): ``actions`` (the graph input fed the
            guide actions ``float [B, pred_horizon, action.size]`` in normalised units) and ``weights`` (fed their
            weights ``float [B, pred_horizon]`` in ``[0, 1]``; zeros: no guidance).
        noise_scale: Standard deviation of the initial sample fed to ``noise_input``, in ``[0, 1]``: 1 samples the
            distribution the policy learned; 0 feeds zeros, so the same inputs give the same plan (lower values:
            lower-temperature sampling). Absent in older contracts: 1.
    """

    obs_horizon: int
    pred_horizon: int
    action_horizon: int
    noise_input: str = ""
    sampler: dict[str, Any] = field(default_factory=dict)
    ensemble_decay: float | None = None
    cameras: dict[str, dict[str, Any]] = field(default_factory=dict)
    language: dict[str, Any] = field(default_factory=dict)
    guide: dict[str, str] = field(default_factory=dict)
    noise_scale: float = 1.0

    def image_shape(self, camera: str) -> tuple[int, int, int]:
        """``(height, width, 3)`` of one camera's images."""
        c = self.cameras[camera]
        return int(c["height"]), int(c["width"]), 3


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
        filter: Defaults for the passivity filter and safety layer (tank sizes in J, rate limits, ...);
            ``trained_with_tank_j`` (J) marks a policy trained behind the tank, which a node must not run without it.
        extra: Task-specific facts a deployment needs (hover target, physical parameters used, ...).
        input_name: ONNX input tensor name.
        output_name: ONNX output tensor name.
        version: Contract schema version.
        chunk: For action-chunk policies, their horizons and sampler (``None``: one command per query).
    """

    task: str
    control_period_s: float
    observation: list[ObservationTerm]
    action: ActionSpec
    joint_names: list[str] = field(default_factory=list)
    default_pose: list[float] = field(default_factory=list)
    normalization: str = "in_graph"
    filter: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    input_name: str = "obs"
    output_name: str = "action"
    version: int = CONTRACT_VERSION
    chunk: ChunkSpec | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def obs_dim(self) -> int:
        """Length of the flat policy input."""
        return sum(t.dim for t in self.observation)

    def reference_slice(self) -> tuple[int, int, float]:
        """Where the action's reference signal sits in the policy input: ``(start, size, term scale)``; its newest
        sample is ``obs[:, start:start + size] / scale``, added to the first ``size`` commands.

        Raises:
            ContractError: No observation term reads the reference signal, or it has more values than commands.
        """
        start = 0
        for t in self.observation:
            if t.source == self.action.reference:
                if t.size > self.action.size:
                    raise ContractError(
                        f"action.reference '{t.source}' has {t.size} values per sample, more than action.size "
                        f"{self.action.size}"
                    )
                return start, t.size, float(t.scale)
            start += t.dim
        sources = ", ".join(t.source for t in self.observation)
        raise ContractError(f"action.reference '{self.action.reference}' is not an observation signal ({sources})")

    def validate(self) -> None:
        """Check every field; raise :class:`ContractError` naming the first problem.

        Types are checked as well as values, since contracts arrive as JSON from files a robot did not write:
        sizes and histories are integers, every number is finite, scales are non-zero (action scales positive),
        ``low <= offset <= high`` per command, names are non-empty strings.
        """
        if not _is_int(self.version) or self.version != CONTRACT_VERSION:
            raise ContractError(f"contract version {self.version!r} is not supported (expected {CONTRACT_VERSION})")
        _word(check_task, self.task, "task")
        _word(check_name, self.input_name, "input_name")
        _word(check_name, self.output_name, "output_name")
        if _number(self.control_period_s, "control_period_s") <= 0:
            raise ContractError(f"control_period_s must be positive, got {self.control_period_s}")
        if not isinstance(self.observation, list) or not self.observation:
            raise ContractError("observation must be a non-empty list of terms")
        for t in self.observation:
            _validate_term(t)
        names = [t.name for t in self.observation]
        if len(set(names)) != len(names):
            raise ContractError(f"observation term names must be unique, got {names}")
        _validate_action(self.action)
        if self.action.reference:
            self.reference_slice()
        _names(self.joint_names, "joint_names", allow_empty=True)
        pose = _numbers(self.default_pose, "default_pose")
        if pose and len(pose) != len(self.joint_names):
            raise ContractError(f"default_pose has {len(pose)} entries, joint_names has {len(self.joint_names)}")
        if self.normalization not in NORMALIZATIONS:
            raise ContractError(f"normalization {self.normalization!r} is not one of {', '.join(NORMALIZATIONS)}")
        if not isinstance(self.filter, dict):
            raise ContractError(f"filter must be a mapping, got {type(self.filter).__name__}")
        _finite_tree(self.filter, "filter")
        if "trained_with_tank_j" in self.filter:  # the policy trained behind the tank: the node must keep it on
            trained = _number(self.filter["trained_with_tank_j"], "filter.trained_with_tank_j")
            if not trained > 0:
                raise ContractError(f"filter.trained_with_tank_j must be > 0 J, got {trained}")
        if not isinstance(self.extra, dict):
            raise ContractError(f"extra must be a mapping, got {type(self.extra).__name__}")
        _finite_tree(self.extra, "extra")
        _validate_training_ranges(self.extra.get("training_ranges"))
        if "target_position_m" in self.extra:  # the hover point a multirotor node and the C export steer to
            _numbers(self.extra["target_position_m"], "extra.target_position_m", 3, "the 3 axes x, y, z")
        if self.chunk is not None:
            _validate_chunk(self.chunk)

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
            if data.get("chunk") is not None:
                data["chunk"] = ChunkSpec(**_checked("chunk", data["chunk"], ChunkSpec))
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
        except RecursionError:
            raise ContractError(f"contract is nested deeper than {MAX_DEPTH} levels") from None

    def save_yaml(self, path: str | Path) -> None:
        """Write the human-readable mirror ``contract.yaml``."""
        import yaml

        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def load_yaml(cls, path: str | Path) -> Contract:
        """Read a ``contract.yaml`` mirror."""
        from policies.runtime import yamlfile

        try:
            return cls.from_dict(yamlfile.load(path, "contract"))
        except yamlfile.YamlFileError as exc:
            raise ContractError(str(exc)) from None


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


# ------------------------------------------------------------------------------------------------ checks
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _word(check: Any, value: Any, where: str) -> str:
    """``check(value, where)`` (a :mod:`policies.runtime.text` validator), its error as a :class:`ContractError`."""
    try:
        return str(check(value, where))
    except TextError as exc:
        raise ContractError(str(exc)) from None


def _number(value: Any, where: str) -> float:
    """A finite real number (bools, strings and NaN/inf are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ContractError(f"{where} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ContractError(f"{where} must be finite, got {value}")
    return float(value)


FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: the runtimes and the generated C compute the observation in float32."""


def _float32(value: Any, where: str) -> float:
    """A number that stays finite in float32, the precision the observation is computed in."""
    v = _number(value, where)
    if abs(v) > FLOAT32_MAX:
        raise ContractError(f"{where} must be finite in float32 (|x| <= {FLOAT32_MAX:.4g}), got {v:g}")
    return v


def _numbers(values: Any, where: str, size: int | None = None, what: str = "action.size") -> list[float]:
    if not isinstance(values, list | tuple):
        raise ContractError(f"{where} must be a list of numbers, got {type(values).__name__}")
    if size is not None and len(values) != size:
        raise ContractError(f"{where} has {len(values)} entries, expected {size} ({what})")
    return [_number(v, f"{where}[{i}]") for i, v in enumerate(values)]


def _count(value: Any, where: str, high: int) -> int:
    if not _is_int(value) or not 1 <= value <= high:
        raise ContractError(f"{where} must be an integer in [1, {high}], got {value!r}")
    return int(value)


def _names(values: Any, where: str, allow_empty: bool = False) -> list[str]:
    if not isinstance(values, list | tuple) or (not values and not allow_empty):
        raise ContractError(f"{where} must be a {'' if allow_empty else 'non-empty '}list of names")
    names = [_word(check_name, v, f"{where}[{i}]") for i, v in enumerate(values)]
    if len(set(names)) != len(names):
        raise ContractError(f"{where} must be unique, got {names}")
    return names


def _validate_term(t: ObservationTerm) -> None:
    if not isinstance(t, ObservationTerm):
        raise ContractError(f"observation terms must be mappings, got {type(t).__name__}")
    _word(check_name, t.name, "observation term name")
    where = f"observation term '{t.name}'"
    _word(check_name, t.source, f"{where}: source")
    _count(t.size, f"{where}: size", MAX_TERM_SIZE)
    _count(t.history, f"{where}: history", MAX_HISTORY)
    if _float32(t.scale, f"{where}: scale") == 0.0:
        raise ContractError(f"{where}: scale must be non-zero (a zero scale hides the signal from the policy)")
    _word(check_unit, t.unit, f"{where}: unit")
    if _float32(t.integral_limit, f"{where}: integral_limit") < 0.0:
        raise ContractError(f"{where}: integral_limit must be >= 0 (0: no integral), got {t.integral_limit}")
    if _float32(t.integral_band, f"{where}: integral_band") < 0.0:
        raise ContractError(f"{where}: integral_band must be >= 0 (0: integrate every sample), got {t.integral_band}")
    if t.integral_band > 0.0 and t.integral_limit == 0.0:
        raise ContractError(f"{where}: integral_band {t.integral_band:g} needs integral_limit > 0 (an integral term)")


def _validate_action(a: ActionSpec) -> None:
    if not isinstance(a, ActionSpec):
        raise ContractError(f"action must be a mapping, got {type(a).__name__}")
    size = _count(a.size, "action.size", MAX_TERM_SIZE)
    if a.kind not in ACTION_KINDS:
        raise ContractError(f"action.kind {a.kind!r} is not one of {', '.join(ACTION_KINDS)}")
    names = _names(a.names, "action.names")
    if len(names) != size:
        raise ContractError(f"action.names has {len(names)} entries, action.size is {size}")
    scale = _numbers(a.scale, "action.scale", size)
    offset = _numbers(a.offset, "action.offset", size)
    low = _numbers(a.low, "action.low", size)
    high = _numbers(a.high, "action.high", size)
    for i, name in enumerate(names):
        if scale[i] <= 0:
            raise ContractError(f"action.scale of '{name}' must be positive, got {scale[i]}")
        if low[i] > high[i]:
            raise ContractError(f"action.low of '{name}' ({low[i]}) exceeds action.high ({high[i]})")
        if not a.reference and not low[i] <= offset[i] <= high[i]:
            raise ContractError(
                f"action.offset of '{name}' ({offset[i]}) lies outside [low, high] = [{low[i]}, {high[i]}]"
            )
    _word(check_unit, a.unit, "action.unit")
    if a.reference != "":
        _word(check_name, a.reference, "action.reference (a signal name or empty)")


def _validate_chunk(c: ChunkSpec) -> None:
    to = _count(c.obs_horizon, "chunk.obs_horizon", MAX_HISTORY)
    tp = _count(c.pred_horizon, "chunk.pred_horizon", MAX_HISTORY)
    ta = _count(c.action_horizon, "chunk.action_horizon", MAX_HISTORY)
    if min(to, tp, ta) < 1 or ta > tp:
        raise ContractError(f"chunk needs 1 <= action_horizon <= pred_horizon and obs_horizon >= 1, got {to}/{tp}/{ta}")
    if c.noise_input != "":
        _word(check_name, c.noise_input, "chunk.noise_input (a graph input name or empty)")
    if not isinstance(c.sampler, dict):
        raise ContractError(f"chunk.sampler must be a mapping, got {type(c.sampler).__name__}")
    _finite_tree(c.sampler, "chunk.sampler")
    if c.ensemble_decay is not None:
        _number(c.ensemble_decay, "chunk.ensemble_decay")
    if not 0.0 <= _number(c.noise_scale, "chunk.noise_scale") <= 1.0:
        raise ContractError(f"chunk.noise_scale must be in [0, 1], got {c.noise_scale}")
    if c.noise_scale != 1.0 and not c.noise_input:
        raise ContractError("chunk.noise_scale is set but the graph has no noise input (chunk.noise_input)")
    if not isinstance(c.cameras, dict):
        raise ContractError(f"chunk.cameras must be a mapping, got {type(c.cameras).__name__}")
    for name, cam in c.cameras.items():
        _word(check_name, name, "chunk.cameras: camera name")
        where = f"chunk.cameras.{name}"
        if not isinstance(cam, dict):
            raise ContractError(f"{where} must be a mapping with 'input' (the graph input's name), height and width")
        _word(check_name, cam.get("input"), f"{where}.input")
        for key in ("height", "width"):
            _count(cam.get(key), f"{where}.{key}", MAX_IMAGE_SIDE)
        _finite_tree(cam.get("mount", {}), f"{where}.mount")
    _validate_language(c.language)
    if not isinstance(c.guide, dict) or (c.guide and set(c.guide) != {"actions", "weights"}):
        raise ContractError("chunk.guide must be empty or name the graph inputs 'actions' and 'weights'")
    for key, name in c.guide.items():
        _word(check_name, name, f"chunk.guide.{key}")


def _validate_language(lang: Any) -> None:
    """``chunk.language`` (see :class:`ChunkSpec`): a graph input name, a width, the encoder's identity (short
    words) and a table of instruction texts (:func:`~policies.runtime.text.check_instruction`) to ``dim`` finite
    numbers each."""
    if not isinstance(lang, dict):
        raise ContractError(f"chunk.language must be a mapping, got {type(lang).__name__}")
    if not lang:
        return
    _word(check_name, lang.get("input"), "chunk.language.input")
    dim = _count(lang.get("dim"), "chunk.language.dim", MAX_LANGUAGE_DIM)
    if dim < 1:
        raise ContractError("chunk.language.dim must be >= 1")
    if "subspace" in lang and (not _is_int(lang["subspace"]) or not 0 <= lang["subspace"] <= dim):
        raise ContractError(f"chunk.language.subspace must be an integer in [0, {dim}], got {lang['subspace']!r}")
    if "nearest" in lang and (not _is_int(lang["nearest"]) or not 1 <= lang["nearest"] <= MAX_INSTRUCTIONS):
        raise ContractError(
            f"chunk.language.nearest must be an integer in [1, {MAX_INSTRUCTIONS}], got {lang['nearest']!r}"
        )
    if "tokens" in lang:
        tokens = _count(lang["tokens"], "chunk.language.tokens", MAX_LANGUAGE_TOKENS)
        if tokens < 1 or dim % tokens:
            raise ContractError(f"chunk.language.tokens ({tokens}) must be >= 1 and divide chunk.language.dim ({dim})")
    encoder = lang.get("encoder")
    if not isinstance(encoder, dict) or not all(
        isinstance(encoder.get(k), str) and 0 < len(encoder[k]) <= MAX_NAME for k in ("name", "sha256")
    ):
        raise ContractError("chunk.language.encoder must be a mapping with the encoder's 'name' and 'sha256' (text)")
    table = lang.get("instructions")
    if not isinstance(table, dict) or len(table) > MAX_INSTRUCTIONS:
        raise ContractError(f"chunk.language.instructions must be a mapping of at most {MAX_INSTRUCTIONS} texts")
    for i, (text, vector) in enumerate(table.items()):
        _word(check_instruction, text, f"chunk.language.instructions: instruction {i}")
        _numbers(vector, f"chunk.language.instructions[{i}]", dim, "chunk.language.dim")


def _validate_training_ranges(ranges: Any) -> None:
    """``extra.training_ranges`` (where a task writes one): ``{param: {low, high, ...}}`` with non-empty number lists
    of one length and ``low <= high`` (simulators draw parameters from them)."""
    if ranges is None:
        return
    if not isinstance(ranges, dict):
        raise ContractError(f"extra.training_ranges must be a mapping, got {type(ranges).__name__}")
    for name, entry in ranges.items():
        where = f"extra.training_ranges.{name}"
        if not isinstance(entry, dict) or "low" not in entry or "high" not in entry:
            raise ContractError(f"{where} needs 'low' and 'high'")
        low, high = (_numbers(entry[k], f"{where}.{k}") for k in ("low", "high"))
        if not low or len(low) != len(high):
            raise ContractError(f"{where}: low has {len(low)} values, high {len(high)} (one or more each)")
        if any(lo > hi for lo, hi in zip(low, high, strict=True)):
            raise ContractError(f"{where}: low {low} exceeds high {high}")


def _finite_tree(value: Any, where: str, depth: int = 0) -> None:
    """Every number inside nested mappings and lists is finite; keys are strings; at most :data:`MAX_DEPTH` levels."""
    if depth > MAX_DEPTH and isinstance(value, dict | list | tuple):
        raise ContractError(f"{where.split('.')[0]} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ContractError(f"{where}: keys must be strings, got {k!r}")
            _finite_tree(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _finite_tree(v, f"{where}[{i}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ContractError(f"{where} must be finite, got {value}")
    elif value is not None and not isinstance(value, str | int | float):
        raise ContractError(f"{where} must be plain data (number, string, list, mapping), got {type(value).__name__}")
