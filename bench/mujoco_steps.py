"""A MuJoCo task's env steps per second against the physical limit and against gymnasium's ``AsyncVectorEnv``.

Tasks: ``panda-reach`` (one control step = 10 MuJoCo steps of 4 ms, 25 Hz) and ``quadruped-velocity`` (4 steps of
5 ms, 50 Hz; ``quadruped-velocity:rough`` on the rough-terrain heightfield, the robot on a tile's platform). For
each world count ``N``, measured back to back:

- ``raw``:   the same compiled model in :class:`~sim.backends.mujoco_batch.MujocoBatch`, constant controls (the
             task's action 0), no task logic — the physical limit of this machine for this model;
- ``task``:  ``sim.make(task, N)`` (backend ``mujoco``) with random actions: randomisation, noise,
             observations, rewards, resets, torch conversion — what training sees;
- ``async``: gymnasium ``AsyncVectorEnv`` of ``N`` single-world ``gymnasium.Env`` subprocesses stepping the same model
             with ``mujoco.mj_step`` and returning ``qpos, qvel`` (the usual way to parallelise MuJoCo in Python;
             measured up to ``--async-max`` worlds, one process each);
- ``mjwarp``: the task on MuJoCo Warp (``--mjwarp``; Warp's CPU device here, CUDA where present), kernel compile
             time reported separately.

Figures are control steps (world steps) per second; ratios compare columns of the same row, measured in one run.

Run::

    python bench/mujoco_steps.py                           # panda-reach, 1..4096 worlds
    python bench/mujoco_steps.py --num-envs 64 1024 --seconds 1 --mjwarp
    python bench/mujoco_steps.py --task quadruped-velocity --num-envs 1 64 512 4096
    python bench/mujoco_steps.py --task quadruped-velocity:rough --num-envs 64 512 2048
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import sim
from sim.backends.mujoco_batch import MujocoBatch
from sim.robots import panda, unitree_a1
from sim.terrain import Terrain, TerrainConfig


@dataclass(frozen=True)
class Bare:
    """A task's model without the task: how to build it, where it starts and the controls of its action 0."""

    model: Callable[[], Any]
    qpos: Callable[[Any], np.ndarray]
    ctrl: np.ndarray
    frame_skip: int


def _panda_qpos(model: Any) -> np.ndarray:
    qpos = model.qpos0.copy()
    qpos[:7] = panda.HOME
    return qpos


@functools.cache
def _rough() -> Terrain:
    return Terrain(TerrainConfig(kind="rough"))


def _rough_qpos(model: Any) -> np.ndarray:
    """Standing on the platform of the first tile (the terrain's default seed)."""
    qpos = unitree_a1.standing_qpos(model)
    centre = torch.tensor(_rough().tile_centres[0, 0], dtype=torch.float32)
    qpos[0:2] = centre.numpy()
    qpos[2] += float(_rough().height_at(centre))
    return qpos


BARE = {
    "panda-reach": Bare(lambda: panda.build_model("impedance"), _panda_qpos,
                        np.r_[panda.HOME, panda.FINGER_STROKE], 10),
    "quadruped-velocity": Bare(unitree_a1.build_model, unitree_a1.standing_qpos,
                               np.asarray(unitree_a1.DEFAULT_POSE), 4),
    "quadruped-velocity:rough": Bare(lambda: unitree_a1.build_model(0.005, unitree_a1.Ground(terrain=_rough())),
                                     _rough_qpos, np.asarray(unitree_a1.DEFAULT_POSE), 4),
}  # fmt: skip
"""The tasks this bench knows."""


def _timed(step: Any, seconds: float) -> tuple[int, float]:
    step()  # warm-up
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    return n, time.perf_counter() - start


def raw_rate(task: str, num_envs: int, seconds: float) -> float:
    """Control steps/s of bare batched stepping (no task logic)."""
    bare = BARE[task]
    model = bare.model()
    batch = MujocoBatch(model, num_envs, frame_skip=bare.frame_skip)
    batch.qpos[:] = bare.qpos(model)
    ctrl = np.tile(bare.ctrl, (num_envs, 1))
    n, dt = _timed(lambda: batch.step(ctrl), seconds)
    batch.close()
    return num_envs * n / dt


