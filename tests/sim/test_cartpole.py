"""Cart-pole on batched MuJoCo: physics, exact batching, seeding, per-world randomisation, bad specs."""

from __future__ import annotations

import copy
from typing import Any

import mujoco
import numpy as np
import pytest
import torch

import sim.tasks.cartpole.balance  # noqa: F401  (registers the task)
from sim.backends.mujoco_batch import STATE_SPEC, MujocoBatch, load_model
from sim.randomization import RandomizationError, RandomizationTerm
from sim.registry import make
from sim.tasks.base import SensorNoise
from sim.tasks.cartpole.balance import CartpoleBalance, CartpoleBalanceConfig
from sim.typed_config import from_dict
from sim.vec_env import TaskConfigError

CPU = torch.device("cpu")
X, THETA, XDOT, THETADOT = range(4)


def quiet_config(**changes: Any) -> CartpoleBalanceConfig:
    """Nominal robot, no noise, no randomisation; ``changes`` override fields."""
    return CartpoleBalanceConfig(randomization=[], noise=SensorNoise(), **changes)


def run(env: CartpoleBalance, actions: torch.Tensor) -> list[torch.Tensor]:
    """Step ``env`` through ``actions`` ``[T, N, 1]``; the noise-free state ``[N, 4]`` after each step."""
    states = []
    for a in actions:
        env.step(a)
        states.append(env._state.clone())
    return states


# ---------------------------------------------------------------------------------------------------- physics
def test_pole_falls_without_force() -> None:
    sim = MujocoBatch(load_model("cartpole"), 1, frame_skip=2)
    sim.reset(np.array([0]), qpos=np.array([[0.0, 0.05]]))
    angles = []
    for _ in range(100):  # 2 s
        sim.step(np.zeros((1, 1)))
        angles.append(sim.qpos[0, 1])
    fell_at = np.argmax(np.abs(angles) > 0.4) * sim.control_dt
    assert 0.3 < fell_at < 1.5, f"pole passed 0.4 rad after {fell_at:.2f} s"
    assert angles[-1] > 0.4  # it falls the way it leaned (+x)


def test_positive_force_accelerates_cart_forwards() -> None:
    sim = MujocoBatch(load_model("cartpole"), 1, frame_skip=2)
    force = 5.0
    for _ in range(5):  # 0.1 s
        sim.step(np.array([[force]]))
    total_mass = float(sim.model.body_mass.sum())
    assert sim.qvel[0, 0] == pytest.approx(force / total_mass * 0.1, rel=0.1)  # v = F t / (M + m), damping small
    assert sim.qpos[0, 0] > 0.0
    assert sim.qpos[0, 1] < 0.0  # the pole lags behind: it leans towards -x


def test_batched_step_equals_single_world_mj_step() -> None:
    model = load_model("cartpole")
    n, steps = 5, 20
    rng = np.random.default_rng(0)
    qpos0, ctrl = rng.uniform(-0.2, 0.2, (n, 2)), rng.uniform(-5.0, 5.0, (steps, n, 1))
    pole_mass = np.array([0.1, 0.3, 0.1, 0.05, 0.2])
    for nthread in (1, 2):
        sim = MujocoBatch(model, n, frame_skip=2, nthread=nthread)
        sim.set_body_mass(np.arange(n), 2, pole_mass)
        sim.reset(np.arange(n), qpos=qpos0)
        for u in ctrl:
            sim.step(u)
        for i in range(n):
            m = copy.copy(model)
            m.body_mass[2] = pole_mass[i]
            m.body_inertia[2] = pole_mass[i] / model.body_mass[2] * model.body_inertia[2]  # as set_body_mass
            d = mujoco.MjData(m)
            mujoco.mj_setConst(m, d)
            d.qpos[:] = qpos0[i]
            for u in ctrl:
                d.ctrl[:] = u[i]
                mujoco.mj_step(m, d, nstep=2)
            expected = np.empty(mujoco.mj_stateSize(m, STATE_SPEC))
            mujoco.mj_getState(m, d, expected, STATE_SPEC)
            np.testing.assert_array_equal(sim.state[i], expected, err_msg=f"world {i}, nthread {nthread}")


def test_reset_touches_only_the_given_worlds() -> None:
    sim = MujocoBatch(load_model("cartpole"), 3, frame_skip=2)
    sim.step(np.ones((3, 1)))
    before = sim.state.copy()
    sim.reset(np.array([1]), qpos=np.array([[0.5, 0.1]]), qvel=np.array([[0.0, -1.0]]))
    np.testing.assert_array_equal(sim.state[[0, 2]], before[[0, 2]])
    np.testing.assert_array_equal(sim.qpos[1], [0.5, 0.1])
    np.testing.assert_array_equal(sim.qvel[1], [0.0, -1.0])
    assert sim.state[1, 0] == 0.0 and sim.ctrl[1, 0] == 0.0  # time and controls restart


def test_unknown_model_lists_the_shipped_ones() -> None:
    with pytest.raises(FileNotFoundError, match="cartpole"):
        load_model("cartpol")


