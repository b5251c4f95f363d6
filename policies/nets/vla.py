"""Vision-language-action chunk policy: camera images, an instruction and proprioception -> an action chunk, sampled
by a flow-matching action expert (pi0, Black et al. 2024; SmolVLA, Shukor et al. 2025), at a size that trains from
scratch on a CPU and scales by config (``d_model``, ``layers``, ``expert_layers``).

Tokens of the prefix (computed once per chunk), each a linear map to ``d_model`` plus a learned embedding of its
slot::

    state token per observation step [To]      normalised proprioception (the contract's observation)
    image token per camera and step [To x C]   the camera's features (ImageEncoder: conv + spatial soft-argmax)
    instruction token [1]                      the frozen sentence embedding (policies.nets.language)
      or instruction tokens [L]                or the encoder's per-token outputs (``language_tokens`` L > 0:
                                               Octo's token-level conditioning; padding rows, all zero, are
                                               masked out of every attention)

A transformer encoder (``layers`` pre-norm blocks) fuses them. The action expert (``expert_layers`` blocks) holds
one token per action step of the chunk ``[Tp]`` (the noisy actions, a learned position and the flow time); in each
block the action tokens attend to the fused prefix and to each other (pi0's block-wise attention: the prefix never
attends to actions, so it is computed once and reused in every integration step).

Flow matching (rectified flow, Lipman et al. 2023; Liu et al. 2023), in normalised action units ``a``::

    x_tau = tau * a + (1 - tau) * eps,   eps ~ N(0, I),   target velocity  u = a - eps
    loss  = mean || v(x_tau, tau | prefix) - u ||^2,      tau = s * (1 - b),  b ~ Beta(1.5, 1),  s = 0.999

(pi0's time distribution: more weight on the noisier times). Sampling integrates ``dx/dtau = v`` from ``x_0 = eps``
to ``tau = 1`` with ``steps`` Euler steps (pi0: 10), then clips to ``[-1, 1]``; the exported graph is the same loop
unrolled (:class:`UnrolledFlow`).

**Inpainting** (real-time chunking, :mod:`policies.runtime.realtime`): a guide ``y [B, Tp, D_a]`` (the actions of
the chunk being executed that the new chunk overlaps) with weights ``w [B, Tp]`` in ``[0, 1]`` pulls the sample onto
the guide where ``w = 1`` and leaves it free where ``w = 0``: after each Euler step, to time ``tau'``, ::

    x <- x + w * (tau' * y + (1 - tau') * eps - x)

i.e. the guided actions are moved (by ``w``) onto the straight path from the sample's own noise ``eps`` to ``y``,
where a flow ending in ``y`` would be at ``tau'``; the free actions are integrated on, seeing the guided ones
(replacement inpainting on rectified-flow paths; a gradient-free stand-in for the guided inpainting of Black et al.
2025, "Real-Time Execution of Action Chunking Flow Policies", which needs a vector-Jacobian product per step that
an exported graph does not have). With ``w = 0`` the sampler is the plain one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from policies.nets.chunk import ChunkPolicy, Images
from policies.nets.diffusion.embedding import StepEmbedding
from policies.nets.diffusion.transformer import AttentionBlock

TIME_SCALE = 100.0
"""Flow time ``tau`` in ``[0, 1]`` is embedded as ``tau * TIME_SCALE`` (the sinusoids' range of a 100-step
diffusion schedule, :class:`~policies.nets.diffusion.embedding.StepEmbedding`)."""


@dataclass(frozen=True)
class FlowSettings:
    """The flow-matching sampler.

    Attributes:
        steps: Euler steps per chunk (evaluation and export).
        time_beta: ``(alpha, beta)`` of the Beta distribution ``b`` of training times ``tau = s (1 - b)``.
        time_max: ``s``, the largest training time (below 1: the velocity at ``tau = 1`` is never fitted).
    """

    steps: int = 10
    time_beta: tuple[float, float] = (1.5, 1.0)
    time_max: float = 0.999

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"flow steps must be >= 1, got {self.steps}")
        if min(self.time_beta) <= 0 or not 0 < self.time_max <= 1:
            raise ValueError(f"flow time_beta must be > 0 and time_max in (0, 1], got {self}")


def flow_target(action: torch.Tensor, noise: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The interpolant and its velocity: ``x_tau = tau a + (1 - tau) eps``, ``u = a - eps``.

    Shapes: ``action, noise [B, Tp, D_a]``, ``tau [B]`` -> ``(x_tau, u)`` both ``[B, Tp, D_a]``.
    """
    t = tau[:, None, None]
    return t * action + (1.0 - t) * noise, action - noise


