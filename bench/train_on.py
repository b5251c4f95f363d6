"""Training the hover policy on past its first success: the periodic evaluations of the whole run, per KL target.

What it measures: for each KL target and seed, ``robot-rl train quadrotor-hover --seed S --set
runner.stop_on_success=false --set ppo.desired_kl=K`` runs to the config's iteration cap (3,000 iterations, 49 M env
steps, about 6.5 min on 2 cores each). From each run's ``metrics.csv`` it reads every periodic evaluation (256
randomised episodes): crash-free rate and mean tail position error against env steps. It prints the first success,
the best and the last periodic evaluation per run, and plots both curves of every run side by side (PNG). The shipped KL
target (0.05) is tuned for the time to the first success; this shows what it does after it.

Run::

    python bench/train_on.py                                  # KL 0.05 and 0.01, seed 0 (about 13 min)
    python bench/train_on.py --kl 0.01 --seeds 0 1
    python bench/train_on.py --runs runs/quadrotor-hover/A runs/quadrotor-hover/B   # plot finished runs only
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robot_rl.bench import format_table

Curve = dict[str, list[float]]
"""``steps`` (env steps), ``time`` (s), ``met`` (0 / 1), ``crash_free`` (fraction), ``tail`` (m): one per evaluation."""


def evaluations(run: Path) -> Curve:
    """Every periodic evaluation of a run folder's ``metrics.csv`` (skipped ones left out)."""
    curve: Curve = {k: [] for k in ("steps", "time", "met", "crash_free", "tail")}
    for row in csv.DictReader((run / "metrics.csv").open()):
        if row.get("eval/criterion_met") in (None, ""):
            continue
        curve["steps"].append(float(row["env_steps"]))
        curve["time"].append(float(row["perf/wall_time_s"]))
        curve["met"].append(float(row["eval/criterion_met"]))
        curve["crash_free"].append(float(row["eval/crash_free_rate"]))
        curve["tail"].append(float(row["eval/tail_position_error_m"]))
    if not curve["steps"]:
        raise SystemExit(f"{run}/metrics.csv has no evaluation")
    return curve


def label(run: Path) -> str:
    """``KL <desired_kl>, seed <seed>`` from the run's resolved ``config.yaml``."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    return f"KL {cfg['ppo']['desired_kl']:g}, seed {cfg['seed']}"


def train(kl: float, seed: int, root: Path, iterations: int | None) -> Path:
    """One run to the iteration cap (or ``iterations``); its run folder."""
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "quadrotor-hover", "--seed", str(seed), "--quiet",
           "--run-root", str(root), "--set", "runner.stop_on_success=false",
           "--set", f"ppo.desired_kl={kl}"]  # fmt: skip
    if iterations is not None:
        cmd += ["--max-iterations", str(iterations)]
    print(f"training KL {kl:g}, seed {seed} ...", flush=True)
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    (run,) = (root / "quadrotor-hover").iterdir()
    return run


def summary_row(name: str, c: Curve) -> dict[str, str]:
    """First success, best and final evaluation of one run."""
    first = next((i for i, m in enumerate(c["met"]) if m > 0.5), None)
    best = max(range(len(c["tail"])), key=lambda i: (c["met"][i], -c["tail"][i]))
    fig = lambda i: f"{100 * c['crash_free'][i]:.1f} % / {100 * c['tail'][i]:.1f} cm"  # noqa: E731
    return {
        "run": name,
        "criterion first met": "never" if first is None else f"{c['time'][first]:.1f} s",
        "best evaluation": f"{fig(best)} at {c['steps'][best] / 1e6:.1f} M steps",
        "last periodic evaluation": f"{fig(-1)} ({'met' if c['met'][-1] > 0.5 else 'not met'})",
    }


def plot(curves: dict[str, Curve], out: Path) -> None:
    """Crash-free rate and tail error against env steps, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, c in curves.items():
        steps = [s / 1e6 for s in c["steps"]]
        ax1.plot(steps, [100 * v for v in c["crash_free"]], label=name)
        ax2.plot(steps, [100 * v for v in c["tail"]], label=name)
    ax1.axhline(95, color="k", ls=":", lw=1)
    ax2.axhline(5, color="k", ls=":", lw=1)
    ax1.set(xlabel="env steps (M)", ylabel="crash-free (%)", title="evaluation, randomisation on", ylim=(85, 100.5))
    ax2.set(xlabel="env steps (M)", ylabel="mean tail position error (cm)", title="criterion: < 5 cm", ylim=(0, 10))
    ax1.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kl", type=float, nargs="+", default=[0.05, 0.01], help="KL targets (ppo.desired_kl)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--iterations", type=int, help="iterations per run (default: the config's cap, 3,000)")
    parser.add_argument("--runs", type=Path, nargs="+", help="finished run folders to read instead of training")
    parser.add_argument("--out", type=Path, default=Path("train_on.png"), help="plot file (PNG)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.runs:
            runs = list(args.runs)
        else:
            runs = [train(kl, s, Path(tmp) / f"kl{kl:g}-{s}", args.iterations) for s in args.seeds for kl in args.kl]
        curves = {label(r): evaluations(r) for r in runs}
    print(format_table([summary_row(n, c) for n, c in curves.items()]))
    plot(curves, args.out)


if __name__ == "__main__":
    main()
