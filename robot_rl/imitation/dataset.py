"""Demonstration datasets on disk: LeRobot-style Parquet frames plus JSON metadata (see ``docs/datasets.md``).

Layout of a dataset folder (LeRobot's v2 layout, state-based features)::

    DIR/
      meta/info.json          format, fps, robot_type, features {name: {dtype, shape, names}}, totals, data_path,
                              and a "robot_rl" section (task, teacher, the deployment contract of the observation)
      meta/episodes.jsonl     one line per episode: episode_index, length, tasks, success
      meta/tasks.jsonl        one line per task instruction: task_index, task
      meta/stats.json         per numeric feature: min, max, mean, std (lists of the feature's width)
      data/chunk-000/episode_000000.parquet   one file per episode, chunks of 1000 episodes

Columns of every episode file (one row per control step ``k``)::

    index int64 (global frame) | episode_index int64 | frame_index int64 (k) | timestamp float32 (k / fps, s) |
    task_index int64 | observation.state fixed_size_list<float32>[D_o] | action fixed_size_list<float32>[D_a] |
    next.reward float32 | next.done bool | next.success bool

Optional camera images: ``observation.images.<camera>`` struct<bytes: binary (PNG), path: string> per frame, feature
dtype ``image`` with shape ``[H, W, 3]`` (how LeRobot / Hugging Face ``datasets`` store images in Parquet).

``observation.state`` is what the robot's own sensors give at step ``k`` (the contract's observation terms, in
order); ``action`` is what the policy commanded at step ``k`` in the contract's normalised units ``[-1, 1]`` (the
contract's ``action`` section maps it to robot commands). Readable and writable with pyarrow alone.

Writing is all or nothing: :class:`DatasetWriter` stages everything in a hidden folder beside ``DIR``
(``.DIR.<pid>-<random>.partial``) and renames it into place at :meth:`DatasetWriter.close`; an existing ``DIR`` is
never touched. A staging folder left by a writer that was killed (its process is gone) is removed by the next writer
of the same ``DIR``.

Reading trusts nothing in the folder (:func:`load_dataset`): every metadata field is checked for its type and range,
episode indices must be unique, ``data_path`` must stay inside ``DIR``, and images must decode; each problem is one
:class:`DatasetError` naming the file, the episode and the field.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FORMAT = "robot-rl-lerobot-v2"
CODEBASE_VERSION = "v2.1"
CHUNK_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
STATE = "observation.state"
ACTION = "action"
IMAGES = "observation.images."
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
INDEX_COLUMNS: dict[str, pa.DataType] = {
    "index": pa.int64(),
    "episode_index": pa.int64(),
    "frame_index": pa.int64(),
    "timestamp": pa.float32(),
    "task_index": pa.int64(),
}
SCALAR_COLUMNS: dict[str, pa.DataType] = {
    "next.reward": pa.float32(),
    "next.done": pa.bool_(),
    "next.success": pa.bool_(),
}
TIMESTAMP_TOLERANCE_S = 1e-4


class DatasetError(ValueError):
    """A dataset folder is missing, corrupt or inconsistent; the message names the file, episode and column."""


@dataclass
class Episode:
    """One demonstration, ``T`` control steps.

    Attributes:
        state: ``observation.state`` ``[T, D_o]`` float32.
        action: ``action`` ``[T, D_a]`` float32 (normalised units).
        reward: ``next.reward`` ``[T]``.
        success: ``next.success`` ``[T]`` bool (the task's success flag after each step).
        task: Task instruction (for language-conditioned policies; the task name otherwise).
        images: Camera images per camera name, ``T`` PNG-encoded frames each (not decoded; see
            :func:`decode_image`).
    """

    state: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    success: np.ndarray
    task: str = ""
    images: dict[str, list[bytes]] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Number of frames ``T``."""
        return int(self.state.shape[0])


def state_names(contract: Any) -> list[str]:
    """One name per ``observation.state`` value of a contract's policy input: ``term[i]`` (``term`` for a scalar),
    repeated per history step, in the input's order."""
    return [
        f"{t.name}[{i}]" if t.size > 1 else t.name
        for t in contract.observation
        for _ in range(t.history)
        for i in range(t.size)
    ]


def robot_type(contract: Any) -> str:
    """LeRobot's ``robot_type``: the contract's ``extra.robot`` (a mapping's ``name``), else the task's first word."""
    fact = contract.extra.get("robot")
    return str(fact.get("name") if isinstance(fact, dict) else fact or contract.task.split("-")[0])


def _feature(names: list[str]) -> dict[str, Any]:
    return {"dtype": "float32", "shape": [len(names)], "names": names}


class DatasetWriter:
    """Write episodes into a new dataset folder (atomically: see the module docstring).

    Args:
        root: Destination folder; must not exist yet (or be an empty folder).
        fps: Control rate, Hz (``1 / control period``).
        state_names: One name per ``observation.state`` value.
        action_names: One name per ``action`` value.
        robot_type: Robot name (LeRobot's ``robot_type``), e.g. ``franka_panda``.
        extra: Extra metadata stored under ``info["robot_rl"]`` (task, teacher, contract, ...).
        cameras: Camera name -> image ``(height, width)`` of the ``observation.images.<name>`` features.

    Raises:
        DatasetError: ``root`` exists and is not an empty folder, or its parent is not writable.
    """

    def __init__(
        self,
        root: str | Path,
        fps: float,
        state_names: list[str],
        action_names: list[str],
        robot_type: str = "",
        extra: Mapping[str, Any] | None = None,
        cameras: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        self.root = Path(root)
        if self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir())):
            raise DatasetError(f"'{self.root}' already exists and is not an empty folder; choose a new --out")
        if not (math.isfinite(fps) and fps > 0):
            raise DatasetError(f"fps must be finite and > 0, got {fps}")
        parent = self.root.parent
        parent.mkdir(parents=True, exist_ok=True)
        if not os.access(parent, os.W_OK):
            raise DatasetError(f"cannot write into '{parent}'")
        self.removed_stale = remove_stale_staging(self.root)
        self._stage = parent / f".{self.root.name}.{os.getpid()}-{secrets.token_hex(4)}.partial"
        (self._stage / "meta").mkdir(parents=True)
        self.fps = float(fps)
        self.features = {STATE: _feature(state_names), ACTION: _feature(action_names)}
        self.cameras = dict(cameras or {})
        for cam, (h, w) in self.cameras.items():
            self.features[IMAGES + cam] = {
                "dtype": "image",
                "shape": [h, w, 3],
                "names": ["height", "width", "channel"],
            }
        self.robot_type = robot_type
        self.extra = dict(extra or {})
        self._episodes: list[dict[str, Any]] = []
        self._tasks: dict[str, int] = {}
        self._frames = 0
        self._sums: dict[str, list[np.ndarray]] = {STATE: [], ACTION: []}

    def add_episode(self, episode: Episode) -> None:
        """Append one episode (validated: shapes, finiteness).

        Raises:
            DatasetError: Wrong shapes or non-finite values (naming the column); nothing is added.
        """
        n = episode.length
        if n < 1:
            raise DatasetError("an episode needs at least one frame")
        for name, arr in ((STATE, episode.state), (ACTION, episode.action)):
            width = self.features[name]["shape"][0]
            if arr.ndim != 2 or arr.shape != (n, width):
                raise DatasetError(f"column '{name}' must be [{n}, {width}], got {list(arr.shape)}")
            if not np.isfinite(arr).all():
                raise DatasetError(f"column '{name}' holds non-finite values")
        if set(episode.images) != set(self.cameras) or any(len(v) != n for v in episode.images.values()):
            raise DatasetError(
                f"the episode has images {sorted(episode.images)} ({[len(v) for v in episode.images.values()]} "
                f"frames), the dataset declares cameras {sorted(self.cameras)} with {n} frames each"
            )
        index = len(self._episodes)
        task_index = self._tasks.setdefault(episode.task, len(self._tasks))
        frame = np.arange(n, dtype=np.int64)
        columns: dict[str, pa.Array] = {
            "index": pa.array(self._frames + frame),
            "episode_index": pa.array(np.full(n, index, dtype=np.int64)),
            "frame_index": pa.array(frame),
            "timestamp": pa.array((frame / self.fps).astype(np.float32)),
            "task_index": pa.array(np.full(n, task_index, dtype=np.int64)),
            STATE: _fixed_list(episode.state),
            ACTION: _fixed_list(episode.action),
            "next.reward": pa.array(np.asarray(episode.reward, dtype=np.float32)),
            "next.done": pa.array(frame == n - 1),
            "next.success": pa.array(np.asarray(episode.success, dtype=bool)),
            **{
                IMAGES + cam: pa.array([{"bytes": b, "path": None} for b in frames], type=IMAGE_TYPE)
                for cam, frames in episode.images.items()
            },
        }
        path = self._stage / DATA_PATH.format(episode_chunk=index // CHUNK_SIZE, episode_index=index)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), path)
        self._episodes.append(
            {"episode_index": index, "length": n, "tasks": [episode.task], "success": bool(episode.success[-1])}
        )
        self._frames += n
        self._sums[STATE].append(episode.state.astype(np.float64))
        self._sums[ACTION].append(episode.action.astype(np.float64))

    def close(self) -> Path:
        """Write the metadata and move the dataset into place; returns its folder.

        Raises:
            DatasetError: No episode was added (nothing is written).
        """
        if not self._episodes:
            self.abort()
            raise DatasetError(f"no episode to write into '{self.root}'")
        meta = self._stage / "meta"
        info = {
            "format": FORMAT,
            "codebase_version": CODEBASE_VERSION,
            "robot_type": self.robot_type,
            "fps": self.fps,
            "total_episodes": len(self._episodes),
            "total_frames": self._frames,
            "total_tasks": len(self._tasks),
            "chunks_size": CHUNK_SIZE,
            "data_path": DATA_PATH,
            "features": {
                **{k: {"dtype": str(v), "shape": [1], "names": None} for k, v in INDEX_COLUMNS.items()},
                **self.features,
                **{k: {"dtype": str(v), "shape": [1], "names": None} for k, v in SCALAR_COLUMNS.items()},
            },
            "robot_rl": self.extra,
        }
        stats = {}
        for name, parts in self._sums.items():
            x = np.concatenate(parts)
            stats[name] = {
                "min": x.min(0).tolist(),
                "max": x.max(0).tolist(),
                "mean": x.mean(0).tolist(),
                "std": x.std(0).tolist(),
            }
        (meta / "info.json").write_text(json.dumps(info, indent=2))
        (meta / "stats.json").write_text(json.dumps(stats, indent=2))
        (meta / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in self._episodes))
        tasks = "".join(json.dumps({"task_index": i, "task": t}) + "\n" for t, i in self._tasks.items())
        (meta / "tasks.jsonl").write_text(tasks)
        if self.root.exists():  # an empty folder (checked at construction)
            self.root.rmdir()
        os.replace(self._stage, self.root)
        return self.root

    def abort(self) -> None:
        """Remove the staged files; the destination is left as it was."""
        shutil.rmtree(self._stage, ignore_errors=True)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None:
            self.abort()


