"""The energy tank on a contact task in MuJoCo: a passivity-agnostic policy that pumps energy into the Panda
(positive velocity feedback on top of torques that drive the hand down to the table) drives the arm's energy up
without bound (kilojoules in 4 s); behind the tank the energy it delivers stays within what the tank held
(``references.md``: ``T_0 - T_min``, nothing harvested here) and the arm's kinetic energy below ``T_0``.

The tank in the training loop (``env.passivity``) is the deploy tank world by world, keeps every world above
``T_min`` under random commands and pushes, is refused where it cannot apply, and resumes exactly."""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np
import pytest
import torch

import sim
from policies.runtime.passivity import EnergyTank, TankParams
from robot_rl.config import load_config
from robot_rl.evaluate import switched_tank
from sim.randomization import RandomizationTerm
from sim.robots import panda
from sim.tasks.panda.lift import PandaLiftConfig
from sim.tasks.panda.passivity import PassivityConfig, SetpointTanks
from sim.typed_config import ConfigError

DT = 0.04  # control period, s (the Panda tasks' 25 Hz)
SUBSTEPS = 10


def _run(tank: EnergyTank | None, seconds: float = 4.0) -> tuple[float, float, float]:
    """Torque-controlled Panda on the table; returns (max kinetic energy J, energy delivered J, final tank J)."""
    model = panda.build_model("torque", panda.Scene(table=True, cube_size=0.05))
    model.opt.timestep = DT / SUBSTEPS
    model.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    data = mujoco.MjData(model)
    data.qpos[:7] = panda.HOME  # clear of the table: every joule of motion comes through the port
    mujoco.mj_forward(model, data)
    # Torques that drive the hand down to the table (the scene has the table and a cube) ...
    press = 0.5 * np.array([0.0, 10.0, 0.0, -10.0, 0.0, 2.0, 0.0])
    delivered, kinetic = 0.0, 0.0
    for _ in range(round(seconds / DT)):
        q, dq = data.qpos[:7].copy(), data.qvel[:7].copy()
        # ... and positive velocity feedback: every motion is amplified (injects energy without bound).
        tau = np.clip(press + 8.0 * dq + 2.0 * np.sign(dq + 1e-9), -np.asarray(panda.TAU_MAX), panda.TAU_MAX)
        if tank is not None:
            tau = tank.torque(tau, q, dq, DT).command
        data.ctrl[:7] = tau
        data.ctrl[7] = 0.0
        for _ in range(SUBSTEPS):
            mujoco.mj_step(model, data)
        delivered += float(tau @ (data.qpos[:7] - q))  # exact: the torque is held over the control period
        kinetic = max(kinetic, float(data.energy[1]))
    return kinetic, delivered, tank.tank if tank is not None else float("nan")


def test_the_tank_bounds_the_energy_an_injecting_policy_delivers() -> None:
    free_kinetic, free_delivered, _ = _run(None)
    # Torque commands are settled one step late against a one-step prediction (tau . qdot dt); this policy
    # accelerates within every step, so the prediction falls short. Measured here: margin 0 lets T fall 1.06 J below
    # T_min, 0.2 J lets it fall 0.63 J below, 0.5 J keeps it above. The margin is the robot integrator's to size.
    params = TankParams(t_init=2.0, t_min=0.1, t_max=5.0, margin=0.5, damping=(0.0,))
    kinetic, delivered, final = _run(EnergyTank(params, 7))
    assert free_delivered > 1000.0 and free_kinetic > 100.0  # unfiltered: the policy pumps kilojoules in
    # Filtered: no harvesting (damping 0), so the policy may deliver at most what the tank held above T_min (the
    # margin absorbs the one-step prediction error of torque commands).
    assert delivered <= params.t_init - params.t_min + 1e-6
    assert kinetic <= params.t_init
    assert final >= params.t_min - 1e-9


def test_the_tank_in_the_loop_is_the_deploy_tank_world_by_world() -> None:
    """Every world's tank steps exactly as the ROS 2 node's ``EnergyTank`` on the same stream, to the bit."""
    rng = np.random.default_rng(0)
    params = TankParams(t_init=5.0, t_min=0.1, t_max=10.0, damping=panda.IMPEDANCE_DAMPING)
    stiffness = np.asarray(panda.IMPEDANCE_STIFFNESS)
    n = 6
    q0 = rng.normal(size=(n, 7))
    tanks = SetpointTanks(params, n, panda.IMPEDANCE_STIFFNESS, DT)
    tanks.reset(torch.arange(n), torch.from_numpy(q0))
    node = [EnergyTank(params, 7) for _ in range(n)]
    previous, alphas = q0.copy(), []
    for _ in range(60):
        q = q0 + 0.05 * rng.normal(size=(n, 7))
        dq = rng.normal(size=(n, 7))
        target = q + 0.1 * rng.normal(size=(n, 7))
        out = tanks.filter(torch.from_numpy(target), torch.from_numpy(q), torch.from_numpy(dq)).numpy()
        for i in range(n):
            step = node[i].setpoint(target[i], previous[i], q[i], dq[i], stiffness, DT)
            np.testing.assert_array_equal(out[i], step.command)
            assert tanks.level[i] == step.tank and tanks.alpha[i] == step.alpha
            alphas.append(step.alpha)
        previous = out
    assert min(alphas) < 0.8 and max(alphas) == 1.0  # the stream both fits and overdraws the tank


