"""Diffusion action-chunk policies: denoisers (1D U-Net with FiLM, transformer) and the DDPM/DDIM policy."""

from policies.nets.diffusion.policy import DiffusionPolicy, SamplerSettings
from policies.nets.diffusion.transformer import TransformerDenoiser
from policies.nets.diffusion.unet import ConditionalUnet1D

__all__ = ["ConditionalUnet1D", "DiffusionPolicy", "SamplerSettings", "TransformerDenoiser"]