Prefix = tuple[torch.Tensor, torch.Tensor | None]
"""The fused prefix ``[B, P, d]`` and the bias of its keys ``[B, 1, 1, P]`` (``None``: no padding to mask)."""

Guide = tuple[torch.Tensor, torch.Tensor]
"""Inpainting guide: ``(y [B, Tp, D_a], w [B, Tp])``: target actions (network units) and their weights in ``[0, 1]``
(module docstring)."""


def euler_integrate(velocity: Any, noise: torch.Tensor, steps: int, guide: Guide | None = None) -> torch.Tensor:
    """Integrate ``dx/dtau = velocity(x, tau [B])`` from ``x = noise`` at ``tau = 0`` to ``tau = 1`` in ``steps``
    equal Euler steps, inpainting ``guide`` after each step (module docstring)."""
    x, dt = noise, 1.0 / steps
    ones = torch.ones_like(noise[:, 0, 0])
    for i in range(steps):
        x = x + dt * velocity(x, ones * (i * dt))
        if guide is not None:
            tau, (y, w) = (i + 1) * dt, guide
            x = x + w[..., None] * (tau * y + (1.0 - tau) * noise - x)
    return x


class ExpertBlock(nn.Module):
    """Pre-norm block of the action expert: the action tokens attend to the prefix and themselves, then an MLP.

    Shapes: ``h [B, Tp, d]``, ``ctx [B, P, d]`` (the fused prefix), ``bias [B, 1, 1, P]`` (added to the logits of
    the prefix keys; ``None``: none) -> ``[B, Tp, d]``. Written out with matmul and softmax, as
    :class:`~policies.nets.diffusion.transformer.AttentionBlock`, so it traces to ONNX everywhere.
    """

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} must be divisible by heads {heads}")
        self.heads = heads
        self.norm = nn.LayerNorm(d_model)
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, h: torch.Tensor, ctx: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """One block."""
        b, t, d = h.shape
        x = self.norm(h)
        keys = torch.cat((ctx, x), 1)
        hd = d // self.heads
        q = self.q(x).reshape(b, t, self.heads, hd).transpose(1, 2)
        k, v = self.kv(keys).reshape(b, keys.shape[1], 2, self.heads, hd).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-1, -2) * hd**-0.5
        if bias is not None:
            logits = logits + torch.cat((bias, bias.new_zeros(b, 1, 1, t)), -1)
        att = torch.softmax(logits, dim=-1)
        h = h + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return h + self.mlp(self.norm2(h))


