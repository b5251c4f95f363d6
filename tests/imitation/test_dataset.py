"""The dataset format: round trip, the Parquet layout as documented, every refusal, and training windows."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robot_rl.imitation.dataset import DatasetError, DatasetWriter, Episode, load_dataset
from robot_rl.imitation.train_bc import episodes_of_tasks
from robot_rl.imitation.windows import Windows
from sim.typed_config import ConfigError

FPS = 25.0


def _episode(rng: np.random.Generator, length: int, offset: float = 0.0) -> Episode:
    state = (rng.standard_normal((length, 3)) + offset).astype(np.float32)
    action = np.tanh(rng.standard_normal((length, 2))).astype(np.float32)
    success = np.zeros(length, bool)
    success[-1] = True
    return Episode(state, action, rng.standard_normal(length).astype(np.float32), success, "reach the goal")


def _write(root: Path, lengths: tuple[int, ...] = (5, 7, 4)) -> list[Episode]:
    rng = np.random.default_rng(0)
    episodes = [_episode(rng, n, 10.0 * k) for k, n in enumerate(lengths)]
    with DatasetWriter(root, FPS, ["a", "b", "c"], ["j1", "j2"], "toy", {"task": "toy"}) as w:
        for e in episodes:
            w.add_episode(e)
        w.close()
    return episodes


def test_round_trip(tmp_path: Path) -> None:
    episodes = _write(tmp_path / "ds")
    ds = load_dataset(tmp_path / "ds", fps=FPS)
    assert ds.num_frames == 16 and ds.state_dim == 3 and ds.action_dim == 2 and ds.robot_rl == {"task": "toy"}
    for a, b in zip(episodes, ds.episodes, strict=True):
        np.testing.assert_array_equal(a.state, b.state)
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.success, b.success)
        assert b.task == "reach the goal"
    stats = json.loads((tmp_path / "ds" / "meta" / "stats.json").read_text())
    all_state = np.concatenate([e.state for e in episodes])
    np.testing.assert_allclose(stats["observation.state"]["min"], all_state.min(0), rtol=1e-6)


def test_a_single_task_subset_keeps_the_named_instructions_episodes_in_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    texts = ("lift the red cube", "lift the blue cube", "pick up the red cube", "lift the red cube")
    episodes = [replace(_episode(rng, 3 + k), task=t) for k, t in enumerate(texts)]
    with DatasetWriter(tmp_path / "d", FPS, ["a", "b", "c"], ["j1", "j2"], "toy", {"task": "toy"}) as w:
        for e in episodes:
            w.add_episode(e)
        w.close()
    data = load_dataset(tmp_path / "d")
    kept = episodes_of_tasks(data, ["lift the red cube", "pick up the red cube"])
    assert [e.length for e in kept] == [3, 5, 6]
    assert {e.task for e in kept} == {"lift the red cube", "pick up the red cube"}
    with pytest.raises(ConfigError, match=r"no episode of .* has the task 'lift the green cube'"):
        episodes_of_tasks(data, ["lift the green cube"])


def test_layout_is_readable_with_pyarrow_alone(tmp_path: Path) -> None:
    _write(tmp_path / "ds")
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    assert info["fps"] == FPS and info["total_episodes"] == 3 and info["total_frames"] == 16
    assert info["features"]["observation.state"]["names"] == ["a", "b", "c"]
    table = pq.read_table(tmp_path / "ds" / info["data_path"].format(episode_chunk=0, episode_index=1))
    assert set(table.column_names) >= {
        "index",
        "episode_index",
        "frame_index",
        "timestamp",
        "task_index",
        "observation.state",
        "action",
        "next.reward",
        "next.done",
        "next.success",
    }
    assert table.column("index").to_pylist() == list(range(5, 12))  # global frame index continues
    assert table.column("timestamp").to_pylist()[1] == pytest.approx(1 / FPS)
    assert table.schema.field("observation.state").type == pa.list_(pa.float32(), 3)


def _rewrite(root: Path, episode: int, change) -> None:  # type: ignore[no-untyped-def]
    path = root / f"data/chunk-000/episode_{episode:06d}.parquet"
    pq.write_table(change(pq.read_table(path)), path)


def _replace(table: pa.Table, name: str, array: pa.Array) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, array)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop_columns(["action"]), "episode 1: column 'action' is missing"),
        (
            lambda t: _replace(t, "observation.state", pa.array([[0.0, 1.0, 2.0]] * (t.num_rows - 1) + [[0.0, 1.0]])),
            "episode 1: column 'observation.state' is ragged: frame 6 has 2 values",
        ),
        (
            lambda t: _replace(t, "action", pa.array([[float("nan"), 0.0]] + [[0.0, 0.0]] * (t.num_rows - 1))),
            "episode 1: column 'action' holds non-finite values (first at frame 0)",
        ),
        (
            lambda t: _replace(t, "action", pa.array([["a", "b"]] * t.num_rows)),
            "episode 1: column 'action' holds string values, expected float32",
        ),
        (
            lambda t: _replace(t, "frame_index", pa.array(np.arange(t.num_rows) * 2)),
            "episode 1: column 'frame_index' is not 0..6 in order",
        ),
        (
            lambda t: _replace(t, "timestamp", pa.array(np.arange(t.num_rows, dtype=np.float32) / 50)),
            "episode 1: column 'timestamp' is 0.020000 s at frame 1, but 25.0 fps gives 0.040000 s",
        ),
        (
            lambda t: _replace(t, "episode_index", pa.array([1.5] * t.num_rows)),
            "episode 1: column 'episode_index' has dtype double, expected int64",
        ),
    ],
)
def test_corrupt_episode_is_refused_by_episode_and_column(tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    _write(tmp_path / "ds")
    _rewrite(tmp_path / "ds", 1, change)
    with pytest.raises(DatasetError) as err:
        load_dataset(tmp_path / "ds")
    assert message in str(err.value)


def test_inconsistent_metadata_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "ds")
    with pytest.raises(DatasetError, match=r"recorded at 25\.0 fps, but 50 fps is expected"):
        load_dataset(tmp_path / "ds", fps=50)
    (tmp_path / "ds" / "data/chunk-000/episode_000002.parquet").unlink()
    with pytest.raises(DatasetError, match=r"episode 2: file .* is missing"):
        load_dataset(tmp_path / "ds")
    (tmp_path / "ds" / "meta" / "info.json").write_text("{not json")
    with pytest.raises(DatasetError, match=r"info\.json' is not valid JSON"):
        load_dataset(tmp_path / "ds")
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "nowhere")


def test_writer_never_touches_an_existing_folder_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    _write(tmp_path / "ds")
    before = sorted(p.name for p in (tmp_path / "ds").rglob("*"))
    with pytest.raises(DatasetError, match="already exists"):
        DatasetWriter(tmp_path / "ds", FPS, ["a"], ["b"])
    assert sorted(p.name for p in (tmp_path / "ds").rglob("*")) == before
    rng = np.random.default_rng(1)
    bad = _episode(rng, 4)
    with (
        pytest.raises(DatasetError, match=r"column 'action' must be \[4, 2\], got \[4, 3\]"),
        DatasetWriter(tmp_path / "new", FPS, ["a", "b", "c"], ["j1", "j2"]) as w,
    ):
        w.add_episode(_episode(rng, 4))
        w.add_episode(Episode(bad.state, np.zeros((4, 3), np.float32), bad.reward, bad.success))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no staging folder, no half dataset


def test_windows_never_cross_episode_boundaries() -> None:
    rng = np.random.default_rng(0)
    episodes = [_episode(rng, 5, 0.0), _episode(rng, 3, 100.0)]
    w = Windows(episodes, obs_horizon=2, pred_horizon=4)
    assert len(w) == 8
    obs, act = w.batch(np.arange(8))
    assert obs.shape == (8, 2, 3) and act.shape == (8, 4, 2)
    # first frame of an episode: its history repeats the first observation
    np.testing.assert_array_equal(obs[0, 0], episodes[0].state[0])
    np.testing.assert_array_equal(obs[5, 0], episodes[1].state[0])
    np.testing.assert_array_equal(obs[5, 1], episodes[1].state[0])
    # near the end: actions repeat the episode's last action, never the next episode's first
    np.testing.assert_array_equal(act[3], episodes[0].action[[3, 4, 4, 4]])
    np.testing.assert_array_equal(act[4], episodes[0].action[[4, 4, 4, 4]])
    np.testing.assert_array_equal(act[6], episodes[1].action[[1, 2, 2, 2]])
    # an interior window is the plain slice
    np.testing.assert_array_equal(obs[2], episodes[0].state[1:3])
    assert (obs[:5] < 50).all() and (obs[5:] > 50).all()


def _edit_json(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _edit_lines(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(r) + "\n" for r in change(rows)))


INFO, EPISODES, TASKS = "meta/info.json", "meta/episodes.jsonl", "meta/tasks.jsonl"
MALFORMED_METADATA = [
    ("fps-bool", INFO, lambda d: d.update(fps=True), "fps must be a positive number, got True"),
    ("features-list", INFO, lambda d: d.update(features=[1, 2]), "features must be an object"),
    ("shape-text", INFO, lambda d: d["features"]["action"].update(shape=["2"]), "features.action.shape[0] must be an"),
    ("shape-missing", INFO, lambda d: d["features"].pop("observation.state"), "features.observation.state must be an"),
    ("total-text", INFO, lambda d: d.update(total_episodes="3"), "total_episodes must be an integer >= 0, got '3'"),
    ("chunks-zero", INFO, lambda d: d.update(chunks_size=0), "chunks_size must be an integer >= 1, got 0"),
    (
        "data-path-escapes",
        INFO,
        lambda d: d.update(data_path="../../outside/{episode_index}.parquet"),
        "leads outside the dataset folder",
    ),
    (
        "data-path-absolute",
        INFO,
        lambda d: d.update(data_path="/etc/{episode_index}.parquet"),
        "leads outside the dataset folder",
    ),
    (
        "data-path-field",
        INFO,
        lambda d: d.update(data_path="data/{episode_index.__class__}.parquet"),
        "may use {episode_chunk} and {episode_index} only",
    ),
    ("data-path-number", INFO, lambda d: d.update(data_path=7), "data_path must be a path template string, got 7"),
    ("episode-not-object", EPISODES, lambda rows: [*rows[:2], [1, 2]], "line 3 must be a JSON object, got list"),
    (
        "episode-index-text",
        EPISODES,
        lambda rows: [*rows[:2], {**rows[2], "episode_index": "2"}],
        "line 3: episode_index must be an integer >= 0, got '2'",
    ),
    (
        "episode-duplicate",
        EPISODES,
        lambda rows: [rows[0], rows[1], {**rows[2], "episode_index": 1}],
        "line 3: episode_index 1 is listed twice",
    ),
    (
        "episode-length-zero",
        EPISODES,
        lambda rows: [{**rows[0], "length": 0}, *rows[1:]],
        "line 1: length must be an integer >= 1, got 0",
    ),
    ("task-index-missing", TASKS, lambda rows: [{"task": "reach the goal"}], "line 1: task_index must be an integer"),
    ("task-not-text", TASKS, lambda rows: [{"task_index": 0, "task": 3}], "line 1 must be a JSON object with a text"),
]


@pytest.mark.parametrize(
    ("case", "file", "change", "message"), MALFORMED_METADATA, ids=[m[0] for m in MALFORMED_METADATA]
)
def test_malformed_metadata_is_refused_in_one_line_naming_the_field(  # type: ignore[no-untyped-def]
    tmp_path: Path, case: str, file: str, change, message: str
) -> None:
    _write(tmp_path / "ds")
    path = tmp_path / "ds" / file
    (_edit_json if file == INFO else _edit_lines)(path, change)
    with pytest.raises(DatasetError) as err:
        load_dataset(tmp_path / "ds")
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_writer_removes_the_staging_folders_of_killed_writers_and_no_others(tmp_path: Path) -> None:
    """A collect killed with SIGKILL leaves its hidden staging folder; the next writer of the same dataset removes
    it. A staging folder of a process that still runs, and anything else, stays."""
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".ds.{int(dead.stdout)}-abcd1234.partial"
    live = tmp_path / f".ds.{os.getpid()}-abcd1234.partial"
    other = tmp_path / ".other.1-abcd1234.partial"
    for folder in (stale, live, other):
        (folder / "meta").mkdir(parents=True)
    writer = DatasetWriter(tmp_path / "ds", FPS, ["a", "b", "c"], ["j1", "j2"])
    assert writer.removed_stale == 1 and not stale.exists() and live.exists() and other.exists()
    writer.abort()
