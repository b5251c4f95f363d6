"""Evaluation of action-chunk policies in the batched simulator: success with a 95 % confidence interval.

The policy runs through the same :class:`~policies.runtime.chunking.ChunkExecutor` a robot runs (receding
horizon or temporal ensembling), fed by the task's onboard observation group (and, for a student that sees
cameras, images rendered offscreen from each world's current state), one world per episode, over several seeds
(each seed: other starts, other randomised parameters, other sampler noise). A language-conditioned policy gets
each world's instruction (the task's :attr:`~sim.vec_env.VecEnv.instructions`, embedded once per text by the
frozen sentence encoder, :mod:`policies.nets.language`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from policies.nets.chunk import ChunkPolicy
from policies.nets.language import features
from policies.runtime.chunking import ChunkExecutor
from policies.runtime.contract import ChunkSpec
from policies.runtime.realtime import RealTime, Smoothness
from policies.runtime.text import printable
from robot_rl.evaluate import (
    EVAL_SEED_OFFSET,
    EvalResult,
    behind_tank,
    evaluate_env,
    make_eval_env,
    pick,
    tank_of,
)
from sim.rendering import CameraRenderer, VisualRandomization
from sim.typed_config import ConfigError
from sim.vec_env import VecEnv

if TYPE_CHECKING:
    from robot_rl.runs.ppo import PPORun

Z_95 = 1.959964
"""Two-sided 95 % quantile of the standard normal."""


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a success rate (better than the normal approximation near 0 and 1)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class ChunkEvalResult:
    """Success of a chunk policy over several seeds.

    Attributes:
        per_seed: One evaluation per seed (each with the tank it ran behind, :attr:`EvalResult.tank_j`).
        seeds: The seeds.
        motion: How the executed actions moved across chunk joins (:meth:`Smoothness.summary
            <policies.runtime.realtime.Smoothness.summary>`); with temporal ensembling every period averages a new
            plan in, so every step counts as a join.
        teacher: A student's PPO teacher on the same seeds and episodes (:func:`robot_rl.runs.bc.teacher_beside`;
            ``None``: not evaluated), and ``teacher_run`` its run folder.
    """

    per_seed: list[EvalResult]
    seeds: list[int]
    motion: dict[str, float] = field(default_factory=dict)
    teacher: ChunkEvalResult | None = None
    teacher_run: str = ""

    @property
    def episodes(self) -> int:
        """Episodes over all seeds."""
        return sum(len(r.episodes["success"]) for r in self.per_seed)

    @property
    def successes(self) -> int:
        """Successful episodes over all seeds."""
        return int(sum(r.episodes["success"].sum() for r in self.per_seed))

    @property
    def success_rate(self) -> float:
        """Pooled success rate."""
        return self.successes / max(self.episodes, 1)

    @property
    def ci95(self) -> tuple[float, float]:
        """Wilson 95 % interval of the pooled success rate."""
        return wilson_interval(self.successes, self.episodes)

    @property
    def tank_j(self) -> float | None:
        """``T_max`` of the energy tank the episodes ran behind, J (``None``: no tank)."""
        return self.per_seed[0].tank_j if self.per_seed else None

    @property
    def lowest_tank_j(self) -> float | None:
        """The lowest energy the tank held in any episode of any seed, J (``None``: no tank, or a task that does not
        report it)."""
        lows = [float(r.episodes["lowest_tank_j"].min()) for r in self.per_seed if "lowest_tank_j" in r.episodes]
        return min(lows) if lows else None

    def summary(self) -> dict[str, Any]:
        """Plain data (for ``eval.yaml``)."""
        lo, hi = self.ci95
        return {
            "episodes": self.episodes,
            "success_rate": self.success_rate,
            "success_ci95": [lo, hi],
            "seeds": self.seeds,
            "per_seed_success": [float(r.episodes["success"].mean()) for r in self.per_seed],
            "criterion_met_per_seed": [bool(r.met) for r in self.per_seed],
            "randomization": self.per_seed[0].randomized if self.per_seed else True,
            **({"tank_max_j": self.tank_j} if self.tank_j is not None else {}),
            **({"lowest_tank_j": self.lowest_tank_j} if self.lowest_tank_j is not None else {}),
            **({"teacher": self._teacher_summary(self.teacher)} if self.teacher is not None else {}),
        }

    def _teacher_summary(self, teacher: ChunkEvalResult) -> dict[str, Any]:
        """The teacher's figures on the same episodes and the gap to it, points (positive: the student is under)."""
        lo, hi = teacher.ci95
        return {
            "run": self.teacher_run,
            "success_rate": teacher.success_rate,
            "success_ci95": [lo, hi],
            "gap_points": 100.0 * (teacher.success_rate - self.success_rate),
        }

    def teacher_line(self) -> str | None:
        """One line: the teacher on the same episodes and how far the student is from it (``None``: no teacher)."""
        if self.teacher is None:
            return None
        gap = 100.0 * (self.teacher.success_rate - self.success_rate)
        side = f"{abs(gap):.1f} points under it" if gap > 0 else f"{abs(gap):.1f} points above it"
        lo, hi = self.teacher.ci95
        return (
            f"teacher {printable(self.teacher_run)} on the same episodes: success {self.teacher.success_rate:.1%} "
            f"(95% CI {lo:.1%}-{hi:.1%}); the student is {side if gap else 'level with it'}"
        )

    def success_by(self, key: str) -> dict[int, tuple[int, int]]:
        """Successes and episodes per value of an integer episode metric (``instruction``: the instruction index),
        over all seeds; empty if the episodes do not carry ``key``."""
        if not self.per_seed or key not in self.per_seed[0].episodes:
            return {}
        values = np.concatenate([r.episodes[key] for r in self.per_seed]).astype(np.int64)
        success = np.concatenate([r.episodes["success"] for r in self.per_seed]).astype(bool)
        return {int(v): (int(success[values == v].sum()), int((values == v).sum())) for v in np.unique(values)}

    def on_instructions(self, texts: Sequence[str], wanted: Collection[str]) -> dict[str, Any] | None:
        """Success over the episodes given one of the instructions ``wanted`` (a student trained on some of a
        dataset's tasks, ``BCConfig.tasks``); ``texts[i]`` is the text of instruction index ``i``.

        Returns:
            ``{"instructions", "episodes", "success_rate", "success_ci95"}`` (``episodes`` 0 and ``success_rate``
            ``None`` when none of them was drawn), or ``None`` when the episodes carry no instruction.
        """
        by_instruction = self.success_by("instruction")
        if not by_instruction:
            return None
        chosen = [counts for i, counts in by_instruction.items() if i < len(texts) and texts[i] in wanted]
        won, n = sum(w for w, _ in chosen), sum(k for _, k in chosen)
        lo, hi = wilson_interval(won, n) if n else (0.0, 1.0)
        return {
            "instructions": list(wanted),
            "episodes": n,
            "success_rate": won / n if n else None,
            "success_ci95": [lo, hi],
        }

    def line(self) -> str:
        """One readable line."""
        lo, hi = self.ci95
        tank = ""
        if self.tank_j is not None:
            low = self.lowest_tank_j
            tank = f", {behind_tank(self.tank_j)}" + (f" (lowest {low:.2f} J)" if low is not None else "")
        return (
            f"success {self.success_rate:.1%} (95% CI {lo:.1%}-{hi:.1%}) over {self.episodes} episodes, "
            f"{len(self.seeds)} seeds{tank}"
        )


