"""The ``robot-rl`` command line: this module keeps :func:`main` and the one error policy; each verb group is a module
beside it with ``add_parser(sub)`` and its ``run`` functions side by side (``train``, ``evaluate``, ``imitation``,
``export``, ``deploy``, ``info``).

    robot-rl train quadrotor-hover [--num-envs N] [--device cpu|cuda] [--seed S] [--max-time SEC]
                                   [--config FILE] [--set key=value ...] [--resume RUN]
    robot-rl eval RUN [--episodes N] [--sim pybullet | --sweep PARAM=LO:HI | --control-rate HZ
                      | --trajectory step|figure8|figure8-position]
    robot-rl collect TASK --teacher RUN|scripted --episodes N --out DIR
    robot-rl train-bc --policy diffusion|mlp --dataset DIR [--set key=value ...] [--resume RUN]
    robot-rl export onnx|int8|firmware|ros2-node RUN [--out DIR]
    robot-rl deploy --params FILE [--sim] [--record RUN.mcap]      robot-rl replay RUN.mcap
    robot-rl dataset from-mcap RUN.mcap [...] --out DIR
    robot-rl dataset merge DATASET DATASET [...] --out DIR [--set env.KEY=VALUE ...]
    robot-rl inspect policy.onnx|RUN      robot-rl tasks      robot-rl bench

Exit status: 0 done; 2 a user error (unknown task or key, wrong type or range, missing or corrupt run, a file
where a folder is expected, an unwritable folder, an unusable device), reported as one line that names what is
wrong, before anything is written; 1 training diverged (one line naming the iteration and the quantity; the last
good checkpoint is kept); 130 interrupted by Ctrl-C (training saves its checkpoint at the iteration boundary).
"""

from __future__ import annotations

import os
import sys

from robot_rl.threads import COMPUTE_COMMANDS, busy_cores, openmp_environment

# How OpenMP threads wait (robot_rl/threads.py), decided before torch loads; a command that computes looks at how
# busy the machine is first.
os.environ.update(openmp_environment(os.environ, busy_cores() if sys.argv[1:2] in COMPUTE_COMMANDS else None))

import argparse
import signal
import threading
from collections.abc import Callable, Sequence

import torch.distributed

from policies.runtime.text import printable
from robot_rl.algorithms.ppo import TrainingDivergedError
from robot_rl.cli import deploy, evaluate, export, imitation, info, train
from robot_rl.cli.common import USER_ERRORS, OneLineParser
from robot_rl.distributed import exit_rank, launched_by_torchrun

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": train.run,
    "eval": evaluate.run,
    "collect": imitation.run_collect,
    "train-bc": imitation.run_train_bc,
    "export": export.run,
    "deploy": deploy.run_deploy,
    "replay": deploy.run_replay,
    "dataset": deploy.run_dataset,
    "inspect": info.run_inspect,
    "tasks": info.run_tasks,
    "bench": info.run_bench,
}
"""Verb -> the function that runs it."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (kept separate so tests and docs can inspect it)."""
    parser = OneLineParser(
        prog="robot-rl",
        description="Train robot policies in batched simulation, evaluate them and export them for deployment.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for module in (train, evaluate, imitation, export, info, deploy):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None, console: bool = False) -> int:
    """Entry point of the ``robot-rl`` console script; returns the exit status (see the module docstring).
    ``console``: the process is this command alone (:mod:`robot_rl.entry`), so a command may end it (``deploy``
    bounds its DDS release that way); in-process callers such as tests leave it ``False``."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what --nproc re-runs under torchrun
    args.console = console
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
    writes remove their temporary files and recordings are finished; no checkpoint is written on the way out."""
    raise SystemExit(128 + signum)


def _fail(message: str, status: int) -> int:
    print(f"robot-rl: error: {printable(' '.join(message.split()))}", file=sys.stderr)  # one line, no escapes
    return status


def _describe(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and exc.filename:
        return f"cannot use '{exc.filename}': {exc.strerror or exc}"
    return str(exc)
