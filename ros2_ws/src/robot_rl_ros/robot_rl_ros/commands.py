"""What the policy node publishes: its commands, in the message type and QoS the robot's driver subscribes with.

``command_type``:

- ``float64_multi_array`` (default): ``std_msgs/Float64MultiArray``, the contract's unit and order, what ros2_control's
  ``forward_command_controller`` takes. It carries no stamp and no names.
- ``joint_state``: ``sensor_msgs/JointState``, stamped with the node's clock when the command leaves, ``name`` the
  contract's actuators in order, and the command in the field of its kind, in SI units (REP 103): ``position`` (rad;
  a gripper opening in m) for position commands, ``effort`` (N m) for torques, ``velocity`` for rotor speeds in
  **rad/s** (the contract's RPM x 2 pi / 60). The other fields are empty.

``command_reliability``: ``best_effort`` (default; sensor-data QoS, keep last 1: a late command is worthless) or
``reliable`` (keep last 1), for drivers that subscribe with ROS 2's default (reliable) QoS and would receive nothing
from a best-effort publisher.

``gains_topic`` (optional): the contract's joint stiffness and damping (``extra.impedance``: Kp N m/rad, then Kd
N m s/rad, one per joint in command order) as one latched ``std_msgs/Float64MultiArray`` with a labelled layout
(``gain`` x ``joint``), for drivers that take gains with the targets (Unitree's ``LowCmd``: q, Kp, Kd per motor).

The publisher is an ordinary one, not a lifecycle publisher: after a fault the node goes to ``inactive`` and keeps
sending the safe command (see ``policy_node``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from policies.runtime.contract import Contract, ContractError
from policies.runtime.passivity import impedance_stiffness

COMMAND_TYPES = ("float64_multi_array", "joint_state")
RELIABILITIES = ("best_effort", "reliable")
RPM_TO_RAD_S = 2.0 * math.pi / 60.0
"""Rotor speed: revolutions per minute -> rad/s."""
JOINT_STATE_FIELD = {"position": "position", "torque": "effort", "rpm": "velocity"}
"""Command kind -> the ``sensor_msgs/JointState`` field it fills."""


def command_qos(reliability: str) -> QoSProfile:
    """The QoS profile of ``command_reliability`` (see the module docstring).

    Raises:
        ValueError: ``reliability`` is not one of :data:`RELIABILITIES`.
    """
    if reliability == "best_effort":
        return qos_profile_sensor_data
    if reliability == "reliable":
        return QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    raise ValueError(f"parameter command_reliability is '{reliability}'; expected {' or '.join(RELIABILITIES)}")


class CommandPublisher:
    """Publishes commands ``[A]`` (the contract's units) as ``command_type``.

    Args:
        node: The node to publish from.
        topic: Command topic.
        contract: The policy's contract (actuator names and the command kind).
        command_type: One of :data:`COMMAND_TYPES`.
        reliability: One of :data:`RELIABILITIES`.

    Raises:
        ValueError: An unknown ``command_type`` or ``reliability``, or a command kind ``joint_state`` cannot carry.
    """

    def __init__(self, node: Any, topic: str, contract: Contract, command_type: str, reliability: str) -> None:
        if command_type not in COMMAND_TYPES:
            raise ValueError(f"parameter command_type is '{command_type}'; expected {' or '.join(COMMAND_TYPES)}")
        kind = contract.action.kind
        if command_type == "joint_state" and kind not in JOINT_STATE_FIELD:
            raise ValueError(f"command_type joint_state carries position, torque or rpm commands, not '{kind}'")
        self.node = node
        self.type = command_type
        self.names = list(contract.action.names)
        self.field = JOINT_STATE_FIELD.get(kind, "")
        self.factor = RPM_TO_RAD_S if kind == "rpm" else 1.0
        msg_type = Float64MultiArray if command_type == "float64_multi_array" else JointState
        self.publisher = node.create_publisher(msg_type, topic, command_qos(reliability))

    def message(self, command: np.ndarray) -> Any:
        """The message for ``command`` ``[A]`` (see the module docstring)."""
        values = [float(v) for v in np.asarray(command, dtype=np.float64).reshape(-1)]
        if self.type == "float64_multi_array":
            return Float64MultiArray(data=values)
        msg = JointState()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.name = list(self.names)
        setattr(msg, self.field, [v * self.factor for v in values])
        return msg

    def publish(self, command: np.ndarray) -> Any:
        """Publish ``command``; returns the message sent."""
        msg = self.message(command)
        self.publisher.publish(msg)
        return msg

    def destroy(self) -> None:
        """Release the publisher."""
        self.node.destroy_publisher(self.publisher)


def command_values(msg: Any, contract: Contract) -> np.ndarray:
    """The command ``[A]`` (contract units) a command message carries (either type), for replay and tests.

    Raises:
        ValueError: The message names other actuators, or carries another number of values than the contract's.
    """
    if isinstance(msg, Float64MultiArray) or hasattr(msg, "data"):
        values = np.asarray(msg.data, dtype=np.float64)
    else:
        kind = contract.action.kind
        field = JOINT_STATE_FIELD.get(kind, "")
        if list(msg.name) != list(contract.action.names):
            raise ValueError(f"command names {list(msg.name)}, the contract's actuators are {contract.action.names}")
        values = np.asarray(getattr(msg, field), dtype=np.float64) / (RPM_TO_RAD_S if kind == "rpm" else 1.0)
    if values.shape != (contract.action.size,):
        raise ValueError(f"a command holds {values.size} values; the contract has {contract.action.size} actuators")
    return values


def gains_message(contract: Contract) -> Float64MultiArray:
    """The contract's joint gains as ``Float64MultiArray`` ``[2, J]``: Kp (N m/rad) then Kd (N m s/rad) per joint.

    Raises:
        ContractError: ``extra.impedance`` lacks finite, non-negative stiffness or damping for every joint.
    """
    kp = impedance_stiffness(contract, len(contract.action.names))
    impedance = contract.extra.get("impedance", {})
    raw = impedance.get("damping_nms_per_rad") if isinstance(impedance, dict) else None
    try:
        kd = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        kd = np.zeros(0)
    if kd.shape != kp.shape or not (np.isfinite(kd).all() and (kd >= 0).all()):
        raise ContractError(
            f"gains_topic needs extra.impedance.damping_nms_per_rad with {kp.size} finite values >= 0 in the contract"
        )
    msg = Float64MultiArray(data=[float(v) for v in np.concatenate((kp, kd))])
    msg.layout.dim = [
        MultiArrayDimension(label="gain", size=2, stride=2 * kp.size),
        MultiArrayDimension(label="joint", size=kp.size, stride=kp.size),
    ]
    return msg
