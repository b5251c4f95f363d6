"""``quadruped-velocity`` in PyBullet: the same A1 description (``pybullet_data/a1/a1.urdf``) in another engine.

The exported policy's commands are joint targets; a 200 Hz PD loop written here (the robot's low-level controller,
Unitree's ``LowCmd`` with ``Kp``, ``Kd`` and zero feed-forward torque) turns them into torques with the contract's
gains and torque limits: ``tau = clip(Kp (q_d - q) - Kd dq, -tau_max, tau_max)``. PyBullet's own joint motors are
switched off. What differs from the training model is what a second engine is for: PyBullet's contact model and
solver, the URDF's joints without the rotor inertia, damping and dry friction the training model adds
(mujoco_menagerie's figures), and PyBullet's friction combination.

Everything the episode needs comes from the contract: joint order, default pose, gains, torque limits, control
period, the command distribution and the success thresholds (``extra.training_envelope`` / ``extra.success``).
Signals are the IMU's (gyro and gravity in the trunk frame) and the joint encoders', as on the robot.

Randomisation (``randomize=True``), PyBullet's own: foot-ground friction U(0.5, 1.25) (nominal 0.8, the training
model's; Bullet multiplies the two bodies' coefficients, so the ground is set to 1 and the feet carry the drawn one;
before 2026-12-02 both carried it, a contact coefficient of 0.25-1.56 and 0.64 nominal), trunk mass +U(-1, 1) kg,
0 or 1 control period of command latency, sensor noise (gyro 0.2 rad/s, gravity 0.05, joints 0.01 rad and 1.5 rad/s).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from policies.runtime.contract import Contract
from robot_rl.transfer.harness import TransferError

PHYSICS_HZ = 200
"""Rate of the PD loop and of PyBullet's steps, Hz (the contract's ``pd.rate_hz``, checked)."""


class QuadrupedBullet:
    """One A1 on a plane in a PyBullet ``DIRECT`` session (see the module docstring).

    Args:
        contract: The exported policy's contract (task ``quadruped-velocity``).

    Raises:
        TransferError: The contract lacks or garbles a figure this model reads (PD gains and rate, torque limits,
            envelope), its PD rate is not :data:`PHYSICS_HZ`, or its joints are not the URDF's.
    """

    def __init__(self, contract: Contract) -> None:
        import pybullet as pb
        import pybullet_data

        from sim.robots import unitree_a1 as a1

        self.pb = pb
        extra: dict[str, Any] = contract.extra
        try:  # the contract comes from a file: every figure read here is checked before it drives a joint
            pd = extra["pd"]
            rate = float(pd["rate_hz"])
            self.kp, self.kd = float(pd["kp_nm_per_rad"]), float(pd["kd_nms_per_rad"])
            self.tau_max = np.asarray(pd["torque_limit_nm"], dtype=np.float64)
            self.envelope: dict[str, Any] = dict(extra["training_envelope"])
            self.success: dict[str, Any] = dict(extra["success"])
            episode_s = float(self.envelope["episode_length_s"])
            resample_s = float(self.envelope["command_resample_s"])
        except (KeyError, TypeError, ValueError) as err:
            raise TransferError(
                f"the contract's extra.pd / training_envelope / success is incomplete: {err!r}"
            ) from None
        if rate != PHYSICS_HZ:
            raise TransferError(f"the contract's PD runs at {rate:g} Hz; this model steps at {PHYSICS_HZ} Hz")
        figures = np.array([self.kp, self.kd, episode_s, resample_s, *self.tau_max])
        if self.tau_max.shape != (len(contract.joint_names),) or not (np.isfinite(figures).all() and figures.min() > 0):
            raise TransferError("the contract's PD gains, torque limits and episode times must be finite and positive, "
                                f"one torque limit per joint ({len(contract.joint_names)})")  # fmt: skip
        self.default = np.asarray(contract.default_pose, dtype=np.float64)
        self.period = contract.control_period_s
        self.substeps = max(1, round(self.period * PHYSICS_HZ))
        self.steps = max(1, round(episode_s / self.period))
        self.resample = max(1, round(resample_s / self.period))
        self.client = pb.connect(pb.DIRECT)
        c = self.client
        pb.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=c)
        pb.setTimeStep(1.0 / PHYSICS_HZ, physicsClientId=c)
        pb.setGravity(0, 0, -9.81, physicsClientId=c)
        self.plane = pb.loadURDF("plane.urdf", physicsClientId=c)
        self.robot = pb.loadURDF(str(a1.urdf_path()), [0, 0, a1.START_HEIGHT], useFixedBase=False,
                                 flags=pb.URDF_USE_INERTIA_FROM_FILE, physicsClientId=c)  # fmt: skip
        names = {pb.getJointInfo(self.robot, j, physicsClientId=c)[1].decode(): j
                 for j in range(pb.getNumJoints(self.robot, physicsClientId=c))}  # fmt: skip
        missing = [n for n in contract.joint_names if n not in names]
        if missing:
            self.close()
            raise TransferError(f"the A1 URDF has no joint(s) {missing} that the contract commands")
        self.joints = [names[n] for n in contract.joint_names]
        self.feet = [names[f"{leg}_toe_fixed"] for leg in a1.LEGS]
        self.nominal_friction = a1.FOOT_FRICTION  # the training model's feet and ground
        trunk = pb.getDynamicsInfo(self.robot, -1, physicsClientId=c)
        self.nominal_mass, self.trunk_inertia = float(trunk[0]), list(trunk[2])  # the file's (principal) inertia
        pb.setJointMotorControlArray(self.robot, self.joints, pb.VELOCITY_CONTROL, forces=[0.0] * len(self.joints),
                                     physicsClientId=c)  # fmt: skip
        self._rng = np.random.default_rng(0)
        self._randomize = False
        self._latency = 0
        self._pending: list[np.ndarray] = []
        self._t = 0
        self.command = np.zeros(3)
        self._errors: list[float] = []
        self._yaw_errors: list[float] = []
        self._fell = False

    # ------------------------------------------------------------------------------------------ episode
    def reset(self, rng: np.random.Generator, randomize: bool) -> dict[str, np.ndarray]:
        """Drop the robot at the start height with a random heading and the legs near the default pose; draw a
        command (and, randomised, friction, trunk mass and latency)."""
        pb, c = self.pb, self.client
        self._rng, self._randomize = rng, randomize
        yaw = 2 * math.pi * rng.random()
        pb.resetBasePositionAndOrientation(self.robot, [0, 0, float(self.envelope["start_height_m"])],
                                           pb.getQuaternionFromEuler([0, 0, yaw]), physicsClientId=c)  # fmt: skip
        pb.resetBaseVelocity(self.robot, [0, 0, 0], [0, 0, 0], physicsClientId=c)
        q0 = self.default + 0.1 * (2 * rng.random(len(self.joints)) - 1)
        for j, q in zip(self.joints, q0, strict=True):
            pb.resetJointState(self.robot, j, float(q), 0.0, physicsClientId=c)
        friction = float(rng.uniform(0.5, 1.25)) if randomize else self.nominal_friction
        # Bullet multiplies the two bodies' coefficients (btManifoldResult::calculateCombinedFriction), where MuJoCo
        # takes the larger: the ground at 1 makes the contact's coefficient the feet's, as in training.
        pb.changeDynamics(self.plane, -1, lateralFriction=1.0, physicsClientId=c)
        for foot in self.feet:
            pb.changeDynamics(self.robot, foot, lateralFriction=friction, physicsClientId=c)
        mass = self.nominal_mass + (float(rng.uniform(-1.0, 1.0)) if randomize else 0.0)
        # A payload at the trunk's centre of mass: its mass changes, its inertia keeps the file's (set in the same
        # call: a mass alone makes PyBullet recompute the inertia from the collision box, 35-40 % lower about y and z).
        pb.changeDynamics(self.robot, -1, mass=mass, localInertiaDiagonal=self.trunk_inertia, physicsClientId=c)
        self._latency = int(rng.integers(0, 2)) if randomize else 0
        self._pending = []
        self._t = 0
        self._errors, self._yaw_errors, self._fell = [], [], False
        self._draw_command()
        return self._signals()

    def _draw_command(self) -> None:
        env, rng = self.envelope, self._rng
        if rng.random() < float(env["standing_share"]):
            self.command = np.zeros(3)
            return
        ranges = [env["lin_vel_x_m_s"], env["lin_vel_y_m_s"], env["yaw_rate_rad_s"]]
        self.command = np.array([rng.uniform(lo, hi) for lo, hi in ranges])

    def step(self, command: np.ndarray) -> dict[str, np.ndarray]:
        """Hold the joint targets ``command [1, 12]`` (after the drawn latency) for one control period of PD."""
        pb, c = self.pb, self.client
        self._pending.append(np.asarray(command, dtype=np.float64).reshape(-1))
        target = self._pending.pop(0) if len(self._pending) > self._latency else self.default
        for _ in range(self.substeps):
            q, dq = self._joints()
            tau = np.clip(self.kp * (target - q) - self.kd * dq, -self.tau_max, self.tau_max)
            pb.setJointMotorControlArray(self.robot, self.joints, pb.TORQUE_CONTROL, forces=list(tau),
                                         physicsClientId=c)  # fmt: skip
            pb.stepSimulation(physicsClientId=c)
        self._t += 1
        lin, yaw_rate, height, tilt = self._base()
        if not self._fell:
            self._errors.append(float(np.linalg.norm(self.command[:2] - lin[:2])))
            self._yaw_errors.append(abs(float(self.command[2] - yaw_rate)))
            self._fell = tilt > float(self.success["max_tilt_rad"]) or height < float(self.success["min_height_m"])
        if self._t % self.resample == 0:
            self._draw_command()
        return self._signals()

    def figures(self) -> dict[str, float]:
        """Success, mean velocity errors and whether the robot fell, as the training task defines them."""
        err = float(np.mean(self._errors)) if self._errors else float("inf")
        yaw = float(np.mean(self._yaw_errors)) if self._yaw_errors else float("inf")
        ok = not self._fell and err <= float(self.success["velocity_error_m_s"])
        return {"success": float(ok), "velocity_error": err, "yaw_rate_error": yaw, "fell": float(self._fell)}

    def close(self) -> None:
        """Disconnect the PyBullet session."""
        if self.pb.isConnected(self.client):
            self.pb.disconnect(self.client)

    # ---------------------------------------------------------------------------------------------- internals
    def _joints(self) -> tuple[np.ndarray, np.ndarray]:
        states = self.pb.getJointStates(self.robot, self.joints, physicsClientId=self.client)
        return np.array([s[0] for s in states]), np.array([s[1] for s in states])

    def _rotation(self) -> tuple[np.ndarray, np.ndarray]:
        pos, quat = self.pb.getBasePositionAndOrientation(self.robot, physicsClientId=self.client)
        return np.asarray(pos), np.asarray(self.pb.getMatrixFromQuaternion(quat)).reshape(3, 3)

    def _base(self) -> tuple[np.ndarray, float, float, float]:
        """Linear velocity in the trunk frame, yaw rate, height and tilt (rad) of the trunk."""
        pos, rot = self._rotation()
        lin_w, ang_w = self.pb.getBaseVelocity(self.robot, physicsClientId=self.client)
        lin_b, ang_b = rot.T @ np.asarray(lin_w), rot.T @ np.asarray(ang_w)
        tilt = float(np.arccos(np.clip(rot[2, 2], -1.0, 1.0)))
        return lin_b, float(ang_b[2]), float(pos[2]), tilt

    def _signals(self) -> dict[str, np.ndarray]:
        """The IMU (gyro and gravity in the trunk frame) and the joint encoders, noisy if randomised."""
        _, rot = self._rotation()
        _, ang_w = self.pb.getBaseVelocity(self.robot, physicsClientId=self.client)
        gyro = rot.T @ np.asarray(ang_w)
        gravity = rot.T @ np.array([0.0, 0.0, -1.0])
        q, dq = self._joints()
        q = q - self.default
        if self._randomize:
            rng = self._rng
            gyro, gravity = gyro + rng.normal(0, 0.2, 3), gravity + rng.normal(0, 0.05, 3)
            q, dq = q + rng.normal(0, 0.01, q.shape), dq + rng.normal(0, 1.5, dq.shape)
        return {
            "base_ang_vel": gyro.reshape(1, 3),
            "projected_gravity": gravity.reshape(1, 3),
            "velocity_command": self.command.reshape(1, 3).astype(np.float64),
            "joint_pos_rel": q.reshape(1, -1),
            "joint_vel": dq.reshape(1, -1),
        }
