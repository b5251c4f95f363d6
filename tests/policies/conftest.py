"""Shared fixtures for the export and runtime tests: a hand-made contract and a non-trivial actor-critic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from policies.nets import ActorCritic
from policies.nets.export import export_onnx
from policies.runtime.contract import ActionSpec, Contract, ObservationTerm

NUM_ACTIONS = 4


def make_contract(kind: str = "torque") -> Contract:
    """Three terms (two with history > 1, one ``last_action``) and an action mapping whose limits clip.

    ``torque``: commands of order 1 N m, so a 1e-5 absolute tolerance is meaningful. ``rpm``: commands of
    order 1e4 RPM (float32 resolution ~1e-3 RPM), compared in normalised units.
    """
    terms = [
        ObservationTerm("base_ang_vel", 3, "ang_vel", scale=0.25, history=2, unit="rad/s"),
        ObservationTerm("joint_pos", NUM_ACTIONS, "joint_pos", scale=1.0, history=3, unit="rad"),
        ObservationTerm("last_action", NUM_ACTIONS, "last_action"),
    ]
    names = [f"m{i}" for i in range(NUM_ACTIONS)]
    if kind == "rpm":
        action = ActionSpec(
            size=NUM_ACTIONS,
            names=names,
            kind="rpm",
            scale=[4000.0, 3500.0, 4200.0, 3900.0],
            offset=[8000.0, 8100.0, 7900.0, 8050.0],
            low=[5000.0, 5000.0, 5000.0, 5000.0],
            high=[11000.0, 11000.0, 11000.0, 11000.0],
            unit="RPM",
        )
    else:
        action = ActionSpec(
            size=NUM_ACTIONS,
            names=names,
            kind="torque",
            scale=[1.5, 0.8, 2.0, 1.2],
            offset=[0.1, -0.2, 0.0, 0.3],
            low=[-1.0, -0.9, -1.5, -0.5],
            high=[1.0, 0.5, 1.5, 1.2],
            unit="N m",
        )
    return Contract(
        task="test-task",
        control_period_s=0.02,
        observation=terms,
        action=action,
        joint_names=names,
        default_pose=[0.0] * NUM_ACTIONS,
        filter={"tank_init_j": 1.0},
        extra={"note": "hand-made for tests"},
    )


def make_model(obs_dim: int, seed: int = 0) -> ActorCritic:
    """Random actor-critic with a non-trivial normaliser and an actor whose mean often leaves ``[-1, 1]``."""
    torch.manual_seed(seed)
    model = ActorCritic(obs_dim, obs_dim + 5, NUM_ACTIONS, actor_hidden=(32, 32), critic_hidden=(16,))
    mean = torch.linspace(-3.0, 3.0, obs_dim)
    std = torch.linspace(0.2, 5.0, obs_dim)
    model.update_normalizers(mean + std * torch.randn(4096, obs_dim), torch.randn(4096, obs_dim + 5))
    with torch.no_grad():
        model.actor[-1].weight.mul_(300.0)  # out_gain 0.01 keeps the initial mean tiny; make the clip matter
        model.actor[-1].bias.copy_(torch.tensor([0.3, -0.5, 0.0, 0.2]))
    return model


def random_obs(obs_dim: int, n: int, seed: int = 1) -> torch.Tensor:
    """``[n, obs_dim]`` raw observations near the normaliser's statistics, with outliers beyond its clip."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.linspace(-3.0, 3.0, obs_dim)
    std = torch.linspace(0.2, 5.0, obs_dim)
    obs = mean + std * torch.randn(n, obs_dim, generator=g)
    obs[:10] *= 100.0  # beyond the normaliser's +-10 clip
    return obs


@pytest.fixture(scope="session")
def build_contract() -> Callable[..., Contract]:
    """:func:`make_contract` as a fixture (``build_contract("rpm")``)."""
    return make_contract


@pytest.fixture(scope="session")
def build_model() -> Callable[..., ActorCritic]:
    """:func:`make_model` as a fixture (``build_model(obs_dim, seed=...)``)."""
    return make_model


@pytest.fixture(scope="session")
def sample_obs() -> Callable[..., torch.Tensor]:
    """:func:`random_obs` as a fixture (``sample_obs(obs_dim, n, seed=...)``)."""
    return random_obs


@pytest.fixture(scope="module")
def contract() -> Contract:
    return make_contract()


@pytest.fixture(scope="module")
def model(contract: Contract) -> ActorCritic:
    return make_model(contract.obs_dim)


@pytest.fixture(scope="module")
def exported(model: ActorCritic, contract: Contract, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``policy.onnx`` (plus ``contract.yaml``) exported once per module."""
    return export_onnx(model, contract, tmp_path_factory.mktemp("export"))


@pytest.fixture
def write_onnx_with_metadata(tmp_path: Path) -> Callable[[Path, dict[str, str]], Path]:
    """Copy an ONNX file with its metadata replaced by ``props``."""
    import onnx
    import onnx.helper

    def write(src: Path, props: dict[str, str]) -> Path:
        proto = onnx.load(str(src))
        onnx.helper.set_model_props(proto, props)
        dst = tmp_path / "edited.onnx"
        onnx.save(proto, str(dst))
        return dst

    return write
