"""Demonstrations from a trained PPO teacher: roll it out in the batched simulator and write a dataset.

A scripted expert (``sim.tasks.panda.experts``) can stand in for the PPO teacher where one exists. The teacher
acts on its own observation groups (its actor reads only onboard ``policy`` observations, its
critic's privileged state is not needed to act); what is *recorded* is what the student will have on the robot:
the ``policy`` observation group as the deployment contract lays it out, and the teacher's action in normalised
units. Randomisation stays on, so the demonstrations cover the training distribution of the teacher.

Optionally, DART-style (Laskey et al. 2017), the executed action is the teacher's plus Gaussian noise while the
recorded label stays the teacher's clean action: the student then sees how the teacher recovers from small
deviations.

DAgger-style (Ross et al. 2011), a trained state-only student drives instead (``student``; its own execution, plus
the DART noise if asked) and the teacher labels every state the student visits with what it would have done; every
episode is kept, failures included (where the student went wrong is what it must learn). ``include`` first copies a
dataset's episodes (the demonstrations the student learned from) into the new one: the aggregate to train on.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

import sim
from robot_rl.config import TrainConfig, load_config, task_defaults
from robot_rl.evaluate import PolicyFn, pick
from robot_rl.imitation.dataset import (
    Dataset,
    DatasetError,
    DatasetWriter,
    Episode,
    encode_image,
    load_dataset,
    robot_type,
    state_names,
)
from robot_rl.imitation.evaluate import ChunkActor, env_instructions
from robot_rl.imitation.merge import describe_differences, recorded_world, world_differences
from robot_rl.logger import interactive
from robot_rl.runs.bc import BCRun
from robot_rl.runs.ppo import PPORun
from sim.rendering import CameraRenderer, RenderError, VisualRandomization
from sim.tasks.base import CALIBRATED_VIEW, BatchedTask
from sim.typed_config import ConfigError, to_dict
from sim.vec_env import TaskConfigError

MAX_ATTEMPT_FACTOR = 20
"""Collection gives up after ``MAX_ATTEMPT_FACTOR * episodes`` attempted episodes (a teacher that rarely succeeds)."""


@dataclass
class CollectSummary:
    """What a collection produced.

    Attributes:
        out: Dataset folder.
        kept: Episodes written.
        attempted: Episodes rolled out.
        successes: Successful episodes among those attempted.
        frames: Frames written.
        driver: Who acted: ``teacher``, or ``student`` (DAgger: the teacher only labelled).
        included: Episodes copied from an included dataset (counted in ``kept`` and ``frames``).
        bytes: Size of the dataset folder, bytes.
        removed_stale: Staging folders of killed collections of the same dataset, removed first.
        unbiased: Signals recorded without their per-episode bias (the teacher acted on them biased).
    """

    out: Path
    kept: int
    attempted: int
    successes: int
    frames: int
    bytes: int
    removed_stale: int = 0
    driver: str = "teacher"
    included: int = 0
    unbiased: tuple[str, ...] = ()

    @property
    def success_rate(self) -> float:
        """Teacher success over attempted episodes."""
        return self.successes / max(self.attempted, 1)

    def lines(self) -> list[str]:
        """Readable summary."""
        copied = f" and {self.included} copied" if self.included else ""
        return (
            [
                f"dataset: {self.out}",
                f"episodes kept: {self.kept - self.included} of {self.attempted} rolled out{copied} "
                f"({self.driver} success {self.success_rate:.1%}, {self.successes} successful)",
                f"frames: {self.frames:,}   size: {self.bytes / 1e6:.2f} MB",
            ]
            + ([f"recorded without their per-episode bias: {', '.join(self.unbiased)}"] if self.unbiased else [])
            + ([f"removed {self.removed_stale} staging folder(s) of killed collections"] if self.removed_stale else [])
        )


STUDENT_VIEW = ["policy"]
"""The observation groups a dataset records: the robot's onboard sensors (the deployment contract's layout), whatever
groups the teacher's actor reads (a privileged teacher reads the critic's state)."""


SHARED_NOT_INHERITED = ("noise", "reward_scales")
"""Env settings a teacher of another task does not carry into the collection world: their names are each task's own
(sensor signals, reward terms)."""


def teacher_world(teacher: PPORun, task: str, overrides: tuple[str, ...] = ()) -> TrainConfig:
    """The world a PPO teacher of another task collects ``task``'s demonstrations in: ``task``'s defaults, with the
    teacher's values of every env setting the two tasks' configs share (the control period, command delay, latency,
    energy tank, gripper mapping and randomisation it was trained with) except :data:`SHARED_NOT_INHERITED`, then
    ``overrides`` (``env.KEY=VALUE``).

    Raises:
        ConfigError: A bad override, or an inherited value ``task`` refuses (named).
    """
    world = to_dict(task_defaults(task, [f"device={teacher.cfg.device}"]))
    own = to_dict(teacher.cfg.env)
    shared = {f.name for f in fields(teacher.cfg.env)} & set(world["env"]) - set(SHARED_NOT_INHERITED)
    world["env"].update({k: own[k] for k in sorted(shared)})
    name = f"task '{task}' with the env settings of teacher '{teacher.run_dir}'"
    try:
        return load_config(None, None, list(overrides), base=world, base_name=name)
    except ConfigError as exc:  # say which world: the task's, with what the teacher brought into it
        raise ConfigError(f"{name}: {exc}") from None


def _check_student(student: BCRun, task: str, obs_dim: int) -> None:
    """Refuse a DAgger student that cannot drive ``task`` (``obs_dim`` onboard inputs, no cameras), by name.

    Raises:
        DatasetError: another task, another input width, or cameras.
    """
    if student.task != task or student.policy.cameras or student.policy.obs_dim != obs_dim:
        raise DatasetError(
            f"student '{student.run_dir}' ({student.task or 'foreign data'}, {student.policy.obs_dim} inputs"
            f"{', cameras' if student.policy.cameras else ''}) cannot drive {task} for this teacher "
            f"({obs_dim} onboard inputs, no cameras)"
        )


def _included(include: Path, task: str, layout: list[str], unbiased: tuple[str, ...], world: dict[str, Any]) -> Dataset:
    """The dataset ``include`` names, refused unless it records ``task`` in ``layout`` (state value names) with the
    same ``unbiased`` signals, in ``world`` (the env config this collection records).

    Raises:
        DatasetError: unreadable, another task or layout, other unbiased signals, or another world (the settings
            that differ named; ``robot-rl dataset merge`` joins datasets of different worlds, saying which one the
            result records).
    """
    base = load_dataset(include)
    names = list(base.info["features"]["observation.state"]["names"])
    if base.robot_rl.get("task") != task or names != layout:
        raise DatasetError(
            f"dataset '{include}' ({base.robot_rl.get('task')}, {len(names)} state values) does not fit "
            f"{task} ({len(layout)} state values in the teacher's layout)"
        )
    theirs = base.robot_rl.get("unbiased", [])
    if not isinstance(theirs, list) or sorted(map(str, theirs)) != sorted(unbiased):
        raise DatasetError(
            f"dataset '{include}' was recorded with --unbiased {theirs or 'none'}, this collection with "
            f"{list(unbiased) or 'none'}: a student learns from one kind of sensor"
        )
    theirs_env = base.robot_rl.get("env")
    if theirs_env is not None:
        theirs_env = recorded_world(base, task)
    if theirs_env is not None and (diffs := world_differences({str(include): theirs_env, "this collection": world})):
        raise DatasetError(
            f"dataset '{include}' was recorded in another world than this collection: {describe_differences(diffs)} "
            "(robot-rl dataset merge joins datasets of different worlds and says which one the result records)"
        )
    return base


def collect(
    teacher: PPORun | str,
    episodes: int,
    out: Path,
    num_envs: int = 256,
    seed: int = 0,
    keep_failed: bool = False,
    action_noise: float = 0.0,
    quiet: bool = False,
    device: str = "cpu",
    cameras: tuple[str, ...] = (),
    image_size: int = 96,
    visual: VisualRandomization | None = None,
    student: BCRun | None = None,
    include: Path | None = None,
    unbiased: tuple[str, ...] = (),
    env_overrides: tuple[str, ...] = (),
    task: str | None = None,
) -> CollectSummary:
    """Roll out ``teacher`` until ``episodes`` episodes are kept and write them to ``out``.

    Args:
        teacher: Trained PPO run (its task, env config and deterministic actor; see ``task``), or the name of a task
            with a scripted expert (the task's ``TaskSpec.expert``; the task's default config).
        episodes: Episodes to keep.
        out: New dataset folder (must not exist).
        num_envs: Parallel worlds.
        seed: Seed of the starts and randomisation.
        keep_failed: Also keep unsuccessful episodes.
        action_noise: Standard deviation of Gaussian noise added to executed actions (normalised units).
        quiet: No progress bar.
        device: Torch device of a scripted expert's simulation (a PPO teacher's run says its own).
        cameras: Cameras of the task's MuJoCo model to render offscreen into ``observation.images.<camera>``
            (:class:`~sim.rendering.CameraRenderer`); each frame shows the state its observation was taken in.
        image_size: Height and width of rendered images, pixels.
        visual: Visual randomisation of the rendered images, drawn anew for every episode (``None``: none).
        student: DAgger: this state-only student (of the same task and observation layout) drives; the teacher only
            labels; every episode is kept.
        include: A dataset of the same task and layout whose episodes are copied in first (before ``episodes`` new
            ones).
        unbiased: Onboard signals the student sees without their per-episode bias (``noise.bias_std``; e.g.
            ``object_pos``: a calibrated camera), while the teacher acts on its biased view: the recorded observations
            are :data:`~sim.tasks.base.CALIBRATED_VIEW`, and the dataset's env config (where students are evaluated)
            sets those biases to zero.
        env_overrides: ``env.KEY=VALUE`` settings of a scripted expert's world (the task's default config
            otherwise) or of a teacher of another task's (:func:`teacher_world`); the dataset records the env config
            it was collected in. A PPO teacher of the task itself collects in the world it was trained in.
        task: The task to collect in when the PPO teacher was trained on another, one whose onboard observation
            ``task`` gives (:attr:`~sim.tasks.base.BatchedTask.task_views`; e.g. a ``panda-lift`` teacher in
            ``panda-multitask``): it acts on that view in :func:`teacher_world`. ``None``: the teacher's task.

    Raises:
        DatasetError: ``out`` exists, the teacher kept no episode in ``MAX_ATTEMPT_FACTOR * episodes`` tries
            (nothing is written then), the student or included dataset does not fit the teacher's task and
            observation layout (named), a name in ``unbiased`` carries no per-episode bias in this task, a teacher
            of another task cannot act in ``task`` (:meth:`PPORun.act_in`), or ``env_overrides`` are given for a
            teacher's own task.
        ConfigError: A bad ``env_overrides`` item, or a teacher's setting ``task`` refuses (named).
    """
    expert_cls = None
    foreign = isinstance(teacher, PPORun) and task is not None and task != teacher.task  # a teacher of another task
    if isinstance(teacher, str):
        cfg = task_defaults(teacher, [f"device={device}", *env_overrides])
        expert_cls = sim.get_task(teacher).expert_cls()
        teacher_name = f"scripted expert ({expert_cls.__name__})"
    elif foreign:
        assert task is not None
        cfg = teacher_world(teacher, task, env_overrides)
    elif env_overrides:
        raise DatasetError("a PPO teacher collects in the world it was trained in; env settings apply to others")
    else:
        cfg = teacher.cfg
    if isinstance(teacher, PPORun):
        teacher_name = str(teacher.run_dir)  # the run folder (a teacher of another task too: its task is in the run)
    device_ = torch.device(cfg.device)
    env = sim.make(cfg.task, num_envs, device_, cfg.env)
    # the observation groups the teacher's actor reads in this world (a foreign teacher: the task's view of its own)
    acts_on = cfg.policy.actor_obs
    teacher_act: PolicyFn | None = None
    if isinstance(teacher, PPORun):
        try:
            acts_on = teacher.act_in(env) if foreign else acts_on
            teacher_act = teacher.policy_in(env, acts_on)
        except BaseException as exc:
            env.close()
            if isinstance(exc, ConfigError):
                raise DatasetError(str(exc)) from None
            raise
    recorded = STUDENT_VIEW
    contract = env.contract(STUDENT_VIEW)  # the recorded layout; a privileged teacher acts on its own groups
    student_cfg = cfg.env
    if unbiased:
        try:
            if not isinstance(env, BatchedTask):
                raise TaskConfigError(f"{cfg.task} has no per-episode sensor biases to leave out")
            env.add_calibrated_view(unbiased)
        except TaskConfigError as exc:
            env.close()
            raise DatasetError(f"--unbiased: {exc}") from None
        recorded = [CALIBRATED_VIEW]
        student_cfg = copy.deepcopy(cfg.env)  # the student's sensors: where it is evaluated, what its contract says
        student_cfg.noise.bias_std.update(dict.fromkeys(unbiased, 0.0))
        view = sim.make(cfg.task, 1, device_, student_cfg)
        contract = view.contract(STUDENT_VIEW)
        view.close()
    student_env = to_dict(student_cfg)
    expert = expert_cls(env) if expert_cls is not None else None
    layout = state_names(contract)
    extra = {
        "task": cfg.task,
        "teacher": teacher_name,
        "teacher_kind": "scripted" if expert_cls is not None else "ppo",  # a reactive policy: see train_bc
        "obs_groups": STUDENT_VIEW,
        "teacher_obs_groups": acts_on,
        "unbiased": list(unbiased),
        "env": student_env,
        "seed": seed,
        "action_noise": action_noise,
        "keep_failed": keep_failed,
        "contract": contract.to_dict(),
        "action_units": "normalised [-1, 1]; the contract's action section maps them to robot commands",
    }
    driver: ChunkActor | None = None
    try:  # nothing is written yet: a refusal closes the simulation it opened
        if student is not None:
            _check_student(student, cfg.task, contract.obs_dim)
            keep_failed = True
            extra["dagger"] = {"student": str(student.run_dir), "execution": asdict(student.spec())}
        base = _included(include, cfg.task, layout, unbiased, student_env) if include is not None else None
        if base is not None:
            extra["included"] = {"dataset": str(include), "episodes": len(base.episodes)}
        shape = (image_size, image_size)
        camera = CameraRenderer(env, dict.fromkeys(cameras, shape), visual, seed) if cameras else None
    except RenderError as exc:
        env.close()
        raise DatasetError(str(exc)) from None
    except BaseException:
        env.close()
        raise
    if camera is not None:
        extra["cameras"] = camera.mounts()
        extra["visual_randomization"] = None if visual is None else asdict(visual)
    writer = DatasetWriter(
        out, 1.0 / env.dt, layout, list(contract.action.names), robot_type(contract), extra,
        {c: (image_size, image_size) for c in cameras},
    )  # fmt: skip
    images: list[dict[str, list[bytes]]] = [{c: [] for c in cameras} for _ in range(num_envs)]
    gen = torch.Generator(device=device_).manual_seed(seed)
    length = env.max_episode_length
    obs_buf = np.zeros((num_envs, length, contract.obs_dim), np.float32)
    act_buf = np.zeros((num_envs, length, env.num_actions), np.float32)
    rew_buf = np.zeros((num_envs, length), np.float32)
    step = np.zeros(num_envs, np.int64)
    rows = np.arange(num_envs)
    texts = env.instructions  # a language task's instruction texts; each episode records its world's as its task
    episode_text = [cfg.task] * num_envs
    kept = attempted = successes = frames = included = 0
    bar = tqdm(total=episodes, unit="episode", desc="collect", disable=quiet or not interactive(), dynamic_ncols=True)
    try:
        with writer:
            for ep in base.episodes if base is not None else []:
                writer.add_episode(ep)
                kept += 1
                included += 1
                frames += ep.length
            if student is not None:
                said = env_instructions(env, student.policy)  # a language-conditioned student hears each world's
                driver = ChunkActor(student.policy, student.spec(), student.obs_groups, num_envs, gen, None, said)
            obs = env.reset(seed=seed)
            while kept - included < episodes and attempted < MAX_ATTEMPT_FACTOR * episodes:
                with torch.inference_mode():
                    if expert is not None:
                        action = expert.act()
                    else:
                        assert teacher_act is not None
                        action = teacher_act(obs).clamp(-1.0, 1.0)
                    seen = obs if not unbiased else {**obs, "policy": obs[CALIBRATED_VIEW]}
                    executed = action if driver is None else driver(seen).to(device_).clamp(-1.0, 1.0)
                    if action_noise > 0:
                        noise = torch.randn(action.shape, generator=gen, device=device_)
                        executed = (executed + action_noise * noise).clamp(-1.0, 1.0)
                if texts and (started := np.nonzero(step == 0)[0]).size:
                    ids = env.instruction_ids()
                    assert ids is not None
                    for w, i in zip(started.tolist(), ids.cpu().numpy()[started].tolist(), strict=True):
                        episode_text[w] = texts[i]
                obs_buf[rows, step] = pick(obs, recorded).cpu().numpy()
                if camera is not None:
                    for c, views in camera.render().items():
                        for world, view in enumerate(views):
                            images[world][c].append(encode_image(view))
                act_buf[rows, step] = action.cpu().numpy()
                obs, reward, terminated, truncated, info = env.step(executed)
                rew_buf[rows, step] = reward.cpu().numpy()
                step += 1
                finished = terminated | truncated
                done = finished.cpu().numpy()
                if not done.any():
                    continue
                if expert is not None:
                    expert.reset(finished)
                if driver is not None:
                    driver.reset(done)
                if camera is not None:
                    camera.redraw(np.nonzero(done)[0])
                assert info.success is not None
                success = info.success.cpu().numpy()
                for i in np.nonzero(done)[0]:
                    attempted += 1
                    successes += int(success[i])
                    if (success[i] or keep_failed) and kept - included < episodes:
                        n = int(step[i])
                        flags = np.zeros(n, bool)
                        flags[-1] = bool(success[i])
                        ep = Episode(
                            obs_buf[i, :n].copy(),
                            act_buf[i, :n].copy(),
                            rew_buf[i, :n].copy(),
                            flags,
                            episode_text[i],
                            {c: list(v) for c, v in images[i].items()},
                        )
                        writer.add_episode(ep)
                        kept += 1
                        frames += n
                        bar.update(1)
                    step[i] = 0
                    images[i] = {c: [] for c in cameras}
                bar.set_postfix({"tried": attempted, "teacher success": f"{successes / attempted:.0%}"}, refresh=False)
            if kept == 0:
                raise DatasetError(
                    f"the teacher succeeded in none of {attempted} episodes; nothing was written "
                    "(use --keep-failed to record them anyway)"
                )
            writer.close()
    finally:
        bar.close()
        if camera is not None:
            camera.close()
        env.close()
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    who = "teacher" if driver is None else "student"
    return CollectSummary(
        out, kept, attempted, successes, frames, size, writer.removed_stale, who, included, tuple(unbiased)
    )


def summary_dict(summary: CollectSummary) -> dict[str, object]:
    """Plain data of a summary (for YAML)."""
    d = asdict(summary)
    d["out"] = str(summary.out)
    d["success_rate"] = summary.success_rate
    return d
