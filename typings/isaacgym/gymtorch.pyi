# isaacgym.gymtorch as sim/backends/isaac_gym.py uses it (Isaac Gym Preview 4, python/isaacgym/gymtorch.py):
# Gym tensors <-> torch tensors sharing their memory.
import torch
from isaacgym.gymapi import Tensor

def wrap_tensor(
    gym_tensor: Tensor, offsets: tuple[int, ...] | None = None, counts: tuple[int, ...] | None = None
) -> torch.Tensor: ...
def unwrap_tensor(torch_tensor: torch.Tensor) -> Tensor: ...
