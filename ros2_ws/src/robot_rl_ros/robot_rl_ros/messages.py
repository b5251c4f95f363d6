"""ROS 2 messages <-> the named robot signals of a deployment contract (numpy only besides the message types).

Manipulators: see the section below (``sensor_msgs/JointState``, ``geometry_msgs/PoseStamped``). Legged robots:
``sensor_msgs/Imu`` and a ``geometry_msgs/Twist`` velocity command (their section). Cameras: the last section
(``sensor_msgs/Image``).

Multirotor (``nav_msgs/Odometry``, REP 105 / nav_msgs conventions): ``pose`` is in ``header.frame_id`` (the world,
z up), ``twist`` in ``child_frame_id`` (the body). The quadrotor contract reads the position relative to its target
(``extra.target_position_m``), the body->world rotation matrix (row-major), the *world-frame* linear velocity (so
the body twist is rotated: ``v_w = R v_b``) and the body rates.

Every value is checked in the precision the policy uses it in: a number that is finite in the message's float64 but
overflows float32 (``1e39``) is refused like a NaN, after the conversion, not before. Orientation quaternions must
have unit norm (within :data:`QUAT_NORM_TOLERANCE`): a driver that sends another norm has a bug this node should not
hide. :func:`check_header` refuses stale or future stamps and, for odometry, a twist that is not in a body frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Image, Imu, JointState

from policies.runtime.text import printable

QUAT_NORM_TOLERANCE = 0.01
"""Largest ``| |q| - 1 |`` accepted for an orientation quaternion (drivers publish unit quaternions to float
round-off; anything farther is a unit or frame bug upstream)."""


class MessageError(ValueError):
    """A message cannot be turned into signals (non-finite values, wrong lengths, unknown joints)."""


FLOAT32_MAX = float(np.finfo(np.float32).max)


def as_float32(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    """``values`` as a float32 array, refusing NaN, inf and values that overflow float32 (naming ``what``)."""
    x = np.asarray(values, dtype=np.float64)
    if not (np.abs(x) <= FLOAT32_MAX).all():  # NaN fails the comparison too
        raise MessageError(f"{what} holds values that are not finite in float32: {x.tolist()}")
    return x.astype(np.float32)


def check_header(
    header: Any,
    now_ns: int,
    max_age_s: float,
    what: str,
    frame_id: str = "",
) -> None:
    """Refuse a message whose ``header.stamp`` is unset, older than ``max_age_s`` or more than ``max_age_s`` in the
    future against ``now_ns`` (the node's clock, ns; ``max_age_s <= 0`` skips the age check), or whose
    ``header.frame_id`` is not ``frame_id`` (when given).

    Raises:
        MessageError: Naming ``what``, the stamp's age and the limit, or both frames.
    """
    if frame_id and header.frame_id != frame_id:
        raise MessageError(f"{what} is in frame '{printable(header.frame_id)}', expected '{frame_id}'")
    if max_age_s <= 0:
        return
    stamp = int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)
    if stamp == 0:
        raise MessageError(f"{what} has no header.stamp (0); stamp it with the time of the measurement")
    if now_ns == 0:  # the ROS clock under use_sim_time before its first /clock message (system time is never 0)
        raise MessageError(
            f"{what} arrived before the node's clock started: use_sim_time is true and no /clock message has come "
            "(a simulator publishes it; sim_robot_node with publish_clock: true)"
        )
    age = (now_ns - stamp) * 1e-9
    if age > max_age_s:
        raise MessageError(f"{what} is {age:.3f} s old (stamp), more than max_input_age_s {max_age_s:g} s")
    if age < -max_age_s:
        raise MessageError(
            f"{what} is stamped {-age:.3f} s in the future, more than max_input_age_s {max_age_s:g} s "
            "(are the clocks of this machine and the sensor's synchronised?)"
        )


def check_odometry_frames(msg: Odometry, child_frame_id: str = "") -> None:
    """REP 105: the twist of ``nav_msgs/Odometry`` is in ``child_frame_id``, the body frame. A message whose
    ``child_frame_id`` is empty or equal to ``header.frame_id`` states a twist in the world frame, which this node
    would misread as body rates and velocities; it is refused, as is another body frame than ``child_frame_id``
    (when given).

    Raises:
        MessageError: Naming the frames.
    """
    child, parent = msg.child_frame_id, msg.header.frame_id
    if child_frame_id and child != child_frame_id:
        raise MessageError(f"odometry child_frame_id is '{printable(child)}', expected '{child_frame_id}'")
    if not child or child == parent:
        raise MessageError(
            f"odometry child_frame_id '{printable(child)}' (header.frame_id '{printable(parent)}') does not name a "
            "body frame: REP 105 puts the twist in the body frame; publish it there and name that frame"
        )


def quat_to_matrix(w: float, x: float, y: float, z: float) -> np.ndarray:
    """Rotation matrix ``[3, 3]`` of a unit quaternion (norm within :data:`QUAT_NORM_TOLERANCE` of 1, normalised
    here).

    Raises:
        MessageError: A component is not finite, or the norm is not close to 1.
    """
    q = np.array([w, x, y, z], dtype=np.float64)
    n = float(np.linalg.norm(q))
    if not np.isfinite(n) or abs(n - 1.0) > QUAT_NORM_TOLERANCE:
        raise MessageError(
            f"orientation quaternion {q.tolist()} has norm {n:.6g}; a rotation needs a unit quaternion "
            f"(|norm - 1| <= {QUAT_NORM_TOLERANCE:g})"
        )
    w, x, y, z = q / n
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def odometry_signals(
    msg: Odometry, target: Sequence[float] | np.ndarray, target_velocity: Sequence[float] | np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """``pos_w``, ``rot_mat``, ``lin_vel_w``, ``ang_vel_b`` (each ``[1, k]`` float32) from an odometry message, the
    position relative to ``target`` (m, the odometry frame) and the velocity relative to ``target_velocity`` (m/s,
    the same frame; ``None``: a fixed target).

    Raises:
        MessageError: A value is not finite in float32 (before or after the frame change), or the orientation is
            not a unit quaternion.
    """
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    raw = np.array([p.x, p.y, p.z, o.w, o.x, o.y, o.z, v.x, v.y, v.z, w.x, w.y, w.z], dtype=np.float64)
    rot = quat_to_matrix(*raw[3:7])
    # every value the policy reads, in float32: the position relative to the target, the world velocity, the rates
    moving = np.zeros(3) if target_velocity is None else np.asarray(target_velocity, dtype=np.float64)
    used = as_float32(np.concatenate((raw[0:3] - np.asarray(target, dtype=np.float64), rot @ raw[7:10] - moving,
                                      raw[10:13])),
                      "odometry (position - target, world velocity - target velocity, body rates)")  # fmt: skip
    return {
        "pos_w": used[None, 0:3],
        "rot_mat": rot.reshape(1, 9).astype(np.float32),
        "lin_vel_w": used[None, 3:6],
        "ang_vel_b": used[None, 6:9],
    }


def header_ns(header: Any) -> int:
    """A header's stamp in nanoseconds."""
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def target_velocity(msg: TwistStamped, max_speed_m_s: float) -> np.ndarray:
    """The linear velocity ``[3]`` (m/s, float64 of float32 values) of a velocity setpoint.

    Raises:
        MessageError: A value is not finite in float32, an angular velocity is set (the policy holds its yaw; yaw-rate
            setpoints are not an input), or the speed exceeds ``max_speed_m_s``.
    """
    v, w = msg.twist.linear, msg.twist.angular
    linear = as_float32([v.x, v.y, v.z], "target velocity").astype(np.float64)
    if any(float(a) != 0.0 for a in (w.x, w.y, w.z)):
        raise MessageError("target velocity sets an angular velocity; only linear velocity setpoints are an input")
    speed = float(np.linalg.norm(linear))
    if speed > max_speed_m_s:
        raise MessageError(f"target velocity {speed:.3g} m/s is above max_target_speed_m_s ({max_speed_m_s:g} m/s)")
    return linear


def velocity_at(velocity: np.ndarray | None, velocity_ns: int, odometry_ns: int, timeout_s: float) -> np.ndarray:
    """The velocity setpoint that applies to odometry stamped ``odometry_ns``: ``velocity`` (stamped
    ``velocity_ns``) until ``timeout_s`` after its stamp, else 0 (hold the position target). Stamps only, so a
    replay decides as the node did."""
    if velocity is None or odometry_ns - velocity_ns > timeout_s * 1e9:
        return np.zeros(3)
    return velocity


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
        MessageError: Lengths disagree, a joint is named twice, a contract joint is missing (the message's joints are
            listed), or a value the policy reads is not finite in float32.
    """
    names = list(msg.name)
    if len(msg.position) != len(names) or len(msg.velocity) != len(names):
        raise MessageError(
            f"joint_states has {len(names)} names, {len(msg.position)} positions and {len(msg.velocity)} velocities"
        )
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise MessageError(f"joint_states names joint(s) {[printable(n) for n in twice]} more than once")
    missing = [j for j in [*joints, *([finger] if finger else [])] if j not in names]
    if missing:
        raise MessageError(f"joint_states lacks joint(s) {missing}; it names {[printable(n) for n in names]}")
    idx = [names.index(j) for j in joints]
    q = as_float32(np.asarray(msg.position, dtype=np.float64)[idx], "joint_states position")
    dq = as_float32(np.asarray(msg.velocity, dtype=np.float64)[idx], "joint_states velocity")
    out = {"joint_pos": q[None], "joint_vel": dq[None]}
    if finger:
        out["finger_pos"] = as_float32([msg.position[names.index(finger)]], f"joint_states position of {finger}")[None]
    return out


def pose_signals(msg: PoseStamped, prefix: str) -> dict[str, np.ndarray]:
    """``<prefix>_pos`` ``[1, 3]`` (m) and ``<prefix>_rot6`` ``[1, 6]`` (first two rotation columns) from a pose.

    Raises:
        MessageError: A value is not finite in float32 or the orientation is not a unit quaternion.
    """
    p, o = msg.pose.position, msg.pose.orientation
    pos = as_float32([p.x, p.y, p.z], f"{prefix} pose")
    rot = quat_to_matrix(*as_float32([o.w, o.x, o.y, o.z], f"{prefix} orientation").astype(np.float64))
    return {
        f"{prefix}_pos": pos[None],
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
        MessageError: A read coordinate is not finite in float32.
    """
    p = msg.pose.position
    return {name: as_float32([p.x, p.y, p.z][:axes], f"{name} pose")[None]}


def fill_joint_state(msg: JointState, names: Sequence[str], q: np.ndarray, dq: np.ndarray) -> None:
    """Write joint names, positions and velocities (efforts left empty)."""
    msg.name = list(names)
    msg.position = [float(v) for v in q]
    msg.velocity = [float(v) for v in dq]


# ------------------------------------------------------------------------------------------------ legged robots
# sensor_msgs/Imu (REP 145): the orientation of the IMU frame in a gravity-aligned frame (z up; the filter's own
# heading), the angular velocity in the IMU frame, rad/s. The policy reads the gyro and gravity in the IMU frame
# (``projected_gravity = Rᵀ (0, 0, -1)``), so the heading never matters. geometry_msgs/Twist on cmd_vel (REP 105: the
# base frame): linear x, y in m/s and angular z in rad/s, what a teleop or a planner sends.


def imu_signals(msg: Imu) -> dict[str, np.ndarray]:
    """``base_ang_vel`` ``[1, 3]`` (rad/s, the IMU frame) and ``projected_gravity`` ``[1, 3]`` (unit gravity in the
    IMU frame; upright: ``(0, 0, -1)``) from an IMU message.

    Raises:
        MessageError: The message carries no orientation (``orientation_covariance[0] == -1``, REP 145), a value is
            not finite in float32, or the orientation is not a unit quaternion.
    """
    if float(msg.orientation_covariance[0]) == -1.0:
        raise MessageError(
            "imu has no orientation (orientation_covariance[0] = -1); the policy needs gravity in the IMU frame: "
            "publish the attitude filter's output"
        )
    o, w = msg.orientation, msg.angular_velocity
    rot = quat_to_matrix(*as_float32([o.w, o.x, o.y, o.z], "imu orientation").astype(np.float64))
    gyro = as_float32([w.x, w.y, w.z], "imu angular_velocity")
    return {"base_ang_vel": gyro[None], "projected_gravity": (-rot[2, :]).astype(np.float32)[None]}


def velocity_command(msg: Twist, ranges: dict[str, tuple[float, float]]) -> np.ndarray:
    """``velocity_command`` ``[1, 3]`` (vx, vy m/s; yaw rate rad/s) from a Twist, each within the training envelope
    ``ranges`` (``{"linear.x": (lo, hi), "linear.y": ..., "angular.z": ...}``).

    Raises:
        MessageError: A value is not finite in float32, ``linear.z`` or a roll / pitch rate is set (not an input of
            a walking policy), or a component lies outside the range the policy was trained on (named with it).
    """
    v, w = msg.linear, msg.angular
    values = as_float32([v.x, v.y, w.z, v.z, w.x, w.y], "cmd_vel")
    if values[3:].any():
        raise MessageError(
            f"cmd_vel sets linear.z / angular.x / angular.y ({values[3:].tolist()}); a walking base takes linear.x, "
            "linear.y and angular.z only"
        )
    for name, value in zip(("linear.x", "linear.y", "angular.z"), values[:3].tolist(), strict=True):
        lo, hi = ranges[name]
        if not lo <= value <= hi:
            unit = "rad/s" if name.startswith("angular") else "m/s"
            raise MessageError(
                f"cmd_vel {name} {value:g} {unit} is outside the range the policy was trained on, [{lo:g}, {hi:g}] "
                f"{unit} (scale the teleop to it)"
            )
    return values[None, :3]


def fill_imu(msg: Imu, quat: np.ndarray, gyro: np.ndarray, acc: np.ndarray) -> None:
    """Write an attitude ``(w, x, y, z)``, angular velocity (rad/s) and specific force (m/s²) into ``msg``."""
    o, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    o.w, o.x, o.y, o.z = (float(v) for v in quat)
    w.x, w.y, w.z = (float(v) for v in gyro)
    a.x, a.y, a.z = (float(v) for v in acc)


def fill_twist(msg: Twist, linear: np.ndarray, angular: np.ndarray) -> None:
    """Write a linear (m/s) and angular (rad/s) velocity into ``msg``."""
    msg.linear.x, msg.linear.y, msg.linear.z = (float(v) for v in linear)
    msg.angular.x, msg.angular.y, msg.angular.z = (float(v) for v in angular)


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
