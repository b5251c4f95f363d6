"""Action-chunk policies (imitation learning): one interface for diffusion and plain behaviour-cloning heads.

A chunk policy maps the last ``To`` observations to the next ``Tp`` actions (Chi et al., "Diffusion Policy")::

    obs: [B, To, D_o] raw (contract-scaled) observations, oldest first
    images (optional): {camera: uint8 [B, To, H, W, 3]} the same steps' camera images
      -> predict_action_chunk -> [B, Tp, D_a] actions in the contract's normalised units, clipped to [-1, 1]

Heads see one conditioning sequence ``[B, To, D_c]``: the normalised observation, for each camera its image
features (:class:`~policies.nets.vision.ImageEncoder`), and for a language-conditioned policy the instruction's
embedding ``instruction [B, D_l]`` (:mod:`policies.nets.language`; the same at every step of the window),
``D_c = D_o + cameras x image_features + D_l``.

Min-max normalisation to ``[-1, 1]`` of observations and actions lives inside the model (buffers saved with its
weights and baked into the exported graph), so a deployment cannot pair the weights with other statistics.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from policies.nets.instruction_subspace import InstructionSubspace
from policies.nets.vision import ImageEncoder

Images = Mapping[str, torch.Tensor]
"""Camera name -> ``uint8 [B, To, H, W, 3]`` RGB images, oldest first."""

RANGE_FLOOR = 1e-4
"""Features whose min-max range is narrower than this are shifted, not scaled (constant features)."""


class MinMaxNormalizer(nn.Module):
    """``y = 2 (x - min) / (max - min) - 1`` per feature, ``x`` back from ``y`` by :meth:`unnormalize`.

    Args:
        low: Per-feature minimum ``[D]``.
        high: Per-feature maximum ``[D]``.

    Shapes: ``x: [..., D] <-> y: [..., D]``.
    """

    scale: torch.Tensor
    offset: torch.Tensor

    def __init__(self, low: np.ndarray | torch.Tensor, high: np.ndarray | torch.Tensor) -> None:
        super().__init__()
        lo = torch.as_tensor(np.asarray(low, dtype=np.float32))
        hi = torch.as_tensor(np.asarray(high, dtype=np.float32))
        if lo.shape != hi.shape or lo.ndim != 1:
            raise ValueError(f"low and high must be [D] of one size, got {list(lo.shape)} and {list(hi.shape)}")
        span = hi - lo
        scale = torch.where(span > RANGE_FLOOR, 2.0 / span.clamp_min(RANGE_FLOOR), torch.ones_like(span))
        self.register_buffer("scale", scale)
        self.register_buffer("offset", -1.0 - lo * scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x``."""
        return x * self.scale + self.offset

    def unnormalize(self, y: torch.Tensor) -> torch.Tensor:
        """Map normalised ``y`` back to data units."""
        return (y - self.offset) / self.scale


@dataclass(frozen=True)
class Horizons:
    """Timing of a chunk policy, in control steps.

    Attributes:
        obs: Observation horizon ``To`` (observations the policy sees, newest last).
        pred: Prediction horizon ``Tp`` (actions one query predicts, from the current step on).
        action: Executed steps ``Ta`` <= ``Tp`` before re-planning (receding horizon).
    """

    obs: int = 2
    pred: int = 16
    action: int = 8

    def __post_init__(self) -> None:
        if min(self.obs, self.pred, self.action) < 1 or self.action > self.pred:
            raise ValueError(f"horizons need 1 <= action <= pred and obs >= 1, got {self}")


