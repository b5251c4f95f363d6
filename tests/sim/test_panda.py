"""Franka Panda: the model against its cited data, both physics backends, randomisation reaching the physics,
bad specs refused, and the deployment contract.

MuJoCo Warp runs on Warp's CPU device here; its kernels compile once (about a minute, then cached in
``~/.cache/warp``), so every ``mjwarp`` test is in the ``mjwarp`` xdist group and runs on one worker.
"""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.backends import make_physics
from sim.backends.physics import BackendError, sensor_columns
from sim.randomization import RandomizationError, RandomizationTerm
from sim.robots import panda
from sim.tasks.panda.base import GRIPPER_DOWN
from sim.tasks.panda.lift import PandaLift, PandaLiftConfig
from sim.tasks.panda.push import PandaPushConfig
from sim.tasks.panda.reach import PandaReachConfig
from sim.vec_env import TaskConfigError

mjwarp = pytest.mark.xdist_group("mjwarp")


def test_home_pose_forward_kinematics_matches_franka() -> None:
    """At franka_ros' start pose the TCP is 0.307 m ahead and 0.487 m up, pointing down: the published FK."""
    model = panda.build_model("impedance")
    data = mujoco.MjData(model)
    data.qpos[:7] = panda.HOME
    mujoco.mj_forward(model, data)
    np.testing.assert_allclose(data.site("tcp").xpos, [0.30689, 0.0, 0.48688], atol=2e-4)
    np.testing.assert_allclose(data.site("tcp").xmat.reshape(3, 3), np.diag([1.0, -1.0, -1.0]), atol=1e-6)


def test_model_carries_the_cited_limits_and_inertia() -> None:
    model = panda.build_model("torque")
    for i, name in enumerate(panda.ARM_JOINTS):
        j = model.joint(name)
        np.testing.assert_allclose(j.range, [panda.Q_MIN[i], panda.Q_MAX[i]])
        assert model.dof_armature[j.dofadr[0]] == pytest.approx(panda.ARMATURE[i])
        np.testing.assert_allclose(model.actuator(name).forcerange, [-panda.TAU_MAX[i], panda.TAU_MAX[i]])
    arm_mass = sum(model.body(f"panda_link{i}").mass[0] for i in range(1, 8))
    assert arm_mass == pytest.approx(16.06, abs=0.01)  # Gaz et al. 2019: 4.97 + 0.65 + 3.23 + 3.59 + 1.23 + 1.67 + 0.74


@pytest.mark.parametrize("mode", ["impedance", "torque"])
def test_gravity_is_compensated_in_both_modes(mode: str) -> None:
    """Zero torque (or a target at the current pose) holds the arm still: the robot compensates gravity."""
    model = panda.build_model(mode)  # type: ignore[arg-type]
    data = mujoco.MjData(model)
    data.qpos[:7] = panda.HOME
    data.ctrl[:7] = panda.HOME if mode == "impedance" else 0.0
    data.ctrl[7] = panda.FINGER_STROKE
    for _ in range(250):
        mujoco.mj_step(model, data)
    np.testing.assert_allclose(data.qpos[:7], panda.HOME, atol=2e-3)


def test_impedance_tracks_a_target_with_the_configured_stiffness() -> None:
    """A 0.2 rad step on joint 4 settles there; the static torque per rad of error is the stiffness."""
    model = panda.build_model("impedance")
    data = mujoco.MjData(model)
    data.qpos[:7] = panda.HOME
    data.ctrl[:7] = panda.HOME
    data.ctrl[3] += 0.2
    for _ in range(500):
        mujoco.mj_step(model, data)
    mujoco.mj_forward(model, data)  # actuator forces of the current state
    assert data.qpos[3] == pytest.approx(panda.HOME[3] + 0.2, abs=0.01)  # dry friction leaves < 0.01 rad
    force = data.actuator_force[3]
    assert force == pytest.approx(600.0 * (data.ctrl[3] - data.qpos[3]) - 20.0 * data.qvel[3], rel=1e-6)


def _rollout(backend: str, steps: int, randomize: bool, seed: int = 1) -> dict[str, torch.Tensor]:
    env = sim.make("panda-reach", 4, cfg=PandaReachConfig(backend=backend), seed=seed)
    env.set_randomization(randomize)
    env.reset(seed=seed)
    gen = torch.Generator().manual_seed(0)
    q, tcp = [], []
    for _ in range(steps):
        env.step((0.6 * torch.randn(4, 7, generator=gen)).clamp(-1, 1))
        q.append(env._q.clone())  # type: ignore[attr-defined]
        tcp.append(env._tcp_pos.clone())  # type: ignore[attr-defined]
    env.close()
    return {"q": torch.stack(q), "tcp": torch.stack(tcp)}


@mjwarp
@pytest.mark.parametrize("randomize", [False, True])
def test_backends_agree_in_free_motion(randomize: bool) -> None:
    """Same task, same actions, 60 control steps (600 physics steps) on MuJoCo (float64) and MuJoCo Warp (float32):
    joints within 1e-4 rad, TCP within 0.1 mm — with the randomised parameters too."""
    ref = _rollout("mujoco", 60, randomize)
    out = _rollout("mjwarp", 60, randomize)
    assert (ref["q"] - out["q"]).abs().max() < 1e-4
    assert (ref["tcp"] - out["tcp"]).abs().max() < 1e-4


@mjwarp
def test_backends_agree_with_contacts() -> None:
    """A cube dropped on the table while the fingers press on the table top: contact forces on both engines."""
    model = panda.build_model("impedance", panda.Scene(table=True, cube_size=0.05))
    cube = model.joint("cube").qposadr[0]
    qpos = torch.tensor(model.qpos0, dtype=torch.float64).repeat(2, 1)
    qpos[:, :7] = torch.tensor(panda.HOME, dtype=torch.float64)
    qpos[:, cube : cube + 3] = torch.tensor([[0.5, 0.0, 0.08], [0.45, 0.1, 0.04]], dtype=torch.float64)
    # Joint targets from damped least-squares IK to a TCP 2 cm below the table top: the closed fingers press on it.
    press = [-0.114, 0.467, -0.124, -2.567, -0.093, 2.74, 0.785, 0.0]
    target = torch.tensor(press, dtype=torch.float64).repeat(2, 1)
    traces = {}
    for backend in ("mujoco", "mjwarp"):
        phys = make_physics(backend, model, 2, 10, torch.device("cpu"))
        ids = torch.arange(2)
        phys.reset(ids, qpos, torch.zeros(2, model.nv, dtype=torch.float64))
        trace, touch = [], []
        for _ in range(50):
            phys.step(target)
            trace.append(phys.qpos.to(torch.float64).clone())
            touch.append(phys.sensordata.to(torch.float64).clone())
        traces[backend] = torch.stack(trace)
        assert float(torch.stack(touch).max()) > 1.0, f"{backend}: the finger pads should feel the table"
        phys.close()
    a, b = traces["mujoco"], traces["mjwarp"]
    assert a[-1, :, cube + 2].sub(0.025).abs().max() < 2e-3  # the cube rests on the table top
    assert (a[:, :, cube : cube + 3] - b[:, :, cube : cube + 3]).abs().max() < 2e-3
    assert (a[:, :, :7] - b[:, :, :7]).abs().max() < 5e-3


