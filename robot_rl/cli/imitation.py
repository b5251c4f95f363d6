"""``robot-rl collect`` (demonstrations of a teacher into a dataset) and ``robot-rl train-bc`` (a student from them)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from robot_rl.cli.common import MAX_EPISODES, check_folder_writable, in_range
from robot_rl.config import check_device
from robot_rl.imitation.students import STUDENTS
from sim.typed_config import ConfigError


def add_parser(sub: Any) -> None:
    """The ``collect`` and ``train-bc`` verbs' arguments."""
    col = sub.add_parser(
        "collect", help="record demonstrations of a trained PPO teacher into a LeRobot-style dataset (docs/datasets.md)"
    )
    col.add_argument(
        "task",
        help="task to collect in: the teacher's, or one that gives the teacher's observation (a panda-lift teacher "
        "in panda-multitask: that task's world with the teacher's settings)",
    )
    col.add_argument(
        "--teacher",
        required=True,
        metavar="RUN|scripted",
        help="trained PPO run folder, or 'scripted' for the task's scripted expert (which tasks have one: "
        "'robot-rl tasks')",
    )
    col.add_argument("--episodes", type=int, required=True, help="episodes to keep")
    col.add_argument("--out", type=Path, required=True, metavar="DIR", help="new dataset folder (must not exist)")
    col.add_argument("--num-envs", type=int, default=256, help="parallel worlds (default: 256)")
    col.add_argument("--seed", type=int, default=0, help="seed of starts and randomisation (default: 0)")
    col.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    col.add_argument("--keep-failed", action="store_true", help="also keep episodes the teacher failed")
    col.add_argument(
        "--action-noise",
        type=float,
        default=0.0,
        metavar="STD",
        help="DART: add Gaussian noise to executed actions, record the clean ones (default: 0)",
    )
    col.add_argument(
        "--images",
        nargs="+",
        default=[],
        metavar="CAMERA",
        help="also render these cameras offscreen into observation.images.<camera> (Panda tasks: front, wrist)",
    )
    col.add_argument("--image-size", type=int, default=96, help="rendered image height and width (default: 96)")
    col.add_argument(
        "--visual-randomization",
        action="store_true",
        help="randomise light, colours, camera mount and pixel noise per episode (sim/rendering.py defaults)",
    )
    col.add_argument(
        "--student",
        type=Path,
        metavar="RUN",
        help="DAgger: this state-only train-bc run drives, the teacher labels every state it visits (all episodes "
        "kept); with a PPO teacher",
    )
    col.add_argument(
        "--include",
        type=Path,
        metavar="DATASET",
        help="copy this dataset's episodes in first (DAgger: the demonstrations the student learned from)",
    )
    col.add_argument(
        "--unbiased",
        nargs="+",
        default=[],
        metavar="SIGNAL",
        help="record these onboard signals without their per-episode bias, as a calibrated sensor gives them "
        "(e.g. object_pos); the teacher still acts on its biased view, students are evaluated without the bias",
    )
    col.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="env.KEY=VALUE",
        help="scripted experts and teachers of another task: set a key of the task's env config (repeatable), e.g. "
        "'env.skills=[lift,push]' for panda-multitask; a PPO teacher of the task collects in the world it was "
        "trained in",
    )
    col.add_argument("--quiet", action="store_true", help="no progress bar")

    bc = sub.add_parser("train-bc", help="train an action-chunk policy (diffusion or MLP) from demonstrations")
    bc.add_argument(
        "--policy", metavar="KIND", help=f"student kind: {', '.join(sorted(STUDENTS))} (default: diffusion)"
    )
    bc.add_argument("--dataset", type=Path, help="dataset folder (robot-rl collect or docs/datasets.md layout)")
    bc.add_argument("--config", type=Path, help="YAML config (default: configs/bc-<policy>.yaml)")
    bc.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. train.batch_size=128"
    )
    bc.add_argument("--seed", type=int, help="seed (default: from the config)")
    bc.add_argument("--device", help="torch device (default: from the config)")
    bc.add_argument("--max-steps", type=int, help="gradient-step budget")
    bc.add_argument("--max-time", type=float, metavar="SEC", help="wall-clock training budget in seconds")
    bc.add_argument("--resume", type=Path, metavar="RUN", help="continue a train-bc run folder")
    bc.add_argument("--run-root", help="parent folder of run folders (default: runs)")
    bc.add_argument("--no-export", action="store_true", help="skip the ONNX export at the end")
    bc.add_argument("--quiet", action="store_true", help="no progress bar")


