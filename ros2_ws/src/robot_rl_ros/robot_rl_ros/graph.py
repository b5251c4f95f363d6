"""Start the node graph of a launch file in one process, from the same YAML parameter file (``robot-rl deploy``).

The parameter file has the layout ``ros2 launch`` passes to nodes::

    policy_node:
      ros__parameters: {model_path: ..., watchdog_s: 0.1, ...}
    sim_robot_node:
      ros__parameters: {task: quadrotor-hover, ...}

:func:`run_graph` creates ``policy_node`` (and ``sim_robot_node`` with ``sim=True``) with those parameters, drives the
policy node through configure and activate, and spins every node on one executor until ``duration_s`` has passed
(or Ctrl-C). The nodes talk over real DDS, exactly as when ``sim.launch.py`` starts them as separate processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rclpy
import yaml
from lifecycle_msgs.msg import State as StateMsg
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from robot_rl_ros.policy_node import PolicyNode
from robot_rl_ros.spin import check_executor, make_executor


class DeployError(ValueError):
    """The parameter file or a lifecycle transition failed; the message says which and why."""


@dataclass
class GraphResult:
    """What a run of the graph did.

    Attributes:
        commands: Commands the policy node published.
        rejected: Messages the policy node rejected.
        fault: The policy node's fault at the end (``""``: none).
        sim: The simulated robot's figures (steps, crashes, steps with no new command, rejected commands, position
            errors), if simulated.
        recorded: Messages written to the recording.
    """

    commands: int
    rejected: int
    fault: str
    sim: dict[str, Any] = field(default_factory=dict)
    recorded: int = 0


def read_params(path: Path) -> dict[str, dict[str, Any]]:
    """``{node_name: {parameter: value}}`` from a ``ros__parameters`` YAML file, with errors naming the file."""
    if not path.is_file():
        raise DeployError(f"parameter file '{path}' does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DeployError(f"parameter file '{path}' is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise DeployError(f"parameter file '{path}' must hold a mapping of node names")
    out: dict[str, dict[str, Any]] = {}
    for node, section in data.items():
        if not isinstance(section, dict) or not isinstance(section.get("ros__parameters"), dict):
            raise DeployError(f"parameter file '{path}': '{node}' needs a 'ros__parameters' mapping")
        out[str(node).lstrip("/")] = section["ros__parameters"]
    if "policy_node" not in out:
        raise DeployError(f"parameter file '{path}' has no 'policy_node' section")
    return out


def _overrides(values: dict[str, Any]) -> list[Parameter]:
    return [Parameter(k, value=v) for k, v in values.items()]


def run_graph(
    params: dict[str, dict[str, Any]],
    sim: bool,
    duration_s: float,
    namespace: str = "",
    activate: bool = True,
    record: Path | None = None,
    executor_kind: str = "single",
) -> GraphResult:
    """Run the graph for ``duration_s`` seconds (see the module docstring); with ``record``, the policy node's
    inputs, commands and faults go to that MCAP file (``robot_rl_ros.recording``). ``executor_kind``: see
    :mod:`robot_rl_ros.spin`.

    Raises:
        DeployError: The policy node refused to configure (wrong or corrupt model, contract mismatch), or the
            executor is unknown.
    """
    try:
        check_executor(executor_kind)  # before rclpy.init: nothing to undo
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    owns_context = not rclpy.ok()
    if owns_context:
        rclpy.init()
    executor = make_executor(executor_kind)
    policy = PolicyNode(namespace=namespace, parameter_overrides=_overrides(params["policy_node"]))
    nodes: list[Any] = [policy]
    simulated = None
    result: GraphResult | None = None
    try:
        if sim:
            from robot_rl_ros.sim_robot_node import SimRobotNode

            try:
                simulated = SimRobotNode(
                    namespace=namespace, parameter_overrides=_overrides(params.get("sim_robot_node", {}))
                )
            except ValueError as exc:
                raise DeployError(f"sim_robot_node refused its parameters: {exc}") from None
            nodes.append(simulated)
        for node in nodes:
            executor.add_node(node)
        if policy.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            raise DeployError(f"policy_node refused to configure (state {policy._state_machine.current_state[1]})")
        if record is not None:
            from robot_rl_ros.recording import Recorder, RecordingError

            assert policy.policy is not None
            model = Path(params["policy_node"]["model_path"])
            try:
                policy.recorder = Recorder(record, model, policy.policy.control_period_s)
            except RecordingError as exc:
                raise DeployError(str(exc)) from None
        if activate and policy.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            raise DeployError("policy_node refused to activate")
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.005)
        result = GraphResult(policy.published, policy.rejected, policy.fault)
        if simulated is not None:
            result.sim = {
                "steps": simulated.steps,
                "crashes": simulated.crashes,
                "stale_ticks": simulated.stale_ticks,
                "rejected": simulated.rejected,
                "position_errors_m": list(simulated.position_errors),
                "control_period_s": simulated.contract.control_period_s,
                "episodes_succeeded": list(simulated.episodes),
            }
        if policy.tank_state is not None:
            result.sim["tank_j"] = policy.tank_state[0]
        if policy._state_machine.current_state[0] == StateMsg.PRIMARY_STATE_ACTIVE:
            policy.trigger_deactivate()
        return result
    except BaseException:
        if policy.recorder is not None:
            policy.recorder.abort()
            policy.recorder = None
        raise
    finally:
        if policy.recorder is not None:
            policy.recorder.close()
            if result is not None:
                result.recorded = policy.recorder.count
        for node in nodes:
            executor.remove_node(node)
            node.destroy_node()
        executor.shutdown()
        if owns_context:
            rclpy.try_shutdown()
