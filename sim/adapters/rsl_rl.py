"""An rsl_rl ``VecEnv`` over any :class:`~sim.vec_env.VecEnv`: ``rsl-rl-lib``'s ``OnPolicyRunner`` (the PPO of
legged_gym and Isaac Lab) trains any robot-rl task, with robot-rl's observation groups as its actor and critic sets.

Needs the optional ``rsl_rl`` extra (``rsl-rl-lib``); nothing else in ``sim`` imports this module::

    from rsl_rl.runners import OnPolicyRunner
    from robot_rl.algorithms.rsl_rl import runner_config

    env = RslRlVecEnv(sim.make("cartpole-balance", 64))
    runner = OnPolicyRunner(env, runner_config(cfg), log_dir=None)   # cfg: a robot-rl training config
    runner.learn(200)

rsl_rl 5.x's conventions, from its ``rsl_rl.env.VecEnv``, kept exactly (``N = num_envs``, ``A = num_actions``)::

    get_observations() -> TensorDict {group: [N, D_group]}      all of the task's groups: "policy", "critic", ...
    step(actions [N, A]) -> obs TensorDict, rewards [N], dones [N], extras

* ``dones = terminated | truncated``; the returned ``obs`` of a finished world is already the next episode's first.
* ``extras["time_outs"]``: truncated and not terminated (rsl_rl bootstraps them with the critic's value).
* ``extras["log"]``: the task's per-step logs (reward terms, metrics) as ``/task/<name>`` means, and the success
  rate of the episodes that ended at this step as ``/task/success`` (only when some ended).
* ``episode_length_buf`` ``[N]``: control steps into each world's episode. rsl_rl writes it when asked to start
  worlds at random points (``learn(init_at_random_ep_len=True)``); writing it here spreads the task's own episode
  starts (:meth:`~sim.vec_env.VecEnv.spread_episode_starts`) instead, which is what that setting is for.

The runner's ``obs_groups`` (see :func:`robot_rl.algorithms.rsl_rl.runner_config`) map rsl_rl's sets to these
groups: ``{"actor": ["policy"], "critic": ["critic"]}`` is the asymmetric actor-critic robot-rl trains, and only an
actor that reads ``policy`` alone exports (``robot-rl export onnx model_<it>.pt --task TASK``).
"""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.env import VecEnv as RslVecEnv
from tensordict import TensorDict

from sim.vec_env import Obs, VecEnv


class RslRlVecEnv(RslVecEnv):
    """rsl_rl vectorised env over a robot-rl :class:`~sim.vec_env.VecEnv` (see the module docstring).

    Args:
        env: The batched simulator env; the adapter owns it from now on (``close`` closes it).
        seed: Seed of the first reset.
    """

    def __init__(self, env: VecEnv, seed: int | None = 0) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.cfg: Any = getattr(env, "cfg", {})
        self._steps = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
        self._obs = self._wrap(env.reset(seed=seed))

    def _wrap(self, obs: Obs) -> TensorDict:
        return TensorDict(dict(obs), batch_size=[self.num_envs], device=self.device)

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Control steps into each world's current episode ``[N]`` (a copy)."""
        return self._steps.clone()

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        """rsl_rl's request to start episodes at random points: the task spreads its own starts."""
        self.env.spread_episode_starts()

    def get_observations(self) -> TensorDict:
        """The current observation groups ``{group: [N, D_group]}``."""
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step every world with ``actions [N, A]``; see the module docstring for ``dones`` and ``extras``."""
        obs, reward, terminated, truncated, info = self.env.step(actions.to(self.device))
        dones = terminated | truncated
        self._steps = torch.where(dones, 0, self._steps + 1)
        log: dict[str, float | torch.Tensor] = {f"/task/{k}": v.float().mean() for k, v in info.log.items()}
        if info.success is not None and bool(dones.any()):
            log["/task/success"] = info.success[dones].float().mean()
        self._obs = self._wrap(obs)
        extras = {"time_outs": truncated & ~terminated, "log": log}
        return self._obs, reward, dones, extras

    def close(self) -> None:
        """Close the simulator env."""
        close = getattr(self.env, "close", None)
        if close is not None:
            close()
