"""The policy node against hostile messages and parameters, over real DDS: nothing malformed feeds the watchdog or
moves a motor, a fault in the control step latches the safe command and shows in the lifecycle, and the integrator's
surface (hover point, stamps, frames, stamped and reliable commands, parameter checks) holds.

Untrained exported policies are enough here (the node's behaviour does not depend on the policy's skill; trained
ones fly in test_policy_node.py), so nothing waits for the training fixtures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from geometry_msgs.msg import PointStamped, PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from robot_rl_ros.graph import read_params
from robot_rl_ros.inputs import LATCHED, OdometryInputs
from robot_rl_ros.messages import MessageError, fill_joint_state, fill_odometry, fill_pose, odometry_signals
from robot_rl_ros.params import ParamError
from robot_rl_ros.policy_node import PolicyNode
from sensor_msgs.msg import JointState

from tests.ros2.rig import PKG, Rig, stamp


@pytest.fixture
def hover_model(untrained_hover: Path) -> Path:
    return untrained_hover


@pytest.fixture
def reach_model(untrained_reach: Path) -> Path:
    return untrained_reach


# ----------------------------------------------------------------------------------------------- multirotor
class Drone:
    """Odometry of a drone hovering at ``position`` (world frame, body twist), stamped when sent."""

    def __init__(self, rig: Rig, position: tuple[float, float, float] = (0.01, 0.0, 0.0)) -> None:
        self.rig, self.position = rig, np.asarray(position)
        self.pub = rig.peer.create_publisher(Odometry, "odom", qos_profile_sensor_data)

    def message(self, kind: str = "good") -> tuple[Odometry, float]:
        msg = Odometry()
        fill_odometry(msg, self.position, np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3))
        msg.header.frame_id, msg.child_frame_id = "world", "base_link"
        age = 0.0
        if kind == "float32-overflow":  # finite as float64, infinite as the float32 the policy reads
            msg.twist.twist.linear.x = 1e39
        elif kind == "nan":
            msg.pose.pose.position.z = math.nan
        elif kind == "stale-stamp":
            age = 1.0
        elif kind == "future-stamp":
            age = -1.0
        elif kind == "unstamped":
            age = math.nan
        elif kind == "world-frame-twist":
            msg.child_frame_id = "world"
        elif kind == "no-child-frame":
            msg.child_frame_id = ""
        elif kind in ("quaternion-1e-5", "quaternion-50"):
            msg.pose.pose.orientation.w = 1e-5 if kind == "quaternion-1e-5" else 50.0
        return msg, age

    def send(self, kind: str = "good") -> None:
        msg, age = self.message(kind)
        if not math.isnan(age):
            stamp(msg, self.rig.peer, age)
        self.pub.publish(msg)


HOSTILE_ODOMETRY = [
    "float32-overflow", "nan", "stale-stamp", "future-stamp", "unstamped", "world-frame-twist", "no-child-frame",
    "quaternion-1e-5", "quaternion-50",
]  # fmt: skip


@pytest.mark.parametrize("kind", HOSTILE_ODOMETRY)
def test_hostile_odometry_is_refused_never_feeds_the_watchdog_and_the_fault_shows_in_the_lifecycle(
    hover_model: Path, ros: str, kind: str
) -> None:
    rig = Rig("quadrotor_sim.yaml", hover_model, ros, watchdog_s=0.3, safe_mode="zero", trigger="input")
    rig.listen()
    drone = Drone(rig)
    rig.start()
    rig.spin_until_commanding(drone.send, every=0.02)  # DDS discovery takes longer on a loaded machine
    assert rig.node.fault == "" and rig.commands
    # Counted from here: on a loaded machine a good message can arrive older than max_input_age_s and is rightly
    # refused (once in CI: 0.388 s against 0.25 s).
    before = rig.node.rejected
    rig.spin(0.8, lambda: drone.send(kind))  # only hostile odometry now
    assert rig.node.rejected >= before + 20, rig.node.rejected
    assert rig.node.fault == "watchdog" and rig.state() == "inactive"  # `ros2 lifecycle get` shows it
    published = rig.node.published
    rig.spin(0.3, lambda: drone.send(kind))
    assert rig.node.published > published  # the node keeps running: the safe command every period
    assert rig.values()[-1] == [0.0] * 4
    rig.close()


def test_the_node_waits_for_fresh_odometry_after_activation_instead_of_sending_a_blind_command(
    hover_model: Path, ros: str
) -> None:
    rig = Rig("quadrotor_sim.yaml", hover_model, ros, watchdog_s=0.1)
    rig.listen()
    drone = Drone(rig)
    rig.start()
    rig.spin(0.5)  # the robot's odometry has not started: nothing is sent, the watchdog is not armed
    assert not rig.commands and rig.node.fault == "waiting for input" and rig.state() == "active"
    rig.spin(0.5, drone.send)
    assert len(rig.commands) >= 10 and rig.node.fault == ""
    rig.close()


def test_an_exception_in_the_control_step_latches_the_safe_command_and_the_node_keeps_running(
    hover_model: Path, ros: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Rig("quadrotor_sim.yaml", hover_model, ros, watchdog_s=0.5, safe_mode="zero")
    rig.listen()
    drone = Drone(rig)
    rig.start()
    rig.spin_until_commanding(drone.send, every=0.02)
    assert rig.node.policy is not None and rig.node.fault == ""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError("onnxruntime could not allocate")

    monkeypatch.setattr(rig.node.policy, "run_obs", broken)
    rig.spin(0.3, drone.send)
    assert rig.node.fault.startswith("internal error in the control step (MemoryError")
    assert rig.state() == "inactive" and rig.values()[-1] == [0.0] * 4
    published = rig.node.published
    rig.spin(0.2, drone.send)
    assert rig.node.published > published  # still sending the safe command
    monkeypatch.undo()
    assert rig.node.trigger_activate() == TransitionCallbackReturn.SUCCESS  # the operator re-activates
    rig.spin(0.3, drone.send)
    assert rig.node.fault == "" and rig.state() == "active" and max(rig.values()[-1]) > 0.0
    rig.close()


def test_the_hover_point_parameter_and_topic_move_the_target_within_the_training_envelope(
    hover_model: Path, ros: str
) -> None:
    """A motion-capture frame with its origin on the floor: hover 1 m up. A new target farther than the training
    envelope (0.5 m) from the drone is refused; a nearer one is taken."""
    rig = Rig("quadrotor_sim.yaml", hover_model, ros, target_position_m=[0.0, 0.0, 1.0], target_topic="target")
    rig.listen()
    drone = Drone(rig, (0.0, 0.0, 1.0))
    targets = rig.peer.create_publisher(PointStamped, "target", LATCHED)
    rig.start()
    rig.spin(0.3, drone.send)
    assert rig.node._signals is not None and np.abs(rig.node._signals["pos_w"]).max() < 1e-6  # at the hover point
    assert isinstance(rig.node.inputs, OdometryInputs)
    far = stamp(PointStamped(), rig.peer)
    far.header.frame_id, far.point.z = "world", 3.0  # the odometry's frame (quadrotor_sim.yaml: frame_id world)
    targets.publish(far)
    rig.spin(0.3, drone.send)
    assert rig.node.inputs.targets_refused == 1 and rig.node.inputs.target.tolist() == [0.0, 0.0, 1.0]
    near = stamp(PointStamped(), rig.peer)
    near.header.frame_id, near.point.x, near.point.z = "world", 0.2, 1.1
    targets.publish(near)
    rig.spin(0.3, drone.send)
    np.testing.assert_allclose(rig.node._signals["pos_w"][0], [-0.2, 0.0, -0.1], atol=1e-6)
    rig.close()


def test_a_velocity_setpoint_moves_the_velocity_the_policy_sees_until_it_times_out(hover_model: Path, ros: str) -> None:
    """A commander flying the target along a path sends its velocity too: ``lin_vel_w`` is the drone's velocity minus
    the target's, for odometry stamped within ``target_velocity_timeout_s`` of the setpoint, then 0 again; a setpoint
    too fast, turning (yaw rate) or in another frame is refused and changes nothing."""
    rig = Rig(
        "quadrotor_sim.yaml",
        hover_model,
        ros,
        target_topic="target",
        target_velocity_topic="target_velocity",
        target_velocity_timeout_s=0.3,
        max_target_speed_m_s=0.5,
    )
    drone = Drone(rig, (0.0, 0.0, 0.0))  # hovering still
    velocities = rig.peer.create_publisher(TwistStamped, "target_velocity", qos_profile_sensor_data)
    rig.start()
    rig.spin(0.3, drone.send)

    def setpoint(x: float, frame: str = "world", yaw_rate: float = 0.0) -> TwistStamped:
        msg = stamp(TwistStamped(), rig.peer)
        msg.header.frame_id, msg.twist.linear.x, msg.twist.angular.z = frame, x, yaw_rate
        return msg

    before = rig.node.rejected
    for bad in (setpoint(0.8), setpoint(0.2, frame="base_link"), setpoint(0.2, yaw_rate=0.1)):
        velocities.publish(bad)
        rig.spin(0.1, drone.send)
        assert rig.node._signals is not None and np.abs(rig.node._signals["lin_vel_w"]).max() < 1e-6
    assert rig.node.rejected >= before + 3, rig.node.rejected  # (+ a good odometry late on a loaded machine)
    velocities.publish(setpoint(0.2))
    rig.spin(0.1, drone.send)
    np.testing.assert_allclose(rig.node._signals["lin_vel_w"][0], [-0.2, 0.0, 0.0], atol=1e-6)
    rig.spin(0.5, drone.send)  # the commander went quiet: the target holds still again
    assert np.abs(rig.node._signals["lin_vel_w"]).max() < 1e-6
    assert rig.node.fault == ""
    rig.close()


def test_a_velocity_setpoint_without_its_position_topic_is_refused(hover_model: Path, ros: str) -> None:
    rig = Rig("quadrotor_sim.yaml", hover_model, ros, target_velocity_topic="target_velocity")
    assert rig.node.trigger_configure() == TransitionCallbackReturn.FAILURE  # logged: "... needs target_topic ..."
    rig.close()


def test_stamped_named_reliable_commands_reach_a_driver_subscribing_with_default_qos(
    hover_model: Path, ros: str
) -> None:
    # A generous watchdog: this test is about the message, and a 2-core CI host once left a 0.1 s gap in the spin.
    rig = Rig(
        "quadrotor_sim.yaml",
        hover_model,
        ros,
        command_type="joint_state",
        command_reliability="reliable",
        watchdog_s=1.0,
    )
    rig.listen(JointState, 10)  # ROS 2's default QoS: reliable, keep last 10
    drone = Drone(rig)
    rig.start()
    assert rig.node.out is not None
    sent: list[np.ndarray] = []
    publish = rig.node.out.publish
    rig.node.out.publish = lambda c: (sent.append(np.array(c)), publish(c))[1]  # type: ignore[method-assign]
    rig.spin_until_commanding(drone.send, every=0.02, count=10)
    assert len(rig.commands) >= 10 and rig.node.fault == "", (len(rig.commands), rig.node.fault)
    msg = rig.commands[-1]
    assert list(msg.name) == ["m1_front_right", "m2_rear_right", "m3_rear_left", "m4_front_left"]
    assert msg.header.stamp.sec > 0 and not msg.position and not msg.effort
    rad_s = np.asarray(msg.velocity)  # rotor speeds in rad/s (REP 103), the contract's RPM x 2 pi / 60
    assert any(np.allclose(rad_s, c * 2 * math.pi / 60, rtol=1e-6) for c in sent[-5:]), (rad_s, sent[-5:])
    rig.close()


# ---------------------------------------------------------------------------------------------- manipulator
class Arm:
    """A Panda at rest: joint states (stamped), the tool pose and a latched goal."""

    def __init__(self, rig: Rig, model: Path) -> None:
        from policies.runtime import load_contract

        c = load_contract(model)
        self.rig, self.joints = rig, [n for n in c.joint_names if n.startswith("panda_joint")]
        self.q = np.asarray(c.default_pose[: len(self.joints)], dtype=np.float64)
        self.js = rig.peer.create_publisher(JointState, "joint_states", qos_profile_sensor_data)
        self.tcp = rig.peer.create_publisher(PoseStamped, "tcp_pose", qos_profile_sensor_data)
        goal = PoseStamped()
        goal.header.frame_id = "panda_link0"  # the robot's base frame (panda_reach_sim.yaml: frame_id)
        fill_pose(goal, np.array([0.35, 0.05, 0.45]), np.diag([1.0, -1.0, -1.0]))
        rig.peer.create_publisher(PoseStamped, "goal_pose", LATCHED).publish(stamp(goal, rig.peer))

    def send(self, kind: str = "good") -> None:
        if kind != "no-tool-pose":
            tcp = PoseStamped()
            tcp.header.frame_id = "panda_link0"
            fill_pose(tcp, np.array([0.3, 0.0, 0.5]), np.diag([1.0, -1.0, -1.0]))
            self.tcp.publish(stamp(tcp, self.rig.peer))
        msg = JointState()
        fill_joint_state(msg, self.joints, self.q, np.zeros(len(self.joints)))
        if kind == "duplicate-name":  # panda_joint1 twice: which value is the robot's?
            msg.name = [*msg.name, self.joints[0]]
            msg.position = [*msg.position, 2.5]
            msg.velocity = [*msg.velocity, 0.0]
        elif kind == "float32-overflow":
            msg.velocity = [1e39, *msg.velocity[1:]]
        elif kind == "stale-stamp":
            self.js.publish(stamp(msg, self.rig.peer, 1.0))
            return
        self.js.publish(stamp(msg, self.rig.peer))


@pytest.mark.parametrize("kind", ["duplicate-name", "float32-overflow", "stale-stamp", "no-tool-pose"])
def test_hostile_joint_states_are_refused_and_the_tank_never_sees_them(reach_model: Path, ros: str, kind: str) -> None:
    """A float32-overflowing velocity used to raise inside the energy tank, outside the loop's error handling: the
    node died with no safe command. Now it is refused at the door, the watchdog trips and the node holds. Joint
    states whose tool pose has fallen silent are stale too (a camera's images likewise)."""
    rig = Rig("panda_reach_sim.yaml", reach_model, ros, watchdog_s=0.3)
    rig.listen()
    arm = Arm(rig, reach_model)
    rig.start()
    rig.spin_until_commanding(arm.send, every=0.04)
    # Until DDS has matched both topics a joint state may come without its tool pose and be refused (seen once under
    # CI load): count from when the node commands.
    before = rig.node.rejected
    rig.spin(0.4, arm.send, every=0.04)
    assert rig.node.fault == "" and rig.commands  # (a good message late on a loaded machine is refused: not counted)
    before = rig.node.rejected
    held = rig.values()[-1]
    rig.spin(0.8, lambda: arm.send(kind), every=0.04)
    assert rig.node.rejected >= before + 10 and rig.node.fault == "watchdog" and rig.state() == "inactive"
    published = rig.node.published
    rig.spin(0.3, lambda: arm.send(kind), every=0.04)
    assert rig.node.published > published and rig.values()[-1] == held  # safe_mode hold: the last set-point
    rig.close()


# --------------------------------------------------------------------------------------------- parameters
def test_unknown_and_mistyped_parameters_are_refused_before_the_node_starts(hover_model: Path, ros: str) -> None:
    good = {**read_params(PKG / "config" / "quadrotor_sim.yaml")["policy_node"], "model_path": str(hover_model)}

    def node(**values: Any) -> PolicyNode:
        params = [Parameter(k, value=v) for k, v in {**good, **values}.items()]
        return PolicyNode(namespace=ros, parameter_overrides=params)

    with pytest.raises(ParamError, match=r"policy_node: unknown parameter 'watchdg_s'; did you mean watchdog_s\?"):
        node(watchdg_s=0.05)
    with pytest.raises(ParamError, match=r"parameter 'watchdog_s' is str '0.05'; expected a number"):
        node(watchdog_s="0.05")
    with pytest.raises(ParamError, match=r"parameter 'passivity' is int 1; expected true or false"):
        node(passivity=1)
    with pytest.raises(ParamError, match=r"parameter 'target_position_m' must hold finite numbers"):
        node(target_position_m=[0.0, math.inf, 1.0])
    n = node(watchdog_s=1, target_position_m=[0, 0, 1])  # integers where numbers are expected: as ROS 2 reads YAML
    assert n.p("watchdog_s") == 1.0 and n.p("target_position_m") == [0.0, 0.0, 1.0]
    n.destroy_node()


def test_a_parameter_file_reads_numbers_as_ros_2_does_and_refuses_duplicates(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("policy_node:\n  ros__parameters:\n    model_path: m.onnx\n    watchdog_s: 1.0e9\n")
    assert read_params(f)["policy_node"]["watchdog_s"] == 1e9  # YAML 1.1 reads "1.0e9" as text; ROS 2 as a number
    f.write_text("policy_node:\n  ros__parameters:\n    max_rate: 1.0\n    max_rate: -1.0\n")
    from robot_rl_ros.graph import DeployError

    with pytest.raises(DeployError, match="key 'max_rate' is given twice"):
        read_params(f)


# ------------------------------------------------------------------------------------------------- messages
def test_quaternions_that_are_not_unit_are_refused_not_normalised() -> None:
    msg = Odometry()
    fill_odometry(msg, np.zeros(3), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3))
    for w in (1e-5, 50.0, 1.02):
        msg.pose.pose.orientation.w = w
        with pytest.raises(MessageError, match="a rotation needs a unit quaternion"):
            odometry_signals(msg, [0.0, 0.0, 0.0])
    msg.pose.pose.orientation.w = 1.0 + 1e-7  # float round-off of a driver's unit quaternion
    assert odometry_signals(msg, [0.0, 0.0, 0.0])["rot_mat"][0, 0] == pytest.approx(1.0)
