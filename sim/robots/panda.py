"""Franka Emika Panda: cited parameters and the MuJoCo model built for a control mode and a scene.

One arm description (``sim/robots/assets/panda.xml``: kinematics, identified inertia, joint limits, hand and
fingers) is turned into a compiled model here, by :func:`build_model`: actuators for the chosen control mode, joint
damping / armature / friction, gravity compensation, and the scene objects a task needs (table, cube).

Joints, in command order: ``panda_joint1`` … ``panda_joint7`` (base to wrist, positive about each joint's z axis as
in Franka's DH convention) and one gripper command that drives both fingers (``panda_finger_joint1``; the second
finger mirrors it, as the real gripper's single motor does).

Control modes (how the real robot is driven; written into the export contract):

``torque``
    Commanded joint torques ``tau`` (N m), added on top of the robot's own gravity compensation, as libfranka's
    torque interface and ``franka_ros2``'s effort controllers do. Limited to the rated torques.
``impedance``
    Joint position targets ``q_d`` (rad) tracked by ``tau = K (q_d - q) - D dq`` at the physics rate, the joint
    impedance controller of ``franka_ros`` / ``franka_ros2`` (``joint_impedance_example_controller``), again with
    gravity compensated by the robot. ``K`` and ``D`` come from the task config.

Sources (every constant below cites one):
  [FCI] Franka Control Interface documentation, "Robot and interface specifications" → "Limits for Panda":
        q_min, q_max, dq_max, tau_max (frankaemika.github.io/docs/control_parameters.html).
  [GAZ] Gaz et al., "Dynamic Identification of the Franka Emika Panda Robot With Retrieval of Feasible Parameters
        Using Penalty-Based Optimization", IEEE RA-L 2019: link masses, centres of mass and inertia (in the MJCF)
        and the friction model ``tau_f = A / (1 + exp(-alpha (dq + phi))) - A / (1 + exp(-alpha phi))``
        (marcocognetti/FrankaEmikaPandaDynModel, get_FrictionTorque.m): a smoothed Coulomb friction of level ``A``
        0.30–1.28 N m reached within 0.1–0.2 rad/s (``1 / alpha``), with no viscous term.
  [FR3] Reflected rotor inertia Franka published for the FR3 (drake franka_description README): 0.606 / 0.606 /
        0.462 / 0.462 / 0.206 / 0.206 / 0.206 kg m² — the armature of each joint.
  [ROS] franka_ros ``joint_impedance_example_controller`` gains: k = 600 600 600 600 250 150 50 N m/rad,
        d = 50 50 50 20 20 20 10 N m s/rad.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import mujoco
import numpy as np

from sim.backends.mujoco_batch import ASSETS_DIR

ARM_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))
"""Arm joints, base to wrist (command order)."""
FINGER_JOINTS = ("panda_finger_joint1", "panda_finger_joint2")
"""Finger joints; the second mirrors the first (equality constraint), so the gripper is one command."""

Q_MIN = (-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973)
"""Joint position lower limits, rad [FCI]."""
Q_MAX = (2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973)
"""Joint position upper limits, rad [FCI]."""
DQ_MAX = (2.1750, 2.1750, 2.1750, 2.1750, 2.6100, 2.6100, 2.6100)
"""Joint velocity limits, rad/s [FCI]."""
TAU_MAX = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
"""Joint torque limits, N m [FCI]."""
ARMATURE = (0.605721456, 0.605721456, 0.462474144, 0.462474144, 0.205544064, 0.205544064, 0.205544064)
"""Reflected rotor inertia per joint, kg m² [FR3]."""
FRICTION_LOSS = (0.55, 0.87, 0.64, 1.28, 0.84, 0.30, 0.56)
"""Dry-friction torque per joint, N m: the level ``A`` of [GAZ]'s identified friction model (rounded)."""
DAMPING = (0.0,) * 7
"""Viscous damping per joint, N m s/rad: none in [GAZ]'s identified model (tasks randomise it upwards)."""
HOME = (0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398)
"""Home pose, rad: franka_ros' ``move_to_start`` pose (q4 = -3 pi / 4, q6 = pi / 2, q7 = pi / 4)."""
IMPEDANCE_STIFFNESS = (600.0, 600.0, 600.0, 600.0, 250.0, 150.0, 50.0)
"""Joint impedance stiffness, N m/rad [ROS]."""
IMPEDANCE_DAMPING = (50.0, 50.0, 50.0, 20.0, 20.0, 20.0, 10.0)
"""Joint impedance damping, N m s/rad [ROS]."""
FINGER_STROKE = 0.04
"""Travel of each finger, m (franka_description hand: 0–0.04 m, 0.08 m opening)."""
GRIPPER_FORCE = 70.0
"""Continuous grasp force of the Franka Hand, N (Franka Hand datasheet: 70 N continuous, 140 N max)."""
GRIPPER_STIFFNESS = 2000.0
"""Position-servo stiffness of the simulated gripper, N/m: a modelling choice (the real Franka Hand is driven by
grasp force and width through franka_gripper, not by a published stiffness)."""
FINGER_ARMATURE = 0.1
"""Armature of each finger joint, kg: a numerical choice, not a published inertia; it keeps the gripper servo and the
grasp stable at the 4 ms step. At 8 ms the grasp needs 0.2: the lift expert then holds it in 100 % of randomised
episodes, against 59 % with 0.1 (docs/benchmarks.md, "Lift at an 8 ms step": a lift teacher trained so was no
better in the 30-minute budget, so lift stays at 4 ms and the push teacher's 8 ms holds its fingers closed)."""
TABLE_HEIGHT = 0.0
"""Height of the table top, m: the robot stands on the table (its base at z = 0)."""
COMMAND_DELAY_S = 0.012
"""Longest delay of a joint command after the measurement it answers, s: the ROS 2 policy node running the Panda
reach policy measured 0.45-0.81 ms median and at most 10.8 ms from a joint state's stamp to its command at 1 kHz
(``bench/ros2_latency.py``, docs/benchmarks.md "ROS 2 policy node: timing"), plus up to 1 ms until Franka's 1 kHz
controller takes it; under a third of the Panda tasks' 40 ms control period. PyBullet's robot (``robot-rl eval --sim
pybullet``) draws its delay up to this; training draws one with ``env.command_delay`` (off in the tasks' defaults;
the lift teacher's config draws it in every episode and a whole period, ``action_latency``, in a fifth of them:
docs/benchmarks.md, "Lift: the measured delay and a price on the housing")."""

