"""The U-Net denoiser specialised for a sampler with a fixed list of diffusion steps, shaped for onnxruntime's CPU.

A deployed diffusion policy runs the same ``S`` denoising steps for every chunk, so the exported graph can be
cheaper than ``S`` calls of :class:`~policies.nets.diffusion.unet.ConditionalUnet1D` while computing the same
function (tests compare the exported sampler with ``diffusers``' loop):

- **FiLM split.** Each block's FiLM output is ``W_e mish(e_k) + W_o mish(o) + b``: the step part is a constant
  per step (computed here, once); the observation part of all blocks is one matrix product per chunk, and one
  ``Split`` hands every block of every step its terms.
- **Convolutions as 2-D with unit height.** onnxruntime runs ``Conv`` on 4-D tensors in its blocked NCHWc layout,
  about twice as fast as on 3-D tensors at these sizes (``bench/chunk_latency.py`` shows the whole-sampler effect).
  Features are ``[B, C, 1, T]`` inside; ``GroupNorm`` and the FiLM modulation are unchanged by the unit axis.
- **Mish from Exp, Log and Tanh** (:class:`ExportMish`): onnxruntime's CPU ``Softplus`` is several times slower.

Shapes: ``obs_terms(obs [B, To, D_o]) -> terms`` (a list per step); ``forward(x [B, D_a, 1, Tp], terms[i]) ->
[B, D_a, 1, Tp]``, the predicted noise at the ``i``-th step of the list.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TypeVar

import torch
from torch import nn

from policies.nets.diffusion.unet import ConditionalUnet1D

Film = tuple[torch.Tensor, torch.Tensor]
M = TypeVar("M", bound=nn.Module)


class ExportMish(nn.Mish):
    """Mish, ``x tanh(softplus(x))``, exported to ONNX as ``x * tanh(log(1 + exp(x)))``.

    Same function: for ``x > 88`` ``exp`` overflows to ``inf`` and ``tanh(inf) = 1`` gives ``x``, as Mish does; for
    very negative ``x`` both give ``0`` to float precision. In torch it is ``nn.Mish``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mish, element-wise."""
        if torch.onnx.is_in_onnx_export():
            return x * torch.tanh(torch.log(1 + torch.exp(x)))
        return super().forward(x)


class FixedStepUnet(nn.Module):
    """A copy of ``unet`` for the diffusion steps ``steps`` (see the module docstring); ``unet`` is not changed.

    The sampler keeps its chunk in the inner layout ``[B, D_a, 1, Tp]`` between steps (:meth:`inner`,
    :meth:`outer`), so no step pays for a transpose.

    Args:
        unet: The trained denoiser.
        steps: Diffusion step of each sampler iteration, in order.
    """

    def __init__(self, unet: ConditionalUnet1D, steps: Sequence[float]) -> None:
        super().__init__()
        self.net = _as_unit_height(copy.deepcopy(unet))
        linears = [block.film_linear for block in unet.blocks()]
        weight = torch.cat([linear.weight for linear in linears]).detach()  # [W, step_dim + cond_dim]
        self.obs_weight: torch.Tensor
        self.step_table: torch.Tensor
        self.register_buffer("obs_weight", weight[:, unet.step_dim :].clone(), persistent=False)  # [W, cond_dim]
        with torch.no_grad():  # step part + bias of every block's FiLM output, per step: [S, W]
            k = torch.tensor(list(steps), dtype=weight.dtype, device=weight.device)
            e = nn.functional.mish(unet.step(k))
            table = e @ weight[:, : unet.step_dim].T + torch.cat([linear.bias for linear in linears])
        self.register_buffer("step_table", table, persistent=False)
        self.sizes = [size for linear in linears for size in 2 * [linear.out_features // 2]] * len(steps)
        self.steps = len(steps)

    def obs_terms(self, obs: torch.Tensor) -> list[list[Film]]:
        """Every step's FiLM output, ``(scale, bias)`` ``[B, C, 1, 1]`` per block in ``unet.blocks()`` order, for
        the normalised observation window ``obs [B, To, D_o]``: one matrix product and one split per chunk."""
        terms = (nn.functional.mish(obs.flatten(1)) @ self.obs_weight.T)[:, None] + self.step_table  # [B, S, W]
        flat = terms.reshape(terms.shape[0], -1, 1, 1).split(self.sizes, dim=1)
        per_step = len(flat) // self.steps
        steps = [flat[i : i + per_step] for i in range(0, len(flat), per_step)]
        return [list(zip(step[0::2], step[1::2], strict=True)) for step in steps]

    @staticmethod
    def inner(x: torch.Tensor) -> torch.Tensor:
        """``[B, Tp, D_a] -> [B, D_a, 1, Tp]``."""
        return x.transpose(1, 2).unsqueeze(2)

    @staticmethod
    def outer(x: torch.Tensor) -> torch.Tensor:
        """``[B, D_a, 1, Tp] -> [B, Tp, D_a]``."""
        return x.squeeze(2).transpose(1, 2)

    def forward(self, x: torch.Tensor, films: Sequence[Film]) -> torch.Tensor:
        """Predicted noise ``[B, D_a, 1, Tp]`` for the noisy chunk ``x [B, D_a, 1, Tp]`` given one step's
        :meth:`obs_terms`."""
        return self.net.trunk(x, films)


def _as_unit_height(module: M) -> M:
    """Replace, in place, every ``Conv1d``/``ConvTranspose1d`` by the 2-D layer of kernel ``(1, k)`` that computes
    the same on ``[B, C, 1, T]``, and every ``nn.Mish`` by :class:`ExportMish`. Returns ``module``."""
    for name, child in module.named_children():
        if isinstance(child, nn.Conv1d | nn.ConvTranspose1d):
            setattr(module, name, _conv_2d(child))
        elif isinstance(child, nn.Mish):
            setattr(module, name, ExportMish())
        else:
            _as_unit_height(child)
    return module


def _conv_2d(conv: nn.Conv1d | nn.ConvTranspose1d) -> nn.Conv2d | nn.ConvTranspose2d:
    if conv.groups != 1 or conv.dilation != (1,) or conv.padding_mode != "zeros":
        raise ValueError(f"only plain convolutions have a unit-height twin here, not {conv}")
    assert isinstance(conv.padding, tuple)
    kind = nn.ConvTranspose2d if isinstance(conv, nn.ConvTranspose1d) else nn.Conv2d
    twin = kind(
        conv.in_channels,
        conv.out_channels,
        (1, conv.kernel_size[0]),
        stride=(1, conv.stride[0]),
        padding=(0, conv.padding[0]),
        bias=conv.bias is not None,
    )
    with torch.no_grad():
        twin.weight.copy_(conv.weight.unsqueeze(2))
        if conv.bias is not None and twin.bias is not None:
            twin.bias.copy_(conv.bias)
    return twin.to(conv.weight)
