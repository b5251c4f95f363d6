"""Robustness sweeps: one physical parameter pushed through and past its training range, everything else as trained.

``robot-rl eval RUN --sweep PARAM=LO:HI --points K`` evaluates the run's policy at ``K`` values of ``PARAM`` (a
randomisable parameter of the task, as a *scale* of its nominal value: ``link_mass=0.5:1.5`` runs from half to one
and a half times the nominal masses). At each point the parameter is fixed to that scale in every world. The other
parameters are, with ``--sweep-others``:

- ``randomised`` (default): every other randomisation term stays on, as in training. The worst combinations of the
  range meet the swept value (e.g. the heaviest airframe with the weakest rotors): what a fleet drawn from the
  training ranges gets.
- ``nominal``: every other *physical* parameter at its nominal value (one at a time: what this parameter alone
  does). Action latency stays randomised and the sensor noise stays on, as in training; they are not properties of
  the robot's body.

The run folder gets ``sweep_<PARAM>.csv`` (``sweep_<PARAM>_others-nominal.csv`` for ``nominal``; one row per point:
value, success rate, the criterion's figures, and ``failures_go_with``: the randomised parameters whose values in the
failed episodes stand out, see :func:`failure_factors`) and a ``.png`` of the same name.
"""

from __future__ import annotations

import copy
import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from policies.runtime.files import atomic_write_text
from robot_rl.evaluate import EVAL_SEED_OFFSET, EvalResult, deterministic_policy, evaluate_env, make_eval_env
from robot_rl.logger import save_png
from robot_rl.runs.ppo import PPORun
from sim.randomization import RandomizationTerm, sample_bounds
from sim.typed_config import ConfigError

OTHERS = ("randomised", "nominal")
"""What the parameters a sweep does not scale do (see the module docstring)."""
TIMING_PARAMS = ("action_latency",)
"""Randomisation terms that are not physical parameters of the robot: not sweepable, and kept randomised with
``others="nominal"``."""


class SweepError(ConfigError):
    """A ``--sweep`` specification is malformed or names a parameter the task cannot randomise."""


@dataclass(frozen=True)
class Sweep:
    """``param`` scaled from ``low`` to ``high`` (ratios of nominal) at ``points`` values, the other parameters
    ``others`` (one of :data:`OTHERS`)."""

    param: str
    low: float
    high: float
    points: int
    others: str = "randomised"

    @classmethod
    def parse(cls, text: str, points: int, others: str = "randomised") -> Sweep:
        """Read ``PARAM=LO:HI``; the message says what is wrong."""
        name, eq, span = text.partition("=")
        lo, colon, hi = span.partition(":")
        if not eq or not colon or not name:
            raise SweepError(f"--sweep must look like PARAM=LO:HI (e.g. link_mass=0.5:1.5), got '{text}'")
        try:
            low, high = float(lo), float(hi)
        except ValueError:
            raise SweepError(f"--sweep {text}: LO and HI must be numbers") from None
        if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high <= low:
            raise SweepError(f"--sweep {text}: need 0 < LO < HI (scales of the nominal value)")
        if not 2 <= points <= 101:
            raise SweepError(f"--points must be in [2, 101], got {points}")
        if others not in OTHERS:
            raise SweepError(f"--sweep-others must be one of {', '.join(OTHERS)}, got '{others}'")
        return cls(name, low, high, points, others)

    @property
    def stem(self) -> str:
        """File name stem of the sweep's CSV and plot in the run folder."""
        return f"sweep_{self.param}" + ("" if self.others == "randomised" else f"_others-{self.others}")

    def values(self) -> np.ndarray:
        """The ``points`` scales, evenly spaced."""
        return np.linspace(self.low, self.high, self.points)


def training_range(terms: list[RandomizationTerm], param: str) -> tuple[float, float] | None:
    """Scale range ``param`` was trained over (``None`` if it was not randomised by scale)."""
    spans = []
    for term in terms:
        if term.param == param:
            if term.operation != "scale":
                return None
            spans.append(sample_bounds(term))
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None


def sweep_terms(terms: list[RandomizationTerm], sweep: Sweep, value: float) -> list[RandomizationTerm]:
    """The randomisation of one sweep point: ``sweep.param`` fixed at ``value`` x nominal, the other terms kept
    (``others="randomised"``) or only the timing terms kept (``"nominal"``: every other physical parameter nominal)."""
    others = [t for t in terms if t.param != sweep.param]
    if sweep.others == "nominal":
        others = [t for t in others if t.param in TIMING_PARAMS]
    return [*others, RandomizationTerm(sweep.param, "uniform", (value, value), "scale")]


MIN_FAILURES = 5
"""Fewest failed episodes at a point for :func:`failure_factors` to name anything."""
MIN_EFFECT = 0.3
"""Smallest difference, in standard deviations over all episodes, that :func:`failure_factors` names."""


def failed_episodes(episodes: dict[str, np.ndarray]) -> np.ndarray:
    """Which episodes failed ``[E]``: crashed where the task reports crashes, else not successful."""
    if "crashed" in episodes:
        return np.asarray(episodes["crashed"]) > 0.5
    return np.asarray(episodes["success"]) < 0.5


