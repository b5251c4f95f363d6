"""``robot-rl export onnx|int8|firmware|crazyflie|ros2-node``: a run's policy for deployment (ONNX with its
contract, an int8 copy measured against it, C99 for a microcontroller, a Crazyflie firmware app, a native ROS 2
node)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from firmware_export.targets import TARGETS as FIRMWARE_TARGETS
from policies.runtime.files import check_export_folder
from robot_rl.checkpoint import CheckpointError
from robot_rl.cli.common import MAX_EPISODES, OneLineParser, check_folder_writable, in_range, open_run_noting_edits
from robot_rl.transfer.harness import SIMULATORS
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
    q = ex_sub.add_parser(
        "int8",
        help="int8 copy of a PPO run's policy (per-channel weights, calibrated activations), measured against float",
    )
    q.add_argument("run", type=Path, help="PPO run folder")
    q.add_argument("--out", type=Path, help="output folder (default: the run folder)")
    q.add_argument(
        "--calibration-episodes",
        type=int,
        default=64,
        help="randomised episodes whose policy inputs set the activation ranges (default: 64; own seeds)",
    )
    q.add_argument(
        "--episodes",
        type=int,
        default=256,
        help="held-out episodes per setting to fly float and int8 side by side (default: 256; 0: skip)",
    )
    q.add_argument(
        "--sim",
        choices=SIMULATORS,
        help="also fly both files in this independent simulator (randomisation on, --episodes of them)",
    )
    fw = _c_export(ex_sub, "firmware", "dependency-free C99 for a microcontroller, built, sized and verified against "
                   "onnxruntime", "firmware-<target>")  # fmt: skip
    fw.add_argument("--target", default="cortex-m4f", choices=list(FIRMWARE_TARGETS), help="default: cortex-m4f")
    fw.add_argument("--no-verify", action="store_true", help="generate, build and size only")
    cf = _c_export(ex_sub, "crazyflie", "a quadrotor policy as a crazyflie-firmware out-of-tree controller app, "
                   "verified, built with --firmware", "crazyflie-app")  # fmt: skip
    cf.add_argument(
        "--firmware",
        type=Path,
        help="a crazyflie-firmware checkout with its submodules: build the app for cf2 there and report its size",
    )
    node = _c_export(ex_sub, "ros2-node", "a multirotor policy as a native ROS 2 node (rcl + the generated C) for "
                     "1 kHz loops, built here", "ros2-node")  # fmt: skip
    node.add_argument(
        "--rate", type=float, metavar="HZ", help="control rate the node runs at (default: the contract's)"
    )


def _c_export(sub: Any, name: str, help_text: str, default_out: str) -> Any:
    """The parser of one C export (``firmware``, ``crazyflie``, ``ros2-node``): its source, ``--out`` (an export
    folder, replaced whole) and ``--vectors``."""
    parser = sub.add_parser(name, help=help_text)
    parser.add_argument("source", type=Path, help="run folder, or an exported policy.onnx / policy_int8.onnx")
    parser.add_argument(
        "--out",
        type=Path,
        help=f"output folder (default: {default_out} beside the policy); must be new, empty or an earlier "
        f"{default_out.split('-<')[0]} export, which is replaced whole",
    )
    parser.add_argument("--vectors", type=int, default=1000, help="random observations to verify (default: 1000)")
    return parser


def run(args: argparse.Namespace) -> int:
    """``robot-rl export onnx RUN`` and ``robot-rl export firmware RUN|ONNX``."""
    if args.format in ("firmware", "ros2-node", "crazyflie"):
        return run_firmware(args)
    if args.format == "int8":
        return run_int8(args)
    if args.run.suffix == ".pt" and not args.run.is_dir():
        return run_rsl_rl(args)
    if args.task is not None or args.set:
        raise ConfigError("--task and --set are for an rsl_rl checkpoint (model_<it>.pt); a run folder knows both")
    if args.out is not None:
        check_folder_writable(args.out, "output folder")
    loaded = open_run_noting_edits(args.run)
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


def run_int8(args: argparse.Namespace) -> int:
    """``robot-rl export int8 RUN``: ``policy.onnx`` and ``policy_int8.onnx`` in the output folder, both flown on the
    held-out evaluation (``int8.yaml``), and optionally in an independent simulator."""
    import yaml

    from policies.runtime.files import atomic_write_text
    from robot_rl.quantization import compare, export_int8
    from robot_rl.runs import PPORun

    in_range("--calibration-episodes", args.calibration_episodes, 1, MAX_EPISODES)
    in_range("--episodes", args.episodes, 0, MAX_EPISODES)
    if args.sim and args.episodes == 0:
        raise ConfigError("--sim flies --episodes episodes; give --episodes N > 0")
    out: Path = args.out or args.run
    if args.out is not None:
        check_folder_writable(out, "output folder")
    loaded = open_run_noting_edits(args.run)
    if not isinstance(loaded, PPORun):
        raise ConfigError(f"'{args.run}' is a train-bc student; int8 export is for PPO runs (one command per query)")
    check_folder_writable(out, "output folder")
    float_onnx = loaded.export(out)
    int8_onnx, record = export_int8(loaded, float_onnx, out, args.calibration_episodes)
    print(f"wrote {int8_onnx} (beside the float {float_onnx.name})")
    print(f"  calibrated on {record.calibration_source}")
    for layer in record.layers:
        print(
            f"  {layer.shape[0]:>4} -> {layer.shape[1]:<4} input ranges +-{min(layer.x_ranges):.3g}.."
            f"{max(layer.x_ranges):.3g} of |x| <= {layer.x_max:.3g} (rms error {layer.x_rms_error:.2g}); "
            f"weights within {layer.weight_error:.1e} of their largest"
        )
    if args.episodes == 0:
        return 0
    comparison = compare(loaded, float_onnx, int8_onnx, args.episodes)
    print("\n".join(comparison.lines()))
    summary = comparison.plain()
    if args.sim:
        summary[args.sim] = _int8_sim_to_sim(loaded, args.sim, float_onnx, int8_onnx, args.episodes)
    atomic_write_text(out / "int8.yaml", yaml.safe_dump(summary, sort_keys=False))
    print(f"wrote {out / 'int8.yaml'}; for a microcontroller: robot-rl export firmware {int8_onnx}")
    return 0


def _int8_sim_to_sim(run: Any, simulator: str, float_onnx: Path, int8_onnx: Path, episodes: int) -> dict[str, Any]:
    """Both files in ``simulator`` with randomisation on; prints the two lines, returns their summaries."""
    from robot_rl.transfer.harness import plug, run_episodes
    from sim.registry import get_task

    plug(simulator, run.task)
    criterion = get_task(run.task).factory.criterion  # type: ignore[attr-defined]
    out = {}
    for kind, path in (("float", float_onnx), ("int8", int8_onnx)):
        r = run_episodes(path, simulator, episodes, run.cfg.seed, True, criterion)
        print(
            f"{simulator}, randomisation on, {kind}: criterion {'MET' if r.met else 'not met'}  "
            + "  ".join(f"{k}={v:.4g}" for k, v in r.figures.items())
        )
        out[kind] = r.summary()
    return out


def run_firmware(args: argparse.Namespace) -> int:
    """``robot-rl export firmware``: C99 for a microcontroller with its report; ``robot-rl export ros2-node``: that
    C built into a native ROS 2 node; ``robot-rl export crazyflie``: a crazyflie-firmware app (nothing written on
    failure)."""
    import tempfile

    from firmware_export.crazyflie import EXPORT_KIND as CRAZYFLIE_KIND
    from firmware_export.crazyflie import export_crazyflie
    from firmware_export.export import export_firmware
    from firmware_export.ros2_node import build_ros2_node
    from policies.runtime.contract import MAX_CONTROL_RATE_HZ

    kind = args.format
    in_range("--vectors", args.vectors, 1, 100_000)
    rate = getattr(args, "rate", None)
    if rate is not None and not (math.isfinite(rate) and 0 < rate <= MAX_CONTROL_RATE_HZ):
        raise ConfigError(f"--rate must be a rate in (0, {MAX_CONTROL_RATE_HZ:g}] Hz, got {rate}")
    src: Path = args.source
    if not src.exists():
        raise CheckpointError(f"'{src}' does not exist (expected a run folder or a policy.onnx)")
    firmware: Path | None = getattr(args, "firmware", None)
    if firmware is not None and not firmware.is_dir():
        raise ConfigError(f"--firmware '{firmware}' is not a folder (a crazyflie-firmware checkout)")
    marker = {"ros2-node": "ros2-node", "crazyflie": CRAZYFLIE_KIND}.get(kind, "firmware")
    name = {"ros2-node": "ros2-node", "crazyflie": "crazyflie-app"}.get(kind, f"firmware-{getattr(args, 'target', '')}")
    out = args.out or (src if src.is_dir() else src.parent) / name
    check_folder_writable(out, "output folder")
    check_export_folder(out, marker, [src])  # nothing the user had is replaced
    report: Any
    with tempfile.TemporaryDirectory(prefix="robot-rl-onnx-") as tmp:
        onnx_path = src
        if src.is_dir():  # export the checkpoint's actor first (the run's own config, as `export onnx` does)
            onnx_path = open_run_noting_edits(src).export(Path(tmp))
        if kind == "ros2-node":
            report = build_ros2_node(onnx_path, out, rate, args.vectors)
        elif kind == "crazyflie":
            report = export_crazyflie(onnx_path, out, firmware, args.vectors)
        else:
            report = export_firmware(onnx_path, out, args.target, args.vectors, verify=not args.no_verify)
    print("\n".join(report.lines()))
    if kind == "ros2-node":
        print(f"wrote {out} (rr_policy_node, policy/, src/, CMakeLists.txt, package.xml); run it as")
        print(
            f"  {out / 'rr_policy_node'} [--watchdog S] [--target X,Y,Z] [--reliable] [--cpu N --rt-priority P] "
            "[--stats FILE] --ros-args -r __ns:=/<robot>"
        )
        return 0
    if kind == "crazyflie":
        print(f"wrote {out} (Makefile, Kbuild, app-config, src/, README.md); build it with")
        print(f"  make -C {out} CRAZYFLIE_BASE=/path/to/crazyflie-firmware   (then stabilizer.controller = 6)")
        return 0
    print(f"wrote {out} (rr_policy.h/.c, rr_safety.h/.c, rr_example_task.c, rr_policy.mk, firmware_report.yaml)")
    return 0
