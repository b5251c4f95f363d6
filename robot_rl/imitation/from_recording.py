"""Recorded runs as a dataset (``robot-rl dataset from-mcap``): what the robot saw and was told becomes demonstrations.

Each recorded control step (:func:`robot_rl_ros.playback.walk`) becomes one frame of the LeRobot-style dataset
(``robot_rl.imitation.dataset``, ``docs/datasets.md``):

- ``observation.state``: the policy input the node built from the step's signals (the contract's observation terms,
  scaled and stacked; ``last_action`` is the previous recorded command), exactly what ``robot-rl collect`` records;
- ``action``: the published command in the contract's normalised units, i.e. after the energy tank and the safety
  layer: what the robot was told to do, which is what a student should learn;
- ``observation.images.<camera>``: each camera's newest image before the command (PNG);
- the task text: the operator's instruction (language policies), else the contract's task.

Episodes end where the node's fault changed (a fault held the robot: those steps are left out) or the node was
activated again (its histories restarted), where the operator's goal pose or instruction changed (a new task), where
a recording ends, and, if asked, where commands pause for longer than ``max_gap_s``. The observation histories
restart where the node's did (at its activations), so every frame's state is what the node fed the policy. A
recording holds no reward and no success flag: frames carry reward 0 and success ``False`` (``robot-rl train-bc``
learns from every frame; keep only the runs you want imitated).

Every recording must have run the same observation and action layout (the first one's contract); one that did not
is refused by name. Writing is all or nothing (:class:`~robot_rl.imitation.dataset.DatasetWriter`): a refused
recording leaves nothing behind, and an existing folder is never touched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from robot_rl_ros.playback import Step, open_recorded_policy, walk
from robot_rl_ros.recording import Log, RecordingError, read_log

from policies.runtime import OnnxPolicy
from policies.runtime.contract import Contract
from policies.runtime.onnx_policy import LAST_ACTION_SIGNAL
from policies.runtime.text import printable
from robot_rl.imitation.dataset import DatasetWriter, Episode, encode_image, robot_type, state_names


@dataclass
class RecordingSummary:
    """What one recording gave.

    Attributes:
        path: The recording.
        frames: Control steps written.
        episodes: Episodes written.
        held: Steps left out: a fault held the robot, or an input had not arrived.
        complete: Whether the file was finished (``False``: cut short, read up to its last whole chunk).
    """

    path: Path
    frames: int
    episodes: int
    held: int
    complete: bool

    def line(self) -> str:
        cut = "" if self.complete else " (not finished: read up to its last flushed chunk)"
        return f"{self.path}: {self.frames} frames in {self.episodes} episodes, {self.held} steps held out{cut}"


def _layout(c: Contract) -> tuple[object, ...]:
    """What makes a frame's state and action mean the same: the task, the observation terms, the action mapping and
    the cameras."""
    cameras = sorted(c.chunk.cameras) if c.chunk is not None else []
    return (c.task, [dataclasses.astuple(t) for t in c.observation], dataclasses.astuple(c.action), cameras)


def _check_layout(path: Path, log: Log, policy: OnnxPolicy, first: OnnxPolicy, first_path: Path) -> None:
    """Refuse a recording whose policy is not the one it recorded (``--model``), or whose layout or control period
    differs from the first recording's.

    Raises:
        RecordingError: Naming the recording and what differs.
    """
    recorded = Contract.from_json(log.meta["contract"])  # checked by read_metadata
    if _layout(recorded) != _layout(policy.contract):
        raise RecordingError(
            f"recording '{path}' ran a policy of another observation or action layout than '{policy.path}' "
            f"({recorded.task}, {recorded.obs_dim} inputs against {policy.contract.task}, {policy.obs_dim}); pass "
            "the policy it ran with --model"
        )
    if _layout(policy.contract) != _layout(first.contract) or policy.control_period_s != first.control_period_s:
        raise RecordingError(
            f"recording '{path}' ran a policy of another layout or rate ({policy.contract.task}, {policy.obs_dim} "
            f"inputs, {policy.num_actions} commands, {policy.control_period_s:g} s) than '{first_path}' "
            f"({first.contract.task}, {first.obs_dim}, {first.num_actions}, {first.control_period_s:g} s); make one "
            "dataset per layout and rate"
        )


def _episodes(policy: OnnxPolicy, steps: list[Step], max_gap_s: float | None, task: str) -> tuple[list[Episode], int]:
    """The episodes of one recording's steps and the number of steps held out.

    The policy inputs are rebuilt step by step as the node built them: the histories and ``last_action`` restart
    where the node's did (at each activation, marked ``restarted``), not at every episode boundary.
    """
    episodes: list[Episode] = []
    frames: list[tuple[Step, np.ndarray, np.ndarray]] = []  # step, state [D_o], action [D_a]
    reads_last = LAST_ACTION_SIGNAL in {t.source for t in policy.contract.observation}
    offset = np.asarray(policy.contract.action.offset, dtype=np.float32)[None]
    start = policy.normalized_action(offset, reference=np.zeros_like(offset))  # an activated node's last_action
    last, held, prev_t = start, 0, None
    policy.reset()

    def close() -> None:
        if frames:
            episodes.append(_episode(frames, task))
            frames.clear()

    for step in steps:
        if step.restarted:
            policy.reset()
            last = start
        if step.signals is None:
            held += 1
            close()
            continue
        paused = prev_t is not None and max_gap_s is not None and (step.t_ns - prev_t) * 1e-9 > max_gap_s
        if step.restarted or step.new_task or paused:
            close()
        obs = policy.observation({**step.signals, LAST_ACTION_SIGNAL: last} if reads_last else step.signals)
        last = policy.normalized_action(step.command, reference=policy.reference(obs))  # the node's next last_action
        frames.append((step, obs[0], last[0]))
        prev_t = step.t_ns
    close()
    return episodes, held


def _episode(frames: list[tuple[Step, np.ndarray, np.ndarray]], task: str) -> Episode:
    """One episode of frames (step, state, action); images PNG-encoded."""
    first = frames[0][0]
    images = {c: [encode_image(step.images[c][0]) for step, _, _ in frames] for c in first.images}
    n = len(frames)
    return Episode(
        np.stack([f[1] for f in frames]), np.stack([f[2] for f in frames]), np.zeros(n, np.float32),
        np.zeros(n, bool), first.instruction or task, images,
    )  # fmt: skip


def recordings_to_dataset(
    recordings: list[Path], out: Path, model: Path | None = None, max_gap_s: float | None = None
) -> tuple[Path, list[RecordingSummary]]:
    """Write ``recordings`` (in order) into the new dataset ``out``; see the module docstring.

    Args:
        recordings: MCAP files written by ``robot-rl deploy --record``.
        out: New dataset folder (must not exist, or be empty).
        model: The policy file the runs used, where the recorded path does not exist here (it must carry the same
            contract).
        max_gap_s: A pause between commands that ends an episode, s (default: pauses do not).

    Returns:
        The dataset folder and one summary per recording.

    Raises:
        RecordingError: A recording is missing, given twice, corrupt, run by another policy than
            ``model``, of another layout or control period than the first, or holds no control step with every
            input (named); nothing is written.
        DatasetError: ``out`` exists and is not an empty folder.
    """
    if not recordings:
        raise RecordingError("no recording given")
    resolved = [p.resolve() for p in recordings]
    twice = sorted({str(p) for p, r in zip(recordings, resolved, strict=True) if resolved.count(r) > 1})
    if twice:
        raise RecordingError(f"recording(s) {twice} given more than once; each run goes into a dataset once")
    first = read_log(recordings[0])
    policy = open_recorded_policy(recordings[0], first, model)
    c = policy.contract
    seen = c.chunk.cameras if c.chunk is not None else {}
    cameras = {name: (int(cam["height"]), int(cam["width"])) for name, cam in seen.items()}
    mounts = {name: dict(cam.get("mount", {})) for name, cam in seen.items()}
    state_contract = dataclasses.replace(c, chunk=None)  # the dataset describes states, not a student's chunks
    extra = {
        "task": c.task,
        "teacher": f"recorded runs of {printable(str(model or first.meta['model_path']))}",
        "obs_groups": ["policy"],
        "contract": state_contract.to_dict(),
        "action_units": "normalised [-1, 1] commands as published (after the energy tank and the safety layer)",
        "recordings": [str(p) for p in recordings],
        **({"cameras": mounts} if mounts else {}),
    }
    summaries: list[RecordingSummary] = []
    fps = 1.0 / policy.control_period_s
    writer = DatasetWriter(out, fps, state_names(c), list(c.action.names), robot_type(c), extra, cameras)
    with writer:
        for path in recordings:
            log = first if path == recordings[0] else read_log(path)
            here = policy if log is first else open_recorded_policy(path, log, model)
            _check_layout(path, log, here, policy, recordings[0])
            episodes, held = _episodes(here, list(walk(path, log, here.contract)), max_gap_s, c.task)
            for episode in episodes:
                writer.add_episode(episode)
            frames = sum(e.length for e in episodes)
            summaries.append(RecordingSummary(path, frames, len(episodes), held, log.complete))
        if not any(s.frames for s in summaries):
            raise RecordingError(
                f"{', '.join(map(str, recordings))}: no control step with every input (held out: "
                f"{sum(s.held for s in summaries)}); nothing was written"
            )
        writer.close()
    return out, summaries
