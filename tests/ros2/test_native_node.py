"""The native ROS 2 node (``robot-rl export ros2-node``: rcl + the generated C) over real DDS: the same commands as
``policies.runtime`` on the same odometry, and the safety rules of the Python node (bad messages, watchdog, e-stop)."""

from __future__ import annotations

import math
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rclpy
import yaml
from nav_msgs.msg import Odometry
from rclpy.qos import qos_profile_sensor_data
from robot_rl_ros.messages import fill_odometry, odometry_signals
from robot_rl_ros.policy_node import ESTOP_QOS
from std_msgs.msg import Bool, Float64MultiArray

from firmware_export.graph import UnsupportedModelError
from firmware_export.ros2_node import build_ros2_node
from policies.runtime import OnnxPolicy
from robot_rl.cli import main

TOLERANCE = 1e-5
"""Largest difference to ``policies.runtime``, normalised command units (as the firmware export verifies)."""


@pytest.fixture(scope="module")
def native(trained_hover: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained hover policy as a native node, built once for this module by the CLI."""
    out = tmp_path_factory.mktemp("native") / "node"
    assert main(["export", "ros2-node", str(trained_hover.onnx), "--out", str(out), "--vectors", "100"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [".robot-rl-export", "CMakeLists.txt", "package.xml", "policy", "rr_policy_node", "src"]
    return out


class Peer:
    """The robot's side in this process: odometry and e-stop out, commands in."""

    def __init__(self, namespace: str) -> None:
        self.node = rclpy.create_node("robot", namespace=namespace)
        self._odom = self.node.create_publisher(Odometry, "odom", qos_profile_sensor_data)
        self.estop = self.node.create_publisher(Bool, "estop", ESTOP_QOS)
        self.commands: list[np.ndarray] = []
        self.node.create_subscription(
            Float64MultiArray, "command", lambda m: self.commands.append(np.array(m.data)), qos_profile_sensor_data
        )

    def publish(self, msg: Odometry, age_s: float = 0.0) -> None:
        """Send ``msg`` stamped now (minus ``age_s``), as a state estimator stamps its measurement."""
        stamp = self.node.get_clock().now().nanoseconds - round(age_s * 1e9)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        self._odom.publish(msg)

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.005)

    def wait_for(self, count: int, timeout: float) -> bool:
        """Spin until ``count`` commands have arrived or ``timeout`` seconds passed; whether they did."""
        return self.wait_until(lambda: len(self.commands) >= count, timeout)

    def wait_until(self, done: Callable[[], bool], timeout: float, odometry: Odometry | None = None) -> bool:
        """Spin until ``done()`` or ``timeout`` seconds passed, sending ``odometry`` every 30 ms if given.

        The tests wait for what they count, never for a fixed time: a loaded CI worker has stalled this process for
        seconds, and a fixed-time window then holds fewer messages than the node sent.
        """
        end, next_send = time.monotonic() + timeout, 0.0
        while not done() and time.monotonic() < end:
            if odometry is not None and time.monotonic() >= next_send:
                self.publish(odometry)
                next_send = time.monotonic() + 0.03
            rclpy.spin_once(self.node, timeout_sec=0.005)
        return done()


@pytest.fixture
def ros() -> Iterator[Callable[[], Peer]]:
    rclpy.init()
    try:
        yield lambda: Peer(f"n{uuid.uuid4().hex[:8]}")
    finally:
        rclpy.try_shutdown()


