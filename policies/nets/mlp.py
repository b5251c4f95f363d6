"""Multilayer perceptrons."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"elu": nn.ELU, "tanh": nn.Tanh, "relu": nn.ReLU, "silu": nn.SiLU}


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, activation: str, out_gain: float = 1.0) -> nn.Sequential:
    """``in_dim -> hidden... -> out_dim`` with ``activation`` between layers and orthogonal initialisation.

    Args:
        in_dim: Input size.
        hidden: Hidden layer sizes.
        out_dim: Output size.
        activation: One of :data:`ACTIVATIONS`.
        out_gain: Orthogonal gain of the last layer (small for policy means, 1 for values).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{activation}'; choose one of {', '.join(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden]
    for a, b in itertools.pairwise(sizes):
        layers += [_init(nn.Linear(a, b), 2**0.5), ACTIVATIONS[activation]()]
    layers.append(_init(nn.Linear(sizes[-1], out_dim), out_gain))
    return nn.Sequential(*layers)


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