PARAM_VALUES = {
    "link_mass": ("scale", (1.5, 1.5)),
    "com_offset": ("add", (0.03, 0.03)),
    "joint_damping": ("add", (5.0, 5.0)),
    "joint_armature": ("scale", (2.0, 2.0)),
    "joint_friction": ("scale", (3.0, 3.0)),
    "actuator_gain": ("scale", (0.5, 0.5)),
    "gravity": ("add", (1.0, 1.0)),
    "external_force": ("add", (10.0, 10.0)),
}


@pytest.mark.parametrize("param", sorted(PARAM_VALUES))
def test_every_randomised_parameter_reaches_the_physics(param: str) -> None:
    """Each parameter, set away from nominal, changes the stepped joint trajectory (MuJoCo backend)."""
    op, rng = PARAM_VALUES[param]
    trajectories = []
    for terms in ([], [RandomizationTerm(param, "uniform", rng, op)]):  # type: ignore[arg-type]
        env = sim.make("panda-reach", 2, cfg=PandaReachConfig(randomization=terms, noise=sim.tasks.base.SensorNoise()))
        env.reset(seed=3)
        q = []
        for _ in range(15):
            env.step(torch.full((2, 7), 0.3))
            q.append(env._q.clone())  # type: ignore[attr-defined]
        trajectories.append(torch.stack(q))
        if terms:
            value = env.params[param]  # type: ignore[attr-defined]
            nominal = env.randomizer.nominal(param)  # type: ignore[attr-defined]
            expected = nominal * rng[0] if op == "scale" else nominal + rng[0]
            torch.testing.assert_close(value, expected.expand_as(value))
        env.close()
    assert (trajectories[0] - trajectories[1]).abs().max() > 1e-4, f"{param} did not change the motion"


@mjwarp
def test_randomised_parameters_reach_mjwarp_per_world() -> None:
    """Per-world values: world 0 heavy links, world 1 nominal — only world 0's motion changes."""
    terms = [RandomizationTerm("link_mass", "uniform", (1.0, 2.0), "scale")]
    env = sim.make("panda-reach", 2, cfg=PandaReachConfig(backend="mjwarp", randomization=terms))
    env.reset(seed=0)
    masses = env.params["link_mass"]  # type: ignore[attr-defined]
    assert not torch.allclose(masses[0], masses[1])
    body_mass = env.physics.m.body_mass.numpy()  # type: ignore[attr-defined]
    assert body_mass.shape[0] == 2
    np.testing.assert_allclose(body_mass[:, env._bodies.numpy()], masses.numpy(), rtol=1e-6)  # type: ignore[attr-defined]
    env.close()


@pytest.mark.parametrize(
    ("term", "message"),
    [
        (RandomizationTerm("elbow_mass", "uniform", (0.9, 1.1)), "parameter 'elbow_mass' cannot be randomised"),
        (RandomizationTerm("link_mass", "uniform", (-0.5, 1.1)), "must stay above 0 kg"),
        (RandomizationTerm("joint_armature", "uniform", (1.2, 0.8)), "range low 1.2 exceeds high 0.8"),
        (RandomizationTerm("gravity", "gaussian", (0.0, 1.0), "add"), "needs 'clip"),
    ],
)
def test_bad_randomisation_is_refused_at_config_load(term: RandomizationTerm, message: str) -> None:
    with pytest.raises(RandomizationError, match=message):
        PandaReachConfig(randomization=[term])


def test_bad_backend_and_mode_are_refused() -> None:
    with pytest.raises(TaskConfigError, match=r"env\.backend must be one of mujoco, mjwarp, isaacgym, got 'bullet'"):
        PandaReachConfig(backend="bullet")
    with pytest.raises(TaskConfigError, match=r"env\.control_mode must be 'impedance' or 'torque'"):
        PandaReachConfig(control_mode="velocity")
    with pytest.raises(TaskConfigError, match=r"whole multiple of env\.physics_dt"):
        PandaReachConfig(dt=0.03, physics_dt=0.004)
    with pytest.raises(BackendError, match="unknown backend 'ode'"):
        make_physics("ode", panda.build_model("impedance"), 1, 1, torch.device("cpu"))


def test_finger_armature_reaches_the_model_and_bad_values_are_refused() -> None:
    """``env.finger_armature`` sets both finger joints (a grasp at an 8 ms step needs 0.2 kg); <= 0 is refused."""
    env = PandaLift(PandaLiftConfig(physics_dt=0.008, finger_armature=0.2), 1, torch.device("cpu"))
    for name in panda.FINGER_JOINTS:
        assert env._model.dof_armature[env._model.joint(name).dofadr[0]] == pytest.approx(0.2)
    assert PandaLiftConfig().finger_armature == panda.FINGER_ARMATURE
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(TaskConfigError, match=r"env\.finger_armature must be finite and positive"):
            PandaPushConfig(finger_armature=bad)
    with pytest.raises(ValueError, match=r"finger armature must be a finite value > 0 kg, got 0\.0"):
        panda.build_model("impedance", finger_armature=0.0)


def test_unsupported_field_is_refused_naming_the_backend() -> None:
    phys = make_physics("mujoco", panda.build_model("impedance"), 2, 1, torch.device("cpu"))
    with pytest.raises(BackendError, match="backend 'mujoco' cannot randomise model field 'jnt_range'"):
        phys.set_field("jnt_range", torch.arange(2), torch.zeros(2, 2), (0,))


def test_sensors_are_read_by_name_and_a_missing_or_scattered_one_is_refused() -> None:
    model = panda.build_model("impedance", panda.Scene(table=True, cube_size=0.05))
    assert sensor_columns(model, "left_touch", "right_touch") == slice(0, 2)
    assert sensor_columns(model, "palm_touch") == slice(2, 3)
    with pytest.raises(KeyError, match="no sensor 'wrist_ft'; it has: left_touch, right_touch, palm_touch"):
        sensor_columns(model, "wrist_ft")
    with pytest.raises(ValueError, match="not consecutive in sensordata \\('palm_touch' at column 2\\)"):
        sensor_columns(model, "left_touch", "palm_touch")


@pytest.mark.parametrize("mode", ["impedance", "torque"])
def test_contract_carries_control_mode_joints_pose_limits_and_gains(mode: str) -> None:
    env = sim.make("panda-reach", 2, cfg=PandaReachConfig(control_mode=mode))
    contract = env.contract(["policy"])  # type: ignore[attr-defined]
    assert contract.joint_names == list(panda.ARM_JOINTS)
    assert contract.default_pose == list(panda.HOME)
    assert contract.action.kind == ("position" if mode == "impedance" else "torque")
    extra = contract.extra
    assert extra["control_mode"] == mode
    assert extra["impedance"]["stiffness_nm_per_rad"] == list(panda.IMPEDANCE_STIFFNESS)
    assert extra["limits"]["tau_max_nm"] == list(panda.TAU_MAX)
    if mode == "torque":
        assert contract.action.high == list(panda.TAU_MAX)
    env.close()


