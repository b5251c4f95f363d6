"""``robot-rl dataset from-mcap``: recordings of the policy node become a dataset whose states are what the node fed
the policy (each frame's state, run through the recorded policy, gives the recorded command), split into episodes
at faults and pauses; malformed recordings and mismatched layouts are refused by name and leave nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("mcap_ros2")

from geometry_msgs.msg import PoseStamped, Twist
from nav_msgs.msg import Odometry
from robot_rl_ros.inputs import ArmLayout, command_ranges
from robot_rl_ros.messages import (
    fill_imu,
    fill_joint_state,
    fill_odometry,
    fill_pose,
    fill_twist,
    imu_signals,
    joint_state_signals,
    odometry_signals,
    velocity_command,
)
from robot_rl_ros.recording import Recorder, RecordingError
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray, String

from policies.runtime import OnnxPolicy, open_policy
from robot_rl.imitation.dataset import load_dataset
from robot_rl.imitation.from_recording import recordings_to_dataset
from robot_rl.runs.bc import typed_env
from sim.registry import get_task
from tests.ros2.test_recording import CORRUPT, _meta, write

PERIOD_NS = 20_000_000


COMMAND_TIMEOUT_NS = 100_000_000
"""The legged recordings' ``cmd_vel_timeout_s`` (5 periods)."""
LEGGED_COMMANDS_AT = (0, 9)
"""Periods at which a legged run's teleop sends a velocity command (besides ``new_goal_at``): the first expires at
period 5; the second is still fresh when the node is re-activated at period 13, which forgets it."""


def _operator(kind: str, rng: np.random.Generator) -> Any:
    """An operator's message: a manipulator's goal pose, a legged robot's velocity command (a multirotor's: none)."""
    if kind == "rpm":
        return None
    if kind == "legged":
        vx, vy, yaw = rng.uniform(-0.4, 0.4, 3)
        command = Twist()
        fill_twist(command, np.array([vx, vy, 0.0]), np.array([0.0, 0.0, yaw]))
        return command
    goal = PoseStamped()
    fill_pose(goal, rng.uniform(0.2, 0.6, 3), np.eye(3))
    return goal


