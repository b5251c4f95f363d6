"""Diffusion policy: DDPM training and DDIM sampling of action chunks (Chi et al. 2023/24).

Noise schedules come from ``diffusers`` (``DDPMScheduler`` for training, ``DDIMScheduler`` for sampling), not
re-derived here. :meth:`DiffusionPolicy.predict_action_chunk` runs the library's DDIM loop;
:class:`UnrolledDDIM` is the same loop for a fixed number of steps, written with coefficient tables read from the
library's scheduler so it traces into one ONNX graph (tests check the two agree).

DDIM step (``eta = 0``, epsilon prediction), for diffusion steps ``t -> t_prev`` with cumulative products
``a_t = alphas_cumprod[t]``::

    x0  = clip((x - sqrt(1 - a_t) eps) / sqrt(a_t), -1, 1)         (clip only if clip_sample)
    x  <- sqrt(a_prev) x0 + sqrt(1 - a_prev) eps
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import nn

from policies.nets.chunk import ChunkPolicy, Images
from policies.nets.diffusion.fixed_step import FixedStepUnet
from policies.nets.diffusion.transformer import TransformerDenoiser
from policies.nets.diffusion.unet import ConditionalUnet1D


@dataclass(frozen=True)
class SamplerSettings:
    """Noise schedule and sampler.

    Attributes:
        train_steps: DDPM diffusion steps used in training (Chi et al.: 100).
        inference_steps: DDIM steps per chunk at run time (Chi et al.: 10).
        beta_schedule: ``diffusers`` beta schedule name.
        clip_sample: Clip the predicted clean sample to ``[-1, 1]`` in every step.
        prediction_type: What the denoiser predicts (``epsilon``: the noise).
    """

    train_steps: int = 100
    inference_steps: int = 10
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear"] = "squaredcos_cap_v2"
    clip_sample: bool = True
    prediction_type: Literal["epsilon"] = "epsilon"

    def __post_init__(self) -> None:
        if self.train_steps < 1 or not 1 <= self.inference_steps <= self.train_steps:
            raise ValueError(
                f"sampler needs 1 <= inference_steps <= train_steps, got {self.inference_steps}, {self.train_steps}"
            )


class DiffusionPolicy(ChunkPolicy):
    """Denoising diffusion over action chunks, conditioned on the observation window (and camera images).

    Args:
        shape: ``obs_dim, action_dim, horizons, obs_low, obs_high, action_low, action_high`` of
            :class:`~policies.nets.chunk.ChunkPolicy`.
        denoiser: ``unet`` (:class:`ConditionalUnet1D`) or ``transformer`` (:class:`TransformerDenoiser`).
        down_dims: U-Net channels per level.
        d_model, heads, layers: Transformer size.
        sampler: Noise schedule and default DDIM steps.
        vision: ``cameras``, ``image_features``, ``image_shift`` (see :class:`~policies.nets.chunk.ChunkPolicy`).
        (others): See :class:`~policies.nets.chunk.ChunkPolicy`.

    Shapes: ``obs [B, To, D_o] (+ images) -> action [B, Tp, D_a]``; the denoiser is conditioned on
    :meth:`~policies.nets.chunk.ChunkPolicy.condition` ``[B, To, D_c]``.
    """

    kind = "diffusion"

    def __init__(
        self,
        *shape: Any,
        denoiser: Literal["unet", "transformer"] = "unet",
        down_dims: tuple[int, ...] = (64, 128, 256),
        d_model: int = 128,
        heads: int = 4,
        layers: int = 4,
        sampler: SamplerSettings | None = None,
        **vision: Any,
    ) -> None:
        super().__init__(*shape, **vision)
        from diffusers import DDPMScheduler

        action_dim, horizons = self.action_dim, self.horizons
        self.sampler = sampler or SamplerSettings()
        self.denoiser_kind = denoiser
        if denoiser == "unet":
            factor = 2 ** (len(down_dims) - 1)
            if horizons.pred % factor:
                raise ValueError(f"the U-Net with {len(down_dims)} levels needs pred_horizon divisible by {factor}")
            self.denoiser: nn.Module = ConditionalUnet1D(action_dim, horizons.obs * self.cond_dim, down_dims)
        elif denoiser == "transformer":
            self.denoiser = TransformerDenoiser(
                action_dim, self.cond_dim, horizons.obs, horizons.pred, d_model, heads, layers
            )
        else:
            raise ValueError(f"unknown denoiser '{denoiser}'; choose unet or transformer")
        s = self.sampler
        self.train_scheduler: Any = DDPMScheduler(
            num_train_timesteps=s.train_steps,
            beta_schedule=s.beta_schedule,
            clip_sample=s.clip_sample,
            prediction_type=s.prediction_type,
        )

    def ddim(self, steps: int | None = None) -> Any:
        """A ``diffusers.DDIMScheduler`` on this policy's schedule, set to ``steps`` (default: the configured)."""
        from diffusers import DDIMScheduler

        s = self.sampler
        sched: Any = DDIMScheduler(
            num_train_timesteps=s.train_steps,
            beta_schedule=s.beta_schedule,
            clip_sample=s.clip_sample,
            prediction_type=s.prediction_type,
            set_alpha_to_one=True,
            steps_offset=0,
        )
        sched.set_timesteps(steps or s.inference_steps)
        return sched

    def compute_loss(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """DDPM loss: mean squared error of the predicted noise at a uniformly drawn diffusion step."""
        cond = self.condition(obs, images, instruction)
        x0 = self.action_norm(action)
        noise = torch.randn_like(x0)
        k = torch.randint(0, self.sampler.train_steps, (x0.shape[0],), device=x0.device)
        xk = self.train_scheduler.add_noise(x0, noise, k)
        loss = torch.nn.functional.mse_loss(self.denoiser(xk, k, cond), noise)
        return loss, {"loss": float(loss.detach())}

    def predict_action_chunk(
        self,
        obs: torch.Tensor,
        noise: torch.Tensor | None = None,
        steps: int | None = None,
        *,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """DDIM sampling with the library scheduler (``steps``: default the configured number)."""
        cond = self.condition(obs, images, instruction)
        shape = (obs.shape[0], self.horizons.pred, self.action_dim)
        x = torch.randn(shape, device=obs.device) if noise is None else noise
        if tuple(x.shape) != shape:
            raise ValueError(f"noise must be {list(shape)}, got {list(x.shape)}")
        sched = self.ddim(steps)
        for t in sched.timesteps:
            eps = self.denoiser(x, t.to(obs.device).expand(obs.shape[0]), cond)
            x = sched.step(eps, t, x).prev_sample
        return self.action_norm.unnormalize(x).clamp(-1.0, 1.0)

    def export_module(self, steps: int | None = None) -> nn.Module:
        """:class:`UnrolledDDIM` for ``steps`` (default: the configured number)."""
        return UnrolledDDIM(self, steps or self.sampler.inference_steps)

    def export_inputs(self, batch: int) -> dict[str, torch.Tensor]:
        """``obs [B, To, D_o]``, the initial ``noise [B, Tp, D_a]`` and each camera's ``image_<camera>``."""
        return {
            "obs": torch.zeros(batch, self.horizons.obs, self.obs_dim),
            "noise": torch.zeros(batch, self.horizons.pred, self.action_dim),
            **self.image_inputs(batch),
            **self.language_inputs(batch),
        }

    def sampler_settings(self) -> dict[str, object]:
        """Schedule, sampler and denoiser facts for the contract."""
        return {"name": "ddim", "eta": 0.0, **asdict(self.sampler), "denoiser": self.denoiser_kind}


class UnrolledDDIM(nn.Module):
    """The DDIM loop for a fixed number of steps as one traceable module (see the module docstring).

    Shapes: ``obs [B, To, D_o]`` raw, ``noise [B, Tp, D_a]`` standard normal, then one ``uint8 [B, To, H, W, 3]``
    per camera and the ``instruction [B, D_l]`` of a language-conditioned policy -> ``[B, Tp, D_a]`` in ``[-1, 1]``.
    """

    def __init__(self, policy: DiffusionPolicy, steps: int) -> None:
        super().__init__()
        self.policy = policy
        sched = policy.ddim(steps)
        ratio = sched.config.num_train_timesteps // sched.num_inference_steps
        a = sched.alphas_cumprod.double()
        self.rows: list[tuple[float, float, float, float, float]] = []  # constants of the traced graph
        for t in sched.timesteps.tolist():
            a_t = a[t]
            a_prev = a[t - ratio] if t - ratio >= 0 else sched.final_alpha_cumprod.double()
            coef = [float(x) for x in ((1 - a_t).sqrt(), a_t.rsqrt(), a_prev.sqrt(), (1 - a_prev).sqrt())]
            self.rows.append((float(t), coef[0], coef[1], coef[2], coef[3]))
        self.clip = policy.sampler.clip_sample
        # The U-Net has a twin made for a fixed list of steps (cheaper graph, same function; see fixed_step.py).
        unet = policy.denoiser
        self.unet = FixedStepUnet(unet, [row[0] for row in self.rows]) if isinstance(unet, ConditionalUnet1D) else None

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        """Sample one chunk per batch row."""
        p = self.policy
        images, instruction = p.split_inputs(rest)
        cond = p.condition(obs, images, instruction)
        x = noise
        ones = torch.ones_like(noise[:, 0, 0])
        films = []
        if self.unet is not None:  # the U-Net twin's layout, [B, D_a, 1, Tp], until the last step
            films, x = self.unet.obs_terms(cond), self.unet.inner(x)
        for i, (t, s1, inv_sqrt_a, sqrt_prev, s1_prev) in enumerate(self.rows):
            eps = self.unet(x, films[i]) if self.unet is not None else p.denoiser(x, ones * t, cond)
            x0 = (x - s1 * eps) * inv_sqrt_a
            if self.clip:
                x0 = x0.clamp(-1.0, 1.0)
            x = sqrt_prev * x0 + s1_prev * eps
        if self.unet is not None:
            x = self.unet.outer(x)
        return p.action_norm.unnormalize(x).clamp(-1.0, 1.0)
