"""ONNX export of the actor together with its deployment contract.

The exported graph is the whole robot-side policy: observation normaliser, actor MLP, clip to ``[-1, 1]``
and the contract's action scaling and limits, so a robot feeds raw (contract-scaled) observations and
receives commands in SI units (N m, rad, RPM, ...)::

    obs [B, obs_dim] ─► normalise ─► actor MLP ─► clip(-1, 1) ─► offset + scale * a ─► clip(low, high)
                                                                              ─► command [B, A]

With ``action.reference`` (relative commands) the reference signal's slice of ``obs`` is added before the clip.

The contract is stored as JSON in the file's ``metadata_props`` under
:data:`~policies.runtime.contract.METADATA_KEY` and mirrored as ``contract.yaml`` beside it. Both files
are written atomically.
"""

from __future__ import annotations

import copy
import tempfile
import warnings
from pathlib import Path
from typing import Protocol

import onnx
import onnx.checker
import onnx.helper
import torch
from torch import nn

from policies.nets.chunk import ChunkPolicy
from policies.runtime.contract import METADATA_KEY, Contract, ContractError
from policies.runtime.files import atomic_path

OPSET_VERSION = 17
PRODUCER_NAME = "robot-rl"
CONTRACT_YAML = "contract.yaml"


class Actor(Protocol):
    """What export needs of a trained actor (a :class:`~policies.nets.actor_critic.ActorCritic`, or an rsl_rl actor
    read by :mod:`policies.nets.rsl_rl`): an ``nn.Module`` with its input and output sizes and its deterministic
    action from raw observations ``[B, obs_dim] -> [B, num_actions]`` (normalised units, unclipped)."""

    @property
    def obs_dim(self) -> int: ...

    @property
    def num_actions(self) -> int: ...

    def action_mean(self, actor_obs: torch.Tensor) -> torch.Tensor: ...

    def first_non_finite(self) -> str | None: ...


class DeployedActor(nn.Module):
    """Deterministic robot-side policy: raw observations in, commands in contract units out.

    Args:
        model: Trained actor (:class:`Actor`: an actor-critic's normaliser and actor MLP; its critic is ignored).
        contract: Deployment contract; ``contract.action`` gives ``offset``, ``scale``, ``low``, ``high``.

    Shapes: ``obs: [B, obs_dim] float32 -> command: [B, A] float32``.
    """

    offset: torch.Tensor
    scale: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, model: Actor, contract: Contract) -> None:
        super().__init__()
        self.policy = model
        a = contract.action
        for name in ("offset", "scale", "low", "high"):
            self.register_buffer(name, torch.tensor(getattr(a, name), dtype=torch.float32))
        self.reference: tuple[int, int, float] | None = None
        if a.reference:
            start, size, scale = contract.reference_slice()
            self.reference = (start, size, scale)
        self.num_commands = a.size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Commands ``[B, A]`` (contract units, in ``[low, high]``) for raw observations ``[B, obs_dim]``."""
        a = self.policy.action_mean(obs).clamp(-1.0, 1.0)
        command = self.offset + self.scale * a
        if self.reference is not None:  # relative commands: add the reference signal's newest sample, unscaled
            start, size, scale = self.reference
            ref = obs[:, start : start + size] / scale
            if size < self.num_commands:
                ref = torch.cat((ref, torch.zeros_like(command[:, size:])), 1)
            command = command + ref
        return torch.minimum(torch.maximum(command, self.low), self.high)


def check_compatible(model: Actor, contract: Contract) -> None:
    """Raise :class:`ContractError` unless ``contract`` describes ``model``'s actor input and output sizes."""
    obs_dim, num_actions = model.obs_dim, model.num_actions
    if contract.obs_dim != obs_dim:
        raise ContractError(
            f"contract obs_dim is {contract.obs_dim} (terms {[t.name for t in contract.observation]}), "
            f"but the actor takes {obs_dim} inputs"
        )
    if contract.action.size != num_actions:
        raise ContractError(f"contract action.size is {contract.action.size}, but the actor has {num_actions} actions")
    if contract.normalization != "in_graph":
        raise ContractError(
            f"contract normalization is '{contract.normalization}', but export bakes the normaliser "
            "into the graph ('in_graph')"
        )


