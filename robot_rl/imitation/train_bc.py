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
    env         the task config the demonstrations were collected under (plain) or None
    obs_groups  observation groups the student reads
    camera_mounts  where the dataset's cameras were mounted (robot-rl collect --images), by camera name
    visual_randomization  the dataset's visual randomisation (plain) or None; evaluation renders with it
    model, ema  ChunkPolicy state dicts (normalisers inside)
    optimizer, scheduler, step, elapsed_s, rng
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import yaml

from policies.nets.bc_mlp import MLPChunkPolicy
from policies.nets.chunk import ChunkPolicy, Horizons
from policies.runtime.contract import ChunkSpec, Contract, ContractError
from policies.runtime.files import atomic_path, atomic_write_text
from robot_rl.checkpoint import BC_FORMAT, CheckpointError, first_non_finite, read_any_checkpoint
from robot_rl.imitation.config import BCConfig, ChunkPolicyConfig
from robot_rl.imitation.dataset import DatasetError, episode_statistics, load_dataset
from robot_rl.imitation.evaluate import ChunkEvalResult, evaluate_chunk_policy
from robot_rl.imitation.windows import Windows
from robot_rl.logger import TrainingLogger, save_png
from robot_rl.typed_config import ConfigError, from_dict, to_dict
from sim.rendering import VisualRandomization

FORMAT = BC_FORMAT
EVAL_SEEDS = (0, 1, 2)
"""Seeds of the final evaluation (pooled, with a 95 % interval)."""


def build_policy(
    p: ChunkPolicyConfig,
    obs_dim: int,
    action_dim: int,
    stats: dict[str, Any],
    cameras: dict[str, tuple[int, int]] | None = None,
) -> ChunkPolicy:
    """The student network for ``p`` with min-max statistics ``stats`` (``{feature: {min, max}}``), seeing the
    images of ``cameras`` (name -> ``(height, width)``; must cover ``p.cameras``)."""
    sizes = cameras or {}
    missing = [c for c in p.cameras if c not in sizes]
    if missing:
        raise ConfigError(
            f"policy.cameras names {missing}, but the dataset has images of {sorted(sizes) or 'no camera'} "
            "(robot-rl collect --images CAMERA records them)"
        )
    small = [f"'{c}' ({sizes[c][0]}x{sizes[c][1]})" for c in p.cameras if min(sizes[c]) < 8]
    if small:
        raise ConfigError(f"camera images {', '.join(small)} are too small for the image encoder (at least 8x8)")
    vision: dict[str, Any] = {
        "cameras": {c: sizes[c] for c in p.cameras},
        "image_features": p.image_features,
        "image_shift": p.image_shift,
    }
    horizons = Horizons(p.obs_horizon, p.pred_horizon, p.action_horizon)
    ranges = (
        stats["observation.state"]["min"],
        stats["observation.state"]["max"],
        stats["action"]["min"],
        stats["action"]["max"],
    )
    if p.kind == "mlp":
        return MLPChunkPolicy(obs_dim, action_dim, horizons, *ranges, hidden=p.mlp_hidden, **vision)
    from policies.nets.diffusion import DiffusionPolicy, SamplerSettings

    sampler = SamplerSettings(p.train_steps, p.inference_steps, p.beta_schedule, p.clip_sample)
    return DiffusionPolicy(
        obs_dim,
        action_dim,
        horizons,
        *ranges,
        denoiser=p.denoiser,
        down_dims=tuple(p.down_dims),
        d_model=p.d_model,
        heads=p.heads,
        layers=p.layers,
        sampler=sampler,
        **vision,
    )


def visual_randomization(plain: dict[str, Any] | None) -> VisualRandomization | None:
    """The visual randomisation a dataset recorded (``robot_rl.visual_randomization``), typed.

    Raises:
        ConfigError: The recorded settings are not a valid :class:`~sim.rendering.VisualRandomization`.
    """
    if plain is None:
        return None
    try:
        return from_dict(VisualRandomization, plain, "visual_randomization")
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"the dataset's visual_randomization is invalid: {exc}") from None