def run_collect(args: argparse.Namespace) -> int:
    """``robot-rl collect TASK --teacher RUN --episodes N --out DIR``."""
    from robot_rl.imitation.collect import collect
    from robot_rl.runs import BCRun, PPORun
    from sim.rendering import VisualRandomization

    in_range("--episodes", args.episodes, 1, MAX_EPISODES)
    in_range("--num-envs", args.num_envs, 1, MAX_EPISODES)
    in_range("--action-noise", args.action_noise, 0.0, 1.0)
    in_range("--image-size", args.image_size, 8, 1024)
    check_device(args.device)
    if args.visual_randomization and not args.images:
        raise ConfigError("--visual-randomization randomises camera images; name the cameras with --images")
    if args.out.exists():
        raise ConfigError(f"--out '{args.out}' already exists; datasets are never overwritten")
    check_folder_writable(args.out.parent, "output folder")
    if args.student is not None and args.teacher == "scripted":
        raise ConfigError("--student (DAgger) needs a PPO teacher to label the student's states")
    if args.student is not None and args.images:
        raise ConfigError("--student (DAgger) drives with a state-only student; --images is not supported with it")
    bad = [o for o in args.set if not o.startswith("env.")]
    if bad:
        raise ConfigError(f"--set {bad[0]!r}: collect sets only env.* keys (the task's world)")
    teacher: Any = args.task
    if args.teacher == "scripted":
        from sim.registry import get_task, task_names

        if not get_task(args.task).expert:  # an unknown task fails here, naming the registered ones
            have = ", ".join(n for n in task_names() if get_task(n).expert)
            raise ConfigError(f"'{args.task}' has no scripted expert (tasks with one: {have})")
    else:
        teacher = PPORun.load(Path(args.teacher), args.device)
        if args.set and teacher.cfg.task == args.task:
            raise ConfigError(
                "--set applies to scripted experts and teachers of another task; a PPO teacher of "
                f"'{args.task}' collects in the world it was trained in"
            )
    student = None if args.student is None else BCRun.load(args.student, args.device)
    summary = collect(
        teacher,
        args.episodes,
        args.out,
        num_envs=min(args.num_envs, args.episodes),
        seed=args.seed,
        keep_failed=args.keep_failed,
        action_noise=args.action_noise,
        quiet=args.quiet,
        device=args.device,
        cameras=tuple(args.images),
        image_size=args.image_size,
        visual=VisualRandomization() if args.visual_randomization else None,
        student=student,
        include=args.include,
        unbiased=tuple(args.unbiased),
        env_overrides=tuple(args.set),
        task=args.task,
    )
    print("\n".join(summary.lines()))
    return 0


def run_train_bc(args: argparse.Namespace) -> int:
    """``robot-rl train-bc``: train a student on a dataset, evaluate it, export it, print the artifacts."""
    from robot_rl.imitation.config import load_bc_config
    from robot_rl.imitation.evaluate import own_tasks_line
    from robot_rl.imitation.train_bc import train_bc
    from robot_rl.runs.bc import bc_config, read_bc_checkpoint

    shorthands = {
        "dataset": None if args.dataset is None else str(args.dataset),
        "seed": args.seed,
        "device": args.device,
        "run_root": args.run_root,
        "train.max_steps": args.max_steps,
        "train.max_time_s": args.max_time,
    }
    if args.resume is not None:
        from sim.typed_config import apply_override

        saved = read_bc_checkpoint(args.resume / "checkpoint.pt")["config"]
        for key, value in shorthands.items():
            if value is not None:
                apply_override(saved, f"{key}={value}")
        for item in args.set:
            apply_override(saved, item)
        cfg = bc_config(saved)
    else:
        cfg = load_bc_config(args.policy or "diffusion", args.config, args.set, **shorthands)
    check_folder_writable(Path(cfg.run_root), "run root")
    print(f"training a {cfg.policy.kind} student on {cfg.dataset} ({cfg.device})")
    result = train_bc(cfg, resume=args.resume, quiet=args.quiet, export=not args.no_export)
    print(f"\n{result.steps} gradient steps in {result.elapsed_s:.0f} s, final loss {result.final_loss:.4g}")
    if result.evaluation is not None:
        print(f"evaluation: {result.evaluation.line()}")
        if result.own_tasks is not None:
            print(f"  {own_tasks_line(result.own_tasks)}")
        for line in [result.evaluation.teacher_line(), *result.notes]:
            if line:
                print(f"  {line}")
    print(f"artifacts in {result.run_dir}:")
    for name in ("checkpoint.pt", "metrics.csv", "learning_curve.png", "eval.yaml", "eval.png", "policy.onnx"):
        if (result.run_dir / name).exists():
            print(f"  {result.run_dir / name}")
    return 0
