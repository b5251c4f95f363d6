"""The Isaac Gym backend's logic against a fake ``gymapi`` / ``gymtorch`` (tests/sim/fake_isaacgym.py): the
quadruped's MDP runs on it, joints map by name, quaternions and velocities change convention both ways, the actuator
law and its torque limit, indexed resets, randomised properties and pushes reach the right places. Nothing here runs
a real Isaac Gym (docs/backends.md says what that leaves unverified)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import sim
from sim.backends import isaac_gym as ig
from sim.backends.physics import BackendError
from sim.robots import unitree_a1 as a1
from sim.tasks.quadruped.velocity import QuadrupedVelocity
from tests.sim import fake_isaacgym as fake


@pytest.fixture
def fake_gym(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ig, "import_isaacgym", lambda: (fake.gymapi, fake.gymtorch))


def _env(n: int = 4, *overrides: str) -> Any:
    cfg = sim.train_env_config("quadruped-velocity", ["backend=isaacgym", *overrides])
    env = sim.make("quadruped-velocity", n, cfg=cfg)
    assert isinstance(env, QuadrupedVelocity) and env.physics.name == "isaacgym"
    return env


def _dof(gym: fake.Gym, joint: str) -> int:
    assert gym.asset is not None
    return gym.asset.dofs.index(joint)


def test_without_isaac_gym_the_backend_is_refused_in_one_line() -> None:
    with pytest.raises(BackendError, match=r"env.backend=isaacgym needs NVIDIA Isaac Gym .* not on PyPI"):
        _env(2)


def test_a_task_without_a_robot_file_is_refused_by_name(fake_gym: None) -> None:
    cfg = sim.train_env_config("panda-reach", ["backend=isaacgym"])
    with pytest.raises(BackendError, match="loads the robot from its URDF or MJCF file; this task names none"):
        sim.make("panda-reach", 2, cfg=cfg)


def test_the_quadruped_mdp_runs_and_joints_map_by_name(fake_gym: None) -> None:
    env = _env(4)
    gym = fake.last_gym()
    assert gym.asset is not None and gym.asset.dofs != list(a1.JOINTS)  # Isaac's order is not MuJoCo's
    env.reset(seed=0)
    q = env.physics.qpos[:, env._qadr]
    dof = gym.dof.view(4, 12, 2)
    for j, name in enumerate(a1.JOINTS):
        torch.testing.assert_close(q[:, j], dof[:, _dof(gym, name), 0])
    np.testing.assert_allclose(q[0].numpy(), a1.DEFAULT_POSE, atol=0.2)  # the reset pose, by name
    for _ in range(3):
        obs, reward, *_ = env.step(torch.zeros(4, 12))
    assert all(bool(torch.isfinite(v).all()) for v in obs.values()) and bool(torch.isfinite(reward).all())
    assert gym.simulated == 3 * env.cfg.substeps  # 200 Hz physics under a 50 Hz policy
    assert gym.options.collapse_fixed_joints and gym.options.default_dof_drive_mode == fake.DOF_MODE_EFFORT
    assert gym.plane is not None and gym.plane.static_friction == 0.0  # the shapes carry the friction
    assert all(e["filter"] == 1 for e in gym.envs)  # no self-collisions, as the MuJoCo model


def test_root_quaternion_and_velocities_change_convention_both_ways(fake_gym: None) -> None:
    env = _env(2)
    phys = env.physics
    m = phys.model
    qpos = torch.tensor(a1.standing_qpos(m), dtype=torch.float32).repeat(2, 1)
    half = float(np.sqrt(0.5))
    qpos[1, 3:7] = torch.tensor([half, 0.0, 0.0, half])  # 90 degrees about z
    qvel = torch.zeros(2, m.nv)
    qvel[1, 0:3] = torch.tensor([0.3, 0.0, 0.0])  # world-frame linear velocity of the trunk's origin
    qvel[1, 3:6] = torch.tensor([0.0, 0.0, 1.0])  # body-frame angular velocity
    qvel[1, 3] = 0.5  # about the body's x axis: the world's y axis after the turn
    phys.reset(torch.tensor([1]), qpos[1:], qvel[1:])
    root = fake.last_gym().root
    torch.testing.assert_close(root[1, 3:7], torch.tensor([0.0, 0.0, half, half]))  # x y z w
    torch.testing.assert_close(root[1, 10:13], torch.tensor([0.0, 0.5, 1.0]), atol=1e-6, rtol=0)  # world frame
    assert fake.last_gym().reset_ids.tolist() == [1]  # only that world
    torch.testing.assert_close(phys.qpos[1], qpos[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(phys.qvel[1], qvel[1], atol=1e-6, rtol=0)  # COM velocity back to the origin's


def test_the_actuators_pd_law_and_torque_limit_become_dof_efforts(fake_gym: None) -> None:
    env = _env(2)
    phys, gym = env.physics, fake.last_gym()
    phys.reset(torch.arange(2), torch.tensor(a1.standing_qpos(phys.model)).repeat(2, 1), torch.zeros(2, 18))
    target = torch.tensor(a1.DEFAULT_POSE, dtype=torch.float32).repeat(2, 1)
    target[0, 1] += 0.5  # FR thigh: 10 N m under Kp 20
    target[1, 2] -= 3.0  # FR calf: 60 N m asked, 33.5 N m allowed
    gym.efforts.clear()
    phys.step(target)
    first = gym.efforts[0].view(2, 12)
    thigh, calf = _dof(gym, "FR_upper_joint"), _dof(gym, "FR_lower_joint")
    assert first[0, thigh].item() == pytest.approx(a1.KP * 0.5, rel=1e-5)
    assert first[1, calf].item() == pytest.approx(-a1.TAU_MAX[2], rel=1e-6)
    assert len(gym.efforts) == env.cfg.substeps  # evaluated on every substep
    assert phys.qvel[0, 6 + 1] > 0  # the fake integrated the effort into the thigh (MuJoCo dof 7)


def test_randomised_parameters_reach_isaac_gyms_properties(fake_gym: None) -> None:
    env = _env(3)
    env.reset(seed=0)
    env.step(torch.zeros(3, 12))
    gym = fake.last_gym()
    assert gym.asset is not None
    trunk = gym.asset.bodies.index("trunk")
    for w in range(3):
        props = gym.envs[w]
        assert props["body"][trunk].mass == pytest.approx(env._nominal_mass + float(env.params["added_mass"][w, 0]))
        com = props["body"][trunk].com
        np.testing.assert_allclose(
            [com.x, com.y, com.z], env._nominal_ipos.numpy() + env.params["com_offset"][w].numpy(), atol=1e-6
        )
        for j, name in enumerate(a1.JOINTS):
            d = _dof(gym, name)
            assert props["dof"]["damping"][d] == pytest.approx(float(env.params["joint_damping"][w, j]), abs=1e-6)
            assert props["dof"]["armature"][d] == pytest.approx(float(env.params["joint_armature"][w, j]), abs=1e-6)
            assert props["dof"]["friction"][d] == pytest.approx(float(env.params["joint_friction"][w, j]), abs=1e-6)
        calf = gym.get_asset_rigid_body_shape_indices(gym.asset)[gym.asset.bodies.index("FR_lower")]
        assert calf.count == 2  # the calf's capsule, then the foot fused into it
        # PhysX averages with the frictionless plane: twice MuJoCo's contact friction (the larger of the two geoms')
        f = float(env.params["friction"][w, 0])
        foot = props["shape"][calf.start + 1].friction
        assert foot == pytest.approx(2 * f, rel=1e-6) and props["shape"][calf.start].friction == 2 * max(1.0, f)
    kp = env.params["motor_strength"][:, 0] * env.params["kp"][:, 0]
    torch.testing.assert_close(env.physics._gain[:, 0], kp.to(torch.float32))
    assert len({round(gym.envs[w]["body"][trunk].mass, 6) for w in range(3)}) == 3  # per world


def test_pushes_and_sensors(fake_gym: None) -> None:
    env = _env(2)
    phys, gym = env.physics, fake.last_gym()
    phys.reset(torch.arange(2), torch.tensor(a1.standing_qpos(phys.model)).repeat(2, 1), torch.zeros(2, 18))
    gym.root[:, 10:13] = torch.tensor([0.0, 0.0, 0.7])  # yaw rate, world frame, upright: the gyro reads it
    phys.set_external_force(env._trunk, torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    phys.step(torch.tensor(a1.DEFAULT_POSE, dtype=torch.float32).repeat(2, 1))
    assert gym.forces and gym.forces[0].view(2, -1, 3)[0, gym.asset.bodies.index("trunk"), 0] == 5.0  # type: ignore[union-attr]
    torch.testing.assert_close(phys.sensordata[:, 0:3], torch.tensor([[0.0, 0.0, 0.7]] * 2), atol=1e-6, rtol=0)
    # at rest in the fake (no gravity applied to the bodies) the accelerometer reads -g: +9.81 m/s² along z
    assert phys.sensordata[0, 5].item() == pytest.approx(9.81, abs=1e-3)


def test_robot_rl_train_without_isaac_gym_ends_in_one_line(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli import main

    argv = ["train", "quadruped-velocity", "--set", "env.backend=isaacgym", "--max-iterations", "1"]
    assert main([*argv, "--run-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs NVIDIA Isaac Gym" in err[0]
    assert not list(tmp_path.iterdir())  # no run folder was left behind
