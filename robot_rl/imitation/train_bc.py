"""Behaviour cloning of action-chunk policies (diffusion or MLP) from a demonstration dataset.

Run folder (same habits as PPO): ``runs/<task>/<stamp>-<seed>/`` with ``config.yaml``, ``checkpoint.pt``,
``metrics.csv``, ``learning_curve.png``, and at the end ``eval.yaml`` / ``eval.png`` and ``policy.onnx`` +
``contract.yaml``. Checkpoints are written atomically at step boundaries; ``--resume RUN`` continues one exactly
where it stopped (weights, EMA, optimiser, schedule, step, random streams).

Checkpoint layout (``torch.save`` dict, ``weights_only``)::

    format      "robot-rl-bc-checkpoint-v1"
    config      resolved BCConfig as plain data
    dims        {"obs_dim", "action_dim", "cameras": {camera: [height, width]}}
    contract    the observation/action contract of the demonstrations (from the dataset) or None
    language    a language-conditioned student's {"encoder": the sentence encoder's identity, "instructions": the
                dataset's task texts} or None
    env         the task config the demonstrations were collected under (plain) or None
    teacher     who recorded the demonstrations (a PPO run folder or a scripted expert; the dataset's words) or None
    obs_groups  observation groups the student reads
    camera_mounts  where the dataset's cameras were mounted (robot-rl collect --images), by camera name
    visual_randomization  the dataset's visual randomisation (plain) or None; evaluation renders with it
    model, ema  ChunkPolicy state dicts (normalisers inside)
    optimizer, scheduler, step, elapsed_s, rng
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from policies.nets.chunk import ChunkPolicy
from policies.nets.language import encoder_identity, features
from policies.runtime.contract import Contract
from policies.runtime.files import atomic_path, atomic_write_text
from robot_rl.algorithms.optim import fused
from robot_rl.checkpoint import BC_FORMAT, CheckpointError, first_non_finite, state_dict_mismatch
from robot_rl.imitation.config import BCConfig
from robot_rl.imitation.dataset import Dataset, DatasetError, Episode, episode_statistics, load_dataset
from robot_rl.imitation.evaluate import ChunkEvalResult, evaluate_chunk_policy
from robot_rl.imitation.students import StudentConfig, build_student
from robot_rl.imitation.windows import Windows
from robot_rl.logger import TrainingLogger, save_png
from robot_rl.runs.bc import (
    EVAL_SEEDS,
    BCRun,
    read_bc_checkpoint,
    task_instructions,
    typed_env,
    visual_randomization,
    with_teacher,
    write_evaluation,
)
from sim.typed_config import ConfigError, to_dict

FORMAT = BC_FORMAT


class EMA:
    """Exponential moving average of a model's weights with Chi et al.'s warm-up: ``decay = min(max_decay,
    1 - (1 + step) ** -power)`` (early steps follow the model closely, later ones average over more)."""

    def __init__(self, model: ChunkPolicy, power: float, max_decay: float) -> None:
        self.model: ChunkPolicy = copy.deepcopy(model).eval().requires_grad_(False)
        self.power = power
        self.max_decay = max_decay

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        """Fold ``model``'s current weights in (buffers are copied); one foreach call over all parameter tensors (a
        VLA student has about a hundred)."""
        decay = min(self.max_decay, 1.0 - (1.0 + step) ** -self.power)
        current = [p.detach() for p in model.parameters()]
        torch._foreach_lerp_(list(self.model.parameters()), current, 1.0 - decay)  # lists of unequal length refused
        for buf, new_buf in zip(self.model.buffers(), model.buffers(), strict=True):
            buf.copy_(new_buf)


def noisy_instruction(instruction: torch.Tensor, std: float, tokens: int) -> torch.Tensor:
    """``instruction [B, D_l]`` with Gaussian noise of ``std`` on each value, each embedding (or, with ``tokens``
    > 0, each of its ``tokens`` rows) scaled back to unit length; padding rows stay zero."""
    rows = instruction.reshape(instruction.shape[0], max(tokens, 1), -1)
    kept = (rows.abs().sum(-1, keepdim=True) > 0).to(rows.dtype)
    noisy = torch.nn.functional.normalize(rows + std * torch.randn_like(rows), dim=-1) * kept
    return noisy.reshape(instruction.shape)


def execution_note(teacher_kind: object, policy: StudentConfig) -> str | None:
    """A one-line note for a student of a PPO teacher (``teacher_kind`` from the dataset's ``robot_rl`` metadata)
    whose config executes chunks blind or ensembles them: the teacher corrects every control period, and such
    students lost 25-44 points against a plan every period (docs/imitation.md). ``None`` otherwise (scripted
    experts, whose smooth waypoint motions suit chunks, and datasets that do not say)."""
    if teacher_kind != "ppo" or (policy.action_horizon == 1 and policy.ensemble_decay is None):
        return None
    execution = "temporal ensembling" if policy.ensemble_decay is not None else f"{policy.action_horizon} actions"
    return (
        f"note: the dataset's teacher is a PPO policy and this student executes {execution} per plan; "
        "students of PPO teachers plan every period: --set policy.action_horizon=1 --set policy.ensemble_decay=null"
    )


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up to 1 over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class BCResult:
    """Outcome of :func:`train_bc`.

    Attributes:
        run_dir: The run folder.
        steps: Gradient steps done (in total, including a resumed part).
        elapsed_s: Training time, s.
        final_loss: Mean loss of the last logging window.
        evaluation: Final evaluation (``None`` when the dataset names no task).
        own_tasks: A student trained on some of its dataset's tasks (``BCConfig.tasks``): the final evaluation over
            the episodes given one of them (:meth:`ChunkEvalResult.on_instructions`; ``None`` otherwise).
        notes: What the final evaluation left out and why, one line each (a teacher that could not run beside).
    """

    run_dir: Path
    steps: int
    elapsed_s: float
    final_loss: float
    evaluation: ChunkEvalResult | None
    own_tasks: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _new_run_dir(cfg: BCConfig, task: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(cfg.run_root) / (task or "bc")
    run_dir, k = base / f"{stamp}-bc-{cfg.policy.kind}-{cfg.seed}", 1
    while run_dir.exists():
        k += 1
        run_dir = base / f"{stamp}-bc-{cfg.policy.kind}-{cfg.seed}-{k}"
    run_dir.mkdir(parents=True)
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump({"kind": "bc", **to_dict(cfg)}, sort_keys=False))
    return run_dir


class _BCLogger(TrainingLogger):
    def plot(self) -> None:
        """``learning_curve.png``: training loss and evaluation success against gradient steps."""
        if not self.rows:
            return
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax_l, ax_s) = plt.subplots(1, 2, figsize=(11, 3.8))
        pts = [(r["env_steps"], r["train/loss"]) for r in self.rows if "train/loss" in r]
        ax_l.plot([p[0] for p in pts], [p[1] for p in pts])
        ax_l.set_yscale("log")
        ax_l.set_xlabel("gradient steps")
        ax_l.set_ylabel("training loss")
        ax_l.grid(alpha=0.3, which="both")
        ev = [(r["env_steps"], r["eval/success_rate"]) for r in self.rows if "eval/success_rate" in r]
        ax_s.plot([p[0] for p in ev], [p[1] for p in ev], "o-")
        ax_s.set_ylim(-0.02, 1.02)
        ax_s.set_xlabel("gradient steps")
        ax_s.set_ylabel("evaluation success")
        ax_s.grid(alpha=0.3)
        fig.suptitle(f"{self.run_dir.parent.name} / {self.run_dir.name}")
        fig.tight_layout()
        save_png(fig, self.run_dir / "learning_curve.png")
        plt.close(fig)


def episodes_of_tasks(dataset: Dataset, tasks: list[str]) -> list[Episode]:
    """The episodes of ``dataset`` whose task text is one of ``tasks`` (``BCConfig.tasks``), in dataset order.

    Raises:
        ConfigError: A text that no episode of the dataset has (the message lists the dataset's texts).
    """
    held = sorted({e.task for e in dataset.episodes})
    for text in tasks:
        if text not in held:
            raise ConfigError(f"tasks: no episode of '{dataset.root}' has the task {text!r} (its tasks: {held})")
    wanted = set(tasks)
    return [e for e in dataset.episodes if e.task in wanted]


def train_bc(cfg: BCConfig, resume: Path | None = None, quiet: bool = False, export: bool = True) -> BCResult:
    """Train a student on ``cfg.dataset``; evaluate it (if the dataset names its task) and export it.

    Args:
        cfg: Resolved config (a resumed run's saved config, with the caller's budget changes).
        resume: Run folder to continue (its checkpoint must match ``cfg``'s network).
        quiet: No progress bar.
        export: Write ``policy.onnx`` at the end.

    Raises:
        DatasetError: The dataset is unusable.
        ConfigError: The dataset names no task and none is configured, or the config does not fit it.
        CheckpointError: ``resume`` is not a usable behaviour-cloning run.
    """
    device = torch.device(cfg.device)
    dataset = load_dataset(cfg.dataset)
    if cfg.tasks is not None:
        dataset.episodes = episodes_of_tasks(dataset, cfg.tasks)
    if cfg.max_episodes is not None:
        if cfg.max_episodes > len(dataset.episodes):
            raise ConfigError(f"max_episodes={cfg.max_episodes}, but '{cfg.dataset}' holds {len(dataset.episodes)}")
        dataset.episodes = dataset.episodes[: cfg.max_episodes]
    meta = dataset.robot_rl
    task = cfg.task or str(meta.get("task", ""))
    contract = Contract.from_dict(meta["contract"]) if isinstance(meta.get("contract"), dict) else None
    if contract is not None and (contract.obs_dim, contract.action.size) != (dataset.state_dim, dataset.action_dim):
        raise ConfigError(
            f"dataset '{dataset.root}': its contract describes {contract.obs_dim} observations and "
            f"{contract.action.size} actions, its features {dataset.state_dim} and {dataset.action_dim}"
        )
    env_cfg = typed_env(task, meta.get("env")) if task else None
    groups = meta.get("obs_groups", ["policy"])
    if not (isinstance(groups, list) and groups and all(isinstance(g, str) for g in groups)):
        raise DatasetError(
            f"dataset '{dataset.root}': robot_rl.obs_groups must be a list of group names, got {groups!r}"
        )
    if not isinstance(meta.get("task", ""), str):
        raise DatasetError(f"dataset '{dataset.root}': robot_rl.task must be a task name, got {meta['task']!r}")
    teacher = meta.get("teacher")
    if teacher is not None and not isinstance(teacher, str):
        raise DatasetError(f"dataset '{dataset.root}': robot_rl.teacher must be text, got {teacher!r}")
    if resume is None and (note := execution_note(meta.get("teacher_kind"), cfg.policy)) is not None:
        print(note, file=sys.stderr)
    mounts = meta.get("cameras") if isinstance(meta.get("cameras"), dict) else {}
    visual_plain = meta.get("visual_randomization") if isinstance(meta.get("visual_randomization"), dict) else None
    visual = visual_randomization(visual_plain)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    stats = episode_statistics(dataset.episodes)
    policy = build_student(cfg.policy, dataset.state_dim, dataset.action_dim, stats, dataset.cameras)
    policy.to(device)
    t = cfg.train
    opt = torch.optim.AdamW(policy.parameters(), lr=t.learning_rate, weight_decay=t.weight_decay, fused=fused(device))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, t.warmup_steps, t.max_steps))
    ema = EMA(policy, t.ema_power, t.ema_max_decay) if t.ema else None
    step, elapsed = 0, 0.0
    if resume is not None:
        state = read_bc_checkpoint(resume / "checkpoint.pt", device)
        try:
            policy.load_state_dict(state["model"])
            if ema is not None and state.get("ema") is not None:
                ema.model.load_state_dict(state["ema"])
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"'{resume}' does not fit this config: {state_dict_mismatch(exc)}") from None
        step, elapsed = int(state["step"]), float(state["elapsed_s"])
        torch.set_rng_state(state["rng"]["torch"])
        rng.bit_generator.state = state["rng"]["numpy"]
    # every image decoded (a damaged one is named) before the run folder is made
    windows = Windows(dataset.episodes, cfg.policy.obs_horizon, cfg.policy.pred_horizon, policy.cameras)
    run_dir = resume if resume is not None else _new_run_dir(cfg, task)
    tensors = [torch.from_numpy(a).to(device) for a in (windows.state, windows.action)]
    index = [torch.from_numpy(a).to(device) for a in (windows.obs_index, windows.action_index)]
    frames = {c: torch.from_numpy(a).to(device) for c, a in windows.images.items()}  # uint8 [F, H, W, 3]
    language = None
    if policy.language_dim:
        table = torch.from_numpy(features(windows.tasks, policy.language_tokens)).to(device)  # [K, D_l]: one per text
        frame_embedding = table[torch.from_numpy(windows.frame_task).to(device)]  # [F, D_l]
        if cfg.policy.language_subspace:
            for model in (policy, *([ema.model] if ema is not None else [])):
                model.fit_instructions(table, cfg.policy.language_nearest)
        language = {"encoder": encoder_identity(), "instructions": windows.tasks}

    def save() -> None:
        state = {
            "format": FORMAT,
            "config": to_dict(cfg),
            "dims": {
                "obs_dim": dataset.state_dim,
                "action_dim": dataset.action_dim,
                "cameras": {c: list(hw) for c, hw in policy.cameras.items()},
            },
            "contract": None if contract is None else contract.to_dict(),
            "language": language,
            "env": None if env_cfg is None else to_dict(env_cfg),
            "task": task,
            "teacher": teacher,
            "obs_groups": groups,
            "camera_mounts": mounts,
            "visual_randomization": visual_plain,
            "model": policy.state_dict(),
            "ema": None if ema is None else ema.model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "step": step,
            "elapsed_s": elapsed + time.monotonic() - start,
            "rng": {"torch": torch.get_rng_state(), "numpy": rng.bit_generator.state},
        }
        if (bad := first_non_finite(state["model"])) is not None:
            raise CheckpointError(f"refusing to write a checkpoint: the model's '{bad}' holds non-finite values")
        with atomic_path(run_dir / "checkpoint.pt") as tmp:
            torch.save(state, tmp)

    def evaluate(episodes: int, seeds: tuple[int, ...]) -> ChunkEvalResult | None:
        if env_cfg is None:
            return None
        deployed: ChunkPolicy = ema.model if ema is not None else policy
        deployed.eval()
        spec = cfg.policy.chunk_spec(deployed, mounts)
        out = evaluate_chunk_policy(deployed, spec, task, env_cfg, groups, episodes, seeds, visual=visual)
        policy.train()
        return out

    logger = _BCLogger(run_dir, t.max_steps, tensorboard=False, quiet=quiet)
    logger.bar.update(step)
    start = time.monotonic()
    losses: list[float] = []
    final_loss = float("nan")
    policy.train()
    try:
        while step < t.max_steps:
            if t.max_time_s is not None and elapsed + time.monotonic() - start >= t.max_time_s:
                break
            rows = torch.from_numpy(rng.integers(0, len(windows), t.batch_size)).to(device)
            obs, action = tensors[0][index[0][rows]], tensors[1][index[1][rows]]
            images = {c: f[index[0][rows]] for c, f in frames.items()}
            instruction = frame_embedding[index[0][rows, -1]] if language is not None else None
            if instruction is not None and t.instruction_noise > 0:
                instruction = noisy_instruction(instruction, t.instruction_noise, policy.language_tokens)
            loss, _ = policy.compute_loss(obs, action, images, instruction)
            if not torch.isfinite(loss):
                raise CheckpointError(f"the training loss became non-finite at step {step}; last checkpoint kept")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if ema is not None:
                ema.update(policy, step)
            losses.append(float(loss.detach()))
            if step % t.log_interval == 0 or step == t.max_steps:
                final_loss = float(np.mean(losses))
                row = {"train/loss": final_loss, "train/lr": float(sched.get_last_lr()[0])}
                if t.eval_interval and step % t.eval_interval == 0:
                    res = evaluate(t.eval_episodes, (0,))
                    if res is not None:
                        row["eval/success_rate"] = res.success_rate
                logger.log(row, step - 1)
                logger.bar.update(t.log_interval - 1)
                logger.bar.set_postfix({"loss": f"{final_loss:.4f}"}, refresh=False)
                losses = []
            if step % t.save_interval == 0:
                save()
        save()
        evaluation = evaluate(t.eval_episodes, EVAL_SEEDS)
        written: dict[str, Any] = {}
        notes: list[str] = []
        if evaluation is not None:
            # the PPO teacher the demonstrations name, where its run folder is here, on the same episodes
            note = with_teacher(evaluation, teacher, task, env_cfg, cfg.device)
            notes += [note] if note else []
            logger.log({"eval/success_rate": evaluation.success_rate}, step)
            spec = cfg.policy.chunk_spec(ema.model if ema is not None else policy, mounts)
            title = f"{task}: {cfg.policy.kind} student"
            texts = task_instructions(task, env_cfg)
            written = write_evaluation(run_dir, evaluation, title, spec, instructions=texts, tasks=cfg.tasks)
    finally:
        logger.close()
    if export and contract is not None:
        BCRun.load(run_dir, cfg.device).export()
    return BCResult(
        run_dir, step, elapsed + time.monotonic() - start, final_loss, evaluation, written.get("tasks"), notes
    )