def test_command_mapping_matches_the_contract() -> None:
    """The controls the sim applies are exactly the contract's clip(offset + scale * a, low, high)."""
    env = sim.make("panda-reach", 3)
    spec = env.contract(["policy"]).action  # type: ignore[attr-defined]
    a = torch.tensor([[1.0] * 7, [-1.0] * 7, [0.3] * 7])
    offset, scale = torch.tensor(spec.offset), torch.tensor(spec.scale)
    assert spec.reference == "joint_pos"  # relative targets: q_d = q + s a
    env.reset(seed=0)
    q = env._q  # type: ignore[attr-defined]
    expected = (offset + q + scale * a).clamp(torch.tensor(spec.low), torch.tensor(spec.high))
    torch.testing.assert_close(env.command(a)[:, :7], expected)  # type: ignore[attr-defined]
    absolute = sim.make("panda-reach", 3, cfg=PandaReachConfig(targets="absolute"))
    spec = absolute.contract(["policy"]).action  # type: ignore[attr-defined]
    assert spec.reference == "" and spec.offset == list(panda.HOME)
    expected = (torch.tensor(spec.offset) + scale * a).clamp(torch.tensor(spec.low), torch.tensor(spec.high))
    torch.testing.assert_close(absolute.command(a)[:, :7], expected)  # type: ignore[attr-defined]
    env.close()
    absolute.close()