class VLAPolicy(ChunkPolicy):
    """The vision-language-action policy (see the module docstring).

    Args:
        shape: ``obs_dim, action_dim, horizons, obs_low, obs_high, action_low, action_high`` of
            :class:`~policies.nets.chunk.ChunkPolicy`.
        d_model: Token width.
        heads: Attention heads.
        layers: Prefix (fusion) blocks.
        expert_layers: Action-expert blocks.
        flow: The flow-matching sampler.
        vision: ``cameras``, ``image_features``, ``image_shift``, ``language_dim``, ``language_tokens``,
            ``image_film`` (see :class:`~policies.nets.chunk.ChunkPolicy`; ``language_dim`` 0 makes a vision-action
            policy; ``language_tokens`` L > 0: the prefix attends over L instruction tokens, the input being
            ``[B, L * W]`` with ``W = language_dim / L`` per token and zero rows as padding).

    Shapes: ``obs [B, To, D_o]``, images ``uint8 [B, To, H, W, 3]`` per camera, ``instruction [B, D_l]`` ->
    ``[B, Tp, D_a]`` in ``[-1, 1]``.
    """

    kind = "vla"
    guide_inputs: ClassVar[dict[str, str]] = {"actions": "guide", "weights": "guide_weight"}

    def __init__(
        self,
        *shape: Any,
        d_model: int = 128,
        heads: int = 4,
        layers: int = 3,
        expert_layers: int = 3,
        flow: FlowSettings | None = None,
        **vision: Any,
    ) -> None:
        super().__init__(*shape, **vision)
        if min(layers, expert_layers) < 1:
            raise ValueError(f"layers and expert_layers must be >= 1, got {layers}, {expert_layers}")
        language_tokens = self.language_tokens
        self.flow = flow or FlowSettings()
        to, tp = self.horizons.obs, self.horizons.pred
        self.state_in = nn.Linear(self.obs_dim, d_model)
        self.image_in = nn.Linear(int(vision.get("image_features", 64)), d_model)
        self.language_in = nn.Linear(max(self.language_dim // max(language_tokens, 1), 1), d_model)
        words = (language_tokens or 1) if self.language_dim else 0
        prefix = to * (1 + len(self.cameras)) + words
        self.prefix_slot = nn.Parameter(torch.randn(1, prefix, d_model) * 0.02)
        self.fusion = nn.ModuleList([AttentionBlock(d_model, heads) for _ in range(layers)])
        self.prefix_norm = nn.LayerNorm(d_model)
        self.action_in = nn.Linear(self.action_dim, d_model)
        self.action_slot = nn.Parameter(torch.randn(1, tp, d_model) * 0.02)
        self.time = StepEmbedding(d_model)
        self.expert = nn.ModuleList([ExpertBlock(d_model, heads) for _ in range(expert_layers)])
        self.out_norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, self.action_dim)

    # ------------------------------------------------------------------------------------------- network
    def prefix(
        self, obs: torch.Tensor, images: Images | None = None, instruction: torch.Tensor | None = None
    ) -> Prefix:
        """The fused prefix ``[B, P, d_model]`` and its key bias ``[B, 1, 1, P]`` (``None`` without instruction
        tokens; checks the inputs)."""
        self.check_obs(obs, images, instruction)
        b = obs.shape[0]
        tokens = [self.state_in(self.obs_norm(obs))]
        read = None if instruction is None or self.language_tokens else self.instruction(instruction)
        tokens += [self.image_in(f) for f in self.image_features(images, b, read)]
        bias = None
        if instruction is not None and self.language_tokens:
            words = instruction.reshape(b, self.language_tokens, -1)  # [B, L, W]
            tokens.append(self.language_in(words))
            padding = (words.abs().sum(-1) == 0).to(obs.dtype)  # [B, L], 1 where a row is padding
            bias = torch.cat((padding.new_zeros(b, self.prefix_slot.shape[1] - self.language_tokens), padding), 1)
            bias = (bias * -1e9)[:, None, None]
        elif read is not None:
            tokens.append(self.language_in(read)[:, None])
        h = torch.cat(tokens, 1) + self.prefix_slot
        for block in self.fusion:
            h = block(h, bias)
        return self.prefix_norm(h), bias

    def velocity(self, x: torch.Tensor, tau: torch.Tensor, ctx: Prefix) -> torch.Tensor:
        """Predicted velocity ``[B, Tp, D_a]`` of noisy actions ``x [B, Tp, D_a]`` at flow times ``tau [B]``."""
        h = self.action_in(x) + self.action_slot + self.time(tau * TIME_SCALE)[:, None]
        for block in self.expert:
            h = block(h, *ctx)
        return self.out(self.out_norm(h))

    # -------------------------------------------------------------------------------------------- training
    def sample_time(self, batch: int, device: torch.device) -> torch.Tensor:
        """Training flow times ``tau [B]`` (see the module docstring)."""
        a, b = self.flow.time_beta
        beta = torch.distributions.Beta(torch.tensor(a, device=device), torch.tensor(b, device=device))
        return self.flow.time_max * (1.0 - beta.sample((batch,)))

    def compute_loss(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Flow-matching loss: mean squared error of the velocity at a drawn time (module docstring)."""
        ctx = self.prefix(obs, images, instruction)
        a = self.action_norm(action)
        noise = torch.randn_like(a)
        tau = self.sample_time(a.shape[0], a.device)
        x, u = flow_target(a, noise, tau)
        loss = torch.nn.functional.mse_loss(self.velocity(x, tau, ctx), u)
        return loss, {"loss": float(loss.detach())}

    # ------------------------------------------------------------------------------------------- sampling
    def predict_action_chunk(
        self,
        obs: torch.Tensor,
        noise: torch.Tensor | None = None,
        *,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
        steps: int | None = None,
        guide: Guide | None = None,
    ) -> torch.Tensor:
        """Euler integration of the flow from ``noise`` (default: drawn) in ``steps`` (default: the configured);
        ``guide``: actions ``[B, Tp, D_a]`` in ``[-1, 1]`` (this method's output units) and weights ``[B, Tp]`` to
        inpaint (module docstring)."""
        ctx = self.prefix(obs, images, instruction)
        shape = (obs.shape[0], self.horizons.pred, self.action_dim)
        x = torch.randn(shape, device=obs.device) if noise is None else noise
        if tuple(x.shape) != shape:
            raise ValueError(f"noise must be {list(shape)}, got {list(x.shape)}")
        if guide is not None and (tuple(guide[0].shape) != shape or tuple(guide[1].shape) != shape[:2]):
            raise ValueError(f"guide must be {list(shape)} actions and {list(shape[:2])} weights")
        inpaint = None if guide is None else (self.action_norm(guide[0]), guide[1])
        x = euler_integrate(lambda y, tau: self.velocity(y, tau, ctx), x, steps or self.flow.steps, inpaint)
        return self.action_norm.unnormalize(x).clamp(-1.0, 1.0)

    def export_module(self, steps: int | None = None) -> nn.Module:
        """:class:`UnrolledFlow`: ``steps`` (default: the configured) Euler steps in one traceable graph."""
        return UnrolledFlow(self, steps or self.flow.steps)

    def export_inputs(self, batch: int) -> dict[str, torch.Tensor]:
        """``obs``, the initial ``noise [B, Tp, D_a]``, each camera's ``image_<camera>``, the ``instruction``, the
        inpainting ``guide [B, Tp, D_a]`` (in ``[-1, 1]``) and ``guide_weight [B, Tp]``."""
        to, tp = self.horizons.obs, self.horizons.pred
        return {
            "obs": torch.zeros(batch, to, self.obs_dim),
            "noise": torch.zeros(batch, tp, self.action_dim),
            **self.image_inputs(batch),
            **self.language_inputs(batch),
            self.guide_inputs["actions"]: torch.zeros(batch, tp, self.action_dim),
            self.guide_inputs["weights"]: torch.zeros(batch, tp),
        }

    def sampler_settings(self) -> dict[str, object]:
        """Sampler facts for the contract."""
        return {"name": "flow-matching-euler", **asdict(self.flow), "inference_steps": self.flow.steps}

    def parameter_count(self) -> int:
        """Trainable parameters (the frozen sentence encoder is not part of the policy)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


class UnrolledFlow(nn.Module):
    """The sampler as one traceable module: ``obs, noise, *images, [instruction], guide, guide_weight -> [B, Tp,
    D_a]`` in ``[-1, 1]`` (the prefix once, then the Euler steps with inpainting; zero weights: none)."""

    def __init__(self, policy: VLAPolicy, steps: int) -> None:
        super().__init__()
        self.policy, self.steps = policy, steps

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        """Sample one chunk per batch row."""
        p = self.policy
        *rest_, guide, weight = rest
        images, instruction = p.split_inputs(tuple(rest_))
        ctx = p.prefix(obs, images, instruction)
        inpaint = (p.action_norm(guide), weight)
        x = euler_integrate(lambda y, tau: p.velocity(y, tau, ctx), noise, self.steps, inpaint)
        return p.action_norm.unnormalize(x).clamp(-1.0, 1.0)


def count_by_part(policy: VLAPolicy) -> Mapping[str, int]:
    """Parameters of the vision encoders, the prefix (tokens and fusion) and the action expert."""
    vision = sum(p.numel() for p in policy.encoders.parameters())
    expert_parts = (policy.action_in, policy.time, policy.expert, policy.out_norm, policy.out)
    expert = sum(p.numel() for m in expert_parts for p in m.parameters()) + policy.action_slot.numel()
    return {"vision": vision, "fusion": policy.parameter_count() - vision - expert, "expert": expert}
