"""Shared helpers for the training-side tests: tiny, fast configs with every artifact under ``tmp_path``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from robot_rl.config import TrainConfig, load_config

TASK = "quadrotor-hover"

TINY = [
    "num_envs=32",
    "ppo.num_steps=4",
    "ppo.num_epochs=2",
    "ppo.num_minibatches=2",
    "runner.max_iterations=3",
    "runner.eval_interval=0",
    "runner.eval_episodes=4",
    "runner.eval_gate=0",  # a test that schedules evaluations gets them
    "runner.save_interval=1",
    "env.episode_length_s=0.5",  # 50 control steps: time-outs happen inside a few short rollouts
]
"""Overrides that keep one training iteration in the tens of milliseconds."""


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread: the networks are tiny, and on a shared 2-core machine (``-n 2``) extra threads only
    contend (a short training ran ~4x slower with torch's default of one thread per core)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def make_cfg(tmp_path: Path) -> Callable[..., TrainConfig]:
    """``make_cfg(*overrides)``: a resolved tiny config for ``quadrotor-hover`` whose run root is ``tmp_path``."""

    def make(*overrides: str) -> TrainConfig:
        return load_config(TASK, None, [*TINY, f"run_root={tmp_path / 'runs'}", *overrides])

    return make


@pytest.fixture
def interrupt_on_call() -> Callable[[int, Callable[..., Any]], Callable[..., Any]]:
    """``interrupt_on_call(n, f)``: ``f`` wrapped so that its ``n``-th call raises KeyboardInterrupt (a Ctrl-C)."""

    def wrap(n: int, original: Callable[..., Any]) -> Callable[..., Any]:
        calls = {"n": 0}

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == n:
                raise KeyboardInterrupt
            return original(*args, **kwargs)

        return wrapper

    return wrap
