"""On-policy PPO against the earlier, slightly off-policy variant, side by side in one run.

What it measures: for each seed, training ``quadrotor-hover`` with its shipped config until the success criterion is
met (or ``--max-time``), twice, interleaved:

- ``on-policy`` (robot-rl now): the rollout stores the policy's inputs *normalised as they were seen*; the update
  replays them, so every probability ratio is exactly 1 before the first gradient step.
- ``renormalised`` (robot-rl before): the rollout stored raw observations and the update normalised them again with
  the normaliser's statistics at the *end* of the rollout, so old log-probabilities and the update's disagree.

Per run it prints the time and iterations to the criterion, and the largest ``|ratio - 1|`` in the first minibatch
of iterations 2 and 10 (logged as ``policy/first_ratio_deviation``; ``ratio = pi / pi_old`` before any step), and
the share of first-minibatch samples already outside the PPO clip at iteration 2. Then medians and the ratio.

Run::

    python bench/on_policy.py --seeds 0 1 2 --max-time 120
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from robot_rl.algorithms.ppo import PPO, UpdateStats
from robot_rl.bench import format_table
from robot_rl.config import load_config
from robot_rl.runner import OnPolicyRunner
from robot_rl.runs import new_run_dir

CLIP_SHARE: list[float] = []


class RenormalisingPPO(PPO):
    """The earlier behaviour: raw inputs stored, normalised again at update time with the latest statistics."""

    @torch.no_grad()
    def act(self, actor_obs: torch.Tensor, critic_obs: torch.Tensor) -> torch.Tensor:
        """As :meth:`PPO.act`, but the buffer keeps the raw observations."""
        actions = super().act(actor_obs, critic_obs)
        t = self.storage.step
        self.storage.actor_obs[t] = actor_obs
        self.storage.critic_obs[t] = critic_obs
        return actions

    def update(self) -> UpdateStats:
        """Normalise the stored raw inputs with the end-of-rollout statistics, then update as before."""
        s, m = self.storage, self.model
        with torch.no_grad():
            s.actor_obs = m.actor_normalizer(s.actor_obs)
            s.critic_obs = m.critic_normalizer(s.critic_obs)
            ratio = (m.distribution_normalized(s.actor_obs).log_prob(s.actions).sum(-1) - s.log_prob).exp()
            CLIP_SHARE.append(float(((ratio - 1).abs() > self.cfg.clip_param).float().mean()))
        return super().update()


def run(seed: int, variant: str, max_time: float, root: Path) -> dict[str, Any]:
    """Train one seed with one variant; a row of figures."""
    cfg = load_config("quadrotor-hover", None, [f"seed={seed}", f"runner.max_time_s={max_time}", f"run_root={root}"])
    runner = OnPolicyRunner(cfg, new_run_dir(cfg), quiet=True)
    if variant == "renormalised":
        runner.ppo.__class__ = RenormalisingPPO
    CLIP_SHARE.clear()
    result = runner.train()
    with (runner.run_dir / "metrics.csv").open() as f:
        dev = [float(r["policy/first_ratio_deviation"]) for r in csv.DictReader(f)]
    return {
        "variant": variant,
        "seed": seed,
        "met": result.criterion_met,
        "time_to_criterion_s": result.time_to_criterion_s,
        "iterations": result.iterations,
        "ratio_dev_it2": dev[1] if len(dev) > 1 else math.nan,
        "ratio_dev_it10": dev[9] if len(dev) > 9 else math.nan,
        "outside_clip_it2": CLIP_SHARE[1] if len(CLIP_SHARE) > 1 else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-time", type=float, default=120.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="robot-rl-bench-") as tmp:
        for seed in args.seeds:
            for variant in ("on-policy", "renormalised"):
                rows.append(run(seed, variant, args.max_time, Path(tmp)))
                print(format_table([rows[-1]]), flush=True)
    print("\n" + format_table(rows))
    med = {}
    for variant in ("on-policy", "renormalised"):
        times = [r["time_to_criterion_s"] if r["met"] else math.inf for r in rows if r["variant"] == variant]
        med[variant] = statistics.median(times)
        print(f"{variant:>13}: median time to criterion {med[variant]:.1f} s over seeds {args.seeds}")
    print(f"ratio renormalised / on-policy: {med['renormalised'] / med['on-policy']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
