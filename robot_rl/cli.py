"""The ``robot-rl`` command line.

    robot-rl train quadrotor-hover [--num-envs N] [--device cpu|cuda] [--seed S] [--max-time SEC]
                                   [--config FILE] [--set key=value ...] [--resume RUN]
    robot-rl eval RUN [--episodes N]
    robot-rl collect TASK --teacher RUN --episodes N --out DIR
    robot-rl train-bc --policy diffusion|mlp --dataset DIR [--set key=value ...] [--resume RUN]
    robot-rl export onnx RUN [--out DIR]
    robot-rl bench [--task T] [--num-envs 1 64 1024 ...] [--device D]
    robot-rl tasks

Exit status: 0 done; 2 a user error (unknown task or key, wrong type or range, missing or corrupt run, a file
where a folder is expected, an unwritable folder, an unusable device), reported as one line that names what is
wrong, before anything is written; 1 training diverged (one line naming the iteration and the quantity; the last
good checkpoint is kept); 130 interrupted by Ctrl-C (training saves its checkpoint at the iteration boundary).
"""

from __future__ import annotations

import os
import sys

from robot_rl.threads import COMPUTE_COMMANDS, busy_cores, note, openmp_environment

# How OpenMP threads wait (robot_rl/threads.py), decided before torch loads; a command that computes looks at how
# busy the machine is first.
os.environ.update(openmp_environment(os.environ, busy_cores() if sys.argv[1:2] in COMPUTE_COMMANDS else None))

import argparse
import math
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import torch.distributed

from firmware_export.graph import UnsupportedModelError
from firmware_export.targets import TARGETS as FIRMWARE_TARGETS
from firmware_export.targets import ToolchainError
from policies.runtime.contract import ContractError
from policies.runtime.files import OutputFolderError, check_export_folder
from policies.runtime.onnx_policy import PolicyFileError
from policies.runtime.text import printable
from robot_rl.algorithms.ppo import TrainingDivergedError
from robot_rl.checkpoint import CheckpointError, read_checkpoint
from robot_rl.config import MAX_NUM_ENVS, TrainConfig, check_device
from robot_rl.distributed import DistributedConfigError, exit_rank, from_environment, launched_by_torchrun
from robot_rl.imitation.dataset import DatasetError
from robot_rl.transfer.harness import SIMULATORS
from robot_rl.typed_config import ConfigError
from sim.registry import UnknownTaskError
from sim.vec_env import TaskConfigError

if TYPE_CHECKING:
    from robot_rl.runner import TrainResult