def test_exact_resume_from_state_dict() -> None:
    """state_dict / load_state_dict continue bit for bit (randomised parameters and MuJoCo state included)."""
    env = sim.make("panda-reach", 3, seed=5)
    env.reset(seed=5)
    for _ in range(5):
        env.step(torch.full((3, 7), 0.2))
    state = env.state_dict()  # type: ignore[attr-defined]
    ref = [env.step(torch.full((3, 7), -0.1))[0]["policy"] for _ in range(4)]
    other = sim.make("panda-reach", 3, seed=99)
    other.reset(seed=99)
    other.load_state_dict(state)  # type: ignore[attr-defined]
    out = [other.step(torch.full((3, 7), -0.1))[0]["policy"] for _ in range(4)]
    for x, y in zip(ref, out, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_exact_resume_keeps_each_worlds_command_delay() -> None:
    """With ``env.command_delay`` each world draws its delay: a resumed env continues bit for bit with the same."""
    cfg = PandaLiftConfig(command_delay=(0.0, panda.COMMAND_DELAY_S))
    env = sim.make("panda-lift", 4, seed=3, cfg=cfg)
    env.reset(seed=3)
    for _ in range(3):
        env.step(torch.full((4, 8), 0.3))
    delays = env._delay_steps.clone()  # type: ignore[attr-defined]
    assert delays.unique().numel() > 1, "four worlds should not all draw the same delay"
    state = env.state_dict()  # type: ignore[attr-defined]
    ref = [env.step(torch.full((4, 8), -0.2))[0]["policy"] for _ in range(3)]
    other = sim.make("panda-lift", 4, seed=8, cfg=cfg)
    other.reset(seed=8)
    other.load_state_dict(state)  # type: ignore[attr-defined]
    assert torch.equal(other._delay_steps, delays)  # type: ignore[attr-defined]
    out = [other.step(torch.full((4, 8), -0.2))[0]["policy"] for _ in range(3)]
    for x, y in zip(ref, out, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["mujoco", pytest.param("mjwarp", marks=mjwarp)])
def test_a_period_stepped_in_parts_is_the_period_stepped_whole(backend: str) -> None:
    """``Physics.step(ctrl, substeps=k)`` then the rest of the period gives the state of one whole period."""
    model = panda.build_model("impedance", panda.Scene(table=True, cube_size=0.05))
    whole, parts = (make_physics(backend, model, 2, 10, torch.device("cpu")) for _ in range(2))
    ctrl = (torch.tensor(model.key_ctrl[0] if model.nkey else np.zeros(model.nu))[None].repeat(2, 1) + 0.05).to(
        whole.qpos.dtype
    )
    whole.step(ctrl)
    parts.step(ctrl, substeps=1)
    parts.step(ctrl, substeps=2)
    parts.step(ctrl, substeps=7)
    torch.testing.assert_close(parts.qpos, whole.qpos, rtol=0, atol=0)
    torch.testing.assert_close(parts.qvel, whole.qvel, rtol=0, atol=0)


def test_the_command_delay_holds_the_previous_command_for_its_physics_steps() -> None:
    """With a 12 ms delay (3 physics steps of 4 ms) a period's first 3 steps still follow the previous command (after
    a reset: the idle one, holding the joints where they were) and the other 7 the new one; with the randomisation off
    there is no delay; the contract states the range."""
    cfg = PandaLiftConfig(randomization=[], noise=sim.tasks.base.SensorNoise(), command_delay=(0.012, 0.012))
    env = sim.make("panda-lift", 2, cfg=cfg)
    env.reset(seed=0)
    assert env._delay_steps.tolist() == [3, 3]  # type: ignore[attr-defined]
    idle = env.command(torch.zeros(2, 8)).clone()  # type: ignore[attr-defined]
    calls: list[tuple[torch.Tensor, int | None]] = []
    step = env.physics.step  # type: ignore[attr-defined]

    def record(ctrl: torch.Tensor, substeps: int | None = None) -> None:
        calls.append((ctrl.clone(), substeps))
        step(ctrl, substeps)

    env.physics.step = record  # type: ignore[attr-defined]
    action = torch.full((2, 8), 0.5)
    new = env.command(action).clone()  # type: ignore[attr-defined]
    env.step(action)
    assert [k for _, k in calls] == [1, 1, 1, 7]
    for ctrl, _ in calls[:3]:
        torch.testing.assert_close(ctrl.float(), idle.float())
    torch.testing.assert_close(calls[3][0].float(), new.float())
    assert env.contract(["policy"]).extra["command_delay_s"] == [0.012, 0.012]  # type: ignore[attr-defined]
    env.set_randomization(False)
    env.reset(seed=1)
    assert env._delay_steps.tolist() == [0, 0]  # type: ignore[attr-defined]


@pytest.mark.parametrize("delay", [(0.0, 0.04), (0.01, 0.005), (-0.001, 0.0), (0.0, float("nan")), (0.01,)])
def test_a_command_delay_outside_the_period_is_refused(delay: tuple[float, ...]) -> None:
    with pytest.raises(TaskConfigError, match=r"env\.command_delay must be \[lo, hi\] s with 0 <= lo <= hi < env\.dt"):
        PandaLiftConfig(command_delay=delay)  # type: ignore[arg-type]


def test_the_measured_latency_replaces_whole_periods_by_the_nodes_delay() -> None:
    """The evaluation beside the trained one: the lift config less its whole periods, with the ROS 2 node's measured
    delay within the period; none for a config that trains with exactly that, or whose period is that short."""
    trained = sim.make("panda-lift", 2).measured_latency()  # type: ignore[attr-defined]
    assert trained is not None and trained.key == "measured_delay" and "0-12 ms" in trained.words
    assert trained.cfg.command_delay == (0.0, panda.COMMAND_DELAY_S)
    assert [t.param for t in trained.cfg.randomization] == [
        t.param for t in PandaLiftConfig().randomization if t.param != "action_latency"
    ]
    env = sim.make("panda-lift", 2, cfg=trained.cfg)
    assert env.measured_latency() is None  # type: ignore[attr-defined]
    no_periods = [RandomizationTerm("action_latency", "uniform", (0.0, 1.0), "add"), *trained.cfg.randomization]
    same = PandaLiftConfig(randomization=no_periods, command_delay=trained.cfg.command_delay)  # U(0, 1): floored to 0
    assert sim.make("panda-lift", 2, cfg=same).measured_latency() is None  # type: ignore[attr-defined]
    one = [RandomizationTerm("action_latency", "uniform", (1.0, 1.0), "abs"), *trained.cfg.randomization]
    always = PandaLiftConfig(randomization=one, command_delay=trained.cfg.command_delay)
    assert sim.make("panda-lift", 2, cfg=always).measured_latency() is not None  # type: ignore[attr-defined]
    env.reset(seed=0)
    assert env._delay_steps.max() <= 3  # type: ignore[attr-defined]  # 12 ms in 4 ms physics steps
    fast = PandaLiftConfig(dt=0.008)
    assert sim.make("panda-lift", 2, cfg=fast).measured_latency() is None  # type: ignore[attr-defined]


def test_push_success_goal_and_lost_cube() -> None:
    """A cube already at its goal succeeds at the time limit; a cube pushed off the table ends the episode."""
    env = sim.make("panda-push", 2, cfg=PandaPushConfig(episode_length_s=0.2, randomization=[]))
    env.reset(seed=0)
    with torch.inference_mode():
        env.goal[0] = env.cube_pos[0, :2]  # type: ignore[attr-defined]
        env.goal[1] = env.cube_pos[1, :2] + 0.3  # type: ignore[attr-defined]
    hold = torch.zeros(2, 7)
    for _ in range(5):  # 0.2 s at 25 Hz
        _, _, term, trunc, info = env.step(hold)
    assert bool(trunc.all()) and info.success is not None
    assert info.success.tolist() == [True, False]
    # Lost cube: put it below the table top.
    cube = env._cube_qpos  # type: ignore[attr-defined]
    qpos = env.physics.qpos.clone()  # type: ignore[attr-defined]
    qpos[:, cube[2]] = -0.2
    env.physics.reset(torch.arange(2), qpos, torch.zeros_like(env.physics.qvel))  # type: ignore[attr-defined]
    env._read_state()  # type: ignore[attr-defined]
    _, _, term, _, info = env.step(hold)
    assert bool(term.all()) and not bool(info.success.any())  # type: ignore[union-attr]
    env.close()


def test_goal_x_puts_each_goal_straight_ahead_of_the_cube_in_its_lane_and_bad_ranges_are_refused() -> None:
    """``env.goal_x`` (panda-multitask's push zone): the goal at the cube's start y, at an x in the range; a range
    that is not ``[low, high]``, not finite, or that starts within a cube's edge of the start area is refused."""
    cfg = PandaPushConfig(randomization=[], cube_high=(0.6, 0.15), goal_x=(0.7, 0.78))
    env = sim.make("panda-push", 64, cfg=cfg)
    env.reset(seed=5)
    goal, cube = env.goal, env.cube_pos  # type: ignore[attr-defined]
    assert torch.all((goal[:, 0] >= 0.7) & (goal[:, 0] <= 0.78)) and float(goal[:, 0].std()) > 0.01
    torch.testing.assert_close(goal[:, 1], cube[:, 1])
    env.close()
    for bad, message in (
        ((0.78, 0.7), r"env.goal_x must be \[low, high\]"),
        ((math.nan, 0.7), "env.goal_x must be finite and positive"),
        ((0.62, 0.7), "env.goal_x must start a cube's edge beyond env.cube_high x"),
    ):
        with pytest.raises(ValueError, match=message):
            PandaPushConfig(cube_high=(0.6, 0.15), goal_x=bad)


def test_cube_tilt_reads_the_angle_from_the_nearest_face_and_its_square_is_the_push_penalty() -> None:
    """Flat and rolled onto another face: 0; tilted 20 deg about x or 40 deg about y: that angle."""
    env = sim.make("panda-push", 4, cfg=PandaPushConfig(randomization=[], noise=sim.tasks.base.SensorNoise()))
    env.reset(seed=0)
    angles = [(0.0, 0), (90.0, 1), (20.0, 1), (40.0, 2)]  # (degrees, axis index x=1 / y=2 of w, x, y, z)
    with torch.inference_mode():
        for world, (deg, axis) in enumerate(angles):
            quat = torch.zeros(4)
            quat[0] = math.cos(math.radians(deg) / 2)
            quat[axis if deg else 1] = math.sin(math.radians(deg) / 2)
            env.cube_quat[world] = quat  # type: ignore[attr-defined]
    tilt = env.cube_tilt()  # type: ignore[attr-defined]
    expected = torch.tensor([0.0, 0.0, math.radians(20), math.radians(40)])
    torch.testing.assert_close(tilt, expected, atol=1e-3, rtol=0)  # float32 acos near 1
    terms = env._reward_terms(torch.zeros(4, 7), torch.zeros(4, dtype=torch.bool))  # type: ignore[attr-defined]
    torch.testing.assert_close(terms["object_tilt"], expected.square(), atol=1e-4, rtol=0)
    env.close()


def rotation_about(axis: int, deg: float) -> torch.Tensor:
    """Rotation by ``deg`` degrees about the world's axis ``axis`` (0 x, 1 y, 2 z), ``[3, 3]``."""
    c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    i, j = [k for k in range(3) if k != axis]
    r = torch.eye(3)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


@pytest.mark.parametrize("task,config", [("panda-push", PandaPushConfig), ("panda-lift", PandaLiftConfig)])
def test_hand_tilt_is_the_angle_of_the_approach_axis_from_straight_down_and_its_square_is_the_penalty(
    task: str, config: type[PandaPushConfig] | type[PandaLiftConfig]
) -> None:
    """Pointing down (the experts' orientation): 0; leaning 25 deg about the world's x or 60 deg about y: that
    angle; pointing up: pi. Push and lift price it with the same term (off in the task's defaults)."""
    env = sim.make(task, 4, cfg=config(randomization=[], noise=sim.tasks.base.SensorNoise()))
    env.reset(seed=0)
    down = GRIPPER_DOWN

    with torch.inference_mode():
        leans = [rotation_about(0, 25) @ down, rotation_about(1, 60) @ down, rotation_about(0, 180) @ down]
        env._tcp_rot[:] = torch.stack((down, *leans))  # type: ignore[attr-defined]
    expected = torch.tensor([0.0, math.radians(25), math.radians(60), math.pi])
    torch.testing.assert_close(env.hand_tilt(), expected, atol=1e-3, rtol=0)  # type: ignore[attr-defined]
    terms = env._reward_terms(torch.zeros(4, env.num_actions), torch.zeros(4, dtype=torch.bool))  # type: ignore[attr-defined]
    torch.testing.assert_close(terms["hand_tilt"], expected.square(), atol=1e-2, rtol=0)
    assert config().reward_scales["hand_tilt"] == 0.0
    env.close()


def test_lift_prices_the_lean_on_the_table_only_while_the_cube_is_under_the_lifted_height() -> None:
    """The same 25 deg lean in two worlds: with the cube resting on the table it is priced (as ``hand_tilt``); with
    the cube 5 cm up (above ``lifted_height``, 2 cm) it is not. Off in the task's defaults."""
    env = sim.make("panda-lift", 2, cfg=PandaLiftConfig(randomization=[], noise=sim.tasks.base.SensorNoise()))
    env.reset(seed=0)
    lean = rotation_about(0, 25) @ GRIPPER_DOWN
    with torch.inference_mode():
        env._tcp_rot[:] = lean  # type: ignore[attr-defined]
        env.cube_pos[1, 2] += 0.05  # type: ignore[attr-defined]
    terms = env._reward_terms(torch.zeros(2, env.num_actions), torch.zeros(2, dtype=torch.bool))  # type: ignore[attr-defined]
    expected = math.radians(25) ** 2
    torch.testing.assert_close(terms["hand_tilt"], torch.full((2,), expected), atol=1e-2, rtol=0)
    torch.testing.assert_close(terms["hand_tilt_on_table"], torch.tensor([expected, 0.0]), atol=1e-2, rtol=0)
    assert PandaLiftConfig().reward_scales["hand_tilt_on_table"] == 0.0
    env.close()


def test_the_palm_sensor_feels_the_housing_pressed_onto_the_cube_and_the_push_prices_it() -> None:
    """The hand leaning 40 deg sideways (along the fingers' closing axis, as the push teachers lean it) and driven
    by the scripted experts' resolved-rate step so that the low end of its housing presses 1 cm into the middle of
    the cube's top: the palm's touch sensor reads the push and ``palm_contact`` is 1; the same hand 5 cm higher
    feels nothing. (Upright, the housing reaches a 5 cm cube's top only with the finger tips within 5 mm of the
    table.) With ``push_housing_clear`` and both hands at the pushing point (a 0.5 m ``pushing_within``), the push
    pays only the hand whose housing is clear."""
    from sim.tasks.panda.experts import PushExpert

    cfg = PandaPushConfig(
        randomization=[], noise=sim.tasks.base.SensorNoise(), pushing_within=0.5, push_housing_clear=True
    )
    env = sim.make("panda-push", 2, cfg=cfg)
    env.reset(seed=0)
    hand, tcp = env._model.geom("hand"), env._model.site("tcp")  # type: ignore[attr-defined]
    lean = rotation_about(0, 40) @ GRIPPER_DOWN
    bottom = float(hand.pos[2] + hand.size[2] - tcp.pos[2])  # the housing's end face nearest the tips, TCP frame
    ends = torch.tensor([[0.0, y, bottom] for y in (hand.size[1], -hand.size[1])], dtype=torch.float32) @ lean.T
    low = ends[ends[:, 2].argmin()]  # the middle of its lower edge, from the TCP in the world frame
    cube = env.cube_pos.clone()  # type: ignore[attr-defined]
    target = cube.clone()
    target[:, 2] += env.cube_half() - 0.01 + torch.tensor([0.0, 0.05])  # type: ignore[attr-defined]
    expert = PushExpert(env)
    for _ in range(50):  # 2 s at 25 Hz
        env.step(expert.arm_action(target - low, lean.expand(2, 3, 3)))
    force = env.palm_force()  # type: ignore[attr-defined]
    assert float(force[0]) > 5.0 and float(force[1]) == 0.0, force
    terms = env._reward_terms(torch.zeros(2, 7), torch.zeros(2, dtype=torch.bool))  # type: ignore[attr-defined]
    assert terms["palm_contact"].tolist() == [1.0, 0.0]
    assert float(terms["push_to_goal"][0]) == 0.0 and float(terms["push_to_goal"][1]) > 0.1, terms["push_to_goal"]
    env.close()


def test_lift_prices_the_housing_on_the_same_sensor_and_its_training_config_sets_the_price(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``palm_contact`` in panda-lift is the push's term (the housing's touch sensor over ``TOUCH_FORCE_N``; the
    sensor itself is tested above); off in the task's defaults (the scripted expert's datasets), priced in the
    teacher's training file."""
    from robot_rl.config import load_config

    env = sim.make("panda-lift", 2, cfg=PandaLiftConfig(randomization=[], noise=sim.tasks.base.SensorNoise()))
    env.reset(seed=0)
    monkeypatch.setattr(env, "palm_force", lambda: torch.tensor([5.0, 0.5]))
    terms = env._reward_terms(torch.zeros(2, 8), torch.zeros(2, dtype=torch.bool))  # type: ignore[attr-defined]
    assert terms["palm_contact"].tolist() == [1.0, 0.0]
    assert PandaLiftConfig().reward_scales["palm_contact"] == 0.0
    assert load_config("panda-lift", None, []).env.reward_scales["palm_contact"] < 0.0  # type: ignore[attr-defined]
    env.close()


