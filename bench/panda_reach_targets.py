"""``panda-reach`` time to criterion: joint targets relative to the measured joints (default) against absolute
targets about the home pose (the first design), side by side in one run.

What it measures: for each seed and variant, wall-clock seconds until robot-rl's PPO first meets the task's
criterion (>= 90 % of 256 randomised episodes within 5 cm and 0.3 rad), within ``--max-time`` seconds; then the final
evaluation figures. Variants (config overrides):

- ``relative``: the shipped config (``q_d = q + 0.25 a``, no last action in the observation);
- ``absolute``: ``env.targets=absolute env.action_scale=1.0 env.action_history=1`` (``q_d = home + 1.0 a``, the last
  action observed) — what the task started with.

Run::

    python bench/panda_reach_targets.py --seeds 0 --max-time 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is a folder of scripts, not a package

from time_to_criterion import run_robot_rl

from robot_rl.bench import format_table

VARIANTS = {
    "relative": [],
    "absolute": ["env.targets=absolute", "env.action_scale=1.0", "env.action_history=1"],
}


def main(argv: list[str] | None = None) -> None:
    """Train every variant for every seed and print the comparison."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--max-time", type=float, default=300.0, help="wall-clock budget per seed and variant, s")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="robot-rl-reach-") as tmp:
        for seed in args.seeds:
            for name, overrides in VARIANTS.items():
                print(f"{name}, seed {seed} (budget {args.max_time:g} s) ...", flush=True)
                row = run_robot_rl("panda-reach", seed, args.max_time, overrides, Path(tmp))
                rows.append({"variant": name, **row})
    print(format_table(rows))
    print()
    for name in VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        times = [r["time_to_criterion_s"] if r["met"] else float("inf") for r in mine]
        print(f"{name:>9}: median time to criterion {statistics.median(times):.1f} s "
              f"({sum(r['met'] for r in mine)}/{len(mine)} seeds met it within {args.max_time:g} s)")  # fmt: skip


if __name__ == "__main__":
    main()
