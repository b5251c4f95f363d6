"""What each safety setting of the quadrotor parameter files costs in hover accuracy, over DDS, side by side.

Each row runs the hover policy against the simulated Crazyflie (``robot-rl deploy --sim``: ``policy_node`` and
``sim_robot_node`` over real DDS, ``quadrotor_sim.yaml`` with the row's settings) for ``--runs`` runs of
``--seconds`` from the task's random starts (up to 0.5 m away, 30 degrees tilted), and prints: runs that crashed,
the mean position error over each run's last 2 s (mean and worst run), against the same runs with the simulation
file's settings (no rate limit, no fade-in), and the largest change per second of the commands sent (``rpm/s``,
p99 and max over the runs; in rows without a limit, what the policy asks for and a limit must leave alone). Rows:
the simulation file, the robot file as it shipped before (200,000 rpm/s, 1 s fade-in from hover rotor speed) and as
it ships now (200,000 rpm/s, 0.2 s fade-in), each setting alone, and rate limits and fade-ins between. Seeds are the
run index, so every row flies the same starts.

Run::

    python bench/ros2_safety_cost.py --model runs/quadrotor-hover/<run>/policy.onnx --runs 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from ros2_closed_loop import closed_loop

from robot_rl.bench import format_table

ROWS: list[tuple[str, dict[str, Any]]] = [
    ("simulation file: no limit, no fade-in", {}),
    ("robot file before: 200,000 rpm/s, fade-in 1 s", {"max_rate": 200000.0, "fade_in_s": 1.0}),
    ("robot file now: 200,000 rpm/s, fade-in 0.2 s", {"max_rate": 200000.0, "fade_in_s": 0.2}),
    ("fade-in 1 s alone", {"fade_in_s": 1.0}),
    ("fade-in 0.2 s", {"fade_in_s": 0.2}),
    ("200,000 rpm/s alone", {"max_rate": 200000.0}),
    ("500,000 rpm/s", {"max_rate": 500000.0}),
    ("1,000,000 rpm/s", {"max_rate": 1000000.0}),
    ("2,000,000 rpm/s", {"max_rate": 2000000.0}),
]


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="an exported quadrotor-hover policy.onnx")
    ap.add_argument("--runs", type=int, default=4, help="runs per row (seeds 0..runs-1, the same for every row)")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one run")
    args = ap.parse_args(argv)
    rows, base = [], None
    for k, (name, settings) in enumerate(ROWS):
        runs = [
            closed_loop(args.model, "input", args.seconds, f"cost{k}_{s}", settings=settings, seed=s)
            for s in range(args.runs)
        ]
        tails = np.array([r["tail_m"] for r in runs])
        base = tails if base is None else base
        rows.append(
            {
                "setting": name,
                "crashed runs": f"{sum(r['crashes'] > 0 for r in runs)} of {len(runs)}",
                "tail error cm, mean": round(100 * float(tails.mean()), 2),
                "worst run cm": round(100 * float(tails.max()), 2),
                "cost cm (mean, vs simulation file)": round(100 * float((tails - base).mean()), 2),
                "command change rpm/s, p99 / max": f"{max(r['change_p99'] for r in runs):,.0f} / "
                f"{max(r['change_max'] for r in runs):,.0f}",
            }
        )
        print(rows[-1], flush=True)
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