USER_ERRORS = (
    DatasetError,
    ConfigError,
    PolicyFileError,
    TaskConfigError,
    ContractError,
    CheckpointError,
    UnknownTaskError,
    UnsupportedModelError,
    ToolchainError,
    DistributedConfigError,
    OutputFolderError,
    OSError,
)
MAX_EPISODES = 1 << 16
"""Most evaluation episodes one ``eval`` may run (one world each)."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit status 2), like every other user error."""

    def error(self, message: str) -> NoReturn:
        """Print ``robot-rl <command>: error: <message> (see --help)`` and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (kept separate so tests and docs can inspect it)."""
    parser = OneLineParser(
        prog="robot-rl",
        description="Train robot policies in batched simulation, evaluate them and export them for deployment.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)

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
        help="override a config key, e.g. ppo.learning_rate=3e-4",
    )
    train.add_argument("--resume", type=Path, metavar="RUN", help="continue from a run folder's checkpoint")
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

    ev = sub.add_parser("eval", help="evaluate a trained run (randomisation on and off), write eval.yaml/eval.png")
    ev.add_argument("run", type=Path, help="run folder (runs/<task>/<stamp>-<seed>)")
    ev.add_argument("--episodes", type=int, default=256, help="episodes per setting (default: 256)")
    ev.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    ev.add_argument(
        "--sim",
        choices=SIMULATORS,
        help="instead: run the exported policy.onnx (policies.runtime only) in this independent simulator",
    )
    ev.add_argument(
        "--sweep",
        metavar="PARAM=LO:HI",
        help="instead: success and errors with one parameter scaled from LO to HI x nominal (e.g. link_mass=0.5:1.5)",
    )
    ev.add_argument("--points", type=int, default=11, help="values of a --sweep (default: 11)")
    ev.add_argument(
        "--sweep-others",
        default="randomised",
        metavar="randomised|nominal",
        help="the parameters a --sweep does not scale: randomised as in training (default), or all at nominal "
        "(one at a time; latency and sensor noise stay as trained)",
    )
    ev.add_argument(
        "--control-rate",
        type=float,
        metavar="HZ",
        help="instead: evaluate at this control rate, not the trained one (what a robot running the policy at "
        "another rate gets; physics step kept, action latency in control periods); writes eval_<HZ>hz.yaml/png",
    )
    ev.add_argument("--seeds", type=int, default=3, help="train-bc runs: evaluation seeds, pooled (default: 3)")
    ev.add_argument("--steps", type=int, help="train-bc diffusion runs: DDIM steps per chunk (default: the run's)")
    ev.add_argument(
        "--action-horizon",
        type=int,
        help="train-bc runs: receding horizon, K actions executed per plan, 1..pred_horizon (turns the run's "
        "temporal ensembling off unless --ensemble-decay is given; default: the run's)",
    )
    ev.add_argument(
        "--ensemble-decay",
        type=float,
        metavar="M",
        help="train-bc runs: plan every step and average the plans, each older one weighted exp(M) x the next "
        "newer (M < 0 favours newer plans; default: the run's)",
    )
    ev.add_argument(
        "--visual",
        choices=("dataset", "nominal", "randomized"),
        default="dataset",
        help="train-bc runs that see cameras: render them as the demonstrations were (dataset, the default), "
        "without visual randomisation (nominal), or with sim/rendering.py's default randomisation (randomized)",
    )

    col = sub.add_parser(
        "collect", help="record demonstrations of a trained PPO teacher into a LeRobot-style dataset (docs/datasets.md)"
    )
    col.add_argument("task", help="task to collect in (must be the teacher's)")
    col.add_argument(
        "--teacher",
        required=True,
        metavar="RUN|scripted",
        help="trained PPO run folder, or 'scripted' for the task's scripted expert (panda-push, panda-lift)",
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
    col.add_argument("--quiet", action="store_true", help="no progress bar")

    bc = sub.add_parser("train-bc", help="train an action-chunk policy (diffusion or MLP) from demonstrations")
    bc.add_argument("--policy", choices=("diffusion", "mlp"), help="student kind (default: diffusion)")
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

    ex = sub.add_parser("export", help="export a trained policy for deployment")
    ex_sub = ex.add_subparsers(dest="format", required=True, metavar="FORMAT", parser_class=OneLineParser)
    onnx = ex_sub.add_parser("onnx", help="ONNX graph with the deployment contract inside (+ contract.yaml)")
    onnx.add_argument("run", type=Path, help="run folder")
    onnx.add_argument("--out", type=Path, help="output folder (default: the run folder)")
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

    bench = sub.add_parser("bench", help="measure environment steps per second")
    bench.add_argument("--task", default="quadrotor-hover", help="task to step (default: quadrotor-hover)")
    bench.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 4096, 16384], help="world counts")
    bench.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    bench.add_argument("--seconds", type=float, default=2.0, help="timed seconds per setting (default: 2)")

    dep = sub.add_parser(
        "deploy", help="run the ROS 2 node graph of a launch file in one process (policy node, optional sim robot)"
    )
    dep.add_argument("--params", type=Path, required=True, help="YAML with ros__parameters per node (see config/)")
    dep.add_argument("--sim", action="store_true", help="also start sim_robot_node (the simulated robot)")
    dep.add_argument("--model", type=Path, help="policy.onnx (overrides policy_node's model_path)")
    dep.add_argument("--duration", type=float, default=10.0, metavar="SEC", help="run time, s (default: 10)")
    dep.add_argument("--namespace", default="", help="ROS namespace of the nodes")
    dep.add_argument(
        "--record",
        type=Path,
        metavar="RUN.mcap",
        help="record inputs, commands and faults to a new MCAP file (flushed twice a second, finished on Ctrl-C and "
        "SIGTERM; after a kill readable up to its last flush)",
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

    ins = sub.add_parser("inspect", help="print the deployment contract of a policy.onnx or a run folder, readably")
    ins.add_argument("source", type=Path, help="policy.onnx, or a run folder (its checkpoint's task and actor)")
    ins.add_argument(
        "--robot",
        type=Path,
        metavar="ROBOT.yaml",
        help="check a description of the real robot against the contract (motor order, spin, geometry, mass, rate)",
    )

    sub.add_parser("tasks", help="list registered tasks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``robot-rl`` console script; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what --nproc re-runs under torchrun
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():  # SIGTERM unwinds: temp files are cleaned up
        signal.signal(signal.SIGTERM, _terminated)
    try:
        code = COMMANDS[args.command](args)
    except USER_ERRORS as exc:
        return _fail(_describe(exc), 2)
    except TrainingDivergedError as exc:
        return _fail(str(exc), 1)
    except torch.distributed.DistError as exc:  # another rank died: this one stops too, checkpoints untouched
        return _fail(
            f"a process of the data-parallel job failed ({type(exc).__name__}); the last checkpoint is kept", 1
        )
    except KeyboardInterrupt:
        return _fail("interrupted (Ctrl-C); files are written atomically, nothing is half-written", 130)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
    if launched_by_torchrun():  # a finished rank: the interpreter's teardown can abort it (robot_rl/distributed.py)
        exit_rank(code)
    return code


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (e.g. torchrun stopping the job after another rank died): unwind like an exception, so atomic
    writes remove their temporary files; no checkpoint is written on the way out."""
    raise SystemExit(128 + signum)


def _fail(message: str, status: int) -> int:
    print(f"robot-rl: error: {printable(' '.join(message.split()))}", file=sys.stderr)  # one line, no escapes
    return status


def _describe(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and exc.filename:
        return f"cannot use '{exc.filename}': {exc.strerror or exc}"
    return str(exc)


def check_folder_writable(path: Path, what: str) -> None:
    """Refuse, before any work, a folder that cannot be created or written (``what`` names it in the message).

    The nearest existing ancestor must be a folder the user may write; an existing ``path`` must be a folder.

    Raises:
        ConfigError: Naming the folder and the problem.
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} '{path}' is a file, not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what} '{path}' cannot be created: '{existing}' is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} '{path}' cannot be written: '{existing}' is read-only")


