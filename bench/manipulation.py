"""Where a manipulation teacher stands: time to each success level, success with randomisation on and off, and
through the energy tank.

For each PPO run folder of a ``panda-*`` task (``robot-rl train panda-lift``, ...), printed side by side:

- the training budget it used (wall seconds, env steps, iterations, from ``metrics.csv``) and the wall time at which
  the periodic evaluation (selection seeds) first reached each of ``--levels``;
- success of the policy the folder keeps (``best.pt`` if any, else the last checkpoint) over ``--episodes``
  episodes on the held-out evaluation seeds, randomisation on and off, with the task's median figure;
- success of the exported ``policy.onnx`` through the energy tank at each ``--t-max`` (the ROS 2 node's
  implementation, as ``bench/passivity.py`` runs it), randomisation on.

Run::

    python bench/manipulation.py runs/panda-lift/<run> runs/panda-push/<run> --episodes 500 --t-max 20 40 80
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from passivity import run as tank_run

from robot_rl.bench import format_table
from robot_rl.runs import PPORun

LEVELS = (0.25, 0.5, 0.7, 0.85, 0.9)
"""Success levels whose first time is reported, fractions of the periodic evaluation's episodes."""


def training_figures(run_dir: Path, levels: tuple[float, ...]) -> dict[str, float]:
    """Budget used and the wall time (s) the periodic evaluation first reached each level (NaN: never)."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{run_dir / 'metrics.csv'} holds no rows")
    last = rows[-1]
    out = {
        "wall s": float(last["perf/wall_time_s"]),
        "env steps [M]": float(last["env_steps"]) / 1e6,
        "iterations": float(len(rows)),
    }
    evals = [(float(r["perf/wall_time_s"]), float(r["eval/success_rate"])) for r in rows if r.get("eval/success_rate")]
    for level in levels:
        out[f"t({level:.0%}) s"] = next((t for t, s in evals if s >= level), math.nan)
    return out


def main(argv: list[str] | None = None) -> None:
    """Print one row per run folder."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="+", help="PPO run folders of panda-* tasks")
    p.add_argument("--episodes", type=int, default=500, help="held-out episodes per setting (default: 500)")
    p.add_argument("--t-max", type=float, nargs="*", default=[], help="energy tank sizes, J (default: none)")
    p.add_argument("--levels", type=float, nargs="+", default=list(LEVELS))
    args = p.parse_args(argv)
    rows = []
    for run_dir in args.runs:
        run = PPORun.load(run_dir)
        row: dict[str, object] = {"run": f"{run.task} {run_dir.name}"}
        row.update(training_figures(run_dir, tuple(args.levels)))
        for result in run.evaluate(args.episodes, stem="eval_bench"):
            tag = result.setting.removeprefix("randomisation ")  # on / off / on, energy tank 40 J
            row[f"success DR {tag}"] = float(result.episodes["success"].mean())
            for name, values in result.episodes.items():
                if name.startswith("final_"):
                    row[f"median {name} DR {tag}"] = float(sorted(values)[len(values) // 2])
        if args.t_max:
            run.export()
        for t_max in args.t_max:
            row[f"tank {t_max:g} J"] = tank_run(run_dir, args.episodes, t_max, seed=3)["success"]
        rows.append(row)
    print(format_table(rows))


if __name__ == "__main__":
    main()
