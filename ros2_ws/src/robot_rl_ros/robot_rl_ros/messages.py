"""ROS 2 messages <-> the named robot signals of a deployment contract (numpy only besides the message types).

Manipulators: see the section below (``sensor_msgs/JointState``, ``geometry_msgs/PoseStamped``). Cameras: the last
section (``sensor_msgs/Image``).

Multirotor (``nav_msgs/Odometry``, REP 105 / nav_msgs conventions): ``pose`` is in ``header.frame_id`` (the world,
z up), ``twist`` in ``child_frame_id`` (the body). The quadrotor contract reads the position relative to its target
(``extra.target_position_m``), the body->world rotation matrix (row-major), the *world-frame* linear velocity (so
the body twist is rotated: ``v_w = R v_b``) and the body rates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Image, JointState


class MessageError(ValueError):
    """A message cannot be turned into signals (non-finite values, wrong lengths, unknown joints)."""


def quat_to_matrix(w: float, x: float, y: float, z: float) -> np.ndarray:
    """Rotation matrix ``[3, 3]`` of a unit quaternion (normalised here)."""
    q = np.array([w, x, y, z], dtype=np.float64)
    n = float(np.linalg.norm(q))
    if not np.isfinite(n) or n < 1e-6:
        raise MessageError(f"orientation quaternion {q.tolist()} is not a rotation")
    w, x, y, z = q / n
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def odometry_signals(msg: Odometry, target: Sequence[float]) -> dict[str, np.ndarray]:
    """``pos_w``, ``rot_mat``, ``lin_vel_w``, ``ang_vel_b`` (each ``[1, k]`` float32) from an odometry message.

    Raises:
        MessageError: A value is not finite or the orientation is not a rotation.
    """
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    raw = np.array([p.x, p.y, p.z, o.w, o.x, o.y, o.z, v.x, v.y, v.z, w.x, w.y, w.z], dtype=np.float64)
    if not np.isfinite(raw).all():
        raise MessageError(f"odometry holds non-finite values: {raw.tolist()}")
    rot = quat_to_matrix(o.w, o.x, o.y, o.z)
    return {
        "pos_w": (raw[0:3] - np.asarray(target, dtype=np.float64))[None].astype(np.float32),
        "rot_mat": rot.reshape(1, 9).astype(np.float32),
        "lin_vel_w": (rot @ raw[7:10])[None].astype(np.float32),
        "ang_vel_b": raw[10:13][None].astype(np.float32),
    }


def fill_odometry(msg: Odometry, pos: np.ndarray, quat: np.ndarray, vel_w: np.ndarray, omega_b: np.ndarray) -> None:
    """Write a simulated state into ``msg`` with the same conventions (body twist: ``v_b = Rᵀ v_w``)."""
    rot = quat_to_matrix(*(float(v) for v in quat))
    v_b = rot.T @ np.asarray(vel_w, dtype=np.float64)
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = (float(v) for v in pos)
    o.w, o.x, o.y, o.z = (float(v) for v in quat)
    t = msg.twist.twist
    t.linear.x, t.linear.y, t.linear.z = (float(v) for v in v_b)
    t.angular.x, t.angular.y, t.angular.z = (float(v) for v in omega_b)


# ------------------------------------------------------------------------------------------------ manipulators
# sensor_msgs/JointState (ros2_control's joint_state_broadcaster): joints by name, any order, radians and rad/s.
# geometry_msgs/PoseStamped for the tool pose the robot reports (libfranka's O_T_EE via franka_ros2) and for the goal,
# both in the robot's base frame. Orientations become the contract's 6-value form: the rotation's first two columns.


def joint_state_signals(msg: JointState, joints: Sequence[str], finger: str = "") -> dict[str, np.ndarray]:
    """``joint_pos`` and ``joint_vel`` (``[1, J]`` float32, the contract's joint order) from a joint state message;
    with ``finger`` (a gripper joint's name, e.g. ``panda_finger_joint1``) also ``finger_pos`` ``[1, 1]``, m (that
    finger's opening). franka_ros2's ``franka_gripper`` publishes each finger joint at half the gripper width
    (``GripperActionServer::publish_gripper_state``: ``width * 0.5``), the convention of the simulated finger joint;
    its launch files merge those joint states with the arm's into ``joint_states``.

    Raises:
        MessageError: Lengths disagree, a contract joint is missing (the message's joints are listed), or a value is
            not finite.
    """
    names = list(msg.name)
    if len(msg.position) != len(names) or len(msg.velocity) != len(names):
        raise MessageError(
            f"joint_states has {len(names)} names, {len(msg.position)} positions and {len(msg.velocity)} velocities"
        )
    missing = [j for j in [*joints, *([finger] if finger else [])] if j not in names]
    if missing:
        raise MessageError(f"joint_states lacks joint(s) {missing}; it names {names}")
    idx = [names.index(j) for j in joints]
    q = np.asarray(msg.position, dtype=np.float64)[idx]
    dq = np.asarray(msg.velocity, dtype=np.float64)[idx]
    f = np.asarray([msg.position[names.index(finger)]] if finger else [], dtype=np.float64)
    if not (np.isfinite(q).all() and np.isfinite(dq).all() and np.isfinite(f).all()):
        raise MessageError(f"joint_states holds non-finite values: {q.tolist()} {dq.tolist()} {f.tolist()}")
    out = {"joint_pos": q[None].astype(np.float32), "joint_vel": dq[None].astype(np.float32)}
    if finger:
        out["finger_pos"] = f[None].astype(np.float32)
    return out


def pose_signals(msg: PoseStamped, prefix: str) -> dict[str, np.ndarray]:
    """``<prefix>_pos`` ``[1, 3]`` (m) and ``<prefix>_rot6`` ``[1, 6]`` (first two rotation columns) from a pose.

    Raises:
        MessageError: A value is not finite or the orientation is not a rotation.
    """
    p, o = msg.pose.position, msg.pose.orientation
    pos = np.array([p.x, p.y, p.z], dtype=np.float64)
    if not np.isfinite(pos).all():
        raise MessageError(f"{prefix} pose holds non-finite values: {pos.tolist()}")
    rot = quat_to_matrix(o.w, o.x, o.y, o.z)
    return {
        f"{prefix}_pos": pos[None].astype(np.float32),
        f"{prefix}_rot6": rot[:, :2].T.reshape(1, 6).astype(np.float32),
    }


def matrix_to_quat(rot: np.ndarray) -> tuple[float, float, float, float]:
    """Unit quaternion ``(w, x, y, z)`` of a rotation matrix ``[3, 3]`` (Shepperd's method, numerically safe)."""
    m = np.asarray(rot, dtype=np.float64)
    t = float(np.trace(m))
    if t > 0:
        s = 2.0 * np.sqrt(t + 1.0)
        q = (0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s)
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k])
        v = [0.0, 0.0, 0.0]
        v[i] = 0.25 * s
        v[j] = (m[j, i] + m[i, j]) / s
        v[k] = (m[k, i] + m[i, k]) / s
        q = ((m[k, j] - m[j, k]) / s, v[0], v[1], v[2])
    n = float(np.linalg.norm(q))
    return (q[0] / n, q[1] / n, q[2] / n, q[3] / n)


def fill_pose(msg: PoseStamped, pos: np.ndarray, rot: np.ndarray) -> None:
    """Write a position ``[3]`` and rotation matrix ``[3, 3]`` into ``msg.pose``."""
    p, o = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in pos)
    o.w, o.x, o.y, o.z = matrix_to_quat(rot)


def position_signal(msg: PoseStamped, name: str, axes: int = 3) -> dict[str, np.ndarray]:
    """``{name: [1, axes]}`` (m): the first ``axes`` of a pose's position (x, y[, z]); the orientation is not read,
    so a tracker that leaves it unset (all zero) is accepted. ``goal_xy`` is the goal's ``axes=2``.

    Raises:
        MessageError: A read coordinate is not finite.
    """
    p = msg.pose.position
    xyz = np.array([p.x, p.y, p.z], dtype=np.float64)[:axes]
    if not np.isfinite(xyz).all():
        raise MessageError(f"{name} pose holds non-finite values: {xyz.tolist()}")
    return {name: xyz[None].astype(np.float32)}


def fill_joint_state(msg: JointState, names: Sequence[str], q: np.ndarray, dq: np.ndarray) -> None:
    """Write joint names, positions and velocities (efforts left empty)."""
    msg.name = list(names)
    msg.position = [float(v) for v in q]
    msg.velocity = [float(v) for v in dq]


# ------------------------------------------------------------------------------------------------------ cameras
# sensor_msgs/Image with the 8-bit colour encodings of sensor_msgs/image_encodings.hpp; rows are ``step`` bytes apart
# (drivers may pad them). A policy sees RGB ``uint8 [H, W, 3]`` of exactly the size it was trained on: resizing or
# cropping a real camera's image to the training camera's field of view belongs upstream (image_proc's resize and
# crop nodes), where the camera's calibration is known.
IMAGE_CHANNELS = {"rgb8": (0, 1, 2), "rgba8": (0, 1, 2), "bgr8": (2, 1, 0), "bgra8": (2, 1, 0)}
"""Accepted encodings -> the byte offsets of red, green and blue within a pixel."""


def image_signals(msg: Image, height: int, width: int) -> np.ndarray:
    """RGB ``uint8 [1, height, width, 3]`` from an image message of that size.

    Raises:
        MessageError: The encoding is not 8-bit colour, the size differs from ``height x width``, or ``step`` and
            the data's length do not describe the image.
    """
    order = IMAGE_CHANNELS.get(msg.encoding)
    if order is None:
        supported = ", ".join(sorted(IMAGE_CHANNELS))
        raise MessageError(f"image encoding '{msg.encoding}' is not supported; expected one of {supported}")
    if (msg.height, msg.width) != (height, width):
        raise MessageError(
            f"image is {msg.height} x {msg.width} pixels, the policy was trained on {height} x {width} (resize it "
            "upstream to the training camera's field of view: see the contract's chunk.cameras mount)"
        )
    channels = len(msg.encoding) - 1  # "rgb8" -> 3, "rgba8" -> 4
    row = width * channels
    data = np.frombuffer(msg.data, dtype=np.uint8)
    if msg.step < row or data.size != msg.step * height:
        raise MessageError(
            f"image step {msg.step} and {data.size} data bytes do not describe {height} rows of {row} bytes "
            f"({msg.encoding})"
        )
    pixels = data.reshape(height, msg.step)[:, :row].reshape(height, width, channels)
    return np.ascontiguousarray(pixels[:, :, list(order)])[None]


def fill_image(msg: Image, rgb: np.ndarray) -> None:
    """Write an RGB ``uint8 [H, W, 3]`` image into ``msg`` (``rgb8``, rows unpadded)."""
    x = np.ascontiguousarray(rgb, dtype=np.uint8)
    msg.height, msg.width = int(x.shape[0]), int(x.shape[1])
    msg.encoding, msg.is_bigendian, msg.step = "rgb8", 0, 3 * int(x.shape[1])
    msg.data = x.tobytes()
