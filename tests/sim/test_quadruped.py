"""Unitree A1 (``quadruped-velocity``): the model against its cited sources and against PyBullet's reading of the same
URDF, physics sanity (standing, contact forces, limits), randomisation reaching the physics, pushes, bad configs
refused, the deployment contract and both backends."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.randomization import RandomizationError, RandomizationTerm
from sim.robots import unitree_a1 as a1
from sim.tasks.base import SensorNoise
from sim.tasks.quadruped.velocity import PARAMS, QuadrupedVelocity, QuadrupedVelocityConfig
from sim.vec_env import TaskConfigError

mjwarp = pytest.mark.xdist_group("mjwarp")


def _env(n: int = 4, **cfg: object) -> QuadrupedVelocity:
    base: dict[str, object] = {"randomization": [], "noise": SensorNoise(), "push_interval_s": 0.0}
    env = sim.make("quadruped-velocity", n, cfg=QuadrupedVelocityConfig(**{**base, **cfg}))  # type: ignore[arg-type]
    assert isinstance(env, QuadrupedVelocity)
    return env


def test_model_carries_the_cited_limits_gains_and_mass() -> None:
    model = a1.build_model()
    assert model.nu == 12 and [model.actuator(i).name for i in range(12)] == [j[:-6] for j in a1.JOINTS]
    for i, name in enumerate(a1.JOINTS):
        j = model.joint(name)
        np.testing.assert_allclose(j.range, [a1.Q_MIN[i], a1.Q_MAX[i]])
        assert model.dof_armature[j.dofadr[0]] == pytest.approx(a1.ARMATURE)
        np.testing.assert_allclose(model.actuator(i).forcerange, [-a1.TAU_MAX[i], a1.TAU_MAX[i]])
        assert model.actuator(i).gainprm[0] == a1.KP and list(model.actuator(i).biasprm[1:3]) == [-a1.KP, -a1.KD]
    assert model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE and model.body(model.jnt_bodyid[0]).name == "trunk"
    assert model.body_subtreemass[model.body("trunk").id] == pytest.approx(12.458, abs=1e-3)  # [URDF]


def test_pybullet_reads_the_same_masses_and_joint_axes() -> None:
    """The second engine loads the same file: per-joint child masses (fixed children merged, as MuJoCo's compiler
    keeps them as bodies) and joint axes agree."""
    pybullet = pytest.importorskip("pybullet")
    model = a1.build_model()
    client = pybullet.connect(pybullet.DIRECT)
    try:
        robot = pybullet.loadURDF(str(a1.urdf_path()), useFixedBase=False, physicsClientId=client)
        joints = {}
        for j in range(pybullet.getNumJoints(robot, physicsClientId=client)):
            info = pybullet.getJointInfo(robot, j, physicsClientId=client)
            joints[info[1].decode()] = (j, np.array(info[13]))
        total = pybullet.getDynamicsInfo(robot, -1, physicsClientId=client)[0] + sum(
            pybullet.getDynamicsInfo(robot, j, physicsClientId=client)[0] for j, _ in joints.values()
        )
    finally:
        pybullet.disconnect(client)
    assert total == pytest.approx(model.body_subtreemass[model.body("trunk").id], rel=1e-6)
    for name in a1.JOINTS:
        _, axis = joints[name]
        np.testing.assert_allclose(model.joint(name).axis, axis, atol=1e-9)


def test_standing_under_pd_holds_height_and_the_feet_carry_the_weight() -> None:
    """Action 0 holds the default pose: the robot settles at legged_gym's 0.25 m base height on four feet, which
    carry its weight (touch sensors sum to m g within 1 %)."""
    env = _env()
    env.reset(seed=0)
    for _ in range(100):  # 2 s
        env.step(torch.zeros(4, 12))
    height = env._pos[:, 2]
    assert bool(((height > 0.23) & (height < 0.28)).all()), height
    assert bool(env._last_contact.all())
    weight = float(env._model.body_subtreemass[env._trunk]) * 9.81
    np.testing.assert_allclose(env._foot_force.sum(-1).numpy(), weight, rtol=0.01)
    assert float(env._lin_vel_b.norm(dim=-1).max()) < 0.02 and not bool(env._terminated().any())


def test_joint_and_torque_limits_hold_under_bang_bang_targets() -> None:
    """Targets jumping between the extremes every period: no joint leaves its range by more than MuJoCo's soft-limit
    give (0.05 rad), and no motor exceeds its torque limit."""
    model = a1.build_model()
    data = mujoco.MjData(model)
    data.qpos[:] = a1.standing_qpos(model)
    rng = np.random.default_rng(0)
    lo, hi = np.array(a1.Q_MIN), np.array(a1.Q_MAX)
    worst_q, worst_tau = 0.0, 0.0
    for _ in range(100):
        data.ctrl[:] = np.where(rng.random(12) < 0.5, lo, hi)
        for _ in range(4):
            mujoco.mj_step(model, data)
            q = np.array([data.joint(j).qpos[0] for j in a1.JOINTS])
            worst_q = max(worst_q, float(np.max(np.maximum(lo - q, q - hi))))
            worst_tau = max(worst_tau, float(np.max(np.abs(data.actuator_force) - np.array(a1.TAU_MAX))))
    assert worst_q < 0.05 and worst_tau <= 1e-9


def test_the_task_reads_the_base_state_in_the_body_frame() -> None:
    """A robot turned by 90 degrees and moving along world +y moves forward in its own frame; the gyro and the
    projected gravity are the IMU's readings (upright: 0, 0, -1)."""
    env = _env(1)
    env.reset(seed=0)
    qpos = torch.tensor(a1.standing_qpos(env._model), dtype=torch.float64)[None]
    qpos[0, 3:7] = torch.tensor([math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)])
    qvel = torch.zeros(1, env._model.nv, dtype=torch.float64)
    qvel[0, 1] = 0.7
    env.physics.reset(torch.tensor([0]), qpos, qvel)
    env._read_state()
    np.testing.assert_allclose(env._lin_vel_b[0].numpy(), [0.7, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(env._projected_gravity()[0].numpy(), [0.0, 0.0, -1.0], atol=1e-6)


def test_a_fall_ends_the_episode_and_is_no_success() -> None:
    env = _env(2)
    env.reset(seed=0)
    qpos = torch.tensor(a1.standing_qpos(env._model, height=0.3), dtype=torch.float64).repeat(2, 1)
    qpos[1, 3:7] = torch.tensor([math.cos(0.9), math.sin(0.9), 0.0, 0.0])  # rolled 103 degrees
    env.physics.reset(torch.tensor([0, 1]), qpos, torch.zeros(2, env._model.nv, dtype=torch.float64))
    env._read_state()
    assert env._terminated().tolist() == [False, True] and not bool(env._success()[1])


def test_tracking_pays_for_the_commanded_velocity_and_success_measures_it() -> None:
    env = _env(2)
    env.reset(seed=0)
    env.command[:] = torch.tensor([[0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    for _ in range(100):  # the robot lands from its start height, then stands still
        env.step(torch.zeros(2, 12))
    terms = env._reward_terms(torch.zeros(2, 12), torch.zeros(2, dtype=torch.bool))
    standing, asked = float(terms["tracking_lin_vel"][1]), float(terms["tracking_lin_vel"][0])
    assert standing > 0.99 and asked == pytest.approx(math.exp(-(0.5**2) / 0.5**2), abs=0.02)
    errors = env._episode_metrics()["velocity_error"]
    assert float(errors[0]) == pytest.approx(0.5, abs=0.03) and float(errors[1]) < 0.03
    assert env._success().tolist() == [False, True]


def test_commands_are_resampled_on_schedule_within_their_ranges() -> None:
    env = _env(64, command_resample_s=0.1, standing_share=0.25)
    env.reset(seed=0)
    first = env.command.clone()
    for _ in range(5):
        env.step(torch.zeros(64, 12))
    assert not torch.equal(first, env.command)
    c = env.cfg
    lo = torch.tensor([c.lin_vel_x[0], c.lin_vel_y[0], c.yaw_rate[0]])
    hi = torch.tensor([c.lin_vel_x[1], c.lin_vel_y[1], c.yaw_rate[1]])
    assert bool(((env.command >= lo) & (env.command <= hi)).all())
    assert 0 < int((env.command == 0).all(-1).sum()) < 64  # a share stands still


def test_pushes_kick_the_trunk_on_schedule_with_randomisation_on_only() -> None:
    env = _env(8, push_interval_s=0.1, push_velocity=0.8)
    env.set_randomization(True)
    env.reset(seed=0)
    for _ in range(8):
        env.step(torch.zeros(8, 12))
    assert bool((env.push.abs() > 0).all()) and float(env.push.abs().max()) <= 0.8
    env.set_randomization(False)
    env.reset(seed=0)
    for _ in range(8):
        env.step(torch.zeros(8, 12))
    assert not bool(env.push.any())


@pytest.mark.parametrize("param", PARAMS)
def test_every_randomised_parameter_reaches_the_physics(param: str) -> None:
    """Each of the task's randomisable parameters changes its MuJoCo field per world."""
    from sim.tasks.quadruped.velocity import _default_randomization

    terms = [t for t in _default_randomization() if t.param == param]
    env = _env(4, randomization=terms)
    env.reset(seed=0)
    env.step(torch.zeros(4, 12))
    batch = env.physics.batch  # type: ignore[attr-defined]
    fields = {"friction": "geom_friction", "added_mass": "body_mass", "com_offset": "body_ipos",
              "motor_strength": "actuator_gainprm", "kp": "actuator_gainprm", "kd": "actuator_biasprm",
              "joint_damping": "dof_damping", "joint_friction": "dof_frictionloss",
              "joint_armature": "dof_armature"}  # fmt: skip
    field = fields[param]
    values = batch.field(field)
    assert not np.allclose(values[0], values[1]), f"{param}: every world has the same {field}"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"lin_vel_x": (1.0, -1.0)}, "env.lin_vel_x must be"),
        ({"standing_share": 1.5}, "env.standing_share"),
        ({"dt": 0.021}, "whole multiple"),
        ({"max_tilt": 4.0}, "env.max_tilt"),
        ({"backend": "physx"}, "env.backend"),
        ({"push_velocity": float("nan")}, "env.push_velocity"),
    ],
)
def test_bad_configs_are_refused_by_name(override: dict[str, object], message: str) -> None:
    with pytest.raises(TaskConfigError, match=message):
        QuadrupedVelocityConfig(**override)  # type: ignore[arg-type]


def test_bad_randomisation_is_refused_at_config_load() -> None:
    with pytest.raises(RandomizationError, match="added_mass"):
        QuadrupedVelocityConfig(randomization=[RandomizationTerm("added_mass", "uniform", (-6.0, 0.0), "add")])


def test_contract_carries_joint_order_default_pose_gains_and_imu_frame() -> None:
    env = _env(1)
    contract = env.contract(["policy"])
    assert contract.joint_names == list(a1.JOINTS) and contract.default_pose == list(a1.DEFAULT_POSE)
    assert contract.action.kind == "position" and contract.action.offset == list(a1.DEFAULT_POSE)
    assert contract.control_period_s == pytest.approx(0.02)
    extra = contract.extra
    assert extra["pd"]["kp_nm_per_rad"] == a1.KP and extra["pd"]["rate_hz"] == 200  # type: ignore[index]
    assert "trunk frame" in str(extra["imu"]) and "FR, FL, RR, RL" in str(extra["joint_order"])
    assert [t.name for t in contract.observation][:3] == ["base_angular_velocity", "projected_gravity",
                                                          "velocity_command"]  # fmt: skip


def test_exact_resume_from_state_dict() -> None:
    cfg = QuadrupedVelocityConfig(push_interval_s=0.1)
    a = sim.make("quadruped-velocity", 3, cfg=cfg)
    a.reset(seed=1)
    gen = torch.Generator().manual_seed(0)
    actions = [2 * torch.rand(3, 12, generator=gen) - 1 for _ in range(12)]
    for act in actions[:6]:
        a.step(act)
    state = a.state_dict()
    b = sim.make("quadruped-velocity", 3, cfg=cfg)
    b.load_state_dict(state)
    for act in actions[6:]:
        oa, ra, *_ = a.step(act)
        ob, rb, *_ = b.step(act)
        assert torch.equal(oa["policy"], ob["policy"]) and torch.equal(ra, rb)


@mjwarp
def test_the_task_runs_on_mjwarp_with_the_same_contract() -> None:
    env = sim.make("quadruped-velocity", 3, cfg=QuadrupedVelocityConfig(backend="mjwarp"))
    ref = sim.make("quadruped-velocity", 3)
    obs = env.reset(seed=0)
    for _ in range(3):
        obs, reward, *_ = env.step(torch.zeros(3, 12))
    assert bool(torch.isfinite(obs["policy"]).all()) and bool(torch.isfinite(reward).all())
    assert env.contract(["policy"]).to_json() == ref.contract(["policy"]).to_json()  # type: ignore[attr-defined]
    assert isinstance(env, QuadrupedVelocity)
    assert bool(((env._pos[:, 2] > 0.2) & (env._pos[:, 2] < 0.45)).all())
    env.close()
    ref.close()


def test_pybullet_stands_at_the_height_mujoco_stands_at() -> None:
    """The second engine, driven with the contract's PD and the default pose as target, settles within 1.5 cm of the
    training simulator's standing height and reports every signal the contract reads, upright."""
    pytest.importorskip("pybullet")
    from robot_rl.transfer.pybullet_quadruped import QuadrupedBullet

    env = _env(1)
    env.reset(seed=0)
    for _ in range(100):
        env.step(torch.zeros(1, 12))
    contract = env.contract(["policy"])
    bullet = QuadrupedBullet(contract)
    try:
        signals = bullet.reset(np.random.default_rng(0), randomize=False)
        assert {t.source for t in contract.observation} - {"last_action"} <= set(signals)
        default = np.asarray([contract.default_pose], dtype=np.float32)
        for _ in range(100):
            signals = bullet.step(default)
        _, _, height, tilt = bullet._base()
        assert height == pytest.approx(float(env._pos[0, 2]), abs=0.015) and tilt < 0.05
        # Both stand within about a degree of level (measured: MuJoCo pitched 1.0 degree one way, PyBullet 1.2 the
        # other; the training model's joint friction holds each leg within ~0.01 rad of its PD set-point).
        mujoco_gravity = env._projected_gravity()[0].numpy()
        np.testing.assert_allclose(signals["projected_gravity"][0], mujoco_gravity, atol=0.05)
        # Kp 20 lets the legs sag under the weight (calves 0.18-0.26 rad in both engines); after the drop MuJoCo's
        # joint and foot friction hold the hips ~0.1 rad wider than PyBullet's frictionless joints do.
        assert float(np.abs(signals["joint_pos_rel"]).max()) < 0.35
        figures = bullet.figures()
        assert figures["fell"] == 0.0 and set(figures) == {"success", "velocity_error", "yaw_rate_error", "fell"}
    finally:
        bullet.close()


def test_pybullet_payload_changes_the_trunk_mass_not_its_inertia() -> None:
    """A randomised payload sets the trunk's mass; its inertia stays the URDF's (PyBullet recomputes it from the
    collision box when a mass is set alone)."""
    pb = pytest.importorskip("pybullet")
    from robot_rl.transfer.pybullet_quadruped import QuadrupedBullet

    env = _env(1)
    bullet = QuadrupedBullet(env.contract(["policy"]))
    env.close()
    try:
        rng = np.random.default_rng(0)
        for _ in range(3):
            bullet.reset(rng, randomize=True)
            mass, _, inertia = pb.getDynamicsInfo(bullet.robot, -1, physicsClientId=bullet.client)[:3]
            assert abs(mass - bullet.nominal_mass) <= 1.0 and mass != bullet.nominal_mass
            np.testing.assert_allclose(inertia, bullet.trunk_inertia, rtol=1e-9)
    finally:
        bullet.close()


def test_pybullet_feet_meet_the_ground_with_the_drawn_friction_not_its_square() -> None:
    """Bullet multiplies the two bodies' friction coefficients (MuJoCo takes the larger): the ground is set to 1 and
    the feet to the drawn coefficient. A block pushed over the same ground decelerates at that coefficient times g."""
    pb = pytest.importorskip("pybullet")
    from robot_rl.transfer.pybullet_quadruped import QuadrupedBullet

    env = _env(1)
    bullet = QuadrupedBullet(env.contract(["policy"]))
    env.close()
    c = bullet.client
    try:
        bullet.reset(np.random.default_rng(0), randomize=False)
        feet = {pb.getDynamicsInfo(bullet.robot, f, physicsClientId=c)[1] for f in bullet.feet}
        assert pb.getDynamicsInfo(bullet.plane, -1, physicsClientId=c)[1] == 1.0 and feet == {bullet.nominal_friction}
        drawn = set()
        for _ in range(3):
            bullet.reset(np.random.default_rng(len(drawn)), randomize=True)
            drawn |= {pb.getDynamicsInfo(bullet.robot, f, physicsClientId=c)[1] for f in bullet.feet}
            assert pb.getDynamicsInfo(bullet.plane, -1, physicsClientId=c)[1] == 1.0
        assert len(drawn) == 3 and all(0.5 <= f <= 1.25 for f in drawn)
        # the combination rule this relies on, on the harness's own ground: a 0.5 block slides at 0.5 g, not 0.25 g
        pb.removeBody(bullet.robot, physicsClientId=c)
        box = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[0.1] * 3, physicsClientId=c)
        block = pb.createMultiBody(1.0, box, basePosition=[0, 0, 0.1], physicsClientId=c)
        pb.changeDynamics(block, -1, lateralFriction=0.5, physicsClientId=c)
        for _ in range(20):
            pb.stepSimulation(physicsClientId=c)
        pb.resetBaseVelocity(block, [3.0, 0, 0], [0, 0, 0], physicsClientId=c)
        steps = 20  # 0.1 s at the harness's 200 Hz
        for _ in range(steps):
            pb.stepSimulation(physicsClientId=c)
        decel = (3.0 - pb.getBaseVelocity(block, physicsClientId=c)[0][0]) / (steps / 200 * 9.81)
        assert decel == pytest.approx(0.5, abs=0.08)
    finally:
        bullet.close()


