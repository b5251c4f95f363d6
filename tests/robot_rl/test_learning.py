"""Learning improves: PPO on the MuJoCo cart-pole must actually learn, within a small fixed budget.

The budget is counted in iterations (not seconds: timed assertions do not belong in tests); on a 2-core CI machine
it takes well under a minute. The bar is the task's own success criterion (>= 95 % of 5 s episodes balanced, with
randomisation on) or, failing that, an evaluation return far above the untrained policy's.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

from policies.runtime import OnnxPolicy
from robot_rl.config import load_config
from robot_rl.evaluate import EVAL_SEED_OFFSET, evaluate_env, make_eval_env
from robot_rl.runner import OnPolicyRunner
from sim.vec_env import Obs
from tests.conftest import one_torch_thread

RETURN_BAR = 8.0
"""A balanced 5 s episode earns about 10; holding still (zero force) earns about 1.6, random actions about 1.3."""


@pytest.mark.slow
def test_ppo_learns_to_balance_the_cartpole(tmp_path: Path) -> None:
    overrides = [
        "num_envs=64",
        "runner.max_iterations=150",
        "runner.eval_interval=10",
        "runner.eval_episodes=64",
        "runner.stop_on_success=true",
    ]
    cfg = load_config("cartpole-balance", None, overrides)
    runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
    before = runner.evaluate(randomize=True)
    result = runner.train()
    after = runner.evaluate(randomize=True)
    assert before.summary()["return_mean"] < 3.0, "the untrained policy should not balance"
    assert result.criterion_met or after.summary()["return_mean"] >= RETURN_BAR, after.summary()
    assert after.summary()["return_mean"] > before.summary()["return_mean"] + 5.0


@pytest.mark.slow
def test_ppo_learns_to_hover_the_quadrotor(trained_hover: Any) -> None:
    """The main task: from crashing within a second to meeting the success criterion within the budget of
    ``tests/conftest.py``; then the exported ONNX policy flies the same evaluation in closed loop with the same
    result."""
    before, after = trained_hover.before, trained_hover.after
    assert before["crash_free_rate"] < 0.1, "the untrained policy should crash"
    assert after["criterion_met"], after  # >= 95 % crash-free, mean tail error < 5 cm, randomisation on
    assert after["return_mean"] > before["return_mean"] + 10.0

    # The exported graph flies the same episodes in closed loop: ONNX commands (RPM) -> normalised actions -> sim.
    cfg = load_config("quadrotor-hover", None, list(trained_hover.overrides))
    deployed = OnnxPolicy(trained_hover.onnx, num_envs=cfg.runner.eval_episodes)

    def onnx_policy(obs: Obs) -> torch.Tensor:
        command = deployed.run_obs(obs["policy"].cpu().numpy())
        return torch.from_numpy(deployed.normalized_action(command))

    env = make_eval_env(cfg.task, cfg.env, cfg.runner.eval_episodes, torch.device("cpu"), randomize=True)
    flown = evaluate_env(env, onnx_policy, seed=cfg.seed + EVAL_SEED_OFFSET).summary()
    assert flown["crash_free_rate"] == after["crash_free_rate"]
    assert flown["tail_position_error_m"] == pytest.approx(after["tail_position_error_m"], abs=2e-3)


CONTACT_TASK_BUDGET = {"panda-push": (256, 40, 0.4), "panda-lift": (256, 60, 1.0), "panda-insert": (512, 40, 1.4)}
"""Worlds and PPO iterations of a small budget per contact task, and the evaluation return it must add to the untrained
policy's (about half of what it added when measured, 2-core machine, seed 0: push -0.26 -> 0.55 at its 8 ms physics
step, about 35 s (-0.26 -> 0.67 at 4 ms); insert 0.08 -> 2.78 in about 45 s, where 256 worlds added only 0.04: its reach
stage pays from about 20,000 episode steps on; lift 0.06 -> 2.58 in 60 iterations, about 80 s, and 0.06 -> 2.71 since
its config draws the measured command delay and prices the housing, 2026-12-01). Lift's early learning depends on the
seed: with the training deterministic (one torch thread, persistent MuJoCo batch), 40 iterations added 1.03, 1.26,
0.33, 1.72, -0.01 and 1.71 for seeds 0-5 (seed 0's 1.03 passed the bar by 3 %; a CI run of the nondeterministic batch
once added 0.98), and seed 4 still only 0.08 after 60 and 0.14 after 80: the bar is checked at 60 iterations, on seed
0 (those seeds measured before 2026-12-01)."""


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(CONTACT_TASK_BUDGET))
def test_ppo_starts_learning_each_contact_task_from_its_training_config(task: str, tmp_path: Path) -> None:
    """The contact tasks' own training files (staged rewards, gripper action, the teachers' energy tank) with a small
    budget: PPO must move the policy well beyond the untrained one's return (the reach stage pays first). The full
    teachers take 10-30 min (docs/benchmarks.md); this checks that their learning starts."""
    worlds, iterations, gain = CONTACT_TASK_BUDGET[task]
    budget = [f"runner.max_iterations={iterations}", "runner.eval_interval=1000", "runner.eval_episodes=64"]
    cfg = load_config(task, None, [f"num_envs={worlds}", *budget])
    with one_torch_thread():  # the same policy on every run: a bar measured once holds
        runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
        before = runner.evaluate(randomize=True).summary()
        runner.train()
        after = runner.evaluate(randomize=True).summary()
    assert after["return_mean"] > before["return_mean"] + gain, (before, after)


WALK_FORWARD = [
    "num_envs=64",
    "runner.max_iterations=160",
    "runner.eval_interval=0",
    "runner.eval_episodes=32",
    "env.lin_vel_x=[0.5,1.0]",
    "env.lin_vel_y=[0.0,0.0]",
    "env.yaw_rate=[0.0,0.0]",
    "env.standing_share=0.0",
]
"""The quadruped's shipped training config (rewards, randomisation, pushes, noise, PPO) with forward commands only
(0.5-1 m/s: no sideways, turning or standing commands) in 64 worlds for 160 iterations (246 k env steps, about 100 s
on one core). The full task shows nothing for its first 2.5 M steps (docs/benchmarks.md, "Locomotion"); with forward
commands only, seed 0 starts to walk after about 120 iterations, at 64 or 128 worlds alike. Measured 2026-11-28
(training deterministic: one torch thread): the training episodes' tracking reward rose 5.0x (mean of the first and
last 10 iterations), and 32 evaluation episodes went from 0.76 to 0.44 m/s median velocity error, success 0 -> 16 %
(their return fell, 19.9 -> 16.9: the posture term pays the standing policy best). The start depends on the seed:
seeds 1 and 2 had barely begun by iteration 220 (velocity error 0.68 / 0.70 m/s), so the bars hold for seed 0."""


@pytest.mark.slow
def test_ppo_teaches_the_quadruped_to_walk_forward(tmp_path: Path) -> None:
    """The tracking reward rises: PPO turns the untrained policy, which stands at the default pose (about 0.8 m/s
    behind its command), into one that walks after the commanded forward velocity, randomisation on."""
    cfg = load_config("quadruped-velocity", None, WALK_FORWARD)
    with one_torch_thread():  # the same policy on every run: a bar measured once holds
        runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
        before = runner.evaluate(randomize=True).summary()
        runner.train()
        after = runner.evaluate(randomize=True).summary()
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    tracking = [float(r["reward/tracking_lin_vel"]) for r in rows]
    first, last = sum(tracking[:10]) / 10, sum(tracking[-10:]) / 10
    assert last > 2.5 * first, (first, last)
    assert after["velocity_error_m_s"] < before["velocity_error_m_s"] - 0.2, (before, after)
