"""Stable-Baselines3 PPO baseline: train a task through ``sim.adapters.sb3.SB3VecEnv`` for a wall-clock budget.

What it measures: how good a policy off-the-shelf SB3 PPO reaches within ``--seconds`` of wall time on the *same* task
config (``robot_rl.config.load_config(task).env``, plus ``--set env.*`` overrides) and the *same* evaluation as
robot-rl's own runner: ``robot_rl.evaluate.evaluate_env`` on ``make_eval_env(task, env_cfg, 256, device,
randomize=True)`` with the deterministic policy (``model.predict(obs, deterministic=True)`` on the ``policy`` group),
seeded like the runner's evaluations. Evaluations run every ``--eval-every`` seconds (their time counts towards the
budget, as in the runner), so the time to reach the task's criterion is reported when it is reached; training stops
there unless ``--no-stop-on-success``.

SB3 settings (defaults; see ``SB3Settings``) mirror robot-rl's ``configs/quadrotor-hover.yaml`` wherever SB3 has
the same knob, so the comparison measures the implementations rather than the hyperparameters: 4096 envs x 16 steps
= 65,536 samples per rollout, 8 minibatches of 8,192, 3 epochs, Adam 1e-3, gamma 0.98, GAE lambda 0.95, clip 0.2,
entropy 0.005, value coefficient 0.5, gradient clip 1.0, ``MlpPolicy`` with separate [64, 64] tanh actor and critic,
initial action std 0.15, observations and rewards normalised by ``VecNormalize``; worlds start at random points of
their first episode (as the runner does). What SB3 cannot do: an asymmetric critic (its critic reads the same
onboard observation as the actor) and a KL-adaptive learning rate (fixed 1e-3 here). The networks run on CPU with
``torch.set_num_threads(2)`` (``--threads``).

Run::

    python bench/sb3_baseline.py --seconds 60
    python bench/sb3_baseline.py --seconds 15 --num-envs 64 --eval-every 5 --eval-episodes 64

Importable: ``run_sb3_baseline(...)`` returns an :class:`SB3Result` (used by ``bench/time_to_criterion.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecNormalize

import sim
from robot_rl.bench import format_table
from robot_rl.config import load_config
from robot_rl.evaluate import EVAL_SEED_OFFSET, EvalResult, PolicyFn, evaluate_env, make_eval_env
from sim.adapters.gymnasium import GymVecEnv
from sim.adapters.sb3 import SB3VecEnv
from sim.vec_env import Obs


@dataclass
class SB3Settings:
    """SB3 PPO hyperparameters of the baseline (see the module docstring for the reasoning)."""

    num_envs: int = 4096
    n_steps: int = 16
    batch_size: int = 8192
    n_epochs: int = 3
    learning_rate: float = 1e-3
    gamma: float = 0.98
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.005
    vf_coef: float = 0.5
    max_grad_norm: float = 1.0
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    init_action_std: float = 0.15

    @classmethod
    def library_defaults(cls, num_envs: int = 16) -> SB3Settings:
        """SB3's own PPO defaults (what ``PPO("MlpPolicy", env)`` gives), on ``num_envs`` worlds."""
        return cls(
            num_envs=num_envs, n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4, gamma=0.99,
            ent_coef=0.0, max_grad_norm=0.5, init_action_std=1.0,
        )  # fmt: skip

    normalize: bool = True


@dataclass
class SB3Result:
    """Outcome of one baseline run.

    Attributes:
        seed: Seed of env, networks and evaluation.
        wall_time_s: Training wall time (evaluations included), from the first rollout.
        env_steps: World steps collected.
        criterion_met: Whether an evaluation met the task's criterion.
        time_to_criterion_s: Wall time at the first evaluation that met it (``None``: never).
        evals: One row per evaluation: ``time_s``, ``env_steps`` and the evaluation summary.
        last_eval: The final evaluation.
        settings: The hyperparameters used.
    """

    seed: int
    wall_time_s: float
    env_steps: int
    criterion_met: bool
    time_to_criterion_s: float | None
    evals: list[dict[str, Any]]
    last_eval: EvalResult | None
    settings: SB3Settings


