"""Batched simulation: the VecEnv contract, backends, tasks, domain randomisation, and camera rendering."""

from sim.registry import get_task, make, register, task_names, train_env_config
from sim.vec_env import Obs, StepInfo, VecEnv

__all__ = ["Obs", "StepInfo", "VecEnv", "get_task", "make", "register", "task_names", "train_env_config"]