class ChunkPolicy(nn.Module, abc.ABC):
    """Base class of action-chunk policies (see the module docstring).

    Args:
        obs_dim: ``D_o``.
        action_dim: ``D_a``.
        horizons: ``To``, ``Tp``, ``Ta``.
        obs_low, obs_high: Observation range of the training data ``[D_o]`` (min-max normaliser).
        action_low, action_high: Action range of the training data ``[D_a]``.
        cameras: Camera name -> image ``(height, width)`` the policy also sees (empty: observations only).
        image_features: Features per camera (:class:`~policies.nets.vision.ImageEncoder`).
        image_shift: Random-shift augmentation in training, pixels.
        language_dim: Width ``D_l`` of the instruction embedding the policy is conditioned on (0: no language).
        language_tokens: Rows of per-token outputs in the instruction input (0: one pooled embedding, which the
            policy reads projected onto its training instructions' subspace,
            :mod:`policies.nets.instruction_subspace`).
        image_film: Condition each camera's image encoder on the instruction as the policy reads it (FiLM,
            :class:`~policies.nets.vision.ImageEncoder`); needs cameras and a pooled instruction.
    """

    kind: str = ""
    guide_inputs: ClassVar[dict[str, str]] = {}
    """For a sampler that inpaints (``predict_action_chunk(..., guide=...)``; real-time chunking): its exported
    graph's guide inputs, ``actions`` and ``weights`` (the contract's ``chunk.guide``); empty: it does not."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizons: Horizons,
        obs_low: np.ndarray,
        obs_high: np.ndarray,
        action_low: np.ndarray,
        action_high: np.ndarray,
        *,
        cameras: Mapping[str, tuple[int, int]] | None = None,
        image_features: int = 64,
        image_shift: int = 4,
        language_dim: int = 0,
        language_tokens: int = 0,
        image_film: bool = False,
    ) -> None:
        super().__init__()
        if image_film and (not cameras or not language_dim or language_tokens):
            raise ValueError("image_film needs cameras and a pooled instruction embedding (language_tokens 0)")
        if language_dim < 0:
            raise ValueError(f"language_dim must be >= 0, got {language_dim}")
        if language_tokens < 0 or (language_tokens and (not language_dim or language_dim % language_tokens)):
            raise ValueError(f"language_dim {language_dim} must be a multiple of language_tokens {language_tokens}")
        self.language_dim = language_dim
        self.language_tokens = language_tokens
        self.instruction_subspace = InstructionSubspace(language_dim) if language_dim and not language_tokens else None
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.horizons = horizons
        self.obs_norm = MinMaxNormalizer(obs_low, obs_high)
        self.action_norm = MinMaxNormalizer(action_low, action_high)
        self.cameras = {str(c): (int(h), int(w)) for c, (h, w) in (cameras or {}).items()}
        for c in self.cameras:
            if not c.isidentifier():
                raise ValueError(f"camera name '{c}' must be letters, digits and underscores")
        film = language_dim if image_film else 0
        self.encoders = nn.ModuleDict(
            {
                c: ImageEncoder(h, w, image_features, shift=image_shift, condition_dim=film)
                for c, (h, w) in self.cameras.items()
            }
        )
        self.image_film = image_film
        self.cond_dim = obs_dim + len(self.cameras) * image_features + language_dim

    def check_obs(
        self, obs: torch.Tensor, images: Images | None = None, instruction: torch.Tensor | None = None
    ) -> None:
        """Raise ``ValueError`` unless ``obs`` is ``[B, To, D_o]``, ``images`` holds every camera's
        ``uint8 [B, To, H, W, 3]`` (and no other), and ``instruction`` is ``[B, D_l]`` exactly when the policy
        is language-conditioned."""
        want = (self.horizons.obs, self.obs_dim)
        if obs.ndim != 3 or tuple(obs.shape[1:]) != want:
            raise ValueError(f"observations must be [B, {want[0]}, {want[1]}], got {list(obs.shape)}")
        given = dict(images or {})
        if set(given) != set(self.cameras):
            raise ValueError(f"the policy sees cameras {sorted(self.cameras)}, got images of {sorted(given)}")
        for c, (h, w) in self.cameras.items():
            shape = (obs.shape[0], self.horizons.obs, h, w, 3)
            if tuple(given[c].shape) != shape or given[c].dtype != torch.uint8:
                raise ValueError(
                    f"images '{c}' must be uint8 {list(shape)}, got {given[c].dtype} {list(given[c].shape)}"
                )
        if not self.language_dim:
            if instruction is not None:
                raise ValueError("this policy reads no instruction, got one")
            return
        want_l = (obs.shape[0], self.language_dim)
        if instruction is None or tuple(instruction.shape) != want_l or not instruction.is_floating_point():
            got = "none" if instruction is None else f"{instruction.dtype} {list(instruction.shape)}"
            raise ValueError(f"the instruction embedding must be float {list(want_l)}, got {got}")

    def image_features(self, images: Images | None, batch: int, read: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each camera's features ``[B, To, image_features]`` (cameras in the policy's order); with ``image_film``
        each encoder is conditioned on ``read [B, D_l]``, the instruction as the policy reads it
        (:meth:`instruction`'s output, computed once by the caller)."""
        if not self.cameras:
            return []
        assert images is not None
        t = self.horizons.obs
        film = None
        if self.image_film:
            assert read is not None
            film = read.repeat_interleave(t, 0)  # [B * To, D_l], as the images flatten
        return [self.encoders[c](images[c].flatten(0, 1), film).view(batch, t, -1) for c in self.cameras]

    def condition(
        self, obs: torch.Tensor, images: Images | None = None, instruction: torch.Tensor | None = None
    ) -> torch.Tensor:
        """What the heads see, ``[B, To, D_c]``: the normalised observations, each camera's image features and the
        instruction embedding."""
        self.check_obs(obs, images, instruction)
        read = None if instruction is None else self.instruction(instruction)
        parts = [self.obs_norm(obs), *self.image_features(images, obs.shape[0], read)]
        if read is not None:
            parts.append(read[:, None].expand(-1, obs.shape[1], -1))
        return torch.cat(parts, -1) if len(parts) > 1 else parts[0]

    def instruction(self, embedding: torch.Tensor) -> torch.Tensor:
        """The instruction input ``[B, D_l]`` as the policy reads it: a pooled embedding projected onto the training
        instructions' subspace (the identity before :meth:`fit_instructions`), token rows as they are."""
        return embedding if self.instruction_subspace is None else self.instruction_subspace(embedding)

    def fit_instructions(self, table: torch.Tensor, nearest: bool = False) -> int:
        """Read every instruction within the subspace of the training instructions' embeddings ``table [K, D_l]``
        (a pooled embedding; :mod:`policies.nets.instruction_subspace`); returns its dimension (0: token rows, not
        projected)."""
        return 0 if self.instruction_subspace is None else self.instruction_subspace.fit(table, nearest)

    @abc.abstractmethod
    def compute_loss(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss of raw windows ``obs [B, To, D_o]`` (and ``images``, ``instruction``), ``action
        [B, Tp, D_a]``; returns ``(loss, info)``."""

    @abc.abstractmethod
    def predict_action_chunk(
        self,
        obs: torch.Tensor,
        noise: torch.Tensor | None = None,
        *,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Actions ``[B, Tp, D_a]`` (normalised units, clipped to ``[-1, 1]``) for raw ``obs [B, To, D_o]``.

        Args:
            obs: Observation windows, oldest first.
            noise: Initial sample ``[B, Tp, D_a]`` of stochastic samplers (``None``: drawn from the global
                generator); ignored by deterministic heads.
            images: The same steps' camera images (required exactly when the policy has cameras).
            instruction: The instruction's embedding ``[B, D_l]`` (required exactly when ``language_dim > 0``).
        """

    def export_module(self) -> nn.Module:
        """A traceable module with the whole deployed computation; its inputs are :meth:`export_inputs`."""
        return _Deterministic(self)

    def image_inputs(self, batch: int) -> dict[str, torch.Tensor]:
        """Example camera inputs by ONNX input name ``image_<camera>``: ``uint8 [B, To, H, W, 3]`` zeros."""
        to = self.horizons.obs
        return {f"image_{c}": torch.zeros(batch, to, h, w, 3, dtype=torch.uint8) for c, (h, w) in self.cameras.items()}

    def language_inputs(self, batch: int) -> dict[str, torch.Tensor]:
        """Example instruction input by ONNX input name: ``instruction [B, D_l]`` zeros (none without language)."""
        return {"instruction": torch.zeros(batch, self.language_dim)} if self.language_dim else {}

    def export_inputs(self, batch: int) -> dict[str, torch.Tensor]:
        """Example inputs of :meth:`export_module` by ONNX input name (zeros)."""
        obs = torch.zeros(batch, self.horizons.obs, self.obs_dim)
        return {"obs": obs, **self.image_inputs(batch), **self.language_inputs(batch)}

    def split_inputs(self, rest: tuple[torch.Tensor, ...]) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """The exported graph's inputs after ``obs`` (and ``noise``): one image per camera, then the instruction."""
        n = len(self.cameras)
        if len(rest) != n + (1 if self.language_dim else 0):
            raise ValueError(f"expected {n} camera inputs{' and the instruction' if self.language_dim else ''}")
        return dict(zip(self.cameras, rest[:n], strict=True)), (rest[n] if self.language_dim else None)

    def sampler_settings(self) -> dict[str, object]:
        """Sampler facts for the deployment contract (empty for deterministic heads)."""
        return {}


class _Deterministic(nn.Module):
    def __init__(self, policy: ChunkPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        images, instruction = self.policy.split_inputs(rest)
        return self.policy.predict_action_chunk(obs, images=images, instruction=instruction)