def _in_range(name: str, value: float, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"{name} must be in [{low:.12g}, {high:.12g}], got {value}")


def cmd_train(args: argparse.Namespace) -> int:
    """``robot-rl train``: resolve config, train, evaluate, export, print the artifacts."""
    from robot_rl.config import load_config
    from robot_rl.run import new_run_dir
    from robot_rl.runner import OnPolicyRunner

    overrides = []
    for flag, key in (
        ("num_envs", "num_envs"),
        ("device", "device"),
        ("seed", "seed"),
        ("max_time", "runner.max_time_s"),
        ("max_iterations", "runner.max_iterations"),
        ("run_root", "run_root"),
    ):
        if getattr(args, flag) is not None:
            overrides.append(f"{key}={getattr(args, flag)}")
    overrides += args.set  # --set is applied last, so it wins over the shorthands
    resume, saved = None, None
    if args.resume is not None:
        if args.resume.is_file():
            raise CheckpointError(f"cannot resume: '{args.resume}' is a file; pass the run folder")
        resume = args.resume / "checkpoint.pt"
        if not resume.is_file():
            raise CheckpointError(f"cannot resume: '{args.resume}' has no checkpoint.pt")
        saved = read_checkpoint(resume)["config"]  # continue with the run's own config unless told otherwise
    cfg = load_config(args.task, args.config, overrides, base=saved, base_name=f"checkpoint '{resume}'")
    check_folder_writable(Path(cfg.run_root), "run root")
    if args.nproc is not None:
        return exec_torchrun(args.nproc, cfg, args.argv)
    role, device = from_environment(cfg.device)
    # Validates everything before any file is made.
    runner = OnPolicyRunner(cfg, Path("."), resume=resume, quiet=args.quiet, dist=role, device=device)
    say = print if role.is_main else _silent
    if runner.resume_note:
        say(f"resuming: {runner.resume_note}")
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


