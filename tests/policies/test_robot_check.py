"""A description of the real robot checked against a policy's contract: matches pass, every contradiction is
refused naming the field (a swapped motor or spin direction flips a multirotor on take-off)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import sim
from policies.runtime.contract import Contract, ContractError
from policies.runtime.robot_check import check_robot
from tests.conftest import robot_rl

CRAZYFLIE = Path(__file__).resolve().parents[2] / "ros2_ws/src/robot_rl_ros/robots/crazyflie_2x.yaml"


@pytest.fixture(scope="module")
def hover_contract() -> Contract:
    return sim.make("quadrotor-hover", 1, torch.device("cpu")).contract(["policy"])


def test_the_shipped_crazyflie_description_matches_the_hover_contract(hover_contract: Contract) -> None:
    check_robot(hover_contract, yaml.safe_load(CRAZYFLIE.read_text()))


def _mutate(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    *head, last = path.split(".")
    node = out
    for key in head:
        node = node[key]
    node[last] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("airframe.reaction_torque_sign_z", [1, -1, 1, -1], "airframe.reaction_torque_sign_z: the robot has [1, -1"),
        ("airframe.motor_order", ["m1_front_right", "m4_front_left", "m3_rear_left", "m2_rear_right"], "motor_order"),
        ("airframe.rotor_positions_m", [[0.05, -0.05, 0]] * 4, "airframe.rotor_positions_m[0]: rotor 0 is at"),
        ("airframe.max_rpm", 30000, "airframe.max_rpm: the robot has 30000, the policy was trained for 21702"),
        ("actuators", ["a", "b", "c", "d"], "actuators: the description lists ['a', 'b', 'c', 'd']"),
        ("control_period_s", 0.01, "control_period_s: the robot runs at 0.01 s"),
        ("robot", "crazyflie-bl", "robot: the description says 'crazyflie-bl'"),
        ("mass_kg", 0.05, "mass_kg: the robot has 0.05, the policy was trained for 0.027 (tolerance 25%)"),
        ("airframe.propeller", "2-blade", "airframe.propeller: the contract has no such fact"),
        ("battery", "1S", "unknown robot description key(s) ['battery']"),
    ],
)
def test_a_contradiction_is_refused_naming_the_field(
    hover_contract: Contract, path: str, value: Any, message: str
) -> None:
    description = _mutate(yaml.safe_load(CRAZYFLIE.read_text()), path, value)
    with pytest.raises(ContractError) as err:
        check_robot(hover_contract, description)
    assert message in str(err.value)


def test_a_robot_running_the_policy_faster_is_checked_against_the_rate_it_is_set_to(hover_contract: Contract) -> None:
    fast = {"control_period_s": 0.004}
    with pytest.raises(ContractError, match=r"runs at 0.004 s, the policy was trained at 0.02 s$"):
        check_robot(hover_contract, fast)
    check_robot(hover_contract, fast, control_period_s=0.004)  # e.g. policy_node's control_rate_hz: 250
    with pytest.raises(ContractError, match=r"trained at 0.02 s and is set to run at 0.002 s"):
        check_robot(hover_contract, fast, control_period_s=0.002)


def test_a_manipulator_policy_has_no_airframe_to_check() -> None:
    contract = sim.make("panda-reach", 1, torch.device("cpu")).contract(["policy"])
    with pytest.raises(ContractError, match="no airframe section"):
        check_robot(contract, {"airframe": {"max_rpm": 1}})
    check_robot(contract, {"actuators": list(contract.action.names), "control_period_s": 0.04})


def test_inspect_checks_a_robot_description(tmp_path: Path, hover_contract: Contract) -> None:
    from policies.nets import ActorCritic
    from policies.nets.export import export_onnx

    model = ActorCritic(hover_contract.obs_dim, 8, hover_contract.action.size)
    onnx = export_onnx(model, hover_contract, tmp_path)
    ok = robot_rl("inspect", onnx, "--robot", CRAZYFLIE)
    assert ok.returncode == 0 and "every given field matches the contract" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_mutate(yaml.safe_load(CRAZYFLIE.read_text()), "airframe.reaction_torque_sign_z",
                                          [1, -1, 1, -1])))  # fmt: skip
    refused = robot_rl("inspect", onnx, "--robot", bad)
    assert refused.returncode == 2 and "reaction_torque_sign_z" in refused.stderr