OBJECT_PRIORITY = 1
"""MuJoCo contact priority of a scene object whose friction is randomised (a cube, a peg): above the table's and a
fixture's (0), so the object's friction is the contact's (at equal priority MuJoCo takes the larger, and their 1.0
would hide every lower one); below the hand's and pads' (2, ``assets/panda.xml``), which keep theirs."""

ControlMode = Literal["torque", "impedance"]


@dataclass(frozen=True)
class Scene:
    """What besides the arm the model holds.

    Attributes:
        table: A table top at :data:`TABLE_HEIGHT` that the hand, fingers and objects collide with.
        cube_size: Edge length of a free cube on the table, m (0: no cube).
        cube_mass: Mass of the cube, kg.
        goal_marker: A mocap-free visual site ``goal`` for the target (no physics).
        objects: Functions that add a task's own objects to the model's ``mujoco.MjSpec`` (a button, a drawer),
            called last, so a new task brings its objects in its own module.
    """

    table: bool = False
    cube_size: float = 0.0
    cube_mass: float = 0.1
    goal_marker: bool = True
    objects: tuple[Callable[[mujoco.MjSpec], None], ...] = ()


def add_cube(
    spec: mujoco.MjSpec, name: str, size: float, mass: float, xy: tuple[float, float], rgb: tuple[float, float, float]
) -> None:
    """Add a free cube on the table: body, free joint and box geom all called ``name``, edge ``size`` m, ``mass`` kg,
    resting at ``xy`` (m, base frame); it collides with the hand, fingers and table (``condim`` 4 on MuJoCo's default
    pyramidal friction cone: sliding 0.8 and torsional 0.02, wood or plastic on wood; the rolling 0.001 of the
    geom's friction acts only at ``condim`` 6, so not here). Its friction is the cube-table pair's
    (:data:`OBJECT_PRIORITY`)."""
    half = size / 2
    body = spec.worldbody.add_body(name=name, pos=[xy[0], xy[1], TABLE_HEIGHT + half])
    body.add_freejoint(name=name)
    body.add_geom(
        name=name,
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[half, half, half],
        mass=mass,
        contype=1,
        conaffinity=3,
        condim=4,
        friction=[0.8, 0.02, 0.001],
        priority=OBJECT_PRIORITY,
        rgba=[*rgb, 1.0],
    )


