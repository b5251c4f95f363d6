"""Physics checks of the batched multirotor model and the quadrotor-hover task."""

from __future__ import annotations

import math

import pytest
import torch

import sim
from sim.randomization import RandomizationError, RandomizationTerm, edge_value
from sim.robots.multirotor import (
    GRAVITY,
    ROTOR_NAMES,
    CrazyflieParams,
    MultirotorModel,
    MultirotorParams,
    MultirotorState,
    quat_to_matrix,
)
from sim.tasks.base import SensorNoise
from sim.tasks.quadrotor.hover import QuadrotorHover, QuadrotorHoverConfig
from sim.vec_env import TaskConfigError

CPU = torch.device("cpu")


def nominal_params(n: int) -> MultirotorParams:
    r = CrazyflieParams()

    def col(v: float) -> torch.Tensor:
        return torch.full((n, 1), v)

    return MultirotorParams(
        mass=col(r.mass),
        inertia=torch.tensor([r.inertia] * n),
        max_thrust=col(r.thrust_to_weight * r.mass * GRAVITY / 4),
        thrust_curve_linear=col(r.thrust_curve_linear),
        torque_ratio=col(r.torque_ratio),
        motor_time_constant_up=col(r.motor_time_constant_up),
        motor_time_constant_down=col(r.motor_time_constant_down),
        disturbance=torch.zeros(n, 3),
    )


def test_hover_thrust_equals_weight_at_nominal_parameters() -> None:
    r = CrazyflieParams()
    model, p = MultirotorModel(r.arm_length, CPU), nominal_params(1)
    rotor = torch.full((1, 4), r.hover_rotor)
    thrust, torque = model.wrench(rotor, p)
    assert thrust.item() == pytest.approx(r.mass * GRAVITY, rel=1e-6)
    assert torque.abs().max().item() < 1e-12
    # and the body stays put for a second at hover speed
    s = MultirotorState.zeros(1, CPU)
    s.rotor[:] = r.hover_rotor
    for _ in range(200):
        s = model.step(s, rotor, p, 0.005)
    assert s.pos.abs().max().item() < 1e-5
    assert s.vel.abs().max().item() < 1e-5


def test_free_fall_at_zero_thrust() -> None:
    r = CrazyflieParams()
    model, p = MultirotorModel(r.arm_length, CPU), nominal_params(1)
    s = MultirotorState.zeros(1, CPU)  # rotors stopped
    t, dt = 0.5, 0.005
    for _ in range(round(t / dt)):
        s = model.step(s, torch.zeros(1, 4), p, dt)
    assert s.pos[0, 2].item() == pytest.approx(-0.5 * GRAVITY * t**2, rel=1e-5)
    assert s.vel[0, 2].item() == pytest.approx(-GRAVITY * t, rel=1e-5)
    assert s.pos[0, :2].abs().max().item() < 1e-9


def test_yaw_torque_sign_and_symmetry() -> None:
    r = CrazyflieParams()
    model, p = MultirotorModel(r.arm_length, CPU), nominal_params(1)
    h = r.hover_rotor
    # M1 and M3 spin counter-clockwise seen from above: speeding them up yaws the body clockwise (-z).
    _, tau = model.wrench(torch.tensor([[h + 0.1, h, h + 0.1, h]]), p)
    assert tau[0, 2].item() < 0
    assert tau[0, :2].abs().max().item() < 1e-12  # diagonal pairs: no roll or pitch
    _, tau_ccw = model.wrench(torch.tensor([[h, h + 0.1, h, h + 0.1]]), p)
    assert tau_ccw[0, 2].item() == pytest.approx(-tau[0, 2].item(), rel=1e-6)
    # right-hand rotors (M1, M2) up: roll towards the left wing down is negative roll torque (x forward, y left)
    _, tau_roll = model.wrench(torch.tensor([[h + 0.1, h + 0.1, h, h]]), p)
    assert tau_roll[0, 0].item() < 0 and abs(tau_roll[0, 1].item()) < 1e-12
    # front rotors (M1, M4) up: nose up, which is negative pitch torque about +y
    _, tau_pitch = model.wrench(torch.tensor([[h + 0.1, h, h, h + 0.1]]), p)
    assert tau_pitch[0, 1].item() < 0 and abs(tau_pitch[0, 0].item()) < 1e-12