def test_with_the_tank_in_the_loop_no_world_falls_below_t_min_under_random_commands_and_pushes() -> None:
    cfg = PandaLiftConfig(passivity=PassivityConfig(tank_max_j=20.0))
    cfg.randomization.append(
        RandomizationTerm("external_force", "uniform", (-30.0, 30.0), "add", "interval", 0.5, per_element=True)
    )
    env = sim.make("panda-lift", 16, cfg=cfg, seed=1)
    plain = sim.make("panda-lift", 16, cfg=PandaLiftConfig(), seed=1)
    obs = env.reset(seed=1)
    assert obs["critic"].shape[1] == plain.reset(seed=1)["critic"].shape[1] + 1  # the critic sees the level
    gen = torch.Generator().manual_seed(0)
    lowest, scaled = [], []
    for _ in range(2 * env.max_episode_length):  # type: ignore[attr-defined]
        _, _, _, _, info = env.step(2 * torch.rand(16, 8, generator=gen) - 1)
        scaled.append(float(info.log["metric/tank_alpha"].min()))
        if info.episode_metrics:
            lowest.append(info.episode_metrics["lowest_tank_j"])
    assert env.tanks is not None and env.tanks.lowest.min() >= 0.1 - 1e-9  # type: ignore[attr-defined]
    assert min(scaled) < 0.1  # random set-point jumps overdraw the tank: it acted
    assert torch.cat(lowest).min() >= 0.1 - 1e-9 and len(lowest) >= 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env.passivity.tank_max_j=20", "env.control_mode=torque"], "needs env.control_mode=impedance"),
        (["env.passivity.tank_max_j=10", "env.passivity.tank_init_j=20"], "tank_min_j <= tank_init_j <= tank_max_j"),
        (["env.passivity.tank_max_j=-1"], "env.passivity.tank_max_j must be a finite number >= 0"),
        (["env.passivity.tank_max_j=20", "env.passivity.tank_power_w=-2"], "tank_power_w must be a finite number >= 0"),
    ],
)
def test_a_tank_that_cannot_apply_is_refused_by_name(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("panda-lift", overrides=overrides)


def test_the_tank_trained_with_is_the_tank_the_contract_deploys_refill_included() -> None:
    """A refilled tank credits ``P dt`` each step as the node's does, and the contract's ``filter`` carries the
    sizes and the refill the policy trained behind (the node deploys exactly that tank)."""
    cfg = load_config(
        "panda-push",
        overrides=["env.passivity.tank_max_j=30", "env.passivity.tank_init_j=30", "env.passivity.tank_power_w=5"],
    ).env
    env = sim.make("panda-push", 2, cfg=cfg, seed=3)
    env.reset(seed=3)
    f = env.filter_defaults()  # type: ignore[attr-defined]
    assert (f["tank_init_j"], f["tank_max_j"], f["tank_power_w"], f["trained_with_tank_j"]) == (30.0, 30.0, 5.0, 30.0)
    params = TankParams.from_contract(f)
    assert params.power_w == 5.0 and params.t_init == 30.0
    tanks = SetpointTanks(params, 1, panda.IMPEDANCE_STIFFNESS, DT)
    q = torch.zeros(1, 7, dtype=torch.float64)
    tanks.reset(torch.arange(1), q)
    tanks.level[:] = 10.0
    tanks.filter(q, q, torch.zeros_like(q))  # no jump, no motion: only the refill is credited
    assert tanks.level[0] == pytest.approx(10.0 + 5.0 * DT)


def test_the_evaluation_beside_a_run_switches_its_tank_to_the_deploy_tank_or_off() -> None:
    """``robot-rl train``'s end summary: a run trained without the tank is also evaluated behind the contract's
    deploy tank (its ``T_max``, start and refill); a run trained with one, also without it."""
    plain = load_config("panda-push").env
    plain = dataclasses.replace(plain, passivity=PassivityConfig())
    env = sim.make("panda-push", 1, cfg=plain)
    deploy = switched_tank(plain, env).passivity
    assert (deploy.tank_max_j, deploy.initial_j, deploy.tank_power_w) == (80.0, 40.0, 0.0)
    trained = load_config("panda-push", overrides=["env.passivity.tank_power_w=5"]).env
    assert not switched_tank(trained, sim.make("panda-push", 1, cfg=trained)).passivity.enabled


def test_the_tank_in_the_loop_resumes_exactly() -> None:
    cfg = load_config("panda-reach", overrides=["env.passivity.tank_max_j=5"]).env
    env = sim.make("panda-reach", 3, cfg=cfg, seed=5)
    env.reset(seed=5)
    for _ in range(5):
        env.step(torch.full((3, 7), 0.8))
    state = env.state_dict()  # type: ignore[attr-defined]
    ref = [env.step(torch.full((3, 7), -0.6))[0]["critic"] for _ in range(4)]
    other = sim.make("panda-reach", 3, cfg=cfg, seed=99)
    other.reset(seed=99)
    other.load_state_dict(state)  # type: ignore[attr-defined]
    out = [other.step(torch.full((3, 7), -0.6))[0]["critic"] for _ in range(4)]
    for x, y in zip(ref, out, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
