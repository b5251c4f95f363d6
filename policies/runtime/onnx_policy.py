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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from policies.runtime.contract import METADATA_KEY, Contract, ContractError
from policies.runtime.observation import ObservationBuilder

LAST_ACTION_SIGNAL = "last_action"
"""Signal of the previous command, in normalised units ``[-1, 1]`` (:meth:`OnnxPolicy.normalized_action`)."""


class PolicyFileError(ValueError):
    """A policy file exists but is not a loadable ONNX model."""


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

    Attributes:
        contract: The deployment contract read from the file.
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
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.path = Path(path)
        self.num_envs = num_envs
        self._session = _open_session(self.path, providers, intra_op_threads)
        self.contract = _read_contract(self._session, self.path)
        _verify_graph(self._session, self.contract, num_envs)
        self.obs_dim = self.contract.obs_dim
        self.num_actions = self.contract.action.size
        self._builder = ObservationBuilder(self.contract.observation, num_envs, xp=np)
        self._sources = {t.source for t in self.contract.observation}
        a = self.contract.action
        self._offset = np.asarray(a.offset, dtype=np.float32)
        self._scale = np.asarray(a.scale, dtype=np.float32)
        self._low = np.asarray(a.low, dtype=np.float32)
        self._high = np.asarray(a.high, dtype=np.float32)

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
            ContractError: A signal is missing or has the wrong shape.
        """
        arrays = {k: (np.asarray(v, dtype=np.float32) if k in self._sources else v) for k, v in signals.items()}
        return np.asarray(self._builder(arrays), dtype=np.float32)

    def __call__(self, signals: Mapping[str, Any]) -> np.ndarray:
        """Commands ``[N, A]`` float32 in contract units (within ``[low, high]``) for named robot signals."""
        return self.run_obs(self.observation(signals))

    def run_obs(self, obs: np.ndarray) -> np.ndarray:
        """Run the graph on a ready-made policy input.

        Args:
            obs: ``[B, obs_dim]`` policy input (any batch size ``B``).

        Returns:
            ``[B, A]`` float32 commands in contract units.

        Raises:
            ContractError: ``obs`` does not have shape ``[B, obs_dim]``.
        """
        x = np.ascontiguousarray(obs, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ContractError(f"policy input must have shape [B, {self.obs_dim}] (obs_dim), got {tuple(x.shape)}")
        (command,) = self._session.run([self.contract.output_name], {self.contract.input_name: x})
        return np.asarray(command, dtype=np.float32)

    def normalized_action(self, command: np.ndarray) -> np.ndarray:
        """Map commands back to normalised actions (the ``last_action`` signal of the next step).

        Args:
            command: ``[..., A]`` commands in contract units.

        Returns:
            ``[..., A]`` float32 ``clip((command - offset) / scale, -1, 1)`` (0 where ``scale == 0``).
        """
        c = np.asarray(command, dtype=np.float32)
        a = np.divide(c - self._offset, self._scale, out=np.zeros_like(c), where=self._scale != 0)
        return np.clip(a, -1.0, 1.0).astype(np.float32, copy=False)

    def self_test(self) -> np.ndarray:
        """Run one all-zero input through the graph and check the commands are finite and within the limits.

        Does not touch the observation histories.

        Returns:
            ``[N, A]`` commands for the zero input.

        Raises:
            RuntimeError: A command is not finite or lies outside ``[low, high]``.
        """
        command = self.run_obs(np.zeros((self.num_envs, self.obs_dim), dtype=np.float32))
        if command.shape != (self.num_envs, self.num_actions):
            raise RuntimeError(f"self-test: output shape {command.shape}, expected {(self.num_envs, self.num_actions)}")
        if not np.isfinite(command).all():
            raise RuntimeError(f"self-test: non-finite command {command.tolist()} for a zero input")
        outside = (command < self._low) | (command > self._high)
        if outside.any():
            names = sorted({self.contract.action.names[j] for j in np.nonzero(outside)[1]})
            raise RuntimeError(f"self-test: commands {names} outside [low, high] for a zero input")
        return command


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