def _silent(*args: object, **kwargs: object) -> None:
    """``print`` for ranks other than 0."""


def exec_torchrun(nproc: int, cfg: TrainConfig, argv: list[str]) -> int:
    """Replace this process by ``torchrun --standalone --nproc-per-node N`` running the same command without
    ``--nproc`` (after checking the job can work: divisible worlds, enough GPUs, not already under torchrun)."""
    import torch

    if launched_by_torchrun():
        raise ConfigError("--nproc cannot be used inside torchrun (torchrun already started the processes)")
    _in_range("--nproc", nproc, 1, 1024)
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


def finish_run(run_dir: Path, result: TrainResult, export: bool) -> int:
    """Final evaluation, export and a readable summary of a finished training run."""
    from robot_rl.run import evaluate_run, export_run, load_run

    run = load_run(run_dir)
    evals = evaluate_run(run, run.cfg.runner.eval_episodes)
    onnx_path = export_run(run) if export else None
    print(
        f"\n{'=' * 72}\n{run.cfg.task}: {result.iterations} iterations, "
        f"{result.env_steps:,} env steps in {result.wall_time_s:.1f} s"
    )
    if result.time_to_criterion_s is not None:
        print(f"success criterion first met after {result.time_to_criterion_s:.1f} s of training")
    for r in evals:
        s = r.summary()
        figures = ", ".join(f"{k} {v:.3g}" for k, v in r.figures.items() if k != "success_rate")
        figures = f"; {figures}" if figures else ""
        print(
            f"  eval, randomisation {'on ' if r.randomized else 'off'}: criterion {'MET' if r.met else 'not met'}; "
            f"return {s['return_mean']:.2f}; success {s['success_rate']:.0%}{figures}"
        )
    print("artifacts:")
    names = ["checkpoint.pt", "config.yaml", "metrics.csv", "learning_curve.png", "eval.yaml", "eval.png"]
    if onnx_path is not None:
        names += [onnx_path.name, "contract.yaml"]
    for name in names:
        if (run_dir / name).exists():
            print(f"  {run_dir / name}")
    if (run_dir / "tb").exists():
        print(f"  {run_dir / 'tb'}  (tensorboard --logdir {run_dir.parent})")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """``robot-rl eval RUN``."""
    from robot_rl.run import evaluate_run, load_run

    _in_range("--episodes", args.episodes, 1, MAX_EPISODES)
    check_device(args.device)
    if sum(x is not None for x in (args.sim, args.sweep, args.control_rate)) > 1:
        raise ConfigError("--sim, --sweep and --control-rate are separate evaluations; give one of them")
    if args.control_rate is not None and not (math.isfinite(args.control_rate) and args.control_rate > 0):
        raise ConfigError(f"--control-rate must be a positive rate in Hz, got {args.control_rate}")
    if args.sweep_others != "randomised" and not args.sweep:
        raise ConfigError("--sweep-others applies to a --sweep; give --sweep PARAM=LO:HI as well")
    if args.sweep:
        from robot_rl.transfer.sweep import Sweep

        sweep = Sweep.parse(args.sweep, args.points, args.sweep_others)  # malformed specs fail before any loading
    if _is_bc_run(args.run):
        if args.sim or args.sweep or args.control_rate:
            raise ConfigError("--sim, --sweep and --control-rate are not available for train-bc runs yet")
        return _eval_bc(args)
    run = load_run(args.run, args.device)
    check_folder_writable(args.run, "run folder")
    if args.sim:
        return _eval_sim_to_sim(run, args.sim, args.episodes)
    if args.sweep:
        return _eval_sweep(run, sweep, args.episodes)
    stem = "eval"
    if args.control_rate is not None:
        from sim.tasks.base import at_control_period

        trained = 1.0 / run.cfg.env.dt
        run.cfg.env = at_control_period(run.cfg.env, 1.0 / args.control_rate)
        stem = f"eval_{args.control_rate:g}hz"
        print(f"control rate {args.control_rate:g} Hz (trained at {trained:g} Hz)")
    for r in evaluate_run(run, args.episodes, stem=stem):
        print(
            f"randomisation {'on ' if r.randomized else 'off'}: criterion {'MET' if r.met else 'not met'}  "
            + "  ".join(f"{k}={v:.4g}" for k, v in r.summary().items() if isinstance(v, float))
        )
    print(f"wrote {args.run / f'{stem}.yaml'} and {args.run / f'{stem}.png'}")
    return 0


