"""Unitree A1 quadruped: cited parameters and the MuJoCo model, converted at run time from the URDF that ships
inside ``pybullet_data`` (installable offline; the same file the PyBullet second engine loads).

Joints, in command order (Unitree's leg order FR, FL, RR, RL and, per leg, hip abduction, thigh, calf)::

    FR_hip FR_upper FR_lower | FL_hip FL_upper FL_lower | RR_hip RR_upper RR_lower | RL_hip RL_upper RL_lower

(``pybullet_data`` names the thigh and calf ``upper`` and ``lower``; legged_gym's copy of the same description
names them ``thigh`` and ``calf``.) Hip abduction turns about the trunk's x axis, thigh and calf about the leg's y
axis, positive by the right-hand rule; a thigh angle > 0 swings the foot backwards, a calf angle < 0 folds the knee.

Control: joint position targets tracked by a PD law at the physics rate, ``tau = Kp (q_d - q) - Kd dq``, limited
to the motors' torque, as legged_gym's ``control_type = 'P'`` and Unitree's low-level ``LowCmd`` (q, dq = 0, Kp,
Kd, tau = 0) apply it on the robot.

Frames: the base is the trunk (x forward, y left, z up); the IMU sits at the trunk's origin with the trunk's axes
(the URDF's ``imu_joint``, identity). Feet are the 2 cm spheres 0.2 m below the calf joint.

Sources (every constant below cites one):
  [URDF] ``pybullet_data/a1/a1.urdf`` (pybullet 3.2.7; Unitree's ``a1_description``): kinematics, masses and
         inertias, joint ranges, joint velocity limits, collision shapes. Robot mass 12.46 kg.
  [MEN]  mujoco_menagerie ``unitree_a1/a1.xml`` (commit 1b428b08): motor torque limit 33.5 N m on every joint
         (Unitree's A1 datasheet figure), reflected rotor inertia 0.01 kg m², joint damping 1 (abduction) / 2
         N m s/rad, dry friction 0.2 N m, foot friction 0.8.
  [LG]   legged_gym ``envs/a1/a1_config.py`` (commit 8fa29ac): default joint angles (hip ±0.1, thigh 0.8 front /
         1.0 rear, calf -1.5 rad), PD gains Kp 20 N m/rad, Kd 0.5 N m s/rad, policy at 50 Hz
         over a 200 Hz physics step (decimation 4 at 5 ms), start height 0.42 m, soft joint-limit fraction 0.9.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from sim.terrain import Terrain

LEGS = ("FR", "FL", "RR", "RL")
"""Legs in Unitree's order: ``unitree_legged_sdk`` ``quadruped.h`` (``FR_ = 0, FL_ = 1, RR_ = 2, RL_ = 3``; joint index
``leg * 3 + {0 hip, 1 thigh, 2 calf}``, e.g. ``FL_0 = 3``)."""
JOINTS = tuple(f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "upper", "lower"))
"""The 12 actuated joints in command order (names as in the ``pybullet_data`` URDF)."""
FEET = tuple(f"{leg}_foot" for leg in LEGS)
"""Foot sites (touch sensors), leg order."""

Q_MIN = (-0.802851455917, -1.0471975512, -2.69653369433) * 4
"""Joint lower limits, rad [URDF]."""
Q_MAX = (0.802851455917, 4.18879020479, -0.916297857297) * 4
"""Joint upper limits, rad [URDF]."""
DQ_MAX = (52.4, 28.6, 28.6) * 4
"""Joint velocity limits, rad/s [URDF]."""
TAU_MAX = (33.5,) * 12
"""Motor torque limit, N m [MEN] (the URDF's ``effort`` values, 20 / 55 / 55, are not the motor's)."""
ARMATURE = 0.01
"""Reflected rotor inertia of every joint, kg m² [MEN]."""
DAMPING = (1.0, 2.0, 2.0) * 4
"""Joint viscous damping, N m s/rad [MEN]."""
FRICTION_LOSS = 0.2
"""Joint dry friction, N m [MEN]."""
FOOT_FRICTION = 0.8
"""Sliding friction of the feet on the ground [MEN]."""
DEFAULT_POSE = (-0.1, 0.8, -1.5, 0.1, 0.8, -1.5, -0.1, 1.0, -1.5, 0.1, 1.0, -1.5)
"""Joint angles at action 0 (standing), rad, command order [LG]."""
KP = 20.0
"""PD stiffness, N m/rad [LG]."""
KD = 0.5
"""PD damping, N m s/rad [LG]."""
START_HEIGHT = 0.42
"""Trunk height the episodes start from (the robot drops onto its feet), m [LG]."""
SOFT_LIMIT = 0.9
"""Fraction of each joint's range inside which no limit penalty applies [LG]."""
IMU_FRAME = "imu_link"
"""The IMU's frame [URDF] (``imu_joint``: fixed at the trunk's origin with the trunk's axes)."""
FOOT_RADIUS = 0.02
"""Collision radius of the feet, m [URDF]."""
FOOT_OFFSET = (0.0, 0.0, -0.2)
"""Foot centre in the calf link's frame, m [URDF] (``*_toe_fixed``)."""

