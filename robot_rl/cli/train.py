"""``robot-rl train TASK``: asymmetric actor-critic PPO, then the final evaluation, the export and a summary."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policies.runtime.contract import ContractError
from robot_rl.checkpoint import CheckpointError, read_checkpoint
from robot_rl.cli.common import check_folder_writable, in_range, silent
from robot_rl.config import TrainConfig
from robot_rl.distributed import from_environment, launched_by_torchrun
from robot_rl.threads import note
from sim.typed_config import ConfigError

if TYPE_CHECKING:
    from robot_rl.runner import TrainResult
    from robot_rl.runs import PPORun


def add_parser(sub: Any) -> None:
    """The ``train`` verb's arguments."""
    train = sub.add_parser("train", help="train a policy with asymmetric actor-critic PPO")
    train.add_argument("task", help="registered task name (see 'robot-rl tasks')")
    train.add_argument("--num-envs", type=int, help="parallel simulated worlds (default: from the config)")
    train.add_argument("--device", help="torch device: cpu, cuda, cuda:1 (default: from the config)")
    train.add_argument("--seed", type=int, help="random seed (default: from the config)")
    train.add_argument(
        "--max-time", type=float, metavar="SEC", help="wall-clock training budget in seconds (with --resume: more)"
    )
    train.add_argument("--max-iterations", type=int, help="PPO iteration budget")
    train.add_argument("--config", type=Path, help="YAML config (default: configs/<task>.yaml)")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (repeatable), e.g. ppo.learning_rate=3e-4; one randomisation term by its name: "
        "env.randomization.action_latency.range=[0,1], or =null to drop it",
    )
    train.add_argument("--resume", type=Path, metavar="RUN", help="continue from a run folder's checkpoint")
    train.add_argument(
        "--init-from",
        metavar="RUN",
        help="start a new run from another run's networks (its best.pt, else checkpoint.pt, or a .pt file): the "
        "actor, and the critic where it fits, e.g. rough terrain from a flat-ground run (policy.init_from)",
    )
    train.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="data-parallel processes on this machine (execs torchrun --standalone --nproc-per-node N); "
        "for several machines run torchrun yourself (docs/distributed.md)",
    )
    train.add_argument("--run-root", help="parent folder of run folders (default: runs)")
    train.add_argument("--no-export", action="store_true", help="skip the ONNX export at the end")
    train.add_argument("--quiet", action="store_true", help="no progress bar and no TensorBoard files")


