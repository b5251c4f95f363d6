"""Behaviour-cloning runs (``robot-rl train-bc``): a trained student loaded from its run folder, evaluated and
exported. Checkpoint format ``robot-rl-bc-checkpoint-v1`` (see :mod:`robot_rl.imitation.train_bc`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import yaml

from policies.nets.chunk import ChunkPolicy
from policies.nets.language import LanguageError, check_identity, features
from policies.runtime.contract import ChunkSpec, Contract, ContractError
from policies.runtime.files import atomic_write_text
from policies.runtime.realtime import RealTime
from robot_rl.checkpoint import BC_FORMAT, CheckpointError, first_non_finite, read_any_checkpoint, state_dict_mismatch
from robot_rl.imitation.config import BCConfig
from robot_rl.imitation.evaluate import ChunkEvalResult, evaluate_chunk_policy, evaluate_teacher
from robot_rl.imitation.students import build_student, student_config
from robot_rl.logger import save_png
from sim.rendering import VisualRandomization
from sim.typed_config import ConfigError, from_dict

if TYPE_CHECKING:
    from robot_rl.runs.ppo import PPORun

EVAL_SEEDS = (0, 1, 2)
"""Seeds of the final evaluation (pooled, with a 95 % interval)."""


def check_execution(ensemble_decay: float | None, chunking: str | None) -> None:
    """Refuse an execution that no student can take, before anything is loaded: ``ensemble_decay`` not finite, or
    given beside ``chunking`` ``sync`` / ``rtc`` (receding-horizon plans, nothing to ensemble).

    Raises:
        ConfigError: One line naming the flag.
    """
    if ensemble_decay is not None and not math.isfinite(ensemble_decay):
        raise ConfigError(f"--ensemble-decay must be a finite number, got {ensemble_decay}")
    if ensemble_decay is not None and chunking is not None and chunking != "async":
        raise ConfigError(f"--chunking {chunking} executes receding-horizon plans; it takes no --ensemble-decay")


@dataclass
class BCRun:
    """A trained student loaded from its run folder (EMA weights where kept).

    Attributes:
        run_dir: The run folder.
        cfg: Its config.
        policy: The student (eval mode).
        contract_: Observation/action contract of the demonstrations (``None`` for foreign datasets).
        env_cfg: Task config of the demonstrations (typed), ``None`` for foreign datasets.
        obs_groups: Observation groups the student reads.
        checkpoint: The raw checkpoint.
        timing: How evaluations time plans against the control loop (``None``: sync, no inference delay).
    """

    run_dir: Path
    cfg: BCConfig
    policy: ChunkPolicy
    contract_: Contract | None
    env_cfg: Any
    obs_groups: list[str]
    checkpoint: dict[str, Any]
    timing: RealTime | None = None
    env_overrides: list[str] = dataclasses.field(default_factory=list)
    """The ``env.KEY=VALUE`` settings :meth:`set_env` applied (evaluations record them)."""
    skipped: list[str] = dataclasses.field(default_factory=list)
    """What the last :meth:`evaluate` did not evaluate and why, one line each (the teacher beside the student)."""
    kind = "bc"

    @property
    def task(self) -> str:
        """The task the demonstrations came from (``""`` for foreign datasets)."""
        return self.cfg.task

    @classmethod
    def load(cls, run_dir: Path, device: str = "cpu") -> BCRun:
        """Load a behaviour-cloning run folder (the EMA weights when the run kept them).

        Raises:
            CheckpointError: Not a run folder or not a behaviour-cloning checkpoint.
            ConfigError: Its saved config is invalid.
        """
        state = read_bc_checkpoint(run_dir / "checkpoint.pt", device)
        cfg = bc_config(state["config"])
        cfg.device = device
        d = state["dims"]
        zeros = {"min": np.zeros(d["obs_dim"]), "max": np.ones(d["obs_dim"])}
        azeros = {"min": np.zeros(d["action_dim"]), "max": np.ones(d["action_dim"])}
        cams = {c: (int(hw[0]), int(hw[1])) for c, hw in dict(d.get("cameras") or {}).items()}
        stats = {"observation.state": zeros, "action": azeros}
        policy = build_student(cfg.policy, d["obs_dim"], d["action_dim"], stats, cams)
        weights = state["ema"] if state.get("ema") is not None else state["model"]
        if (bad := first_non_finite(weights)) is not None:
            raise CheckpointError(f"checkpoint in '{run_dir}' holds non-finite values in '{bad}'")
        try:
            policy.load_state_dict(weights)
        except RuntimeError as exc:
            raise CheckpointError(
                f"checkpoint in '{run_dir}' does not fit its config: {state_dict_mismatch(exc)}"
            ) from None
        if cfg.policy.language:
            language = state.get("language")
            if not isinstance(language, dict):
                raise CheckpointError(f"checkpoint in '{run_dir}' is language-conditioned but names no encoder")
            try:
                check_identity(language.get("encoder"), f"'{run_dir}'")
            except LanguageError as exc:
                raise CheckpointError(str(exc)) from None
        contract = Contract.from_dict(state["contract"]) if state.get("contract") else None
        task = str(state.get("task") or "")
        env_cfg = typed_env(task, state.get("env"))
        if task and not cfg.task:
            cfg.task = task
        groups = list(state.get("obs_groups") or ["policy"])
        return cls(run_dir, cfg, policy.to(device).eval(), contract, env_cfg, groups, state)

    @property
    def teacher(self) -> str | None:
        """Who recorded the demonstrations: a PPO run folder or a scripted expert (``None``: the dataset does not
        say)."""
        teacher = self.checkpoint.get("teacher")
        return teacher if isinstance(teacher, str) else None

    def execute_with(
        self,
        action_horizon: int | None = None,
        ensemble_decay: float | None = None,
        timing: RealTime | None = None,
        noise_scale: float | None = None,
    ) -> None:
        """Execute the student otherwise than it was trained to (evaluation only; the checkpoint is not touched):
        ``action_horizon`` actions per plan, ensembling off unless ``ensemble_decay`` is given too; ``timing``: a
        schedule under a simulated inference delay: ``sync`` and ``rtc`` execute receding-horizon plans (ensembling
        off), ``async`` keeps the run's ensembling (or ``ensemble_decay``'s; each period's plan averaged in from
        ``delay_steps`` periods later) unless ``action_horizon`` turns it off; ``noise_scale``: a sampling
        student's initial noise scaled so (``policy.noise_scale``; 0: deterministic); ``None``: as the run says.

        Raises:
            ConfigError: What :func:`check_execution` refuses, ``action_horizon`` outside ``1..pred_horizon``,
                real-time chunking of a student that does not inpaint, or a noise scale outside ``[0, 1]`` or for a
                student that draws no noise (one line, naming the flag).
        """
        check_execution(ensemble_decay, timing.mode if timing is not None else None)
        if noise_scale is not None:
            if not self.cfg.policy.noise_input:
                raise ConfigError(f"--noise-scale: a {self.policy.kind} student draws no noise")
            if not 0.0 <= noise_scale <= 1.0:
                raise ConfigError(f"--noise-scale must be in [0, 1], got {noise_scale}")
            self.cfg.policy = dataclasses.replace(self.cfg.policy, noise_scale=noise_scale)
        if timing is not None:
            if timing.mode == "rtc" and not self.policy.guide_inputs:
                raise ConfigError(
                    f"--chunking rtc needs a sampler that inpaints; a {self.policy.kind} student does not"
                )
            self.timing = timing
            if timing.mode != "async":
                self.cfg.policy = dataclasses.replace(self.cfg.policy, ensemble_decay=None)
            asked = ensemble_decay if ensemble_decay is not None else self.cfg.policy.ensemble_decay
            ensembled = action_horizon is None and asked is not None
            if ensembled and timing.delay_steps >= self.cfg.policy.pred_horizon:
                raise ConfigError(
                    f"--inference-delay must be below the chunk ({self.cfg.policy.pred_horizon}) to ensemble"
                )
        if action_horizon is not None:
            horizon = self.cfg.policy.pred_horizon
            if not 1 <= action_horizon <= horizon:
                raise ConfigError(f"--action-horizon must be in [1, {horizon}], got {action_horizon}")
            self.cfg.policy = dataclasses.replace(self.cfg.policy, action_horizon=action_horizon, ensemble_decay=None)
            self.policy.horizons = dataclasses.replace(self.policy.horizons, action=action_horizon)
        if ensemble_decay is not None:
            self.cfg.policy = dataclasses.replace(self.cfg.policy, ensemble_decay=ensemble_decay)

    def spec(self) -> ChunkSpec:
        """Contract chunk section of this student (a language-conditioned one's with its instruction table)."""
        return self.cfg.policy.chunk_spec(self.policy, self.checkpoint.get("camera_mounts"), self.language_section())

    def language_section(self) -> dict[str, Any]:
        """``chunk.language`` of a language-conditioned student: the graph input, the encoder it was trained with
        and the embedding of each instruction its dataset holds (empty for a student without language)."""
        if not self.policy.language_dim:
            return {}
        language = self.checkpoint["language"]
        texts = [str(t) for t in language.get("instructions", [])]
        tokens = self.policy.language_tokens
        table = {t: [float(x) for x in v] for t, v in zip(texts, features(texts, tokens), strict=True)}
        subspace = self.policy.instruction_subspace
        span = subspace.dimensions() if subspace is not None else None
        nearest = subspace.nearest() if subspace is not None else 0
        return {"input": "instruction", "dim": self.policy.language_dim, "encoder": language["encoder"],
                **({"tokens": tokens} if tokens else {}), **({"subspace": span} if span is not None else {}),
                **({"nearest": nearest} if nearest else {}), "instructions": table}  # fmt: skip

    def contract(self) -> Contract:
        """The demonstrations' contract with this student's chunk section (what export writes).

        Raises:
            ContractError: The run's dataset carried no contract (a foreign dataset).
        """
        if self.contract_ is None:
            raise ContractError(
                f"'{self.run_dir}' was trained on a dataset without a robot_rl contract (meta/info.json "
                "robot_rl.contract); nothing says how a robot feeds and applies it"
            )
        return dataclasses.replace(self.contract_, output_name="action_chunk", chunk=self.spec())

    def set_env(self, overrides: list[str]) -> None:
        """Evaluate in another world: apply ``env.KEY=VALUE`` overrides to the demonstrations' task config (the
        student stays as trained), e.g. ``env.passivity.tank_max_j=10`` or ``env.command_delay=[0.0,0.04]``.

        Raises:
            ConfigError: The run names no task, a key outside ``env``, an unknown key or a bad value (named), or a
                setting that changes what the student reads or commands (an observation term, or how its actions
                map to commands).
        """
        import sim
        from robot_rl.config import load_config
        from robot_rl.runs.worlds import action_changes, check_env_overrides, observation_changes, refuse_changes
        from sim.typed_config import to_dict

        if self.env_cfg is None:
            raise ConfigError(f"'{self.run_dir}' was trained on a dataset that names no task; nothing to evaluate in")
        check_env_overrides(overrides)
        base = {"task": self.task, "env": to_dict(self.env_cfg)}
        cfg = load_config(None, None, overrides, base=base, base_name=f"the demonstrations' world of '{self.run_dir}'")
        before, after = (sim.make(self.task, 1, "cpu", env) for env in (self.env_cfg, cfg.env))
        try:
            old, new = before.contract(["policy"]), after.contract(["policy"])
        finally:
            before.close()
            after.close()
        refuse_changes(
            overrides, observation_changes(old.observation, new.observation) + action_changes(old, new), "the student"
        )
        self.env_cfg = cfg.env
        self.env_overrides += overrides

    def export(self, out_dir: Path | None = None) -> Path:
        """Export the student's whole sampler to ``policy.onnx`` + ``contract.yaml`` (default: in the run folder).

        Raises:
            ContractError: The run's dataset carried no contract (a foreign dataset), or it does not fit.
        """
        from policies.nets.export import chunk_to_onnx_model, write_onnx

        contract = self.contract()
        return write_onnx(chunk_to_onnx_model(self.policy, contract), contract, out_dir or self.run_dir)

    def evaluate(
        self,
        episodes: int,
        seeds: tuple[int, ...] = EVAL_SEEDS,
        randomize: bool = True,
        visual: VisualRandomization | Literal["dataset"] | None = "dataset",
        stem: str = "eval",
        beside_teacher: bool = False,
    ) -> ChunkEvalResult:
        """Evaluate the student (``episodes`` per seed) and write ``<stem>.yaml`` / ``<stem>.png``; a student that
        sees cameras renders them with ``visual`` randomisation (``"dataset"``: as its demonstrations were). With
        ``beside_teacher``, in the demonstrations' own world (no :meth:`set_env`), the PPO teacher they name runs the
        same episodes too (:func:`with_teacher`; the result's ``teacher``, ``<stem>.yaml``'s ``teacher``).

        Raises:
            ConfigError: The run's dataset names no task to evaluate in.
        """
        if self.env_cfg is None:
            raise ConfigError(f"'{self.run_dir}' was trained on a dataset that names no task; nothing to evaluate in")
        if visual == "dataset":
            visual = visual_randomization(self.checkpoint.get("visual_randomization"))
        result = evaluate_chunk_policy(
            self.policy, self.spec(), self.cfg.task, self.env_cfg, self.obs_groups, episodes, seeds, randomize, visual,
            self.timing,
        )  # fmt: skip
        self.skipped = []
        if beside_teacher and not self.env_overrides:
            note = with_teacher(result, self.teacher, self.cfg.task, self.env_cfg, self.cfg.device)
            self.skipped += [note] if note else []
        title = f"{self.cfg.task}: {self.cfg.policy.kind} student"
        texts = self.instruction_texts()
        write_evaluation(
            self.run_dir, result, title, self.spec(), stem, texts, self.timing, self.cfg.tasks, self.env_overrides
        )
        return result

    def instruction_texts(self) -> list[str]:
        """The instruction texts of the task in this run's env config (indexed by the episodes' ``instruction``);
        empty for a task without language."""
        return task_instructions(self.cfg.task, self.env_cfg)

    def describe(self) -> str:
        """One line: what the run is."""
        p = self.cfg.policy
        step = int(self.checkpoint.get("step", 0))
        return f"{self.cfg.task or '(no task)'}: {p.kind} student, {step:,} gradient steps, dataset {self.cfg.dataset}"


def teacher_folder(teacher: str | Path | None) -> Path | None:
    """The PPO run folder a student's ``teacher`` names, where it holds a ``checkpoint.pt`` here: the text itself,
    or ``RUN`` of ``RUN (task)``, how datasets recorded before 2026-12-07 named a teacher of another task; ``None``
    otherwise (a scripted expert, a run on another machine)."""
    if not teacher:
        return None
    text = str(teacher)
    for candidate in (text, text.rsplit(" (", 1)[0] if text.endswith(")") else text):
        if (Path(candidate) / "checkpoint.pt").is_file():
            return Path(candidate)
    return None


def teacher_beside(
    teacher: PPORun, task: str, env_cfg: Any, episodes: int, seeds: Sequence[int]
) -> ChunkEvalResult:
    """A student's PPO teacher on the student's evaluation episodes: the same seeds, starts, randomised parameters
    and tank (:func:`evaluate_teacher`). A teacher of the student's task acts in its own config (the demonstrations'
    may lack a sensor bias it trained with: ``collect --unbiased``); a teacher of another task in the demonstrations'
    world (``env_cfg``), on the view that task gives of it.

    Raises:
        ConfigError: The teacher cannot act in ``task`` (named).
    """
    world = teacher.cfg.env if teacher.task == task else env_cfg
    return evaluate_teacher(teacher, task, world, episodes, seeds)


def with_teacher(result: ChunkEvalResult, teacher: str | None, task: str, env_cfg: Any, device: str) -> str | None:
    """Evaluate the PPO teacher a student's demonstrations name (``teacher``, :func:`teacher_folder`) on ``result``'s
    episodes into ``result.teacher`` (:func:`teacher_beside`); nothing where they name no run folder that is here.

    Returns:
        ``None``, or a one-line note where the teacher the demonstrations name could not be evaluated (the student's
        evaluation stands without it).
    """
    folder = teacher_folder(teacher)
    if folder is None:  # a scripted expert, or a run that is not on this machine
        return None
    from robot_rl.runs.ppo import PPORun

    per_seed = result.episodes // max(len(result.seeds), 1)
    try:
        run = PPORun.load(folder, device)
        result.teacher = teacher_beside(run, task, env_cfg, per_seed, result.seeds)
    except (CheckpointError, ConfigError) as exc:
        return f"teacher not evaluated beside the student: {exc}"
    result.teacher_run = str(folder)
    return None


def bc_config(plain: dict[str, Any]) -> BCConfig:
    """A saved behaviour-cloning config; the ``policy`` section of the earlier flat format (every kind's keys) is
    read as its kind's."""
    data = dict(plain)
    data["policy"] = student_config(data.get("policy"), legacy=True)
    policy = data.pop("policy")
    cfg = from_dict(BCConfig, data)
    cfg.policy = policy
    return cfg


def read_bc_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a behaviour-cloning checkpoint, naming what is wrong.

    Raises:
        CheckpointError: Missing, unreadable, or not a behaviour-cloning checkpoint.
    """
    if not path.parent.is_dir():
        raise CheckpointError(f"run folder '{path.parent}' does not exist")
    state = read_any_checkpoint(path, device)
    if state.get("format") != BC_FORMAT:
        raise CheckpointError(f"'{path}' is a PPO checkpoint, not a behaviour-cloning one")
    for key in ("config", "dims", "model", "step"):
        if key not in state:
            raise CheckpointError(f"checkpoint '{path}' is damaged: '{key}' is missing")
    return state


def typed_env(task: str, env: Any) -> Any:
    """The task config of the demonstrations, typed: the one they record, else (recorded runs, demonstrations made
    elsewhere) the task's defaults; ``None`` without a task."""
    if not task:
        return None
    from sim.registry import get_task

    return from_dict(get_task(task).config_cls, {} if env is None else env, "env")


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


def task_instructions(task: str, env_cfg: Any) -> list[str]:
    """The instruction texts task ``task`` gives in config ``env_cfg`` (empty: no task, or one without language)."""
    if not task or env_cfg is None:
        return []
    from sim.registry import make

    env = make(task, 1, "cpu", env_cfg)
    try:
        return list(env.instructions)
    finally:
        env.close()


def execution_record(spec: ChunkSpec, timing: RealTime | None = None) -> dict[str, Any]:
    """How a student's chunks were executed in an evaluation (``execution`` of its ``eval.yaml`` and
    ``sim2sim_<simulator>.yaml``): two evaluations compare only where these agree."""
    return {
        "action_horizon": spec.action_horizon,
        "ensemble_decay": spec.ensemble_decay,
        "inference_steps": spec.sampler.get("inference_steps"),
        "noise_scale": spec.noise_scale if spec.noise_input else None,
        "schedule": (timing or RealTime()).mode,
        "inference_delay_steps": (timing or RealTime()).delay_steps,
    }


def write_evaluation(
    run_dir: Path,
    result: ChunkEvalResult,
    title: str,
    spec: ChunkSpec | None = None,
    stem: str = "eval",
    instructions: list[str] | None = None,
    timing: RealTime | None = None,
    tasks: list[str] | None = None,
    env_overrides: list[str] | None = None,
) -> dict[str, Any]:
    """``<stem>.yaml`` (the ``env_overrides`` of an evaluation in another world than the demonstrations', pooled
    success, 95 % interval, per seed, how chunks were executed and how the actions moved across their joins, per
    instruction where the episodes carry one, and over the instructions ``tasks`` of a student trained on some of its
    dataset's tasks, under ``tasks``) and ``<stem>.png``; returns what the YAML holds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = {**({"env_overrides": env_overrides} if env_overrides else {}), **result.summary()}
    if spec is not None:
        summary["execution"] = {**execution_record(spec, timing), **result.motion}
    by_instruction = result.success_by("instruction")
    if by_instruction:
        texts = instructions or []
        summary["per_instruction"] = [
            {"instruction": texts[i] if i < len(texts) else i, "success_rate": won / n, "episodes": n}
            for i, (won, n) in sorted(by_instruction.items())
        ]
    own = result.on_instructions(instructions or [], tasks) if tasks else None
    if own is not None:
        summary["tasks"] = own
    atomic_write_text(run_dir / f"{stem}.yaml", yaml.safe_dump(summary, sort_keys=False))
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
    save_png(fig, run_dir / f"{stem}.png")
    plt.close(fig)
    return summary