def _is_bc_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a behaviour-cloning checkpoint (errors are left to the loader that follows)."""
    from robot_rl.checkpoint import BC_FORMAT, read_any_checkpoint

    try:
        return read_any_checkpoint(run_dir / "checkpoint.pt").get("format") == BC_FORMAT
    except CheckpointError:
        return False


def _eval_bc(args: argparse.Namespace) -> int:
    """``robot-rl eval RUN`` of a train-bc run: success with a 95 % interval over ``--seeds`` seeds."""
    import dataclasses

    from robot_rl.imitation.train_bc import evaluate_bc_run, load_bc_run
    from sim.rendering import VisualRandomization

    _in_range("--seeds", args.seeds, 1, 100)
    run = load_bc_run(args.run, args.device)
    check_folder_writable(args.run, "run folder")
    if args.steps is not None:
        if run.cfg.policy.kind != "diffusion":
            raise ConfigError("--steps applies to diffusion students only")
        _in_range("--steps", args.steps, 1, run.cfg.policy.train_steps)
        run.cfg.policy = dataclasses.replace(run.cfg.policy, inference_steps=args.steps)
        from policies.nets.diffusion import DiffusionPolicy

        if isinstance(run.policy, DiffusionPolicy):
            run.policy.sampler = dataclasses.replace(run.policy.sampler, inference_steps=args.steps)
    if args.action_horizon is not None:
        _in_range("--action-horizon", args.action_horizon, 1, run.cfg.policy.pred_horizon)
        run.cfg.policy = dataclasses.replace(run.cfg.policy, action_horizon=args.action_horizon, ensemble_decay=None)
        run.policy.horizons = dataclasses.replace(run.policy.horizons, action=args.action_horizon)
    if args.ensemble_decay is not None:
        if not math.isfinite(args.ensemble_decay):
            raise ConfigError(f"--ensemble-decay must be a finite number, got {args.ensemble_decay}")
        run.cfg.policy = dataclasses.replace(run.cfg.policy, ensemble_decay=args.ensemble_decay)
    if args.visual != "dataset" and not run.policy.cameras:
        raise ConfigError(f"--visual {args.visual}: this student sees no camera")
    visual: VisualRandomization | Literal["dataset"] | None = "dataset"
    if args.visual != "dataset":
        visual = VisualRandomization() if args.visual == "randomized" else None
    result = evaluate_bc_run(run, args.episodes, tuple(range(args.seeds)), visual=visual)
    print(f"{run.cfg.task}, {run.cfg.policy.kind} student: {result.line()}")
    print(f"wrote {args.run / 'eval.yaml'} and {args.run / 'eval.png'}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    """``robot-rl collect TASK --teacher RUN --episodes N --out DIR``."""
    from robot_rl.imitation.collect import collect
    from robot_rl.run import load_run
    from sim.rendering import VisualRandomization

    _in_range("--episodes", args.episodes, 1, MAX_EPISODES)
    _in_range("--num-envs", args.num_envs, 1, MAX_EPISODES)
    _in_range("--action-noise", args.action_noise, 0.0, 1.0)
    _in_range("--image-size", args.image_size, 8, 1024)
    check_device(args.device)
    if args.visual_randomization and not args.images:
        raise ConfigError("--visual-randomization randomises camera images; name the cameras with --images")
    if args.out.exists():
        raise ConfigError(f"--out '{args.out}' already exists; datasets are never overwritten")
    check_folder_writable(args.out.parent, "output folder")
    teacher: Any = args.task
    if args.teacher == "scripted":
        from robot_rl.imitation.experts import EXPERTS
        from sim.registry import get_task

        get_task(args.task)  # an unknown task fails here, naming the registered ones
        if args.task not in EXPERTS:
            raise ConfigError(f"'{args.task}' has no scripted expert (tasks with one: {', '.join(EXPERTS)})")
    else:
        teacher = load_run(Path(args.teacher), args.device)
        if teacher.cfg.task != args.task:
            raise ConfigError(f"teacher '{args.teacher}' was trained on '{teacher.cfg.task}', not '{args.task}'")
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
    )
    print("\n".join(summary.lines()))
    return 0


def cmd_train_bc(args: argparse.Namespace) -> int:
    """``robot-rl train-bc``: train a student on a dataset, evaluate it, export it, print the artifacts."""
    from robot_rl.imitation.config import load_bc_config
    from robot_rl.imitation.train_bc import read_bc_checkpoint, train_bc

    shorthands = {
        "dataset": None if args.dataset is None else str(args.dataset),
        "seed": args.seed,
        "device": args.device,
        "run_root": args.run_root,
        "train.max_steps": args.max_steps,
        "train.max_time_s": args.max_time,
    }
    if args.resume is not None:
        from robot_rl.typed_config import apply_override, from_dict

        saved = read_bc_checkpoint(args.resume / "checkpoint.pt")["config"]
        for key, value in shorthands.items():
            if value is not None:
                apply_override(saved, f"{key}={value}")
        for item in args.set:
            apply_override(saved, item)
        from robot_rl.imitation.config import BCConfig

        cfg = from_dict(BCConfig, saved)
    else:
        cfg = load_bc_config(args.policy or "diffusion", args.config, args.set, **shorthands)
    check_folder_writable(Path(cfg.run_root), "run root")
    print(f"training a {cfg.policy.kind} student on {cfg.dataset} ({cfg.device})")
    result = train_bc(cfg, resume=args.resume, quiet=args.quiet, export=not args.no_export)
    print(f"\n{result.steps} gradient steps in {result.elapsed_s:.0f} s, final loss {result.final_loss:.4g}")
    if result.evaluation is not None:
        print(f"evaluation: {result.evaluation.line()}")
    print(f"artifacts in {result.run_dir}:")
    for name in ("checkpoint.pt", "metrics.csv", "learning_curve.png", "eval.yaml", "eval.png", "policy.onnx"):
        if (result.run_dir / name).exists():
            print(f"  {result.run_dir / name}")
    return 0


def _eval_sim_to_sim(run: Any, simulator: str, episodes: int) -> int:
    """``robot-rl eval RUN --sim SIM``: the exported policy in an independent simulator, DR on and off."""
    import yaml

    from policies.runtime.files import atomic_write_text
    from robot_rl.run import export_run
    from robot_rl.transfer.harness import plug, run_episodes

    plug(simulator, run.cfg.task)  # a task without a model in that simulator fails here, naming what exists
    onnx = run.run_dir / "policy.onnx"
    if not onnx.exists():
        export_run(run)
    criterion = type(run.env).criterion
    results = [run_episodes(onnx, simulator, episodes, run.cfg.seed, rnd, criterion) for rnd in (True, False)]
    for r in results:
        verdict = "MET" if r.met else "not met"
        print(
            f"{simulator}, randomisation {'on ' if r.randomized else 'off'}: criterion {verdict}  "
            + "  ".join(f"{k}={v:.4g}" for k, v in r.figures.items())
        )
    out = run.run_dir / f"sim2sim_{simulator}.yaml"
    summary = {("randomization_on" if r.randomized else "randomization_off"): r.summary() for r in results}
    atomic_write_text(out, yaml.safe_dump(summary, sort_keys=False))
    print(f"wrote {out}")
    return 0


def _eval_sweep(run: Any, sweep: Any, episodes: int) -> int:
    """``robot-rl eval RUN --sweep PARAM=LO:HI``: one parameter through and past its training range."""
    from robot_rl.transfer.sweep import run_sweep

    rows = run_sweep(run, sweep, episodes)
    keys = [k for k in rows[0] if k not in ("value", "criterion_met", "episodes", "failures_go_with")]
    print(f"{sweep.param} (x nominal)  " + "  ".join(keys))
    for row in rows:
        print(f"{row['value']:>8.3f}            " + "  ".join(f"{row[k]:.4g}" for k in keys))
    factors = [(row["value"], row["failures_go_with"]) for row in rows if row["failures_go_with"]]
    if factors:
        print("failed episodes went with (their mean, and the mean of all episodes at that point):")
        for value, text in factors:
            print(f"  {sweep.param} x{value:.3g}: {text}")
    print(f"wrote {run.run_dir / f'{sweep.stem}.csv'} and {run.run_dir / f'{sweep.stem}.png'}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``robot-rl export onnx RUN`` and ``robot-rl export firmware RUN|ONNX``."""
    if args.format in ("firmware", "ros2-node"):
        return cmd_export_firmware(args)
    from robot_rl.run import export_run, load_run

    if args.out is not None:
        check_folder_writable(args.out, "output folder")
    if _is_bc_run(args.run):
        from robot_rl.imitation.train_bc import export_bc_run, load_bc_run

        bc_run = load_bc_run(args.run)
        check_folder_writable(args.out or args.run, "output folder")
        path = export_bc_run(bc_run, args.out)
        print(f"wrote {path} and {path.parent / 'contract.yaml'}")
        return 0
    run = load_run(args.run)
    check_folder_writable(args.out or args.run, "output folder")
    path = export_run(run, args.out)
    print(f"wrote {path} and {path.parent / 'contract.yaml'}")
    return 0


