"""Setpoints: the trained hover policy follows a 0.3 m step and a figure-eight (``robot-rl eval --trajectory``), the
velocity setpoint is what lets it keep up, and the request is refused where it means nothing."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from robot_rl.cli import main


@pytest.fixture(scope="module")
def hover_copy(trained_hover: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("tracking") / "run"
    shutil.copytree(trained_hover.run_dir, run)
    return run


def _fly(run: Path, kind: str) -> dict[str, Any]:
    assert main(["eval", str(run), "--trajectory", kind, "--episodes", "64"]) == 0
    assert (run / f"tracking_{kind}.png").stat().st_size > 10_000
    return yaml.safe_load((run / f"tracking_{kind}.yaml").read_text())["randomization_on"]


def test_the_hover_policy_follows_a_setpoint_step(hover_copy: Path) -> None:
    step = _fly(hover_copy, "step")
    assert step["crash_free_rate"] >= 0.95, step
    assert step["rise_time_s_median"] < 1.0 and step["overshoot_pct_median"] < 30.0, step
    assert step["settled_rate"] >= 0.8 and step["final_error_m_median"] < 0.05, step


def test_the_velocity_setpoint_lets_it_keep_up_with_a_figure_eight(hover_copy: Path) -> None:
    with_velocity, positions_only = _fly(hover_copy, "figure8"), _fly(hover_copy, "figure8-position")
    assert with_velocity["crash_free_rate"] >= 0.95, with_velocity
    assert with_velocity["rms_error_m_median"] < 0.06, with_velocity
    assert with_velocity["rms_error_m_median"] < 0.5 * positions_only["rms_error_m_median"], positions_only


def test_a_trajectory_is_refused_where_it_means_nothing(
    hover_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(hover_copy), "--trajectory", "step", "--sim", "pybullet"]) == 2
    assert "separate evaluations" in capsys.readouterr().err
    root = tmp_path / "runs"
    args = ["--max-iterations", "1", "--run-root", str(root), "--no-export", "--num-envs", "8"]
    assert main(["train", "cartpole-balance", *args]) == 0
    cart = next((root / "cartpole-balance").iterdir())
    assert main(["eval", str(cart), "--trajectory", "step", "--episodes", "4"]) == 2
    assert "has no movable target" in capsys.readouterr().err
