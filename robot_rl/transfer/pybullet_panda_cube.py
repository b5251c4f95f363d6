"""``panda-lift`` and ``panda-push`` in PyBullet: the Panda of :mod:`robot_rl.transfer.pybullet_panda`
(``pybullet_data``'s own URDF, a 1 kHz joint impedance controller with gravity compensation from the robot's own
model) on a floor at the robot's base height, with a cube.

What PyBullet models differently from the training simulator: its own contact solver (Bullet's, friction the
product of the two bodies' coefficients) and the URDF's finger geometry (no finger pads), besides the arm's masses
and inertias. The cube's size and mass, the cube envelope, the start pose, the success thresholds and the
tracker's delay come from the contract (``extra.cube``, ``extra.training_envelope``, ``extra.success``).

The fingers are position-controlled with the Franka Hand's continuous force, 70 N per finger (Franka Hand data
sheet: 70 N continuous, 140 N maximum) to the commanded opening (``panda-lift``: the policy's 8th command;
``panda-push``: closed).

Randomisation (``randomize=True``), PyBullet's own on top of the arm's (masses, joint friction, latency, encoder
noise): cube mass x U(0.7, 1.3), cube friction U(0.6, 1.0) (the URDF gives the fingers 1.0), and
the cube tracker's estimate with the noise and per-episode bias the policy trained with (standard deviations, the
contract's ``extra.cube.estimate_noise_m`` / ``estimate_bias_m``; 5 mm and 1 cm where an older contract does not say:
the cube tasks' defaults). Without randomisation the estimate is exact but still late by the contract's delay.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np

from policies.runtime.contract import Contract, ContractError
from robot_rl.transfer.pybullet_panda import PandaReachBullet
from sim.tasks.base import MAX_LATENCY
from sim.tasks.panda.base import CUBE_SIZE_RANGE
from sim.tasks.panda.push import TUMBLE_RAD

GRIPPER_FORCE_N = 70.0
"""Franka Hand continuous grasping force, N (per finger here; data sheet: 70 N continuous, 140 N max)."""
ESTIMATE_NOISE_M = 0.005
"""Standard deviation of the cube tracker's noise per reading, m (randomised episodes), where the contract does not
say (``sim.tasks.panda.base.default_cube_noise``)."""
ESTIMATE_BIAS_M = 0.01
"""Standard deviation of the cube tracker's per-episode bias, m (randomised episodes), where the contract does not
say."""
ESTIMATE_LIMIT_M = 0.1
"""Largest tracker noise or bias a contract may state, m (twice the cube: a larger one is no tracker)."""


PAD_HALF_M = (0.009, 0.008, 0.018)
"""Half extents of a finger pad's collision box, m (x along the hand, y the closing axis, z along the finger): the
training model's pad geoms (``sim/robots/assets/panda.xml``, ``left_pad`` / ``right_pad``)."""
PAD_CENTRE_M = (0.0, 0.008, 0.035)
"""Pad centre in the left finger's frame, m (the right finger mirrors y; same source): its inner face lies on the
finger joint's plane, so a grasp reads the object's width, as libfranka's ``GripperState::width`` does."""
CUBE_FRICTION = 0.8
"""Nominal sliding friction of the cube: the training scene's cube geom (``sim.robots.panda``, ``friction[0]``);
the floor is ``plane.urdf``'s own (1.0), and Bullet multiplies the two."""


CUBE_MASS_LIMIT_KG = 3.0
"""Heaviest cube a contract may state, kg: the Panda's rated payload (Franka Emika Panda data sheet: 3 kg)."""


