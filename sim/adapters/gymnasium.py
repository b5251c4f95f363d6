"""A ``gymnasium.vector.VectorEnv`` over any :class:`~sim.vec_env.VecEnv`, so gymnasium-based libraries can train.

Everything crossing this boundary is numpy (``float32`` observations and rewards, ``bool`` flags); the tensors of the
wrapped env are converted here, once per call, and copied, so arrays handed out are never overwritten later.

Shapes (``N = num_envs``, ``D`` = size of the chosen observation group, ``A = num_actions``)::

    reset(seed=None, options=None) -> obs [N, D], infos
    step(actions [N, A])           -> obs [N, D], rewards [N], terminations [N], truncations [N], infos

Autoreset is *same-step* (``metadata["autoreset_mode"] == AutoresetMode.SAME_STEP``): a world whose episode ends at
this step is reset inside ``step`` and its row of ``obs`` is already the first observation of the next episode. Keys
of ``infos`` follow gymnasium's convention of a value array plus a ``_key`` bool mask saying which rows are valid;
the episode keys are present only when at least one world finished at this step:

* ``final_obs`` ``[N, D]`` float32 / ``_final_obs`` ``[N]`` bool: the last observation of each finished episode
  (bootstraps the value of time-outs). Unlike gymnasium's own vector envs this is one stacked array, not an object
  array of per-env observations.
* ``episode`` ``{"r": [N] float32, "l": [N] int64, "t": [N] float64}`` / ``_episode``: return, length (control steps)
  and wall-clock duration (s) of each finished episode, as gymnasium's ``RecordEpisodeStatistics`` reports them.
* ``success`` ``[N]`` bool / ``_success``: the task's per-episode success flag (tasks with a criterion only).
* ``privileged_obs`` ``[N, D_c]`` (every step and at reset) and ``final_privileged_obs`` / ``_final_privileged_obs``:
  the privileged ``critic`` group, only when the adapter is built with ``privileged=True`` (asymmetric critics).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from sim.vec_env import VecEnv

PRIVILEGED_GROUP = "critic"
"""Observation group that only the simulator has; never the policy's input through this adapter."""


def to_numpy(x: torch.Tensor, dtype: type | np.dtype = np.float32) -> np.ndarray:
    """A fresh numpy copy of ``x`` (any device) with ``dtype``."""
    return np.array(x.detach().cpu().numpy(), dtype=dtype, copy=True)


class GymVecEnv(gymnasium.vector.VectorEnv):
    """Gymnasium vector env over a :class:`~sim.vec_env.VecEnv` (see the module docstring for shapes and ``infos``).

    Args:
        env: The batched simulator env; the adapter owns it from now on (``close`` closes it).
        obs_group: Observation group returned as ``obs`` (``policy``: what the robot's own sensors give).
        privileged: Also return the privileged ``critic`` group in ``infos["privileged_obs"]``.

    Raises:
        ValueError: ``obs_group`` is not a group of ``env``, or is the privileged group.
    """

    render_mode: str | None = None

    def __init__(self, env: VecEnv, obs_group: str = "policy", privileged: bool = False) -> None:
        if obs_group == PRIVILEGED_GROUP:
            raise ValueError(
                f"obs_group '{PRIVILEGED_GROUP}' is privileged; pass privileged=True to get it in "
                "infos['privileged_obs'] and keep a deployable group as the observation"
            )
        if obs_group not in env.obs_sizes:
            raise ValueError(f"env has no observation group '{obs_group}'; groups: {', '.join(env.obs_sizes)}")
        if privileged and PRIVILEGED_GROUP not in env.obs_sizes:
            raise ValueError(
                f"privileged=True but env has no '{PRIVILEGED_GROUP}' group; groups: {list(env.obs_sizes)}"
            )
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.env = env
        self.obs_group = obs_group
        self.privileged = privileged
        self.num_envs = env.num_envs
        dim = env.obs_sizes[obs_group]
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (env.num_actions,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._episode_start = np.full(self.num_envs, time.perf_counter())

    # ---------------------------------------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every world and return ``(obs [N, D], infos)``.

        Args:
            seed: Seed of the wrapped env's single random stream. A list of seeds (gymnasium's per-env form) is
                accepted, but only its first element is used: the worlds share one stream, so seeding it once makes
                every world reproducible.
            options: Accepted for API compatibility and ignored (the tasks take no reset options).
        """
        if isinstance(seed, list | tuple):
            seed = seed[0] if seed else None
        seed = None if seed is None else int(seed)
        super().reset(seed=seed)  # seeds self.np_random as gymnasium's vector envs do
        obs = self.env.reset(seed=seed)
        self._episode_start[:] = time.perf_counter()
        infos: dict[str, Any] = {}
        if self.privileged:
            infos["privileged_obs"] = to_numpy(obs[PRIVILEGED_GROUP])
        return to_numpy(obs[self.obs_group]), infos

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every world with normalised actions ``[N, A]`` (clipped to ``[-1, 1]`` by the task).

        Returns:
            ``(obs [N, D] float32, rewards [N] float32, terminations [N] bool, truncations [N] bool, infos)``.
        """
        expected = (self.num_envs, self.env.num_actions)
        if np.shape(actions) != expected:
            raise ValueError(f"actions must have shape {expected}, got {np.shape(actions)}")
        act = torch.as_tensor(np.asarray(actions, dtype=np.float32), device=self.env.device)
        obs, reward, terminated, truncated, info = self.env.step(act)
        done_t = terminated | truncated
        infos: dict[str, Any] = {}
        if self.privileged:
            infos["privileged_obs"] = to_numpy(obs[PRIVILEGED_GROUP])
        if bool(done_t.any()):
            done = to_numpy(done_t, np.bool_)
            infos["final_obs"], infos["_final_obs"] = to_numpy(info.final_obs[self.obs_group]), done
            if self.privileged:
                infos["final_privileged_obs"] = to_numpy(info.final_obs[PRIVILEGED_GROUP])
                infos["_final_privileged_obs"] = done.copy()
            if info.episode_return is not None and info.episode_length is not None:
                now = time.perf_counter()
                infos["episode"] = {
                    "r": np.where(done, to_numpy(info.episode_return), 0.0).astype(np.float32),
                    "l": np.where(done, to_numpy(info.episode_length, np.int64), 0),
                    "t": np.where(done, np.round(now - self._episode_start, 6), 0.0),
                }
                self._episode_start[done] = now
                infos["_episode"] = done.copy()
            if info.success is not None:
                infos["success"], infos["_success"] = to_numpy(info.success & done_t, np.bool_), done.copy()
        return (
            to_numpy(obs[self.obs_group]),
            to_numpy(reward),
            to_numpy(terminated, np.bool_),
            to_numpy(truncated, np.bool_),
            infos,
        )

    def close_extras(self, **kwargs: Any) -> None:
        """Close the wrapped env (``close()`` calls this once)."""
        self.env.close()

    @property
    def dt(self) -> float:
        """Control period of the wrapped env, seconds."""
        return self.env.dt

    @property
    def max_episode_length(self) -> int:
        """Episode time limit of the wrapped env, control steps."""
        return self.env.max_episode_length
