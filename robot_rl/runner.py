"""On-policy runner: the environment loop around :class:`~robot_rl.algorithms.ppo.PPO`.

One ``device`` is passed from here down to the env, the networks and the buffers. Rollouts run under
``torch.inference_mode()``; a periodic evaluation checks the task's success criterion and can stop training early.
Ctrl-C ends training cleanly: the last checkpoint is written (atomically) before the runner returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import sim
from policies.nets import ActorCritic
from robot_rl.algorithms.ppo import PPO
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.evaluate import (
    EVAL_SEED_OFFSET,
    EvalResult,
    PolicyFn,
    deterministic_policy,
    evaluate_env,
    make_eval_env,
    pick,
)
from robot_rl.logger import TrainingLogger
from robot_rl.typed_config import ConfigError
from sim.vec_env import Obs, VecEnv


def build_model(cfg: TrainConfig, env: VecEnv) -> ActorCritic:
    """Actor-critic sized from the observation groups named in ``cfg.policy``."""
    p = cfg.policy
    for role, groups in (("actor_obs", p.actor_obs), ("critic_obs", p.critic_obs)):
        missing = [g for g in groups if g not in env.obs_sizes]
        if missing or not groups:
            raise ConfigError(
                f"policy.{role} names unknown observation group(s) {missing or groups}; "
                f"task '{cfg.task}' provides: {', '.join(env.obs_sizes)}"
            )
    return ActorCritic(
        sum(env.obs_sizes[g] for g in p.actor_obs),
        sum(env.obs_sizes[g] for g in p.critic_obs),
        env.num_actions,
        p.actor_hidden,
        p.critic_hidden,
        p.activation,
        p.init_noise_std,
    )


@dataclass
class TrainResult:
    """What a training run produced."""

    run_dir: Path
    iterations: int
    env_steps: int
    wall_time_s: float
    interrupted: bool
    criterion_met: bool
    time_to_criterion_s: float | None
    last_eval: EvalResult | None


class OnPolicyRunner:
    """Trains ``cfg.task`` with PPO and writes everything into ``run_dir``.

    Args:
        cfg: Resolved training config.
        run_dir: Existing run folder (see :func:`robot_rl.run.new_run_dir`).
        resume: Checkpoint to continue from (model, optimiser, counters).
        quiet: No progress bar and no TensorBoard files (tests).
    """

    def __init__(self, cfg: TrainConfig, run_dir: Path, resume: Path | None = None, quiet: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.quiet = quiet
        self.device = torch.device(cfg.device)
        torch.manual_seed(cfg.seed)
        self.env = sim.make(cfg.task, cfg.num_envs, self.device, cfg.env, seed=cfg.seed)
        self.model = build_model(cfg, self.env).to(self.device)
        self.ppo = PPO(self.model, cfg.ppo, cfg.num_envs, self.device, cfg.seed)
        self.iteration = 0
        self.env_steps = 0
        self.elapsed_s = 0.0
        if resume is not None:
            state = load_checkpoint(resume, self.model, self.ppo.optimizer, self.device)
            self.iteration, self.env_steps = state["iteration"], state["env_steps"]
            self.elapsed_s = state.get("elapsed_s", 0.0)
            self.ppo.learning_rate = state.get("learning_rate", self.ppo.learning_rate)
        self._eval_env: VecEnv | None = None

    # ------------------------------------------------------------------------------------------------- loop
    def train(self) -> TrainResult:
        """Run until the iteration or time budget is spent, or (optionally) the success criterion is met."""
        cfg, rc = self.cfg, self.cfg.runner
        total = None if rc.stop_on_success and rc.eval_interval else rc.max_iterations
        logger = TrainingLogger(self.run_dir, total, tensorboard=not self.quiet, quiet=self.quiet)
        obs = self.env.reset(seed=cfg.seed)
        # Episodes cut short by the spread start are not logged: their returns and success are not comparable.
        self._partial = torch.full((cfg.num_envs,), rc.spread_episode_starts, dtype=torch.bool, device=self.device)
        if rc.spread_episode_starts:
            self.env.spread_episode_starts()
        start = time.monotonic() - self.elapsed_s
        interrupted, met, t_met, last_eval = False, False, None, None
        ep_stats: dict[str, list[torch.Tensor]] = {}
        try:
            while self.iteration < rc.max_iterations:
                t0 = time.monotonic()
                obs = self._rollout(obs, ep_stats)
                t1 = time.monotonic()
                stats = self.ppo.update()
                t2 = time.monotonic()
                self.iteration += 1
                self.env_steps += cfg.ppo.num_steps * cfg.num_envs
                row = self._row(stats, ep_stats, t1 - t0, t2 - t1)
                ep_stats.clear()
                if rc.eval_interval and self.iteration % rc.eval_interval == 0:
                    last_eval = self.evaluate(randomize=True)
                    row.update({f"eval/{k}": float(v) for k, v in last_eval.summary().items()})
                    if last_eval.met and not met:
                        met, t_met = True, time.monotonic() - start
                row["perf/wall_time_s"] = time.monotonic() - start
                logger.log(row, self.env_steps)
                if self.iteration % rc.save_interval == 0:
                    self.save(time.monotonic() - start)
                if met and rc.stop_on_success:
                    break
                if rc.max_time_s is not None and time.monotonic() - start >= rc.max_time_s:
                    break
        except KeyboardInterrupt:
            interrupted = True
        finally:
            wall = time.monotonic() - start
            self.save(wall)
            logger.close()
            self.env.close()
        return TrainResult(self.run_dir, self.iteration, self.env_steps, wall, interrupted, met, t_met, last_eval)

    def _rollout(self, obs: Obs, ep_stats: dict[str, list[torch.Tensor]]) -> Obs:
        p = self.cfg.policy
        with torch.inference_mode():
            for _ in range(self.cfg.ppo.num_steps):
                actor_obs, critic_obs = pick(obs, p.actor_obs), pick(obs, p.critic_obs)
                self.model.update_normalizers(actor_obs, critic_obs)
                actions = self.ppo.act(actor_obs, critic_obs)
                obs, reward, terminated, truncated, info = self.env.step(actions)
                final = pick(info.final_obs, p.critic_obs) if bool(truncated.any()) else None
                self.ppo.record(reward, terminated, truncated, final)
                for k, v in info.log.items():
                    ep_stats.setdefault(k, []).append(v.mean())
                finished = terminated | truncated
                done = finished & ~self._partial
                self._partial &= ~finished
                if bool(done.any()):
                    assert info.episode_return is not None
                    ep_stats.setdefault("episode/return", []).append(info.episode_return[done])
                    assert info.episode_length is not None
                    ep_stats.setdefault("episode/length_s", []).append(info.episode_length[done] * self.env.dt)
                    if info.success is not None:
                        ep_stats.setdefault("episode/success", []).append(info.success[done].float())
        self.ppo.compute_returns(pick(obs, p.critic_obs))  # outside inference mode: feeds the update
        return obs

    def _row(self, stats: Any, ep: dict[str, list[torch.Tensor]], t_roll: float, t_upd: float) -> dict[str, float]:
        n = self.cfg.ppo.num_steps * self.cfg.num_envs
        row = {
            "loss/surrogate": stats.surrogate,
            "loss/value": stats.value,
            "policy/entropy": stats.entropy,
            "policy/kl": stats.kl,
            "policy/learning_rate": stats.learning_rate,
            "policy/action_std": stats.action_std,
            "perf/steps_per_s": n / max(t_roll + t_upd, 1e-9),
            "perf/rollout_s": t_roll,
            "perf/update_s": t_upd,
        }
        for k, vals in ep.items():
            row[k] = float(torch.cat([v.reshape(-1).float() for v in vals]).mean())
        return row

    # ------------------------------------------------------------------------------------------- utilities
    def policy_fn(self) -> PolicyFn:
        """Deterministic policy on observation groups (the Gaussian mean)."""
        return deterministic_policy(self.model, self.cfg.policy.actor_obs)

    def evaluate(self, randomize: bool = True, episodes: int | None = None) -> EvalResult:
        """Run the task's evaluation with the current policy (``runner.eval_episodes`` episodes by default)."""
        n = episodes or self.cfg.runner.eval_episodes
        if randomize and episodes is None:
            if self._eval_env is None:
                self._eval_env = make_eval_env(self.cfg.task, self.cfg.env, n, self.device, True)
            env = self._eval_env
        else:
            env = make_eval_env(self.cfg.task, self.cfg.env, n, self.device, randomize)
        return evaluate_env(env, self.policy_fn(), seed=self.cfg.seed + EVAL_SEED_OFFSET)

    def save(self, elapsed_s: float) -> Path:
        """Write ``checkpoint.pt`` (latest) atomically; returns its path."""
        return save_checkpoint(
            self.run_dir / "checkpoint.pt",
            model=self.model,
            optimizer=self.ppo.optimizer,
            cfg=self.cfg,
            iteration=self.iteration,
            env_steps=self.env_steps,
            elapsed_s=elapsed_s,
            learning_rate=self.ppo.learning_rate,
        )