def _inputs(
    kind: str, policy: OnnxPolicy, rng: np.random.Generator, order: Any, fresh: bool
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One period's sensor messages ``{recording kind: msg}`` and the signals the node makes of them (and of the
    operator's latest ``order``, if ``fresh``: in force since the node's activation and, for a velocity command,
    within its timeout)."""
    if kind == "rpm":
        odom = Odometry()
        fill_odometry(odom, rng.uniform(-0.2, 0.2, 3), np.array([1.0, 0, 0, 0]), rng.normal(0, 0.3, 3), np.zeros(3))
        return {"odom": odom}, odometry_signals(odom, [0.0, 0.0, 0.0], np.zeros(3))
    if kind == "legged":
        names, default = policy.contract.action.names, np.asarray(policy.contract.action.offset)
        joints, imu = JointState(), Imu()
        fill_joint_state(joints, names, default + rng.uniform(-0.2, 0.2, len(names)), rng.normal(0, 0.5, len(names)))
        tilt = rng.normal(0, 0.05, 2)
        fill_imu(imu, np.array([1.0, *tilt, 0.0]) / np.sqrt(1 + tilt @ tilt), rng.normal(0, 0.3, 3), np.zeros(3))
        command = velocity_command(order, command_ranges(policy.contract)) if fresh else np.zeros((1, 3), np.float32)
        rel = (np.asarray(joints.position) - default).astype(np.float32)[None]
        signals = {**joint_state_signals(joints, names), **imu_signals(imu), "joint_pos_rel": rel}
        return {"imu": imu, "joint_states": joints}, {**signals, "velocity_command": command}  # joints: the merge
    layout = ArmLayout.of(policy.contract)
    names = [*layout.joints, *([layout.finger] if layout.finger else [])]
    joints = JointState()
    fill_joint_state(joints, names, rng.uniform(-0.5, 0.5, len(names)), rng.normal(0, 0.2, len(names)))
    tcp = PoseStamped()
    fill_pose(tcp, rng.uniform(0.2, 0.6, 3), np.eye(3))
    signals = {**joint_state_signals(joints, layout.joints, layout.finger), **layout.pose("tcp", tcp)}
    return {"tcp": tcp, "joint_states": joints}, {**signals, **layout.pose("goal", order)}  # joints last: the merge


def _kind(policy: OnnxPolicy) -> str:
    c = policy.contract
    legged = "projected_gravity" in {t.source for t in c.observation}
    return "legged" if legged else c.action.kind


def record(
    model: Path,
    path: Path,
    periods: int,
    seed: int = 0,
    fault_at: range = range(0),
    restart_at: int = -1,
    new_goal_at: int = -1,
) -> Path:
    """A run as the node records it: its activation, inputs, then the policy's command each period (``fault_at``: the
    safety layer holds the offset command instead, then the node is re-activated; ``restart_at``: the node was
    deactivated for a second and activated again before that period). A manipulator's goal is sent at the start and,
    as an operator does, again where it changes (``new_goal_at``) and after each activation, which forgets it; a
    legged robot's velocity command at :data:`LEGGED_COMMANDS_AT` and ``new_goal_at``."""
    policy = open_policy(model)
    kind = _kind(policy)
    rng = np.random.default_rng(seed)
    offset = np.asarray(policy.contract.action.offset, dtype=np.float32)[None]
    rec = Recorder(path, model, command_timeout_s=COMMAND_TIMEOUT_NS * 1e-9 if kind == "legged" else None)
    last, t, order, sent = offset, 0, _operator(kind, rng), -1
    for k in range(periods):
        t += PERIOD_NS + (1_000_000_000 if k == restart_at else 0)
        activated = k in (0, restart_at, fault_at.stop)  # fresh histories, last_action from the offset
        if activated:
            policy.reset()
            last, sent = offset, -1  # the node forgets its inputs
            rec.write("fault", String(data="waiting for input"), t)
        sends = activated if kind != "legged" else k in LEGGED_COMMANDS_AT
        if order is not None and (sends or k == new_goal_at):
            changed = k == new_goal_at or (kind == "legged" and k > 0)  # else the same goal, sent again
            order = _operator(kind, rng) if changed else order
            rec.write("goal" if kind != "legged" else "cmd_vel", order, t + 1)
            sent = t + 1
        fresh = sent >= 0 and (kind != "legged" or t + 2 - sent <= COMMAND_TIMEOUT_NS)
        messages, signals = _inputs(kind, policy, rng, order, fresh)
        for i, (topic, msg) in enumerate(messages.items()):
            rec.write(topic, msg, t + 2 + i)
        if fault_at and k == fault_at.start:
            rec.write("fault", String(data="watchdog: no input for 0.1 s"), t + 10)
        held = k in fault_at  # the safety layer chose the command
        command = offset if held else policy({**signals, "last_action": policy.normalized_action(last)})
        if activated:
            rec.write("fault", String(data=""), t + 10)
        rec.write("command", Float64MultiArray(data=[float(v) for v in command[0]]), t + 20)
        last = command
    rec.close()
    return path


def _commands_from_states(model: Path, root: Path) -> float:
    """Largest difference between each frame's action and the policy's command on the frame's state (normalised)."""
    data = load_dataset(root)
    policy = OnnxPolicy(model)
    worst = 0.0
    for ep in data.episodes:
        command = policy.run_obs(ep.state)
        worst = max(
            worst, float(np.abs(policy.normalized_action(command, policy.reference(ep.state)) - ep.action).max())
        )
    return worst