def to_onnx_model(model: Actor, contract: Contract) -> onnx.ModelProto:
    """Trace the deployed actor into a checked ONNX model carrying the contract (in memory).

    ``model`` is left untouched: a CPU copy in eval mode is exported.

    Args:
        model: Trained actor (an actor-critic, or an rsl_rl actor; any device, any mode).
        contract: Deployment contract matching the actor's sizes.

    Returns:
        The ONNX model: input ``contract.input_name`` ``[batch, obs_dim]``, output ``contract.output_name``
        ``[batch, A]``, both float32, with the contract JSON under ``METADATA_KEY``.

    Raises:
        ContractError: The contract does not fit the model.
    """
    contract.validate()
    check_compatible(model, contract)
    if (bad := model.first_non_finite()) is not None:
        raise ContractError(f"the model's '{bad}' holds non-finite values; refusing to export it")
    assert isinstance(model, nn.Module)
    actor = DeployedActor(copy.deepcopy(model).cpu().float(), contract).eval().requires_grad_(False)
    dynamic = {contract.input_name: {0: "batch"}, contract.output_name: {0: "batch"}}
    proto = _trace(actor, {contract.input_name: torch.zeros(2, contract.obs_dim)}, contract.output_name, dynamic)
    return _finish(proto, contract, "policy")


def _trace(
    module: nn.Module, inputs: dict[str, torch.Tensor], output: str, dynamic: dict[str, dict[int, str]]
) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory(prefix="robot-rl-export-") as tmp, warnings.catch_warnings():
        # The TorchScript exporter announces its successor; it is still the fast, dependency-free path.
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript", DeprecationWarning)
        warnings.filterwarnings("ignore", "The feature will be removed", DeprecationWarning, "torch.onnx")
        # Shape checks and the unrolled sampler's loops are constants of the traced graph, on purpose.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            Path(tmp) / "policy.onnx",
            dynamo=False,
            opset_version=OPSET_VERSION,
            input_names=list(inputs),
            output_names=[output],
            dynamic_axes=dynamic,
        )
        return onnx.load(Path(tmp) / "policy.onnx")


def _finish(proto: onnx.ModelProto, contract: Contract, what: str) -> onnx.ModelProto:
    proto.producer_name = PRODUCER_NAME
    proto.producer_version = ""
    proto.doc_string = f"robot-rl {what} for task '{contract.task}' ({contract.action.kind} commands)"
    onnx.helper.set_model_props(proto, {METADATA_KEY: contract.to_json()})
    onnx.checker.check_model(proto, full_check=True)
    return proto