@pytest.mark.parametrize(("height", "offset"), [(1.0, 0.02), (0.4, 0.01)])
def test_the_pushing_point_lies_behind_the_cube_at_the_configured_height(height: float, offset: float) -> None:
    """``reach_object`` pays in full with the TCP behind the cube (on the far side from the goal, ``pushing_offset``
    off its face) at ``pushing_height`` half-edges above the table, and less at the other height."""
    cfg = PandaPushConfig(
        randomization=[], noise=sim.tasks.base.SensorNoise(), pushing_height=height, pushing_offset=offset
    )
    env = sim.make("panda-push", 2, cfg=cfg)
    env.reset(seed=0)
    half = env.cube_half()  # type: ignore[attr-defined]
    cube, goal = env.cube_pos.clone(), env.goal  # type: ignore[attr-defined]
    away = (cube[:, :2] - goal) / (cube[:, :2] - goal).norm(dim=-1, keepdim=True)
    bottom = cube[:, 2] - half
    with torch.inference_mode():
        for world, at in enumerate((height, 1.4 - height)):  # world 1: the other of the two heights
            env._tcp_pos[world, :2] = cube[world, :2] + (half[world] + offset) * away[world]  # type: ignore[attr-defined]
            env._tcp_pos[world, 2] = bottom[world] + at * half[world]  # type: ignore[attr-defined]
    terms = env._reward_terms(torch.zeros(2, 7), torch.zeros(2, dtype=torch.bool))  # type: ignore[attr-defined]
    miss = 0.6 * float(half[1])  # the two heights are 0.6 half-edges apart
    torch.testing.assert_close(
        terms["reach_object"], torch.tensor([1.0, 1.0 - math.tanh(miss / 0.2)]), atol=1e-4, rtol=0
    )
    env.close()


def test_a_cube_that_rolls_over_an_edge_is_counted_as_tumbled_and_one_that_rocks_back_is_not() -> None:
    """Set rolling about its bottom edge (at x rad/s; the edge at -y stays put): at 8 rad/s the cube rocks back, at
    12 rad/s it rolls over onto the next face (PyBullet agrees: tests/robot_rl/test_transfer_cube.py)."""
    env = sim.make("panda-push", 3, cfg=PandaPushConfig(episode_length_s=0.4, randomization=[]))
    env.reset(seed=0)
    half, cube = env.cube_half(), env._cube_qvel  # type: ignore[attr-defined]
    spin = torch.tensor([0.0, 8.0, 12.0])
    qvel = env.physics.qvel.clone()  # type: ignore[attr-defined]
    qvel[:, cube[1]], qvel[:, cube[2]], qvel[:, cube[3]] = -spin * half, spin * half, spin
    env.physics.reset(torch.arange(3), env.physics.qpos.clone(), qvel)  # type: ignore[attr-defined]
    env._read_state()  # type: ignore[attr-defined]
    for _ in range(10):  # 0.4 s at 25 Hz
        _, _, _, trunc, info = env.step(torch.zeros(3, 7))
    assert bool(trunc.all())
    assert info.episode_metrics["tumbled"].tolist() == [0.0, 0.0, 1.0]
    episodes = {k: v.numpy() for k, v in info.episode_metrics.items()} | {"success": np.zeros(3)}
    assert type(env).criterion(episodes)[1]["tumbled_rate"] == pytest.approx(1 / 3)
    env.close()


