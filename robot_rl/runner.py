"""On-policy runner: the environment loop around :class:`~robot_rl.algorithms.ppo.PPO`.

One ``device`` is passed from here down to the env, the networks and the buffers. Rollouts run under
``torch.inference_mode()``; a periodic evaluation (on its own *selection* seeds) checks the task's success
criterion and quality bar, can stop training early, and keeps the best policy it saw in ``best.pt`` beside the last
state in ``checkpoint.pt`` (what a resume continues from). Ctrl-C ends training cleanly: the last checkpoint is
written (atomically) before the runner returns.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import sim
from policies.nets import ActorCritic
from policies.runtime.files import atomic_path
from robot_rl.algorithms.ppo import PPO, RANK_SEED_STRIDE, TrainingDivergedError
from robot_rl.checkpoint import CheckpointError, init_networks, load_checkpoint, read_checkpoint, save_checkpoint
from robot_rl.config import TrainConfig, check_compile, runner_fade
from robot_rl.distributed import SingleProcess
from robot_rl.evaluate import (
    CONFIRM_SEED_OFFSET,
    EVAL_SEED_OFFSET,
    SELECTION_SEED_OFFSET,
    EvalResult,
    PolicyFn,
    corner_randomizer,
    deterministic_policy,
    evaluate_env,
    make_eval_env,
    pick,
)
from robot_rl.interrupt import StopRequest
from robot_rl.logger import NullLogger, TrainingLogger
from sim.tasks.base import BatchedTask
from sim.typed_config import ConfigError, to_dict
from sim.vec_env import Obs, VecEnv

BEST = "best.pt"
"""The run folder's best policy by the selection evaluations (a checkpoint without world states)."""


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
    """What a training run produced. ``criterion_met``: a selection evaluation of this call met the success
    criterion; ``time_to_criterion_s`` / ``time_to_quality_s``: training seconds to the run's first success and first
    flight quality, kept across resumes (``None``: not met)."""

    run_dir: Path
    iterations: int
    env_steps: int
    wall_time_s: float
    interrupted: bool
    criterion_met: bool
    time_to_criterion_s: float | None
    last_eval: EvalResult | None
    time_to_quality_s: float | None = None
    best: dict[str, Any] | None = None
    """The best selection evaluation (``iteration``, ``env_steps``, ``score``, ``quality_met``, ``met``: the
    criterion), if any ran: the policy in ``best.pt``."""
    kl_switches: list[tuple[int, float, str]] = dataclasses.field(default_factory=list)
    """PPO's KL target switches made in this call: ``(iteration, new target, why)``, the target applying from the
    update after ``iteration`` (``ppo.refine_kl`` at the criterion, ``ppo.plateau_kl`` on a plateau)."""