def build_model(
    mode: ControlMode,
    scene: Scene = Scene(),
    stiffness: tuple[float, ...] = IMPEDANCE_STIFFNESS,
    damping: tuple[float, ...] = IMPEDANCE_DAMPING,
    timestep: float = 0.004,
    finger_armature: float = FINGER_ARMATURE,
) -> mujoco.MjModel:
    """Compile the Panda with actuators for ``mode`` and the objects of ``scene``.

    Actuators ``[8]``: seven arm joints (torque: N m; impedance: target rad), then the gripper (target finger
    position, m, a stiff position servo limited to :data:`GRIPPER_FORCE`). Arm bodies are gravity compensated
    (``gravcomp``), as the real robot's controller does underneath both modes.

    Args:
        mode: ``torque`` or ``impedance``.
        scene: Table, cube and the task's own objects.
        stiffness: Impedance stiffness ``[7]``, N m/rad (impedance mode).
        damping: Impedance damping ``[7]``, N m s/rad (impedance mode).
        timestep: Physics timestep, s.
        finger_armature: Armature of each finger joint, kg (:data:`FINGER_ARMATURE`).

    Raises:
        ValueError: Unknown mode, gains of the wrong length or sign, or a finger armature <= 0.
    """
    if mode not in ("torque", "impedance"):
        raise ValueError(f"control mode must be 'torque' or 'impedance', got '{mode}'")
    for name, gains in (("stiffness", stiffness), ("damping", damping)):
        if len(gains) != 7 or not all(np.isfinite(g) and g >= 0 for g in gains):
            raise ValueError(f"impedance {name} must be 7 finite values >= 0, got {list(gains)}")
    if not (np.isfinite(finger_armature) and finger_armature > 0):
        raise ValueError(f"finger armature must be a finite value > 0 kg, got {finger_armature}")
    spec = mujoco.MjSpec.from_file(str(ASSETS_DIR / "panda.xml"))
    spec.option.timestep = timestep
    for body in spec.bodies:
        if body.name.startswith("panda_"):
            body.gravcomp = 1.0
    for i, name in enumerate(ARM_JOINTS):
        joint = spec.joint(name)
        joint.armature = ARMATURE[i]
        joint.damping[0] = DAMPING[i]
        joint.frictionloss = FRICTION_LOSS[i]
        act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-TAU_MAX[i], TAU_MAX[i]]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        if mode == "torque":
            act.ctrlrange = [-TAU_MAX[i], TAU_MAX[i]]
        else:
            act.ctrlrange = [Q_MIN[i], Q_MAX[i]]
            act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
            act.biastype = mujoco.mjtBias.mjBIAS_AFFINE
            act.gainprm[0] = stiffness[i]
            act.biasprm[:3] = [0.0, -stiffness[i], -damping[i]]
    grip = spec.add_actuator(name="gripper", target=FINGER_JOINTS[0], trntype=mujoco.mjtTrn.mjTRN_JOINT)
    grip.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
    grip.ctrlrange = [0.0, FINGER_STROKE]
    grip.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
    grip.forcerange = [-GRIPPER_FORCE, GRIPPER_FORCE]
    grip.gaintype = mujoco.mjtGain.mjGAIN_FIXED
    grip.biastype = mujoco.mjtBias.mjBIAS_AFFINE
    # The gripper servo's gains are chosen, not published: 2000 N/m closes on a 5 cm cube with ~50 N (under the
    # 70 N limit); 60 N s/m and the finger damping damp it, and FINGER_ARMATURE keeps it stable at 4 ms.
    grip.gainprm[0] = GRIPPER_STIFFNESS
    grip.biasprm[:3] = [0.0, -GRIPPER_STIFFNESS, -60.0]
    for name in FINGER_JOINTS:
        spec.joint(name).damping[0] = 2.0
        spec.joint(name).armature = finger_armature
    world = spec.worldbody
    if scene.table:
        world.add_geom(
            name="table",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            pos=[0.5, 0.0, TABLE_HEIGHT - 0.02],
            size=[0.45, 0.6, 0.02],
            contype=1,
            conaffinity=3,
            rgba=[0.6, 0.5, 0.4, 1.0],
        )
    if scene.cube_size > 0:
        # Touch sensors on the finger pads: the normal contact force each pad feels, N (privileged observation).
        for finger, side in (("panda_leftfinger", "left"), ("panda_rightfinger", "right")):
            y = 0.008 if side == "left" else -0.008
            spec.body(finger).add_site(
                name=f"{side}_pad", type=mujoco.mjtGeom.mjGEOM_BOX, pos=[0, y, 0.035], size=[0.01, 0.009, 0.019]
            )
            spec.add_sensor(
                name=f"{side}_touch", type=mujoco.mjtSensor.mjSENS_TOUCH, objtype=mujoco.mjtObj.mjOBJ_SITE,
                objname=f"{side}_pad",
            )  # fmt: skip
        # And one on the hand's housing (the palm box, 1 mm wider all round): the normal force of whatever touches
        # it, N (a push reward prices it: the real housing reaches a cube's top edge; docs/manipulation.md).
        hand = spec.geom("hand")
        spec.body("panda_hand").add_site(
            name="palm", type=mujoco.mjtGeom.mjGEOM_BOX, pos=hand.pos, quat=hand.quat, size=hand.size + 0.001
        )
        spec.add_sensor(name="palm_touch", type=mujoco.mjtSensor.mjSENS_TOUCH, objtype=mujoco.mjtObj.mjOBJ_SITE,
                        objname="palm")  # fmt: skip
        add_cube(spec, "cube", scene.cube_size, scene.cube_mass, (0.5, 0.0), (0.8, 0.2, 0.2))
    if scene.goal_marker:
        world.add_site(name="goal", pos=[0.5, 0.0, 0.3], size=[0.02, 0, 0], group=2, rgba=[0.2, 0.8, 0.2, 0.5])
    for add in scene.objects:
        add(spec)
    return spec.compile()