def remove_stale_staging(root: Path) -> int:
    """Remove the staging folders of writers of ``root`` whose process is gone (killed: SIGKILL, a power cut);
    returns how many. Folders of a running writer, and anything not named like a staging folder, are left alone."""
    removed = 0
    for stage in root.parent.glob(f".{glob_escape(root.name)}.*.partial"):
        pid = stage.name[len(root.name) + 2 :].split("-", 1)[0]
        if not (pid.isdigit() and stage.is_dir() and not stage.is_symlink()) or _alive(int(pid)):
            continue
        shutil.rmtree(stage, ignore_errors=True)
        removed += 1
    return removed


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters escaped."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _fixed_list(x: np.ndarray) -> pa.FixedSizeListArray:
    flat = pa.array(np.ascontiguousarray(x, dtype=np.float32).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(x.shape[1]))


@dataclass
class Dataset:
    """A loaded, validated dataset (all frames in memory).

    Attributes:
        root: Its folder.
        info: ``meta/info.json``.
        stats: ``meta/stats.json``.
        episodes: The episodes in index order.
    """

    root: Path
    info: dict[str, Any]
    stats: dict[str, Any]
    episodes: list[Episode] = field(default_factory=list)

    @property
    def fps(self) -> float:
        """Control rate, Hz."""
        return float(self.info["fps"])

    @property
    def num_frames(self) -> int:
        """Total frames."""
        return sum(e.length for e in self.episodes)

    @property
    def state_dim(self) -> int:
        """Width of ``observation.state``."""
        return int(self.info["features"][STATE]["shape"][0])

    @property
    def action_dim(self) -> int:
        """Width of ``action``."""
        return int(self.info["features"][ACTION]["shape"][0])

    @property
    def cameras(self) -> dict[str, tuple[int, int]]:
        """Camera name -> image ``(height, width)`` of its ``observation.images.<camera>`` feature."""
        feats = self.info["features"]
        return {
            k.removeprefix(IMAGES): (int(v["shape"][0]), int(v["shape"][1]))
            for k, v in feats.items()
            if k.startswith(IMAGES)
        }

    @property
    def robot_rl(self) -> dict[str, Any]:
        """The ``robot_rl`` metadata section (task, contract, ...); empty for datasets made elsewhere."""
        extra = self.info.get("robot_rl")
        return extra if isinstance(extra, dict) else {}


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise DatasetError(f"'{path}' is missing")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"'{path}' is not valid JSON ({exc})") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DatasetError(f"'{path}' is missing")
    rows = []
    for k, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"'{path}' line {k + 1} is not valid JSON ({exc})") from None
    return rows