ROBOT_GEOM_GROUPS = (2, 1)
"""``(contype, conaffinity)`` of the robot's collision shapes and, swapped, of the ground: the robot touches the
ground but not itself (legged_gym's A1 runs with self-collisions off)."""


def urdf_path() -> Path:
    """The A1 URDF inside ``pybullet_data``.

    Raises:
        FileNotFoundError: ``pybullet_data`` is missing or has no ``a1/a1.urdf``.
    """
    try:
        import pybullet_data
    except ImportError:
        raise FileNotFoundError("the A1 description comes from pybullet_data: pip install pybullet") from None
    path = Path(pybullet_data.getDataPath()) / "a1" / "a1.urdf"
    if not path.is_file():
        raise FileNotFoundError(f"no A1 description at '{path}' (pybullet_data without the a1 folder)")
    return path


@dataclass(frozen=True)
class Ground:
    """What the robot stands on.

    Attributes:
        friction: Sliding friction of the ground (MuJoCo takes the larger of the two geoms' coefficients).
        terrain: Rough terrain (:class:`sim.terrain.Terrain`, a heightfield); ``None``: a plane.
    """

    friction: float = 0.8
    terrain: Terrain | None = None


def build_spec(timestep: float = 0.005, ground: Ground = Ground()) -> mujoco.MjSpec:
    """The A1 as an editable MuJoCo spec: a free trunk, PD position actuators, an IMU and foot touch sensors.

    Sensors (``sensordata``): ``imu_gyro [3]`` rad/s and ``imu_acc [3]`` m/s² in the IMU frame, then the normal force
    on each foot ``[4]`` N (touch sensors; leg order).
    """
    text = urdf_path().read_text()
    # Fixed links stay bodies (the trunk, the root link, gets its free joint; the toes carry the foot sites);
    # visual meshes are dropped (the collision shapes are primitives).
    head = re.search(r"<robot\b[^>]*>", text)
    if head is None:
        raise ValueError(f"unexpected A1 URDF at '{urdf_path()}': no <robot> element")
    text = text.replace(
        head.group(0),
        head.group(0) + '<mujoco><compiler discardvisual="true" fusestatic="false" angle="radian"/></mujoco>',
        1,
    )
    spec = mujoco.MjSpec.from_string(text)
    trunk = spec.body("trunk")
    if trunk is None:
        raise ValueError(f"unexpected A1 URDF at '{urdf_path()}': no 'trunk' link")
    trunk.add_freejoint(name="floating_base")
    spec.compiler.discardvisual = False  # the URDF's meshes are gone; keep the ground's material below
    spec.option.timestep = timestep
    contype, conaffinity = ROBOT_GEOM_GROUPS
    for geom in spec.geoms:
        geom.contype, geom.conaffinity = contype, conaffinity
        if geom.size[0] < 0.001 and geom.type == mujoco.mjtGeom.mjGEOM_BOX:  # the IMU's 1 mm marker box
            geom.contype = geom.conaffinity = 0
    # A checkered ground (so that motion shows in a rendered clip) and a light.
    spec.add_texture(name="grid", type=mujoco.mjtTexture.mjTEXTURE_2D, builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
                     rgb1=[0.55, 0.6, 0.65], rgb2=[0.4, 0.45, 0.5], width=256, height=256)  # fmt: skip
    material = spec.add_material(name="grid", texrepeat=[4, 4], reflectance=0.1)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "grid"
    spec.worldbody.add_light(name="sun", pos=[0, 0, 3], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)
    if ground.terrain is None:
        floor = spec.worldbody.add_geom(name="ground", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05],
                                        material="grid")  # fmt: skip
    else:
        floor = ground.terrain.add_to_spec(spec, "ground")
        floor.material = "grid"
    floor.contype, floor.conaffinity = conaffinity, contype
    floor.friction = [ground.friction, 0.005, 0.0001]
    trunk.pos = [0.0, 0.0, START_HEIGHT]
    trunk.add_site(name="imu", pos=[0.0, 0.0, 0.0])
    # The clip camera (robot_rl.clip's "front"): beside the robot, following its centre of mass, not its heading.
    trunk.add_camera(name="front", mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM, pos=[0.0, -1.2, 0.25],
                     xyaxes=[1, 0, 0, 0, 0.2, 0.98], fovy=50)  # fmt: skip
    for i, name in enumerate(JOINTS):
        joint = spec.joint(name)
        joint.armature = ARMATURE
        joint.damping[0] = DAMPING[i]
        joint.frictionloss = FRICTION_LOSS
        act = spec.add_actuator(name=name.removesuffix("_joint"), target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        act.biastype = mujoco.mjtBias.mjBIAS_AFFINE
        act.gainprm[0] = KP
        act.biasprm[:3] = [0.0, -KP, -KD]
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-TAU_MAX[i], TAU_MAX[i]]
    spec.add_sensor(name="imu_gyro", type=mujoco.mjtSensor.mjSENS_GYRO, objtype=mujoco.mjtObj.mjOBJ_SITE,
                    objname="imu")  # fmt: skip
    spec.add_sensor(name="imu_acc", type=mujoco.mjtSensor.mjSENS_ACCELEROMETER, objtype=mujoco.mjtObj.mjOBJ_SITE,
                    objname="imu")  # fmt: skip
    for leg, foot in zip(LEGS, FEET, strict=True):
        toe = spec.body(f"{leg}_toe")
        for geom in toe.geoms:
            geom.friction = [FOOT_FRICTION, 0.005, 0.0001]
        # A touch sensor sums the normal forces of contacts inside its site: a sphere slightly larger than the foot.
        toe.add_site(name=foot, type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[FOOT_RADIUS * 1.2, 0, 0])
        spec.add_sensor(name=foot, type=mujoco.mjtSensor.mjSENS_TOUCH, objtype=mujoco.mjtObj.mjOBJ_SITE,
                        objname=foot)  # fmt: skip
    return spec