def chunk_spec(policy: ChunkPolicy, p: ChunkPolicyConfig, mounts: dict[str, dict[str, Any]] | None = None) -> ChunkSpec:
    """The contract's ``chunk`` section of a trained student (``mounts``: the dataset's camera mounts by name)."""
    h = policy.horizons
    noise = "noise" if p.kind == "diffusion" else ""
    cameras = {
        c: {"input": name, "height": hw[0], "width": hw[1], "mount": dict((mounts or {}).get(c, {}))}
        for (c, hw), name in zip(policy.cameras.items(), policy.image_inputs(1), strict=True)
    }
    return ChunkSpec(h.obs, h.pred, h.action, noise, policy.sampler_settings(), p.ensemble_decay, cameras)


class EMA:
    """Exponential moving average of a model's weights with Chi et al.'s warm-up: ``decay = min(max_decay,
    1 - (1 + step) ** -power)`` (early steps follow the model closely, later ones average over more)."""

    def __init__(self, model: ChunkPolicy, power: float, max_decay: float) -> None:
        self.model: ChunkPolicy = copy.deepcopy(model).eval().requires_grad_(False)
        self.power = power
        self.max_decay = max_decay

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        """Fold ``model``'s current weights in (buffers are copied)."""
        decay = min(self.max_decay, 1.0 - (1.0 + step) ** -self.power)
        for avg, new in zip(self.model.parameters(), model.parameters(), strict=True):
            avg.lerp_(new.detach(), 1.0 - decay)
        for buf, new_buf in zip(self.model.buffers(), model.buffers(), strict=True):
            buf.copy_(new_buf)


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
    """

    run_dir: Path
    steps: int
    elapsed_s: float
    final_loss: float
    evaluation: ChunkEvalResult | None


@dataclass
class BCRun:
    """A trained student loaded from its run folder (EMA weights where kept).

    Attributes:
        run_dir: The run folder.
        cfg: Its config.
        policy: The student (eval mode).
        contract: Observation/action contract of the demonstrations (``None`` for foreign datasets).
        env_cfg: Task config of the demonstrations (typed), ``None`` for foreign datasets.
        obs_groups: Observation groups the student reads.
        checkpoint: The raw checkpoint.
    """

    run_dir: Path
    cfg: BCConfig
    policy: ChunkPolicy
    contract: Contract | None
    env_cfg: Any
    obs_groups: list[str]
    checkpoint: dict[str, Any]

    def spec(self) -> ChunkSpec:
        """Contract chunk section of this student."""
        return chunk_spec(self.policy, self.cfg.policy, self.checkpoint.get("camera_mounts"))

    def deployment_contract(self) -> Contract:
        """The demonstrations' contract with this student's chunk section (what export writes).

        Raises:
            ContractError: The run's dataset carried no contract (a foreign dataset).
        """
        if self.contract is None:
            raise ContractError(
                f"'{self.run_dir}' was trained on a dataset without a robot_rl contract (meta/info.json "
                "robot_rl.contract); nothing says how a robot feeds and applies it"
            )
        return dataclasses.replace(self.contract, output_name="action_chunk", chunk=self.spec())


def is_bc_checkpoint(state: dict[str, Any]) -> bool:
    """Whether a loaded checkpoint dict is a behaviour-cloning one."""
    return state.get("format") == FORMAT


def _typed_env(task: str, env: Any) -> Any:
    if not task or env is None:
        return None
    from sim.registry import get_task

    return from_dict(get_task(task).config_cls, env, "env")


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
    env_cfg = _typed_env(task, meta.get("env")) if task else None
    groups = meta.get("obs_groups", ["policy"])
    if not (isinstance(groups, list) and groups and all(isinstance(g, str) for g in groups)):
        raise DatasetError(
            f"dataset '{dataset.root}': robot_rl.obs_groups must be a list of group names, got {groups!r}"
        )
    if not isinstance(meta.get("task", ""), str):
        raise DatasetError(f"dataset '{dataset.root}': robot_rl.task must be a task name, got {meta['task']!r}")
    mounts = meta.get("cameras") if isinstance(meta.get("cameras"), dict) else {}
    visual_plain = meta.get("visual_randomization") if isinstance(meta.get("visual_randomization"), dict) else None
    visual = visual_randomization(visual_plain)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    stats = episode_statistics(dataset.episodes)
    policy = build_policy(cfg.policy, dataset.state_dim, dataset.action_dim, stats, dataset.cameras)
    policy.to(device)
    t = cfg.train
    opt = torch.optim.AdamW(policy.parameters(), lr=t.learning_rate, weight_decay=t.weight_decay)
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
            raise CheckpointError(f"'{resume}' does not fit this config: {str(exc).splitlines()[0]}") from None
        step, elapsed = int(state["step"]), float(state["elapsed_s"])
        torch.set_rng_state(state["rng"]["torch"])
        rng.bit_generator.state = state["rng"]["numpy"]
    # every image decoded (a damaged one is named) before the run folder is made
    windows = Windows(dataset.episodes, cfg.policy.obs_horizon, cfg.policy.pred_horizon, policy.cameras)
    run_dir = resume if resume is not None else _new_run_dir(cfg, task)
    tensors = [torch.from_numpy(a).to(device) for a in (windows.state, windows.action)]
    index = [torch.from_numpy(a).to(device) for a in (windows.obs_index, windows.action_index)]
    frames = {c: torch.from_numpy(a).to(device) for c, a in windows.images.items()}  # uint8 [F, H, W, 3]

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
            "env": None if env_cfg is None else to_dict(env_cfg),
            "task": task,
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
        spec = chunk_spec(deployed, cfg.policy, mounts)
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
            loss, _ = policy.compute_loss(obs, action, images)
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
        if evaluation is not None:
            logger.log({"eval/success_rate": evaluation.success_rate}, step)
            spec = chunk_spec(ema.model if ema is not None else policy, cfg.policy, mounts)
            write_evaluation(run_dir, evaluation, f"{task}: {cfg.policy.kind} student", spec)
    finally:
        logger.close()
    if export and contract is not None:
        export_bc_run(load_bc_run(run_dir, cfg.device))
    return BCResult(run_dir, step, elapsed + time.monotonic() - start, final_loss, evaluation)


def write_evaluation(run_dir: Path, result: ChunkEvalResult, title: str, spec: ChunkSpec | None = None) -> None:
    """``eval.yaml`` (pooled success, 95 % interval, per seed, how chunks were executed) and ``eval.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result.summary()
    if spec is not None:
        summary["execution"] = {
            "action_horizon": spec.action_horizon,
            "ensemble_decay": spec.ensemble_decay,
            "inference_steps": spec.sampler.get("inference_steps"),
        }
    atomic_write_text(run_dir / "eval.yaml", yaml.safe_dump(summary, sort_keys=False))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    rates = [float(r.episodes["success"].mean()) for r in result.per_seed]
    ax.bar([str(s) for s in result.seeds], rates, color="tab:blue", alpha=0.7, label="per seed")
    lo, hi = result.ci95
    ax.axhspan(lo, hi, color="tab:orange", alpha=0.25, label=f"pooled 95% CI {lo:.0%}-{hi:.0%}")
    ax.axhline(result.success_rate, color="tab:orange", label=f"pooled {result.success_rate:.0%}")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("evaluation seed")
    ax.set_ylabel("success rate")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, run_dir / "eval.png")
    plt.close(fig)