# Signs of (roll, pitch, yaw) in each motor's force, from the Crazyflie firmware's mixer
# (power_distribution_quadrotor.c, powerDistributionForceTorque): m1 = T - r - p - y, m2 = T - r + p + y,
# m3 = T + r + p - y, m4 = T + r - p + y.
FIRMWARE_MIXER_SIGNS = [[-1, -1, -1], [-1, 1, 1], [1, 1, -1], [1, -1, 1]]


def test_rotor_layout_and_spin_directions_match_the_firmware_mixer() -> None:
    """Invert our allocation (body torque = A f) and compare each motor's sign pattern with the real mixer."""
    r = CrazyflieParams()
    model = MultirotorModel(r.arm_length, CPU)
    alloc = torch.stack(
        (torch.ones(4), model.roll_arm, model.pitch_arm, model.yaw_sign * r.torque_ratio)
    ).double()  # [thrust, tau_x, tau_y, tau_z] = alloc @ f
    mixer = torch.linalg.inv(alloc)  # f = mixer @ [T, tau_x, tau_y, tau_z]
    assert torch.sign(mixer[:, 1:]).int().tolist() == FIRMWARE_MIXER_SIGNS
    assert torch.allclose(mixer[:, 0], torch.full((4,), 0.25, dtype=torch.float64))
    assert ROTOR_NAMES == ("m1_front_right", "m2_rear_right", "m3_rear_left", "m4_front_left")


def test_energy_of_unforced_spinning_body_is_conserved() -> None:
    r = CrazyflieParams()
    model = MultirotorModel(r.arm_length, CPU)
    p = nominal_params(1)
    p.max_thrust = torch.zeros(1, 1)  # no rotor forces
    s = MultirotorState.zeros(1, CPU)
    s.omega[:] = torch.tensor([[3.0, -2.0, 5.0]])  # tumbling about a non-principal axis
    inertia = p.inertia

    def energy(x: MultirotorState) -> float:
        return 0.5 * float((inertia * x.omega.square()).sum())

    def momentum_world(x: MultirotorState) -> torch.Tensor:
        return quat_to_matrix(x.quat)[0] @ (inertia[0] * x.omega[0])

    e0, l0 = energy(s), momentum_world(s)
    for _ in range(2000):  # 10 s
        s = model.step(s, torch.zeros(1, 4), p, 0.005)
    assert energy(s) == pytest.approx(e0, rel=1e-3)
    assert torch.allclose(momentum_world(s), l0, rtol=1e-3, atol=1e-9)
    assert float(s.quat.norm()) == pytest.approx(1.0, abs=1e-6)


def test_motor_lag_is_first_order_with_separate_rise_and_fall_constants() -> None:
    r = CrazyflieParams()
    model, p = MultirotorModel(r.arm_length, CPU), nominal_params(1)
    p.motor_time_constant_up[:], p.motor_time_constant_down[:] = 0.05, 0.12
    s = MultirotorState.zeros(1, CPU)
    for _ in range(50):  # one rise constant
        s = model.step(s, torch.ones(1, 4), p, 0.001)
    assert s.rotor[0, 0].item() == pytest.approx(1 - math.exp(-1), rel=1e-3)
    s.rotor[:] = 1.0
    for _ in range(120):  # one fall constant
        s = model.step(s, torch.zeros(1, 4), p, 0.001)
    assert s.rotor[0, 0].item() == pytest.approx(math.exp(-1), rel=1e-3)
    # mixed directions in one step: each rotor uses its own constant
    s.rotor[:] = torch.tensor([[0.2, 0.8, 0.2, 0.8]])
    s = model.step(s, torch.full((1, 4), 0.5), p, 0.01)
    up, down = 0.5 - 0.3 * math.exp(-0.01 / 0.05), 0.5 + 0.3 * math.exp(-0.01 / 0.12)
    assert s.rotor[0].tolist() == pytest.approx([up, down, up, down], rel=1e-6)


