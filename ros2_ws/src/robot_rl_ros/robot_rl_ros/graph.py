"""Start the node graph of a launch file in one process, from the same YAML parameter file (``robot-rl deploy``).

The parameter file has the layout ``ros2 launch`` passes to nodes::

    policy_node:
      ros__parameters: {model_path: ..., watchdog_s: 0.1, ...}
    sim_robot_node:
      ros__parameters: {task: quadrotor-hover, ...}

:func:`run_graph` creates ``policy_node`` (and ``sim_robot_node`` with ``sim=True``) with those parameters, drives the
policy node through configure and activate, and spins every node on one executor until ``duration_s`` has passed
(or Ctrl-C). The nodes talk over real DDS, exactly as when ``sim.launch.py`` starts them as separate processes.

The file is read strictly (:func:`robot_rl_ros.params.read_params`): an unknown node or parameter, or a value of the
wrong type, is refused before any node starts. A recording (``record``) is finished on every way out: the end of
the run, Ctrl-C and SIGTERM (``robot-rl deploy`` turns them into a ``stop`` request) and any error.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rclpy
from lifecycle_msgs.msg import State as StateMsg
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions
from rclpy.validate_namespace import validate_namespace
from robot_rl_ros.params import TABLES, ParamError
from robot_rl_ros.params import read_params as read_param_file
from robot_rl_ros.policy_node import PolicyNode
from robot_rl_ros.spin import bounded_release, check_executor, make_executor


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
            errors, each finished episode's success and the task's episode metrics), if simulated.
        recorded: Messages written to the recording.
    """

    commands: int
    rejected: int
    fault: str
    sim: dict[str, Any] = field(default_factory=dict)
    recorded: int = 0


def read_params(path: Path) -> dict[str, dict[str, Any]]:
    """``{node_name: {parameter: value}}`` from a ``ros__parameters`` YAML file, every value checked
    (:func:`robot_rl_ros.params.read_params`).

    Raises:
        DeployError: Naming the file, the node and the parameter.
    """
    try:
        return read_param_file(path, TABLES)
    except ParamError as exc:
        raise DeployError(str(exc)) from None


def check_namespace(namespace: str) -> None:
    """Refuse a malformed ROS namespace in one line (``rclpy`` would raise deep inside node creation).

    Raises:
        DeployError: Naming the namespace and rcl's reason.
    """
    if not namespace:
        return
    try:
        validate_namespace(namespace if namespace.startswith("/") else f"/{namespace}")
    except Exception as exc:  # rclpy.exceptions.InvalidNamespaceException
        reason = str(exc).splitlines()[0]
        raise DeployError(f"namespace '{namespace}' is not a valid ROS namespace: {reason}") from None


