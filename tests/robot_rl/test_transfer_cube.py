"""The cube tasks in PyBullet (``robot-rl eval RUN --sim pybullet`` for ``panda-lift`` / ``panda-push``): the hand
holds a cube as the real one does, the arm holds still where light links made it chatter, the scene follows the
contract, and a policy trained behind the energy tank runs behind the contract's tank there too."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import sim
from policies.runtime.contract import Contract, ContractError
from robot_rl.config import load_config
from robot_rl.transfer.harness import deploy_tank
from robot_rl.transfer.pybullet_panda_cube import PandaLiftBullet, PandaPushBullet


def contract_of(task: str, tank_j: float | None = None) -> Contract:
    """The contract ``task``'s training config exports (with a tank in the loop of ``tank_j`` J if given)."""
    env_cfg = load_config(task, None, []).env
    passivity = dataclasses.replace(env_cfg.passivity, tank_max_j=tank_j, tank_init_j=None)
    env = sim.make(task, 1, torch.device("cpu"), dataclasses.replace(env_cfg, passivity=passivity))
    try:
        return env.contract(["policy"])
    finally:
        env.close()


def test_the_hand_closes_on_the_cube_to_its_width_and_holds_it_against_gravity() -> None:
    contract = contract_of("panda-lift")
    bullet = PandaLiftBullet(contract)
    try:
        signals = bullet.reset(np.random.default_rng(0), randomize=False)
        assert signals["finger_pos"][0, 0] == pytest.approx(0.04)
        q = signals["joint_pos"][0]
        tcp = bullet._tcp()[0].tolist()
        bullet.pb.resetBasePositionAndOrientation(bullet.cube, tcp, [0, 0, 0, 1], physicsClientId=bullet.client)
        hold = np.concatenate([q, [0.0]])[None]  # the arm where it is, the fingers closed
        for _ in range(25):  # 1 s
            signals = bullet.step(hold)
        fingers = [bullet.pb.getJointState(bullet.robot, j, physicsClientId=bullet.client)[0] for j in bullet.fingers]
        # one motor drives both fingers, and each pad's face sits on its joint's plane: the reading is half the width
        assert fingers == pytest.approx([0.025, 0.025], abs=0.002)
        assert signals["finger_pos"][0, 0] == pytest.approx(0.025, abs=0.002)
        assert np.linalg.norm(bullet._cube_pos() - bullet._tcp()[0]) < 0.01, "the cube slipped out of the hand"
    finally:
        bullet.close()


def test_the_arm_holds_still_where_joints_1_and_3_line_up() -> None:
    # At q2 = 0 joints 1 and 3 are coaxial. With the inertias PyBullet recomputes from the meshes when a link's mass is
    # set alone (every reset set one), the controller's damping made them chatter there at +-2 rad/s, which sent the
    # lift and push policies' hands off course on their way down.
    bullet = PandaLiftBullet(contract_of("panda-lift"))
    try:
        bullet.reset(np.random.default_rng(0), randomize=False)
        q = np.array([0.0, 0.0, 0.0, -2.1, 0.0, 2.1, 0.7])
        for joint, angle in zip(bullet.arm, q, strict=True):
            bullet.pb.resetJointState(bullet.robot, joint, angle, 0.0, physicsClientId=bullet.client)
        hold = np.concatenate([q, [0.04]])[None]
        speeds = [np.abs(bullet.step(hold)["joint_vel"][0]).max() for _ in range(25)]  # 1 s
        assert max(speeds) < 1e-3, f"the arm moved at up to {max(speeds):.2f} rad/s while holding still"
    finally:
        bullet.close()


def test_a_command_takes_over_after_the_drawn_delay_within_the_period() -> None:
    """PyBullet's robot draws a command delay of 0-12 ms (whole 1 kHz steps) in a randomised episode, none without
    randomisation; within each period the previous command acts for the delay's steps, then the new one."""
    bullet = PandaLiftBullet(contract_of("panda-lift"))
    try:
        rng = np.random.default_rng(0)
        drawn = set()
        for _ in range(40):
            bullet.reset(rng, randomize=True)
            drawn.add(bullet._delay_steps)
        assert drawn <= set(range(13)) and len(drawn) > 5
        bullet.reset(rng, randomize=False)
        assert bullet._delay_steps == 0
        q = bullet._joints()[0]
        first, second = np.concatenate([q, [0.04]])[None], np.concatenate([q + 0.05, [0.04]])[None]
        bullet.step(first)
        bullet._delay_steps = 7
        seen: list[float] = []
        joints = bullet._joints

        def watch() -> tuple[np.ndarray, np.ndarray]:
            assert bullet._acting is not None
            seen.append(float(bullet._acting[0]))
            return joints()

        bullet._joints = watch  # type: ignore[method-assign]
        bullet.step(second)
        assert seen[: bullet.substeps] == [first[0, 0]] * 7 + [second[0, 0]] * (bullet.substeps - 7)  # then the signals
    finally:
        bullet.close()