def test_object_estimate_is_delayed_by_the_configured_periods() -> None:
    env = sim.make("panda-push", 1, cfg=PandaPushConfig(randomization=[], noise=sim.tasks.base.SensorNoise()))
    env.reset(seed=1)
    seen = []
    true = []
    for _ in range(30):
        env.step(torch.full((1, 7), 0.6))
        seen.append(env._signals()["object_pos"].clone())  # type: ignore[attr-defined]
        true.append(env.cube_pos.clone())  # type: ignore[attr-defined]
    moved = [i for i in range(1, 30) if not torch.equal(true[i], true[i - 1])]
    assert moved, "the arm should have touched the cube"
    for i in range(1, 30):
        torch.testing.assert_close(seen[i], true[i - 1])


def test_a_calibrated_view_is_the_onboard_view_less_the_cube_estimates_bias_and_nothing_else() -> None:
    """``add_calibrated_view(["object_pos"])`` (a student behind a calibrated camera): the extra group has the
    ``policy`` layout, the same noise and delay, and only the cube estimate's per-episode bias left out."""
    env = sim.make("panda-lift", 4)
    with pytest.raises(TaskConfigError, match=r"\['tcp_pos'\] carry no per-episode bias .*: joint_pos, object_pos\)"):
        env.add_calibrated_view(["tcp_pos"])  # type: ignore[attr-defined]
    env.add_calibrated_view(["object_pos"])  # type: ignore[attr-defined]
    obs = env.reset(seed=3)
    terms = env.contract(["policy"]).observation  # type: ignore[attr-defined]
    start = sum(t.dim for t in terms[: [t.source for t in terms].index("object_pos")])
    cube = slice(start, start + 3)
    bias = env.obs_bias["object_pos"]  # type: ignore[attr-defined]
    assert float(bias.abs().min()) > 0
    for _ in range(5):
        diff = obs["policy"] - obs["calibrated"]
        torch.testing.assert_close(diff[:, cube], bias)
        diff[:, cube] = 0.0
        assert float(diff.abs().max()) == 0.0
        assert not torch.equal(obs["calibrated"][:, cube], env.cube_pos)  # type: ignore[attr-defined]
        obs = env.step(torch.zeros(4, 8))[0]
    env.close()


@pytest.mark.parametrize("task", ["panda-push", "panda-lift"])
def test_cube_tasks_contract_and_randomised_object(task: str) -> None:
    env = sim.make(task, 4)
    env.reset(seed=2)
    contract = env.contract(["policy"])  # type: ignore[attr-defined]
    assert "object_pos" in [t.source for t in contract.observation]
    assert "extra" not in contract.extra and "object" in contract.extra
    assert contract.action.size == (8 if task == "panda-lift" else 7)
    edge = env.params["object_size"][:, 0]  # type: ignore[attr-defined]
    torch.testing.assert_close(env.cube_pos[:, 2], edge / 2, atol=2e-3, rtol=0)  # type: ignore[attr-defined]
    geom = env._cube_geom  # type: ignore[attr-defined]
    np.testing.assert_allclose(env.physics.batch.field("geom_size")[:, geom, 0], edge.numpy() / 2, rtol=1e-6)  # type: ignore[attr-defined]
    masses = env.params["object_mass"]  # type: ignore[attr-defined]
    assert float(masses.min()) >= 0.05 - 1e-6 and float(masses.max()) <= 0.3 + 1e-6
    cube = env._cube_body  # type: ignore[attr-defined]
    np.testing.assert_allclose(env.physics.batch.field("body_mass")[:, cube], masses[:, 0].numpy(), rtol=1e-6)  # type: ignore[attr-defined]
    env.close()


@pytest.mark.parametrize("task", ["panda-push", "panda-lift", "panda-multitask"])
def test_cube_size_sets_every_cube_the_contract_and_the_randomised_range(task: str) -> None:
    cfg = sim.get_task(task).config_cls(cube_size=0.04, randomization=[])
    env = sim.make(task, 2, cfg=cfg)
    env.reset(seed=0)
    torch.testing.assert_close(env.cube_half(), torch.full((2,), 0.02))  # type: ignore[attr-defined]
    torch.testing.assert_close(env.cube_pos[:, 2], torch.full((2,), 0.02), atol=2e-3, rtol=0)  # type: ignore[attr-defined]
    model = env.physics.model  # type: ignore[attr-defined]
    cubes = [g for g in range(model.ngeom) if model.geom(g).name in ("cube", "distractor0", "distractor1")]
    assert len(cubes) == (3 if task == "panda-multitask" else 1)
    np.testing.assert_allclose(model.geom_size[cubes], 0.02)
    assert env.contract(["policy"]).extra["cube"]["size_m"] == pytest.approx(0.04)  # type: ignore[attr-defined]
    env.close()
    randomized = sim.make(task, 64, cfg=sim.get_task(task).config_cls(cube_size=0.04))
    randomized.reset(seed=0)
    edge = randomized.params["object_size"][:, 0]  # type: ignore[attr-defined]
    assert 0.036 - 1e-6 <= float(edge.min()) < float(edge.max()) <= 0.044 + 1e-6  # +-10 % around the nominal
    randomized.close()


@pytest.mark.parametrize("size", [0.1, 0.0, float("nan")])
def test_a_cube_size_the_gripper_cannot_hold_or_cover_is_refused(size: float) -> None:
    with pytest.raises(TaskConfigError, match=r"env\.cube_size must be in \[0\.02, 0\.07\] m, got"):
        PandaPushConfig(cube_size=size)


def test_the_cube_table_contact_takes_the_cubes_friction_and_a_pad_contact_the_pads() -> None:
    # MuJoCo takes the larger friction of two geoms of equal priority: the table's default 1.0 would hide every cube
    # friction below it, and the randomised 0.48-1.2 would reach the physics as 1.0-1.2.
    model = panda.build_model("impedance", panda.Scene(table=True, cube_size=0.05))
    data = mujoco.MjData(model)
    cube, table, pad = (model.geom(n).id for n in ("cube", "table", "left_pad"))

    def frictions(a: int, b: int) -> set[float]:
        mujoco.mj_forward(model, data)
        return {round(float(c.friction[0]), 6) for c in data.contact[: data.ncon] if {c.geom1, c.geom2} == {a, b}}

    for mu in (0.48, 0.8, 1.2):
        model.geom_friction[cube, 0] = mu
        assert frictions(cube, table) == {mu}
    start = model.joint("cube").qposadr[0]
    data.qpos[start : start + 3] = data.site("tcp").xpos + np.array([0.0, 0.03, 0.0])  # against the left pad
    assert frictions(cube, pad) == {float(model.geom_friction[pad, 0])}


