"""``robot-rl dataset merge``: each skill's demonstrations from its own world, one dataset in one stated world; and
``collect --include`` refuses a dataset of another world."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from robot_rl.imitation.collect import collect
from robot_rl.imitation.dataset import DatasetError, load_dataset
from robot_rl.imitation.merge import in_merged_units, merge_datasets, recorded_contract, world_differences
from sim.typed_config import ConfigError
from tests.conftest import robot_rl

LIFT_WORLD = ("env.skills=[lift]",)
PUSH_WORLD = ("env.skills=[push]", "env.passivity.tank_max_j=80", "env.randomization.action_latency.range=[0,1]")
DECIDE = ("env.skills=[lift,push]", "env.passivity.tank_max_j=80", "env.randomization.action_latency.range=[0,1]")


@pytest.fixture(scope="module")
def skills(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One scripted lift episode and one scripted push episode of ``panda-multitask``, each in its own world (the
    push one behind a larger tank, with more latency)."""
    root = tmp_path_factory.mktemp("skills")
    for name, world in (("lift", LIFT_WORLD), ("push", PUSH_WORLD)):
        collect("panda-multitask", 1, root / name, 1, keep_failed=True, quiet=True, env_overrides=world)
    return root / "lift", root / "push"


def test_world_differences_name_each_setting_and_randomisation_term_that_differs() -> None:
    a = {"tank": {"t_max": 40.0}, "dt": 0.004, "randomization": [{"param": "latency", "range": [0, 1]}]}
    b = {"tank": {"t_max": 80.0}, "dt": 0.004, "randomization": [{"param": "latency", "range": [0, 2]}]}
    assert world_differences({"a": a, "b": b}) == {
        "env.randomization.latency.range": {"a": [0, 1], "b": [0, 2]},
        "env.tank.t_max": {"a": 40.0, "b": 80.0},
    }
    assert world_differences({"a": a, "b": a}) == {}


def test_a_merge_keeps_every_episode_in_order_and_records_the_world_it_was_told(
    skills: tuple[Path, Path], tmp_path: Path
) -> None:
    lift, push = skills
    out = tmp_path / "both"
    summary = merge_datasets([lift, push], out, DECIDE)
    merged, sources = load_dataset(out), [load_dataset(lift), load_dataset(push)]
    assert len(merged.episodes) == 2 and summary.out == out
    for got, want in zip(merged.episodes, [s.episodes[0] for s in sources], strict=True):
        np.testing.assert_array_equal(got.state, want.state)
        np.testing.assert_array_equal(got.action, want.action)
        assert got.task == want.task
    meta = merged.robot_rl
    assert meta["env"]["skills"] == ["lift", "push"] and meta["env"]["passivity"]["tank_max_j"] == 80.0
    assert meta["contract"]["filter"]["tank_max_j"] == 80.0  # the deploy tank is the merged world's
    assert [m["env"]["env.passivity.tank_max_j"] for m in meta["merged"]] == [None, 80.0]  # None: no tank
    assert [m["env"]["env.randomization.action_latency.range"] for m in meta["merged"]] == [[0.0, 2.0], [0.0, 1.0]]
    assert meta["teacher"].startswith("2 datasets merged: scripted expert")
    assert summary.decided["env.skills"] == ["lift", "push"]
    again = merge_datasets([out, push], tmp_path / "again", ("env.skills=[lift,push]",))  # a merge of a merge
    sources = load_dataset(again.out).robot_rl["merged"]
    assert [len(s.get("merged", [])) for s in sources] == [2, 0] and sources[0]["episodes"] == 2
    lines = "\n".join(summary.lines())
    assert "env.passivity.tank_max_j = 80.0" in lines and "2 episodes" in lines


def test_a_merge_refuses_what_it_cannot_decide_and_writes_nothing(skills: tuple[Path, Path], tmp_path: Path) -> None:
    lift, push = skills
    out = tmp_path / "both"
    with pytest.raises(DatasetError, match=r"different worlds: env.passivity.tank_max_j \(unset in .*80.0 in"):
        merge_datasets([lift, push], out, ("env.skills=[lift,push]",))
    with pytest.raises(DatasetError, match="at least two"):
        merge_datasets([lift], out)
    with pytest.raises(ConfigError, match="only env"):
        merge_datasets([lift, push], out, ("ppo.gamma=0.9",))
    with pytest.raises(DatasetError, match="may not change what the student reads"):
        merge_datasets([lift, push], out, (*DECIDE, "env.action_history=2"))
    reach = tmp_path / "lift"
    collect("panda-lift", 1, reach, 1, keep_failed=True, quiet=True)
    with pytest.raises(DatasetError, match=f"dataset '{reach}' differs from '{lift}' in its observation.state names"):
        merge_datasets([lift, reach], out)
    assert not out.exists() and not list(tmp_path.glob(".both*"))