def test_an_exported_quadruped_policy_runs_in_pybullet_under_the_task_criterion(untrained_quadruped: Path) -> None:
    """The ONNX (untrained) through policies.runtime on PyBullet's A1: every episode reports the figures the task's
    criterion reads, and the verdict is the task's own."""
    pytest.importorskip("pybullet")
    from robot_rl.transfer.harness import run_episodes

    result = run_episodes(untrained_quadruped, "pybullet", 2, 0, True, QuadrupedVelocity.criterion, progress=False)
    assert set(result.episodes) == {"success", "velocity_error", "yaw_rate_error", "fell"}
    assert len(result.episodes["success"]) == 2 and np.isfinite(result.episodes["velocity_error"]).all()
    assert set(result.figures) == {"success_rate", "velocity_error_m_s", "yaw_rate_error_rad_s"}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda extra: extra.pop("pd"), "incomplete"),
        (lambda extra: extra["pd"].update(kp_nm_per_rad=-20.0), "finite and positive"),
        (lambda extra: extra["pd"].update(torque_limit_nm=[33.5] * 11), "one torque limit per joint"),
        (lambda extra: extra["pd"].update(rate_hz=1000), "steps at 200 Hz"),
    ],
)
def test_pybullet_refuses_a_contract_it_cannot_drive_by_name(edit: Any, message: str) -> None:
    """The contract comes from a model file (its own check refuses non-finite numbers): a missing, negative or
    mis-sized PD figure, or another PD rate, is one line before any joint is driven."""
    pytest.importorskip("pybullet")
    import copy
    import dataclasses

    from robot_rl.transfer.harness import TransferError
    from robot_rl.transfer.pybullet_quadruped import QuadrupedBullet

    contract = _env(1).contract(["policy"])
    extra = copy.deepcopy(dict(contract.extra))
    edit(extra)
    with pytest.raises(TransferError, match=message):
        QuadrupedBullet(dataclasses.replace(contract, extra=extra))