def test_the_peg_outranks_the_bore_and_the_table_so_its_randomised_friction_is_the_pairs() -> None:
    env = sim.make("panda-insert", 1)
    model = env._model  # type: ignore[attr-defined]
    names = [model.geom(i).name for i in range(model.ngeom)]
    touched = [i for i, n in enumerate(names) if n.startswith("bore") or n == "table"]
    assert touched and int(model.geom_priority[model.geom("peg").id]) > int(model.geom_priority[touched].max())
    env.close()


@pytest.mark.parametrize("task", ["panda-reach", "panda-lift"])
def test_exported_relative_targets_match_the_simulator(task: str, tmp_path: Path) -> None:
    """The ONNX graph adds the measured joint positions (``action.reference``) exactly as the task does; the
    runtime inverts it into the same normalised action, and the gripper command (lift) stays absolute."""
    from policies.nets import ActorCritic
    from policies.nets.export import export_onnx
    from policies.runtime import ContractError
    from policies.runtime.onnx_policy import OnnxPolicy

    env = sim.make(task, 8)
    obs = env.reset(seed=4)
    model = ActorCritic(env.obs_sizes["policy"], env.obs_sizes["critic"], env.num_actions)  # type: ignore[attr-defined]
    with torch.no_grad():
        model.actor[-1].weight.mul_(100.0)  # actions of order 1, some saturated
    path = export_onnx(model, env.contract(["policy"]), tmp_path)  # type: ignore[attr-defined]
    policy = OnnxPolicy(path, num_envs=8)
    command = policy.run_obs(obs["policy"].numpy())
    a = model.action_mean(obs["policy"]).clamp(-1, 1).detach()
    reference = obs["policy"][:, :7]  # joint_positions is the first term (noisy, as the robot measures it)
    expected = env.command(a).numpy()  # type: ignore[attr-defined]
    scale = env.cfg.action_scale  # type: ignore[attr-defined]
    expected[:, :7] = np.clip(reference.numpy() + scale * a[:, :7].numpy(), panda.Q_MIN, panda.Q_MAX)
    np.testing.assert_allclose(command, expected[:, : env.num_actions], atol=1e-5)
    inside = (command > np.asarray(policy.contract.action.low) + 1e-6) & (
        command < np.asarray(policy.contract.action.high) - 1e-6
    )
    assert inside.mean() > 0.5
    np.testing.assert_allclose(policy.normalized_action(command)[inside], a.numpy()[inside], atol=1e-4)
    with pytest.raises(ContractError, match="reference has shape"):
        policy.normalized_action(command, np.zeros((1, env.num_actions)))
    with pytest.raises(ContractError, match="reference holds a non-finite value"):
        policy.normalized_action(command, np.full(command.shape, np.nan))
    env.close()


@mjwarp
@pytest.mark.parametrize("task", ["panda-reach", "panda-push", "panda-lift", "panda-insert"])
def test_every_panda_task_runs_on_mjwarp(task: str) -> None:
    """Contract smoke test on the second backend: build, reset, step with randomisation, finite observations of the
    declared sizes, a contract identical to the mujoco backend's."""
    cfg_cls = type(sim.registry.get_task(task).config_cls())
    env = sim.make(task, 3, cfg=cfg_cls(backend="mjwarp"))
    ref = sim.make(task, 3)
    obs = env.reset(seed=0)
    for _ in range(3):
        obs, reward, *_ = env.step(2 * torch.rand(3, env.num_actions) - 1)
    assert obs["policy"].shape == (3, env.obs_sizes["policy"]) and bool(torch.isfinite(obs["policy"]).all())
    assert bool(torch.isfinite(obs["critic"]).all()) and bool(torch.isfinite(reward).all())
    assert env.contract(["policy"]).to_json() == ref.contract(["policy"]).to_json()  # type: ignore[attr-defined]
    env.close()
    ref.close()


def _lift_with_the_expert(
    steps: int, open_after: int | None = None, lift_from_height: float = 0.0, grasp_max_tilt: float = 1.0
) -> tuple[PandaLift, list[dict[str, float]]]:
    """Drive two randomisation-free ``panda-lift`` worlds with the scripted expert for ``steps`` control periods
    (opening the gripper from step ``open_after`` on); per step: grasp flag, height and reward terms of world 0."""
    from sim.tasks.panda.experts import LiftExpert

    cfg = PandaLiftConfig(
        randomization=[],
        noise=sim.tasks.base.SensorNoise(),
        lift_from_height=lift_from_height,
        grasp_max_tilt=grasp_max_tilt,
    )
    env = sim.make("panda-lift", 2, cfg=cfg)
    assert isinstance(env, PandaLift)
    env.reset(seed=3)
    expert = LiftExpert(env)
    expert.reset()
    trace = []
    for t in range(steps):
        a = expert.act()
        if open_after is not None and t >= open_after:
            a[:, 7] = 1.0
        env.step(a)
        terms = env._reward_terms(a, torch.zeros(2, dtype=torch.bool))
        trace.append({"grasped": float(env._grasped()[0]), "height": float(env._height()[0]),
                      **{k: float(v[0]) for k, v in terms.items()}})  # fmt: skip
    return env, trace


def test_a_grasp_needs_both_pads_on_the_cube_and_height_pays_only_while_held() -> None:
    """The expert's approach is no grasp (open fingers), its closed fingers around the cube are; the lift terms pay
    only while the cube is held; fingers closed on each other (pads in contact, no cube between) are no grasp."""
    env, trace = _lift_with_the_expert(70)
    first = next(i for i, s in enumerate(trace) if s["grasped"])
    assert all(s["grasp"] == 0 and s["lift"] == 0 and s["lifted"] == 0 for s in trace[:first])
    assert trace[-1]["grasped"] == 1 and trace[-1]["height"] > 0.1
    assert trace[-1]["lifted"] == 1 and trace[-1]["lift"] > 0.6
    # Fingers shut on nothing, next to the cube: both pads press on each other, the cube is not between them.
    qpos = env.physics.qpos.clone()
    qpos[:, env._finger_qpos] = 0.0
    qpos[:, env._cube_qpos[:2]] += torch.tensor([0.0, 0.2])
    qpos[:, env._cube_qpos[2]] = panda.TABLE_HEIGHT + env.cube_half()
    env.physics.reset(torch.arange(2), qpos, torch.zeros_like(env.physics.qvel))
    env._read_state()
    env.step(torch.cat((torch.zeros(2, 7), -torch.ones(2, 1)), 1))
    assert not bool(env._grasped().any())
    env.close()


def test_the_height_term_pays_only_from_lift_from_height() -> None:
    """The same lift by the expert with the height term paid from the table (the default) and from 2 cm: below
    2 cm the held cube earns nothing (a cube pinched and turned onto an edge rises up to 1 cm), above it the same.
    A gate at or over the success height, or below 0, is refused by name."""
    _, paid = _lift_with_the_expert(70)
    env, gated = _lift_with_the_expert(70, lift_from_height=0.02)
    low = [i for i, s in enumerate(paid) if s["grasped"] and 0.0 < s["height"] < 0.02 and s["lift"] > 0]
    high = [i for i, s in enumerate(paid) if s["grasped"] and s["height"] >= 0.02]
    assert low and high, paid
    assert all(gated[i]["lift"] == 0 for i in low)
    assert all(gated[i]["lift"] == paid[i]["lift"] > 0 for i in high)
    env.close()
    for bad in (0.1, -0.01):
        with pytest.raises(TaskConfigError, match=r"env\.lift_from_height must be in \[0, env\.lift_height"):
            PandaLiftConfig(lift_from_height=bad)