def task_rate(
    task: str, num_envs: int, seconds: float, backend: str = "mujoco", device: str = "cpu"
) -> tuple[float, float]:
    """Control steps/s of the task with random actions, and (mjwarp) the first step's compile time."""
    name, _, variant = task.partition(":")
    extra: dict[str, Any] = {"terrain": TerrainConfig(kind="rough")} if variant == "rough" else {}
    env = sim.make(name, num_envs, device, sim.registry.get_task(name).config_cls(backend=backend, **extra))
    env.reset(seed=0)
    gen = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        env.step(2 * torch.rand(num_envs, env.num_actions, generator=gen, device=device) - 1)

    n, dt = _timed(step, seconds)
    compile_s = getattr(env.physics, "compile_s", None) or 0.0  # type: ignore[attr-defined]
    env.close()
    return num_envs * n / dt, compile_s


class _SingleWorld:
    """One world as a minimal gymnasium env (the peer's usual structure)."""

    def __init__(self, task: str) -> None:
        import gymnasium as gym
        import mujoco

        self.mujoco = mujoco
        self.bare = BARE[task]
        self.model = self.bare.model()
        self.data = mujoco.MjData(self.model)
        n = self.model.nq + self.model.nv
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (n,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (len(self.bare.ctrl),), np.float32)
        self.metadata: dict[str, Any] = {}
        self.render_mode = None
        self.spec = None

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = self.bare.qpos(self.model)
        return np.concatenate((self.data.qpos, self.data.qvel)), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.data.ctrl[:] = self.bare.ctrl + action
        for _ in range(self.bare.frame_skip):
            self.mujoco.mj_step(self.model, self.data)
        return np.concatenate((self.data.qpos, self.data.qvel)), 0.0, False, False, {}

    def close(self) -> None:
        pass


def _make_world(task: str) -> Any:
    import gymnasium as gym

    class World(_SingleWorld, gym.Env):  # type: ignore[misc]
        pass

    return World(task)


def async_rate(task: str, num_envs: int, seconds: float) -> float:
    """Control steps/s of gymnasium's AsyncVectorEnv, one subprocess per world."""
    import functools

    from gymnasium.vector import AsyncVectorEnv

    envs = AsyncVectorEnv([functools.partial(_make_world, task)] * num_envs)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    size = len(BARE[task].ctrl)
    n, dt = _timed(lambda: envs.step(rng.uniform(-1, 1, (num_envs, size)).astype(np.float32)), seconds)
    envs.close()
    return num_envs * n / dt


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(BARE), default="panda-reach")
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 16, 64, 256, 1024, 4096])
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement")
    p.add_argument("--async-max", type=int, default=64, help="largest world count run with AsyncVectorEnv")
    p.add_argument("--mjwarp", action="store_true", help="also measure the MuJoCo Warp backend")
    p.add_argument("--mjwarp-max", type=int, default=256, help="largest world count for mjwarp on the CPU device")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    bare, task = BARE[args.task], args.task
    step_ms = 1000 * bare.model().opt.timestep
    step = f"control step = {bare.frame_skip} x {step_ms:g} ms"
    print(f"{task} | torch {torch.__version__} | {os.cpu_count()} CPUs | {step}")
    header = f"{'worlds':>7} {'raw':>10} {'task':>10} {'task/raw':>9} {'async':>10} {'task/async':>10}"
    if args.mjwarp:
        header += f" {'mjwarp':>10} {'compile s':>9}"
    print(header)
    for n in args.num_envs:
        raw = raw_rate(task, n, args.seconds)
        rate, _ = task_rate(task, n, args.seconds)
        line = f"{n:>7} {raw:>10,.0f} {rate:>10,.0f} {rate / raw:>9.2f}"
        if n <= args.async_max:
            peer = async_rate(task, n, args.seconds)
            line += f" {peer:>10,.0f} {rate / peer:>10.1f}"
        else:
            line += f" {'-':>10} {'-':>10}"
        if args.mjwarp and (cuda or n <= args.mjwarp_max):
            warp, compile_s = task_rate(task, n, args.seconds, "mjwarp", "cuda" if cuda else "cpu")
            line += f" {warp:>10,.0f} {compile_s:>9.1f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