def cmd_export_firmware(args: argparse.Namespace) -> int:
    """``robot-rl export firmware``: C99 for a microcontroller with its report; ``robot-rl export ros2-node``: that
    C built into a native ROS 2 node (nothing written on failure)."""
    import tempfile

    from firmware_export.export import export_firmware
    from firmware_export.ros2_node import build_ros2_node
    from policies.runtime.contract import MAX_CONTROL_RATE_HZ

    node = args.format == "ros2-node"
    _in_range("--vectors", args.vectors, 1, 100_000)
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
            from robot_rl.run import export_run, load_run

            onnx_path = export_run(load_run(src), Path(tmp))
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


def cmd_bench(args: argparse.Namespace) -> int:
    """``robot-rl bench``: env steps per second at several world counts."""
    from robot_rl.bench import format_table, measure_env_steps
    from sim.registry import get_task

    get_task(args.task)
    check_device(args.device)
    _in_range("--seconds", args.seconds, 1e-3, 3600)
    for n in args.num_envs:
        _in_range("--num-envs", n, 1, MAX_NUM_ENVS)
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


def cmd_deploy(args: argparse.Namespace) -> int:
    """``robot-rl deploy``: the launch file's node graph in one process, over real DDS; prints a summary."""
    _in_range("--duration", args.duration, 0.1, 86400)
    try:
        from robot_rl_ros.graph import DeployError, check_namespace, read_params, run_graph
    except ImportError as exc:
        raise ConfigError(f"ROS 2 Python packages are missing ({exc.name}); pip install -e '.[ros2]'") from None
    try:
        params = read_params(args.params)
        check_namespace(args.namespace)
        if args.model is not None:
            if not args.model.is_file():
                raise DeployError(f"model '{args.model}' does not exist")
            params["policy_node"]["model_path"] = str(args.model)
        if args.record is not None:
            check_folder_writable(args.record.parent, "recording folder")
            if args.record.is_dir():
                raise DeployError(f"--record '{args.record}' is a folder; give a file name such as run.mcap")
            if args.record.exists() or args.record.is_symlink():
                raise DeployError(f"--record '{args.record}' already exists; recordings are never overwritten")
        result = run_graph(
            params, args.sim, args.duration, args.namespace, record=args.record, executor_kind=args.executor
        )
    except DeployError as exc:
        raise ConfigError(str(exc)) from None
    print(
        f"policy_node: {result.commands} commands, {result.rejected} rejected messages, fault: {result.fault or 'none'}"
    )
    if result.sim:
        steps, rejected = result.sim["steps"], result.sim["rejected"]
        print(f"sim_robot_node: {steps} steps, {rejected} rejected commands, {_sim_summary(result.sim)}")
    if args.record is not None:
        print(f"recorded {result.recorded} messages to {args.record}")
    return 0 if not result.fault else 1


