"""Fixtures shared by the whole suite: one trained quadrotor hover policy, trained once per test session.

Training it takes one to two minutes on 2 cores, so the run is made once and shared by every test (and every
pytest-xdist worker) that needs a *flying* policy: the learning test, the exported-ONNX closed loop, the firmware
closed loop and the ROS 2 node.
A file lock in pytest's shared temporary folder makes the first worker train and the others wait for its result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from filelock import FileLock

HOVER_OVERRIDES = ["runner.max_iterations=200", "runner.eval_interval=5", "runner.stop_on_success=true"]
"""Train until the task's criterion is met (evaluated every 5 iterations), at most 200 iterations (13 M steps); the
shipped seeds meet it after 65-110 iterations."""


@dataclass(frozen=True)
class TrainedRun:
    """A finished training run: its folder, exported policy and evaluations before and after training."""

    run_dir: Path
    onnx: Path
    before: dict[str, float]
    after: dict[str, float]
    overrides: tuple[str, ...] = tuple(HOVER_OVERRIDES)


def _train_hover(root: Path) -> dict[str, object]:
    from policies.nets.export import export_onnx
    from robot_rl.config import load_config
    from robot_rl.runner import OnPolicyRunner

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = load_config("quadrotor-hover", None, [*HOVER_OVERRIDES, f"run_root={root}"])
        run_dir = root / "run"
        run_dir.mkdir(parents=True)
        runner = OnPolicyRunner(cfg, run_dir, quiet=True)
        before = runner.evaluate(randomize=True).summary()
        runner.train()
        after = runner.evaluate(randomize=True).summary()
        onnx = export_onnx(runner.model, runner.env.contract(["policy"]), run_dir)
    finally:
        torch.set_num_threads(previous)
    return {"run_dir": str(run_dir), "onnx": str(onnx), "before": before, "after": after}


@pytest.fixture(scope="session")
def trained_hover(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The quadrotor hover policy after the learning test's budget (trained once, shared across workers)."""
    shared = tmp_path_factory.getbasetemp().parent / "trained-hover"
    shared.mkdir(exist_ok=True)
    done = shared / "result.json"
    with FileLock(str(shared / "lock")):
        if not done.exists():
            done.write_text(json.dumps(_train_hover(shared / "train")))
    data = json.loads(done.read_text())
    return TrainedRun(Path(data["run_dir"]), Path(data["onnx"]), data["before"], data["after"])
