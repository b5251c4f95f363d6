"""``robot-rl export onnx|firmware|ros2-node``: a run's policy for deployment (ONNX with its contract, C99 for a
microcontroller, a native ROS 2 node)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from firmware_export.targets import TARGETS as FIRMWARE_TARGETS
from policies.runtime.files import check_export_folder
from robot_rl.checkpoint import CheckpointError
from robot_rl.cli.common import OneLineParser, check_folder_writable, in_range
from sim.typed_config import ConfigError


def add_parser(sub: Any) -> None:
    """The ``export`` verb's arguments."""
    ex = sub.add_parser("export", help="export a trained policy for deployment")
    ex_sub = ex.add_subparsers(dest="format", required=True, metavar="FORMAT", parser_class=OneLineParser)
    onnx = ex_sub.add_parser("onnx", help="ONNX graph with the deployment contract inside (+ contract.yaml)")
    onnx.add_argument("run", type=Path, help="run folder, or an rsl_rl checkpoint (model_<it>.pt) with --task")
    onnx.add_argument("--out", type=Path, help="output folder (default: the run folder, or beside the checkpoint)")
    onnx.add_argument("--task", help="rsl_rl checkpoint: the robot-rl task it was trained on (its contract)")
    onnx.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="rsl_rl checkpoint: an env setting it was trained with, beside the task's training file "
        "(e.g. action_scale=0.5)",
    )
    onnx.add_argument(
        "--activation", default="elu", help="rsl_rl checkpoint: the actor's activation (default: elu, rsl_rl's)"
    )
    fw = ex_sub.add_parser(
        "firmware", help="dependency-free C99 for a microcontroller, built, sized and verified against onnxruntime"
    )
    fw.add_argument("source", type=Path, help="run folder or exported policy.onnx")
    fw.add_argument("--target", default="cortex-m4f", choices=list(FIRMWARE_TARGETS), help="default: cortex-m4f")
    fw.add_argument(
        "--out",
        type=Path,
        help="output folder (default: firmware-<target> beside the policy); must be new, empty or an earlier "
        "firmware export, which is replaced whole",
    )
    fw.add_argument("--vectors", type=int, default=1000, help="random observations to verify (default: 1000)")
    fw.add_argument("--no-verify", action="store_true", help="generate, build and size only")
    node = ex_sub.add_parser(
        "ros2-node",
        help="a multirotor policy as a native ROS 2 node (rcl + the generated C) for 1 kHz loops, built here",
    )
    node.add_argument("source", type=Path, help="run folder or exported policy.onnx")
    node.add_argument(
        "--out",
        type=Path,
        help="output folder (default: ros2-node beside the policy); must be new, empty or an earlier ros2-node "
        "export, which is replaced whole",
    )
    node.add_argument(
        "--rate", type=float, metavar="HZ", help="control rate the node runs at (default: the contract's)"
    )
    node.add_argument("--vectors", type=int, default=1000, help="random observations to verify (default: 1000)")


def run(args: argparse.Namespace) -> int:
    """``robot-rl export onnx RUN`` and ``robot-rl export firmware RUN|ONNX``."""
    if args.format in ("firmware", "ros2-node"):
        return run_firmware(args)
    if args.run.suffix == ".pt" and not args.run.is_dir():
        return run_rsl_rl(args)
    if args.task is not None or args.set:
        raise ConfigError("--task and --set are for an rsl_rl checkpoint (model_<it>.pt); a run folder knows both")
    from robot_rl.runs import open_run

    if args.out is not None:
        check_folder_writable(args.out, "output folder")
    loaded = open_run(args.run)
    check_folder_writable(args.out or args.run, "output folder")
    path = loaded.export(args.out)
    print(f"wrote {path} and {path.parent / 'contract.yaml'}")
    return 0


def run_rsl_rl(args: argparse.Namespace) -> int:
    """``robot-rl export onnx model_<it>.pt --task TASK``: an rsl_rl actor with the task's contract inside."""
    import sim
    from policies.nets.export import export_onnx
    from policies.nets.rsl_rl import RslRlActor

    if args.task is None:
        raise ConfigError(f"'{args.run}' is an rsl_rl checkpoint: name the task it was trained on with --task")
    out = args.out or args.run.parent
    check_folder_writable(out, "output folder")
    actor = RslRlActor.load(args.run, args.activation)
    env = sim.make(args.task, 1, "cpu", sim.registry.train_env_config(args.task, args.set))
    try:
        path = export_onnx(actor, env.contract(["policy"]), out)
    finally:
        env.close()
    print(f"wrote {path} and {path.parent / 'contract.yaml'} (rsl_rl actor, task {args.task})")
    return 0


def run_firmware(args: argparse.Namespace) -> int:
    """``robot-rl export firmware``: C99 for a microcontroller with its report; ``robot-rl export ros2-node``: that
    C built into a native ROS 2 node (nothing written on failure)."""
    import tempfile

    from firmware_export.export import export_firmware
    from firmware_export.ros2_node import build_ros2_node
    from policies.runtime.contract import MAX_CONTROL_RATE_HZ

    node = args.format == "ros2-node"
    in_range("--vectors", args.vectors, 1, 100_000)
    if node and args.rate is not None and not (math.isfinite(args.rate) and 0 < args.rate <= MAX_CONTROL_RATE_HZ):
        raise ConfigError(f"--rate must be a rate in (0, {MAX_CONTROL_RATE_HZ:g}] Hz, got {args.rate}")
    src: Path = args.source
    if not src.exists():
        raise CheckpointError(f"'{src}' does not exist (expected a run folder or a policy.onnx)")
    name = "ros2-node" if node else f"firmware-{args.target}"
    out = args.out or (src if src.is_dir() else src.parent) / name
    check_folder_writable(out, "output folder")
    check_export_folder(out, "ros2-node" if node else "firmware", [src])  # nothing the user had is replaced
    with tempfile.TemporaryDirectory(prefix="robot-rl-onnx-") as tmp:
        onnx_path = src
        if src.is_dir():  # export the checkpoint's actor first (the run's own config, as `export onnx` does)
            from robot_rl.runs import open_run

            onnx_path = open_run(src).export(Path(tmp))
        if node:
            report = build_ros2_node(onnx_path, out, args.rate, args.vectors)
        else:
            report = export_firmware(onnx_path, out, args.target, args.vectors, verify=not args.no_verify)
    print("\n".join(report.lines()))
    if node:
        print(f"wrote {out} (rr_policy_node, policy/, src/, CMakeLists.txt, package.xml); run it as")
        print(
            f"  {out / 'rr_policy_node'} [--watchdog S] [--target X,Y,Z] [--reliable] [--cpu N --rt-priority P] "
            "[--stats FILE] --ros-args -r __ns:=/<robot>"
        )
        return 0
    print(f"wrote {out} (rr_policy.h/.c, rr_safety.h/.c, rr_example_task.c, rr_policy.mk, firmware_report.yaml)")
    return 0