def _cube_number(cube: dict[str, Any], key: str, low: float, high: float, unit: str) -> float:
    """The contract's ``extra.cube[key]``, checked to be a number in ``[low, high]`` (``unit``).

    Raises:
        ContractError: Naming the key, the range and the value.
    """
    value = cube[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ContractError(
            f"the contract's extra.cube.{key} must be a number in [{low:g}, {high:g}] {unit}, got {value!r}"
        )
    return float(value)


def _estimate_std(cube: dict[str, Any], key: str, default: float) -> float:
    """The contract's ``extra.cube[key]`` (a standard deviation, m) in ``[0, ESTIMATE_LIMIT_M]``; ``default`` where
    it is absent."""
    return _cube_number({key: default, **cube}, key, 0.0, ESTIMATE_LIMIT_M, "m")


def pad_urdf(data_path: str, out_dir: Path) -> Path:
    """``pybullet_data``'s Panda with each finger's collision mesh replaced by its pad box (written to
    ``out_dir``). PyBullet collides with a mesh's convex hull, and the finger mesh's hull fills the step on its inner
    side: a 5 cm cube is then held at a 2 cm finger reading instead of 5 cm, unlike the real hand."""
    root = Path(data_path) / "franka_panda"
    tree = ElementTree.parse(root / "panda.urdf")
    for mesh in tree.iter("mesh"):  # the file's package:// paths, resolved where the meshes are
        mesh.set("filename", mesh.get("filename", "").replace("package://", f"{root.as_posix()}/"))
    for name, sign in (("panda_leftfinger", 1), ("panda_rightfinger", -1)):
        link = tree.find(f"link[@name='{name}']")
        collision = None if link is None else link.find("collision")
        if link is None or collision is None:
            raise ContractError(f"pybullet_data's panda.urdf has no collision of link '{name}'")
        link.remove(collision)
        pad = ElementTree.SubElement(link, "collision")
        x, y, z = PAD_CENTRE_M
        ElementTree.SubElement(pad, "origin", rpy="0 0 0", xyz=f"{x:g} {sign * y:g} {z:g}")
        geometry = ElementTree.SubElement(pad, "geometry")
        ElementTree.SubElement(geometry, "box", size=" ".join(f"{2 * h:g}" for h in PAD_HALF_M))
    out = out_dir / "panda_pads.urdf"
    tree.write(out)
    return out


class PandaCubeBullet(PandaReachBullet):
    """A Panda and a cube in a PyBullet ``DIRECT`` session (see the module docstring); subclasses say what the
    episode asks of the cube.

    Args:
        contract: The exported policy's contract (a ``panda-*`` cube task).

    Raises:
        ContractError: The contract lacks the cube's facts (exported before they were written: export again).
    """

    def __init__(self, contract: Contract) -> None:
        self._files = tempfile.TemporaryDirectory(prefix="robot-rl-pybullet-")
        super().__init__(contract)
        pb, c = self.pb, self.client
        cube: Any = contract.extra.get("cube")
        if not isinstance(cube, dict) or not {"size_m", "mass_kg", "estimate_delay_periods"} <= cube.keys():
            raise ContractError(
                "the contract's extra.cube (size_m, mass_kg, estimate_delay_periods) is missing (written before "
                "contracts carried it): export the run again (robot-rl export onnx RUN); a student: collect its "
                "dataset again"
            )
        self.half = _cube_number(cube, "size_m", *CUBE_SIZE_RANGE, "m") / 2
        self.cube_mass = _cube_number(cube, "mass_kg", 1e-3, CUBE_MASS_LIMIT_KG, "kg")
        self.delay = int(_cube_number(cube, "estimate_delay_periods", 0, MAX_LATENCY, "control periods"))
        self.estimate_noise_m = _estimate_std(cube, "estimate_noise_m", ESTIMATE_NOISE_M)
        self.estimate_bias_m = _estimate_std(cube, "estimate_bias_m", ESTIMATE_BIAS_M)
        # One motor drives both fingers on the real hand (franka_description: finger_joint2 mimics joint1); the URDF's
        # fingers are independent in PyBullet, so a gear couples them (ratio -1: they move together, mirrored).
        gear = pb.createConstraint(
            self.robot, self.fingers[0], self.robot, self.fingers[1], pb.JOINT_GEAR, [1, 0, 0], [0, 0, 0], [0, 0, 0],
            physicsClientId=c,
        )  # fmt: skip
        pb.changeConstraint(gear, gearRatio=-1, erp=0.1, maxForce=2 * GRIPPER_FORCE_N, physicsClientId=c)
        self.floor = pb.loadURDF("plane.urdf", physicsClientId=c)
        box = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[self.half] * 3, physicsClientId=c)
        self.cube = pb.createMultiBody(self.cube_mass, box, basePosition=[0.5, 0.0, self.half], physicsClientId=c)
        self._seen: list[np.ndarray] = []
        self._bias = np.zeros(3)
        self.rest_z = self.half
        self.max_tilt = 0.0
        """Largest tilt of the cube from lying on a face in this episode, rad (:meth:`_cube_tilt`)."""

    def reset(self, rng: np.random.Generator, randomize: bool) -> dict[str, np.ndarray]:
        """Arm near home, the cube flat at a random place in the envelope, new parameters if randomised."""
        pb, c, env = self.pb, self.client, self.envelope
        q0 = self.home + float(env["init_joint_range_rad"]) * (2 * rng.random(7) - 1)
        self._reset_arm(rng, randomize, q0)
        low, high = np.asarray(env["cube_low_m"]), np.asarray(env["cube_high_m"])
        self.cube_xy = low + (high - low) * rng.random(2)
        self._reset_task(rng)
        pb.resetBasePositionAndOrientation(self.cube, [*self.cube_xy, self.half], [0, 0, 0, 1], physicsClientId=c)
        pb.resetBaseVelocity(self.cube, [0, 0, 0], [0, 0, 0], physicsClientId=c)
        mass = self.cube_mass * (rng.uniform(0.7, 1.3) if randomize else 1.0)
        friction = rng.uniform(0.6, 1.0) if randomize else CUBE_FRICTION
        pb.changeDynamics(self.cube, -1, mass=mass, lateralFriction=friction, physicsClientId=c)
        self._bias = rng.normal(0.0, self.estimate_bias_m, 3) if randomize else np.zeros(3)
        self._seen = [self._cube_pos()] * (self.delay + 1)
        self.max_tilt = 0.0
        for j in self.fingers:
            pb.resetJointState(self.robot, j, self._finger_start(), 0.0, physicsClientId=c)
        self._command_fingers(self._finger_start())
        return self._signals()

    def step(self, command: np.ndarray) -> dict[str, np.ndarray]:
        """One control period (see :meth:`PandaReachBullet.step`); the tracker's reading ages by one period."""
        self._seen = [self._cube_pos(), *self._seen[:-1]]
        signals = super().step(command)
        self.max_tilt = max(self.max_tilt, self._cube_tilt())
        return signals

    def close(self) -> None:
        """Disconnect the PyBullet session and remove the generated robot file."""
        super().close()
        self._files.cleanup()

    def _urdf(self, data_path: str) -> str:
        return str(pad_urdf(data_path, Path(self._files.name)))

    # ----------------------------------------------------------------------------------------- task hooks
    def _reset_task(self, rng: np.random.Generator) -> None:
        """Draw the task's own start (a push goal); the cube's place is drawn."""

    def _finger_start(self) -> float:
        """Finger opening per finger at the start, m."""
        return 0.04

    def _task_signals(self) -> dict[str, np.ndarray]:
        return {}

    # ----------------------------------------------------------------------------------------- internals
    def _command_fingers(self, opening: float) -> None:
        width = float(np.clip(opening, 0.0, 0.04))
        self.pb.setJointMotorControlArray(
            self.robot, self.fingers, self.pb.POSITION_CONTROL, targetPositions=[width, width],
            forces=[GRIPPER_FORCE_N, GRIPPER_FORCE_N], physicsClientId=self.client,
        )  # fmt: skip

    def _cube_pos(self) -> np.ndarray:
        pos, _ = self.pb.getBasePositionAndOrientation(self.cube, physicsClientId=self.client)
        return np.asarray(pos, dtype=np.float64)

    def _cube_tilt(self) -> float:
        """Angle between the world's z axis and the nearest of the cube's axes, rad (``sim.tasks.panda.base.CubeTask
        .cube_tilt``)."""
        _, quat = self.pb.getBasePositionAndOrientation(self.cube, physicsClientId=self.client)
        up = np.asarray(self.pb.getMatrixFromQuaternion(quat)).reshape(3, 3)[2]  # world z in the cube's frame
        return float(np.arccos(min(1.0, float(np.abs(up).max()))))

    def _signals(self) -> dict[str, np.ndarray]:
        seen = self._seen[-1] + self._bias
        if self._randomize:
            seen = seen + self._rng.normal(0.0, self.estimate_noise_m, 3)
        opening = self.pb.getJointState(self.robot, self.fingers[0], physicsClientId=self.client)[0]
        return {
            **self._arm_signals(),
            "finger_pos": np.array([[opening]]),
            "object_pos": seen.reshape(1, 3),
            **self._task_signals(),
        }


