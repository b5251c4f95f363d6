"""Image encoders for chunk policies that also see camera images (a wrist camera, a scene camera).

A small convolutional network per camera ends in a spatial soft-argmax (Levine et al. 2016, "End-to-End Training of
Deep Visuomotor Policies"; also Diffusion Policy's image encoder, Chi et al. 2023): each of the last layer's channels
becomes the expected image position of where it fires, which keeps *where* things are, the quantity a grasp needs.
Sized for CPU training: about 9 M multiply-adds per 64 x 64 image.

Images enter as the cameras give them, ``uint8 [B, H, W, 3]`` RGB; scaling to ``[-1, 1]`` is inside the network
(and inside an exported graph).
"""

from __future__ import annotations

import torch
from torch import nn


class SpatialSoftArgmax(nn.Module):
    """Expected ``(x, y)`` image position of each channel's softmax over pixels.

    Shapes: ``[B, C, H, W] -> [B, 2 C]`` (all ``x`` first, then all ``y``), positions in ``[-1, 1]`` (left/top is -1).
    """

    xs: torch.Tensor
    ys: torch.Tensor

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        self.register_buffer("xs", torch.linspace(-1.0, 1.0, width))
        self.register_buffer("ys", torch.linspace(-1.0, 1.0, height))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Soft-argmax keypoints of ``x``."""
        b, c, h, w = x.shape
        p = torch.softmax(x.reshape(b, c, h * w), -1).reshape(b, c, h, w)
        return torch.cat(((p.sum(2) * self.xs).sum(-1), (p.sum(3) * self.ys).sum(-1)), 1)


def random_shift(x: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image of ``x [B, C, H, W]`` by a random whole number of pixels in ``[-pad, pad]`` per axis, edges
    replicated (DrQ's augmentation, Kostrikov et al. 2020: the camera mount is never exactly where it was).

    Replicating the edges is clamping the source pixel into the image, so each output pixel is one gather from the
    input (no padded copy): 4.6-5.6x cheaper than indexing a padded copy for 256-512 images of 32-64 pixels a side on
    one CPU thread (``bench/bc_step.py``), the same images for the same draws."""
    if pad <= 0:
        return x
    b, c, h, w = x.shape
    dy = torch.randint(0, 2 * pad + 1, (b, 1), device=x.device, generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (b, 1), device=x.device, generator=generator)
    rows = (dy - pad + torch.arange(h, device=x.device)).clamp_(0, h - 1)  # [B, H]: the source row of each output row
    cols = (dx - pad + torch.arange(w, device=x.device)).clamp_(0, w - 1)  # [B, W]
    source = (rows[:, :, None] * w + cols[:, None, :]).view(b, 1, h * w).expand(b, c, h * w)
    return x.reshape(b, c, h * w).gather(2, source).view(b, c, h, w)


FILM_AT = 5
"""FiLM modulates the output of the image encoder's first ``FILM_AT`` layers (the second convolution's normalised
maps, before its ReLU)."""


class ImageEncoder(nn.Module):
    """One camera's images to a feature vector.

    ``uint8 RGB [B, H, W, 3] -> [-1, 1] -> conv 8x8/4 (32) -> conv 3x3 (32) -> conv 3x3 (32) -> conv 3x3
    (keypoints) -> spatial soft-argmax [B, 2 keypoints] -> linear -> [B, features]``, GroupNorm and ReLU between the
    convolutions; the keypoints live on a ``floor(H/4) x floor(W/4)`` grid (soft-argmax resolves them below a cell). The
    stride-4 stem (as in DQN's Atari network) keeps the large early feature maps out of training: on 2 CPU cores a
    training step over 512 images of 64 x 64 takes 0.16 s, against 0.33 s with a stride-2 stem and a second
    stride-2 layer. In training mode the images are randomly shifted by up to ``shift`` pixels first.

    With ``condition_dim > 0`` the second convolution's normalised maps are modulated by the condition (FiLM,
    Perez et al. 2018, as RT-1 conditions its image encoder on the instruction): ``x (1 + gamma) + beta`` per
    channel, ``gamma, beta`` linear in the condition and zero at initialisation, so that which keypoints the
    encoder finds can depend on what the instruction names.

    Args:
        height, width: Image size, pixels (at least 8).
        features: Output width.
        keypoints: Channels of the last convolution (each one soft-argmax point).
        shift: Training augmentation, pixels (0: none).
        condition_dim: Width of the FiLM condition (0: none).
    """

    def __init__(
        self, height: int, width: int, features: int = 64, keypoints: int = 32, shift: int = 4, condition_dim: int = 0
    ) -> None:
        super().__init__()
        if min(height, width) < 8:
            raise ValueError(f"camera images must be at least 8 pixels a side, got {height}x{width}")
        self.height, self.width, self.features, self.shift = height, width, features, shift
        self.conv = nn.Sequential(
            nn.Conv2d(3, 32, 8, 4, 2),
            nn.GroupNorm(8, 32),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, 1, 1),
            nn.GroupNorm(8, 32),  # FiLM modulates these maps (FILM_AT)
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, 1, 1),
            nn.GroupNorm(8, 32),
            nn.ReLU(),
            nn.Conv2d(32, keypoints, 3, 1, 1),
        )
        self.film = nn.Linear(condition_dim, 2 * 32) if condition_dim > 0 else None
        if self.film is not None:
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
        self.keypoints = SpatialSoftArgmax(height // 4, width // 4)
        self.out = nn.Linear(2 * keypoints, features)

    def forward(self, images: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        """Features ``[B, features]`` of ``uint8 [B, H, W, 3]`` images (``condition [B, condition_dim]`` exactly
        when the encoder has FiLM)."""
        if images.ndim != 4 or tuple(images.shape[1:]) != (self.height, self.width, 3):
            raise ValueError(f"images must be [B, {self.height}, {self.width}, 3], got {list(images.shape)}")
        if (condition is None) != (self.film is None):
            raise ValueError("a FiLM image encoder needs its condition, and only it takes one")
        x = images.permute(0, 3, 1, 2).float() * (2.0 / 255.0) - 1.0
        if self.training:
            x = random_shift(x, self.shift)
        if self.film is None or condition is None:
            return self.out(self.keypoints(self.conv(x)))
        x = self.conv[:FILM_AT](x)
        gamma, beta = self.film(condition)[:, :, None, None].chunk(2, 1)  # [B, 32, 1, 1] each
        return self.out(self.keypoints(self.conv[FILM_AT:](x * (1.0 + gamma) + beta)))