def _sim_summary(sim: dict[str, Any]) -> str:
    """The simulated robot's figures: crashes and the position error (multirotors), or episodes and successes
    (manipulators, whose episodes end on the task's clock)."""
    errors = sim["position_errors_m"]
    if errors:
        tail = errors[-max(1, round(1.0 / sim["control_period_s"])) :]
        return f"{sim['crashes']} crashes, mean position error over the last second {sum(tail) / len(tail):.4f} m"
    episodes = sim["episodes_succeeded"]
    tank = f", energy tank {sim['tank_j']:.2f} J" if "tank_j" in sim else ""
    return f"{len(episodes)} episodes finished, {sum(episodes)} succeeded{tank}"


def cmd_replay(args: argparse.Namespace) -> int:
    """``robot-rl replay``: the recorded policy re-run offline on the recorded inputs; exit 1 if it diverges."""
    try:
        from robot_rl_ros.recording import RecordingError, replay
    except ImportError as exc:
        raise ConfigError(f"ROS 2 / MCAP Python packages are missing ({exc.name}); pip install -e '.[ros2]'") from None
    try:
        r = replay(args.recording, args.model)
    except RecordingError as exc:
        raise ConfigError(str(exc)) from None
    print(r.line(args.recording))
    return 0 if r.max_divergence <= 1e-5 else 1


