"""Environment throughput: world steps per second of a task's batched ``VecEnv`` across world counts and devices.

What it measures: for each device and ``num_envs``, the env is built, reset, stepped for a short untimed warm-up
and then for ``--seconds`` with uniform random actions in ``[-1, 1]`` under ``torch.inference_mode()``; the figure
is ``num_envs x steps / wall time`` (world steps per second; crashes and auto-resets included, as in training).
A second table compares, at 1024 worlds on CPU and measured back to back, the torch interface with the gymnasium
adapter (``sim.adapters.GymVecEnv``: numpy actions in, numpy observations out), i.e. the conversion overhead a
third-party library pays. Figures on a shared machine are noisy; compare ratios within one run.

Run::

    python bench/env_steps.py                              # quadrotor-hover, 1..16384 worlds, cpu (+ cuda if present)
    python bench/env_steps.py --device cpu --num-envs 64 1024 --seconds 1
    python bench/env_steps.py --task cartpole-balance --num-envs 1 64 256
    python bench/env_steps.py --device cpu --num-envs 256 4096 --compile --adapter-envs 0   # eager vs compiled
"""

from __future__ import annotations

import argparse
import os

import torch

from robot_rl.bench import adapter_overhead_rows, env_steps_rows, format_table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="quadrotor-hover", help="registered task name")
    p.add_argument(
        "--device", action="append", default=None, help="device(s) to measure (repeatable; default: cpu and cuda)"
    )
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 4096, 16384], help="world counts")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--compile", action="store_true", help="also measure each row with VecEnv.compile()")
    p.add_argument("--adapter-envs", type=int, default=1024, help="world count of the adapter comparison (0: skip)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Measure and print the tables."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    omp = os.environ.get("OMP_WAIT_POLICY")
    print(f"task {args.task} | torch {torch.__version__} | {torch.get_num_threads()} threads | {os.cpu_count()} CPUs")
    print(
        f"OMP_WAIT_POLICY={omp or 'unset (OpenMP default)'} | random actions, "
        f"{args.seconds:g} s timed per row after a warm-up\n"
    )
    if "cuda" in devices and torch.cuda.is_available():
        print(f"cuda: {torch.cuda.get_device_name()}")
    print(format_table(env_steps_rows(args.task, args.num_envs, devices, args.seconds, args.compile)))
    if args.adapter_envs:
        print("\nnumpy conversion overhead of the gymnasium adapter (cpu, back to back):")
        print(format_table(adapter_overhead_rows(args.task, args.adapter_envs, args.seconds)))


if __name__ == "__main__":
    main()
