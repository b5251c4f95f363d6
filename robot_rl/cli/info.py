"""``robot-rl inspect`` (a contract, readable), ``robot-rl tasks`` (what is registered and what each task supports)
and ``robot-rl bench`` (environment steps per second)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from robot_rl.cli.common import in_range, open_run_noting_edits
from robot_rl.config import MAX_NUM_ENVS, check_device
from sim.typed_config import ConfigError


def add_parser(sub: Any) -> None:
    """The ``inspect``, ``tasks`` and ``bench`` verbs' arguments."""
    ins = sub.add_parser("inspect", help="print the deployment contract of a policy.onnx or a run folder, readably")
    ins.add_argument("source", type=Path, help="policy.onnx, or a run folder (its checkpoint's task and actor)")
    ins.add_argument(
        "--robot",
        type=Path,
        metavar="ROBOT.yaml",
        help="check a description of the real robot against the contract (motor order, spin, geometry, mass, rate)",
    )
    sub.add_parser("tasks", help="list registered tasks and what each supports")
    bench = sub.add_parser("bench", help="measure environment steps per second")
    bench.add_argument("--task", default="quadrotor-hover", help="task to step (default: quadrotor-hover)")
    bench.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 4096, 16384], help="world counts")
    bench.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    bench.add_argument("--seconds", type=float, default=2.0, help="timed seconds per setting (default: 2)")


def run_inspect(args: argparse.Namespace) -> int:
    """``robot-rl inspect``: a contract, readable."""
    from policies.runtime import load_contract
    from policies.runtime.inspect import describe

    src: Path = args.source
    contract = open_run_noting_edits(src).contract() if src.is_dir() else load_contract(src)
    print(describe(contract))
    if not src.is_dir():
        print(_quantization(src))
    if args.robot is not None:
        from policies.runtime import yamlfile
        from policies.runtime.robot_check import check_robot

        try:
            description = yamlfile.load(args.robot, "robot description")
        except yamlfile.YamlFileError as exc:
            raise ConfigError(str(exc)) from None
        check_robot(contract, description)
        print(f"\nrobot description {args.robot}: every given field matches the contract")
    return 0


def _quantization(path: Path) -> str:
    """One paragraph: float, or the int8 scheme and calibration recorded in the file (text from the file escaped)."""
    import onnx

    from firmware_export.quantize import quantization_record
    from policies.runtime.text import printable

    record = quantization_record(onnx.load(str(path), load_external_data=False))
    if record is None:
        return "\narithmetic: float32"
    layers = record.get("layers")
    count = len(layers) if isinstance(layers, list) else "?"
    return (
        f"\narithmetic: {printable(str(record.get('scheme')))} ({count} matrix products)\n"
        f"  calibrated on {printable(str(record.get('calibration_source')))}"
    )


def run_tasks(args: argparse.Namespace) -> int:
    """``robot-rl tasks``: every registered task, what it is, and what it supports (from its TaskSpec and, for the
    deploy targets, the contract of its policy)."""
    import sim
    from robot_rl.cli.deploy import ros2_node_reads
    from robot_rl.imitation.students import STUDENTS
    from sim.registry import get_task, task_names

    for name in task_names():
        spec = get_task(name)
        print(f"{name:<20} [{spec.backend}] {spec.description}")
        if spec.success:
            print(f"{'':<20} success: {spec.success}")
        env = sim.make(name, 1)
        contract = env.contract(["policy"])
        env.close()
        targets = ["onnx"]
        if ros2_node_reads(contract):
            targets.append("ros2 policy_node")
        if not contract.action.reference and contract.chunk is None:
            targets.append("firmware (C99)")
        if contract.action.kind == "rpm":
            targets.append("ros2-node (native)")
        facts = [
            f"robot {spec.robot}",
            f"scripted expert {spec.expert.rpartition(':')[2] if spec.expert else 'none'}",
            f"sim-to-sim {', '.join(sorted(spec.transfer)) or 'none'}",
            f"students {', '.join(sorted(STUDENTS))}",
            f"deploy {', '.join(targets)}",
        ]
        print(f"{'':<20} " + "; ".join(facts))
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """``robot-rl bench``: env steps per second at several world counts."""
    from robot_rl.bench import format_table, measure_env_steps
    from sim.registry import get_task

    get_task(args.task)
    check_device(args.device)
    in_range("--seconds", args.seconds, 1e-3, 3600)
    for n in args.num_envs:
        in_range("--num-envs", n, 1, MAX_NUM_ENVS)
    rows = [
        {
            "task": args.task,
            "device": args.device,
            "num_envs": n,
            "steps_per_s": measure_env_steps(args.task, n, args.device, args.seconds),
        }
        for n in args.num_envs
    ]
    print(format_table(rows))
    return 0
