"""What a simulated robot's drivers would publish, in a robot-agnostic vocabulary (plain numpy, SI units).

A task reports one world's measurements with ``measurements(world)`` as a list of these records; the ROS 2
``sim_robot_node`` turns each kind into its message (``Odometry`` -> ``nav_msgs/Odometry``, ``JointStates`` ->
``sensor_msgs/JointState``, ``Pose`` -> ``geometry_msgs/PoseStamped``, ``Imu`` -> ``sensor_msgs/Imu``,
``VelocityCommand`` -> ``geometry_msgs/Twist``,
``Instruction`` -> ``std_msgs/String``) and publishes it on the topic of its ``name``, in the order given.
Nothing here knows a robot: a new robot family reports its state in these kinds and the node needs no change (a new
kind of sensor is one new record here and one converter there, for every family).

Conventions (REP 103 / 105): odometry's pose in ``frame_id`` (world, z up), its twist in ``child_frame_id`` (the
body); joint positions in rad (m for prismatic joints such as a gripper's fingers); poses in ``frame_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Odometry:
    """A floating body's state, as a state estimator or motion capture reports it.

    Attributes:
        name: Topic name (``odom``).
        position: ``[3]`` m, in ``frame_id``.
        quat: ``[4]`` ``(w, x, y, z)``, body to ``frame_id``.
        velocity: ``[3]`` m/s, linear velocity in ``frame_id`` (the node rotates it into the body frame).
        angular_velocity: ``[3]`` rad/s, body frame.
        frame_id: World frame.
        child_frame_id: Body frame.
    """

    name: str
    position: np.ndarray
    quat: np.ndarray
    velocity: np.ndarray
    angular_velocity: np.ndarray
    frame_id: str = "world"
    child_frame_id: str = "base_link"


@dataclass(frozen=True)
class JointStates:
    """Joint positions and velocities by name, as ros2_control's ``joint_state_broadcaster`` reports them.

    Attributes:
        name: Topic name (``joint_states``).
        joints: Joint names.
        position: ``[J]`` rad (m for prismatic joints).
        velocity: ``[J]`` rad/s (m/s).
        frame_id: Header frame.
    """

    name: str
    joints: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    frame_id: str = ""


@dataclass(frozen=True)
class Pose:
    """A pose in the robot's base frame: the tool pose a driver reports, an object tracker's estimate, a goal.

    Attributes:
        name: Topic name (``tcp_pose``, ``object_pose``, ``goal``).
        position: ``[3]`` m.
        rotation: ``[3, 3]`` rotation matrix.
        frame_id: The base frame.
        latched: Sent reliably and kept for late subscribers (an operator's goal), and only when it changes.
    """

    name: str
    position: np.ndarray
    rotation: np.ndarray
    frame_id: str
    latched: bool = False


@dataclass(frozen=True)
class Imu:
    """An IMU with an attitude filter, as a robot's IMU driver reports it (``sensor_msgs/Imu``, REP 145).

    Attributes:
        name: Topic name (``imu``).
        quat: ``[4]`` ``(w, x, y, z)``, the IMU frame's orientation in a gravity-aligned frame (z up; the heading is
            the filter's own).
        angular_velocity: ``[3]`` rad/s, IMU frame.
        linear_acceleration: ``[3]`` m/s², IMU frame (specific force: ``+9.81`` along z when level and at rest).
        frame_id: The IMU frame.
    """

    name: str
    quat: np.ndarray
    angular_velocity: np.ndarray
    linear_acceleration: np.ndarray
    frame_id: str


@dataclass(frozen=True)
class VelocityCommand:
    """An operator's base velocity command (a teleop's ``geometry_msgs/Twist`` on ``cmd_vel``, the base frame: REP
    105). It carries no stamp.

    Attributes:
        name: Topic name (``cmd_vel``).
        linear: ``[3]`` m/s.
        angular: ``[3]`` rad/s.
    """

    name: str
    linear: np.ndarray
    angular: np.ndarray


@dataclass(frozen=True)
class Instruction:
    """An operator's language instruction to a language-conditioned policy (``std_msgs/String``), sent reliably and
    kept for late subscribers, only when it changes.

    Attributes:
        name: Topic name (``instruction``).
        text: The instruction, e.g. ``lift the red cube``.
    """

    name: str
    text: str


Measurement = Odometry | JointStates | Pose | Imu | VelocityCommand | Instruction
"""One record of a robot's measurements."""
