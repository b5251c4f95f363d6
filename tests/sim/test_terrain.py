"""Rough terrain: the heightfield MuJoCo collides with is the one the task measures, tiles get harder by row, the
curriculum moves worlds as legged_gym's does, and the quadruped spawns, falls and scans relative to the ground."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.robots import unitree_a1 as a1
from sim.tasks.quadruped.velocity import HEIGHT_SCAN, QuadrupedVelocity
from sim.terrain import KINDS, Terrain, TerrainConfig, success_by_tile, update_levels
from sim.vec_env import TaskConfigError

ROUGH = TerrainConfig(kind="rough")


def test_mujoco_collides_with_the_heights_the_task_measures() -> None:
    terrain = Terrain(ROUGH)
    model = a1.build_model(0.005, a1.Ground(terrain=terrain))
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    rng = np.random.default_rng(0)
    sx, sy = terrain.size_m
    errors = []
    for _ in range(300):
        x, y = rng.uniform(-sx / 2 + 0.2, sx / 2 - 0.2), rng.uniform(-sy / 2 + 0.2, sy / 2 - 0.2)
        geom = np.zeros(1, np.int32)
        distance = mujoco.mj_ray(model, data, np.array([x, y, 5.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)
        assert geom[0] == model.geom("ground").id
        errors.append(5.0 - distance - float(terrain.height_at(torch.tensor([x, y]))))
    assert np.max(np.abs(errors)) < 1e-5  # the same two triangles per cell as MuJoCo's


def test_tiles_get_harder_by_row_and_every_kind_is_there() -> None:
    terrain = Terrain(ROUGH)
    hs, n = ROUGH.horizontal_scale_m, round(ROUGH.tile_m / ROUGH.horizontal_scale_m)
    border = round(ROUGH.border_m / hs)

    def relief(level: int, column: int) -> float:
        r, c = border + level * n, border + column * n
        tile = terrain.heights[r : r + n, c : c + n]
        return float(tile.max() - tile.min())

    for column in range(len(KINDS)):
        reliefs = [relief(level, column) for level in range(ROUGH.levels)]
        assert reliefs == sorted(reliefs) and reliefs[-1] > reliefs[0], (KINDS[column], reliefs)
    assert relief(ROUGH.levels - 1, KINDS.index("stairs")) == pytest.approx(
        ROUGH.max_step_m * np.floor((ROUGH.tile_m - ROUGH.platform_m) / 2 / ROUGH.step_width_m), rel=1e-5
    )
    # every tile's centre is its flat platform: the spawn point
    for level in range(ROUGH.levels):
        for column in range(ROUGH.columns):
            centre = torch.tensor(terrain.tile_centres[level, column], dtype=torch.float32)
            around = centre + torch.tensor([[0.3, 0.0], [-0.3, 0.2], [0.0, -0.3]])
            heights = terrain.height_at(around)
            assert float(heights.max() - heights.min()) < 1e-4


def test_the_curriculum_moves_worlds_up_down_and_solvers_to_a_random_row() -> None:
    gen = torch.Generator().manual_seed(0)
    levels = torch.tensor([0, 2, 2, 5, 5])
    walked = torch.tensor([4.0, 0.5, 2.0, 4.0, 4.0])  # more than half a 6 m tile: up
    asked = torch.tensor([2.0, 3.0, 3.0, 2.0, 2.0])  # walked less than half of this: down
    new = update_levels(levels, walked, asked, ROUGH, gen)
    assert new[:3].tolist() == [1, 1, 2]
    assert all(0 <= int(v) < ROUGH.levels for v in new[3:])  # solved the last row: anywhere


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"kind": "stairs"}, "env.terrain.kind"),
        ({"max_init_level": 6}, "max_init_level"),
        ({"platform_m": 7.0}, "platform_m"),
        ({"rough_height_m": (0.1, 0.05)}, "rough_height_m"),
        ({"tile_m": float("nan")}, "tile_m"),
    ],
)
def test_bad_terrain_configs_are_refused_by_name(override: dict[str, object], message: str) -> None:
    with pytest.raises(TaskConfigError, match=message):
        TerrainConfig(**{"kind": "rough", **override})  # type: ignore[arg-type]


def test_the_quadruped_spawns_falls_and_scans_relative_to_the_ground() -> None:
    cfg = sim.train_env_config("quadruped-velocity", ["terrain.kind=rough", "terrain.curriculum=false"])
    env = sim.make("quadruped-velocity", 32, cfg=cfg)
    flat = sim.make("quadruped-velocity", 2)
    assert env.obs_sizes["critic"] == flat.obs_sizes["critic"] + HEIGHT_SCAN.shape[0]  # type: ignore[attr-defined]
    assert env.obs_sizes["policy"] == flat.obs_sizes["policy"]  # type: ignore[attr-defined]  # the actor stays blind
    env.reset(seed=1)
    assert len(set(env.level.tolist())) > 3  # without the curriculum: every row
    ground = env.terrain.height_at(env.spawn_xy)
    assert float(ground.abs().max()) > 0.1  # some spawn high on a pyramid or low in a pit ...
    torch.testing.assert_close(env.physics.qpos[:, 2].float(), ground + a1.START_HEIGHT, atol=1e-4, rtol=0)
    for _ in range(25):
        _, _, terminated, *_ = env.step(torch.zeros(32, 12))
    assert not bool(terminated.any())  # ... and stands there: no fall is read from the world height
    assert float(env.base_height().min()) > 0.2
    scan = env.height_scan()
    assert scan.shape == (32, HEIGHT_SCAN.shape[0]) and bool((scan.abs() < 0.2).all())  # standing on its platform
    contract = env.contract(["policy"])  # type: ignore[attr-defined]
    assert contract.extra["training_envelope"]["ground"] == "rough"


def test_the_curriculum_starts_easy_and_promotes_walkers() -> None:
    cfg = sim.train_env_config("quadruped-velocity", ["terrain.kind=rough"])
    env = sim.make("quadruped-velocity", 16, cfg=cfg)
    env.reset(seed=0)
    assert int(env.level.max()) <= ROUGH.max_init_level
    rows = torch.arange(4)
    with torch.inference_mode():
        env._pos[rows, :2] = env.spawn_xy[rows] + torch.tensor([4.0, 0.0])  # walked 4 m: up a row
        before = env.level[rows].clone()
        env._place(rows)
    assert (env.level[rows] == before + 1).all()


@pytest.mark.xdist_group("mjwarp")
def test_rough_terrain_runs_on_mjwarp_as_on_mujoco() -> None:
    """The same config on MuJoCo Warp (its CPU device here): the heightfield collides, the robots stand on their
    tiles at the heights MuJoCo gives."""
    heights = {}
    for backend in ("mujoco", "mjwarp"):
        cfg = sim.train_env_config("quadruped-velocity", ["terrain.kind=rough", f"backend={backend}"])
        env = sim.make("quadruped-velocity", 3, cfg=cfg)
        env.set_randomization(False)
        env.reset(seed=2)
        for _ in range(25):
            _, _, terminated, *_ = env.step(torch.zeros(3, 12))
        assert not bool(terminated.any())
        heights[backend] = env.base_height()
    torch.testing.assert_close(heights["mjwarp"], heights["mujoco"], atol=0.02, rtol=0)


def test_an_evaluation_covers_every_row_without_the_curriculum() -> None:
    from robot_rl.evaluate import make_eval_env

    cfg = sim.train_env_config("quadruped-velocity", ["terrain.kind=rough"])
    env = make_eval_env("quadruped-velocity", cfg, 64, torch.device("cpu"), True)
    env.reset(seed=0)
    assert set(env.level.tolist()) == set(range(ROUGH.levels))  # type: ignore[attr-defined]
    ends = env._episode_metrics()  # type: ignore[attr-defined]
    assert torch.equal(ends["terrain_kind"], (env.column % len(KINDS)).float())  # type: ignore[attr-defined]


def test_an_evaluation_reports_success_by_terrain_kind_and_row() -> None:
    """Where a policy fails on the terrain: success by kind and by row beside the overall rate."""
    success = np.array([1, 0, 1, 1, 0, 0], dtype=np.float64)
    level = np.array([0, 0, 1, 1, 5, 5], dtype=np.float64)
    kind = np.array([0, 2, 0, 3, 2, 2], dtype=np.float64)
    by_tile = success_by_tile(success, level, kind)
    assert by_tile == {
        "success_rough": 1.0, "success_stairs": 0.0, "success_stairs_down": 1.0,  # no slope episode: no figure
        "success_level_0": 0.5, "success_level_1": 1.0, "success_level_5": 0.0,
    }  # fmt: skip
    episodes = {"success": success, "terrain_level": level, "terrain_kind": kind,
                "velocity_error": np.full(6, 0.2), "yaw_rate_error": np.full(6, 0.1)}  # fmt: skip
    met, figures = QuadrupedVelocity.criterion(episodes)
    assert not met and figures["success_rate"] == 0.5 and figures["success_stairs"] == 0.0
    flat = {k: v for k, v in episodes.items() if not k.startswith("terrain")}
    assert not any(k.startswith("success_") and k != "success_rate" for k in QuadrupedVelocity.criterion(flat)[1])


def test_rough_terrain_starts_from_a_flat_ground_run(tmp_path: Path) -> None:
    """``robot-rl train quadruped-velocity --set env.terrain.kind=rough --init-from FLAT_RUN``: the blind actor is the
    flat run's; the critic, which reads the height scan on rough terrain, starts fresh (named in the note)."""
    from robot_rl.config import load_config
    from robot_rl.runner import OnPolicyRunner

    base = ["num_envs=2", f"run_root={tmp_path}"]
    (tmp_path / "flat").mkdir()
    flat = OnPolicyRunner(load_config("quadruped-velocity", None, base), tmp_path / "flat", quiet=True)
    flat.save(0.0)
    rough_cfg = load_config(
        "quadruped-velocity", None, [*base, "env.terrain.kind=rough", f"policy.init_from={tmp_path / 'flat'}"]
    )
    rough = OnPolicyRunner(rough_cfg, tmp_path / "rough", quiet=True)
    mine, theirs = rough.model.state_dict(), flat.model.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine if k.startswith(("actor", "log_std")))
    scan = HEIGHT_SCAN.shape[0]
    d = flat.model.critic[0].weight.shape[1]
    assert rough.model.critic[0].weight.shape[1] == d + scan
    assert (
        rough.init_note is not None
        and f"the critic starts fresh (critic_normalizer.mean is [{d}] there, [{d + scan}] here)" in rough.init_note
    )
