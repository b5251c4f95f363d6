"""ROS 2 messages <-> the named robot signals of a deployment contract (numpy only besides the message types).

Multirotor (``nav_msgs/Odometry``, REP 105 / nav_msgs conventions): ``pose`` is in ``header.frame_id`` (the world,
z up), ``twist`` in ``child_frame_id`` (the body). The quadrotor contract reads the position relative to its target
(``extra.target_position_m``), the body->world rotation matrix (row-major), the *world-frame* linear velocity (so
the body twist is rotated: ``v_w = R v_b``) and the body rates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from nav_msgs.msg import Odometry


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
