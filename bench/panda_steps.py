"""``panda-reach`` env steps per second against the physical limit and against gymnasium's ``AsyncVectorEnv``.

For each world count ``N`` (one control step = 10 MuJoCo steps of 4 ms, 25 Hz control), measured back to back:

- ``raw``:   the same compiled model in :class:`~sim.backends.mujoco_batch.MujocoBatch`, constant controls, no task
             logic — the physical limit of this machine for this model;
- ``task``:  ``sim.make("panda-reach", N)`` (backend ``mujoco``) with random actions: randomisation, noise,
             observations, rewards, resets, torch conversion — what training sees;
- ``async``: gymnasium ``AsyncVectorEnv`` of ``N`` single-world ``gymnasium.Env`` subprocesses stepping the same model
             with ``mujoco.mj_step`` and returning ``qpos, qvel`` (the usual way to parallelise MuJoCo in Python;
             measured up to ``--async-max`` worlds, one process each);
- ``mjwarp``: the task on MuJoCo Warp (``--mjwarp``; Warp's CPU device here, CUDA where present), kernel compile
             time reported separately.

Figures are control steps (world steps) per second; ratios compare columns of the same row, measured in one run.

Run::

    python bench/panda_steps.py                           # 1..4096 worlds
    python bench/panda_steps.py --num-envs 64 1024 --seconds 1 --mjwarp
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import torch

import sim
from sim.backends.mujoco_batch import MujocoBatch
from sim.robots import panda
from sim.tasks.panda.reach import PandaReachConfig

FRAME_SKIP = 10


def _timed(step: Any, seconds: float) -> tuple[int, float]:
    step()  # warm-up
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    return n, time.perf_counter() - start


def raw_rate(num_envs: int, seconds: float) -> float:
    """Control steps/s of bare batched stepping (no task logic)."""
    batch = MujocoBatch(panda.build_model("impedance"), num_envs, frame_skip=FRAME_SKIP)
    batch.qpos[:, :7] = panda.HOME
    ctrl = np.tile(np.r_[panda.HOME, panda.FINGER_STROKE], (num_envs, 1))
    n, dt = _timed(lambda: batch.step(ctrl), seconds)
    batch.close()
    return num_envs * n / dt


def task_rate(num_envs: int, seconds: float, backend: str = "mujoco", device: str = "cpu") -> tuple[float, float]:
    """Control steps/s of the task with random actions, and (mjwarp) the first step's compile time."""
    env = sim.make("panda-reach", num_envs, device, PandaReachConfig(backend=backend))
    env.reset(seed=0)
    gen = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        env.step(2 * torch.rand(num_envs, 7, generator=gen, device=device) - 1)

    n, dt = _timed(step, seconds)
    compile_s = getattr(env.physics, "compile_s", None) or 0.0  # type: ignore[attr-defined]
    env.close()
    return num_envs * n / dt, compile_s


class _SingleWorld:
    """One Panda world as a minimal gymnasium env (the peer's usual structure)."""

    def __init__(self) -> None:
        import gymnasium as gym
        import mujoco

        self.mujoco = mujoco
        self.model = panda.build_model("impedance")
        self.data = mujoco.MjData(self.model)
        n = self.model.nq + self.model.nv
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (n,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)
        self.metadata: dict[str, Any] = {}
        self.render_mode = None
        self.spec = None

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:7] = panda.HOME
        return np.concatenate((self.data.qpos, self.data.qvel)), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.data.ctrl[:7] = np.asarray(panda.HOME) + action
        self.data.ctrl[7] = panda.FINGER_STROKE
        for _ in range(FRAME_SKIP):
            self.mujoco.mj_step(self.model, self.data)
        return np.concatenate((self.data.qpos, self.data.qvel)), 0.0, False, False, {}

    def close(self) -> None:
        pass


def _make_world() -> Any:
    import gymnasium as gym

    class World(_SingleWorld, gym.Env):  # type: ignore[misc]
        pass

    return World()


def async_rate(num_envs: int, seconds: float) -> float:
    """Control steps/s of gymnasium's AsyncVectorEnv, one subprocess per world."""
    from gymnasium.vector import AsyncVectorEnv

    envs = AsyncVectorEnv([_make_world] * num_envs)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    n, dt = _timed(lambda: envs.step(rng.uniform(-1, 1, (num_envs, 7)).astype(np.float32)), seconds)
    envs.close()
    return num_envs * n / dt


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 16, 64, 256, 1024, 4096])
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement")
    p.add_argument("--async-max", type=int, default=64, help="largest world count run with AsyncVectorEnv")
    p.add_argument("--mjwarp", action="store_true", help="also measure the MuJoCo Warp backend")
    p.add_argument("--mjwarp-max", type=int, default=256, help="largest world count for mjwarp on the CPU device")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    print(f"panda-reach | torch {torch.__version__} | {os.cpu_count()} CPUs | control step = {FRAME_SKIP} x 4 ms")
    header = f"{'worlds':>7} {'raw':>10} {'task':>10} {'task/raw':>9} {'async':>10} {'task/async':>10}"
    if args.mjwarp:
        header += f" {'mjwarp':>10} {'compile s':>9}"
    print(header)
    for n in args.num_envs:
        raw = raw_rate(n, args.seconds)
        task, _ = task_rate(n, args.seconds)
        line = f"{n:>7} {raw:>10,.0f} {task:>10,.0f} {task / raw:>9.2f}"
        if n <= args.async_max:
            peer = async_rate(n, args.seconds)
            line += f" {peer:>10,.0f} {task / peer:>10.1f}"
        else:
            line += f" {'-':>10} {'-':>10}"
        if args.mjwarp and (cuda or n <= args.mjwarp_max):
            rate, compile_s = task_rate(n, args.seconds, "mjwarp", "cuda" if cuda else "cpu")
            line += f" {rate:>10,.0f} {compile_s:>9.1f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