def sb3_policy_fn(model: Any, vec_normalize: Any | None, group: str, device: torch.device) -> PolicyFn:
    """Deterministic SB3 policy on observation groups: ``obs[group]`` -> numpy -> (normalise) -> ``predict``."""

    def policy(obs: Obs) -> torch.Tensor:
        x = obs[group].detach().cpu().numpy()
        if vec_normalize is not None:
            x = vec_normalize.normalize_obs(x)
        actions, _ = model.predict(x, deterministic=True)
        return torch.as_tensor(actions, dtype=torch.float32, device=device)

    return policy


def run_sb3_baseline(
    task: str = "quadrotor-hover",
    seconds: float = 60.0,
    seed: int = 0,
    *,
    settings: SB3Settings | None = None,
    overrides: list[str] | None = None,
    device: str = "cpu",
    eval_every_s: float = 10.0,
    eval_episodes: int = 256,
    stop_on_success: bool = True,
    verbose: bool = True,
) -> SB3Result:
    """Train ``task`` with SB3 PPO for ``seconds`` of wall time and evaluate it like robot-rl's runner.

    Args:
        task: Registered task name.
        seconds: Wall-clock training budget (evaluations included).
        seed: Seed of the env, SB3 and the evaluations.
        settings: PPO hyperparameters (``None``: :class:`SB3Settings` defaults).
        overrides: ``key=value`` overrides of the training config; only ``env.*`` matters here.
        device: Torch device of the simulator (the SB3 networks stay on CPU).
        eval_every_s: Seconds between evaluations.
        eval_episodes: Episodes (worlds) per evaluation.
        stop_on_success: Stop at the first evaluation that meets the criterion.
        verbose: Print a line per evaluation.
    """
    s = settings or SB3Settings()
    env_cfg = load_config(task, None, overrides).env
    dev = torch.device(device)
    venv: Any = SB3VecEnv(GymVecEnv(sim.make(task, s.num_envs, dev, env_cfg, seed=seed)))
    vec_normalize = VecNormalize(venv, gamma=s.gamma) if s.normalize else None
    venv = vec_normalize or venv
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=s.n_steps,
        batch_size=s.batch_size,
        n_epochs=s.n_epochs,
        learning_rate=s.learning_rate,
        gamma=s.gamma,
        gae_lambda=s.gae_lambda,
        clip_range=s.clip_range,
        ent_coef=s.ent_coef,
        vf_coef=s.vf_coef,
        max_grad_norm=s.max_grad_norm,
        policy_kwargs={
            "net_arch": {"pi": list(s.net_arch), "vf": list(s.net_arch)},
            "activation_fn": torch.nn.Tanh,
            "log_std_init": math.log(s.init_action_std),
        },
        seed=seed,
        device="cpu",
        verbose=0,
    )
    eval_env = make_eval_env(task, env_cfg, eval_episodes, dev, True)
    policy = sb3_policy_fn(model, vec_normalize, "policy", dev)

    def evaluate() -> EvalResult:
        return evaluate_env(eval_env, policy, seed=seed + EVAL_SEED_OFFSET)

    callback = _BudgetAndEval(seconds, eval_every_s, evaluate, stop_on_success, verbose)
    try:
        model.learn(total_timesteps=10**12, callback=callback)
        wall = time.monotonic() - callback.start
        if callback.last_eval_at < callback.last_rollout_at or not callback.evals:
            callback.run_eval(wall)  # the final policy, unless it was just evaluated
    finally:
        venv.close()
        eval_env.close()
    return SB3Result(
        seed=seed,
        wall_time_s=wall,
        env_steps=int(model.num_timesteps),
        criterion_met=callback.met_at is not None,
        time_to_criterion_s=callback.met_at,
        evals=callback.evals,
        last_eval=callback.last_eval,
        settings=s,
    )