def start(
    node_dir: Path, peer: Peer, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    ns = peer.node.get_namespace()
    cmd = [str(node_dir / "rr_policy_node"), *args, "--stats", str(tmp_path / "stats.yaml"), "--ros-args"]
    return subprocess.Popen([*cmd, "-r", f"__ns:={ns}"], stderr=subprocess.PIPE, text=True, env=env)


def stop(proc: subprocess.Popen[str], tmp_path: Path) -> tuple[dict[str, Any], str]:
    """Ctrl-C the node; its statistics and everything it wrote to stderr.

    stderr is read while the node exits (``communicate``), never after: a node blocked on a full pipe never exits.
    The node bounds its own shutdown (``SHUTDOWN_GRACE_S``, 5 s); 20 s without an exit is a failure that says whether
    the loop had ended (statistics written) and what the node printed.
    """
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        written = (tmp_path / "stats.yaml").exists()
        why = f"the node ran on 20 s after Ctrl-C (statistics written: {written}); stderr:\n{err}"
        raise AssertionError(why) from None
    assert proc.returncode == 0, err
    return yaml.safe_load((tmp_path / "stats.yaml").read_text()), err


def odometry(k: int) -> Odometry:
    """A drone drifting around its hover point (k-th sample): every signal moves; world frame, body twist."""
    msg = Odometry()
    msg.header.frame_id, msg.child_frame_id = "world", "base_link"
    angle = 0.2 * math.sin(0.3 * k)
    quat = np.array([math.cos(angle / 2), math.sin(angle / 2) * 0.6, math.sin(angle / 2) * 0.8, 0.0])
    fill_odometry(
        msg,
        np.array([0.1 * math.sin(0.2 * k), -0.05, 0.02 * k % 0.3]),
        quat,
        np.array([0.3 * math.cos(0.2 * k), 0.1, -0.05]),
        np.array([0.4, -0.2 * math.sin(k), 0.1]),
    )
    return msg


def connect(peer: Peer, first: Odometry) -> int:
    """Send ``first`` every 100 ms until a command comes back; returns how many copies the node stepped on."""
    end = time.monotonic() + 30.0
    while not peer.commands and time.monotonic() < end:
        peer.publish(first)
        peer.spin(0.1)
    assert peer.commands, "the native node never answered"
    peer.spin(0.3)  # commands of copies still in flight
    return len(peer.commands)


def test_the_native_node_commands_what_the_runtime_computes_and_rejects_bad_odometry(
    native: Path, trained_hover: Any, ros: Callable[[], Peer], tmp_path: Path
) -> None:
    peer = ros()
    target = [0.1, -0.2, 0.05]  # a hover point other than the contract's: --target
    # a 60 s watchdog: a loaded CI worker has stalled this lock-step loop for more than 3 s, and a tripped watchdog
    # sends the motor stop every period; a 5 s --max-age: a stalled node process reads a message older than the
    # default 0.25 s, rightly refuses it and leaves the lock-step waiting (once in CI, at odometry 36 of 40). The
    # watchdog and stale stamps have their own test (the hostile odometry one).
    args = ["--watchdog", "60", "--max-age", "5", "--target", ",".join(map(str, target))]
    proc = start(native, peer, tmp_path, *args)
    try:
        copies = connect(peer, odometry(0))
        sent = [odometry(0)] * copies
        for k in range(1, 40):  # lock-step: one message, its command, the next (no decimation, nothing in flight)
            msg = odometry(k)
            before = len(peer.commands)
            peer.publish(msg)
            assert peer.wait_for(before + 1, 5.0), f"no command for odometry {k}"
            sent.append(msg)
            peer.spin(0.025)  # the next message comes after the 20 ms control period
        bad = odometry(40)
        bad.pose.pose.position.x = float("nan")
        before = len(peer.commands)
        peer.publish(bad)
        peer.spin(0.2)
        assert len(peer.commands) == before  # rejected: no command, no fault
        peer.publish(odometry(41))
        assert peer.wait_for(before + 1, 5.0), "the node stopped answering after a bad message"
        sent.append(odometry(41))
        peer.spin(0.1)  # nothing more comes: one command per accepted message
    finally:
        stats, err = stop(proc, tmp_path)
    # While discovery completes, the node may step on a copy of the first message before its command publisher has
    # matched this peer: that command (best effort) never arrives. The node's own step count says how many copies it
    # stepped on; the commands of the first `lost` steps are re-computed, not compared.
    stepped = stats["steps"] - (len(sent) - copies)
    lost = stepped - copies
    assert 0 <= lost < stepped, (stats, copies)
    sent = [odometry(0)] * stepped + sent[copies:]
    received = [None] * lost + list(peer.commands)
    policy = OnnxPolicy(trained_hover.onnx)
    previous = np.asarray(policy.contract.action.offset, dtype=np.float32)[None]
    scale = np.asarray(policy.contract.action.scale)
    for k, msg in enumerate(sent):
        want = policy({**odometry_signals(msg, target), "last_action": policy.normalized_action(previous)})
        got = received[k]
        if got is None:
            previous = want
            continue
        diff = np.abs(got - want[0]) / scale
        assert diff.max() <= TOLERANCE, (k, lost, got, want[0])
        previous = got[None].astype(np.float32)
    assert len(received) == len(sent), (len(received), len(sent))
    assert stats["fault"] == "" and stats["rejected"] == 1, stats
    assert "odometry rejected" in err


def test_the_native_node_latches_an_estop(native: Path, ros: Callable[[], Peer], tmp_path: Path) -> None:
    peer = ros()
    proc = start(native, peer, tmp_path, "--watchdog", "5")
    try:
        connect(peer, odometry(0))
        assert (peer.commands[-1] > 0).all()
        peer.estop.publish(Bool(data=True))
        assert peer.wait_until(lambda: (peer.commands[-1] == 0.0).all(), 10.0), "no motor stop after the e-stop"
        peer.estop.publish(Bool(data=False))  # releasing the button does not restart the motors
        peer.commands.clear()
        peer.wait_until(lambda: len(peer.commands) >= 10, 10.0, odometry=odometry(1))
    finally:
        stats, _ = stop(proc, tmp_path)
    assert len(peer.commands) >= 10 and all((c == 0.0).all() for c in peer.commands)
    assert stats["fault"] == "estop"


def test_policies_the_native_node_cannot_feed_are_refused_by_name(trained_reach: Any, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedModelError, match=r"action kind 'rpm'.*commands 'position' and reads"):
        build_ros2_node(trained_reach.onnx, tmp_path / "node", vectors=10)
    assert not (tmp_path / "node").exists()


def _hostile(kind: str) -> tuple[Odometry, float]:
    """Odometry the node must refuse, and the age to stamp it with."""
    msg, age = odometry(1), 0.0
    if kind == "float32-overflow":  # finite in the message's double, infinite as the float the policy reads
        msg.twist.twist.linear.x = 1e39
    elif kind == "stale-stamp":
        age = 1.0
    elif kind == "world-frame-twist":  # REP 105 puts the twist in the body frame
        msg.child_frame_id = "world"
    elif kind == "not-unit-quaternion":
        msg.pose.pose.orientation.w *= 50.0
    return msg, age


HOSTILE = ["float32-overflow", "stale-stamp", "world-frame-twist", "not-unit-quaternion"]


def test_the_native_node_refuses_hostile_odometry_and_it_never_feeds_the_watchdog(
    native: Path, ros: Callable[[], Peer], tmp_path: Path
) -> None:
    """Each kind is rejected and counted; a stream of only such messages trips the watchdog (they are not input),
    and the motor-stop command follows every period."""
    peer = ros()
    proc = start(native, peer, tmp_path, "--watchdog", "0.3")
    try:
        connect(peer, odometry(0))
        before = len(peer.commands)
        for _ in range(50):  # 1 s of hostile odometry at 50 Hz (or longer, on a loaded machine), every kind in turn
            for kind in HOSTILE:
                msg, age = _hostile(kind)
                peer.publish(msg, age)
                peer.spin(0.005)

        def zeros() -> int:
            return sum(bool((c == 0.0).all()) for c in peer.commands[before:])

        peer.wait_until(lambda: zeros() >= 20, 10.0)  # the safe command, every period
    finally:
        stats, err = stop(proc, tmp_path)
    after = peer.commands[before:]
    assert stats["fault"] == "watchdog" and stats["rejected"] >= 4 * 20, stats
    assert zeros() >= 20 and all((c == 0.0).all() for c in after[-10:]), after[-10:]
    assert "odometry rejected" in err and "no odometry for 0.300 s" in err


def test_the_native_node_publishes_reliably_for_a_default_qos_driver(
    native: Path, ros: Callable[[], Peer], tmp_path: Path
) -> None:
    """With --reliable, a driver subscribing with ROS 2's default (reliable) QoS receives the commands."""
    peer = ros()
    received: list[np.ndarray] = []
    peer.node.create_subscription(Float64MultiArray, "command", lambda m: received.append(np.array(m.data)), 10)
    proc = start(native, peer, tmp_path, "--watchdog", "5", "--reliable")
    try:
        connect(peer, odometry(0))
        peer.wait_until(lambda: len(received) >= 5, 10.0, odometry=odometry(1))
    finally:
        stop(proc, tmp_path)
    assert len(received) >= 5 and all(np.isfinite(c).all() for c in received)


def test_a_stop_request_ends_the_node_within_its_grace_when_the_dds_release_hangs(
    native: Path, ros: Callable[[], Peer], tmp_path: Path, hanging_rcl_release: dict[str, str]
) -> None:
    """Ctrl-C ends the node within SHUTDOWN_GRACE_S (5 s) even when releasing rcl hangs (rcl_node_fini sleeps 60 s).
    The statistics are written before the release, so the node exits 0 and says why it did not wait."""
    peer = ros()
    proc = start(native, peer, tmp_path, "--watchdog", "5", env=hanging_rcl_release)
    try:
        connect(peer, odometry(0))
    finally:
        stats, err = stop(proc, tmp_path)  # fails if the node outlives 20 s: the sleeping release would take 60
    assert "still shutting down after 5 s: exiting without rcl/DDS release" in err
    assert stats["steps"] >= 1 and stats["fault"] == ""
