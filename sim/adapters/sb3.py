"""A Stable-Baselines3 ``VecEnv`` over :class:`~sim.adapters.gymnasium.GymVecEnv` (SB3 takes no gymnasium VectorEnv).

Needs the optional ``baselines`` extra (``stable-baselines3``); nothing else in ``sim`` imports this module.

SB3's conventions, from its own ``DummyVecEnv``/``Monitor``, are kept exactly:

* ``step_wait`` returns ``(obs [N, D] float32, rewards [N] float32, dones [N] bool, infos: list of N dicts)`` with
  ``dones = terminated | truncated``; the returned ``obs`` of a finished world is already the next episode's first.
* Every info has ``"TimeLimit.truncated"`` (``truncated and not terminated``); a finished world's info also has
  ``"terminal_observation"`` ``[D]``. Together they make SB3's on-policy algorithms bootstrap time-outs with the
  value of the final observation, and treat crashes as true terminations.
* A finished world's info carries ``"episode": {"r", "l", "t"}`` as ``Monitor`` writes it (return, length, seconds
  since this wrapper was built), so ``rollout/ep_rew_mean`` is logged without a ``VecMonitor``, and ``"is_success"``
  where the task has a criterion.

The simulator steps all worlds together, so attributes and methods act on the whole batch: ``get_attr`` returns the
batch's value once per requested index, and ``set_attr``/``env_method`` refuse a subset of indices.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv as SB3BaseVecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from sim.adapters.gymnasium import GymVecEnv


class SB3VecEnv(SB3BaseVecEnv):
    """Stable-Baselines3 vectorised env over a :class:`GymVecEnv` (see the module docstring).

    Args:
        gym_vec_env: The gymnasium adapter; closing this env closes it.
    """

    def __init__(self, gym_vec_env: GymVecEnv) -> None:
        self.gym_env = gym_vec_env
        self._actions: np.ndarray | None = None
        self._t_start = time.perf_counter()
        super().__init__(gym_vec_env.num_envs, gym_vec_env.single_observation_space, gym_vec_env.single_action_space)

    # ------------------------------------------------------------------------------------------- stepping
    def reset(self) -> VecEnvObs:
        """Reset every world; a seed set by :meth:`seed` is used once (its first element: one random stream)."""
        obs, _ = self.gym_env.reset(seed=self._seeds[0])
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Remember the actions ``[N, A]`` for :meth:`step_wait` (the simulator steps synchronously)."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step with the remembered actions; see the module docstring for the returned infos."""
        if self._actions is None:
            raise RuntimeError("step_wait() called without a pending step_async()")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, vec_infos = self.gym_env.step(actions)
        dones = terminated | truncated
        time_outs = truncated & ~terminated
        infos: list[dict[str, Any]] = [{"TimeLimit.truncated": bool(t)} for t in time_outs]
        if dones.any():
            final_obs = vec_infos["final_obs"]
            episode = vec_infos.get("episode")
            success = vec_infos.get("success")
            elapsed = round(time.perf_counter() - self._t_start, 6)
            for i in np.flatnonzero(dones):
                info = infos[i]
                info["terminal_observation"] = final_obs[i]
                if episode is not None:
                    info["episode"] = {"r": float(episode["r"][i]), "l": int(episode["l"][i]), "t": elapsed}
                if success is not None:
                    info["is_success"] = bool(success[i])
        return obs, rewards.astype(np.float32, copy=False), dones, infos

    def close(self) -> None:
        """Close the gymnasium adapter and the simulator under it."""
        self.gym_env.close()

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed the next :meth:`reset` (SB3 semantics). Worlds share one stream, so only ``seed`` itself is used."""
        return super().seed(seed)

    # ----------------------------------------------------------------------------------- attributes, methods
    def _target(self, name: str) -> Any:
        """The object that holds ``name``: the gymnasium adapter, else the simulator env under it."""
        if hasattr(self.gym_env, name):
            return self.gym_env
        if hasattr(self.gym_env.env, name):
            return self.gym_env.env
        raise AttributeError(
            f"neither {type(self.gym_env).__name__} nor {type(self.gym_env.env).__name__} has '{name}'"
        )

    def _all_indices(self, indices: VecEnvIndices, what: str) -> None:
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError(f"{what} acts on the whole batch of worlds; pass indices=None (got {indices})")

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The batch's attribute, repeated once per requested index."""
        value = getattr(self._target(attr_name), attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute of the batch (all indices only)."""
        self._all_indices(indices, "set_attr")
        setattr(self._target(attr_name), attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Call a method of the batch once (all indices only); its result is repeated once per world."""
        self._all_indices(indices, "env_method")
        result = getattr(self._target(method_name), method_name)(*method_args, **method_kwargs)
        return [result for _ in range(self.num_envs)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """No world is wrapped in a per-env gymnasium wrapper (``Monitor`` included)."""
        return [False for _ in self._get_indices(indices)]