def load_dataset(root: str | Path, fps: float | None = None) -> Dataset:
    """Read and validate a dataset folder.

    Args:
        root: Dataset folder.
        fps: Expected control rate, Hz (``None``: any); a different ``info.json`` rate is refused.

    Raises:
        DatasetError: Missing files or columns, metadata of the wrong type or range, duplicate episode indices, a
            ``data_path`` outside the folder, wrong dtypes or widths, ragged or non-contiguous episodes, non-finite
            values, timestamps that disagree with ``fps``; the message names the file, episode and field.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"dataset folder '{root}' does not exist" if not root.exists() else f"'{root}' is a file")
    where = root / "meta" / "info.json"
    info = _read_json(where)
    if not isinstance(info, dict):
        raise DatasetError(f"'{where}' must hold a JSON object")
    for key in ("fps", "features", "total_episodes", "data_path"):
        if key not in info:
            raise DatasetError(f"'{where}' has no '{key}'")
    rate = info["fps"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise DatasetError(f"'{where}': fps must be a positive number, got {rate!r}")
    if fps is not None and abs(rate - fps) > 1e-6 * fps:
        raise DatasetError(f"dataset '{root}' was recorded at {rate} fps, but {fps} fps is expected")
    features = info["features"]
    if not isinstance(features, dict):
        raise DatasetError(f"'{where}': features must be an object of feature name -> {{dtype, shape}}")
    widths = {name: _shape(features.get(name), f"'{where}': features.{name}", 1)[0] for name in (STATE, ACTION)}
    cameras = {k.removeprefix(IMAGES): _shape(v, f"'{where}': features.{k}", 3) for k, v in features.items()
               if k.startswith(IMAGES)}  # fmt: skip
    total = _count(info["total_episodes"], f"'{where}': total_episodes", 0)
    chunk = _count(info.get("chunks_size", CHUNK_SIZE), f"'{where}': chunks_size", 1)
    template = _data_path(info["data_path"], root, f"'{where}': data_path")
    stats = _read_json(root / "meta" / "stats.json")
    meta_episodes = _episode_rows(root / "meta" / "episodes.jsonl")
    tasks = _task_rows(root / "meta" / "tasks.jsonl")
    if len(meta_episodes) != total:
        raise DatasetError(f"info.json says {total} episodes, but episodes.jsonl lists {len(meta_episodes)}")
    episodes = [
        _read_episode(root, template, chunk, e, widths, float(rate), tasks, list(cameras)) for e in meta_episodes
    ]
    return Dataset(root, info, stats if isinstance(stats, dict) else {}, episodes)


def _count(value: Any, where: str, low: int) -> int:
    """An integer ``>= low`` from metadata (``true``, ``1.5`` and ``"3"`` are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise DatasetError(f"{where} must be an integer >= {low}, got {value!r}")
    return value


def _shape(feature: Any, where: str, dims: int) -> tuple[int, ...]:
    """A feature's ``shape``: ``dims`` positive integers."""
    if not isinstance(feature, dict) or not isinstance(feature.get("shape"), list) or len(feature["shape"]) != dims:
        raise DatasetError(f"{where} must be an object with a 'shape' of {dims} integer(s)")
    return tuple(_count(v, f"{where}.shape[{i}]", 1) for i, v in enumerate(feature["shape"]))


def _data_path(template: Any, root: Path, where: str) -> str:
    """The episode file template, with only ``{episode_chunk}`` and ``{episode_index}`` fields, inside ``root``."""
    import string

    if not isinstance(template, str) or not template:
        raise DatasetError(f"{where} must be a path template string, got {template!r}")
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        sample = template.format(episode_chunk=0, episode_index=0)
    except (ValueError, IndexError, KeyError, AttributeError) as exc:
        raise DatasetError(f"{where} '{template}' is not a valid template ({exc})") from None
    if not fields <= {"episode_chunk", "episode_index"} or "episode_index" not in {f.split(":")[0] for f in fields}:
        raise DatasetError(
            f"{where} '{template}' may use {{episode_chunk}} and {{episode_index}} only (and needs the latter)"
        )
    resolved = (root / sample).resolve()
    if Path(sample).is_absolute() or root.resolve() not in resolved.parents:
        raise DatasetError(f"{where} '{template}' leads outside the dataset folder")
    return template


def _episode_rows(path: Path) -> list[dict[str, Any]]:
    """``episodes.jsonl``: objects with a unique integer ``episode_index`` and an integer ``length`` >= 1."""
    rows, seen = _read_jsonl(path), set()
    for k, row in enumerate(rows):
        where = f"'{path}' line {k + 1}"
        if not isinstance(row, dict):
            raise DatasetError(f"{where} must be a JSON object, got {type(row).__name__}")
        index = _count(row.get("episode_index"), f"{where}: episode_index", 0)
        if index in seen:
            raise DatasetError(f"{where}: episode_index {index} is listed twice")
        seen.add(index)
        if "length" in row:
            _count(row["length"], f"{where}: length", 1)
    return rows


def _task_rows(path: Path) -> dict[int, str]:
    """``tasks.jsonl``: task index -> instruction text."""
    out: dict[int, str] = {}
    for k, row in enumerate(_read_jsonl(path)):
        where = f"'{path}' line {k + 1}"
        if not isinstance(row, dict) or not isinstance(row.get("task"), str):
            raise DatasetError(f"{where} must be a JSON object with a text 'task'")
        out[_count(row.get("task_index"), f"{where}: task_index", 0)] = row["task"]
    return out


def _read_episode(
    root: Path,
    template: str,
    chunk: int,
    meta: dict[str, Any],
    widths: dict[str, int],
    fps: float,
    tasks: dict[int, str],
    cameras: list[str],
) -> Episode:
    index = int(meta["episode_index"])  # checked by _episode_rows
    where = f"episode {index}"
    path = root / template.format(episode_chunk=index // chunk, episode_index=index)
    if not path.is_file():
        raise DatasetError(f"{where}: file '{path}' is missing")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{where}: '{path}' is not a readable Parquet file ({exc})") from None
    n = table.num_rows
    if n != int(meta.get("length", n)) or n == 0:
        raise DatasetError(f"{where}: episodes.jsonl says {meta.get('length')} frames, the file holds {n}")
    for name, kind in {**INDEX_COLUMNS, **SCALAR_COLUMNS}.items():
        if name not in table.column_names:
            if name.startswith("next."):
                continue  # optional: datasets from elsewhere may carry no reward or success
            raise DatasetError(f"{where}: column '{name}' is missing from '{path}'")
        col_type = table.schema.field(name).type
        if not _same_kind(col_type, kind):
            raise DatasetError(f"{where}: column '{name}' has dtype {col_type}, expected {kind}")
    arrays = {}
    for name, width in widths.items():
        if name not in table.column_names:
            raise DatasetError(f"{where}: column '{name}' is missing from '{path}'")
        arrays[name] = _matrix(table.column(name), width, f"{where}: column '{name}'")
    frame = table.column("frame_index").to_numpy()
    if not np.array_equal(frame, np.arange(n)):
        raise DatasetError(f"{where}: column 'frame_index' is not 0..{n - 1} in order")
    if not (table.column("episode_index").to_numpy() == index).all():
        raise DatasetError(f"{where}: column 'episode_index' holds other episodes' indices")
    stamps = table.column("timestamp").to_numpy().astype(np.float64)
    if not np.allclose(stamps, frame / fps, atol=TIMESTAMP_TOLERANCE_S, rtol=0):
        k = int(np.argmax(np.abs(stamps - frame / fps) > TIMESTAMP_TOLERANCE_S))
        raise DatasetError(
            f"{where}: column 'timestamp' is {stamps[k]:.6f} s at frame {k}, but {fps} fps gives {k / fps:.6f} s "
            "(fps mismatch or dropped frames)"
        )
    reward = (
        table.column("next.reward").to_numpy().astype(np.float32)
        if "next.reward" in table.column_names
        else np.zeros(n, np.float32)
    )
    success = (
        table.column("next.success").to_numpy(zero_copy_only=False).astype(bool)
        if "next.success" in table.column_names
        else np.zeros(n, bool)
    )
    task = tasks.get(int(table.column("task_index")[0].as_py()), "")
    images = {}
    for cam in cameras:
        name = IMAGES + cam
        if name not in table.column_names:
            raise DatasetError(f"{where}: column '{name}' is missing from '{path}'")
        if not pa.types.is_struct(table.schema.field(name).type):
            raise DatasetError(f"{where}: column '{name}' has dtype {table.schema.field(name).type}, expected image")
        frames = table.column(name).combine_chunks().field("bytes").to_pylist()
        if any(not f for f in frames):
            raise DatasetError(f"{where}: column '{name}' has frames without image bytes")
        images[cam] = frames
    return Episode(arrays[STATE], arrays[ACTION], reward, success, task, images)


def _same_kind(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_floating(expected):
        return pa.types.is_floating(actual)
    if pa.types.is_integer(expected):
        return pa.types.is_integer(actual)
    return bool(actual == expected)


def _matrix(column: pa.ChunkedArray, width: int, where: str) -> np.ndarray:
    """A list column as ``[T, width]`` float32; refuses ragged rows, non-float values and NaN/inf."""
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) or pa.types.is_large_list(kind)):
        raise DatasetError(f"{where} has dtype {kind}, expected a list of float32")
    if not pa.types.is_floating(kind.value_type):
        raise DatasetError(f"{where} holds {kind.value_type} values, expected float32")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if (lengths != width).any():
        k = int(np.argmax(lengths != width))
        raise DatasetError(f"{where} is ragged: frame {k} has {lengths[k]} values, the feature has {width}")
    values = pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.float32)
    out = values.reshape(-1, width)
    if not np.isfinite(out).all():
        k = int(np.argmax(~np.isfinite(out).all(1)))
        raise DatasetError(f"{where} holds non-finite values (first at frame {k})")
    return out


