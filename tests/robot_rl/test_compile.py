"""``compile=true`` (``torch.compile`` of the hover physics and of PPO's minibatch loss) computes what eager does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo

import sim
from robot_rl.config import load_config
from robot_rl.runner import OnPolicyRunner
from sim.typed_config import ConfigError


@pytest.fixture(autouse=True)
def compiling() -> Iterator[None]:
    """The suite runs compiled code eagerly (tests/conftest.py); these tests compile."""
    with torch._dynamo.config.patch(disable=False):
        yield


SMALL = [
    "num_envs=32",
    "ppo.num_steps=4",
    "ppo.num_epochs=2",
    "ppo.num_minibatches=2",
    "runner.eval_interval=0",
    "runner.max_iterations=2",
    "env.episode_length_s=0.5",
]


def test_compiled_hover_physics_follows_the_eager_physics() -> None:
    cfg = load_config("quadrotor-hover")
    cpu = torch.device("cpu")
    eager, compiled = (sim.make("quadrotor-hover", 64, cpu, cfg.env, seed=0) for _ in range(2))
    compiled.compile()
    eager.reset(seed=3)
    compiled.reset(seed=3)
    gen = torch.Generator().manual_seed(0)
    for step in range(25):  # random rotor commands: crashes and resets happen, on the same steps in both
        action = torch.rand(64, 4, generator=gen) * 2 - 1
        a, b = eager.step(action), compiled.step(action)
        torch.testing.assert_close(b[0]["critic"], a[0]["critic"], rtol=1e-4, atol=1e-4, msg=f"step {step}")
        assert torch.equal(a[2], b[2]) and torch.equal(a[3], b[3]), f"terminations differ at step {step}"


def test_compiled_ppo_trains_the_same_networks_as_eager(tmp_path: Path) -> None:
    def train(*more: str) -> dict[str, torch.Tensor]:
        cfg = load_config("quadrotor-hover", None, [*SMALL, f"run_root={tmp_path}", *more])
        run_dir = tmp_path / more[0]
        run_dir.mkdir()
        runner = OnPolicyRunner(cfg, run_dir, quiet=True)
        runner.train()
        return runner.model.state_dict()

    eager, compiled = train("compile=false"), train("compile=true")
    for name, value in eager.items():
        torch.testing.assert_close(compiled[name], value, rtol=1e-3, atol=1e-4, msg=name)


def test_compile_without_a_cpp_compiler_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    cfg = load_config("quadrotor-hover", None, [*SMALL, f"run_root={tmp_path}"])
    assert cfg.compile  # the shipped setting; loading it (to evaluate or export a run) needs no compiler
    with pytest.raises(ConfigError, match=r"'no-such-c\+\+-compiler' .* is not on PATH.*set compile=false"):
        OnPolicyRunner(cfg, tmp_path, quiet=True)
    assert not list(tmp_path.iterdir())  # refused before anything was written
    OnPolicyRunner(load_config("quadrotor-hover", None, [*SMALL, "compile=false"]), tmp_path, quiet=True)
