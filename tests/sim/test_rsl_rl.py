"""rsl_rl interop: ``rsl-rl-lib``'s own runner trains a robot-rl task through :class:`RslRlVecEnv`, and its
checkpoint exports through robot-rl's contract (``robot-rl export onnx model_<it>.pt --task``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import sim
from policies.nets.rsl_rl import RslRlActor, RslRlCheckpointError
from policies.runtime import OnnxPolicy
from robot_rl.config import load_config
from robot_rl.evaluate import EVAL_SEED_OFFSET, evaluate_env, make_eval_env
from sim.typed_config import ConfigError
from tests.conftest import robot_rl

pytest.importorskip("rsl_rl", reason="rsl-rl-lib is in the dev extra")
from rsl_rl.runners import OnPolicyRunner

from robot_rl.algorithms.rsl_rl import runner_config, unmapped
from sim.adapters.rsl_rl import RslRlVecEnv


def test_adapter_follows_rsl_rl_conventions() -> None:
    """Observation groups as a TensorDict, dones = terminated | truncated, time-outs apart, logs under '/'."""
    env = RslRlVecEnv(sim.make("cartpole-balance", 4), seed=3)
    obs = env.get_observations()
    assert set(obs.keys()) == {"policy", "critic"} and obs["policy"].shape == (4, env.env.obs_sizes["policy"])
    ended = torch.zeros(4, dtype=torch.bool)
    for _ in range(env.max_episode_length):
        obs, reward, dones, extras = env.step(torch.zeros(4, env.num_actions))
        assert reward.shape == (4,) and dones.dtype == torch.bool
        assert bool((extras["time_outs"] <= dones).all())  # a time-out is a done
        assert all(k.startswith("/task/") for k in extras["log"])
        ended |= dones
    assert bool(ended.all())
    assert bool((env.episode_length_buf < env.max_episode_length).all())
    env.close()


@pytest.mark.slow
def test_rsl_rl_trains_the_cartpole_and_its_checkpoint_exports(tmp_path: Path) -> None:
    """rsl_rl's OnPolicyRunner, configured from the task's training file, learns to balance; the checkpoint it writes
    exports with the task's contract, acts as rsl_rl's own inference policy, and meets the task's criterion."""
    cfg = load_config("cartpole-balance", None, [])
    torch.manual_seed(cfg.seed)
    env = RslRlVecEnv(sim.make(cfg.task, cfg.num_envs, "cpu", cfg.env, cfg.seed), seed=cfg.seed)
    runner = OnPolicyRunner(env, runner_config(cfg), log_dir=None, device="cpu")
    runner.learn(150)
    checkpoint = tmp_path / "model_150.pt"
    runner.save(str(checkpoint))
    policy = runner.get_inference_policy("cpu")

    out = str(tmp_path / "export")
    done = robot_rl(
        "export", "onnx", str(checkpoint), "--task", cfg.task, "--activation", cfg.policy.activation, "--out", out
    )
    assert done.returncode == 0, done.stderr
    onnx = OnnxPolicy(tmp_path / "export" / "policy.onnx")
    obs = env.get_observations()
    expected = policy(obs).clamp(-1.0, 1.0).detach().numpy()
    command = onnx.run_obs(obs["policy"].numpy())
    np.testing.assert_allclose(onnx.normalized_action(command), expected, atol=1e-5)

    eval_env = make_eval_env(cfg.task, cfg.env, 64, torch.device("cpu"), randomize=True)
    result = evaluate_env(
        eval_env,
        lambda o: torch.from_numpy(onnx.normalized_action(onnx.run_obs(o["policy"].numpy()))),
        seed=cfg.seed + EVAL_SEED_OFFSET,
    )
    met, figures = eval_env.criterion(result.episodes)
    assert met, figures
    env.close()