# ------------------------------------------------------------------------------------------------------ task
def test_zero_force_episodes_fail_and_time_limit_succeeds() -> None:
    env = make("cartpole-balance", 16, cfg=quiet_config())
    env.reset(seed=0)
    terminated = torch.zeros(16, dtype=torch.bool)
    for _ in range(100):
        _, reward, term, trunc, info = env.step(torch.zeros(16, 1))
        assert reward.shape == (16,) and not bool(trunc.any())
        terminated |= term
    assert bool(terminated.all()), "every pole should fall within 2 s without force"

    # Exactly upright and at rest, a pole never falls: the episode runs into the time limit, a success.
    at_rest = {"init_position_range": 0.0, "init_angle_range": 0.0, "init_velocity_range": 0.0}
    env = make("cartpole-balance", 2, cfg=quiet_config(episode_length_s=0.2, **at_rest))
    env.reset(seed=0)
    for _ in range(env.max_episode_length):
        _, _, term, trunc, info = env.step(torch.zeros(2, 1))
    assert bool(trunc.all()) and not bool(term.any())
    assert info.success is not None and bool(info.success.all())
    assert info.episode_return is not None and torch.allclose(info.episode_return, torch.full((2,), 0.4))


def test_same_seed_same_trajectory_other_seed_differs() -> None:
    actions = 2 * torch.rand(60, 8, 1, generator=torch.Generator().manual_seed(1)) - 1

    def rollout(seed: int) -> torch.Tensor:
        env = make("cartpole-balance", 8, seed=123)  # default randomisation and noise
        obs = [env.reset(seed=seed)["policy"]]
        for a in actions:
            o, r, *_ = env.step(a)
            obs.append(torch.cat((o["policy"], o["critic"], r[:, None]), 1))
        return torch.cat(obs[1:])

    first = rollout(seed=7)
    torch.testing.assert_close(rollout(seed=7), first, rtol=0, atol=0)
    assert not torch.equal(rollout(seed=8), first)


def test_per_world_pole_mass_changes_only_that_world() -> None:
    at_rest = {"init_position_range": 0.0, "init_angle_range": 0.0, "init_velocity_range": 0.0}
    env = CartpoleBalance(quiet_config(**at_rest), 3, CPU)
    env.reset(seed=0)
    env.params["pole_mass"][1] = 0.3  # what a randomisation term would write
    states = run(env, torch.full((10, 3, 1), 0.5))[-1]
    pole = env.sim.model.body("pole").id
    assert env.sim.field("body_mass")[:, pole].tolist() == pytest.approx([0.1, 0.3, 0.1])
    assert env.sim.field("body_inertia")[1, pole] == pytest.approx(3 * env.sim.model.body_inertia[pole])
    torch.testing.assert_close(states[0], states[2], rtol=0, atol=0)
    assert not torch.allclose(states[0], states[1])
    assert env._privileged()[:, 6].tolist() == pytest.approx([1.0, 3.0, 1.0])  # critic sees pole mass / nominal


def test_randomised_parameters_reach_the_model() -> None:
    terms = [
        RandomizationTerm("cart_mass", "uniform", (0.5, 2.0), "scale"),
        RandomizationTerm("joint_damping", "uniform", (0.5, 2.0), "scale", per_element=True),
        RandomizationTerm("actuator_strength", "uniform", (0.8, 1.2), "scale"),
    ]
    env = CartpoleBalance(CartpoleBalanceConfig(randomization=terms), 4, CPU)
    env.reset(seed=0)
    env.step(torch.zeros(4, 1))
    sim, p = env.sim, env.params
    cart = sim.model.body("cart").id
    np.testing.assert_allclose(sim.field("body_mass")[:, cart], p["cart_mass"][:, 0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(sim.field("dof_damping"), p["joint_damping"].numpy(), rtol=1e-6)
    np.testing.assert_allclose(sim.field("actuator_gear")[:, 0, 0], p["actuator_strength"][:, 0].numpy(), rtol=1e-6)
    assert len(set(sim.field("body_mass")[:, cart].tolist())) == 4


@pytest.mark.parametrize(
    ("term", "message"),
    [
        (
            RandomizationTerm("pole_mass", "uniform", (-1.0, 1.0), "scale"),
            r"randomization\[0\] \(pole_mass\)",
        ),
        (RandomizationTerm("joint_damping", "uniform", (-1.0, 0.0), "add"), "joint_damping"),
        (
            RandomizationTerm("gravity", "uniform", (0.9, 1.1), "scale"),
            "supported parameters: action_latency",
        ),
    ],
)
def test_bad_randomisation_is_refused(term: RandomizationTerm, message: str) -> None:
    with pytest.raises(RandomizationError, match=message):
        make("cartpole-balance", 2, cfg=CartpoleBalanceConfig(randomization=[term]))


def test_config_from_yaml_data_and_bad_values() -> None:
    data = {"reward_scales": {"alive": 2.0}, "randomization": [{"param": "pole_mass", "range": [0.5, 1.5]}]}
    cfg = from_dict(CartpoleBalanceConfig, data)
    assert cfg.randomization[0].range == (0.5, 1.5)
    make("cartpole-balance", 2, cfg=cfg)
    with pytest.raises(TaskConfigError, match="unknown name"):
        make("cartpole-balance", 2, cfg=quiet_config(reward_scales={"balance": 1.0}))
    with pytest.raises(TaskConfigError, match="max_force"):
        CartpoleBalanceConfig(max_force=-1.0)


def test_observations_and_contract_agree() -> None:
    env = make("cartpole-balance", 4)
    obs = env.reset(seed=0)
    assert {k: tuple(v.shape) for k, v in obs.items()} == {"policy": (4, 7), "critic": (4, 12)}
    contract = env.contract(["policy"])
    assert contract.obs_dim == env.obs_sizes["policy"]
    assert contract.action.kind == "torque" and contract.action.scale == [10.0] and contract.joint_names == ["slider"]
    with pytest.raises(ValueError, match="policy"):
        env.contract(["critic"])
