"""An rsl_rl checkpoint's actor as an exportable robot-rl actor (no ``rsl-rl-lib`` needed to read it).

``rsl-rl-lib`` 5.x's ``OnPolicyRunner.save`` writes ``model_<it>.pt``: a dict whose ``actor_state_dict`` holds an
``MLPModel``'s weights::

    obs_normalizer._mean [1, D] | _var [1, D] | _std [1, D] | count      (only with obs_normalization)
    mlp.<i>.weight [out, in] | mlp.<i>.bias [out]                        (Linear layers; activations between)
    distribution.std_param [A] or distribution.log_std_param [A]         (GaussianDistribution)

The deterministic action is ``mlp((obs - mean) / (std + 0.01))`` (rsl_rl's ``EmpiricalNormalization`` with its
default ``eps``), the ``GaussianDistribution``'s mean (its std is a parameter of its own, as robot-rl's). Other
outputs (heteroscedastic, Beta: no std parameter) and recurrent / CNN actors are refused by name. The activation is
not in the file: it is rsl_rl's default, ``elu``, unless given.

The file is read with ``torch.load(weights_only=True)``: tensors and plain containers only, no code.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn

from policies.nets.export import first_non_finite
from policies.nets.mlp import ACTIVATIONS

RSL_RL_NORMALIZER_EPS = 1e-2
"""rsl_rl's ``EmpiricalNormalization`` default ``eps``: added to the standard deviation."""
_LAYER = re.compile(r"mlp\.(\d+)\.(weight|bias)")


class RslRlCheckpointError(ValueError):
    """An rsl_rl checkpoint that robot-rl cannot read as an MLP actor (named in the message)."""


class RslRlActor(nn.Module):
    """The actor of an rsl_rl ``MLPModel``: normaliser, MLP and the deterministic output (see the module docstring).

    Args:
        layers: ``(weight [out, in], bias [out])`` of each Linear layer, input first.
        activation: Between the layers: one of ``elu``, ``tanh``, ``relu``, ``silu``.
        num_actions: Action size ``A`` (what the last layer outputs).
        mean: Normaliser mean ``[D]`` (``None``: no normalisation).
        std: Normaliser standard deviation ``[D]``.

    Shapes: ``obs [B, D] -> action [B, A]`` (normalised units, unclipped).
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self,
        layers: list[tuple[torch.Tensor, torch.Tensor]],
        activation: str,
        num_actions: int,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise RslRlCheckpointError(f"unknown activation '{activation}'; choose one of {', '.join(ACTIVATIONS)}")
        modules: list[nn.Module] = []
        for i, (w, b) in enumerate(layers):
            linear = nn.Linear(w.shape[1], w.shape[0])
            linear.weight.data.copy_(w)
            linear.bias.data.copy_(b)
            modules += [linear] + ([ACTIVATIONS[activation]()] if i < len(layers) - 1 else [])
        self.mlp = nn.Sequential(*modules)
        dim = layers[0][0].shape[1]
        self.register_buffer("mean", torch.zeros(dim) if mean is None else mean.reshape(dim).float())
        self.register_buffer("std", torch.ones(dim) if std is None else std.reshape(dim).float())
        self.eps = 0.0 if mean is None else RSL_RL_NORMALIZER_EPS
        self._num_actions = num_actions

    @property
    def obs_dim(self) -> int:
        """Size ``D`` of the actor input."""
        return self.mean.numel()

    @property
    def num_actions(self) -> int:
        """Action size ``A``."""
        return self._num_actions

    def action_mean(self, actor_obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``[B, A]`` from raw observations ``[B, D]``."""
        return self.mlp((actor_obs - self.mean) / (self.std + self.eps))

    def first_non_finite(self) -> str | None:
        """Name of the first parameter or buffer holding NaN or inf, or ``None``."""
        return first_non_finite(self)

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor], activation: str = "elu", what: str = "") -> RslRlActor:
        """Read an ``MLPModel`` actor's ``state_dict`` (see the module docstring).

        Raises:
            RslRlCheckpointError: Not an MLP actor with a Gaussian output, or inconsistent layer shapes (named).
        """
        where = f"{what}: " if what else ""
        unknown = [k for k in state if not (_LAYER.fullmatch(k) or k.startswith(("obs_normalizer.", "distribution.")))]
        if unknown:
            raise RslRlCheckpointError(
                f"{where}the actor has parameters {unknown[:3]} that an MLP actor does not (recurrent or CNN actors "
                "are not read)"
            )
        for key, value in state.items():
            if not isinstance(value, torch.Tensor) or (not value.is_floating_point() and key != "obs_normalizer.count"):
                raise RslRlCheckpointError(f"{where}actor entry '{key}' is not a floating-point tensor")
        indices = sorted({int(m.group(1)) for k in state if (m := _LAYER.fullmatch(k))})
        if not indices:
            raise RslRlCheckpointError(f"{where}the actor has no mlp.<i>.weight layers")
        layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        for i in indices:
            w, b = state.get(f"mlp.{i}.weight"), state.get(f"mlp.{i}.bias")
            if w is None or b is None or w.dim() != 2 or b.shape != (w.shape[0],):
                raise RslRlCheckpointError(f"{where}layer mlp.{i} is not a Linear layer (weight [out, in], bias [out])")
            if layers and layers[-1][0].shape[0] != w.shape[1]:
                raise RslRlCheckpointError(
                    f"{where}layer mlp.{i} takes {w.shape[1]} inputs, the layer before gives {layers[-1][0].shape[0]}"
                )
            layers.append((w.float(), b.float()))
        std_param = state.get("distribution.std_param", state.get("distribution.log_std_param"))
        if std_param is None:
            kinds = sorted(k for k in state if k.startswith("distribution."))
            raise RslRlCheckpointError(
                f"{where}the actor's output is not a GaussianDistribution with its own std (distribution "
                f"parameters {kinds}); only those actors export"
            )
        num_actions = std_param.numel()
        out = layers[-1][0].shape[0]
        if out != num_actions:
            raise RslRlCheckpointError(f"{where}the last layer gives {out} values for {num_actions} actions")
        mean, std = state.get("obs_normalizer._mean"), state.get("obs_normalizer._std")
        dim = layers[0][0].shape[1]
        for name, t in (("_mean", mean), ("_std", std)):
            if t is not None and t.numel() != dim:
                raise RslRlCheckpointError(f"{where}obs_normalizer.{name} has {t.numel()} values for {dim} inputs")
        if (mean is None) != (std is None):
            raise RslRlCheckpointError(f"{where}the observation normaliser is incomplete (_mean and _std are needed)")
        return cls(layers, activation, num_actions, mean, std)

    @classmethod
    def load(cls, path: str | Path, activation: str = "elu") -> RslRlActor:
        """Read the actor of an rsl_rl checkpoint file (``model_<it>.pt``).

        Raises:
            RslRlCheckpointError: Unreadable, not an rsl_rl checkpoint, or not an MLP actor (named).
        """
        try:
            data = torch.load(Path(path), map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise RslRlCheckpointError(f"rsl_rl checkpoint '{path}' does not exist") from None
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RslRlCheckpointError(f"'{path}' is not a readable torch checkpoint ({first})") from None
        if not isinstance(data, dict) or not isinstance(data.get("actor_state_dict"), dict):
            raise RslRlCheckpointError(
                f"'{path}' is not an rsl_rl 5.x checkpoint (no 'actor_state_dict'; rsl_rl < 4 wrote "
                "'model_state_dict', which is not read)"
            )
        return cls.from_state_dict(data["actor_state_dict"], activation, what=str(path))
