"""Time to criterion of one training command at two git revisions of robot-rl, side by side ("before and after").

What it measures: for each seed, ``robot-rl train TASK --seed S --max-time T --quiet`` runs once in a temporary
``git worktree`` of ``--before`` (default: the commit before the Crazyflie identification ranges) and once in this
checkout, alternating before / after per seed so that the machine's drift hits both sides alike. From each run's
``metrics.csv`` it reads the wall time and env steps at the first periodic evaluation that met the task's criterion
(the runner stops there with ``runner.stop_on_success: true``, as shipped). Both sides use this checkout's Python
environment; each revision uses its own code and its own ``configs/``. The medians and the after / before ratios are
printed. A seed that never meets the criterion counts as above the budget.

Run::

    python bench/compare_revisions.py --seeds 0 1 2 --max-time 400
    python bench/compare_revisions.py --before HEAD~3 --task cartpole-balance --seeds 0 --max-time 60
    python bench/compare_revisions.py --before f8390f3 --after-set compile=true --max-time 300

``--after-set KEY=VALUE`` (repeatable) passes ``--set KEY=VALUE`` to the after side only (an option the before side
does not have).
"""

from __future__ import annotations

import argparse
import csv
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robot_rl.bench import format_table

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "e3db1ec"
"""The last commit before the quadrotor's randomisation covered the published Crazyflie identifications."""


def first_success(metrics: Path) -> tuple[float, float]:
    """``(wall seconds, env steps)`` at the first evaluation that met the criterion, or ``(inf, steps at end)``."""
    rows = list(csv.DictReader(metrics.open()))
    for r in rows:
        if r.get("eval/criterion_met") not in (None, "") and float(r["eval/criterion_met"]) > 0.5:
            return float(r["perf/wall_time_s"]), float(r["env_steps"])
    return math.inf, float(rows[-1]["env_steps"]) if rows else 0.0


def train(
    checkout: Path, task: str, seed: int, max_time: float | None, root: Path, overrides: list[str] | None = None
) -> dict[str, Any]:
    """One training run in ``checkout`` (with ``--set`` ``overrides``; ``max_time`` None: the config's own budget);
    its time and steps to the criterion."""
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", task, "--seed", str(seed), "--quiet", "--no-export",
           "--run-root", str(root)]  # fmt: skip
    if max_time is not None:
        cmd += ["--max-time", str(max_time)]
    for item in overrides or []:
        cmd += ["--set", item]
    done = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:  # a refused --set or a crash: say which run and why, not a CalledProcessError
        raise SystemExit(f"seed {seed} in {checkout} failed (exit {done.returncode}):\n{done.stderr.strip()[-2000:]}")
    metrics = next(root.glob(f"{task}/*/metrics.csv"))
    seconds, steps = first_success(metrics)
    return {"seed": seed, "time_to_criterion_s": seconds, "env_steps": steps, "steps/s": steps / seconds}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default=BEFORE, help=f"git revision of the 'before' side (default: {BEFORE})")
    p.add_argument("--task", default="quadrotor-hover")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--max-time", type=float, default=400.0, help="training budget per run, s")
    p.add_argument("--after-set", action="append", default=[], metavar="KEY=VALUE", help="--set for the after side")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run both sides for every seed and print the table."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="robot-rl-revs-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(before), args.before], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        rows: list[dict[str, Any]] = []
        try:
            for seed in args.seeds:
                for side, checkout in (("before", before), ("after", ROOT)):
                    label = args.before if side == "before" else "this checkout"
                    print(f"{side} ({label}) seed {seed} ...", flush=True)
                    out = Path(tmp) / f"{side}-{seed}"
                    extra = args.after_set if side == "after" else []
                    rows.append({"side": side, **train(checkout, args.task, seed, args.max_time, out, extra)})
                    shutil.rmtree(out, ignore_errors=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)

    def shown(seconds: float) -> float | str:
        return seconds if math.isfinite(seconds) else f"> {args.max_time:g}"

    table = [{**r, "time_to_criterion_s": shown(r["time_to_criterion_s"])} for r in rows]
    after = "this checkout" + "".join(f" --set {item}" for item in args.after_set)
    print(f"\n{args.task}: time to criterion per seed (before = {args.before}, after = {after})")
    print(format_table(table))
    summary = []
    for key in ("time_to_criterion_s", "env_steps"):
        b = statistics.median(r[key] for r in rows if r["side"] == "before")
        a = statistics.median(r[key] for r in rows if r["side"] == "after")
        ratio = a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else None
        summary.append({"median": key, "before": b, "after": a, "after / before": ratio})
    print(format_table(summary))


if __name__ == "__main__":
    main()
