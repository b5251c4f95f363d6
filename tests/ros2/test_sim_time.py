"""Simulated time over real DDS: ``sim_robot_node`` with ``publish_clock`` publishes ``/clock`` and stamps with it; a
policy node started with ``use_sim_time`` runs its stamp checks, watchdog and recording on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builtin_interfaces.msg import Time as TimeMsg
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from robot_rl_ros.graph import run_graph
from robot_rl_ros.messages import MessageError, check_header
from robot_rl_ros.recording import read_log
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float64MultiArray, Header

from tests.ros2.test_policy_node import PKG, Rig, params

CLOCK = pytest.mark.xdist_group("ros2-closed-loop")
"""/clock is one topic for the whole DDS domain (a namespace does not move it): every test that publishes it or runs a
node on it is in this group, so that they run one after the other on one worker (the closed loops over DDS, the
hover flights on simulated time among them, and the imitation tests' loops over DDS)."""


def _ns(stamp: TimeMsg) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


@CLOCK
def test_a_lockstep_simulation_publishes_its_clock_and_the_node_runs_on_it(
    untrained_hover: Path, ros: str, tmp_path: Path
) -> None:
    """Each period stepped advances the simulated time by exactly one period, whatever the machine took; the node's
    clock is that time (its recording's log times lie among the odometry's stamps), and it refuses nothing."""
    config = params(untrained_hover, use_sim_time=True, trigger="input", watchdog_s=0.1)
    config["sim_robot_node"].update(lockstep=True, publish_clock=True, episode_length_s=1.0)
    started = time.time_ns()
    result = run_graph(config, sim=True, duration_s=60.0, namespace=ros, record=tmp_path / "run.mcap", episodes=2)
    assert result.fault == "" and result.rejected == 0 and result.sim["rejected"] == 0, result
    steps, period_ns = result.sim["steps"], round(result.sim["control_period_s"] * 1e9)
    assert steps >= 20 and result.sim["stale_ticks"] == 0, result.sim

    log = read_log(tmp_path / "run.mcap")
    stamps = np.array([_ns(m.header.stamp) for _, topic, m in log.messages if topic == "/odom"])
    commands = np.array([t for t, topic, _ in log.messages if topic == "/command"])
    assert stamps[0] >= started and len(commands) >= steps - 1
    # one period per step stepped, 0 between repeats of the start before the first command; nothing else
    assert set(np.diff(stamps).tolist()) <= {0, period_ns}, sorted(set(np.diff(stamps).tolist()))
    assert stamps[-1] - stamps[0] <= steps * period_ns
    # the node logs on its own clock: the simulated time (a monotonic clock would read the host's uptime)
    assert stamps[0] <= commands.min() and commands.max() <= stamps[-1] + period_ns, (stamps[[0, -1]], commands)


@CLOCK
def test_a_node_on_simulated_time_refuses_inputs_until_the_clock_comes(untrained_hover: Path, ros: str) -> None:
    rig = Rig(untrained_hover, ros, use_sim_time=True)
    assert rig.node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert rig.node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    rig.spin(0.5, rig.hover_odom)  # stamped with the wall clock, and no /clock published
    assert rig.node.rejected > 0 and rig.node.published == 0 and rig.node.fault == "waiting for input"
    rig.close()
    header = Header()
    header.stamp.sec = 1_700_000_000
    with pytest.raises(MessageError, match=r"^odometry arrived before the node's clock started: use_sim_time .*/clock"):
        check_header(header, 0, 0.25, "odometry")


def test_the_simulated_robot_that_publishes_the_clock_does_not_follow_one(ros: str) -> None:
    from robot_rl_ros.sim_robot_node import SimRobotNode

    values: dict[str, Any] = {"publish_clock": True, "use_sim_time": True}
    with pytest.raises(ValueError, match=r"publishes /clock \(publish_clock: true\) and cannot also follow it"):
        SimRobotNode(namespace=ros, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])


@CLOCK
def test_in_lockstep_on_its_own_clock_a_command_steps_the_world_at_once(ros: str) -> None:
    """With ``publish_clock`` the period is stepped inside the command's callback (as fast as the controller
    answers); on the wall clock the command waits for the node's next tick (at most one period per period)."""
    from robot_rl_ros.sim_robot_node import SimRobotNode

    for clock in (True, False):
        values: dict[str, Any] = {"lockstep": True, "publish_clock": clock}
        robot = SimRobotNode(namespace=ros, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
        try:
            hover = Float64MultiArray(data=[float(robot.contract.action.offset[0])] * 4)
            for k in range(3):
                robot._on_command(hover)  # as the executor delivers it, without spinning the node's timer
                assert robot.steps == (k + 1 if clock else 0) and robot.stale_ticks == 0, (clock, k, robot.steps)
        finally:
            robot.destroy_node()


@CLOCK
def test_deploy_sim_time_runs_the_graph_on_the_simulated_clock(
    untrained_hover: Path, ros: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from robot_rl.cli import main

    argv = ["deploy", "--params", str(PKG / "config" / "quadrotor_sim.yaml"), "--sim", "--sim-time"]
    argv += ["--model", str(untrained_hover), "--episodes", "2", "--duration", "60", "--namespace", ros]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "0 rejected messages, fault: none" in out and " s simulated in " in out, out


@CLOCK
def test_a_clock_that_goes_back_latches_a_fault_and_the_safe_command(untrained_hover: Path, ros: str) -> None:
    """A simulator that restarts its /clock takes the node's time back: the watchdog and the fade-in would measure
    negative ages, so the node holds the robot (safe command, latched fault) until it is activated again."""
    rig = Rig(untrained_hover, ros, use_sim_time=True, trigger="input")
    clock = rig.peer.create_publisher(Clock, "/clock", QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE))
    t_ns = [1_000_000_000_000]

    def advance(step_s: float) -> None:  # the simulator's clock, then its odometry stamped with it
        t_ns[0] += round(step_s * 1e9)
        stamp = Time(nanoseconds=t_ns[0]).to_msg()
        clock.publish(Clock(clock=stamp))
        rig.executor.spin_once(timeout_sec=0.01)
        msg = rig.odom_msg()
        msg.header.stamp = stamp
        rig.odom.publish(msg)

    assert rig.node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert rig.node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    rig.spin(1.0, lambda: advance(0.02), every=0.02)
    assert rig.node.fault == "" and rig.node.published > 10 and max(rig.commands[-1]) > 1000.0
    t_ns[0] -= 10_000_000_000  # the simulator starts again, 10 s earlier
    rig.spin(0.3, lambda: advance(0.02), every=0.02)
    assert rig.node.fault.startswith("the node's clock went back 9.9"), rig.node.fault
    assert rig.commands[-1] == [0.0, 0.0, 0.0, 0.0] and rig.state() == "inactive"
    rig.close()
