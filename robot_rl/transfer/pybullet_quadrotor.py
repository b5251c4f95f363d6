"""``quadrotor-hover`` in PyBullet: a Crazyflie 2.x rebuilt from the contract's ``airframe`` section alone.

Nothing of the training simulator is used: the body is a PyBullet multibody (Bullet's integrator at 500 Hz, not the
training model's RK4), its mass, inertia, rotor positions, spin directions, thrust curve, reaction torque and motor
time constants are read from the exported contract, and the motors are this module's own first-order lag.

The policy's rotor-speed commands (RPM) act as they would on the real airframe:

- each rotor's speed follows its command with the rise or fall time constant (the faster one while the command is
  above the speed), integrated exactly at the physics rate;
- each rotor pushes ``f_i = max_thrust ((1 - c) u² + c u)`` along the body z axis *at its own position* (so roll and
  pitch torques come from Bullet's rigid-body mechanics, not from an allocation matrix) and adds
  ``sign_i k_m f_i`` about body z;
- a rotor-induced drag that the training model does not have: ``F = -k_d (Σ ω_i) v_body`` with
  gym-pybullet-drones' CF2X coefficients ``k_d = (9.1785e-7, 9.1785e-7, 10.311e-7)`` N s / rad (its ``DRAG``
  physics), ``ω_i`` in rad/s.

Randomisation (``randomize=True``), drawn by this module: every parameter the contract's ``training_ranges`` lists,
uniformly within that range (mass, inertia, thrust, thrust curve, reaction torque, rise and fall constants,
disturbance force) and the command latency (whole control periods; 0 or 1 where the contract predates it), and
sensor noise (position 2 mm, attitude 0.01, velocity 0.01 m/s, gyro 0.05 rad/s, as a Crazyflie's state estimate
and IMU). Start states come from the contract's
``training_envelope``; success and crash use its ``success`` and envelope limits, as the training task does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.runtime.contract import Contract

PHYSICS_HZ = 500
"""Bullet step rate, Hz (the Crazyflie's own attitude loop runs at 500 Hz)."""
DRAG_COEFF = np.array([9.1785e-7, 9.1785e-7, 10.311e-7])
"""Rotor-induced drag per unit total rotor speed, N s / rad, body x y z (gym-pybullet-drones, ``cf2x.urdf``)."""
GRAVITY = 9.81
NOISE = {"pos_w": 0.002, "rot_mat": 0.01, "lin_vel_w": 0.01, "ang_vel_b": 0.05}
"""Sensor noise standard deviations (SI units) with randomisation on."""


@dataclass
class AirframeParams:
    """One episode's physical parameters (SI units; see the module docstring for the model)."""

    mass: float
    inertia: np.ndarray
    max_thrust: float
    thrust_curve_linear: float
    torque_ratio: float
    tau_up: float
    tau_down: float


class QuadrotorHoverBullet:
    """One Crazyflie in a PyBullet ``DIRECT`` session (see the module docstring).

    Args:
        contract: The exported policy's contract (task ``quadrotor-hover``, with ``extra.airframe``).
    """

    def __init__(self, contract: Contract) -> None:
        import pybullet as pb

        self.pb = pb
        extra: dict[str, Any] = contract.extra
        af: dict[str, Any] = extra["airframe"]
        self.nominal = AirframeParams(
            mass=float(extra["robot"]["mass_kg"]),
            inertia=np.asarray(af["inertia_kg_m2"], dtype=np.float64),
            max_thrust=float(af["max_thrust_per_rotor_n"]),
            thrust_curve_linear=float(af.get("thrust_curve_linear", 0.0)),
            torque_ratio=float(af["reaction_torque_per_thrust_m"]),
            tau_up=float(af["motor_time_constant_up_s"]),
            tau_down=float(af["motor_time_constant_down_s"]),
        )
        self.rotor_pos = np.asarray(af["rotor_positions_m"], dtype=np.float64)  # [4, 3] body frame
        self.yaw_sign = np.asarray(af["reaction_torque_sign_z"], dtype=np.float64)
        self.max_rpm = float(af["max_rpm"])
        self.ranges: dict[str, dict[str, Any]] = extra.get("training_ranges", {})  # checked by Contract.validate
        self.envelope: dict[str, Any] = extra["training_envelope"]
        self.success: dict[str, Any] = extra["success"]
        self.target = np.asarray(extra.get("target_position_m", [0.0, 0.0, 0.0]), dtype=np.float64)
        self.period = contract.control_period_s
        self.substeps = max(1, round(self.period * PHYSICS_HZ))
        self.h = self.period / self.substeps
        self.steps = max(1, round(float(self.envelope["episode_length_s"]) / self.period))
        self.tail_steps = min(self.steps, max(1, round(float(self.success["window_s"]) / self.period)))
        self.client = pb.connect(pb.DIRECT)
        pb.setTimeStep(self.h, physicsClientId=self.client)
        pb.setGravity(0, 0, -GRAVITY, physicsClientId=self.client)
        arm = float(np.linalg.norm(self.rotor_pos[0, :2]))
        shape = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[arm, arm, 0.01], physicsClientId=self.client)
        self.body = pb.createMultiBody(baseMass=self.nominal.mass, baseCollisionShapeIndex=shape,
                                       physicsClientId=self.client)  # fmt: skip
        pb.changeDynamics(self.body, -1, linearDamping=0.0, angularDamping=0.0, physicsClientId=self.client)
        self._rng = np.random.default_rng(0)
        self._randomize = False
        self.p = self.nominal
        self.disturbance = np.zeros(3)
        self.rotor = np.zeros(4)
        self._latency = 0
        self._pending: list[np.ndarray] = []
        self._k = 0
        self._crashed = False
        self._tail = 0.0

    # ------------------------------------------------------------------------------------------------ episode
    def reset(self, rng: np.random.Generator, randomize: bool) -> dict[str, np.ndarray]:
        """New start state from the training envelope; new parameters and latency if randomised."""
        pb, c = self.pb, self.client
        self._rng, self._randomize = rng, randomize
        self.p = self._draw(rng) if randomize else self.nominal
        self.disturbance = self._draw_vector(rng, "disturbance_force") if randomize else np.zeros(3)
        pb.changeDynamics(self.body, -1, mass=self.p.mass, localInertiaDiagonal=self.p.inertia.tolist(),
                          physicsClientId=c)  # fmt: skip
        env = self.envelope
        direction = rng.normal(size=3)
        direction /= max(float(np.linalg.norm(direction)), 1e-9)
        pos = self.target + direction * float(env["init_pos_radius_m"]) * rng.random() ** (1 / 3)
        axis = rng.normal(size=3)
        axis /= max(float(np.linalg.norm(axis)), 1e-9)
        angle = math.radians(float(env["init_max_tilt_deg"])) * rng.random()
        quat_xyzw = [*(axis * math.sin(angle / 2)), math.cos(angle / 2)]
        vel = float(env["init_lin_vel_m_s"]) * (2 * rng.random(3) - 1)
        omega_b = float(env["init_ang_vel_rad_s"]) * (2 * rng.random(3) - 1)
        rot = np.asarray(pb.getMatrixFromQuaternion(quat_xyzw)).reshape(3, 3)
        pb.resetBasePositionAndOrientation(self.body, pos.tolist(), quat_xyzw, physicsClientId=c)
        pb.resetBaseVelocity(self.body, vel.tolist(), (rot @ omega_b).tolist(), physicsClientId=c)
        self.rotor = np.full(4, self._hover_fraction(self.nominal))  # spinning at the nominal hover speed
        lat = self.ranges.get("action_latency", {"low": [0], "high": [1]})  # whole control periods
        self._latency = int(rng.integers(int(lat["low"][0]), int(lat["high"][0]) + 1)) if randomize else 0
        self._pending = []
        self._k, self._crashed, self._tail = 0, False, 0.0
        return self._signals()

    def step(self, command: np.ndarray) -> dict[str, np.ndarray]:
        """Hold the rotor-speed ``command [1, 4]`` (RPM, after the drawn latency) for one control period."""
        self._pending.append(np.asarray(command, dtype=np.float64).reshape(-1)[:4])
        applied = self._pending.pop(0) if len(self._pending) > self._latency else None
        target = self.rotor if applied is None else np.clip(applied / self.max_rpm, 0.0, 1.0)
        if not self._crashed:
            for _ in range(self.substeps):
                self._physics_step(target)
        self._k += 1
        pos, rot, _, omega_w = self._state()
        err = float(np.linalg.norm(pos - self.target))
        self._crashed |= (
            err > float(self.envelope["crash_distance_m"])
            or float(np.linalg.norm(omega_w)) > float(self.envelope["crash_ang_vel_rad_s"])
            or rot[2, 2] < 0.0
            or not np.isfinite(pos).all()
        )
        if self._k > self.steps - self.tail_steps:
            self._tail += err
        return self._signals()

    def figures(self) -> dict[str, float]:
        """Crash flag, mean tail position error (m) and success, as the training task defines them."""
        tail = self._tail / self.tail_steps
        ok = not self._crashed and tail < float(self.success["pos_error_m"])
        return {"success": float(ok), "crashed": float(self._crashed), "tail_position_error": tail}

    def close(self) -> None:
        """Disconnect the PyBullet session."""
        if self.pb.isConnected(self.client):
            self.pb.disconnect(self.client)

    # ---------------------------------------------------------------------------------------------- internals
    def _physics_step(self, target: np.ndarray) -> None:
        p, pb, c = self.p, self.pb, self.client
        tau = np.where(target > self.rotor, p.tau_up, p.tau_down)
        self.rotor = target + (self.rotor - target) * np.exp(-self.h / tau)
        cl = p.thrust_curve_linear
        f = p.max_thrust * np.clip((1 - cl) * self.rotor**2 + cl * self.rotor, 0.0, None)  # [4] N
        pos, rot, vel, _ = self._state()
        for i in range(4):  # world-frame forces at the rotors' world positions
            where = pos + rot @ self.rotor_pos[i]
            pb.applyExternalForce(self.body, -1, (rot[:, 2] * f[i]).tolist(), where.tolist(), pb.WORLD_FRAME,
                                  physicsClientId=c)  # fmt: skip
        omega_sum = float(self.rotor.sum()) * self.max_rpm * 2 * math.pi / 60
        drag = rot @ (-DRAG_COEFF * omega_sum * (rot.T @ vel))
        pb.applyExternalForce(self.body, -1, (drag + self.disturbance).tolist(), pos.tolist(), pb.WORLD_FRAME,
                              physicsClientId=c)  # fmt: skip
        yaw = float(self.yaw_sign @ f) * p.torque_ratio
        pb.applyExternalTorque(self.body, -1, (rot[:, 2] * yaw).tolist(), pb.WORLD_FRAME, physicsClientId=c)
        pb.stepSimulation(physicsClientId=c)

    def _state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        pb, c = self.pb, self.client
        pos, quat = pb.getBasePositionAndOrientation(self.body, physicsClientId=c)
        vel, omega = pb.getBaseVelocity(self.body, physicsClientId=c)
        rot = np.asarray(pb.getMatrixFromQuaternion(quat)).reshape(3, 3)
        return np.asarray(pos), rot, np.asarray(vel), np.asarray(omega)

    def _signals(self) -> dict[str, np.ndarray]:
        pos, rot, vel, omega_w = self._state()
        out = {"pos_w": pos - self.target, "rot_mat": rot.reshape(9), "lin_vel_w": vel, "ang_vel_b": rot.T @ omega_w}
        if self._randomize:
            out = {k: v + self._rng.normal(0.0, NOISE[k], v.shape) for k, v in out.items()}
        return {k: v.reshape(1, -1).astype(np.float32) for k, v in out.items()}

    def _hover_fraction(self, p: AirframeParams) -> float:
        cl, need = p.thrust_curve_linear, p.mass * GRAVITY / (4 * p.max_thrust)
        return float((-cl + math.sqrt(cl * cl + 4 * (1 - cl) * need)) / (2 * (1 - cl)))

    def _draw(self, rng: np.random.Generator) -> AirframeParams:
        """Every parameter of the contract's training ranges, uniform within its range."""
        n = self.nominal
        fields = {"mass": "mass", "thrust_curve_linear": "thrust_curve_linear", "torque_ratio": "torque_ratio",
                  "motor_time_constant_up": "tau_up", "motor_time_constant_down": "tau_down"}  # fmt: skip
        drawn: dict[str, Any] = {f: float(self._draw_vector(rng, k)[0]) for k, f in fields.items() if k in self.ranges}
        if "thrust_to_weight" in self.ranges:  # relative to the nominal weight, as the contract defines it
            drawn["max_thrust"] = float(self._draw_vector(rng, "thrust_to_weight")[0]) * n.mass * GRAVITY / 4
        if "inertia" in self.ranges:  # one shared scale keeps the body realisable
            lo, hi = (np.asarray(self.ranges["inertia"][k], dtype=np.float64) for k in ("low", "high"))
            drawn["inertia"] = lo + (hi - lo) * rng.random()
        return dataclasses.replace(n, **drawn)

    def _draw_vector(self, rng: np.random.Generator, name: str) -> np.ndarray:
        if name not in self.ranges:
            return np.zeros(3) if name == "disturbance_force" else np.zeros(1)
        lo, hi = (np.asarray(self.ranges[name][k], dtype=np.float64) for k in ("low", "high"))
        return lo + (hi - lo) * rng.random(lo.shape)
