"""``robot-rl deploy`` (the ROS 2 node graph of a launch file in one process, over real DDS), ``robot-rl replay`` (a
recording's policy re-run offline) and ``robot-rl dataset from-mcap`` (recordings into a dataset). The one command
module that imports the ROS 2 package (``robot_rl.imitation.from_recording`` is the other module of ``robot_rl``)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from policies.runtime.contract import Contract
from robot_rl.cli.common import check_folder_writable, in_range
from sim.typed_config import ConfigError


def add_parser(sub: Any) -> None:
    """The ``deploy`` and ``replay`` verbs' arguments."""
    dep = sub.add_parser(
        "deploy", help="run the ROS 2 node graph of a launch file in one process (policy node, optional sim robot)"
    )
    dep.add_argument("--params", type=Path, required=True, help="YAML with ros__parameters per node (see config/)")
    dep.add_argument("--sim", action="store_true", help="also start sim_robot_node (the simulated robot)")
    dep.add_argument("--model", type=Path, help="policy.onnx (overrides policy_node's model_path)")
    dep.add_argument("--duration", type=float, default=10.0, metavar="SEC", help="run time, s (default: 10)")
    dep.add_argument(
        "--episodes",
        type=int,
        default=0,
        metavar="N",
        help="with --sim: stop once the simulated robot has finished N episodes (--duration stays the limit)",
    )
    dep.add_argument("--namespace", default="", help="ROS namespace of the nodes")
    dep.add_argument(
        "--record",
        type=Path,
        metavar="RUN.mcap",
        help="record inputs, commands and faults to a new MCAP file (flushed twice a second, finished on Ctrl-C and "
        "SIGTERM; after a kill readable up to its last flush)",
    )
    dep.add_argument(
        "--sim-time",
        action="store_true",
        help="with --sim: run on the simulated robot's clock (lockstep, /clock, use_sim_time, trigger: input), as "
        "fast as the policy node answers; --duration stays wall time (docs/ros2.md, 'Simulated time')",
    )
    dep.add_argument(
        "--executor",
        choices=["single", "events"],
        default="single",
        help="rclpy executor: single (SingleThreadedExecutor, default) or events (the experimental EventsExecutor: "
        "lower latency at high rates, see docs/ros2.md)",
    )
    rep = sub.add_parser("replay", help="re-run the policy on a recording's inputs and report divergence")
    rep.add_argument("recording", type=Path, help="MCAP file written by robot-rl deploy --record")
    rep.add_argument("--model", type=Path, help="policy.onnx to replay (default: the recorded one)")
    data = sub.add_parser(
        "dataset", help="make a dataset from recorded runs or from other datasets (robot-rl dataset VERB --help)"
    )
    verbs = data.add_subparsers(dest="dataset_command", required=True, metavar="VERB", parser_class=type(data))
    mcap = verbs.add_parser(
        "from-mcap",
        help="turn recordings of robot-rl deploy --record into a LeRobot-style dataset for train-bc (docs/datasets.md)",
    )
    mcap.add_argument("recordings", type=Path, nargs="+", metavar="RUN.mcap", help="recordings, in order")
    mcap.add_argument("--out", type=Path, required=True, metavar="DIR", help="new dataset folder (must not exist)")
    mcap.add_argument("--model", type=Path, help="policy.onnx the runs used (default: the recorded path)")
    mcap.add_argument(
        "--max-gap",
        type=float,
        metavar="SEC",
        help="also end an episode where commands pause for longer than this, s (default: episodes end only at "
        "faults, re-activations and new instructions)",
    )
    merge = verbs.add_parser(
        "merge",
        help="merge datasets of one task and layout (e.g. each skill from its own teacher) into one (docs/datasets.md)",
    )
    merge.add_argument("datasets", type=Path, nargs="+", metavar="DATASET", help="dataset folders, in order")
    merge.add_argument("--out", type=Path, required=True, metavar="DIR", help="new dataset folder (must not exist)")
    merge.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="env.KEY=VALUE",
        help="the merged dataset's world, where its students are evaluated (repeatable): every env setting the "
        "datasets were recorded with different values of must be set, e.g. --set 'env.skills=[lift,push]'",
    )


