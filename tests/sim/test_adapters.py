"""Gymnasium and Stable-Baselines3 adapters over every registered task: spaces, auto-reset, seeding, SB3 PPO."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import sim
import sim.tasks
from sim.adapters import GymVecEnv

# Register every task module, not only those sim.tasks imports itself, so new tasks are covered without edits here.
for _mod in pkgutil.iter_modules(sim.tasks.__path__):
    importlib.import_module(f"sim.tasks.{_mod.name}")
TASKS = sim.task_names()
N = 4


def short_config(task: str, steps: int = 3) -> Any:
    """The task's default config with episodes of ``steps`` control steps (time-outs come quickly)."""
    cfg = sim.get_task(task).config_cls()
    return dataclasses.replace(cfg, episode_length_s=steps * cfg.dt)


def make(task: str, num_envs: int = N, cfg: Any = None, seed: int = 0, **kwargs: Any) -> GymVecEnv:
    return GymVecEnv(sim.make(task, num_envs, "cpu", cfg, seed=seed), **kwargs)


def test_import_sim_does_not_import_stable_baselines3() -> None:
    code = "import sys, sim, sim.adapters, sim.adapters.gymnasium; print('stable_baselines3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


# ------------------------------------------------------------------------------------------------ gymnasium
@pytest.mark.parametrize("task", TASKS)
def test_spaces_shapes_and_dtypes(task: str) -> None:
    base = sim.make(task, N)
    env = GymVecEnv(base)
    d, a = base.obs_sizes["policy"], base.num_actions
    assert isinstance(env, gymnasium.vector.VectorEnv)
    assert env.num_envs == N
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    assert env.single_observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (d,), np.float32)
    assert env.single_action_space == gymnasium.spaces.Box(-1.0, 1.0, (a,), np.float32)
    assert env.observation_space.shape == (N, d) and env.action_space.shape == (N, a)

    obs, infos = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (N, d) and env.observation_space.contains(obs)
    assert infos == {}
    obs, rew, term, trunc, infos = env.step(env.action_space.sample())
    assert obs.dtype == np.float32 and obs.shape == (N, d) and env.observation_space.contains(obs)
    assert rew.dtype == np.float32 and rew.shape == (N,)
    assert term.dtype == np.bool_ and term.shape == (N,) and trunc.dtype == np.bool_ and trunc.shape == (N,)
    assert isinstance(infos, dict) and "privileged_obs" not in infos
    env.close()
    assert env.closed


@pytest.mark.parametrize("task", TASKS)
def test_time_out_reports_final_obs_and_episode(task: str) -> None:
    env = make(task, cfg=short_config(task, steps=3))
    obs, _ = env.reset(seed=1)
    zeros = np.zeros((N, env.env.num_actions), np.float32)
    for _ in range(2):
        obs, _, term, trunc, infos = env.step(zeros)
        assert not (term | trunc).any() and "final_obs" not in infos and "episode" not in infos
    last = obs
    obs, _, term, trunc, infos = env.step(zeros)
    assert trunc.all() and not term.any()  # nominal start, zero action: nothing crashes in 3 steps
    assert infos["final_obs"].shape == obs.shape and infos["final_obs"].dtype == np.float32
    assert infos["_final_obs"].dtype == np.bool_ and infos["_final_obs"].all()
    # same-step autoreset: obs is the next episode's first observation, final_obs continues the old one
    assert not np.allclose(infos["final_obs"], obs)
    assert not np.allclose(infos["final_obs"], last)
    assert infos["_episode"].all() and (infos["episode"]["l"] == 3).all()
    assert infos["episode"]["r"].dtype == np.float32
    if "success" in infos:
        assert infos["success"].dtype == np.bool_ and infos["_success"].all()
    # the next step continues the new episodes
    _, _, term, trunc, infos = env.step(zeros)
    assert not (term | trunc).any() and "final_obs" not in infos


@pytest.mark.parametrize("task", TASKS)
def test_seeded_reset_is_reproducible(task: str) -> None:
    a, b = make(task, seed=0), make(task, seed=123)  # construction seeds differ; reset(seed) decides
    actions = [a.action_space.sample() for _ in range(10)]
    obs_a, _ = a.reset(seed=7)
    obs_b, _ = b.reset(seed=[7, 8, 9, 10])  # a list: its first seed is used
    assert data_equivalence(obs_a, obs_b, exact=True)
    for act in actions:
        step_a, step_b = a.step(act), b.step(act)
        for info in (step_a[4], step_b[4]):  # episode "t" is wall-clock time (gymnasium's convention)
            info.get("episode", {}).pop("t", None)
        assert data_equivalence(step_a, step_b, exact=True)
    obs_c, _ = b.reset(seed=8)
    assert not np.allclose(obs_a, obs_c)


@pytest.mark.parametrize("task", TASKS)
def test_returned_arrays_are_not_reused(task: str) -> None:
    """As ``gymnasium.utils.env_checker.check_returned_data_not_reused``, for a vector env."""
    env = make(task, privileged=True)
    obs0, info0 = env.reset(seed=3)
    kept = (obs0.copy(), info0["privileged_obs"].copy())
    obs1, *_ = env.step(env.action_space.sample())
    kept1 = obs1.copy()
    env.step(env.action_space.sample())
    assert data_equivalence((obs0, info0["privileged_obs"]), kept, exact=True)
    assert data_equivalence(obs1, kept1, exact=True)


