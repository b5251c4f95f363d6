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
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is a folder of scripts, not a package

from compare_revisions import ROOT, first_success
from compare_revisions import train as train_run

from robot_rl.bench import format_table
from robot_rl.logger import save_png

Curve = dict[str, list[float]]
"""``steps`` (env steps), ``met`` (0 / 1), ``crash_free`` (fraction), ``tail`` (m): one entry per evaluation."""


def evaluations(run: Path) -> Curve:
    """Every periodic evaluation of a run folder's ``metrics.csv`` (skipped ones left out)."""
    for name in ("metrics.csv", "config.yaml"):
        if not (run / name).is_file():
            raise SystemExit(f"{run} is not a training run folder: it has no {name}")
    curve: Curve = {k: [] for k in ("steps", "met", "crash_free", "tail")}
    for row in csv.DictReader((run / "metrics.csv").open()):
        if row.get("eval/criterion_met") in (None, ""):
            continue
        curve["steps"].append(float(row["env_steps"]))
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
    """One run to the config's iteration cap (or ``iterations``); its run folder."""
    overrides = ["runner.stop_on_success=false", f"ppo.desired_kl={kl}"]
    if iterations is not None:
        overrides.append(f"runner.max_iterations={iterations}")
    print(f"training KL {kl:g}, seed {seed} ...", flush=True)
    train_run(ROOT, "quadrotor-hover", seed, None, root, overrides)
    return next(root.glob("quadrotor-hover/*/"))


def summary_row(name: str, run: Path, c: Curve) -> dict[str, str]:
    """First success, best and last periodic evaluation of one run."""
    first_s, _ = first_success(run / "metrics.csv")
    best = max(range(len(c["tail"])), key=lambda i: (c["met"][i], -c["tail"][i]))
    fig = lambda i: f"{100 * c['crash_free'][i]:.1f} % / {100 * c['tail'][i]:.1f} cm"  # noqa: E731
    return {
        "run": name,
        "criterion first met": "never" if first_s == float("inf") else f"{first_s:.1f} s",
        "best evaluation": f"{fig(best)} at {c['steps'][best] / 1e6:.1f} M steps",
        "last periodic evaluation": f"{fig(-1)} ({'met' if c['met'][-1] > 0.5 else 'not met'})",
    }


def plot(curves: list[tuple[str, Curve]], out: Path) -> None:
    """Crash-free rate and tail error against env steps, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, c in curves:
        steps = [s / 1e6 for s in c["steps"]]
        ax1.plot(steps, [100 * v for v in c["crash_free"]], label=name)
        ax2.plot(steps, [100 * v for v in c["tail"]], label=name)
    ax1.axhline(95, color="k", ls=":", lw=1)
    ax2.axhline(5, color="k", ls=":", lw=1)
    ax1.set(xlabel="env steps (M)", ylabel="crash-free (%)", title="evaluation, randomisation on", ylim=(85, 100.5))
    ax2.set(xlabel="env steps (M)", ylabel="mean tail position error (cm)", title="criterion: < 5 cm", ylim=(0, 10))
    ax1.legend()
    fig.tight_layout()
    save_png(fig, out)
    plt.close(fig)
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
        read = [evaluations(r) for r in runs]  # checks each folder before its config is read
        curves = [(label(r), c) for r, c in zip(runs, read, strict=True)]
        print(format_table([summary_row(n, r, c) for r, (n, c) in zip(runs, curves, strict=True)]))
    plot(curves, args.out)


if __name__ == "__main__":
    main()