@pytest.mark.parametrize("linear", [-0.12, 0.0, 0.04])
def test_thrust_curve_and_hover_speed(linear: float) -> None:
    r = CrazyflieParams(thrust_curve_linear=linear)
    model, p = MultirotorModel(r.arm_length, CPU), nominal_params(1)
    p.thrust_curve_linear[:] = linear
    f_max = float(p.max_thrust)
    for u in (0.3, 0.7, 1.0):
        thrust, _ = model.wrench(torch.full((1, 4), u), p)
        assert thrust.item() == pytest.approx(4 * f_max * ((1 - linear) * u * u + linear * u), rel=1e-6)
    thrust, _ = model.wrench(torch.full((1, 4), r.hover_rotor), p)
    assert thrust.item() == pytest.approx(r.mass * GRAVITY, rel=1e-6)
    thrust, _ = model.wrench(torch.full((1, 4), 0.01), p)
    assert thrust.item() >= 0.0  # a negative linear share never pulls the drone down


def test_rotor_thrust_does_not_grow_with_the_airframe_mass() -> None:
    """thrust_to_weight is relative to the *nominal* weight: a heavier world keeps the same rotors."""
    from sim.tasks.quadrotor.hover import QuadrotorHover

    env = sim.make("quadrotor-hover", 256)
    assert isinstance(env, QuadrotorHover)
    env.reset(seed=0)
    p = env.physical_params()
    r = CrazyflieParams()
    expected = env.params["thrust_to_weight"] * r.mass * GRAVITY / 4
    assert torch.allclose(p.max_thrust, expected)
    assert p.mass.std().item() > 0


def test_zero_action_hovers_the_nominal_drone() -> None:
    cfg = QuadrotorHoverConfig(randomization=[])
    env = sim.make("quadrotor-hover", 4, cfg=cfg)
    assert isinstance(env, QuadrotorHover)
    env.set_randomization(False)
    env.reset(seed=0)
    with torch.inference_mode():
        env.state.pos[:] = 0.0
        env.state.quat[:] = torch.tensor([1.0, 0.0, 0.0, 0.0])
        env.state.vel[:] = 0.0
        env.state.omega[:] = 0.0
    for _ in range(100):
        _, reward, terminated, _, _ = env.step(torch.zeros(4, 4))
    assert not terminated.any()
    assert env.state.pos.abs().max().item() < 1e-4
    assert reward.min().item() > 0


def test_crash_terminates_and_time_limit_truncates() -> None:
    cfg = QuadrotorHoverConfig(episode_length_s=0.3)
    env = sim.make("quadrotor-hover", 8, cfg=cfg)
    env.reset(seed=0)
    # all rotors off: the drone falls; within 0.3 s it falls < 0.45 m, so some may time out first
    done_kind = torch.zeros(8, dtype=torch.long)
    for _ in range(env.max_episode_length):
        _, _, term, trunc, _ = env.step(-torch.ones(8, 4))
        assert not (term & trunc).any()
        done_kind[trunc & (done_kind == 0)] = 1
        done_kind[term & (done_kind == 0)] = 2
    assert (done_kind == 1).all()  # nothing crashed this soon: every episode hit the time limit
    env2 = sim.make("quadrotor-hover", 8, cfg=QuadrotorHoverConfig(episode_length_s=5.0))
    env2.reset(seed=0)
    crashed = torch.zeros(8, dtype=torch.bool)
    for _ in range(300):
        _, _, term, trunc, _info = env2.step(-torch.ones(8, 4))
        crashed |= term
        assert not trunc.any()
    assert crashed.all()  # falling 1.5 m takes ~0.6 s


def test_randomised_parameters_within_declared_ranges() -> None:
    env = sim.make("quadrotor-hover", 512)
    env.reset(seed=1)
    mass = env.params["mass"] / CrazyflieParams().mass
    assert mass.min().item() >= 0.95 and mass.max().item() <= 1.3
    assert mass.std().item() > 0.01
    up, down = env.params["motor_time_constant_up"], env.params["motor_time_constant_down"]
    assert up.max().item() > 0.15 and down.max().item() > 0.15  # l2f's identified 0.15 s is covered
    assert (up - down).abs().max().item() > 0.05  # rise and fall are drawn independently
    latency = env.params["action_latency"].floor()
    assert set(latency.unique().tolist()) == {0.0, 1.0}