def test_foreign_checkpoints_are_refused_by_name(tmp_path: Path) -> None:
    """A robot-rl checkpoint, a file that is not a checkpoint, an actor with another output or a broken layer chain:
    each a one-line error naming the file and what is wrong; the CLI needs --task for a checkpoint."""
    (tmp_path / "text.pt").write_text("not a checkpoint")
    with pytest.raises(RslRlCheckpointError, match=r"text\.pt' is not a readable torch checkpoint"):
        RslRlActor.load(tmp_path / "text.pt")
    torch.save({"model": {}, "config": {}}, tmp_path / "ours.pt")
    with pytest.raises(RslRlCheckpointError, match=r"is not an rsl_rl 5\.x checkpoint \(no 'actor_state_dict'"):
        RslRlActor.load(tmp_path / "ours.pt")
    layers = {"mlp.0.weight": torch.zeros(8, 4), "mlp.0.bias": torch.zeros(8)}
    last = {"mlp.2.weight": torch.zeros(2, 8), "mlp.2.bias": torch.zeros(2)}
    beta = {**layers, **last, "distribution.range_scale": torch.ones(2)}
    with pytest.raises(RslRlCheckpointError, match="not a GaussianDistribution with its own std"):
        RslRlActor.from_state_dict(beta)
    broken = {
        **layers,
        "mlp.2.weight": torch.zeros(2, 7),
        "mlp.2.bias": torch.zeros(2),
        "distribution.std_param": torch.ones(2),
    }
    with pytest.raises(RslRlCheckpointError, match=r"layer mlp\.2 takes 7 inputs, the layer before gives 8"):
        RslRlActor.from_state_dict(broken)
    rnn = {**layers, **last, "rnn.weight_ih_l0": torch.zeros(1), "distribution.std_param": torch.ones(2)}
    with pytest.raises(RslRlCheckpointError, match="recurrent or CNN actors are not read"):
        RslRlActor.from_state_dict(rnn)
    good = {"actor_state_dict": {**layers, **last, "distribution.std_param": torch.ones(2)}}
    torch.save(good, tmp_path / "model_1.pt")
    done = robot_rl("export", "onnx", str(tmp_path / "model_1.pt"))
    assert done.returncode == 2 and "name the task it was trained on with --task" in done.stderr
    done = robot_rl(
        "export", "onnx", str(tmp_path / "model_1.pt"), "--task", "cartpole-balance", "--out", str(tmp_path / "x")
    )
    assert done.returncode == 2 and "contract obs_dim is" in done.stderr and "the actor takes 4 inputs" in done.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("override", "named"),
    [("runner.reward_fade=[grasp]", "runner.reward_fade=['grasp']"),
     ("runner.entropy_fade=true", "runner.entropy_fade=true"),
     ("policy.init_from=runs/flat", "policy.init_from=runs/flat"),
     ("ppo.plateau_kl=0.003 runner.plateau_evaluations=20", "ppo.plateau_kl=0.003")],
)  # fmt: skip
def test_runner_config_refuses_what_rsl_rl_cannot_train(override: str, named: str) -> None:
    """A fading reward term or entropy bonus would silently train another objective under rsl_rl, a second KL switch
    would silently not happen, and a robot-rl run's networks are not rsl_rl's to start from: refused by name."""
    cfg = load_config("panda-lift", None, [*override.split(" "), "ppo.entropy_coef=0.006"])
    with pytest.raises(ConfigError, match=rf"rsl_rl has no equivalent of {re.escape(named)}"):
        runner_config(cfg)


def test_the_settings_rsl_rl_trains_without_are_named() -> None:
    """The quadrotor's ``ppo.refine_kl`` and ``ppo.max_std`` have no rsl_rl equivalent: named; defaults are not."""
    assert unmapped(load_config("quadrotor-hover", None, [])) == ["ppo.refine_kl=0.01", "ppo.max_std=0.3"]
    assert unmapped(load_config("cartpole-balance", None, ["ppo.min_std=0.05"])) == ["ppo.min_std=0.05"]
    assert unmapped(load_config("cartpole-balance", None, [])) == []