def chunk_to_onnx_model(policy: ChunkPolicy, contract: Contract) -> onnx.ModelProto:
    """Trace an action-chunk policy's whole sampler into a checked ONNX model carrying the contract.

    The graph is ``obs [B, To, obs_dim]`` (+ ``noise [B, Tp, A]`` for diffusion and flow matching, + one ``uint8
    [B, To, H, W, 3]`` per camera of ``contract.chunk.cameras``, + the instruction embedding ``[B, D_l]`` of a
    language-conditioned policy) -> ``contract.output_name`` ``[B, Tp, A]`` in normalised units:
    normalisation, image encoders, every denoising step (``contract.chunk.sampler["steps"]``, unrolled) and the
    final clip are inside. See ``policies.runtime.chunking`` for how a robot runs it.

    Raises:
        ContractError: The contract has no ``chunk`` section or does not fit the policy.
    """
    contract.validate()
    c = contract.chunk
    if c is None:
        raise ContractError("an action-chunk policy needs a contract with a 'chunk' section")
    h = policy.horizons
    if (c.obs_horizon, c.pred_horizon, c.action_horizon) != (h.obs, h.pred, h.action):
        raise ContractError(
            f"contract chunk horizons {c.obs_horizon}/{c.pred_horizon}/{c.action_horizon} differ "
            f"from the policy's {h.obs}/{h.pred}/{h.action}"
        )
    if contract.obs_dim != policy.obs_dim or contract.action.size != policy.action_dim:
        raise ContractError(
            f"contract obs_dim {contract.obs_dim} / action.size {contract.action.size} differ from "
            f"the policy's {policy.obs_dim} / {policy.action_dim}"
        )
    if list(c.cameras) != list(policy.cameras):
        raise ContractError(f"contract chunk.cameras {list(c.cameras)} differ from the policy's {list(policy.cameras)}")
    for cam, size in policy.cameras.items():
        if c.image_shape(cam)[:2] != size:
            raise ContractError(f"contract camera '{cam}' is {c.image_shape(cam)[:2]}, the policy sees {size}")
    if int(c.language.get("dim", 0)) != policy.language_dim:
        raise ContractError(
            f"contract chunk.language is for {c.language.get('dim', 0)} values, the policy reads {policy.language_dim}"
        )
    if (bad := first_non_finite(policy)) is not None:
        raise ContractError(f"the policy's '{bad}' holds non-finite values; refusing to export it")
    copy_ = copy.deepcopy(policy).cpu().float().eval().requires_grad_(False)
    steps = c.sampler.get("inference_steps")
    module = copy_.export_module(steps) if steps else copy_.export_module()  # type: ignore[call-arg]
    inputs = copy_.export_inputs(2)
    names = [
        contract.input_name,
        *([c.noise_input] if c.noise_input else []),
        *(v["input"] for v in c.cameras.values()),
        *([c.language["input"]] if c.language else []),
        *([c.guide["actions"], c.guide["weights"]] if c.guide else []),
    ]
    if len(names) != len(inputs):
        raise ContractError(f"the policy takes inputs {list(inputs)}, the contract names {names}")
    inputs = dict(zip(names, inputs.values(), strict=True))
    dynamic = {n: {0: "batch"} for n in [*names, contract.output_name]}
    return _finish(_trace(module, inputs, contract.output_name, dynamic), contract, f"{policy.kind} chunk policy")


def first_non_finite(module: nn.Module) -> str | None:
    """Name of the first parameter or buffer of ``module`` holding NaN or inf, or ``None``."""
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def write_onnx(proto: onnx.ModelProto, contract: Contract, out_dir: str | Path, name: str = "policy.onnx") -> Path:
    """Write ``proto`` and ``contract.yaml`` into ``out_dir`` atomically (both or neither)."""
    out = Path(out_dir)
    data = proto.SerializeToString()
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    with atomic_path(out / CONTRACT_YAML) as yaml_tmp, atomic_path(path) as onnx_tmp:
        contract.save_yaml(yaml_tmp)
        onnx_tmp.write_bytes(data)
    return path


def export_onnx(model: Actor, contract: Contract, out_dir: str | Path, name: str = "policy.onnx") -> Path:
    """Export the actor of ``model`` to ``out_dir/name`` and mirror the contract to ``out_dir/contract.yaml``.

    Both files are staged beside their destination and moved into place only after the model has been
    traced and checked, so a failed or interrupted export leaves any previous export intact and no partial
    files behind.

    Args:
        model: Trained actor (an actor-critic or an rsl_rl actor; not modified).
        contract: Deployment contract; its ``obs_dim`` and ``action.size`` must match the actor.
        out_dir: Destination folder (created if missing).
        name: File name of the ONNX model.

    Returns:
        Path of the written ONNX file.

    Raises:
        ContractError: The contract does not fit the model.
    """
    return write_onnx(to_onnx_model(model, contract), contract, out_dir, name)  # traced before anything is written
