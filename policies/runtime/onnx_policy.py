"""Run an exported policy on the robot: numpy + onnxruntime only (no torch, no simulator, no ROS).

The ONNX file is self-describing: its contract (stored in the metadata under
:data:`~policies.runtime.contract.METADATA_KEY`) names the observation terms, their source signals, scales
and histories, and the action mapping. :class:`OnnxPolicy` reads that contract, checks the graph against it
and builds the policy input from named robot signals with the same
:class:`~policies.runtime.observation.ObservationBuilder` the simulator uses::

    policy = OnnxPolicy("runs/quadrotor-hover/.../policy.onnx")
    policy.self_test()
    command = np.array([policy.contract.action.offset])  # the command at a = 0, [1, A]
    while running:
        command = policy({"ang_vel": gyro(), "last_action": policy.normalized_action(command)})  # [1, A]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from policies.runtime.contract import METADATA_KEY, MIN_CONTROL_PERIOD_S, Contract, ContractError
from policies.runtime.observation import ObservationBuilder

LAST_ACTION_SIGNAL = "last_action"
"""Signal of the previous command, in normalised units ``[-1, 1]`` (:meth:`OnnxPolicy.normalized_action`)."""


class PolicyFileError(ValueError):
    """A policy file exists but is not a loadable ONNX model."""


class UnsafeCommandError(ContractError):
    """The graph produced a command that is not finite or lies outside the contract's ``[low, high]``.

    Raised instead of returning the command: nothing non-finite or out of range ever leaves :class:`OnnxPolicy`.
    """


PROBE_SEED = 20231
"""Seed of the random inputs that probe a graph's action mapping when a policy is loaded."""
PROBE_SCALES = (0.0, 1.0, 10.0, 1e3, 1e6)
"""Magnitudes of the probe inputs: zero, typical, and far beyond any normaliser's clip (saturated outputs)."""


def load_contract(path: str | Path) -> Contract:
    """Read and validate the deployment contract stored in an exported ONNX file.

    Args:
        path: ONNX file written by ``policies.nets.export.export_onnx``.

    Returns:
        The contract.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        PolicyFileError: ``path`` is not an ONNX model.
        ContractError: The model carries no contract, or a malformed one.
    """
    return _read_contract(_open_session(Path(path), None, 1), Path(path))