def test_the_grasp_term_pays_only_for_a_cube_near_a_face_with_grasp_max_tilt() -> None:
    """The expert's grasp holds the cube flat: the gated term pays as the ungated one. The same held cube read as
    turned 0.6 rad about the pads' axis onto an edge (the plateau of a teacher that pinches without lifting) earns
    the grasp term without the gate and nothing with it; a gate that is not positive is refused by name."""
    _, paid = _lift_with_the_expert(40)
    env, gated = _lift_with_the_expert(40, grasp_max_tilt=0.3)
    held = [i for i, s in enumerate(paid) if s["grasped"]]
    assert held and all(gated[i]["grasp"] == paid[i]["grasp"] == 1.0 for i in held)
    assert bool(env._grasped()[0])
    half = 0.3  # half of 0.6 rad, about y (the axis between the pads at the expert's grasp)
    env.cube_quat = torch.tensor([[math.cos(half), 0.0, math.sin(half), 0.0]] * 2)
    assert float(env.cube_tilt()[0]) == pytest.approx(0.6, abs=1e-5)
    action = torch.zeros(2, 8)
    assert float(env._reward_terms(action, torch.zeros(2, dtype=torch.bool))["grasp"][0]) == 0.0
    env.cfg.grasp_max_tilt = 1.0
    assert float(env._reward_terms(action, torch.zeros(2, dtype=torch.bool))["grasp"][0]) == 1.0
    env.close()
    with pytest.raises(TaskConfigError, match=r"env\.grasp_max_tilt must be finite and positive"):
        PandaLiftConfig(grasp_max_tilt=0.0)


def test_a_lifted_cube_that_is_dropped_is_no_success() -> None:
    """Lifted (the expert), then let go before the time limit: the episode ends without success."""
    env, trace = _lift_with_the_expert(124, open_after=80)
    assert max(s["height"] for s in trace[:80]) > 0.1
    _, _, _, truncated, info = env.step(torch.cat((torch.zeros(2, 7), torch.ones(2, 1)), 1))
    assert bool(truncated.all()) and info.success is not None and not bool(info.success.any())
    env.close()


def test_the_gripper_action_maps_open_at_zero_as_the_contract_says() -> None:
    """``open-at-zero``: a = 0 and above open, -1 closed; ``centred`` (the default) is half open at 0. The
    contract's affine map with its limits gives the same finger opening as the simulator."""
    for mapping, expected in (("open-at-zero", [0.0, 0.02, 0.04, 0.04]), ("centred", [0.0, 0.01, 0.02, 0.04])):
        env = sim.make("panda-lift", 4, cfg=PandaLiftConfig(gripper_action=mapping))
        env.reset(seed=0)
        a = torch.zeros(4, 8)
        a[:, 7] = torch.tensor([-1.0, -0.5, 0.0, 1.0])
        grip = env.command(a)[:, 7]  # type: ignore[attr-defined]
        torch.testing.assert_close(grip, torch.tensor(expected))
        spec = env.contract(["policy"]).action  # type: ignore[attr-defined]
        mapped = (spec.offset[7] + spec.scale[7] * a[:, 7]).clamp(spec.low[7], spec.high[7])
        torch.testing.assert_close(mapped, torch.tensor(expected))
        env.close()
    with pytest.raises(TaskConfigError, match=r"env\.gripper_action must be one of centred, open-at-zero"):
        PandaLiftConfig(gripper_action="binary")
    with pytest.raises(TaskConfigError, match=r"env\.lift_target \(0\.05\) must be >= env\.lift_height"):
        PandaLiftConfig(lift_target=0.05)


def test_push_pays_for_the_goal_only_from_the_pushing_point() -> None:
    """``push_to_goal`` pays while the finger tips are behind the cube on the line from the goal, not beside it or
    on the goal's side; ``at_goal`` only within the success distance."""
    env = sim.make("panda-push", 3, cfg=PandaPushConfig(randomization=[], noise=sim.tasks.base.SensorNoise()))
    env.reset(seed=0)
    cube = env.cube_pos.clone()  # type: ignore[attr-defined]
    with torch.inference_mode():
        env.goal[:] = cube[:, :2] + torch.tensor([0.15, 0.0])  # type: ignore[attr-defined]
        env.goal[2] = cube[2, :2] + torch.tensor([0.03, 0.0])  # type: ignore[attr-defined]
    behind = cube[:, 0] - env.cube_half() - 0.02  # type: ignore[attr-defined]
    tcp = cube.clone()
    tcp[0, 0] = behind[0]  # at the pushing point
    tcp[1, 0] = cube[1, 0] + env.cube_half()[1] + 0.02  # type: ignore[attr-defined]  # on the goal's side
    tcp[2, 0] = behind[2]
    env._tcp_pos = tcp  # type: ignore[attr-defined]
    terms = env._reward_terms(torch.zeros(3, 7), torch.zeros(3, dtype=torch.bool))  # type: ignore[attr-defined]
    assert terms["push_to_goal"][0] == pytest.approx(1 - math.tanh(0.15 / 0.2)) and terms["push_to_goal"][1] == 0
    assert terms["at_goal"].tolist() == [0.0, 0.0, 1.0]
    env.close()


def test_saturate_at_goal_pays_the_reach_and_push_terms_in_full_once_the_cube_is_there() -> None:
    """With ``env.saturate_at_goal`` the fingers gain nothing by chasing the pushing point once the cube is within
    the success distance; outside it the terms are unchanged."""
    cfgs = [PandaPushConfig(randomization=[], noise=sim.tasks.base.SensorNoise(), saturate_at_goal=s) for s in (0, 1)]
    terms = []
    for cfg in cfgs:
        env = sim.make("panda-push", 2, cfg=cfg)
        env.reset(seed=0)
        cube = env.cube_pos.clone()  # type: ignore[attr-defined]
        with torch.inference_mode():
            env.goal[0] = cube[0, :2] + torch.tensor([0.02, 0.0])  # type: ignore[attr-defined]  # at the goal
            env.goal[1] = cube[1, :2] + torch.tensor([0.15, 0.0])  # type: ignore[attr-defined]  # far from it
        env._tcp_pos = cube + torch.tensor([0.0, 0.2, 0.1])  # type: ignore[attr-defined]  # away from the cube
        terms.append(env._reward_terms(torch.zeros(2, 7), torch.zeros(2, dtype=torch.bool)))  # type: ignore[attr-defined]
        env.close()
    plain, saturated = terms
    assert plain["reach_object"][0] < 0.5 and plain["push_to_goal"][0] == 0
    assert saturated["reach_object"][0] == 1 and saturated["push_to_goal"][0] == 1
    for name in ("reach_object", "push_to_goal", "at_goal"):
        assert saturated[name][1] == plain[name][1]