class OnPolicyRunner:
    """Trains ``cfg.task`` with PPO and writes everything into ``run_dir``.

    Args:
        cfg: Resolved training config.
        run_dir: Existing run folder (see :func:`robot_rl.runs.new_run_dir`).
        resume: Checkpoint to continue from. With the same task, ``num_envs``, seed, device and ``env`` config it
            is an exact continuation (model, optimiser, counters, random streams and every world's state); if any of
            those changed, the weights, optimiser and counters carry over and episodes restart
            (:attr:`resume_note` says why). A ``ppo.learning_rate`` that differs from the checkpoint's config wins
            over the adaptive rate saved in the checkpoint.
        quiet: No progress bar and no TensorBoard files (tests).
        dist: This process's role in data-parallel training (:mod:`robot_rl.distributed`; default: alone).
        device: The device this process trains on, if not ``cfg.device`` (``cuda:LOCAL_RANK`` under torchrun).

    Raises:
        CheckpointError: ``resume`` is unusable, is for another task or another network architecture; so is
            ``policy.init_from`` (:func:`robot_rl.checkpoint.init_networks`).
        ConfigError: ``num_envs`` is not divisible by the number of ranks; ``compile`` without a C++ compiler.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        resume: Path | None = None,
        quiet: bool = False,
        dist: SingleProcess | None = None,
        device: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.dist = dist = dist or SingleProcess()
        self.quiet = quiet or not dist.is_main
        self.device = torch.device(device or cfg.device)  # a rank's own GPU under torchrun (cfg keeps "cuda")
        if cfg.compile:
            check_compile(str(self.device))
        if cfg.num_envs % dist.world_size:
            raise ConfigError(f"num_envs={cfg.num_envs} is not divisible by the {dist.world_size} ranks of this job")
        self.local_envs = cfg.num_envs // dist.world_size
        self.env_seed = cfg.seed + RANK_SEED_STRIDE * dist.rank
        torch.manual_seed(cfg.seed)  # the same initial networks on every rank (and broadcast below to be sure)
        self.env = sim.make(cfg.task, self.local_envs, self.device, cfg.env, seed=self.env_seed)
        if cfg.compile:
            self.env.compile()
        self.model = build_model(cfg, self.env).to(self.device)
        self.init_note: str | None = None  # what policy.init_from copied (a resume loads its own checkpoint instead)
        if cfg.policy.init_from is not None and resume is None:
            self.init_note = init_networks(Path(cfg.policy.init_from), self.model, cfg.task, to_dict(cfg.policy))
        dist.broadcast_([*self.model.parameters(), *self.model.buffers()])
        self.ppo = PPO(self.model, cfg.ppo, self.local_envs, self.device, cfg.seed, dist, cfg.compile)
        self.fade = runner_fade(cfg)
        if self.fade is not None and self.fade.scales and not isinstance(self.env, BatchedTask):
            raise ConfigError(f"runner.reward_fade needs a task that can change its reward scales; {cfg.task} cannot")
        if cfg.runner.selection_corner_episodes > 0:
            corner_randomizer(self.env, cfg.task)  # refused now, not at the first selection evaluation
        self.iteration = 0
        self.env_steps = 0
        self.elapsed_s = 0.0
        # training seconds to the criterion's and the quality bar's first meeting in this run, a resume's included
        self.time_to_criterion_s: float | None = None
        self.time_to_quality_s: float | None = None
        self._first_times_known = True  # False: resumed from a checkpoint that met its criterion but kept no times
        self.kl_switches: list[tuple[int, float, str]] = []  # TrainResult.kl_switches
        self.resume_note: str | None = None
        self._saved_iteration: int | None = None
        self._obs: Obs | None = None  # set when the env's state was restored from a checkpoint
        self._partial = torch.zeros(self.local_envs, dtype=torch.bool, device=self.device)
        if resume is not None:
            self._resume(resume)
        self._eval_envs: dict[tuple[int, float], VecEnv] = {}  # by episodes and corner share
        self._boundary = self._capture()
        self.best: dict[str, Any] | None = None  # see TrainResult.best
        self._best_file: Path | None = None  # the resumed run's best.pt, carried into this run's folder
        if resume is not None and (resume.parent / BEST).is_file():
            self._resume_best(resume.parent / BEST)

    def _resume(self, path: Path) -> None:
        cfg = self.cfg
        state = read_checkpoint(path, self.device)
        saved = state["config"]
        if saved["task"] != cfg.task:
            raise CheckpointError(f"checkpoint '{path}' is for task '{saved['task']}', not '{cfg.task}'")
        now, before = to_dict(cfg.policy), saved.get("policy", {})
        for key in ("actor_obs", "critic_obs", "actor_hidden", "critic_hidden", "activation"):
            if before.get(key) != now[key]:
                raise CheckpointError(
                    f"checkpoint '{path}' was trained with policy.{key}={before.get(key)}, not {now[key]}; "
                    "the networks cannot change when resuming"
                )
        load_checkpoint(path, self.model, self.ppo.optimizer, self.device)
        self.iteration, self.env_steps = state["iteration"], state["env_steps"]
        elapsed = state.get("elapsed_s", 0.0)
        if (
            type(elapsed) not in (int, float)
            or not 0.0 <= elapsed < math.inf
            or min(self.iteration, self.env_steps) < 0
        ):
            n = (self.iteration, self.env_steps, elapsed)
            raise CheckpointError(f"checkpoint '{path}' is damaged: iteration, env_steps, elapsed_s are {n!r}")
        self.elapsed_s = float(elapsed)
        # absent from checkpoints written before 2026-12-07: unknown then, unless the run never met its criterion
        # (kl_refined false), and kept unknown in this run's checkpoints rather than replaced by a later meeting
        self._first_times_known = "time_to_criterion_s" in state or state.get("kl_refined") is False
        for key in ("time_to_criterion_s", "time_to_quality_s"):
            t = state.get(key)
            if not (t is None or (type(t) is float and 0.0 <= t <= self.elapsed_s)):
                raise CheckpointError(f"checkpoint '{path}' is damaged: {key} is {t!r}")
            setattr(self, key, t)
        if self.fade is not None:
            start = state.get("reward_fade_start")
            if not (start is None or (type(start) is int and 0 <= start <= self.iteration)):
                raise CheckpointError(f"checkpoint '{path}' is damaged: reward_fade_start is {start!r}")
            self.fade.start = start
            self._apply_fade()
        refined = state.get("kl_refined", False)  # absent from checkpoints written before it was kept
        if type(refined) is not bool:
            raise CheckpointError(f"checkpoint '{path}' is damaged: kl_refined is {refined!r}, not true or false")
        if refined:  # the run had met its criterion: it goes on at ppo.refine_kl, not back at ppo.desired_kl
            self.ppo.refine()
        settled = state.get("kl_settled", False)  # absent from checkpoints written before 2026-12-07
        if type(settled) is not bool or (settled and not refined):
            raise CheckpointError(
                f"checkpoint '{path}' is damaged: kl_settled is {settled!r} with kl_refined {refined}"
            )
        if settled:  # ... and on past its plateau at ppo.plateau_kl
            self.ppo.settle()
        lr_given = cfg.ppo.learning_rate != saved.get("ppo", {}).get("learning_rate")
        self.ppo.set_learning_rate(cfg.ppo.learning_rate if lr_given else float(state["learning_rate"]))
        changed = [k for k in ("num_envs", "seed", "device", "env") if saved.get(k) != to_dict(getattr(cfg, k))]
        training = state.get("training")
        if training is None:
            self.resume_note = "the checkpoint holds no world states (a data-parallel run): episodes restart"
        elif self.dist.world_size > 1:
            self.resume_note = "a data-parallel job restarts its episodes"
        elif changed:
            self.resume_note = f"{', '.join(changed)} changed since the checkpoint: episodes restart"
        else:
            assert isinstance(self.env, BatchedTask)
            self._obs = self.env.load_state_dict(training["env"])
            self.ppo.set_rng_state(training["ppo_rng"])
            self._partial.copy_(training["partial"])

    def _resume_best(self, path: Path) -> None:
        """Carry the resumed run's ``best.pt`` on: a later evaluation must beat its score to replace it.

        Raises:
            CheckpointError: It is unreadable, for another task, or its selection record is missing, not finite, or
                holds an iteration or a flag of the wrong kind (the plateau count and the ranking read them).
        """
        state = read_checkpoint(path, self.device)
        if state["config"]["task"] != self.cfg.task:
            raise CheckpointError(f"'{path}' holds a '{state['config']['task']}' policy, not '{self.cfg.task}'")
        selection = state.get("selection")
        score = selection.get("score") if isinstance(selection, dict) else None
        if not (isinstance(score, float) and math.isfinite(score)):
            raise CheckpointError(f"'{path}' is damaged: its 'selection' record holds no finite score")
        assert isinstance(selection, dict)
        it, flags = selection.get("iteration"), (selection.get("quality_met"), selection.get("met", True))
        if type(it) is not int or it < 0 or any(type(f) is not bool for f in flags):
            raise CheckpointError(
                f"'{path}' is damaged: its 'selection' record's iteration, quality_met and met are {(it, *flags)!r}"
            )
        self.best, self._best_file = selection, path

    # ------------------------------------------------------------------------------------------------- loop
    def train(self) -> TrainResult:
        """Run until the iteration or time budget is spent, the criterion is met (optionally), or Ctrl-C.

        Ctrl-C finishes the current iteration, saves and returns (``interrupted``). A non-finite loss, gradient or
        parameter raises :class:`TrainingDivergedError` naming the iteration; nothing is saved then, so the last
        good checkpoint stays on disk. Any other exception likewise leaves the last checkpoint untouched.
        """
        cfg, rc = self.cfg, self.cfg.runner
        total = None if rc.stop_on_success and rc.eval_interval else rc.max_iterations
        main = self.dist.is_main
        logger: TrainingLogger | NullLogger = (
            TrainingLogger(
                self.run_dir,
                total,
                tensorboard=not self.quiet,
                quiet=self.quiet,
                start_iteration=self.iteration,
                start_s=self.elapsed_s,
            )
            if main
            else NullLogger()
        )
        obs = self._obs if self._obs is not None else self._start_episodes()
        self._boundary = self._capture()
        if main and self._best_file is not None and not (self.run_dir / BEST).exists():
            with atomic_path(self.run_dir / BEST) as tmp:  # a resume writes a new folder: the best so far goes too
                shutil.copyfile(self._best_file, tmp)
        session = time.monotonic()  # the time budget counts this call: a resumed run gets max_time_s more
        start = session - self.elapsed_s
        # met / quality: in this call (what stop_on_success stops on: a resumed run trains until it meets them again)
        met, quality_now, last_eval = False, False, None
        ep_stats: dict[str, list[torch.Tensor]] = {}
        window: list[torch.Tensor] = []  # success flags of the training episodes since the last scheduled evaluation
        stop, finished = StopRequest(), False
        with stop.deferring():
            try:
                while self.iteration < rc.max_iterations and not stop.requested:
                    t0 = time.monotonic()
                    obs = self._rollout(obs, ep_stats)
                    t1 = time.monotonic()
                    try:
                        self.ppo.actor_held = self.iteration < cfg.ppo.critic_warmup_iterations
                        stats = self.ppo.update()
                    except TrainingDivergedError as exc:
                        raise TrainingDivergedError(
                            f"training stopped at iteration {self.iteration + 1}: {exc}; {self._kept()}"
                        ) from None
                    t2 = time.monotonic()
                    self.iteration += 1
                    self.env_steps += cfg.ppo.num_steps * cfg.num_envs
                    row = self._row(stats, ep_stats, t1 - t0, t2 - t1)
                    self._step_fade(row)
                    self._boundary = self._capture()
                    if rc.eval_gate > 0 and rc.eval_interval:
                        window += ep_stats.get("episode/success", [])
                    ep_stats.clear()
                    scheduled = bool(rc.eval_interval) and self.iteration % rc.eval_interval == 0
                    if main and scheduled:
                        if self._gate_open(window):
                            last_eval = self.evaluate(randomize=True, seed_offset=SELECTION_SEED_OFFSET)
                            row.update({f"eval/{k}": float(v) for k, v in last_eval.summary().items()})
                            met = met or last_eval.met
                            first = self._first_times_known
                            if met and first and self.time_to_criterion_s is None:
                                self.time_to_criterion_s = time.monotonic() - start
                            selection = self._with_corners(last_eval, row)
                            quality = self._confirmed(selection, row)
                            quality_now = quality_now or quality
                            if quality and first and self.time_to_quality_s is None:
                                self.time_to_quality_s = time.monotonic() - start
                            self._keep_if_best(selection, quality, time.monotonic() - start)
                        else:
                            row["eval/skipped"] = 1.0
                        window = []
                    # rank 0 evaluates; every rank switches its KL target at the same iteration (one collective per
                    # scheduled evaluation until each switch), or their learning rates, and with them the weights, part
                    kl, why = self.ppo.desired_kl, ""
                    if scheduled and not self.ppo.refined and self.dist.any(met):
                        self.ppo.refine()
                        why = "the success criterion met"
                    elif scheduled and self._may_settle() and self.dist.any(main and self._plateaued()):
                        self.ppo.settle()
                        why = f"no better policy in {rc.plateau_evaluations} evaluations"
                    if self.ppo.desired_kl != kl:
                        self.kl_switches.append((self.iteration, self.ppo.desired_kl, why))
                    if cfg.ppo.schedule == "adaptive":  # the target the learning rate follows from the next update
                        row["policy/desired_kl"] = self.ppo.desired_kl
                    row["perf/wall_time_s"] = time.monotonic() - start
                    logger.log(row, self.env_steps)
                    if self.iteration % rc.save_interval == 0:
                        self.save(time.monotonic() - start)
                    reached = quality_now if rc.stop_on_quality else met
                    done = (reached and rc.stop_on_success) or (
                        rc.max_time_s is not None and time.monotonic() - session >= rc.max_time_s
                    )
                    # Every rank stops at the same boundary: Ctrl-C on any rank, or the budget / criterion on rank 0.
                    if self.dist.any(stop.requested):
                        stop.requested = True
                        break
                    if self.dist.any(done):
                        break
                finished = True
            except KeyboardInterrupt:  # only where no handler could be installed (not the main thread)
                stop.requested = finished = True
            finally:
                wall = time.monotonic() - start
                if finished:  # a crash never replaces the last good checkpoint
                    self.save(wall)
                logger.close()
                self.env.close()
        return TrainResult(
            self.run_dir,
            self.iteration,
            self.env_steps,
            wall,
            stop.requested,
            met,
            self.time_to_criterion_s,
            last_eval,
            self.time_to_quality_s,
            self.best,
            list(self.kl_switches),
        )

    def _with_corners(self, result: EvalResult, row: dict[str, float]) -> EvalResult:
        """The selection evaluation ``result`` (over the ranges) joined with ``runner.selection_corner_episodes`` more
        episodes at corners of the randomisation, on the same seeds (their figures go into ``row``): the quality bar
        holds only where both meet it, and the score is their mean. ``result`` itself without corner episodes. The
        success criterion, and with it ``ppo.refine_kl``'s switch, stays the ranges' alone."""
        episodes = self.cfg.runner.selection_corner_episodes
        if episodes == 0:
            return result
        corners = self.evaluate(randomize=True, episodes=episodes, seed_offset=SELECTION_SEED_OFFSET, corner_share=1.0)
        row.update({f"corners/{k}": float(v) for k, v in corners.summary().items()})
        quality = result.quality_met and corners.quality_met
        return dataclasses.replace(result, quality_met=quality, score=0.5 * (result.score + corners.score))

    def _confirmed(self, result: EvalResult, row: dict[str, float]) -> bool:
        """Whether the selection evaluation ``result`` meets the quality bar, confirmed by a second evaluation of
        ``runner.quality_confirm_episodes`` on other seeds where that is set (its figures go into ``row``). An
        evaluation that could not replace a confirmed best is not confirmed (``False``)."""
        episodes = self.cfg.runner.quality_confirm_episodes
        if not result.quality_met or episodes == 0:
            return result.quality_met
        if self.best is not None and self.best["quality_met"] and result.score <= self.best["score"]:
            return False  # it could not replace the confirmed best: not worth a second evaluation
        check = self.evaluate(randomize=True, episodes=episodes, seed_offset=CONFIRM_SEED_OFFSET)
        row.update({f"confirm/{k}": float(v) for k, v in check.summary().items()})
        return check.quality_met

    def _may_settle(self) -> bool:
        """Whether ``ppo.plateau_kl``'s switch is still to come: asked, after the switch to ``ppo.refine_kl``, and not
        yet made (the same on every rank)."""
        return bool(self.cfg.runner.plateau_evaluations) and self.ppo.refined and not self.ppo.settled

    def _plateaued(self) -> bool:
        """Whether ``runner.plateau_evaluations`` scheduled evaluations have passed since the kept policy's iteration
        (rank 0's record)."""
        rc = self.cfg.runner
        return (
            self.best is not None
            and self.iteration - self.best["iteration"] >= rc.plateau_evaluations * rc.eval_interval
        )

    def _keep_if_best(self, result: EvalResult, quality: bool, elapsed_s: float) -> None:
        """Write ``best.pt`` from this iteration's boundary if ``result`` beats the best so far, ranked by the
        (confirmed) quality bar, then the success criterion, then the task's score. A run that never meets its
        criterion within its budget so keeps its best evaluated policy, not its last; an evaluation whose score is not
        finite is never kept."""
        if not math.isfinite(result.score):
            return
        rank = (quality, result.met, result.score)
        if self.best is not None and rank <= (self.best["quality_met"], self.best.get("met", True), self.best["score"]):
            return  # a best.pt written before the criterion ranked in was written only for one that met it
        b = self._boundary
        self.best = {
            "iteration": b["iteration"],
            "env_steps": b["env_steps"],
            "score": result.score,
            "quality_met": quality,
            "met": result.met,
        }
        state = {k: v for k, v in b.items() if k != "training"}
        save_checkpoint(
            self.run_dir / BEST, {**state, "config": to_dict(self.cfg), "elapsed_s": elapsed_s, "selection": self.best}
        )

    def _step_fade(self, row: dict[str, float]) -> None:
        """Start the reward fade once this iteration's training episodes succeed often enough (on any rank: every
        rank fades from the same iteration), and set the scales of the next iteration (logged in ``row``)."""
        if self.fade is None:
            return
        started = self.fade.observe(self.iteration, row.get("episode/success"))
        if self.dist.any(started) and self.fade.start is None:
            self.fade.start = self.iteration
        self._apply_fade()
        row["curriculum/reward_fade"] = self.fade.factor(self.iteration)
        if self.fade.entropy_coef:
            row["curriculum/entropy_coef"] = self.ppo.entropy_coef

    def _apply_fade(self) -> None:
        assert self.fade is not None
        for name, scale in self.fade.current(self.iteration).items():
            assert isinstance(self.env, BatchedTask)
            self.env.set_reward_scale(name, scale)
        if self.fade.entropy_coef:
            self.ppo.set_entropy_coef(self.fade.entropy(self.iteration))

    def _gate_open(self, window: list[torch.Tensor]) -> bool:
        """Whether a scheduled evaluation runs: ``runner.eval_gate`` against the window's training success rate."""
        gate = self.cfg.runner.eval_gate
        if gate <= 0.0 or not window:
            return True
        return float(torch.cat([w.reshape(-1) for w in window]).mean()) >= gate

    def _start_episodes(self) -> Obs:
        """Fresh episodes: seeded reset, and (optionally) starts spread over the episode length."""
        rc = self.cfg.runner
        obs = self.env.reset(seed=self.env_seed)
        # Episodes cut short by the spread start are not logged: their returns and success are not comparable.
        self._partial.fill_(rc.spread_episode_starts)
        if rc.spread_episode_starts:
            self.env.spread_episode_starts()
        return obs

    def _capture(self) -> dict[str, Any]:
        """Snapshot of everything a checkpoint holds, taken at an iteration boundary (copies)."""
        exact = isinstance(self.env, BatchedTask) and self.dist.world_size == 1 and self.dist.is_main
        env_state = self.env.state_dict() if exact and isinstance(self.env, BatchedTask) else None
        return {
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizer": copy.deepcopy(self.ppo.optimizer.state_dict()),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "learning_rate": self.ppo.learning_rate,
            "reward_fade_start": None if self.fade is None else self.fade.start,
            "training": None
            if env_state is None
            else {"ppo_rng": self.ppo.rng_state(), "env": env_state, "partial": self._partial.clone()},
        }

    def _rollout(self, obs: Obs, ep_stats: dict[str, list[torch.Tensor]]) -> Obs:
        p = self.cfg.policy
        with torch.inference_mode():
            for _ in range(self.cfg.ppo.num_steps):
                actor_obs, critic_obs = pick(obs, p.actor_obs), pick(obs, p.critic_obs)
                self.model.update_normalizers(actor_obs, critic_obs, self.dist.merge_moments)
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
            "policy/first_ratio_deviation": stats.first_ratio_deviation,
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

    def evaluate(
        self,
        randomize: bool = True,
        episodes: int | None = None,
        seed_offset: int = EVAL_SEED_OFFSET,
        corner_share: float = 0.0,
    ) -> EvalResult:
        """Run the task's evaluation with the current policy (``runner.eval_episodes`` episodes by default) on the
        held-out seeds (or those of ``seed_offset``), ``corner_share`` of the worlds at the corners of the
        randomisation (:func:`~robot_rl.evaluate.make_eval_env`)."""
        n = episodes or self.cfg.runner.eval_episodes
        if randomize and (episodes is None or corner_share > 0):  # those of every selection evaluation: built once
            env = self._eval_envs.get((n, corner_share))
            if env is None:
                cfg = self.cfg
                env = make_eval_env(cfg.task, cfg.env, n, self.device, True, cfg.compile, corner_share)
                self._eval_envs[(n, corner_share)] = env
        else:
            env = make_eval_env(self.cfg.task, self.cfg.env, n, self.device, randomize, corner_share=corner_share)
        return evaluate_env(env, self.policy_fn(), seed=self.cfg.seed + seed_offset)

    def save(self, elapsed_s: float) -> Path:
        """Write ``checkpoint.pt`` from the last iteration boundary, atomically (rank 0 only); returns its path."""
        if not self.dist.is_main:
            return self.run_dir / "checkpoint.pt"
        state = {**self._boundary, "config": to_dict(self.cfg), "elapsed_s": elapsed_s, **self._run_state()}
        path = save_checkpoint(self.run_dir / "checkpoint.pt", state)
        self._saved_iteration = self._boundary["iteration"]
        return path

    def _run_state(self) -> dict[str, Any]:
        """What the run has decided by now, beside the iteration snapshot: whether PPO switched to ``ppo.refine_kl``
        (``kl_refined``) and on to ``ppo.plateau_kl`` (``kl_settled``; each decided by an evaluation after the
        snapshot, and applying from the next update on) and the times to its first success and to flight quality
        (training seconds; ``None``: not yet; absent: unknown)."""
        times = {"time_to_criterion_s": self.time_to_criterion_s, "time_to_quality_s": self.time_to_quality_s}
        kl = {"kl_refined": self.ppo.refined, "kl_settled": self.ppo.settled}
        return {**kl, **(times if self._first_times_known else {})}

    def _kept(self) -> str:
        if self._saved_iteration is None:
            return "no checkpoint was written"
        return f"the last good checkpoint (iteration {self._saved_iteration}) is kept: {self.run_dir / 'checkpoint.pt'}"