class _BudgetAndEval(BaseCallback):
    """Stops SB3 at the time budget (or on success) and evaluates every ``eval_every_s`` seconds."""

    def __init__(self, budget_s: float, eval_every_s: float, evaluate: Any, stop_on_success: bool, verbose: bool):
        super().__init__()
        self.budget_s, self.eval_every_s, self.evaluate = budget_s, eval_every_s, evaluate
        self.stop_on_success, self.print_evals = stop_on_success, verbose
        self.start = time.monotonic()
        self.last_eval_at = 0.0
        self.last_rollout_at = 0.0
        self.evals: list[dict[str, Any]] = []
        self.last_eval: EvalResult | None = None
        self.met_at: float | None = None

    def _on_training_start(self) -> None:
        self.training_env.env_method("spread_episode_starts")  # as the runner does (runner.spread_episode_starts)
        self.start = time.monotonic()

    def _on_rollout_start(self) -> None:  # the policy has just been updated
        now = time.monotonic() - self.start
        if now - self.last_eval_at >= self.eval_every_s and self.num_timesteps > 0:
            self.run_eval(now)

    def _on_rollout_end(self) -> None:
        self.last_rollout_at = time.monotonic() - self.start

    def _on_step(self) -> bool:
        if self.met_at is not None and self.stop_on_success:
            return False
        return time.monotonic() - self.start < self.budget_s

    def run_eval(self, now: float) -> None:
        result = self.evaluate()
        done_at = time.monotonic() - self.start
        self.last_eval, self.last_eval_at = result, done_at
        if result.met and self.met_at is None:
            self.met_at = done_at
        row = {"time_s": done_at, "env_steps": int(self.num_timesteps), **eval_figures(result)}
        self.evals.append(row)
        if self.print_evals:
            print(
                "  [sb3] " + "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
            )


def eval_figures(result: EvalResult) -> dict[str, Any]:
    """The figures both benchmarks print: criterion, crash-free rate, tail position error, success rate, return."""
    summary = result.summary()
    out: dict[str, Any] = {"criterion": bool(result.met)}
    for key in ("crash_free_rate", "tail_position_error_m", "success_rate", "return_mean"):
        if key in summary:
            out[key] = float(summary[key])
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="quadrotor-hover")
    p.add_argument("--seconds", type=float, default=60.0, help="wall-clock training budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="simulator device (SB3 networks stay on CPU)")
    p.add_argument("--num-envs", type=int, default=SB3Settings.num_envs)
    p.add_argument("--n-steps", type=int, default=SB3Settings.n_steps)
    p.add_argument("--batch-size", type=int, default=SB3Settings.batch_size)
    p.add_argument("--learning-rate", type=float, default=SB3Settings.learning_rate)
    p.add_argument(
        "--library-defaults",
        action="store_true",
        help="SB3's own PPO defaults (n_steps 2048, batch 64, 10 epochs, lr 3e-4, std 1) on 16 envs",
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--eval-every", type=float, default=10.0, help="seconds between evaluations")
    p.add_argument("--eval-episodes", type=int, default=256)
    p.add_argument("--no-stop-on-success", action="store_true", help="keep training after the criterion is met")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="config override, e.g. env.dt=0.01")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> SB3Result:
    """Run the baseline from the command line and print its figures."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.library_defaults:
        settings = SB3Settings.library_defaults(args.num_envs if args.num_envs != SB3Settings.num_envs else 16)
    else:
        settings = SB3Settings(
            num_envs=args.num_envs, n_steps=args.n_steps, batch_size=args.batch_size, learning_rate=args.learning_rate
        )
    print(
        f"SB3 PPO on {args.task}, budget {args.seconds:g} s, seed {args.seed}, {args.threads} torch threads, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset (OpenMP default)')}"
    )
    print("settings: " + ", ".join(f"{k}={v}" for k, v in asdict(settings).items()))
    result = run_sb3_baseline(
        args.task,
        args.seconds,
        args.seed,
        settings=settings,
        overrides=args.overrides,
        device=args.device,
        eval_every_s=args.eval_every,
        eval_episodes=args.eval_episodes,
        stop_on_success=not args.no_stop_on_success,
    )
    print(f"\nevaluations ({args.eval_episodes} randomised episodes each, deterministic policy):")
    print(format_table(result.evals))
    ttc = f"{result.time_to_criterion_s:.1f} s" if result.time_to_criterion_s is not None else "not reached"
    sps = result.env_steps / max(result.wall_time_s, 1e-9)
    print(f"\nwall {result.wall_time_s:.1f} s, {result.env_steps:,} env steps ({sps:,.0f}/s), time to criterion: {ttc}")
    return result


if __name__ == "__main__":
    main()
