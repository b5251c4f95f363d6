"""Data-parallel training on one machine: 1 process against 2 (torchrun, gloo), side by side in one run.

What it measures: ``robot-rl train quadrotor-hover --nproc N`` with the shipped config (its worlds in total, split
over the processes) until the success criterion is met (evaluated by rank 0 every 5 iterations), for each seed and
``N`` in ``--nproc``, interleaved. From the run's ``metrics.csv``: wall-clock seconds to the criterion, iterations,
and the mean training throughput (env steps/s of all ranks together, evaluation excluded). torchrun gives each of N > 1
processes one OpenMP thread; the single process keeps torch's default (one thread per core).

Run::

    python bench/distributed.py --seeds 0 1 --nproc 1 2 --max-time 240
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from robot_rl.bench import format_table


def run(nproc: int, seed: int, max_time: float, root: Path) -> dict[str, Any]:
    """One training; a row of figures from its metrics."""
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "quadrotor-hover", "--nproc", str(nproc), "--seed", str(seed)]
    cmd += ["--max-time", str(max_time), "--run-root", str(root / f"n{nproc}-s{seed}"), "--no-export", "--quiet"]
    subprocess.run(cmd, check=True, capture_output=True)
    (metrics,) = (root / f"n{nproc}-s{seed}").glob("quadrotor-hover/*/metrics.csv")
    rows = list(csv.DictReader(metrics.open()))
    met = [r for r in rows if r.get("eval/criterion_met") == "1.0"]
    return {
        "nproc": nproc,
        "seed": seed,
        "met": bool(met),
        "time_to_criterion_s": float(met[0]["perf/wall_time_s"]) if met else float("nan"),
        "iterations": int(rows.index(met[0]) + 1) if met else len(rows),
        "steps/s": statistics.mean(float(r["perf/steps_per_s"]) for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--max-time", type=float, default=240.0)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="robot-rl-bench-dist-") as tmp:
        for seed in args.seeds:
            for n in args.nproc:
                rows.append(run(n, seed, args.max_time, Path(tmp)))
                print(format_table([rows[-1]]), flush=True)
    print("\n" + format_table(rows))
    for n in args.nproc:
        sel = [r for r in rows if r["nproc"] == n]
        print(
            f"nproc {n}: median time to criterion {statistics.median(r['time_to_criterion_s'] for r in sel):.1f} s, "
            f"mean throughput {statistics.mean(r['steps/s'] for r in sel):,.0f} env steps/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
