"""Adapters that let third-party RL libraries train on every :class:`~sim.vec_env.VecEnv` task.

* :class:`sim.adapters.gymnasium.GymVecEnv` — a ``gymnasium.vector.VectorEnv`` (numpy in/out, same-step autoreset).
* ``sim.adapters.sb3.SB3VecEnv`` — a Stable-Baselines3 ``VecEnv`` over :class:`GymVecEnv`. It lives in its own module
  and is not imported here, so ``import sim.adapters`` never needs the optional ``baselines`` extra.
"""

from sim.adapters.gymnasium import GymVecEnv

__all__ = ["GymVecEnv"]