def test_a_corner_share_starts_that_share_of_worlds_at_edges_and_evaluation_draws_none() -> None:
    """``env.randomization_corner_share``: that share of the training resets puts every randomised parameter at the low
    or the high edge of its range (both edges drawn, independently per parameter); the others, and every world of an
    evaluation env, are drawn from the ranges; a share outside [0, 1] is refused at config load."""
    n = 4096
    env = sim.make("quadrotor-hover", n, cfg=QuadrotorHoverConfig(randomization_corner_share=0.25))
    env.reset(seed=3)
    mass = (env.params["mass"][:, 0] / CrazyflieParams().mass).double()
    (up_term,) = [t for t in env.cfg.randomization if t.param == "motor_time_constant_up"]
    up = env.params["motor_time_constant_up"][:, 0]  # drawn as is (operation abs): an edge is an exact float32 value
    corner = (up == edge_value(up_term, "lo")) | (up == edge_value(up_term, "hi"))
    assert 0.2 < corner.double().mean().item() < 0.3
    at_mass_edge = torch.isclose(mass, torch.tensor(0.95, dtype=torch.float64)) | torch.isclose(
        mass, torch.tensor(1.3, dtype=torch.float64)
    )
    assert bool(at_mass_edge[corner].all())  # a corner world has every parameter at an edge
    assert 0.4 < (mass[corner] > 1.0).double().mean().item() < 0.6  # both edges
    same_side = (mass[corner] > 1.0) == (up[corner] > 0.1)
    assert 0.4 < same_side.double().mean().item() < 0.6  # each parameter's edge drawn on its own
    assert mass.min().item() >= 0.95 - 1e-6 and mass.max().item() < 1.3  # the high edge is the largest draw
    latency = env.params["action_latency"][corner, 0].floor()
    assert set(latency.unique().tolist()) == {0.0, 1.0}
    env.evaluation_mode()
    env.reset(seed=3)
    up = env.params["motor_time_constant_up"][:, 0]
    assert not bool(((up == edge_value(up_term, "lo")) | (up == edge_value(up_term, "hi"))).any())
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(TaskConfigError, match=r"env.randomization_corner_share must be in \[0, 1\]"):
            QuadrotorHoverConfig(randomization_corner_share=bad)


def test_the_contract_states_every_training_range_latency_included() -> None:
    """What an integrator reads (``robot-rl inspect``): each randomised parameter's extremes in SI units, and the
    command latency in whole control periods (the value is floored, so ``[0, 2)`` means 0 or 1 period)."""
    env = sim.make("quadrotor-hover", 1)
    ranges = env.contract(["policy"]).extra["training_ranges"]  # type: ignore[attr-defined]
    assert set(ranges) == set(QUAD_PARAMS)
    assert ranges["action_latency"] == {"low": [0], "high": [1], "unit": "control periods"}
    assert ranges["mass"]["low"][0] == pytest.approx(0.95 * CrazyflieParams().mass)
    terms = [RandomizationTerm("action_latency", "uniform", (0.0, 2.5), "add")]
    wider = sim.make("quadrotor-hover", 1, cfg=QuadrotorHoverConfig(randomization=terms))
    assert wider.contract(["policy"]).extra["training_ranges"] == {  # type: ignore[attr-defined]
        "action_latency": {"low": [0], "high": [2], "unit": "control periods"}
    }


QUAD_PARAMS = {
    "mass": ("scale", 1.2),
    "inertia": ("scale", 0.5),
    "thrust_to_weight": ("scale", 1.1),
    "thrust_curve_linear": ("add", -0.1),
    "torque_ratio": ("scale", 3.0),
    "motor_time_constant_up": ("abs", 0.15),
    "motor_time_constant_down": ("abs", 0.15),
    "action_latency": ("add", 1.0),
    "disturbance_force": ("add", 0.01),
}


def test_every_randomisable_parameter_is_listed_here() -> None:
    from sim.tasks.quadrotor.hover import param_specs

    assert set(param_specs(CrazyflieParams())) | {"action_latency"} == set(QUAD_PARAMS)