def run(args: argparse.Namespace) -> int:
    """``robot-rl train``: resolve config, train, evaluate, export, print the artifacts."""
    from robot_rl.config import load_config
    from robot_rl.runner import OnPolicyRunner
    from robot_rl.runs import new_run_dir
    from robot_rl.runs.ppo import check_source_view

    overrides = []
    for flag, key in (
        ("num_envs", "num_envs"),
        ("device", "device"),
        ("seed", "seed"),
        ("max_time", "runner.max_time_s"),
        ("max_iterations", "runner.max_iterations"),
        ("run_root", "run_root"),
        ("init_from", "policy.init_from"),
    ):
        if getattr(args, flag) is not None:
            overrides.append(f"{key}={getattr(args, flag)}")
    overrides += args.set  # --set is applied last, so it wins over the shorthands
    resume, saved = None, None
    if args.resume is not None and args.init_from is not None:
        raise ConfigError("--resume continues a run and --init-from starts a new one from a run's networks: pass one")
    if args.resume is not None:
        if args.resume.is_file():
            raise CheckpointError(f"cannot resume: '{args.resume}' is a file; pass the run folder")
        resume = args.resume / "checkpoint.pt"
        if not resume.is_file():
            raise CheckpointError(f"cannot resume: '{args.resume}' has no checkpoint.pt")
        saved = read_checkpoint(resume)["config"]  # continue with the run's own config unless told otherwise
        root = beside(args.resume, args.task)
        if root is not None and not _sets_run_root(overrides):  # beside the run it continues, wherever that is now
            overrides.insert(0, f"run_root={root}")
    cfg = load_config(args.task, args.config, overrides, base=saved, base_name=f"checkpoint '{resume}'")
    check_folder_writable(Path(cfg.run_root), "run root")
    if args.nproc is not None:
        return exec_torchrun(args.nproc, cfg, args.argv)
    role, device = from_environment(cfg.device)
    # Validates everything before any file is made.
    runner = OnPolicyRunner(cfg, Path("."), resume=resume, quiet=args.quiet, dist=role, device=device)
    say = print if role.is_main else silent
    if runner.resume_note:
        say(f"resuming: {runner.resume_note}")
    if cfg.policy.init_from is not None and resume is None:  # another task's run: the view must fit it
        check_source_view(Path(cfg.policy.init_from), runner.env)
    if runner.init_note:
        say(f"starting from {runner.init_note}")
    if not args.no_export:  # refuse an undeployable actor before training, not after
        try:
            runner.env.contract(cfg.policy.actor_obs)
        except ContractError as exc:
            raise ConfigError(
                f"policy.actor_obs={cfg.policy.actor_obs} cannot be exported ({exc}); "
                "train with --no-export or read only deployable groups"
            ) from None
    if runner.iteration >= cfg.runner.max_iterations:
        raise ConfigError(
            f"runner.max_iterations={cfg.runner.max_iterations} counts all iterations and the checkpoint is already "
            f"at {runner.iteration}; raise --max-iterations to train further"
        )
    if role.is_main:
        runner.run_dir = new_run_dir(cfg)
    ranks = f" in {role.world_size} processes" if role.world_size > 1 else ""
    say(f"training {cfg.task} with {cfg.num_envs} worlds{ranks} on {device}; run folder {runner.run_dir}")
    if (line := note(os.environ)) is not None and str(device).startswith("cpu"):
        say(line)
    try:
        result = runner.train()
    finally:
        role.close()
    if result.interrupted:
        say(f"\ninterrupted after {result.iterations} iterations; checkpoint saved: {runner.run_dir / 'checkpoint.pt'}")
        say(f"resume with: robot-rl train {cfg.task} --resume {runner.run_dir}")
        return 130
    if not role.is_main:
        return 0
    return finish_run(runner.run_dir, result, export=not args.no_export)


def exec_torchrun(nproc: int, cfg: TrainConfig, argv: list[str]) -> int:
    """Replace this process by ``torchrun --standalone --nproc-per-node N`` running the same command without
    ``--nproc`` (after checking the job can work: divisible worlds, enough GPUs, not already under torchrun)."""
    import torch

    if launched_by_torchrun():
        raise ConfigError("--nproc cannot be used inside torchrun (torchrun already started the processes)")
    in_range("--nproc", nproc, 1, 1024)
    if cfg.num_envs % nproc:
        raise ConfigError(f"num_envs={cfg.num_envs} is not divisible by --nproc {nproc}")
    if torch.device(cfg.device).type == "cuda":
        if torch.device(cfg.device).index is not None:
            raise ConfigError(f"device '{cfg.device}' names one GPU; with --nproc use 'cuda' (one GPU per process)")
        if nproc > torch.cuda.device_count():
            raise ConfigError(f"--nproc {nproc} is more than the {torch.cuda.device_count()} GPU(s) of this machine")
    argv = list(argv)
    for i, a in enumerate(argv):  # drop "--nproc N" / "--nproc=N"
        if a == "--nproc":
            del argv[i : i + 2]
            break
        if a.startswith("--nproc="):
            del argv[i]
            break
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += ["-m", "robot_rl.cli", *argv]
    sys.stdout.flush()
    os.execv(sys.executable, cmd)
    return 0  # not reached


def write_clip(run: PPORun) -> str:
    """Render a few held-out evaluation episodes into ``episodes.gif`` (tasks with a MuJoCo camera); returns a line
    to print where that was not possible, else an empty string."""
    from robot_rl.clip import record_clip
    from robot_rl.evaluate import EVAL_SEED_OFFSET, deterministic_policy
    from sim.rendering import RenderError

    cfg = run.cfg
    policy = deterministic_policy(run.model, cfg.policy.actor_obs)
    try:
        record_clip(cfg.task, cfg.env, policy, run.run_dir / "episodes.gif", seed=cfg.seed + EVAL_SEED_OFFSET)
    except RenderError as exc:
        return f"no clip of the episodes: {exc}"
    return ""


