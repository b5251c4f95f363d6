"""The VecEnv contract, checked on every registered task (and so on every backend)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import sim
from sim.registry import UnknownTaskError, get_task
from sim.tasks.base import at_control_period
from sim.vec_env import TaskConfigError

TASKS = sim.task_names()
N = 16


def short_cfg(task: str, episode_length_s: float = 0.2) -> object:
    cfg = get_task(task).config_cls()
    return dataclasses.replace(cfg, episode_length_s=episode_length_s)


def rollout(task: str, seed: int, steps: int) -> list[torch.Tensor]:
    env = sim.make(task, N, cfg=short_cfg(task), seed=123)
    obs = env.reset(seed=seed)
    gen = torch.Generator().manual_seed(7)
    out = [obs["policy"].clone()]
    for _ in range(steps):
        obs, reward, *_ = env.step(2 * torch.rand(N, env.num_actions, generator=gen) - 1)
        out += [obs["policy"].clone(), obs["critic"].clone(), reward.clone()]
    return out


def test_registry_lists_tasks_and_rejects_unknown_names() -> None:
    assert {"quadrotor-hover", "cartpole-balance"} <= set(TASKS)
    with pytest.raises(UnknownTaskError, match=r"unknown task 'quadrotor-hoover'; registered tasks: .*quadrotor-hover"):
        sim.make("quadrotor-hoover", 1)
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        sim.make("quadrotor-hover", 0)


@pytest.mark.parametrize("task", TASKS)
def test_shapes_dtypes_and_finite_values(task: str) -> None:
    env = sim.make(task, N, cfg=short_cfg(task))
    obs = env.reset(seed=0)
    assert set(obs) >= {"policy", "critic"}
    assert env.dt > 0 and env.max_episode_length >= 1
    for _ in range(3 * env.max_episode_length):
        for name, size in env.obs_sizes.items():
            assert obs[name].shape == (N, size) and obs[name].dtype == torch.float32
            assert obs[name].device == env.device
            assert torch.isfinite(obs[name]).all(), name
        actions = 2 * torch.rand(N, env.num_actions) - 1
        obs, reward, terminated, truncated, info = env.step(actions)
        assert reward.shape == (N,) and reward.dtype == torch.float32 and torch.isfinite(reward).all()
        assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
        assert not (terminated & truncated).any(), "a time-out that is also a termination is a termination"
        for k, v in info["log"].items():
            assert v.shape == (N,), k
    with pytest.raises(ValueError, match="actions must have shape"):
        env.step(torch.zeros(N, env.num_actions + 1))


@pytest.mark.parametrize("task", TASKS)
def test_time_limit_truncates_and_auto_resets(task: str) -> None:
    env = sim.make(task, N, cfg=short_cfg(task, episode_length_s=0.1))
    env.set_randomization(False)
    env.reset(seed=0)
    hold = torch.zeros(N, env.num_actions)
    ended = torch.zeros(N, dtype=torch.bool)
    for k in range(env.max_episode_length):
        obs_next, _, terminated, truncated, info = env.step(hold)
        done = terminated | truncated
        if k < env.max_episode_length - 1:
            assert not truncated.any()
        ended |= done
        if done.any():
            assert info.episode_length is not None and info.episode_return is not None
            assert (info.episode_length[truncated] == env.max_episode_length).all()
            # the returned observation is the next episode's first one; the finished one is in final_obs
            assert not torch.equal(info["final_obs"]["critic"][done], obs_next["critic"][done])
            assert torch.equal(info["final_obs"]["critic"][~done], obs_next["critic"][~done])
    assert ended.all(), "every episode reaches the time limit or ends earlier"


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_trajectory(task: str) -> None:
    a, b = rollout(task, seed=5, steps=25), rollout(task, seed=5, steps=25)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    c = rollout(task, seed=6, steps=25)
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("task", TASKS)
def test_reset_with_seed_restarts_the_random_stream(task: str) -> None:
    env = sim.make(task, N, cfg=short_cfg(task))
    first = env.reset(seed=11)["critic"].clone()
    for _ in range(5):
        env.step(torch.zeros(N, env.num_actions))
    assert torch.equal(env.reset(seed=11)["critic"], first)


@pytest.mark.parametrize("task", TASKS)
def test_success_reported_where_episodes_end(task: str) -> None:
    env = sim.make(task, N, cfg=short_cfg(task, episode_length_s=0.1))
    env.reset(seed=0)
    for _ in range(env.max_episode_length):
        _, _, terminated, truncated, info = env.step(torch.zeros(N, env.num_actions))
    assert (terminated | truncated).all()
    assert info["success"] is not None and info["success"].dtype == torch.bool


@pytest.mark.parametrize("task", TASKS)
def test_deployment_contract_matches_policy_group(task: str) -> None:
    env = sim.make(task, 2)
    contract = env.contract(["policy"])
    assert contract.obs_dim == env.obs_sizes["policy"]
    assert contract.action.size == env.num_actions
    assert contract.control_period_s == pytest.approx(env.dt)
    assert contract.task == task


def test_an_env_without_randomisation_refuses_to_switch_it_off() -> None:
    from sim.vec_env import TaskConfigError, VecEnv

    class Bare(VecEnv):
        def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
            return {}

        def step(self, actions: torch.Tensor) -> tuple:  # type: ignore[type-arg]
            return ()

    env = Bare()
    env.set_randomization(True)
    assert env.randomization_enabled
    with pytest.raises(TaskConfigError, match="Bare cannot switch randomisation off"):
        env.set_randomization(False)


@pytest.mark.parametrize("task", TASKS)
def test_every_task_runs_at_another_control_period_with_its_physics_step_kept(task: str) -> None:
    cfg = get_task(task).config_cls()
    step = cfg.dt / cfg.substeps  # the physics step (a field, or derived from physics_dt)
    for period in (2 * cfg.dt, step):  # slower than trained, and as fast as the physics steps
        fast = at_control_period(cfg, period)
        assert fast.dt == pytest.approx(period) and fast.dt / fast.substeps <= step + 1e-12
        env = sim.make(task, 2, cfg=fast)
        env.reset(seed=0)
        assert env.dt == pytest.approx(period) and env.contract(["policy"]).control_period_s == pytest.approx(period)
        env.step(torch.zeros(2, env.num_actions))
    for bad in (0.0, -0.02, float("nan")):
        with pytest.raises(TaskConfigError, match="control period must be a positive number of seconds"):
            at_control_period(cfg, bad)
    for bad in (1e-9, 2 * cfg.episode_length_s):  # a 1 GHz loop; one step longer than an episode
        with pytest.raises(TaskConfigError, match=r"control period must be within \[0.0001, "):
            at_control_period(cfg, bad)
    if hasattr(cfg, "physics_dt"):
        with pytest.raises(TaskConfigError, match=r"whole multiple of env.physics_dt"):
            at_control_period(cfg, 1.5 * cfg.physics_dt)