@pytest.mark.parametrize("param", sorted(QUAD_PARAMS))
def test_every_randomised_parameter_reaches_the_physics(param: str) -> None:
    """Pinning one parameter away from nominal changes the flight, from the same state under the same commands."""
    op, value = QUAD_PARAMS[param]

    def fly(terms: list[RandomizationTerm]) -> torch.Tensor:
        env = sim.make("quadrotor-hover", 1, cfg=QuadrotorHoverConfig(randomization=terms, noise=SensorNoise()))
        assert isinstance(env, QuadrotorHover)
        env.reset(seed=0)
        with torch.inference_mode():  # the same start whatever the randomiser drew
            env.state = MultirotorState.zeros(1, CPU)
            env.state.rotor[:] = env.hover
            env.state.pos[:] = torch.tensor([0.1, -0.2, 0.3])
        action = torch.tensor([[0.5, -0.5, 0.5, -0.5]])  # rotors 1, 3 speed up, 2, 4 slow down: thrust and yaw
        for _ in range(5):
            env.step(action)
        s = env.state
        return torch.cat((s.pos, s.vel, s.omega, s.rotor), -1)

    pinned = RandomizationTerm(param, "uniform", (value, value + 1e-9), op)  # type: ignore[arg-type]
    changed = fly([pinned])
    nominal = fly([])
    assert (changed - nominal).abs().max().item() > 1e-6, f"{param} does not reach the physics"


@pytest.mark.parametrize(
    ("term", "match"),
    [
        (RandomizationTerm("mass", "uniform", (-0.5, 1.0), "scale"), "mass.*must stay above 0"),
        (RandomizationTerm("wingspan", "uniform", (0.9, 1.1), "scale"), "'wingspan' cannot be randomised.*mass"),
        (RandomizationTerm("mass", "gaussian", (1.0, 0.1), "scale"), "needs 'clip"),
        (RandomizationTerm("inertia", "uniform", (0.5, 1.5), "scale", per_element=True), "triangle inequality"),
        (RandomizationTerm("action_latency", "uniform", (0.0, 9.0), "add"), r"\(action_latency\) can reach 9"),
        (RandomizationTerm("mass", "log_uniform", (0.0, 1.0), "scale"), "log_uniform needs a positive range"),
    ],
)
def test_invalid_randomisation_is_refused(term: RandomizationTerm, match: str) -> None:
    with pytest.raises(RandomizationError, match=match):
        sim.make("quadrotor-hover", 2, cfg=QuadrotorHoverConfig(randomization=[term]))


def test_contract_describes_the_onboard_observation() -> None:
    env = sim.make("quadrotor-hover", 2)
    contract = env.contract(["policy"])
    assert contract.obs_dim == env.obs_sizes["policy"]
    assert contract.action.kind == "rpm"
    hover_rpm = contract.action.offset[0]
    assert hover_rpm == pytest.approx(CrazyflieParams().hover_rotor * CrazyflieParams().max_rpm)
    with pytest.raises(ValueError, match="only the onboard 'policy'"):
        env.contract(["policy", "critic"])


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"dt": 0.0}, "env.dt must be finite and positive"),
        ({"substeps": 0}, "env.substeps must be finite and positive"),
        ({"init_max_tilt_deg": 120.0}, r"init_max_tilt_deg must be in \[0, 90\)"),
        ({"init_pos_radius": 2.0}, "init_pos_radius must be below env.crash_distance"),
        ({"setpoint_step_prob": 1.5}, r"setpoint_step_prob must be in \[0, 1\]"),
        ({"max_command_thrust_n": 0.05}, r"max_command_thrust_n must be in \[1.25 x the hover thrust"),
        ({"max_command_thrust_n": 0.2}, r"max_command_thrust_n must be in"),
        ({"setpoint_step_radius": 0.8}, r"setpoint_step_radius must be in \[0, env.init_pos_radius"),
        ({"setpoint_step_prob": 0.5, "setpoint_step_window_s": (1.0, 3.5)}, "setpoint_step_window_s must satisfy"),
    ],
)
def test_invalid_task_config_is_refused(changes: dict[str, float], match: str) -> None:
    with pytest.raises(TaskConfigError, match=match):
        QuadrotorHoverConfig(**changes)  # type: ignore[arg-type]


