"""``panda-reach`` in PyBullet, on ``pybullet_data``'s own ``franka_panda/panda.urdf``: a different engine and a
different robot model (its link masses and inertias differ from the identified ones the policy trained with: e.g.
link 1 2.7 kg vs 4.97 kg, link 7 0.2 kg vs 0.74 kg; every inertia 0.1 kg m²; wider joint limits; no friction, no
rotor inertia).

The URDF's inertia tensors are used as written (``URDF_USE_INERTIA_FROM_FILE``). PyBullet's default recomputes them
from the collision meshes, which leaves the wrist joint about 0.002 kg m² — two orders below the real joint, whose
reflected rotor inertia alone is 0.2 kg m² — and makes the 1 kHz impedance controller's damping term numerically
unstable (``D dt / I`` = 5); the file's 0.1 kg m² is the closer stand-in for the real joint. PyBullet also
recomputes them whenever a link's mass is changed alone, so the randomised masses are set with their inertia.

The robot is driven the way the real Panda is: the contract's command is a joint target ``q_d`` (impedance mode) or a
torque (torque mode), and a 1 kHz joint controller — the role of Franka's controller — applies
``tau = K (q_d - q) - D dq`` (impedance, the gains from the contract) plus gravity compensation computed from the
robot's *own* model (``calculateInverseDynamics`` at zero velocity and acceleration), like libfranka.

Everything the episode needs comes from the contract: control mode, gains, limits, default pose, control period,
the target distribution and the success thresholds (``extra.training_envelope`` / ``extra.success``).

Randomisation (``randomize=True``), independent of the training simulator's: link masses x U(0.8, 1.2), dry joint
friction U(0, 1.5) N m (a velocity motor with that force limit), a command delay of 0-12 ms within the control
period (``sim.robots.panda.COMMAND_DELAY_S``, what the ROS 2 node measured; until 2026-11-30: 0 or 1 whole control
period, 40 ms), encoder noise 0.001 rad / 0.02 rad/s, reported TCP position noise 1 mm.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from policies.runtime.contract import Contract
from sim.robots.panda import COMMAND_DELAY_S

PHYSICS_HZ = 1000
"""Rate of the joint controller and of PyBullet's steps, Hz (the Panda's controller runs at 1 kHz)."""
TCP_OFFSET = 0.1034
"""TCP beyond the flange along the hand's z axis, m (the training model's ``tcp`` site)."""


class PandaReachBullet:
    """One Panda in a PyBullet ``DIRECT`` session (see the module docstring).

    Args:
        contract: The exported policy's contract (task ``panda-reach``).
    """

    def __init__(self, contract: Contract) -> None:
        import pybullet as pb
        import pybullet_data

        self.pb = pb
        self.contract = contract
        extra: dict[str, Any] = contract.extra
        self.mode = str(extra["control_mode"])
        self.stiffness = np.asarray(extra["impedance"]["stiffness_nm_per_rad"], dtype=np.float64)
        self.damping = np.asarray(extra["impedance"]["damping_nms_per_rad"], dtype=np.float64)
        self.tau_max = np.asarray(extra["limits"]["tau_max_nm"], dtype=np.float64)
        self.envelope: dict[str, Any] = extra["training_envelope"]
        self.success: dict[str, Any] = extra["success"]
        self.home = np.asarray(contract.default_pose[:7], dtype=np.float64)
        self.substeps = max(1, round(contract.control_period_s * PHYSICS_HZ))
        self.steps = max(1, round(float(self.envelope["episode_length_s"]) / contract.control_period_s))
        self.client = pb.connect(pb.DIRECT)
        pb.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=self.client)
        pb.setTimeStep(1.0 / PHYSICS_HZ, physicsClientId=self.client)
        pb.setGravity(0, 0, -9.81, physicsClientId=self.client)
        self.robot = pb.loadURDF(
            self._urdf(pybullet_data.getDataPath()),
            useFixedBase=True,
            flags=pb.URDF_USE_INERTIA_FROM_FILE,
            physicsClientId=self.client,
        )
        names = {pb.getJointInfo(self.robot, j, physicsClientId=self.client)[1].decode(): j for j in range(12)}
        self.arm = [names[n] for n in contract.joint_names[:7]]
        self.fingers = [names["panda_finger_joint1"], names["panda_finger_joint2"]]
        self.hand = names["panda_hand_joint"]
        self.movable = self.arm + self.fingers  # the joints calculateInverseDynamics expects, in order
        nominal = [pb.getDynamicsInfo(self.robot, j, physicsClientId=self.client) for j in self.arm]
        self.nominal_mass = [float(info[0]) for info in nominal]
        self.nominal_inertia = [np.asarray(info[2], dtype=np.float64) for info in nominal]  # the file's, principal
        self._rng = np.random.default_rng(0)
        self._randomize = False
        self._friction = np.zeros(7)
        self._delay_steps = 0  # physics steps the previous command still acts at the start of each period
        self._acting: np.ndarray | None = None  # the command the controller follows (None: none received yet)

    # ------------------------------------------------------------------------------------------------ episode
    def reset(self, rng: np.random.Generator, randomize: bool) -> dict[str, np.ndarray]:
        """New start pose near home, a new target from the contract's envelope, new parameters if randomised."""
        env = self.envelope
        low, high = np.asarray(env["target_low_m"]), np.asarray(env["target_high_m"])
        self.target_pos = low + (high - low) * rng.random(3)
        yaw = float(env["target_yaw_range_rad"]) * (2 * rng.random() - 1)
        cy, sy = math.cos(yaw), math.sin(yaw)
        self.target_rot = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]]) @ np.diag([1.0, -1.0, -1.0])
        q0 = self.home + float(env["init_joint_range_rad"]) * (2 * rng.random(7) - 1)
        self._reset_arm(rng, randomize, q0)
        return self._signals()

    def _reset_arm(self, rng: np.random.Generator, randomize: bool, q0: np.ndarray) -> None:
        """Put the arm at ``q0`` with open fingers; draw link masses, joint friction and command delay if
        randomised."""
        pb, c = self.pb, self.client
        self._rng, self._randomize = rng, randomize
        for j, q in zip(self.arm, q0, strict=True):
            pb.resetJointState(self.robot, j, q, 0.0, physicsClientId=c)
        for j in self.fingers:
            pb.resetJointState(self.robot, j, 0.04, 0.0, physicsClientId=c)
        scale = rng.uniform(0.8, 1.2, 7) if randomize else np.ones(7)
        for j, m, inertia, s in zip(self.arm, self.nominal_mass, self.nominal_inertia, scale, strict=True):
            # A link made denser by s: mass and inertia scale together. Both go in one call: a mass alone makes
            # PyBullet recompute the inertia from the collision mesh, dropping the file's (the module docstring).
            pb.changeDynamics(self.robot, j, mass=m * s, localInertiaDiagonal=(inertia * s).tolist(), physicsClientId=c)
        self._friction = rng.uniform(0.0, 1.5, 7) if randomize else np.zeros(7)
        pb.setJointMotorControlArray(
            self.robot, self.arm, pb.VELOCITY_CONTROL, targetVelocities=[0.0] * 7, forces=list(self._friction),
            physicsClientId=c,
        )  # fmt: skip
        pb.setJointMotorControlArray(
            self.robot, self.fingers, pb.POSITION_CONTROL, targetPositions=[0.04, 0.04], forces=[20.0, 20.0],
            physicsClientId=c,
        )  # fmt: skip
        self._delay_steps = int(rng.integers(0, round(COMMAND_DELAY_S * PHYSICS_HZ) + 1)) if randomize else 0
        self._acting = None

    def step(self, command: np.ndarray) -> dict[str, np.ndarray]:
        """One control period of 1 kHz joint control: the previous command for the drawn delay's first steps, then
        ``command`` (before any command: the joints damped where they are)."""
        for i in range(self.substeps):
            if i == min(self._delay_steps, self.substeps - 1):
                self._acting = np.asarray(command, dtype=np.float64).reshape(-1)
                self._command_gripper(self._acting)
            applied = None if self._acting is None else self._acting[:7]
            q, dq = self._joints()
            if applied is None:
                tau = -self.damping * dq if self.mode == "impedance" else np.zeros(7)
            elif self.mode == "impedance":
                tau = self.stiffness * (applied - q) - self.damping * dq
            else:
                tau = applied
            tau = np.clip(tau, -self.tau_max, self.tau_max) + self._gravity(q)
            self.pb.setJointMotorControlArray(
                self.robot, self.arm, self.pb.TORQUE_CONTROL, forces=list(tau), physicsClientId=self.client
            )
            self.pb.stepSimulation(physicsClientId=self.client)
        return self._signals()

    def _urdf(self, data_path: str) -> str:
        """The robot file to load: ``pybullet_data``'s own Panda."""
        return "franka_panda/panda.urdf"

    def _command_gripper(self, command: np.ndarray) -> None:
        """Apply the gripper part of a received command (the reach policy commands none: fingers stay open)."""

    def figures(self) -> dict[str, float]:
        """Final TCP position and orientation errors and the success flag, as the training task defines them."""
        pos, rot = self._tcp()
        dist = float(np.linalg.norm(pos - self.target_pos))
        cos = (np.trace(rot.T @ self.target_rot) - 1.0) / 2.0
        ang = float(np.arccos(np.clip(cos, -1.0, 1.0)))
        ok = dist < float(self.success["position_error_m"]) and ang < float(self.success["orientation_error_rad"])
        return {"success": float(ok), "final_position_error": dist, "final_orientation_error": ang}

    def close(self) -> None:
        """Disconnect the PyBullet session."""
        if self.pb.isConnected(self.client):
            self.pb.disconnect(self.client)

    # ---------------------------------------------------------------------------------------------- internals
    def _joints(self) -> tuple[np.ndarray, np.ndarray]:
        states = self.pb.getJointStates(self.robot, self.arm, physicsClientId=self.client)
        return np.array([s[0] for s in states]), np.array([s[1] for s in states])

    def _gravity(self, q: np.ndarray) -> np.ndarray:
        """Gravity torques of the robot's own (possibly randomised) model, N m: what libfranka compensates."""
        fingers = [s[0] for s in self.pb.getJointStates(self.robot, self.fingers, physicsClientId=self.client)]
        zeros = [0.0] * 9
        tau = self.pb.calculateInverseDynamics(
            self.robot, [*q.tolist(), *fingers], zeros, zeros, physicsClientId=self.client
        )
        return np.asarray(tau[:7])

    def _tcp(self) -> tuple[np.ndarray, np.ndarray]:
        state = self.pb.getLinkState(self.robot, self.hand, computeForwardKinematics=True, physicsClientId=self.client)
        rot = np.asarray(self.pb.getMatrixFromQuaternion(state[5])).reshape(3, 3)
        return np.asarray(state[4]) + TCP_OFFSET * rot[:, 2], rot

    def _arm_signals(self) -> dict[str, np.ndarray]:
        """Joint states and the TCP pose as the robot reports them (with encoder noise if randomised)."""
        q, dq = self._joints()
        if self._randomize:
            q = q + self._rng.normal(0.0, 0.001, 7)
            dq = dq + self._rng.normal(0.0, 0.02, 7)
        tcp_pos, tcp_rot = self._tcp()
        if self._randomize:
            tcp_pos = tcp_pos + self._rng.normal(0.0, 0.001, 3)
        return {
            "joint_pos": q.reshape(1, 7),
            "joint_vel": dq.reshape(1, 7),
            "tcp_pos": tcp_pos.reshape(1, 3),
            "tcp_rot6": tcp_rot[:, :2].T.reshape(1, 6),
        }

    def _signals(self) -> dict[str, np.ndarray]:
        return {
            **self._arm_signals(),
            "target_pos": self.target_pos.reshape(1, 3),
            "target_rot6": self.target_rot[:, :2].T.reshape(1, 6),
        }