def build_model(timestep: float = 0.005, ground: Ground = Ground()) -> mujoco.MjModel:
    """Compile :func:`build_spec` (see there)."""
    return build_spec(timestep, ground).compile()


def standing_qpos(model: mujoco.MjModel, height: float = START_HEIGHT) -> np.ndarray:
    """``qpos [nq]`` with the trunk upright at ``height`` m and the legs at :data:`DEFAULT_POSE`."""
    qpos = model.qpos0.copy()
    qpos[:7] = [0.0, 0.0, height, 1.0, 0.0, 0.0, 0.0]
    for name, q in zip(JOINTS, DEFAULT_POSE, strict=True):
        qpos[model.joint(name).qposadr[0]] = q
    return qpos


def joint_axes(model: mujoco.MjModel) -> dict[str, list[float]]:
    """Each joint's positive rotation axis in the trunk frame with every joint at 0 rad (``{joint: [x, y, z]}``): the
    sign convention a robot's driver must share with the policy (a flipped axis is refused by name at deploy)."""
    data = mujoco.MjData(model)
    data.qpos[:] = model.qpos0
    mujoco.mj_kinematics(model, data)
    trunk = data.xmat[model.body("trunk").id].reshape(3, 3)
    return {name: [round(float(v), 6) + 0.0 for v in trunk.T @ data.xaxis[model.joint(name).id]] for name in JOINTS}