def failure_factors(result: EvalResult, top: int = 2) -> list[tuple[str, float, float]]:
    """The randomised parameters the failures of one evaluation go with: ``(name, mean over failed episodes, mean
    over all)`` for the ``top`` parameters whose failed-episode mean lies farthest from the mean of all episodes, in
    standard deviations over all episodes (at least :data:`MIN_EFFECT`; nothing with fewer than
    :data:`MIN_FAILURES` failures). Vector parameters count by the mean of their elements; parameters that do not
    vary (the swept one, nominal ones) are skipped."""
    failed = failed_episodes(result.episodes)
    if failed.sum() < MIN_FAILURES or failed.all():
        return []
    scored = []
    for name, values in result.start_params.items():
        v = values.mean(axis=1)
        spread = float(v.std())
        if spread <= 1e-6 * float(np.abs(v).max()):  # constant up to float rounding: swept or nominal
            continue
        fail, everyone = float(v[failed].mean()), float(v.mean())
        if abs(fail - everyone) >= MIN_EFFECT * spread:
            scored.append((abs(fail - everyone) / spread, name, fail, everyone))
    scored.sort(reverse=True)
    return [(name, fail, everyone) for _, name, fail, everyone in scored[:top]]


def describe_factors(factors: list[tuple[str, float, float]]) -> str:
    """One line: ``name <failed mean> (all <mean>); ...`` (empty when nothing stands out)."""
    return "; ".join(f"{name} {fail:.4g} (all {everyone:.4g})" for name, fail, everyone in factors)


def run_sweep(run: PPORun, sweep: Sweep, episodes: int) -> list[dict[str, float | str]]:
    """Evaluate the run's policy at every point of ``sweep``; writes the CSV and the plot into the run folder."""
    cfg, device = run.cfg, torch.device(run.cfg.device)
    specs = run.env.randomizer.specs  # type: ignore[attr-defined]
    if sweep.param not in specs or sweep.param in TIMING_PARAMS:
        have = ", ".join(sorted(k for k in specs if k not in TIMING_PARAMS))
        raise SweepError(f"task '{cfg.task}' has no physical parameter '{sweep.param}'; sweepable: {have}")
    if not any(specs[sweep.param].nominal):
        raise SweepError(
            f"'{sweep.param}' is zero at nominal ({list(specs[sweep.param].nominal)} {specs[sweep.param].unit}); "
            "a sweep scales the nominal value, so it would not change anything"
        )
    policy = deterministic_policy(run.model, cfg.policy.actor_obs)
    rows: list[dict[str, float | str]] = []
    for value in sweep.values():
        env_cfg = copy.deepcopy(cfg.env)
        env_cfg.randomization = sweep_terms(env_cfg.randomization, sweep, float(value))
        env = make_eval_env(cfg.task, env_cfg, episodes, device, randomize=True)
        result = evaluate_env(env, policy, seed=cfg.seed + EVAL_SEED_OFFSET)
        env.close()
        numbers = {
            k: float(v) for k, v in result.summary().items() if isinstance(v, float | int) and not isinstance(v, bool)
        }
        factors = describe_factors(failure_factors(result))
        rows.append({"value": float(value), **numbers, "criterion_met": float(result.met), "failures_go_with": factors})
    trained = training_range(list(cfg.env.randomization), sweep.param)
    _write(run.run_dir, sweep, rows, trained)
    return rows


def _write(
    run_dir: Path, sweep: Sweep, rows: list[dict[str, float | str]], trained: tuple[float, float] | None
) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(run_dir / f"{sweep.stem}.csv", buf.getvalue())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    errors = [k for k in rows[0] if k.endswith(("_m", "_rad", "error"))]
    fig, axes = plt.subplots(1, 1 + len(errors), figsize=(5 * (1 + len(errors)), 3.8))
    axes = np.atleast_1d(axes)
    x = [r["value"] for r in rows]
    for key in (k for k in rows[0] if k.endswith("_rate")):  # success, and the criterion's rates (crash-free)
        axes[0].plot(x, [r[key] for r in rows], "o-", label=key.removesuffix("_rate").replace("_", "-"))
    axes[0].set_ylabel("rate")
    axes[0].set_ylim(-0.02, 1.02)
    for ax, key in zip(axes[1:], errors, strict=True):
        ax.plot(x, [r[key] for r in rows], "o-")
        ax.set_ylabel(key)
    for ax in axes:
        ax.set_xlabel(f"{sweep.param} (x nominal)")
        if trained is not None:
            ax.axvspan(trained[0], trained[1], color="green", alpha=0.12, label="training range")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    others = "other parameters randomised as trained" if sweep.others == "randomised" else "other parameters nominal"
    fig.suptitle(f"robustness sweep: {sweep.param} from {sweep.low:g} to {sweep.high:g} x nominal ({others})")
    fig.tight_layout()
    save_png(fig, run_dir / f"{sweep.stem}.png")
    plt.close(fig)