def test_the_cli_merges_and_never_overwrites(skills: tuple[Path, Path], tmp_path: Path) -> None:
    lift, push = skills
    out = tmp_path / "both"
    ran = robot_rl("dataset", "merge", lift, push, "--out", out, *(a for d in DECIDE for a in ("--set", d)))
    assert ran.returncode == 0, ran.stderr
    assert "merged 2 datasets:" in ran.stdout and f"dataset: {out} (2 episodes" in ran.stdout
    again = robot_rl("dataset", "merge", lift, push, "--out", out, *(a for d in DECIDE for a in ("--set", d)))
    assert again.returncode == 2 and "already exists" in again.stderr
    undecided = robot_rl("dataset", "merge", lift, push, "--out", tmp_path / "x")
    assert undecided.returncode == 2 and "--set env.KEY=VALUE for each" in undecided.stderr
    assert len(undecided.stderr.strip().splitlines()) == 1


def test_collect_refuses_to_include_a_dataset_of_another_world(skills: tuple[Path, Path], tmp_path: Path) -> None:
    """DAgger's aggregate is one world: the included demonstrations must be recorded where the new episodes are."""
    lift, _ = skills
    out = tmp_path / "more"
    with pytest.raises(DatasetError, match=r"another world than this collection: env.passivity.tank_max_j"):
        collect("panda-multitask", 1, out, 1, keep_failed=True, quiet=True, include=lift, env_overrides=PUSH_WORLD)
    assert not out.exists()
    again = {"keep_failed": True, "quiet": True, "include": lift}
    summary = collect("panda-multitask", 1, out, 1, env_overrides=LIFT_WORLD, **again)
    assert summary.kept == 2 and json.loads((out / "meta" / "info.json").read_text())["total_episodes"] == 2


def test_a_gripper_recorded_under_another_mapping_is_re_expressed_as_the_same_width(
    skills: tuple[Path, Path], tmp_path: Path
) -> None:
    """A source whose absolute command maps otherwise (the gripper) gets its actions in the merged units, each the
    same clipped width; the joints' relative targets stay exactly as recorded."""
    lift, push = skills
    recorded = load_dataset(lift)
    a = recorded_contract(recorded).action
    mapping = "open-at-zero" if a.offset[7] != 0.04 else "centred"
    out = tmp_path / "both"
    merge_datasets([lift, push], out, (*DECIDE, f"env.gripper_action={mapping}"))
    merged = load_dataset(out)
    m = recorded_contract(merged).action
    assert (m.scale[7], m.offset[7]) != (a.scale[7], a.offset[7])
    got, want = merged.episodes[0].action, recorded.episodes[0].action
    np.testing.assert_array_equal(got[:, :7], want[:, :7])
    width = np.clip(a.offset[7] + a.scale[7] * want[:, 7].astype(np.float64), a.low[7], a.high[7])
    np.testing.assert_allclose(m.offset[7] + m.scale[7] * got[:, 7], width, atol=1e-6)


def test_commands_the_merged_mapping_cannot_reach_or_relative_targets_mapped_otherwise_are_refused(
    skills: tuple[Path, Path],
) -> None:
    source = recorded_contract(load_dataset(skills[0]))
    a = source.action
    narrow = dataclasses.replace(source, action=dataclasses.replace(a, scale=[*a.scale[:7], a.scale[7] / 4]))
    remap = in_merged_units(source, narrow, Path("d"))
    assert remap is not None
    gripper = np.zeros((3, a.size), np.float32)
    gripper[1, 7] = 1.0 if a.offset[7] <= 0.02 else -1.0  # the far end of the recorded range
    with pytest.raises(DatasetError, match=f"'d' episode 4 step 1: command '{a.names[7]}' .* outside"):
        remap(gripper, 4)
    joints = dataclasses.replace(source, action=dataclasses.replace(a, scale=[0.5, *a.scale[1:]]))
    with pytest.raises(DatasetError, match=f"command '{a.names[0]}' is relative to 'joint_pos'"):
        in_merged_units(source, joints, Path("d"))
    assert in_merged_units(source, source, Path("d")) is None
