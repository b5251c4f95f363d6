"""Batched rigid-body multirotor model (torch), with Crazyflie 2.x parameters.

Frames: world ``W`` is z-up; body ``B`` is x forward, y left, z up (rotor thrust along ``+z_B``). Attitude is the
unit quaternion ``q = (w, x, y, z)`` rotating body vectors into the world frame.

State per world (``N`` worlds)::

    pos [N, 3] m (W)   quat [N, 4] (B -> W)   vel [N, 3] m/s (W)   omega [N, 3] rad/s (B)   rotor [N, 4] (0..1)

``rotor`` is each rotor's speed as a fraction ``u`` of its maximum. Thrust follows the curve
``f_i = f_max * ((1 - c) u_i**2 + c u_i)`` (``c``: ``thrust_curve_linear``; ``c = 0`` is the pure quadratic of
RLtools' l2f and gym-pybullet-drones; a fit through Bitcraze's thrust / RPM table gives ``c ≈ -0.08``), clamped at
zero, and each rotor adds a reaction torque ``±k_m f_i`` about ``z_B``. Rotor speeds follow a first-order lag towards
the command with separate time constants for spinning up and spinning down, integrated exactly; the rigid body is
integrated with classical RK4 (thrust held over a substep) and the quaternion renormalised after every substep.
Every nominal value and its source is in :class:`CrazyflieParams`; the ranges that cover the published
identifications are in ``sim/tasks/quadrotor/hover.py`` (table: ``docs/quadrotor.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GRAVITY = 9.81
"""Gravitational acceleration, m/s²."""


@dataclass(frozen=True)
class CrazyflieParams:
    """Nominal Crazyflie 2.x parameters, with their sources.

    Published identifications (cited by short name here and in the task's randomisation):

    - *Förster 2015*: J. Förster, "System Identification of the Crazyflie 2.0 Nano Quadrocopter", BSc thesis, ETH
      Zurich (the values the Crazyflie firmware's ``physical_constants.c`` carries: inertia, ``k_m``, 29.3 g).
    - *Landry 2015*: B. Landry, "Planning and Control for Quadrotor Flight through Cluttered Environments", MSc
      thesis, MIT (inertia diag(1.43e-5, 1.43e-5, 2.89e-5) kg m², 30 g).
    - *Bitcraze 2015*: "Measuring propeller RPM, part 3" (bitcraze.io blog, and the firmware docs' "PWM to thrust"
      page): thrust and RPM against PWM on a scale; a step from 0 to full speed (about 25k RPM) takes ~180 ms.
    - *l2f*: RLtools / "Learning to Fly in Seconds" (Eschmann et al. 2023), ``parameters/dynamics/crazy_flie.h``
      of arplaboratory/learning-to-fly: 27 g, thrust 3.16e-10 rpm² N (0.1488 N at 21702 RPM), ``k_m`` 0.005964552 m,
      RPM time constant 0.15 s, inertia diag(3.85e-6, 3.85e-6, 5.97e-6) kg m².
    - *gym-pybullet-drones*: ``cf2x.urdf``: 27 g, kf 3.16e-10, km 7.94e-12 (so ``k_m`` = km / kf = 0.0251 m),
      inertia diag(1.4e-5, 1.4e-5, 2.17e-5) kg m², thrust-to-weight 2.25, no motor lag.

    Attributes:
        mass: Take-off mass with battery, kg (27 g bare: l2f, gym-pybullet-drones; 29.3–34 g with decks:
            Förster 2015, firmware constants; 30 g: Landry 2015).
        arm_length: Motor-to-centre distance, m (92 mm between diagonal motors, Bitcraze datasheet).
        inertia: Principal moments of inertia, kg m² (Förster 2015).
        thrust_to_weight: Maximum thrust of the four rotors over the *nominal* weight ``mass * g`` (l2f:
            4 x 0.1488 N / 0.265 N ≈ 2.25; gym-pybullet-drones: 2.25). The rotors' thrust does not grow with a
            heavier airframe: a world with more mass has a lower actual thrust-to-weight ratio.
        thrust_curve_linear: Linear share ``c`` of the thrust curve ``f = f_max ((1 - c) u² + c u)`` (l2f,
            gym-pybullet-drones: 0; a least-squares ``a u² + b u`` through Bitcraze 2015's thrust / RPM table, 0–18.2k
            RPM: ``c = b / (a + b) ≈ -0.08``).
        torque_ratio: Rotor reaction torque per unit thrust ``k_m``, m (Förster 2015, l2f).
        motor_time_constant_up: First-order rotor-speed time constant while speeding up, s (Bitcraze 2015's step
            response: ~180 ms from rest to full speed, i.e. about 60 ms).
        motor_time_constant_down: The same while slowing down, s (Bitcraze 2015: the falling slope matches the
            rising one at 15–20k RPM).
        max_rpm: Rotor speed at full command, RPM (l2f).
    """

    mass: float = 0.027
    arm_length: float = 0.046
    inertia: tuple[float, float, float] = (1.66e-5, 1.66e-5, 2.93e-5)
    thrust_to_weight: float = 2.25
    thrust_curve_linear: float = 0.0
    torque_ratio: float = 0.005964552
    motor_time_constant_up: float = 0.06
    motor_time_constant_down: float = 0.06
    max_rpm: float = 21702.0

    def __post_init__(self) -> None:
        for name in (
            "mass",
            "arm_length",
            "inertia",
            "thrust_to_weight",
            "torque_ratio",
            "motor_time_constant_up",
            "motor_time_constant_down",
            "max_rpm",
        ):
            value = getattr(self, name)
            if not all(math.isfinite(v) and v > 0 for v in (value if isinstance(value, tuple) else (value,))):
                raise ValueError(f"robot.{name} must be finite and positive, got {value}")
        if self.thrust_to_weight <= 1.0:
            raise ValueError(
                f"robot.thrust_to_weight must exceed 1 (the drone must lift itself), got {self.thrust_to_weight}"
            )
        if not (math.isfinite(self.thrust_curve_linear) and -0.5 <= self.thrust_curve_linear < 1.0):
            raise ValueError(f"robot.thrust_curve_linear must be in [-0.5, 1), got {self.thrust_curve_linear}")
        i = self.inertia
        if any(2 * v > sum(i) for v in i):
            raise ValueError(f"robot.inertia {list(i)} violates the triangle inequality I_a + I_b >= I_c")

    @property
    def hover_rotor(self) -> float:
        """Rotor speed fraction at which four rotors carry the nominal weight (the thrust curve at ``1 / T/W``)."""
        return thrust_curve_inverse(1.0 / self.thrust_to_weight, self.thrust_curve_linear)


def thrust_curve_inverse(fraction: float, linear: float) -> float:
    """Rotor speed fraction ``u`` at which ``(1 - c) u² + c u`` equals ``fraction`` of the maximum thrust."""
    a, b = 1.0 - linear, linear
    return (-b + math.sqrt(b * b + 4.0 * a * fraction)) / (2.0 * a)


# Crazyflie 2.x layout and spin directions, checked against the firmware's own mixer (bitcraze/crazyflie-firmware,
# src/modules/src/power_distribution_quadrotor.c, powerDistributionForceTorque): motor forces are
#   m1 = T/4 - roll - pitch - yaw,   m2 = T/4 - roll + pitch + yaw,
#   m3 = T/4 + roll + pitch - yaw,   m4 = T/4 + roll - pitch + yaw
# (roll = tau_x / (4 a), pitch = tau_y / (4 a), yaw = tau_z / (4 k_m), a = arm / sqrt 2). For this symmetric X frame
# the mixer is the inverse of the allocation, so each motor's yaw sign is the sign of its own reaction torque about
# +z: M1 front-right and M3 rear-left spin counter-clockwise seen from above (reaction -z), M2 rear-right and
# M4 front-left clockwise (reaction +z); Bitcraze's motor diagram, RLtools' l2f Crazyflie parameters and
# gym-pybullet-drones' CF2X model agree. tests/sim/test_quadrotor.py checks the whole sign pattern.
ROTOR_XY = ((1.0, -1.0), (-1.0, -1.0), (-1.0, 1.0), (1.0, 1.0))
"""Rotor positions in units of ``arm_length / sqrt(2)`` (x forward, y left)."""
ROTOR_YAW_SIGN = (-1.0, 1.0, -1.0, 1.0)
"""Sign of each rotor's reaction torque about ``+z_B``."""
ROTOR_NAMES = ("m1_front_right", "m2_rear_right", "m3_rear_left", "m4_front_left")


@dataclass
class MultirotorState:
    """Batched state; see the module docstring for frames and units."""

    pos: torch.Tensor
    quat: torch.Tensor
    vel: torch.Tensor
    omega: torch.Tensor
    rotor: torch.Tensor

    @classmethod
    def zeros(cls, n: int, device: torch.device) -> MultirotorState:
        """``n`` worlds at the origin, level, at rest, rotors stopped."""
        quat = torch.zeros(n, 4, device=device)
        quat[:, 0] = 1.0
        z3 = torch.zeros(n, 3, device=device)
        return cls(z3.clone(), quat, z3.clone(), z3.clone(), torch.zeros(n, 4, device=device))


@dataclass
class MultirotorParams:
    """Per-world physical parameters (``[N, k]`` tensors, SI units).

    Attributes:
        mass: ``[N, 1]`` kg.
        inertia: ``[N, 3]`` principal moments, kg m².
        max_thrust: ``[N, 1]`` thrust of one rotor at full speed, N.
        thrust_curve_linear: ``[N, 1]`` linear share ``c`` of the thrust curve (see the module docstring).
        torque_ratio: ``[N, 1]`` reaction torque per unit thrust, m.
        motor_time_constant_up: ``[N, 1]`` rotor time constant while speeding up, s.
        motor_time_constant_down: ``[N, 1]`` rotor time constant while slowing down, s.
        disturbance: ``[N, 3]`` constant external force in the world frame, N.
    """

    mass: torch.Tensor
    inertia: torch.Tensor
    max_thrust: torch.Tensor
    thrust_curve_linear: torch.Tensor
    torque_ratio: torch.Tensor
    motor_time_constant_up: torch.Tensor
    motor_time_constant_down: torch.Tensor
    disturbance: torch.Tensor


class MultirotorModel:
    """Batched quadrotor dynamics on one device.

    Args:
        arm_length: Motor-to-centre distance, m.
        device: Torch device.
    """

    def __init__(self, arm_length: float, device: torch.device) -> None:
        d = arm_length / math.sqrt(2.0)
        xy = torch.tensor(ROTOR_XY, device=device) * d
        # body torque = alloc @ thrusts:  tau_x = sum y_i f_i,  tau_y = -sum x_i f_i,  tau_z = sum s_i k_m f_i
        self.roll_arm = xy[:, 1]  # [4]
        self.pitch_arm = -xy[:, 0]  # [4]
        self.yaw_sign = torch.tensor(ROTOR_YAW_SIGN, device=device)
        self.gravity = torch.tensor([0.0, 0.0, -GRAVITY], device=device)

    def wrench(self, rotor: torch.Tensor, p: MultirotorParams) -> tuple[torch.Tensor, torch.Tensor]:
        """Collective thrust ``[N]`` (N, along ``+z_B``) and body torque ``[N, 3]`` (N m) of rotor speeds ``[N, 4]``."""
        c = p.thrust_curve_linear
        f = p.max_thrust * ((1.0 - c) * rotor.square() + c * rotor).clamp_min(0.0)  # [N, 4]
        torque = torch.stack(
            (f @ self.roll_arm, f @ self.pitch_arm, (f @ self.yaw_sign) * p.torque_ratio[:, 0]), dim=-1
        )
        return f.sum(-1), torque

    def derivative(
        self, s: MultirotorState, thrust: torch.Tensor, torque: torch.Tensor, p: MultirotorParams
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Time derivatives ``(pos_dot, quat_dot, vel_dot, omega_dot)`` of the rigid body under a fixed wrench."""
        z_body = quat_z_axis(s.quat)  # [N, 3] third column of R
        acc = z_body * (thrust / p.mass[:, 0]).unsqueeze(-1) + self.gravity + p.disturbance / p.mass
        i_omega = p.inertia * s.omega
        omega_dot = (torque - torch.linalg.cross(s.omega, i_omega)) / p.inertia
        return s.vel, quat_derivative(s.quat, s.omega), acc, omega_dot

    def step(self, s: MultirotorState, command: torch.Tensor, p: MultirotorParams, dt: float) -> MultirotorState:
        """Advance by ``dt`` seconds: exact first-order motor lag (rise or fall constant per rotor), then RK4.

        Args:
            s: Current state.
            command: ``[N, 4]`` commanded rotor speed fractions in ``[0, 1]``.
            p: Per-world parameters.
            dt: Step, s.
        """
        # The lag never crosses the command, so the direction (and the constant) holds for the whole step.
        tau = torch.where(command > s.rotor, p.motor_time_constant_up, p.motor_time_constant_down)  # [N, 4]
        rotor = command + (s.rotor - command) * torch.exp(-dt / tau)
        thrust, torque = self.wrench(0.5 * (s.rotor + rotor), p)  # midpoint speed over the step

        def f(x: MultirotorState) -> tuple[torch.Tensor, ...]:
            return self.derivative(x, thrust, torque, p)

        def add(x: MultirotorState, k: tuple[torch.Tensor, ...], h: float) -> MultirotorState:
            return MultirotorState(x.pos + h * k[0], x.quat + h * k[1], x.vel + h * k[2], x.omega + h * k[3], x.rotor)

        k1 = f(s)
        k2 = f(add(s, k1, dt / 2))
        k3 = f(add(s, k2, dt / 2))
        k4 = f(add(s, k3, dt))
        inc = [(a + 2 * b + 2 * c + d) * (dt / 6) for a, b, c, d in zip(k1, k2, k3, k4, strict=True)]
        quat = s.quat + inc[1]
        quat = quat / quat.norm(dim=-1, keepdim=True)
        return MultirotorState(s.pos + inc[0], quat, s.vel + inc[2], s.omega + inc[3], rotor)


def quat_derivative(q: torch.Tensor, omega_b: torch.Tensor) -> torch.Tensor:
    """``q_dot = 0.5 q ⊗ (0, omega_b)`` for ``q: [N, 4]`` (w, x, y, z) and body rates ``[N, 3]``."""
    w, x, y, z = q.unbind(-1)
    p, r, t = omega_b.unbind(-1)
    return 0.5 * torch.stack(
        (-x * p - y * r - z * t, w * p + y * t - z * r, w * r - x * t + z * p, w * t + x * r - y * p), dim=-1
    )


def quat_z_axis(q: torch.Tensor) -> torch.Tensor:
    """Body z axis in the world frame (third column of ``R(q)``), ``[N, 4] -> [N, 3]``."""
    w, x, y, z = q.unbind(-1)
    return torch.stack((2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)), dim=-1)


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrix ``[N, 3, 3]`` (body -> world) of unit quaternions ``[N, 4]`` (w, x, y, z)."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        (
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ),
        dim=-1,
    ).reshape(-1, 3, 3)  # fmt: skip


def random_quat_within(n: int, max_angle: float, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """``[n, 4]`` rotations about uniformly random axes by angles uniform in ``[0, max_angle]`` rad."""
    axis = torch.randn(n, 3, generator=gen, device=device)
    axis = axis / axis.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    angle = max_angle * torch.rand(n, 1, generator=gen, device=device)
    return torch.cat((torch.cos(angle / 2), axis * torch.sin(angle / 2)), dim=-1)


CRAZYFLIE_MOTOR_COMMAND: dict[str, object] = {
    "real_command": "PWM duty ratio 0..65535 per motor (crazyflie-firmware motorsSetRatio, battery-compensated)",
    "rpm_to_pwm_percent": [
        [0, 0.0],
        [4485, 6.25],
        [7570, 12.5],
        [9374, 18.75],
        [10885, 25.0],
        [12277, 31.25],
        [13522, 37.5],
        [14691, 43.25],
        [15924, 50.0],
        [17174, 56.25],
        [18179, 62.5],
    ],
    "linear_fit": "pwm_percent = (rpm - 3100) / 262 above ~4500 rpm",
    "source": "Bitcraze 2015 thrust measurements (bitcraze.io, 'PWM to thrust'), 3.65-4.0 V; above 18179 rpm "
    "the table ends: extrapolate with the fit and check on your motors",
}
"""How a rotor-speed command becomes the Crazyflie's motor command (measured, Crazyflie 2.0 with stock motors)."""


def airframe_facts(r: CrazyflieParams) -> dict[str, object]:
    """The airframe a policy was trained around, as the deployment contract carries it (``extra.airframe``): motor
    order, rotor positions and spin (the firmware mixer's convention), the thrust and motor model, the hover speed
    and how a rotor-speed command becomes the real motor command. ``robot-rl inspect`` prints it and
    ``policies.runtime.robot_check`` checks a real robot's description against it."""
    d = r.arm_length / math.sqrt(2.0)
    return {
        "motor_order": list(ROTOR_NAMES),
        "rotor_positions_m": [[x * d, y * d, 0.0] for x, y in ROTOR_XY],
        "reaction_torque_sign_z": list(ROTOR_YAW_SIGN),
        "spin_seen_from_above": ["ccw" if s < 0 else "cw" for s in ROTOR_YAW_SIGN],
        "thrust_model": "f = max_thrust_n * ((1 - c) u^2 + c u), u = rpm / max_rpm, c = thrust_curve_linear",
        "max_thrust_per_rotor_n": r.thrust_to_weight * r.mass * GRAVITY / 4.0,
        "thrust_curve_linear": r.thrust_curve_linear,
        "max_rpm": r.max_rpm,
        "hover_rpm": r.hover_rotor * r.max_rpm,
        "reaction_torque_per_thrust_m": r.torque_ratio,
        "motor_time_constant_up_s": r.motor_time_constant_up,
        "motor_time_constant_down_s": r.motor_time_constant_down,
        "inertia_kg_m2": list(r.inertia),
        "motor_command": CRAZYFLIE_MOTOR_COMMAND,
    }