def write_gait(run: PPORun) -> None:
    """Plot the gait of a legged run into ``gait.png`` (tasks with feet and velocity commands; others: nothing)."""
    from robot_rl.evaluate import EVAL_SEED_OFFSET, deterministic_policy
    from robot_rl.gait import GAIT_COMMAND, plot_gait, record_gait

    cfg = run.cfg
    policy = deterministic_policy(run.model, cfg.policy.actor_obs)
    trace = record_gait(cfg.task, cfg.env, policy, seed=cfg.seed + EVAL_SEED_OFFSET)
    if trace is not None and len(trace["t"]) > 1:
        vx, vy, yaw = GAIT_COMMAND
        title = f"{cfg.task}: command vx {vx:g} m/s, vy {vy:g} m/s, yaw rate {yaw:g} rad/s (randomisation off)"
        plot_gait(trace, run.run_dir / "gait.png", title)


def finish_run(run_dir: Path, result: TrainResult, export: bool) -> int:
    """Final evaluation, export and a readable summary of a finished training run."""
    from robot_rl.runs import PPORun

    run = PPORun.load(run_dir)
    evals = run.evaluate(run.cfg.runner.eval_episodes)
    onnx_path = run.export() if export else None
    clip_note = write_clip(run)
    write_gait(run)
    print(
        f"\n{'=' * 72}\n{run.cfg.task}: {result.iterations} iterations, "
        f"{result.env_steps:,} env steps in {result.wall_time_s:.1f} s"
    )
    if result.time_to_criterion_s is not None:
        print(f"success criterion first met after {result.time_to_criterion_s:.1f} s of training")
    if result.time_to_quality_s is not None:
        print(f"quality bar first met after {result.time_to_quality_s:.1f} s of training")
    for iteration, kl, why in result.kl_switches:
        print(f"KL target set to {kl:g} after iteration {iteration} ({why})")
    if result.best is not None:
        b, at_corners = result.best, run.cfg.runner.selection_corner_episodes
        corners = f" with {at_corners} episodes each at corners of the randomisation" if at_corners else ""
        print(
            f"kept the policy of iteration {b['iteration']} (best of the selection evaluations{corners}, score "
            f"{b['score']:.4g}{', quality bar met' if b['quality_met'] else ''}"
            f"{'' if b.get('met', True) else '; none met the success criterion'}); held-out evaluation:"
        )
    for r in evals:
        s = r.summary()
        figures = ", ".join(f"{k} {v:.3g}" for k, v in r.figures.items() if k != "success_rate")
        figures = f"; {figures}" if figures else ""
        print(
            f"  eval, {r.setting}: criterion {'MET' if r.met else 'not met'}, "
            f"quality {'MET' if r.quality_met else 'not met'}; "
            f"return {s['return_mean']:.2f}; success {s['success_rate']:.0%}{figures}"
        )
    for line in run.skipped:
        print(f"  {line}")
    if clip_note:
        print(clip_note)
    print("artifacts:")
    names = ["checkpoint.pt", "best.pt", "config.yaml", "metrics.csv", "learning_curve.png", "eval.yaml", "eval.png"]
    names += ["episodes.gif", "gait.png"]
    if onnx_path is not None:
        names += [onnx_path.name, "contract.yaml"]
    for name in names:
        if (run_dir / name).exists():
            print(f"  {run_dir / name}")
    if (run_dir / "tb").exists():
        print(f"  {run_dir / 'tb'}  (tensorboard --logdir {run_dir.parent})")
    return 0


def beside(run: Path, task: str) -> Path | None:
    """The run root a continuation of ``run`` is written under: ``run``'s own (the folder above ``<task>/``), so that a
    run folder moved or copied from another machine continues where it now is, not under the root it was trained in;
    ``None`` (the saved ``run_root``) when ``run`` does not sit in a ``<task>/`` folder."""
    parent = run.resolve().parent
    return parent.parent if parent.name == task else None


def _sets_run_root(overrides: list[str]) -> bool:
    """Whether the command line names the run root (``--run-root`` or ``--set run_root=...``)."""
    return any(o.split("=", 1)[0].strip() == "run_root" for o in overrides)
