"""Recordings survive the run that made them (Ctrl-C, SIGTERM, SIGKILL, an exception), and every malformed
recording is refused by ``replay`` in one line naming what is wrong."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rclpy
from nav_msgs.msg import Odometry
from robot_rl_ros.graph import read_params, run_graph
from robot_rl_ros.messages import fill_odometry
from robot_rl_ros.playback import replay
from robot_rl_ros.recording import Recorder, RecordingError, msgdef, read_log, to_plain
from std_msgs.msg import Float64MultiArray

from policies.runtime import load_contract

PKG = Path(__file__).resolve().parents[2] / "ros2_ws" / "src" / "robot_rl_ros"


@pytest.fixture
def model(untrained_hover: Path) -> Path:
    return untrained_hover


def _meta(model: Path) -> dict[str, str]:
    return {"model_path": str(model), "contract": load_contract(model).to_json()}


def write(path: Path, meta: dict[str, str] | None, commands: list[list[float]]) -> Path:
    """A recording as the node writes one: metadata, then odometry and a command per step."""
    from mcap_ros2.writer import Writer

    with open(path, "wb") as f:
        w = Writer(f)
        if meta is not None:
            w.add_metadata("robot_rl", meta)
        odom = w.register_msgdef("nav_msgs/msg/Odometry", msgdef(Odometry))
        cmd = w.register_msgdef("std_msgs/msg/Float64MultiArray", msgdef(Float64MultiArray))
        msg = Odometry()
        fill_odometry(msg, np.array([0.1, 0.0, 0.0]), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3))
        for k, c in enumerate(commands):
            w.write_message("/odom", odom, to_plain(msg), log_time=2 * k + 1, publish_time=2 * k + 1)
            data = to_plain(Float64MultiArray(data=[float(v) for v in c]))
            w.write_message("/command", cmd, data, log_time=2 * k + 2, publish_time=2 * k + 2)
        w.finish()
    return path


NESTED = "[" * 5000 + "]" * 5000
CORRUPT: list[tuple[str, Any, Any, str]] = [
    # (case, metadata change, commands, what the one-line error says)
    ("no-metadata", None, None, "is not a robot-rl recording (no 'robot_rl' metadata)"),
    ("no-contract", {"contract": ""}, None, "metadata robot_rl has no 'contract'"),
    ("contract-not-json", {"contract": "{not json"}, None, "metadata robot_rl.contract: contract is not valid JSON"),
    ("contract-nested", {"contract": NESTED}, None, "nested deeper than 16 levels"),
    ("contract-not-mapping", {"contract": "[1, 2]"}, None, "contract must be a mapping, got list"),
    ("period-text", {"control_period_s": "fast"}, None, "control_period_s is 'fast', not a positive number"),
    ("period-negative", {"control_period_s": "-0.02"}, None, "control_period_s is '-0.02', not a positive"),
    ("target-2-values", {"target_position_m": "[1, 2]"}, None, "target_position_m is malformed"),
    ("target-text", {"target_position_m": "up"}, None, "target_position_m is malformed"),
    ("velocity-timeout-text", {"target_velocity_timeout_s": "never"}, None, "target_velocity_timeout_s is 'never'"),
    ("velocity-timeout-zero", {"target_velocity_timeout_s": "0"}, None, "not a positive number of seconds"),
    ("command-3-values", {}, [[1.0, 2.0, 3.0]], "holds 3 values; the contract has 4 actuators"),
    ("command-nan", {}, [[1.0, 2.0, 3.0, math.nan]], "holds non-finite values"),
    ("command-float32-overflow", {}, [[1.0, 2.0, 3.0, 1e39]], "holds non-finite values"),
    ("command-type", {"command_type": "twist"}, None, "command_type 'twist' is unknown"),
]


@pytest.mark.parametrize(("case", "change", "commands", "expected"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_a_malformed_recording_is_refused_by_name(
    model: Path, tmp_path: Path, case: str, change: Any, commands: Any, expected: str
) -> None:
    meta = None if change is None else {**_meta(model), **change}
    path = write(tmp_path / f"{case}.mcap", meta, commands or [[15000.0] * 4] * 3)
    with pytest.raises(RecordingError) as info:
        replay(path)
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_the_cli_replay_of_a_malformed_recording_exits_2_in_one_line(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from robot_rl.cli import main

    path = write(tmp_path / "nan.mcap", _meta(model), [[1.0, 2.0, 3.0, math.nan]])
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the command at" in err and "holds non-finite values" in err


def test_replay_applies_a_recorded_velocity_setpoint_as_the_node_did(model: Path, tmp_path: Path) -> None:
    """A velocity setpoint applies to odometry stamped within the node's timeout of it (stamps only, so the replay
    decides as the node did): commands made that way replay exactly, and not with another timeout."""
    from geometry_msgs.msg import TwistStamped
    from mcap_ros2.writer import Writer
    from robot_rl_ros.messages import odometry_signals, velocity_at

    from policies.runtime import open_policy

    policy, timeout = open_policy(model), 0.1
    setpoint = TwistStamped()
    setpoint.header.stamp.nanosec, setpoint.header.frame_id, setpoint.twist.linear.x = 30_000_000, "world", 0.2
    velocity = np.array([0.2, 0.0, 0.0])

    def recording(name: str, meta_timeout: float) -> Path:
        prev = np.asarray(policy.contract.action.offset, dtype=np.float32)[None]
        path = tmp_path / name
        with open(path, "wb") as f:
            w = Writer(f)
            w.add_metadata("robot_rl", {**_meta(model), "target_velocity_timeout_s": repr(meta_timeout)})
            odom = w.register_msgdef("nav_msgs/msg/Odometry", msgdef(Odometry))
            vel = w.register_msgdef("geometry_msgs/msg/TwistStamped", msgdef(TwistStamped))
            cmd = w.register_msgdef("std_msgs/msg/Float64MultiArray", msgdef(Float64MultiArray))
            w.write_message("/target_velocity", vel, to_plain(setpoint), log_time=35_000_000, publish_time=35_000_000)
            for k in range(1, 11):  # odometry every 20 ms from 20 ms: the setpoint applies from 40 to 120 ms
                t = k * 20_000_000
                msg = Odometry()
                fill_odometry(msg, np.array([0.1, 0.0, 0.0]), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3))
                msg.header.stamp.nanosec = t
                moving = velocity_at(velocity if t >= 40_000_000 else None, 30_000_000, t, timeout)
                command = policy({**odometry_signals(msg, [0.0, 0.0, 0.0], moving),
                                  "last_action": policy.normalized_action(prev)})  # fmt: skip
                w.write_message("/odom", odom, to_plain(msg), log_time=t, publish_time=t)
                data = to_plain(Float64MultiArray(data=[float(v) for v in command[0]]))
                w.write_message("/command", cmd, data, log_time=t + 1, publish_time=t + 1)
                prev = command
            w.finish()
        return path

    same = replay(recording("same.mcap", timeout))
    assert same.steps == 10 and same.max_divergence < 1e-5, same
    other = replay(recording("other.mcap", 10.0))  # the velocity would still apply after 120 ms
    assert other.max_divergence > 1e-4, other


def test_a_recording_cut_short_is_read_up_to_its_last_whole_chunk(model: Path, tmp_path: Path) -> None:
    full = tmp_path / "full.mcap"
    rec = Recorder(full, model)
    msg = Odometry()
    fill_odometry(msg, np.array([0.1, 0.0, 0.0]), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3))
    for k in range(600):  # a chunk on every tick: the interval is forced to pass
        rec.write("odom", msg, 1_000_000 * (2 * k + 1))
        rec.write("command", Float64MultiArray(data=[15000.0] * 4), 1_000_000 * (2 * k + 2))
        if k % 100 == 99:
            rec._flushed = -math.inf
            rec.tick()
    rec.close()
    data = full.read_bytes()
    cut = tmp_path / "cut.mcap"
    for share in (0.5, 2 / 3, 0.9):  # a power cut: no summary, no footer, part of a chunk or of a record's header
        for end in range(int(len(data) * share), int(len(data) * share) + 9):  # every byte of a length prefix
            cut.write_bytes(data[:end])
            log = read_log(cut)
            assert not log.complete and 0 < len(log.messages) <= 1200  # 0.9: in the summary, after the data
    r = replay(cut)
    assert not r.complete and r.steps > 0 and "was not finished" in r.line(cut)
    with pytest.raises(RecordingError, match="already exists; recordings are never overwritten"):
        Recorder(full, model)


# ------------------------------------------------------------------------------- signals during a recording
def _deploy(model: Path, path: Path, ns: str) -> subprocess.Popen[str]:
    script = Path(sys.executable).parent / "robot-rl"
    argv = [str(script), "deploy", "--params", str(PKG / "config" / "quadrotor_sim.yaml"), "--sim", "--model"]
    argv += [str(model), "--duration", "60", "--namespace", ns, "--record", str(path)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_a_recorded_deployment_leaves_a_replayable_file_whatever_stops_it(
    model: Path, tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    """Ctrl-C and SIGTERM finish the file; after SIGKILL it holds everything up to its last flush (twice a second)."""
    path = tmp_path / "run.mcap"
    proc = _deploy(model, path, f"r{uuid.uuid4().hex[:8]}")
    try:
        deadline = time.monotonic() + 90.0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if path.exists() and any(t == "/command" for _, t, _ in read_log(path).messages):
                    break  # commands are on disk: the node is flying
            except RecordingError:
                pass  # created, its header not flushed yet (seen once under CI load)
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        time.sleep(1.2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    r = replay(path)
    assert r.complete == (sig != signal.SIGKILL), r
    assert r.steps >= 20 and r.max_divergence == 0.0, r
    assert [p.name for p in tmp_path.iterdir()] == ["run.mcap"]  # no hidden leftovers


def test_an_exception_in_the_deployment_still_finishes_the_recording(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import robot_rl_ros.graph as graph

    real = graph.make_executor

    def breaking(kind: str) -> Any:
        executor = real(kind)
        spin, calls = executor.spin_once, {"n": 0}

        def spin_once(timeout_sec: float | None = None) -> None:
            calls["n"] += 1
            if calls["n"] > 300:
                raise RuntimeError("the executor broke")
            spin(timeout_sec=timeout_sec)

        executor.spin_once = spin_once  # type: ignore[method-assign]
        return executor

    monkeypatch.setattr(graph, "make_executor", breaking)
    data = read_params(PKG / "config" / "quadrotor_sim.yaml")
    data["policy_node"]["model_path"] = str(model)
    path = tmp_path / "run.mcap"
    rclpy.init()
    try:
        with pytest.raises(RuntimeError, match="the executor broke"):
            run_graph(data, sim=True, duration_s=30.0, namespace=f"r{uuid.uuid4().hex[:8]}", record=path)
    finally:
        rclpy.try_shutdown()
    r = replay(path)
    assert r.complete and r.messages > 0, r
    assert json.loads(read_log(path).meta["target_position_m"]) == [0.0, 0.0, 0.0]