@pytest.mark.parametrize("kind", ["multirotor", "manipulator", "legged"])
def test_a_recording_becomes_a_dataset_whose_states_give_the_recorded_commands(
    kind: str,
    untrained_hover: Path,
    untrained_reach: Path,
    untrained_quadruped: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """... and train-bc evaluates a student of it in the task's default config (a recording names no sim config)."""
    from robot_rl.cli import main

    model = {"multirotor": untrained_hover, "manipulator": untrained_reach, "legged": untrained_quadruped}[kind]
    first = record(model, tmp_path / "a.mcap", 30, seed=0, fault_at=range(10, 13), restart_at=20, new_goal_at=25)
    second = record(model, tmp_path / "b.mcap", 12, seed=1)
    out = tmp_path / "demos"
    assert main(["dataset", "from-mcap", str(first), str(second), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    episodes = [10, 7, 5, 5] if kind == "manipulator" else [10, 7, 10]  # an arm's new goal is a new task
    assert f"a.mcap: 27 frames in {len(episodes)} episodes, 3 steps held out" in printed, printed
    assert "b.mcap: 12 frames in 1 episodes" in printed and f"dataset: {out}" in printed, printed
    data = load_dataset(out)
    assert [e.length for e in data.episodes] == [*episodes, 12]  # split at the fault (held out), re-activation
    assert data.fps == pytest.approx(1 / OnnxPolicy(model).contract.control_period_s)
    assert _commands_from_states(model, out) < 1e-5  # the states are exactly what the node fed the policy
    assert data.robot_rl["task"] == OnnxPolicy(model).contract.task
    assert data.robot_rl["contract"]["observation"] == OnnxPolicy(model).contract.to_dict()["observation"]
    assert typed_env(data.robot_rl["task"], data.robot_rl.get("env")) == get_task(data.robot_rl["task"]).config_cls()

    assert main(["dataset", "from-mcap", str(first), "--out", str(out)]) == 2  # never overwritten
    assert "already exists; datasets are never overwritten" in capsys.readouterr().err
    assert len(load_dataset(out).episodes) == len(episodes) + 1


@pytest.mark.parametrize(("case", "change", "commands", "expected"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_a_malformed_recording_makes_no_dataset(
    untrained_hover: Path, tmp_path: Path, case: str, change: Any, commands: Any, expected: str
) -> None:
    meta = None if change is None else {**_meta(untrained_hover), **change}
    path = write(tmp_path / f"{case}.mcap", meta, commands or [[15000.0] * 4] * 3)
    with pytest.raises(RecordingError) as info:
        recordings_to_dataset([path], tmp_path / "out")
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no dataset, no staging folder


def test_recordings_of_other_layouts_or_robots_are_refused_by_name(
    untrained_hover: Path, untrained_reach: Path, untrained_quadruped: Path, tmp_path: Path
) -> None:
    hover = record(untrained_hover, tmp_path / "hover.mcap", 5)
    reach = record(untrained_reach, tmp_path / "reach.mcap", 5)
    with pytest.raises(RecordingError, match=r"reach.mcap' ran a policy of another layout or rate .*make one data"):
        recordings_to_dataset([hover, reach], tmp_path / "mixed")
    with pytest.raises(RecordingError, match=r"reach.mcap' ran a policy of another observation or action layout"):
        recordings_to_dataset([reach], tmp_path / "wrong-model", model=untrained_hover)  # --model of another robot
    with pytest.raises(RecordingError, match=r"hover.mcap'\] given more than once"):
        recordings_to_dataset([hover, tmp_path / ".." / tmp_path.name / "hover.mcap"], tmp_path / "twice")
    legged = Recorder(tmp_path / "legged.mcap", untrained_quadruped)  # as recorded before legged playback
    legged.close()
    with pytest.raises(RecordingError, match=r"^recording '[^']*legged.mcap' does not say how long a velocity command"):
        recordings_to_dataset([legged.path], tmp_path / "legged")
    moved = tmp_path / "moved.onnx"
    meta = {**_meta(untrained_hover), "model_path": str(moved)}
    with pytest.raises(RecordingError, match="which does not exist here; pass the policy file with --model"):
        recordings_to_dataset([write(tmp_path / "moved.mcap", meta, [[15000.0] * 4])], tmp_path / "moved")
    assert recordings_to_dataset([tmp_path / "moved.mcap"], tmp_path / "given", model=untrained_hover)[0].is_dir()
    with pytest.raises(RecordingError, match="no control step with every input"):  # commands, no odometry
        recordings_to_dataset([_commands_only(untrained_hover, tmp_path / "blind.mcap")], tmp_path / "blind")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.suffix) == ["given"]


def _commands_only(model: Path, path: Path) -> Path:
    rec = Recorder(path, model)
    for k in range(3):
        rec.write("command", Float64MultiArray(data=[15000.0] * 4), (k + 1) * PERIOD_NS)
    rec.close()
    return path


def test_a_recorded_input_that_does_not_read_is_corruption(untrained_reach: Path, tmp_path: Path) -> None:
    """The node records only what it accepted: a joint state that lacks a joint is damage, named with its time."""
    rec = Recorder(tmp_path / "bad.mcap", untrained_reach)
    joints = JointState()
    fill_joint_state(joints, ["panda_joint1"], np.zeros(1), np.zeros(1))
    rec.write("joint_states", joints, 40_000_000)
    rec.close()
    with pytest.raises(RecordingError, match=r"corrupt: the /joint_states message at 0.000 s: joint_states lacks"):
        recordings_to_dataset([rec.path], tmp_path / "out")