def run_deploy(args: argparse.Namespace) -> int:
    """``robot-rl deploy``: the launch file's node graph in one process, over real DDS; prints a summary."""
    in_range("--duration", args.duration, 0.1, 86400)
    in_range("--episodes", args.episodes, 0, 1_000_000)
    if args.episodes and not args.sim:
        raise ConfigError("--episodes counts the simulated robot's episodes; add --sim")
    if args.sim_time and not args.sim:
        raise ConfigError("--sim-time runs on the simulated robot's clock; add --sim")
    try:
        from robot_rl_ros.graph import DeployError, check_namespace, read_params, run_graph, use_simulated_time
        from robot_rl_ros.spin import SHUTDOWN_GRACE_S, StopSignals
    except ImportError as exc:
        raise ConfigError(f"ROS 2 Python packages are missing ({exc.name}); pip install -e '.[ros2]'") from None
    try:
        params = read_params(args.params)
        check_namespace(args.namespace)
        if args.model is not None:
            if not args.model.is_file():
                raise DeployError(f"model '{args.model}' does not exist")
            params["policy_node"]["model_path"] = str(args.model)
        if args.sim_time:
            use_simulated_time(params)
        if args.record is not None:
            check_folder_writable(args.record.parent, "recording folder")
            if args.record.is_dir():
                raise DeployError(f"--record '{args.record}' is a folder; give a file name such as run.mcap")
            if args.record.exists() or args.record.is_symlink():
                raise DeployError(f"--record '{args.record}' already exists; recordings are never overwritten")
        started = time.monotonic()
        with StopSignals() as stopped:
            result = run_graph(
                params,
                args.sim,
                args.duration,
                args.namespace,
                record=args.record,
                executor_kind=args.executor,
                episodes=args.episodes,
                stop=stopped.requested,
                release_grace_s=SHUTDOWN_GRACE_S if args.console else None,
            )
    except DeployError as exc:
        raise ConfigError(str(exc)) from None
    print(
        f"policy_node: {result.commands} commands, {result.rejected} rejected messages, fault: {result.fault or 'none'}"
    )
    if result.sim:
        steps, rejected = result.sim["steps"], result.sim["rejected"]
        simulated = f"{steps * result.sim['control_period_s']:.1f} s simulated in {time.monotonic() - started:.1f} s"
        print(f"sim_robot_node: {steps} steps ({simulated}), {rejected} rejected commands, {_sim_summary(result.sim)}")
    if args.record is not None:
        print(f"recorded {result.recorded} messages to {args.record}")
    if stopped.signum:
        name = "Ctrl-C" if stopped.signum == signal.SIGINT else signal.Signals(stopped.signum).name
        print(f"robot-rl: stopped by {name}; the nodes were shut down and the recording finished", file=sys.stderr)
        return 128 + stopped.signum
    return 0 if not result.fault else 1


def _sim_summary(sim: dict[str, Any]) -> str:
    """The simulated robot's figures: crashes and the position error (multirotors), or episodes, early ends and
    successes (manipulators, legged robots: episodes end on the task's clock or its termination)."""
    errors = sim["position_errors_m"]
    if errors:
        tail = errors[-max(1, round(1.0 / sim["control_period_s"])) :]
        return f"{sim['crashes']} crashes, mean position error over the last second {sum(tail) / len(tail):.4f} m"
    episodes = sim["episodes_succeeded"]
    tank = f", energy tank {sim['tank_j']:.2f} J" if "tank_j" in sim else ""
    crashes = sim["crashes"]
    ended = f" ({crashes} ended early by the task's termination: a fall, a dropped object)" if crashes else ""
    return f"{len(episodes)} episodes finished{ended}, {sum(episodes)} succeeded{tank}"


def run_replay(args: argparse.Namespace) -> int:
    """``robot-rl replay``: the recorded policy re-run offline on the recorded inputs; exit 1 if it diverges."""
    try:
        from robot_rl_ros.playback import replay
        from robot_rl_ros.recording import RecordingError
    except ImportError as exc:
        raise ConfigError(f"ROS 2 / MCAP Python packages are missing ({exc.name}); pip install -e '.[ros2]'") from None
    try:
        r = replay(args.recording, args.model)
    except RecordingError as exc:
        raise ConfigError(str(exc)) from None
    print(r.line(args.recording))
    return 0 if r.max_divergence <= 1e-5 else 1


def run_dataset(args: argparse.Namespace) -> int:
    """``robot-rl dataset from-mcap`` (recorded runs into a new dataset; prints what each recording gave) and
    ``robot-rl dataset merge`` (datasets into one)."""
    if args.out.exists():
        raise ConfigError(f"--out '{args.out}' already exists; datasets are never overwritten")
    check_folder_writable(args.out.parent, "output folder")
    if args.dataset_command == "merge":
        from robot_rl.imitation.merge import merge_datasets

        print("\n".join(merge_datasets(list(args.datasets), args.out, list(args.set)).lines()))
        return 0
    if args.max_gap is not None:
        in_range("--max-gap", args.max_gap, 1e-4, 86400)
    try:
        from robot_rl_ros.recording import RecordingError

        from robot_rl.imitation.from_recording import recordings_to_dataset
    except ImportError as exc:
        raise ConfigError(f"ROS 2 / MCAP Python packages are missing ({exc.name}); pip install -e '.[ros2]'") from None
    try:
        out, summaries = recordings_to_dataset(list(args.recordings), args.out, args.model, args.max_gap)
    except RecordingError as exc:
        raise ConfigError(str(exc)) from None
    for s in summaries:
        print(s.line())
    frames = sum(s.frames for s in summaries)
    print(f"dataset: {out} ({frames} frames, {sum(s.episodes for s in summaries)} episodes)")
    return 0


def ros2_node_reads(contract: Contract) -> bool:
    """Whether ``policy_node`` has a topic for every signal ``contract`` reads (``robot-rl tasks``)."""
    try:
        from robot_rl_ros.inputs import ARM_SIGNALS, ODOMETRY_SIGNALS
    except ImportError:  # ROS 2 not installed here
        return False
    sources = {t.source for t in contract.observation}
    kind = contract.action.kind
    arm = kind in ("position", "torque") and sources <= set(ARM_SIGNALS)
    return (kind == "rpm" and sources <= ODOMETRY_SIGNALS) or arm
