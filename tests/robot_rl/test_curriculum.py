"""Reward curricula: a term's scale, or PPO's entropy bonus, fades to zero once the training episodes succeed; a resume
continues the fade."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim
from robot_rl.checkpoint import read_checkpoint
from robot_rl.config import load_config
from robot_rl.curriculum import RewardFade
from robot_rl.runner import OnPolicyRunner
from sim.tasks.base import BatchedTask
from sim.typed_config import ConfigError
from sim.vec_env import TaskConfigError
from tests.robot_rl.conftest import TASK, TINY
from tests.robot_rl.test_training import MakeCfg, read_rows, train

SUCCEEDING = [
    "ppo.num_steps=8",
    "runner.spread_episode_starts=false",
    "env.episode_length_s=0.1",  # 5 periods: every world ends an episode in each iteration of 8 steps
    "env.success_window_s=0.1",
    "env.success_pos_error=10",  # every episode without a crash succeeds
    "runner.reward_fade=[position_fine]",
    "runner.reward_fade_after=0.5",
    "runner.reward_fade_iterations=2",
]
"""Training episodes that succeed from the first iteration, so the fade starts after it."""


def test_the_fade_is_linear_from_the_iteration_after_its_start() -> None:
    fade = RewardFade({"hand_tilt": -10.0}, after=0.2, iterations=4)
    assert not fade.observe(3, None) and not fade.observe(3, 0.1)  # no finished episode; too few successes
    assert fade.current(3) == {"hand_tilt": -10.0}
    assert fade.observe(5, 0.2)
    assert not fade.observe(6, 0.9)  # it starts once
    assert [fade.factor(i) for i in (5, 6, 7, 8, 9)] == [0.75, 0.5, 0.25, 0.0, 0.0]
    assert fade.current(6) == {"hand_tilt": -5.0}


def test_the_entropy_bonus_fades_with_the_same_factor() -> None:
    fade = RewardFade({}, after=0.2, iterations=4, entropy_coef=0.006)
    assert fade.entropy(2) == 0.006 and fade.current(2) == {}
    assert fade.observe(5, 0.3)
    assert [fade.entropy(i) for i in (5, 6, 8)] == [pytest.approx(0.0045), pytest.approx(0.003), 0.0]


def test_training_fades_the_entropy_bonus_once_its_episodes_succeed_and_a_resume_continues_it(
    make_cfg: MakeCfg, tmp_path: Path
) -> None:
    entropy = [*SUCCEEDING[:-3], "runner.entropy_fade=true", "ppo.entropy_coef=0.01", "runner.reward_fade_iterations=4"]
    runner, _ = train(make_cfg(*entropy, "runner.max_iterations=2"), tmp_path / "first")
    rows = read_rows(tmp_path / "first" / "metrics.csv")
    assert [float(r["curriculum/entropy_coef"]) for r in rows] == pytest.approx([0.0075, 0.005])
    assert runner.ppo.entropy_coef == pytest.approx(0.005) and runner.fade is not None and not runner.fade.scales
    resumed = OnPolicyRunner(
        make_cfg(*entropy, "runner.max_iterations=4"),
        tmp_path / "second",
        resume=tmp_path / "first" / "checkpoint.pt",
        quiet=True,
    )
    assert resumed.ppo.entropy_coef == pytest.approx(0.005)  # where the first run left it, not ppo.entropy_coef
    (tmp_path / "second").mkdir()
    resumed.train()
    rows = read_rows(tmp_path / "second" / "metrics.csv")
    assert [float(r["curriculum/entropy_coef"]) for r in rows] == pytest.approx([0.0025, 0.0])


def test_training_fades_the_term_once_its_episodes_succeed_and_a_resume_continues_the_fade(
    make_cfg: MakeCfg, tmp_path: Path
) -> None:
    runner, _ = train(make_cfg(*SUCCEEDING, "runner.max_iterations=1"), tmp_path / "first")
    rows = read_rows(tmp_path / "first" / "metrics.csv")
    assert float(rows[0]["episode/success"]) >= 0.5  # the premise: the first iteration's episodes succeed
    assert [float(r["curriculum/reward_fade"]) for r in rows] == [0.5]
    assert read_checkpoint(tmp_path / "first" / "checkpoint.pt")["reward_fade_start"] == 1
    nominal = runner.cfg.env.reward_scales["position_fine"]

    resumed = OnPolicyRunner(
        make_cfg(*SUCCEEDING, "runner.max_iterations=3"),
        tmp_path / "second",
        resume=tmp_path / "first" / "checkpoint.pt",
        quiet=True,
    )
    assert isinstance(resumed.env, BatchedTask)
    assert resumed.env.reward_scales["position_fine"] == 0.5 * nominal  # where the first run left it
    (tmp_path / "second").mkdir()
    resumed.train()
    rows = read_rows(tmp_path / "second" / "metrics.csv")
    assert [float(r["curriculum/reward_fade"]) for r in rows] == [0.0, 0.0]
    assert "position_fine" not in resumed.env.reward_scales and resumed.fade is not None
    assert resumed.fade.start == 1

    # Without successes the fade never starts: the same run, a bar no episode meets.
    _, _ = train(make_cfg(*SUCCEEDING, "env.success_pos_error=1e-9", "runner.max_iterations=2"), tmp_path / "none")
    assert [float(r["curriculum/reward_fade"]) for r in read_rows(tmp_path / "none" / "metrics.csv")] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("runner.reward_fade=[no_such_term]", "'no_such_term', not a reward term of this task"),
        ("runner.reward_fade=[position_fine,position_fine]", "names a term twice"),
        ("runner.reward_fade_after=0", "runner.reward_fade_after must be in (0, 1]"),
        ("runner.reward_fade_iterations=0", "runner.reward_fade_iterations must be >= 1"),
    ],
)
def test_a_bad_fade_is_refused_by_name_before_training(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_config(TASK, None, [*TINY, "runner.reward_fade=[position_fine]", override])


def test_a_term_whose_scale_is_zero_has_nothing_to_fade() -> None:
    with pytest.raises(ConfigError, match=r"env.reward_scales.position_fine is 0: nothing to fade"):
        load_config(TASK, None, [*TINY, "env.reward_scales.position_fine=0", "runner.reward_fade=[position_fine]"])


def test_an_entropy_bonus_of_zero_has_nothing_to_fade() -> None:
    with pytest.raises(ConfigError, match=r"runner.entropy_fade fades ppo.entropy_coef, which is 0.0: nothing to fade"):
        load_config(TASK, None, [*TINY, "ppo.entropy_coef=0", "runner.entropy_fade=true"])


def test_the_env_refuses_an_unknown_term_or_a_scale_that_is_not_finite() -> None:
    env = sim.make(TASK, 2, "cpu")
    assert isinstance(env, BatchedTask)
    with pytest.raises(TaskConfigError, match="'nope' is not a reward term"):
        env.set_reward_scale("nope", 1.0)
    with pytest.raises(TaskConfigError, match=r"reward_scales\.alive must be finite"):
        env.set_reward_scale("alive", float("nan"))
    env.set_reward_scale("alive", 0.0)
    assert "alive" not in env.reward_scales
    env.set_reward_scale("alive", 2.5)
    assert env.reward_scales["alive"] == 2.5