def use_simulated_time(params: dict[str, dict[str, Any]]) -> None:
    """Run the graph of ``params`` on the simulated robot's clock (docs/ros2.md, "Simulated time"): the robot steps
    in lockstep and publishes ``/clock``, and the policy node follows it and steps on its inputs (on its timer it
    would wait for the time to advance, which in lockstep waits for the node). The loop then runs as fast as the
    node answers, whatever the control rate."""
    params.setdefault("sim_robot_node", {}).update(lockstep=True, publish_clock=True)
    params.setdefault("policy_node", {}).update(use_sim_time=True, trigger="input")


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
    episodes: int = 0,
    stop: Callable[[], bool] | None = None,
    release_grace_s: float | None = None,
) -> GraphResult:
    """Run the graph for ``duration_s`` seconds (see the module docstring); with ``record``, the policy node's
    inputs, commands and faults go to that MCAP file (``robot_rl_ros.recording``). ``executor_kind``: see
    :mod:`robot_rl_ros.spin`. With ``sim`` and ``episodes > 0`` the run ends as soon as the simulated robot has
    finished that many episodes (``duration_s`` stays the limit). ``stop() -> True`` ends the run early, checked
    between callbacks: a signal handler sets a flag instead of raising into rclpy's C++ (where an exception
    becomes an unrelated ``RuntimeError``).

    ``release_grace_s``: bound on releasing the nodes, DDS and rclpy's context at the end, s; a release that
    outlasts it ends the **process** with status 1 (:func:`robot_rl_ros.spin.bounded_release`), the recording
    already finished. Only a process that is nothing but this graph passes it (``robot-rl``'s console script);
    ``None`` (in-process callers, tests) leaves the release unbounded.

    Raises:
        DeployError: A parameter, the namespace or the executor is malformed, or the policy node refused to
            configure (wrong or corrupt model, contract mismatch), before anything is recorded.
    """
    try:
        check_executor(executor_kind)  # before rclpy.init: nothing to undo
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    check_namespace(namespace)
    owns_context = not rclpy.ok()
    if owns_context:
        # with a `stop` the caller owns SIGINT / SIGTERM; rclpy's own handlers would invalidate the context first
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO if stop is not None else None)
    executor = make_executor(executor_kind)
    nodes: list[Any] = []
    policy: PolicyNode | None = None
    try:
        try:
            policy = PolicyNode(namespace=namespace, parameter_overrides=_overrides(params["policy_node"]))
            nodes.append(policy)
            if sim:
                from robot_rl_ros.sim_robot_node import SimRobotNode

                nodes.append(
                    SimRobotNode(namespace=namespace, parameter_overrides=_overrides(params.get("sim_robot_node", {})))
                )
        except ValueError as exc:  # ParamError, a task config the simulator refuses
            raise DeployError(str(exc)) from None
        for node in nodes:
            executor.add_node(node)
        if policy.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            raise DeployError(f"policy_node refused to configure (state {policy._state_machine.current_state[1]})")
        if record is not None:
            policy.recorder = _recorder(record, params["policy_node"], policy)
        if activate and policy.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            raise DeployError("policy_node refused to activate")
        end = time.monotonic() + duration_s
        simulated = nodes[1] if sim else None
        while time.monotonic() < end:
            if episodes > 0 and simulated is not None and len(simulated.episodes) >= episodes:
                break
            if stop is not None and stop():
                break
            executor.spin_once(timeout_sec=0.005)
            if policy.recorder is not None:
                policy.recorder.tick()
        result = GraphResult(policy.published, policy.rejected, policy.fault)
        if simulated is not None:
            result.sim = _sim_figures(simulated)
        if policy.tank_state is not None:
            result.sim["tank_j"] = policy.tank_state[0]
        if policy._state_machine.current_state[0] == StateMsg.PRIMARY_STATE_ACTIVE:
            policy.trigger_deactivate()
        if policy.recorder is not None:
            policy.recorder.close()
            result.recorded = policy.recorder.count
        return result
    finally:  # Ctrl-C, SIGTERM, an exception: the recording is finished all the same
        if policy is not None and policy.recorder is not None:
            policy.recorder.close()
        with (
            contextlib.nullcontext() if release_grace_s is None else bounded_release("robot-rl deploy", release_grace_s)
        ):
            for node in nodes:
                executor.remove_node(node)
                node.destroy_node()
            executor.shutdown()
            if release_grace_s is not None:
                # the nodes collected inside the bound, as robot_rl_ros.spin.spin_node collects its node
                nodes.clear()
                policy = simulated = node = None  # node: the loop's last
                gc.collect()
            if owns_context:
                rclpy.try_shutdown()


def _recorder(path: Path, values: dict[str, Any], policy: PolicyNode) -> Any:
    """The recording of ``policy`` (configured) to ``path``."""
    from robot_rl_ros.inputs import LeggedInputs, OdometryInputs
    from robot_rl_ros.recording import Recorder, RecordingError

    assert policy.policy is not None
    target = policy.inputs.target.tolist() if isinstance(policy.inputs, OdometryInputs) else None
    legged = policy.inputs.command_timeout_s if isinstance(policy.inputs, LeggedInputs) else None
    try:
        return Recorder(
            path,
            Path(values["model_path"]),
            policy.policy.control_period_s,
            command_type=policy.p("command_type"),
            target=target,
            velocity_timeout_s=float(policy.p("target_velocity_timeout_s")),
            command_timeout_s=legged,
        )
    except RecordingError as exc:
        raise DeployError(str(exc)) from None


def _sim_figures(simulated: Any) -> dict[str, Any]:
    """The simulated robot's figures for :class:`GraphResult`."""
    return {
        "steps": simulated.steps,
        "crashes": simulated.crashes,
        "stale_ticks": simulated.stale_ticks,
        "rejected": simulated.rejected,
        "position_errors_m": list(simulated.position_errors),
        "control_period_s": simulated.contract.control_period_s,
        "episodes_succeeded": list(simulated.episodes),
        "episode_metrics": list(simulated.episode_metrics),
    }