def read_bc_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a behaviour-cloning checkpoint, naming what is wrong.

    Raises:
        CheckpointError: Missing, unreadable, or not a behaviour-cloning checkpoint.
    """
    if not path.parent.is_dir():
        raise CheckpointError(f"run folder '{path.parent}' does not exist")
    state = read_any_checkpoint(path, device)
    if not is_bc_checkpoint(state):
        raise CheckpointError(f"'{path}' is a PPO checkpoint, not a behaviour-cloning one")
    for key in ("config", "dims", "model", "step"):
        if key not in state:
            raise CheckpointError(f"checkpoint '{path}' is damaged: '{key}' is missing")
    return state


def load_bc_run(run_dir: Path, device: str = "cpu") -> BCRun:
    """Load a behaviour-cloning run folder (the EMA weights when the run kept them).

    Raises:
        CheckpointError: Not a run folder or not a behaviour-cloning checkpoint.
        ConfigError: Its saved config is invalid.
    """
    state = read_bc_checkpoint(run_dir / "checkpoint.pt", device)
    cfg = from_dict(BCConfig, state["config"])
    cfg.device = device
    d = state["dims"]
    zeros = {"min": np.zeros(d["obs_dim"]), "max": np.ones(d["obs_dim"])}
    azeros = {"min": np.zeros(d["action_dim"]), "max": np.ones(d["action_dim"])}
    cams = {c: (int(hw[0]), int(hw[1])) for c, hw in dict(d.get("cameras") or {}).items()}
    policy = build_policy(
        cfg.policy, d["obs_dim"], d["action_dim"], {"observation.state": zeros, "action": azeros}, cams
    )
    weights = state["ema"] if state.get("ema") is not None else state["model"]
    if (bad := first_non_finite(weights)) is not None:
        raise CheckpointError(f"checkpoint in '{run_dir}' holds non-finite values in '{bad}'")
    try:
        policy.load_state_dict(weights)
    except RuntimeError as exc:
        raise CheckpointError(
            f"checkpoint in '{run_dir}' does not fit its config: {str(exc).splitlines()[0]}"
        ) from None
    contract = Contract.from_dict(state["contract"]) if state.get("contract") else None
    task = str(state.get("task") or "")
    env_cfg = _typed_env(task, state.get("env"))
    if task and not cfg.task:
        cfg.task = task
    groups = list(state.get("obs_groups") or ["policy"])
    return BCRun(run_dir, cfg, policy.to(device).eval(), contract, env_cfg, groups, state)


def export_bc_run(run: BCRun, out_dir: Path | None = None) -> Path:
    """Export the student's whole sampler to ``policy.onnx`` + ``contract.yaml`` (default: in the run folder).

    Raises:
        ContractError: The run's dataset carried no contract (a foreign dataset), or it does not fit.
    """
    from policies.nets.export import chunk_to_onnx_model, write_onnx

    contract = run.deployment_contract()
    return write_onnx(chunk_to_onnx_model(run.policy, contract), contract, out_dir or run.run_dir)


def evaluate_bc_run(
    run: BCRun,
    episodes: int,
    seeds: tuple[int, ...],
    randomize: bool = True,
    visual: VisualRandomization | Literal["dataset"] | None = "dataset",
) -> ChunkEvalResult:
    """Evaluate a loaded student (``episodes`` per seed) and write ``eval.yaml`` / ``eval.png``; a student that
    sees cameras renders them with ``visual`` randomisation (``"dataset"``: as its demonstrations were).

    Raises:
        ConfigError: The run's dataset names no task to evaluate in.
    """
    if run.env_cfg is None:
        raise ConfigError(f"'{run.run_dir}' was trained on a dataset that names no task; nothing to evaluate in")
    if visual == "dataset":
        visual = visual_randomization(run.checkpoint.get("visual_randomization"))
    result = evaluate_chunk_policy(
        run.policy, run.spec(), run.cfg.task, run.env_cfg, run.obs_groups, episodes, seeds, randomize, visual
    )
    write_evaluation(run.run_dir, result, f"{run.cfg.task}: {run.cfg.policy.kind} student", run.spec())
    return result
