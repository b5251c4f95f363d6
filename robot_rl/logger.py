"""Training log: TensorBoard scalars, a CSV of the same rows, console progress and the PNG learning curve.

On a terminal the progress is a ``tqdm`` bar; when stderr is not a terminal (CI, ``nohup``, a log file) it is one
plain line every :data:`PLAIN_INTERVAL_S` seconds and at every evaluation, so logs stay readable.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from policies.runtime.files import atomic_write_bytes

PLAIN_INTERVAL_S = 10.0
"""Seconds between progress lines when stderr is not a terminal."""


def interactive() -> bool:
    """Whether progress bars may redraw (stderr is a terminal)."""
    return sys.stderr.isatty()


class TrainingLogger:
    """Writes one row of scalars per iteration.

    Args:
        run_dir: Run folder (``metrics.csv``, ``tb/``, ``learning_curve.png`` go there).
        total_iterations: Upper bound for the progress bar (``None``: open-ended, e.g. when training stops at the
            success criterion, so no misleading time estimate is shown).
        tensorboard: Also write TensorBoard event files.
        quiet: No progress output (tests).
        start_iteration: Iterations done before this call (a resumed run): the plain log and the progress bar count
            the run's iterations, not this session's.
        start_s: Training seconds before this call (a resumed run), added to the plain log's clock.
    """

    def __init__(
        self,
        run_dir: Path,
        total_iterations: int | None,
        tensorboard: bool = True,
        quiet: bool = False,
        start_iteration: int = 0,
        start_s: float = 0.0,
    ) -> None:
        self.run_dir = run_dir
        self.rows: list[dict[str, float]] = []
        self._csv_path = run_dir / "metrics.csv"
        self._writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(run_dir / "tb"))
        self.bar = tqdm(
            total=total_iterations,
            initial=start_iteration,
            unit="it",
            dynamic_ncols=True,
            disable=quiet or not interactive(),
            leave=True,
        )
        self._plain = not quiet and not interactive()
        self.start_iteration = start_iteration
        self.start = time.monotonic() - start_s
        self._last_line = -math.inf
        self._kl: float | None = None  # the last row's policy/desired_kl

    def log(self, row: dict[str, float], step: int) -> None:
        """Record scalars for global env step ``step`` and refresh the progress bar."""
        self.rows.append({"env_steps": float(step), **row})
        if self._writer is not None:
            for k, v in row.items():
                if math.isfinite(v):
                    self._writer.add_scalar(k, v, step)
        self.bar.update(1)
        post = {}
        if "perf/steps_per_s" in row:  # PPO: environment steps per second
            post["steps/s"] = f"{row['perf/steps_per_s']:,.0f}"
        if "train/loss" in row:  # behaviour cloning: the gradient step's loss
            post["step"] = f"{int(step) + 1:,}"
            post["loss"] = f"{row['train/loss']:.4f}"
        if "episode/return" in row:
            post["return"] = f"{row['episode/return']:.2f}"
        if "episode/success" in row:
            post["success"] = f"{row['episode/success']:.0%}"
        if "eval/criterion_met" in row:
            post["eval"] = "met" if row["eval/criterion_met"] else "not met"
            if "eval/success_rate" in row:  # the figure the selection keeps the best checkpoint by
                post["eval"] = f"{row['eval/success_rate']:.1%} ({post['eval']})"
            if "corners/success_rate" in row:  # runner.selection_corner_episodes
                post["eval"] += f", corners {row['corners/success_rate']:.1%}"
            if row.get("eval/quality_met") and not row.get("corners/quality_met", 1.0):
                post["eval"] += ", quality met over the ranges, not at the corners"
            elif row.get("eval/quality_met"):
                post["eval"] += ", quality met"
                if "confirm/quality_met" in row:  # runner.quality_confirm_episodes
                    confirm = f"over {int(row['confirm/episodes'])} more episodes"
                    post["eval"] += f", {'confirmed' if row['confirm/quality_met'] else 'not confirmed'} {confirm}"
        elif "eval/skipped" in row:
            post["eval"] = "skipped (runner.eval_gate)"
        elif "eval/success_rate" in row:  # behaviour cloning: success in closed loop, no criterion
            post["eval"] = f"{row['eval/success_rate']:.1%}"
        kl = row.get("policy/desired_kl")  # PPO's adaptive KL target: switched at the criterion and on a plateau
        if kl is not None and self._kl is not None and kl != self._kl:
            post["KL target"] = f"{self._kl:g} -> {kl:g}"
        self._kl = kl if kl is not None else self._kl
        self.bar.set_postfix(post, refresh=False)
        now = time.monotonic()
        if self._plain and ("eval" in post or "KL target" in post or now - self._last_line >= PLAIN_INTERVAL_S):
            self._last_line = now
            fields = " | ".join(f"{k} {v}" for k, v in post.items())
            it = self.start_iteration + len(self.rows)
            print(f"iteration {it} | {now - self.start:.1f} s | {fields}", file=sys.stderr, flush=True)
        if len(self.rows) % 20 == 0:  # keep metrics.csv current for anyone watching the run
            self.write_csv()

    def close(self) -> None:
        """Flush everything: CSV and PNG written atomically, TensorBoard closed."""
        self.bar.close()
        if self._writer is not None:
            self._writer.close()
        self.write_csv()
        self.plot()

    def write_csv(self) -> None:
        """``metrics.csv``: one row per iteration, union of all columns."""
        if not self.rows:
            return
        keys = sorted({k for r in self.rows for k in r}, key=lambda k: (k != "env_steps", k))
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys)
        w.writeheader()
        w.writerows(self.rows)
        atomic_write_bytes(self._csv_path, buf.getvalue().encode())

    def plot(self) -> None:
        """``learning_curve.png``: mean episode return, success rates and the task's evaluation figures against env
        steps (evaluations with randomisation on)."""
        if not self.rows:
            return
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        def series(key: str) -> tuple[list[float], list[float]]:
            pts = [(r["env_steps"], r[key]) for r in self.rows if key in r and math.isfinite(r[key])]
            return [p[0] for p in pts], [p[1] for p in pts]

        standard = {"eval/return_mean", "eval/return_std", "eval/success_rate", "eval/episodes", "eval/randomization"}
        not_figures = {"eval/criterion_met", "eval/quality_met", "eval/skipped"}  # flags; the eval_gate's skip marker
        figures = sorted({k for r in self.rows for k in r if k.startswith("eval/")} - standard - not_figures)
        rates = [k for k in figures if k.endswith("_rate")]
        others = [k for k in figures if not k.endswith("_rate")]
        fig, axes = plt.subplots(1, 3 if others else 2, figsize=(16 if others else 11, 3.8))
        ax_r, ax_s = axes[0], axes[1]
        ax_r.plot(*series("episode/return"), label="training episodes")
        ax_r.set_xlabel("env steps")
        ax_r.set_ylabel("mean episode return")
        ax_r.grid(alpha=0.3)
        ax_s.plot(*series("episode/success"), label="training episodes: success")
        ax_s.plot(*series("eval/success_rate"), "o-", label="evaluation: success")
        if any("corners/success_rate" in r for r in self.rows):  # runner.selection_corner_episodes
            ax_s.plot(*series("corners/success_rate"), "^-", label="evaluation at corners: success")
        for k in rates:
            ax_s.plot(*series(k), "s--", label=f"evaluation: {k.removeprefix('eval/')}")
        ax_s.set_xlabel("env steps")
        ax_s.set_ylabel("rate")
        ax_s.set_ylim(-0.02, 1.02)
        ax_s.grid(alpha=0.3)
        ax_s.legend(fontsize=8)
        if others:  # the task's own criterion figures (errors in SI units), log scale
            for k in others:
                axes[2].plot(*series(k), "o-", label=k.removeprefix("eval/"))
            axes[2].set_yscale("log")
            axes[2].set_xlabel("env steps")
            axes[2].set_ylabel("evaluation figure")
            axes[2].grid(alpha=0.3, which="both")
            axes[2].legend(fontsize=8)
        fig.suptitle(f"{self.run_dir.parent.name} / {self.run_dir.name}")
        fig.tight_layout()
        save_png(fig, self.run_dir / "learning_curve.png")
        plt.close(fig)


def save_png(fig: Any, path: Path) -> None:
    """Save a matplotlib figure as PNG atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


class NullLogger:
    """The logger of ranks other than 0 in data-parallel training: records nothing, writes nothing."""

    def log(self, row: dict[str, float], step: int) -> None:
        """Ignore a row."""

    def close(self) -> None:
        """Nothing to flush."""
