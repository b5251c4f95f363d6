"""Training throughput on an idle and on a busy machine, by OpenMP wait setting: what ``robot-rl train`` should
default to.

What it measures: ``robot-rl train TASK --max-iterations N`` (no evaluation, no export) as a subprocess under each
setting, once on an idle machine and once beside one busy process (a pure-Python loop that keeps one core at
100 %, like a second job or a simulator beside the trainer). The figure is the median of the iterations'
``perf/steps_per_s`` (rollout and PPO update) after the first ``--skip`` iterations. Settings:

- ``robot-rl``: nothing set: the command chooses (:mod:`robot_rl.threads`: ``GOMP_SPINCOUNT`` 1,000 on an idle
  machine, ``OMP_WAIT_POLICY=PASSIVE`` when other processes keep half a core or more busy at start),
- ``default``: OpenMP's own (libgomp spins 300,000 times before a waiting thread sleeps),
- ``spin 1k``, ``spin 10k``: ``GOMP_SPINCOUNT`` 1,000 / 10,000 spins,
- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (sleep at once),
- ``1 thread``: ``OMP_NUM_THREADS=1``.

The cells run interleaved ``--repeats`` times (settings in turn, idle then busy), so slow spells of the machine
touch every setting alike; each cell prints the median of its repeats and its ratio to ``default`` under the same
load. Every row clears ``GOMP_SPINCOUNT``, ``OMP_WAIT_POLICY`` and ``OMP_NUM_THREADS`` and sets the ones it names.

Run::

    python bench/threads.py                       # quadrotor-hover, 30 iterations, 2 repeats (~10 min on 2 cores)
    python bench/threads.py --iterations 20 --repeats 1 --settings default "spin 1k"
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from robot_rl.bench import format_table

SETTINGS: dict[str, dict[str, str]] = {
    "robot-rl": {},
    "default": {"GOMP_SPINCOUNT": "300000"},
    "spin 1k": {"GOMP_SPINCOUNT": "1000"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "1 thread": {"OMP_NUM_THREADS": "1", "GOMP_SPINCOUNT": "300000"},
}
"""Environment of each setting (``default`` pins libgomp's own 300,000 spins, so robot-rl's default is overridden)."""
CLEARED = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS")
"""Variables removed from the inherited environment before a setting's own are applied."""


def train_steps_per_s(task: str, iterations: int, skip: int, env: dict[str, str], busy: bool) -> float:
    """Median training steps/s of one ``robot-rl train`` run (optionally beside one busy process)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    if hog is not None:
        time.sleep(0.5)  # the neighbour is running before robot-rl looks at the machine
    try:
        with tempfile.TemporaryDirectory() as root:
            cmd = [
                sys.executable, "-m", "robot_rl.cli", "train", task, "--max-iterations", str(iterations),
                "--set", "runner.eval_interval=100000", "--set", "runner.stop_on_success=false",
                "--no-export", "--quiet", "--run-root", root,
            ]  # fmt: skip
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            metrics = next(Path(root).glob("*/*/metrics.csv"))
            rows = list(csv.DictReader(metrics.open()))
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    return statistics.median(float(r["perf/steps_per_s"]) for r in rows[skip:])


def main(argv: list[str] | None = None) -> None:
    """Run every setting idle and busy, interleaved, and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="quadrotor-hover")
    p.add_argument("--iterations", type=int, default=30, help="training iterations per run")
    p.add_argument("--skip", type=int, default=5, help="first iterations left out of the median (warm-up)")
    p.add_argument("--repeats", type=int, default=2, help="interleaved repeats of every cell")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = p.parse_args(argv)
    if args.skip >= args.iterations:
        p.error("--skip must be below --iterations")
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    print(f"{args.task}: {args.iterations} training iterations per run, {os.cpu_count()} CPUs, {args.repeats} repeats")
    results: dict[tuple[str, bool], list[float]] = {}
    for r in range(args.repeats):
        for name in args.settings:
            for busy in (False, True):
                sps = train_steps_per_s(args.task, args.iterations, args.skip, {**base, **SETTINGS[name]}, busy)
                results.setdefault((name, busy), []).append(sps)
                print(f"  repeat {r + 1}: {name:9s} {'busy' if busy else 'idle'}: {sps:,.0f} steps/s", flush=True)
    rows = []
    for name in args.settings:
        row: dict[str, object] = {"setting": name}
        for busy in (False, True):
            load = "busy" if busy else "idle"
            value = statistics.median(results[(name, busy)])
            row[f"{load} steps/s"] = round(value)
            if "default" in args.settings:
                row[f"{load} / default"] = round(value / statistics.median(results[("default", busy)]), 2)
        rows.append(row)
    print()
    print(format_table(rows))


if __name__ == "__main__":
    main()