class PandaLiftBullet(PandaCubeBullet):
    """``panda-lift``: the policy's 8th command opens and closes the fingers; success is the cube's centre at least
    ``success.lift_height_m`` above its resting height when the episode ends."""

    def _command_gripper(self, command: np.ndarray) -> None:
        if command.size > 7:
            self._command_fingers(float(command[7]))

    def figures(self) -> dict[str, float]:
        """Final height of the cube above its resting height (m) and the success flag."""
        height = float(self._cube_pos()[2] - self.rest_z)
        return {"success": float(height >= float(self.success["lift_height_m"])), "final_height": height}


class PandaPushBullet(PandaCubeBullet):
    """``panda-push``: the fingers are held closed; a goal on the table 10–20 cm (the contract's
    ``goal_distance_m``) from the cube in a random direction; success is the cube's centre within
    ``success.goal_distance_m`` of it in the table plane when the episode ends."""

    def _reset_task(self, rng: np.random.Generator) -> None:
        env = self.envelope
        low, high = np.asarray(env["cube_low_m"]), np.asarray(env["cube_high_m"])
        near, far = (float(x) for x in env["goal_distance_m"])
        angle = 2 * np.pi * rng.random()
        goal = self.cube_xy + (near + (far - near) * rng.random()) * np.array([np.cos(angle), np.sin(angle)])
        self.goal = np.clip(goal, low - 0.05, high + 0.05)

    def _finger_start(self) -> float:
        return 0.0

    def _task_signals(self) -> dict[str, np.ndarray]:
        return {"goal_xy": self.goal.reshape(1, 2)}

    def figures(self) -> dict[str, float]:
        """Final cube-to-goal distance in the table plane (m), the success flag, and whether the cube tumbled
        (``sim.tasks.panda.push.TUMBLE_RAD``)."""
        dist = float(np.linalg.norm(self._cube_pos()[:2] - self.goal))
        return {
            "success": float(dist < float(self.success["goal_distance_m"])),
            "final_goal_distance": dist,
            "tumbled": float(self.max_tilt > TUMBLE_RAD),
        }