class ChunkActor:
    """A :data:`~robot_rl.evaluate.PolicyFn` that runs a chunk policy through a :class:`ChunkExecutor` (with the
    images ``cameras`` renders of the current state, for a policy that sees cameras); :meth:`reset` starts new
    episodes for the worlds that auto-reset (their histories and plans are dropped).

    Args:
        policy: The chunk policy (eval mode; its device is used).
        spec: Horizons, ensembling and the initial noise's scale to execute with.
        groups: Observation groups it reads.
        num_envs: Worlds.
        generator: Sampler noise.
        cameras: The renderer of a policy that sees cameras.
        instructions: For a language-conditioned policy: each world's current instruction embedding ``[N, D_l]``,
            read every control period (a new instruction takes effect at the next plan).
        timing: Receding-horizon schedule with a simulated inference delay (:mod:`policies.runtime.realtime`).
        smoothness: Where to add how the executed actions move across chunk joins (``None``: not measured).
    """

    def __init__(
        self,
        policy: ChunkPolicy,
        spec: ChunkSpec,
        groups: list[str],
        num_envs: int,
        generator: torch.Generator,
        cameras: CameraRenderer | None = None,
        instructions: Callable[[], np.ndarray] | None = None,
        timing: RealTime | None = None,
        smoothness: Smoothness | None = None,
    ) -> None:
        self.smoothness = smoothness
        if bool(policy.language_dim) != (instructions is not None):
            raise ValueError("a language-conditioned policy needs instructions, and only it")
        if timing is not None and timing.mode == "rtc" and not policy.guide_inputs:
            raise ConfigError(f"real-time chunking needs a sampler that inpaints; a '{policy.kind}' student does not")
        self.policy, self.groups, self.cameras, self.generator = policy, groups, cameras, generator
        self.instructions = instructions
        self._instruction: torch.Tensor | None = None
        self.device = next(policy.parameters()).device
        self._shape = (num_envs, policy.horizons.pred, policy.action_dim)
        self._noise_scale = spec.noise_scale
        self.executor = ChunkExecutor(num_envs, spec, policy.action_dim, self._sample, timing)

    def _sample(
        self,
        window: np.ndarray,
        images: dict[str, np.ndarray] | None = None,
        guide: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        noise = torch.randn(self._shape, generator=self.generator, device=self.device) * self._noise_scale
        views = {c: torch.from_numpy(x).to(self.device) for c, x in (images or {}).items()}
        extra = {} if guide is None else {"guide": tuple(torch.from_numpy(g).to(self.device) for g in guide)}
        with torch.inference_mode():
            obs = torch.from_numpy(window).to(self.device)
            plan = self.policy.predict_action_chunk(obs, noise, images=views, instruction=self._instruction, **extra)
        return plan.cpu().numpy()

    def __call__(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Actions ``[N, A]`` for the current observations."""
        images = self.cameras.render() if self.cameras is not None else None
        if self.instructions is not None:
            self._instruction = torch.from_numpy(self.instructions()).to(self.device)
        action = self.executor(pick(obs, self.groups).cpu().numpy(), images)
        if self.smoothness is not None:
            s = self.executor.scheduler
            ensembled = self.executor.spec.ensemble_decay is not None  # a new plan joins the average every period
            joined = np.ones_like(s.joined) if ensembled else s.joined
            self.smoothness.record(action, joined, s.idle, self.executor.fresh)
        return torch.from_numpy(action).to(self.device)

    def reset(self, mask: np.ndarray) -> None:
        """Start new episodes in worlds ``mask [N]`` (bool)."""
        self.executor.reset(mask)


def env_instructions(env: VecEnv, policy: ChunkPolicy) -> Callable[[], np.ndarray] | None:
    """For a language-conditioned ``policy``: a function giving each world's current instruction embedding
    ``[N, D_l]`` (each of the task's texts embedded once); ``None`` for a policy without language.

    Raises:
        ConfigError: The policy reads instructions and the task gives none.
    """
    if not policy.language_dim:
        return None
    texts, ids = env.instructions, env.instruction_ids()
    if not texts or ids is None:
        name = getattr(env, "task_name", type(env).__name__)
        raise ConfigError(f"task '{name}' gives no language instructions; this student reads one")
    table = features(texts, policy.language_tokens)

    def current() -> np.ndarray:
        world_ids = env.instruction_ids()
        assert world_ids is not None
        return table[world_ids.cpu().numpy()]

    return current


def evaluate_chunk_policy(
    policy: ChunkPolicy,
    spec: ChunkSpec,
    task: str,
    env_cfg: Any,
    groups: list[str],
    episodes: int,
    seeds: Sequence[int],
    randomize: bool = True,
    visual: VisualRandomization | None = None,
    timing: RealTime | None = None,
) -> ChunkEvalResult:
    """Run ``episodes`` episodes per seed (one world each) and pool the success.

    Args:
        policy: Chunk policy (eval mode; its device is used).
        spec: Horizons, ensembling and the initial noise's scale to execute with.
        task: Task name.
        env_cfg: The task's config (the one the demonstrations were collected under).
        groups: Observation groups the policy reads (the dataset's ``obs_groups``).
        episodes: Episodes per seed.
        seeds: Evaluation seeds (offset by ``EVAL_SEED_OFFSET`` like every evaluation).
        randomize: Domain randomisation on.
        visual: Visual randomisation of the camera images of a student that sees cameras (``None``: none).
        timing: Receding-horizon schedule and simulated inference delay (``None``: sync, no delay); the result says
            how the actions moved across chunk joins (with ensembling: at every step).
    """
    device = next(policy.parameters()).device
    results = []
    smoothness = Smoothness()
    for seed in seeds:
        env = make_eval_env(task, env_cfg, episodes, device, randomize)
        gen = torch.Generator(device=device).manual_seed(seed)
        cameras = CameraRenderer(env, policy.cameras, visual, seed + EVAL_SEED_OFFSET) if policy.cameras else None
        said = env_instructions(env, policy)
        fn = ChunkActor(policy, spec, groups, episodes, gen, cameras, said, timing, smoothness)
        result = evaluate_env(env, fn, seed=seed + EVAL_SEED_OFFSET)
        results.append(dataclasses.replace(result, tank_j=tank_of(env_cfg)))
        if cameras is not None:
            cameras.close()
        env.close()
    motion = smoothness.summary() if smoothness is not None else {}
    return ChunkEvalResult(results, list(seeds), motion)


def evaluate_teacher(
    teacher: PPORun,
    task: str,
    env_cfg: Any,
    episodes: int,
    seeds: Sequence[int],
    randomize: bool = True,
) -> ChunkEvalResult:
    """The PPO teacher's deterministic actor on the seeds and in the task config its student is evaluated in
    (:func:`evaluate_chunk_policy`): the same starts, randomised parameters and tank, so the two compare episode
    for episode. A teacher of another task acts on the view ``task`` gives of its own (:meth:`PPORun.act_in`).

    Args:
        teacher: The PPO run.
        task: Task name (the teacher's, or one that gives a view of it).
        env_cfg: The task config of the student's demonstrations (the teacher's, tank included).
        episodes: Episodes per seed.
        seeds: Evaluation seeds (offset by ``EVAL_SEED_OFFSET``), as the student's.
        randomize: Domain randomisation on.

    Raises:
        ConfigError: The teacher cannot act in ``task`` (named).
    """
    device = next(teacher.model.parameters()).device
    results = []
    for seed in seeds:
        env = make_eval_env(task, env_cfg, episodes, device, randomize)
        try:
            act = teacher.policy_in(env, teacher.act_in(env))
            result = evaluate_env(env, act, seed=seed + EVAL_SEED_OFFSET)
            results.append(dataclasses.replace(result, tank_j=tank_of(env_cfg)))
        finally:
            env.close()
    return ChunkEvalResult(results, list(seeds))


def own_tasks_line(summary: dict[str, Any]) -> str:
    """One line: what a student trained on some of its dataset's tasks did on them (``summary``:
    :meth:`ChunkEvalResult.on_instructions`)."""
    k = len(summary["instructions"])
    if not summary["episodes"]:
        return f"on its {k} own instruction(s): none was drawn in this evaluation"
    lo, hi = summary["success_ci95"]
    return (
        f"on its {k} own instruction(s): success {summary['success_rate']:.1%} (95% CI {lo:.1%}-{hi:.1%}) "
        f"over {summary['episodes']} episodes"
    )
