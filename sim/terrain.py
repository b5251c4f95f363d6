"""Rough terrain for legged tasks: one MuJoCo heightfield of tiles (rows: difficulty levels, columns: terrain
kinds) with a flat border, height lookups in torch, and the terrain curriculum.

The proven recipe (legged_gym ``utils/terrain.py`` and ``legged_robot.py: _update_terrain_curriculum``, commit
8fa29ac; mjlab ``terrains/`` and ``tasks/velocity/mdp/curriculums.py: terrain_levels_vel``, commit 0eda4e7): a grid
of tiles whose row sets the difficulty; each world spawns at the centre of its tile; at the end of an episode a world
that walked farther than half a tile moves one row up, one that walked less than half of what its commands asked
moves one row down, and a world that solves the last row is sent to a random row (so the whole range stays in
training); worlds start in the lowest ``max_init_level + 1`` rows.

Terrain kinds (columns cycle through them), each at ``difficulty d`` in ``[0, 1]`` (row / (levels - 1)):

- ``rough``: uniform random heights, amplitude ``rough_height_m[0] + d (rough_height_m[1] - rough_height_m[0])``
  on a 0.1 m grid (mjlab's ``HfRandomUniformTerrainCfg`` noise range 0.02-0.10 m);
- ``slope``: a pyramid rising to a central platform, slope ``d * max_slope`` (rise over run; legged_gym
  ``slope = difficulty * 0.4``), with ``rough_height_m[0]`` of noise on it;
- ``stairs``: pyramid stairs up, step height ``d * max_step_m`` over ``step_width_m`` (mjlab's
  ``BoxPyramidStairsTerrainCfg`` 0-0.1 m, 0.3 m wide; legged_gym ``0.05 + 0.18 d`` for larger robots);
- ``stairs_down``: the same, inverted.

Heights live in a float array ``[rows, cols]`` (m) whose cell ``(i, j)`` is the point ``(x, y) = (i, j) *
horizontal_scale_m`` relative to the terrain's lower corner; the MuJoCo heightfield is built from the same array,
so the physics and :meth:`Terrain.height_at` agree (on MuJoCo's triangles, to float precision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from sim.tasks.base import check_fields
from sim.vec_env import TaskConfigError

KINDS = ("rough", "slope", "stairs", "stairs_down")
"""Terrain kinds of the columns, in order."""


@dataclass
class TerrainConfig:
    """The ground of a legged task (``env.terrain``).

    Attributes:
        kind: ``flat`` (a plane) or ``rough`` (the heightfield of tiles).
        levels: Rows of tiles, easiest to hardest.
        columns: Columns of tiles; they cycle through :data:`KINDS`.
        tile_m: Side of a tile, m.
        border_m: Flat border around the tiles, m (robots walking off a tile stay on ground).
        horizontal_scale_m: Grid spacing of the heightfield, m.
        rough_height_m: Amplitude of the random heights at difficulty 0 and 1, m.
        max_slope: Steepest pyramid slope (difficulty 1), rise over run.
        max_step_m: Highest stair step (difficulty 1), m.
        step_width_m: Depth of a stair step, m.
        platform_m: Side of the flat platform at a tile's centre, m (the spawn point).
        max_init_level: Worlds start in rows 0 to this.
        curriculum: Move worlds between rows at the end of each episode (off: rows stay as drawn).
        seed: Seed of the terrain's random heights (the terrain is part of the model: the same in every world).
    """

    kind: str = "flat"
    levels: int = 6
    columns: int = 8
    tile_m: float = 6.0
    border_m: float = 4.0
    horizontal_scale_m: float = 0.1
    rough_height_m: tuple[float, float] = (0.02, 0.08)
    max_slope: float = 0.4
    max_step_m: float = 0.1
    step_width_m: float = 0.3
    platform_m: float = 1.5
    max_init_level: int = 1
    curriculum: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("flat", "rough"):
            raise TaskConfigError(f"env.terrain.kind must be 'flat' or 'rough', got '{self.kind}'")
        check_fields(self, ("tile_m", "horizontal_scale_m", "step_width_m", "platform_m"), "env.terrain.")
        check_fields(self, ("border_m", "max_slope", "max_step_m"), "env.terrain.", positive=False)
        for name in ("border_m", "max_slope", "max_step_m"):
            if getattr(self, name) < 0:
                raise TaskConfigError(f"env.terrain.{name} must be >= 0, got {getattr(self, name)}")
        lo, hi = self.rough_height_m
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
            raise TaskConfigError(f"env.terrain.rough_height_m must be [low, high] m >= 0, got {[lo, hi]}")
        if self.levels < 1 or self.columns < 1:
            raise TaskConfigError(f"env.terrain.levels and columns must be >= 1, got {self.levels}, {self.columns}")
        if not 0 <= self.max_init_level < self.levels:
            raise TaskConfigError(
                f"env.terrain.max_init_level must be in [0, levels - 1 = {self.levels - 1}], got {self.max_init_level}"
            )
        if self.platform_m >= self.tile_m:
            raise TaskConfigError(f"env.terrain.platform_m ({self.platform_m}) must be below tile_m ({self.tile_m})")


def _tile(kind: str, difficulty: float, cfg: TerrainConfig, rng: np.random.Generator) -> np.ndarray:
    """Heights ``[n, n]`` (m) of one tile (``n = tile_m / horizontal_scale_m``)."""
    hs = cfg.horizontal_scale_m
    n = round(cfg.tile_m / hs)
    centre = (n - 1) / 2
    idx = np.arange(n)
    # distance (in cells) from the tile's centre, Chebyshev: pyramids with square rings
    ring = np.maximum(np.abs(idx[:, None] - centre), np.abs(idx[None, :] - centre)) * hs
    half_platform = cfg.platform_m / 2
    if kind == "rough":
        amplitude = cfg.rough_height_m[0] + difficulty * (cfg.rough_height_m[1] - cfg.rough_height_m[0])
        heights = rng.uniform(-amplitude / 2, amplitude / 2, (n, n))
        heights[ring <= half_platform] = 0.0
        return heights
    if kind == "slope":
        rise = difficulty * cfg.max_slope * np.maximum(cfg.tile_m / 2 - np.maximum(ring, half_platform), 0.0)
        noise = rng.uniform(-cfg.rough_height_m[0] / 2, cfg.rough_height_m[0] / 2, (n, n))
        noise[ring <= half_platform] = 0.0
        return rise + noise
    step = difficulty * cfg.max_step_m
    steps_out = np.floor(np.maximum(ring - half_platform, 0.0) / cfg.step_width_m + 1e-9)
    steps_out[ring <= half_platform] = 0.0
    total = np.floor((cfg.tile_m / 2 - half_platform) / cfg.step_width_m)
    if kind == "stairs":  # the platform on top
        return step * (total - steps_out)
    return -step * (total - steps_out)  # stairs_down: the platform at the bottom


class Terrain:
    """The heightfield of ``cfg`` (see the module docstring).

    Attributes:
        heights: ``[rows, cols]`` float32, m.
        origin: ``(x, y)`` of cell ``(0, 0)`` in the world, m (the terrain is centred on the world's origin).
        tile_centres: ``[levels, columns, 2]`` world ``(x, y)`` of each tile's centre, m.
    """

    def __init__(self, cfg: TerrainConfig) -> None:
        if cfg.kind != "rough":
            raise ValueError("Terrain builds rough terrain; a flat ground is a plane")
        self.cfg = cfg
        hs = cfg.horizontal_scale_m
        n = round(cfg.tile_m / hs)
        border = round(cfg.border_m / hs)
        rows, cols = cfg.levels * n + 2 * border, cfg.columns * n + 2 * border
        rng = np.random.default_rng(cfg.seed)
        heights = np.zeros((rows, cols))
        for level in range(cfg.levels):
            difficulty = level / max(cfg.levels - 1, 1)
            for column in range(cfg.columns):
                kind = KINDS[column % len(KINDS)]
                r0, c0 = border + level * n, border + column * n
                heights[r0 : r0 + n, c0 : c0 + n] = _tile(kind, difficulty, cfg, rng)
        self.heights = heights.astype(np.float32)
        self._flat_np = self.heights.reshape(-1)
        self.origin = np.array([-(rows - 1) * hs / 2, -(cols - 1) * hs / 2])
        centres = np.zeros((cfg.levels, cfg.columns, 2))
        for level in range(cfg.levels):
            for column in range(cfg.columns):
                centres[level, column] = self.origin + hs * np.array(
                    [border + level * n + (n - 1) / 2, border + column * n + (n - 1) / 2]
                )
        self.tile_centres = centres
        self._grid: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # flat heights, origin

    @property
    def size_m(self) -> tuple[float, float]:
        """Extent in x and y, m."""
        hs = self.cfg.horizontal_scale_m
        return ((self.heights.shape[0] - 1) * hs, (self.heights.shape[1] - 1) * hs)

    def add_to_spec(self, spec: mujoco.MjSpec, name: str = "ground") -> mujoco.MjsGeom:
        """Add the heightfield geom ``name`` to ``spec``'s world body (its x axis along the array's rows)."""
        lo, hi = float(self.heights.min()), float(self.heights.max())
        span = max(hi - lo, 1e-3)
        # MuJoCo's hfield data is row-major with rows along y: transpose so that row i of ``heights`` is x
        data = ((self.heights.T - lo) / span).astype(np.float32)
        sx, sy = self.size_m
        field = spec.add_hfield(name=f"{name}_hfield", size=[sx / 2, sy / 2, span, 0.5], nrow=data.shape[0],
                                ncol=data.shape[1], userdata=data.ravel().tolist())  # fmt: skip
        return spec.worldbody.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=field.name,
                                       pos=[0.0, 0.0, lo])  # fmt: skip

    def height_at(self, xy: torch.Tensor) -> torch.Tensor:
        """Ground height ``[...]`` (m) under world points ``xy [..., 2]``: MuJoCo's heightfield surface (two
        triangles per grid cell); outside the terrain, its edge."""
        cached = self._grid.get(xy.device)
        if cached is None:
            cached = self._grid[xy.device] = (
                torch.from_numpy(self.heights).to(xy.device).reshape(-1),
                torch.tensor(self.origin, dtype=torch.float32, device=xy.device),
            )
        flat, origin = cached
        rows, cols = self.heights.shape
        u = (xy.to(torch.float32) - origin) / self.cfg.horizontal_scale_m
        i = u[..., 0].clamp(0, rows - 1.001)
        j = u[..., 1].clamp(0, cols - 1.001)
        i0, j0 = i.long(), j.long()  # non-negative: truncation is the floor
        fi, fj = i - i0, j - j0
        k = i0 * cols + j0
        corners = torch.stack((k, k + 1, k + cols, k + cols + 1))
        if flat.device.type == "cpu":  # numpy's gather: torch's opens a thread pool region, which stalls on busy cores
            a, b, c, d = torch.from_numpy(self._flat_np.take(corners.numpy()))
        else:
            a, b, c, d = flat.take(corners)
        # MuJoCo splits each cell into two triangles along the diagonal from (i, j) to (i + 1, j + 1)
        upper = a + fi * (d - b) + fj * (b - a)
        lower = a + fi * (c - a) + fj * (d - c)
        return torch.where(fj > fi, upper, lower).to(xy.dtype)


def update_levels(
    levels: torch.Tensor, walked_m: torch.Tensor, asked_m: torch.Tensor, cfg: TerrainConfig, gen: torch.Generator
) -> torch.Tensor:
    """New rows for worlds that ended an episode (legged_gym / mjlab's curriculum; see the module docstring).

    Args:
        levels: ``[n]`` long, the worlds' rows.
        walked_m: ``[n]`` distance from the spawn point at the end of the episode, m.
        asked_m: ``[n]`` the commanded speed times the episode's length, m.
        cfg: The terrain (its tile size and number of rows).
        gen: Random generator (the rows a world that solved the last one is sent to).
    """
    up = walked_m > cfg.tile_m / 2
    down = (walked_m < 0.5 * asked_m) & ~up
    new = levels + up.long() - down.long()
    solved = new >= cfg.levels
    random = torch.randint(0, cfg.levels, levels.shape, generator=gen, device=levels.device)
    return torch.where(solved, random, new.clamp_min(0))


def success_by_tile(success: np.ndarray, level: np.ndarray, kind: np.ndarray) -> dict[str, float]:
    """Success rates of evaluation episodes by terrain kind and by row: where on the terrain a policy fails.

    Args:
        success: ``[E]`` 1 for an episode that succeeded, else 0.
        level: ``[E]`` the row (difficulty level) each episode ran on.
        kind: ``[E]`` the index into :data:`KINDS` of each episode's tile.

    Returns:
        ``success_<kind>`` for each kind and ``success_level_<row>`` for each row that some episode ran on.
    """
    rows = level.astype(np.int64)
    kinds = kind.astype(np.int64)
    out = {f"success_{name}": float(success[kinds == i].mean()) for i, name in enumerate(KINDS) if (kinds == i).any()}
    out.update({f"success_level_{r}": float(success[rows == r].mean()) for r in np.unique(rows).tolist()})
    return out
