"""Check an integrator's description of the real robot against a policy's contract, before anything moves.

A robot description is a small mapping (usually ``robot.yaml``) of what the integrator knows about the machine in
front of them; only the keys given are checked, each against the contract's facts::

    robot: crazyflie-2.x                 # contract extra.robot.name
    mass_kg: 0.034                       # extra.robot.mass_kg, within MASS_TOLERANCE (relative)
    actuators: [m1_front_right, ...]     # action.names, in order
    airframe:                            # extra.airframe (multirotors)
      motor_order: [m1_front_right, ...]
      reaction_torque_sign_z: [-1, 1, -1, 1]
      rotor_positions_m: [[0.0325, -0.0325, 0.0], ...]     # within POSITION_TOLERANCE_M each
      max_rpm: 21702                     # scalars within SCALAR_TOLERANCE (relative)
      motor_time_constant_up_s: 0.06
    control_period_s: 0.02               # exact (to 1 us)
    joint_axes:                          # extra.joint_axes (legged robots): each joint's positive axis, trunk frame
      FR_hip_joint: [1, 0, 0]            # within AXIS_TOLERANCE per component; the opposite axis is a flipped sign

A mismatch raises :class:`~policies.runtime.contract.ContractError` naming the field, both values and the
tolerance: a wrong motor order or spin direction flips a multirotor on take-off, so it is refused, not warned about.
Standard library only (numbers are compared in Python).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from policies.runtime.contract import Contract, ContractError

POSITION_TOLERANCE_M = 0.005
"""Largest rotor-position difference accepted, m."""
SCALAR_TOLERANCE = 0.10
"""Largest relative difference accepted for airframe scalars (thrust, speed, time constant, torque ratio)."""
MASS_TOLERANCE = 0.25
"""Largest relative take-off mass difference accepted (decks and batteries vary; see the training ranges)."""
AXIS_TOLERANCE = 0.05
"""Largest per-component difference accepted between a joint's axis on the robot and in the policy (unit vectors)."""
KEYS = ("robot", "mass_kg", "actuators", "airframe", "control_period_s", "joint_axes")


def check_robot(contract: Contract, description: Mapping[str, Any], control_period_s: float | None = None) -> None:
    """Raise :class:`ContractError` naming the first field of ``description`` that contradicts ``contract``.

    ``control_period_s`` is the period the policy will be queried at on this robot (default: the contract's; e.g.
    the ROS 2 node's ``control_rate_hz``): the description's ``control_period_s`` must match it.

    Raises:
        ContractError: An unknown key, a field the contract has no fact for, or a mismatch.
    """
    if not isinstance(description, Mapping):
        raise ContractError(f"a robot description must be a mapping, got {type(description).__name__}")
    unknown = sorted(set(description) - set(KEYS))
    if unknown:
        raise ContractError(f"unknown robot description key(s) {unknown}; valid keys: {list(KEYS)}")
    robot = contract.extra.get("robot", {})
    robot = robot if isinstance(robot, dict) else {"name": robot}
    if "robot" in description and description["robot"] != robot.get("name"):
        raise ContractError(f"robot: the description says '{description['robot']}', the policy was trained for "
                            f"'{robot.get('name')}'")  # fmt: skip
    if "mass_kg" in description:
        _close("mass_kg", description["mass_kg"], robot.get("mass_kg"), MASS_TOLERANCE)
    if "actuators" in description and list(description["actuators"]) != list(contract.action.names):
        raise ContractError(
            f"actuators: the description lists {list(description['actuators'])}, the policy commands "
            f"{list(contract.action.names)} in this order"
        )
    if "control_period_s" in description:
        period = _number("control_period_s", description["control_period_s"])
        run = contract.control_period_s if control_period_s is None else control_period_s
        if abs(period - run) > 1e-6:
            setting = "" if control_period_s is None else f" and is set to run at {run:g} s"
            raise ContractError(
                f"control_period_s: the robot runs at {period:g} s, the policy was trained at "
                f"{contract.control_period_s:g} s{setting}"
            )
    if "airframe" in description:
        _check_airframe(description["airframe"], contract.extra.get("airframe"))
    if "joint_axes" in description:
        _check_joint_axes(description["joint_axes"], contract.extra.get("joint_axes"))


def _sections(key: str, given: Any, trained: Any, robots: str) -> None:
    """Refuse a description section ``key`` the contract has no facts for, or that is not a mapping."""
    if not isinstance(trained, dict):
        raise ContractError(f"{key}: the policy's contract has no {key} section (not a {robots} policy)")
    if not isinstance(given, Mapping):
        raise ContractError(f"{key} must be a mapping, got {type(given).__name__}")


def _check_joint_axes(given: Any, trained: Any) -> None:
    _sections("joint_axes", given, trained, "legged")
    for joint, axis in given.items():
        where = f"joint_axes.{joint}"
        if joint not in trained:
            raise ContractError(f"{where}: the policy has no joint '{joint}' (it has {list(trained)})")
        if not isinstance(axis, list | tuple) or len(axis) != 3:
            raise ContractError(f"{where} must be [x, y, z], got {axis!r}")
        a = [_number(where, x) for x in axis]
        b = [float(x) for x in trained[joint]]
        if all(abs(x - y) <= AXIS_TOLERANCE for x, y in zip(a, b, strict=True)):
            continue
        flipped = all(abs(x + y) <= AXIS_TOLERANCE for x, y in zip(a, b, strict=True))
        why = "the joint's sign is flipped in the driver" if flipped else "another axis"
        raise ContractError(
            f"{where}: the robot's joint turns positive about {a} (trunk frame, at 0 rad), the policy's about {b}: "
            f"{why}"
        )


def _check_airframe(given: Any, trained: Any) -> None:
    _sections("airframe", given, trained, "multirotor")
    for key, value in given.items():
        where = f"airframe.{key}"
        if key not in trained:
            raise ContractError(f"{where}: the contract has no such fact (it has {sorted(trained)})")
        fact = trained[key]
        if key == "rotor_positions_m":
            rows = list(value)
            if len(rows) != len(fact):
                raise ContractError(f"{where}: {len(rows)} rotors described, the policy was trained with {len(fact)}")
            for i, (a, b) in enumerate(zip(rows, fact, strict=True)):
                if len(a) != len(b) or any(
                    abs(_number(where, x) - y) > POSITION_TOLERANCE_M for x, y in zip(a, b, strict=True)
                ):
                    raise ContractError(
                        f"{where}[{i}]: rotor {i} is at {list(a)} m on the robot, at {[round(y, 4) for y in b]} m in "
                        f"the policy (tolerance {POSITION_TOLERANCE_M} m)"
                    )
        elif isinstance(fact, list):
            if [_plain(x) for x in value] != [_plain(x) for x in fact]:
                raise ContractError(f"{where}: the robot has {list(value)}, the policy was trained with {fact}")
        elif isinstance(fact, int | float) and not isinstance(fact, bool):
            _close(where, value, fact, SCALAR_TOLERANCE)
        elif value != fact:
            raise ContractError(f"{where}: the robot has {value!r}, the policy was trained with {fact!r}")


def _plain(x: Any) -> Any:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else x


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ContractError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _close(where: str, value: Any, fact: Any, tolerance: float) -> None:
    if fact is None:
        raise ContractError(f"{where}: the policy's contract has no such fact")
    v, f = _number(where, value), float(fact)
    if abs(v - f) > tolerance * abs(f):
        raise ContractError(
            f"{where}: the robot has {v:g}, the policy was trained for {f:g} (tolerance {tolerance:.0%})"
        )
