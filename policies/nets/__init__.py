"""Policy networks (torch): actor-critic, MLPs, normalisers, and their ONNX export."""

from policies.nets.actor_critic import ActorCritic
from policies.nets.mlp import mlp
from policies.nets.normalizer import EmpiricalNormalizer

__all__ = ["ActorCritic", "EmpiricalNormalizer", "mlp"]