@pytest.mark.parametrize("task", TASKS)
def test_privileged_obs_only_on_request(task: str) -> None:
    base = sim.make(task, N)
    env = GymVecEnv(base, privileged=True)
    _, infos = env.reset(seed=0)
    assert infos["privileged_obs"].shape == (N, base.obs_sizes["critic"])
    env2 = make(task, cfg=short_config(task, steps=1), privileged=True)
    env2.reset(seed=0)
    _, _, _, trunc, infos = env2.step(np.zeros((N, env2.env.num_actions), np.float32))
    assert trunc.all() and infos["privileged_obs"].dtype == np.float32
    assert infos["final_privileged_obs"].shape == (N, base.obs_sizes["critic"]) and infos["_final_privileged_obs"].all()


def test_bad_arguments_are_refused_with_a_clear_message() -> None:
    base = sim.make(TASKS[0], N)
    with pytest.raises(ValueError, match="privileged"):
        GymVecEnv(base, obs_group="critic")
    with pytest.raises(ValueError, match=r"no observation group 'camera'.*policy"):
        GymVecEnv(base, obs_group="camera")
    env = GymVecEnv(base)
    env.reset()
    with pytest.raises(ValueError, match="actions must have shape"):
        env.step(np.zeros((N + 1, base.num_actions), np.float32))


# ----------------------------------------------------------------------------------------- stable-baselines3
def sb3_env(task: str, cfg: Any = None, num_envs: int = N, seed: int = 0) -> Any:
    pytest.importorskip("stable_baselines3")
    from sim.adapters.sb3 import SB3VecEnv

    return SB3VecEnv(make(task, num_envs, cfg, seed))


@pytest.mark.parametrize("task", TASKS)
def test_sb3_time_outs_are_marked_for_bootstrapping(task: str) -> None:
    env = sb3_env(task, short_config(task, steps=3))
    env.seed(5)
    obs = env.reset()
    zeros = np.zeros((N, *env.action_space.shape), np.float32)
    for _ in range(2):
        obs, rew, dones, infos = env.step(zeros)
        assert not dones.any() and all(i == {"TimeLimit.truncated": False} for i in infos)
    obs, rew, dones, infos = env.step(zeros)
    assert dones.all() and rew.dtype == np.float32 and len(infos) == N
    for i, info in enumerate(infos):
        assert info["TimeLimit.truncated"] is True
        term = info["terminal_observation"]
        assert term.shape == env.observation_space.shape and not np.allclose(term, obs[i])
        assert info["episode"]["l"] == 3 and isinstance(info["episode"]["r"], float)


CRASHING_TASKS = [t for t in TASKS if not t.startswith("panda-")]
"""Tasks whose robot can fail (crash, fall); a Panda reach episode only ends at its time limit."""


@pytest.mark.parametrize("task", CRASHING_TASKS)
def test_sb3_crashes_are_not_time_outs(task: str) -> None:
    env = sb3_env(task)
    env.reset()
    full = np.ones((N, *env.action_space.shape), np.float32)  # full command: every task's robot leaves its bounds
    for _ in range(300):
        _, _, dones, infos = env.step(full)
        if dones.any():
            break
    else:
        pytest.fail(f"{task}: no episode ended within 300 steps of full command")
    for i in np.flatnonzero(dones):
        assert infos[i]["TimeLimit.truncated"] is False and "terminal_observation" in infos[i]


def test_sb3_vecenv_api() -> None:
    task = TASKS[0]
    env = sb3_env(task)
    assert env.get_attr("render_mode") == [None] * N
    assert env.get_attr("dt", indices=[0, 2]) == [env.gym_env.dt] * 2
    assert env.get_attr("num_actions") == [env.gym_env.env.num_actions] * N  # falls through to the simulator env
    with pytest.raises(AttributeError, match="no_such_attr"):
        env.get_attr("no_such_attr")
    env.set_attr("obs_group", "policy")
    with pytest.raises(ValueError, match="whole batch"):
        env.set_attr("obs_group", "policy", indices=[1])
    with pytest.raises(ValueError, match="whole batch"):
        env.env_method("reset", indices=0)
    assert env.env_is_wrapped(gymnasium.Wrapper) == [False] * N
    # seed() takes effect at the next reset, like SB3's own VecEnvs; only the first seed matters
    assert list(env.seed(11)) == [11 + i for i in range(N)]
    obs = env.reset()
    twin, _ = make(task).reset(seed=11)
    assert data_equivalence(obs, twin, exact=True)
    env.close()
    assert env.gym_env.closed


@pytest.mark.parametrize("task", TASKS)
def test_sb3_ppo_trains_on_every_task(task: str, tmp_path: Path) -> None:
    """SB3's PPO runs its rollouts and updates through the adapter (an API check; bench/sb3_baseline.py measures
    what it learns)."""
    ppo_mod = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.logger import configure

    env = sb3_env(task, short_config(task, steps=5), num_envs=8)
    model = ppo_mod.PPO("MlpPolicy", env, n_steps=8, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.set_logger(configure(str(tmp_path), []))  # SB3's default makes a folder under /tmp on every call
    model.learn(total_timesteps=128)
    assert model.num_timesteps >= 128
    assert model.ep_info_buffer is not None and len(model.ep_info_buffer) > 0  # episodes seen through info["episode"]
    action, _ = model.predict(env.reset(), deterministic=True)
    assert action.shape == (8, *env.action_space.shape)
    env.close()