def test_setpoint_steps_move_the_target_once_within_the_window_and_the_envelope() -> None:
    """With ``setpoint_step_prob = 1`` every episode's target jumps once, by at most ``setpoint_step_radius``, inside
    ``setpoint_step_window_s``: the position the policy sees jumps by minus the step, the drone itself does not."""
    cfg = QuadrotorHoverConfig(randomization=[], setpoint_step_prob=1.0, setpoint_step_radius=0.3)
    env = sim.make("quadrotor-hover", 64, cfg=cfg)
    assert isinstance(env, QuadrotorHover)
    env.set_randomization(False)
    env.reset(seed=0)
    with torch.inference_mode():  # level and still: zero commands hover the nominal drone where it is
        env.state.quat[:] = torch.tensor([1.0, 0.0, 0.0, 0.0])
        env.state.vel[:] = 0.0
        env.state.omega[:] = 0.0
    moved_at = torch.full((64,), -1)
    for k in range(round(2.5 / cfg.dt)):
        before = env.state.pos + env.target
        target = env.target.clone()
        env.step(torch.zeros(64, 4))
        jumped = (env.target - target).norm(dim=-1) > 0
        assert ((env.state.pos + env.target) - before).norm(dim=-1).max() < 1e-3  # the drone stays; the target moves
        moved_at[jumped] = k + 1
    assert (moved_at >= round(0.5 / cfg.dt)).all() and (moved_at <= round(2.0 / cfg.dt)).all(), moved_at
    assert env.target.norm(dim=-1).max() <= 0.3 + 1e-6 and env.target.norm(dim=-1).min() > 0


def test_a_target_path_sets_the_velocity_the_policy_sees() -> None:
    """``lin_vel_w`` is the drone's velocity minus the target's: a hovering drone under a target moving at 0.2 m/s
    sees -0.2 m/s; the critic sees the same relative velocity."""
    cfg = QuadrotorHoverConfig(randomization=[], noise=SensorNoise(std={}, bias_std={}))
    env = sim.make("quadrotor-hover", 2, cfg=cfg)
    assert isinstance(env, QuadrotorHover)
    env.set_randomization(False)
    env.reset(seed=0)
    velocity = torch.tensor([0.2, 0.0, 0.0])
    env.target_path = lambda t: (t[:, None] * velocity, velocity.expand(len(t), 3))
    with torch.inference_mode():
        env.state.vel[:] = 0.0
    obs, *_ = env.step(torch.zeros(2, 4))
    names = [t.name for t in env.contract(["policy"]).observation]
    start = sum(t.dim for t in env.contract(["policy"]).observation[: names.index("linear_velocity")])
    torch.testing.assert_close(obs["policy"][:, start], env.state.vel[:, 0] - 0.2)
    torch.testing.assert_close(env.target[:, 0], torch.full((2,), 0.2 * cfg.dt))


def test_a_thrust_cap_saturates_the_commands_in_training_and_in_the_contract() -> None:
    """``max_command_thrust_n`` (crazyflie-firmware's THRUST_MAX, 0.12 N) caps every rotor where the firmware caps
    it: full commands give 0.12 N in the nominal model, and the contract's ``high`` is that rotor speed."""
    from sim.robots.multirotor import GRAVITY

    cfg = QuadrotorHoverConfig(randomization=[], max_command_thrust_n=0.12)
    env = sim.make("quadrotor-hover", 2, cfg=cfg)
    assert isinstance(env, QuadrotorHover)
    r = cfg.robot
    top = env.rotor_command(torch.ones(2, 4))
    thrust = (
        r.thrust_to_weight
        * r.mass
        * GRAVITY
        / 4.0
        * ((1 - r.thrust_curve_linear) * top**2 + r.thrust_curve_linear * top)
    )
    torch.testing.assert_close(thrust, torch.full((2, 4), 0.12))
    assert env.action_spec().high == pytest.approx([float(top[0, 0]) * r.max_rpm] * 4)


def test_state_history_stacks_the_velocities_in_the_observation_and_the_contract() -> None:
    """``env.state_history = S`` gives the actor the last S samples of both velocities, newest first, and the
    contract says so (the runtime, the generated C and the Crazyflie app build their histories from it)."""
    base = sim.make("quadrotor-hover", 2)
    env = sim.make("quadrotor-hover", 2, cfg=QuadrotorHoverConfig(state_history=3))
    assert env.obs_sizes["policy"] == base.obs_sizes["policy"] + 2 * 6
    terms = {t.name: t for t in env.contract(["policy"]).observation}
    assert terms["linear_velocity"].history == 3 and terms["angular_velocity"].history == 3
    assert terms["position"].history == 1
    with pytest.raises(TaskConfigError, match=r"env\.state_history must be finite and positive"):
        QuadrotorHoverConfig(state_history=0)
    base.close()
    env.close()