def encode_image(rgb: np.ndarray) -> bytes:
    """PNG bytes of an ``[H, W, 3]`` uint8 image."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def decode_image(png: bytes) -> np.ndarray:
    """An ``[H, W, 3]`` uint8 image from PNG bytes (an ``observation.images.*`` frame)."""
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def decode_frames(episodes: Sequence[Episode], camera: str, size: tuple[int, int]) -> np.ndarray:
    """Every frame of ``camera`` over ``episodes``, decoded: ``uint8 [F, H, W, 3]`` (episodes concatenated).

    Raises:
        DatasetError: An episode has no such camera, or a frame is not ``size`` (the message names the episode).
    """
    out = np.empty((sum(e.length for e in episodes), *size, 3), np.uint8)
    row = 0
    for i, e in enumerate(episodes):
        if camera not in e.images:
            raise DatasetError(f"episode {i} has no images of camera '{camera}' (it has {sorted(e.images) or 'none'})")
        for k, png in enumerate(e.images[camera]):
            try:
                frame = decode_image(png)
            except Exception as exc:  # PIL raises its own types for damaged data
                raise DatasetError(
                    f"episode {i} frame {k}: observation.images.{camera} is not a readable image ({type(exc).__name__})"
                ) from None
            if frame.shape != (*size, 3):
                raise DatasetError(
                    f"episode {i} frame {k}: observation.images.{camera} is {list(frame.shape)}, "
                    f"the dataset declares {[*size, 3]}"
                )
            out[row] = frame
            row += 1
    return out


def episode_statistics(episodes: Iterable[Episode]) -> dict[str, dict[str, np.ndarray]]:
    """Per-feature ``min`` and ``max`` over ``episodes`` (float32 arrays), for normalisers."""
    eps = list(episodes)
    out = {}
    for name, get in ((STATE, lambda e: e.state), (ACTION, lambda e: e.action)):
        x = np.concatenate([get(e) for e in eps])
        out[name] = {"min": x.min(0).astype(np.float32), "max": x.max(0).astype(np.float32)}
    return out