class OnnxPolicy:
    """An exported policy, verified against its contract, that maps robot signals to commands.

    Args:
        path: ONNX file written by export.
        num_envs: Batch size ``N`` (robots or worlds queried together; 1 on a robot).
        providers: onnxruntime execution providers (default: CPU only, deterministic).
        intra_op_threads: Threads onnxruntime may use inside one operator (1 keeps latency predictable).
        control_period_s: Period at which the caller will query the policy, s (default: the contract's). Integral
            observation terms integrate over it. A period other than the trained one is the integrator's decision:
            measure it first (``robot-rl eval RUN --control-rate HZ``).

    Attributes:
        contract: The deployment contract read from the file.
        control_period_s: The period the policy is queried at, s.
        num_envs: Batch size ``N``.
        obs_dim: Policy input size.
        num_actions: Command size ``A``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        PolicyFileError: ``path`` is not an ONNX model.
        ContractError: The contract is missing or malformed, or the graph does not match it.
    """

    def __init__(
        self,
        path: str | Path,
        num_envs: int = 1,
        providers: Sequence[str] | None = None,
        intra_op_threads: int = 1,
        control_period_s: float | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if control_period_s is not None and not (math.isfinite(control_period_s) and control_period_s > 0):
            raise ValueError(f"control_period_s must be a positive number of seconds, got {control_period_s}")
        if control_period_s is not None and control_period_s < MIN_CONTROL_PERIOD_S:
            raise ValueError(f"control_period_s must be >= {MIN_CONTROL_PERIOD_S:g} s (10 kHz), got {control_period_s}")
        self.path = Path(path)
        self.num_envs = num_envs
        self._session = _open_session(self.path, providers, intra_op_threads)
        self.contract = _read_contract(self._session, self.path)
        self._verify_graph()
        self.obs_dim = self.contract.obs_dim
        self.num_actions = self.contract.action.size
        self.control_period_s = self.contract.control_period_s if control_period_s is None else control_period_s
        self._builder = ObservationBuilder.for_contract(self.contract, num_envs, self.control_period_s)
        self._sources = {t.source for t in self.contract.observation}
        self._scales = np.concatenate([np.full(t.size, t.scale, np.float32) for t in self.contract.observation])
        a = self.contract.action
        self._offset = np.asarray(a.offset, dtype=np.float32)
        self._scale = np.asarray(a.scale, dtype=np.float32)
        self._low = np.asarray(a.low, dtype=np.float32)
        self._high = np.asarray(a.high, dtype=np.float32)
        self._ref: tuple[int, int, float] | None = None
        if a.reference:
            self._ref = self.contract.reference_slice()
        self._last_reference = np.zeros((num_envs, a.size), dtype=np.float32)
        self._verify_action_mapping()

    def _verify_graph(self) -> None:
        """Check the graph's input and output against the contract (one command per query)."""
        if self.contract.chunk is not None:
            raise ContractError(
                f"{self.path} is an action-chunk policy (contract section 'chunk'); "
                "run it with policies.runtime.chunking.ChunkedOnnxPolicy"
            )
        _verify_graph(self._session, self.contract, self.num_envs)

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Start new episodes for robots in ``mask`` (bool ``[N]``; all if ``None``).

        The next sample of each masked robot fills its whole observation history.
        """
        self._builder.reset(mask)

    def observation(self, signals: Mapping[str, Any]) -> np.ndarray:
        """Build the policy input from named robot signals and advance the observation histories.

        Args:
            signals: ``{source: [N, size]}`` raw signals in SI units, one per observation term's ``source``;
                ``last_action`` is the previous command in normalised units (:meth:`normalized_action`).

        Returns:
            ``[N, obs_dim]`` float32 policy input.

        Raises:
            ContractError: A signal is missing, is not a real-valued array, has the wrong shape, or holds a
                non-finite value (also after scaling to float32). Nothing is pushed into the histories then.
        """
        return np.asarray(self._builder(self.check_signals(signals)), dtype=np.float32)

    def check_signals(self, signals: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Validate raw robot signals against the contract; returns them as float32 arrays ``{source: [N, size]}``.

        Raises:
            ContractError: Naming the first signal that is missing, of a wrong dtype (bool, complex, object,
                text), of a wrong shape, or not finite.
        """
        if not isinstance(signals, Mapping):
            raise ContractError(f"signals must be a mapping {{source: array}}, got {type(signals).__name__}")
        out: dict[str, np.ndarray] = {}
        for t in self.contract.observation:
            if t.source not in signals:
                raise ContractError(
                    f"observation term '{t.name}' needs signal '{t.source}', which was not provided; "
                    f"given: {sorted(map(str, signals))}"
                )
            x = _real_array(signals[t.source], f"signal '{t.source}'")
            if x.shape != (self.num_envs, t.size):
                raise ContractError(
                    f"signal '{t.source}' has shape {x.shape}, "
                    f"observation term '{t.name}' expects {(self.num_envs, t.size)}"
                )
            out[t.source] = x
        with np.errstate(over="ignore", invalid="ignore"):  # one check of every scaled value; on failure, find it
            scaled = np.concatenate([out[t.source] for t in self.contract.observation], axis=1) * self._scales
        if not np.isfinite(scaled).all():
            for t in self.contract.observation:
                with np.errstate(over="ignore", invalid="ignore"):
                    value = out[t.source] * np.float32(t.scale)
                _require_finite(value, f"signal '{t.source}' (scaled by {t.scale:g}, float32)")
        return out

    def __call__(self, signals: Mapping[str, Any]) -> np.ndarray:
        """Commands ``[N, A]`` float32 in contract units (within ``[low, high]``) for named robot signals.

        Raises:
            ContractError: A signal is invalid (see :meth:`check_signals`).
            UnsafeCommandError: The graph produced a non-finite or out-of-range command (never returned).
        """
        return self.run_obs(self.observation(signals))

    def run_obs(self, obs: np.ndarray) -> np.ndarray:
        """Run the graph on a ready-made policy input.

        Args:
            obs: ``[B, obs_dim]`` policy input (any batch size ``B``).

        Returns:
            ``[B, A]`` float32 commands in contract units.

        Raises:
            ContractError: ``obs`` is not a finite real array of shape ``[B, obs_dim]``.
            UnsafeCommandError: The graph produced a non-finite or out-of-range command (never returned).
        """
        x = np.ascontiguousarray(_real_array(obs, "policy input"))
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ContractError(f"policy input must have shape [B, {self.obs_dim}] (obs_dim), got {tuple(x.shape)}")
        _require_finite(x, "policy input")
        command = self._check_command(self._run(x))
        if self._ref is not None:
            self._last_reference = self.reference(x)
        return command

    def reference(self, obs: np.ndarray) -> np.ndarray:
        """The action reference ``[B, A]`` in a policy input (zeros for absolute commands)."""
        ref = np.zeros((obs.shape[0], self.num_actions), dtype=np.float32)
        if self._ref is not None:
            start, size, scale = self._ref
            ref[:, :size] = obs[:, start : start + size] / scale
        return ref

    def _run(self, x: np.ndarray) -> np.ndarray:
        (command,) = self._session.run([self.contract.output_name], {self.contract.input_name: x})
        return np.asarray(command, dtype=np.float32)

    def _check_command(self, command: np.ndarray) -> np.ndarray:
        """Return ``command`` if it is finite and within ``[low, high]``; raise :class:`UnsafeCommandError`."""
        names = self.contract.action.names
        if command.ndim != 2 or command.shape[1] != self.num_actions:
            raise UnsafeCommandError(
                f"the graph returned commands of shape {command.shape}, expected [B, {self.num_actions}]"
            )
        bad = ~np.isfinite(command)
        if bad.any():
            j = int(np.nonzero(bad)[1][0])
            raise UnsafeCommandError(f"the graph returned a non-finite command for '{names[j]}'; nothing was sent")
        outside = (command < self._low) | (command > self._high)
        if outside.any():
            row, j = (int(v[0]) for v in np.nonzero(outside))
            raise UnsafeCommandError(
                f"the graph returned {float(command[row, j]):g} for '{names[j]}', outside the contract's "
                f"[{float(self._low[j]):g}, {float(self._high[j]):g}]; nothing was sent"
            )
        return command

    def normalized_action(self, command: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
        """Map commands back to normalised actions (the ``last_action`` signal of the next step).

        Args:
            command: ``[..., A]`` commands in contract units.
            reference: For relative commands (``action.reference``), the reference they were computed from
                ``[..., A]``; default: the one of the last :meth:`run_obs` call (the command it returned).

        Returns:
            ``[..., A]`` float32 ``clip((command - offset - reference) / scale, -1, 1)`` (scales are positive).

        Raises:
            ContractError: ``command`` is not a finite real array ``[..., A]``.
        """
        c = _real_array(command, "command")
        if c.ndim < 1 or c.shape[-1] != self.num_actions:
            raise ContractError(f"command must have shape [..., {self.num_actions}], got {c.shape}")
        _require_finite(c, "command")
        if self._ref is not None:
            ref = self._last_reference if reference is None else _real_array(reference, "reference")
            if ref.shape != c.shape:
                raise ContractError(f"reference has shape {ref.shape}, the command {c.shape}; they must match")
            _require_finite(ref, "reference")
            c = c - ref
        return np.clip((c - self._offset) / self._scale, -1.0, 1.0).astype(np.float32, copy=False)

    def self_test(self) -> np.ndarray:
        """Build an observation from all-zero signals and run it through the graph, checking every step.

        Exercises the observation builder (a fresh one: the policy's own histories are not touched), the graph
        and the output checks: the input has ``obs_dim`` finite values, the commands are finite, within
        ``[low, high]``, and :meth:`normalized_action` maps them back into ``[-1, 1]``.

        Returns:
            ``[N, A]`` commands for the all-zero signals.

        Raises:
            RuntimeError: Naming the step that failed.
        """
        signals = {t.source: np.zeros((self.num_envs, t.size), dtype=np.float32) for t in self.contract.observation}
        try:
            builder = ObservationBuilder.for_contract(self.contract, self.num_envs)
            obs = np.asarray(builder(self.check_signals(signals)), dtype=np.float32)
            if obs.shape != (self.num_envs, self.obs_dim):
                raise RuntimeError(f"observation shape {obs.shape}, expected {(self.num_envs, self.obs_dim)}")
            command = self.run_obs(obs)
            self.normalized_action(command)
        except ContractError as exc:
            raise RuntimeError(f"self-test failed: {exc}") from exc
        if command.shape != (self.num_envs, self.num_actions):
            raise RuntimeError(f"self-test: output shape {command.shape}, expected {(self.num_envs, self.num_actions)}")
        return command

    def _verify_action_mapping(self) -> None:
        """Probe the graph: its commands must be finite, within ``[low, high]``, and inverted by the contract.

        The exported graph ends in ``clip(offset + scale * clip(a, -1, 1), low, high)``. For every probe command
        ``c`` that the contract's mapping explains, re-applying it to ``normalized_action(c)`` gives back ``c``;
        a contract whose scale or offset differs from the graph's fails this on saturated (large) inputs.

        Raises:
            ContractError: Naming the command and what does not match.
        """
        batch = self._session.get_inputs()[0].shape[0]
        rows = batch if isinstance(batch, int) else 64
        rng = np.random.default_rng(PROBE_SEED)
        names = self.contract.action.names
        tol = 1e-4 * np.maximum(self._scale, np.abs(self._offset)) + 1e-6
        for magnitude in PROBE_SCALES:
            x = (magnitude * rng.standard_normal((rows, self.obs_dim))).astype(np.float32)
            command = self._run(x)
            try:
                self._check_command(command)
            except UnsafeCommandError as exc:
                raise ContractError(f"the graph does not honour the contract's action limits: {exc}") from None
            ref = self.reference(x)
            again = self._offset + ref + self._scale * self.normalized_action(command, ref)
            again = np.clip(again, self._low, self._high)
            err = np.abs(again - command) - (tol + 1e-6 * np.abs(ref))  # float32 rounding of large references
            if (err > 0).any():
                row, j = (int(v[0]) for v in np.nonzero(err > 0))
                offset, scale = float(self._offset[j]), float(self._scale[j])
                raise ContractError(
                    f"the contract's action mapping (offset {offset:g}, scale {scale:g}) does not explain "
                    f"the graph's command {float(command[row, j]):g} for '{names[j]}'"
                )


def _real_array(value: Any, what: str) -> np.ndarray:
    """``value`` as float32, refusing bool, complex, object and text arrays by name."""
    if type(value) is np.ndarray and value.dtype == np.float32:  # the common case on the robot: no copy
        return value
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged nested lists and the like
        raise ContractError(f"{what} is not an array: {exc}") from None
    if arr.dtype.kind not in "fiu":
        raise ContractError(f"{what} has dtype {arr.dtype}; expected real numbers (float or int)")
    with np.errstate(over="ignore"):
        return arr.astype(np.float32)


def _require_finite(x: np.ndarray, what: str) -> None:
    if np.isfinite(x).all():
        return
    bad = ~np.isfinite(x)
    if bad.any():
        index = tuple(int(i[0]) for i in np.nonzero(bad))
        raise ContractError(f"{what} holds a non-finite value at index {index}; nothing was run")


def _open_session(path: Path, providers: Sequence[str] | None, intra_op_threads: int) -> ort.InferenceSession:
    if not path.exists():
        raise FileNotFoundError(f"policy file not found: {path}")
    if not path.is_file():
        raise PolicyFileError(f"policy path is not a file: {path}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only; failures are raised below with context
    try:
        return ort.InferenceSession(
            str(path), sess_options=options, providers=list(providers or ["CPUExecutionProvider"])
        )
    except Exception as exc:  # onnxruntime raises its own exception types (InvalidProtobuf, Fail, ...)
        raise PolicyFileError(f"{path} is not a valid ONNX model: {exc}") from exc


def _read_contract(session: ort.InferenceSession, path: Path) -> Contract:
    metadata = session.get_modelmeta().custom_metadata_map
    if METADATA_KEY not in metadata:
        raise ContractError(
            f"{path} carries no deployment contract (metadata key '{METADATA_KEY}' missing; "
            f"keys present: {sorted(metadata)}); export it with policies.nets.export.export_onnx"
        )
    try:
        return Contract.from_json(metadata[METADATA_KEY])
    except ContractError as exc:
        raise ContractError(f"{path}: malformed deployment contract: {exc}") from exc


def _verify_graph(session: ort.InferenceSession, contract: Contract, num_envs: int) -> None:
    """Check the graph's single input and output against the contract's names and sizes."""
    inputs, outputs = session.get_inputs(), session.get_outputs()
    _check_port("input", inputs, contract.input_name, "obs_dim", contract.obs_dim, num_envs)
    _check_port("output", outputs, contract.output_name, "action.size", contract.action.size, num_envs)


def _check_port(kind: str, ports: Sequence[Any], name: str, what: str, size: int, num_envs: int) -> None:
    names = [p.name for p in ports]
    if len(ports) != 1 or names[0] != name:
        raise ContractError(f"model {kind}s are {names}, contract expects exactly one named '{name}'")
    port = ports[0]
    if port.type != "tensor(float)":
        raise ContractError(f"model {kind} '{name}' has type {port.type}, expected tensor(float)")
    shape = list(port.shape)
    if len(shape) != 2:
        raise ContractError(f"model {kind} '{name}' has shape {shape}, expected [batch, {size}] ({what})")
    batch, width = shape
    if isinstance(width, int) and width != size:
        raise ContractError(f"model {kind} '{name}' has width {width}, but the contract {what} is {size}")
    if isinstance(batch, int) and batch != num_envs:
        raise ContractError(f"model {kind} '{name}' has a fixed batch of {batch}, but num_envs is {num_envs}")