def cmd_inspect(args: argparse.Namespace) -> int:
    """``robot-rl inspect``: a contract, readable."""
    from policies.runtime import load_contract
    from policies.runtime.inspect import describe

    src: Path = args.source
    if src.is_dir() and _is_bc_run(src):
        from robot_rl.imitation.train_bc import load_bc_run

        contract = load_bc_run(src).deployment_contract()
    elif src.is_dir():
        from robot_rl.run import load_run

        run = load_run(src)
        contract = run.env.contract(run.cfg.policy.actor_obs)
    else:
        contract = load_contract(src)
    print(describe(contract))
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


def cmd_tasks(args: argparse.Namespace) -> int:
    """``robot-rl tasks``: registered tasks with backend and success criterion."""
    from sim.registry import get_task, task_names

    for name in task_names():
        spec = get_task(name)
        print(f"{name:<20} [{spec.backend}] {spec.description}")
        if spec.success:
            print(f"{'':<20} success: {spec.success}")
    return 0


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "collect": cmd_collect,
    "train-bc": cmd_train_bc,
    "export": cmd_export,
    "bench": cmd_bench,
    "deploy": cmd_deploy,
    "replay": cmd_replay,
    "inspect": cmd_inspect,
    "tasks": cmd_tasks,
}

if __name__ == "__main__":
    sys.exit(main())