def test_the_scene_follows_the_contract_and_the_estimate_is_late_by_its_delay() -> None:
    contract = contract_of("panda-push")
    bullet = PandaPushBullet(contract)
    rng = np.random.default_rng(1)
    try:
        env = contract.extra["training_envelope"]
        for _ in range(5):
            signals = bullet.reset(rng, randomize=False)
            xy = bullet._cube_pos()[:2]
            assert np.all(xy >= np.asarray(env["cube_low_m"])) and np.all(xy <= np.asarray(env["cube_high_m"]))
            assert bullet._cube_pos()[2] == pytest.approx(contract.extra["cube"]["size_m"] / 2, abs=1e-3)
            far = env["goal_distance_m"][1]
            assert signals["goal_xy"].shape == (1, 2)
            distance = float(np.linalg.norm(signals["goal_xy"][0] - xy))
            assert distance <= far + 1e-9  # clipped to the envelope's margin, so it may come out nearer
            assert signals["finger_pos"][0, 0] == pytest.approx(0.0, abs=1e-6)  # push: fingers closed
        # the tracker reports where the cube was one control period ago (without randomisation: exactly)
        before = bullet._cube_pos()
        bullet.pb.resetBasePositionAndOrientation(
            bullet.cube, (before + np.array([0.05, 0.0, 0.0])).tolist(), [0, 0, 0, 1], physicsClientId=bullet.client
        )
        q = bullet._joints()[0]
        seen = bullet.step(q[None])["object_pos"][0]
        assert seen == pytest.approx(before, abs=1e-6)
        seen = bullet.step(q[None])["object_pos"][0]
        assert seen[0] == pytest.approx(before[0] + 0.05, abs=2e-3)
    finally:
        bullet.close()


def test_pybullet_counts_a_cube_rolled_over_an_edge_as_tumbled_as_the_training_task_does() -> None:
    """The training task's test case (tests/sim/test_panda.py): rolling about its bottom edge at 8 rad/s the cube
    rocks back, at 12 rad/s it rolls over; PyBullet's contact solver agrees."""
    bullet = PandaPushBullet(contract_of("panda-push"))
    rng = np.random.default_rng(2)
    try:
        tumbled = []
        for spin in (0.0, 8.0, 12.0):
            bullet.reset(rng, randomize=False)
            h = bullet.half
            bullet.pb.resetBaseVelocity(
                bullet.cube, [0, -spin * h, spin * h], [spin, 0, 0], physicsClientId=bullet.client
            )
            q = bullet._joints()[0]
            for _ in range(10):
                bullet.step(q[None])
            tumbled.append(bullet.figures()["tumbled"])
        assert tumbled == [0.0, 0.0, 1.0]
    finally:
        bullet.close()


def test_a_contract_without_the_cube_facts_is_refused_by_name() -> None:
    contract = contract_of("panda-lift")
    contract.extra.pop("cube")
    with pytest.raises(ContractError, match=r"extra\.cube .* is missing .*: export the run again"):
        PandaLiftBullet(contract)


def test_the_estimate_carries_the_noise_and_bias_the_contract_states() -> None:
    """A student behind a calibrated camera (``collect --unbiased object_pos``) states no bias, and PyBullet draws
    none for it; a stated value that is no tracker's is refused by name."""
    contract = contract_of("panda-lift")
    assert contract.extra["cube"]["estimate_noise_m"] == 0.005 and contract.extra["cube"]["estimate_bias_m"] == 0.01
    contract.extra["cube"]["estimate_bias_m"] = 0.0
    bullet = PandaLiftBullet(contract)
    try:
        rng = np.random.default_rng(2)
        for _ in range(3):
            bullet.reset(rng, randomize=True)
            assert not bullet._bias.any()
        assert bullet.estimate_noise_m == 0.005
    finally:
        bullet.close()
    for bad in (float("nan"), -0.01, 0.5, "1cm", True):
        contract.extra["cube"]["estimate_bias_m"] = bad
        with pytest.raises(ContractError, match=r"extra\.cube\.estimate_bias_m must be a number in \[0, 0\.1\] m"):
            PandaLiftBullet(contract)


@pytest.mark.parametrize(
    ("key", "bad", "message"),
    [
        ("size_m", 0.5, r"size_m must be a number in \[0\.02, 0\.07\] m, got 0\.5"),
        ("size_m", float("nan"), r"size_m must be a number in \[0\.02, 0\.07\] m, got nan"),
        ("mass_kg", -0.1, r"mass_kg must be a number in \[0\.001, 3\] kg, got -0\.1"),
        ("estimate_delay_periods", "1", r"estimate_delay_periods must be a number in \[0, 4\] control periods"),
    ],
)
def test_a_cube_fact_no_real_cube_has_is_refused_by_name(key: str, bad: object, message: str) -> None:
    contract = contract_of("panda-push")
    contract.extra["cube"][key] = bad
    with pytest.raises(ContractError, match=message):
        PandaPushBullet(contract)


def test_a_policy_trained_behind_the_tank_runs_behind_the_contracts_tank() -> None:
    assert deploy_tank(contract_of("panda-lift", tank_j=None)) is None
    tank = deploy_tank(contract_of("panda-lift", tank_j=5.0))
    assert tank is not None and tank.tank.params.t_max == 5.0
    q = np.zeros(7)
    signals = {"joint_pos": q[None].astype(np.float32), "joint_vel": np.zeros((1, 7), np.float32)}
    command = np.concatenate([q + 0.2, [0.01]])[None].astype(np.float32)  # a 57 J jump; 2.4 J to spend
    filtered, setpoint = tank.filter(command, None, signals)
    assert 0 < filtered[0, 0] < 0.2 and filtered[0, 7] == pytest.approx(0.01)  # scaled; the gripper is not
    np.testing.assert_allclose(setpoint, filtered[0, :7], rtol=1e-6)
    assert tank.tank.tank == pytest.approx(tank.tank.params.t_min, abs=1e-6)
