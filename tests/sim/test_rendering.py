"""Camera images of batched worlds: every world drawn from its own state, its own cube size, and (with visual
randomisation) its own light, colours and camera mount, redrawn per episode; the task's model is never touched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import sim
from robot_rl.config import load_config
from sim.rendering import CameraRenderer, RenderError, VisualRandomization


@pytest.fixture(scope="module")
def lift() -> sim.VecEnv:
    env = sim.make("panda-lift", 4, torch.device("cpu"), load_config("panda-lift").env)
    env.reset(seed=0)
    return env


def _red_pixels(view: np.ndarray) -> int:
    r, g, b = (view[..., i].astype(int) for i in range(3))
    return int(((r > 120) & (g < 90) & (b < 90)).sum())


def test_each_world_is_drawn_from_its_own_state_and_cube_size(lift: sim.VecEnv) -> None:
    renderer = CameraRenderer(lift, {"front": (48, 64)})
    views = renderer.render()["front"]
    assert views.shape == (4, 48, 64, 3) and views.dtype == np.uint8
    assert all(np.abs(views[i].astype(int) - views[0].astype(int)).mean() > 0.01 for i in range(1, 4))
    size = lift.params["object_size"]  # type: ignore[attr-defined]
    model = lift._model  # type: ignore[attr-defined]
    nominal = model.geom_size[model.geom("cube").id].copy()
    drawn = size.clone()
    size[:] = 0.08  # every cube 8 cm, then 4 cm: the drawn cube grows with the size the physics uses
    big = renderer.render()["front"]
    size[:] = 0.04
    small = renderer.render()["front"]
    size[:] = drawn
    assert all(_red_pixels(big[i]) > 2 * _red_pixels(small[i]) > 0 for i in range(4)), [
        (_red_pixels(big[i]), _red_pixels(small[i])) for i in range(4)
    ]
    assert np.array_equal(model.geom_size[model.geom("cube").id], nominal)  # the task's model is untouched
    renderer.close()


def test_visual_randomization_differs_per_world_and_redraws_only_new_episodes(lift: sim.VecEnv) -> None:
    plain = CameraRenderer(lift, {"wrist": (32, 32)}).render()["wrist"]
    renderer = CameraRenderer(lift, {"wrist": (32, 32)}, VisualRandomization(pixel_noise=0.0), seed=3)
    mount = renderer.mounts()
    first = renderer.render()["wrist"]
    assert renderer.mounts() == mount and mount["wrist"]["pos_m"] == [0.05, 0.0, 0.046]  # nominal, not a draw
    assert all(np.abs(first[i].astype(int) - plain[i].astype(int)).mean() > 2 for i in range(4))
    assert np.array_equal(renderer.render()["wrist"], first)  # same episode, same look
    renderer.redraw(np.array([2]))
    again = renderer.render()["wrist"]
    assert np.array_equal(again[[0, 1, 3]], first[[0, 1, 3]])
    assert np.abs(again[2].astype(int) - first[2].astype(int)).mean() > 1
    noisy = CameraRenderer(lift, {"wrist": (32, 32)}, VisualRandomization(pixel_noise=5.0), seed=3).render()["wrist"]
    assert 2 < np.abs(noisy.astype(int) - first.astype(int)).mean() < 8  # the draws repeat, plus sensor noise


def test_renderer_and_randomization_refuse_bad_input(lift: sim.VecEnv) -> None:
    with pytest.raises(RenderError, match=r"camera 'top' is not in the task's model \(cameras: front, wrist\)"):
        CameraRenderer(lift, {"top": (32, 32)})
    with pytest.raises(ValueError, match="light_scale must be 0 <= low <= high"):
        VisualRandomization(light_scale=(1.2, 0.8))
    with pytest.raises(ValueError, match="camera_tilt_deg must be >= 0"):
        VisualRandomization(camera_tilt_deg=-1.0)


def test_the_run_clip_shows_each_episode_and_frames_its_verdict(tmp_path: Path) -> None:
    """``episodes.gif``: the worlds side by side at the control rate, each finished episode framed green or red."""
    from PIL import Image

    from robot_rl.clip import record_clip

    cfg = load_config("panda-reach").env
    still = lambda obs: torch.zeros(obs["policy"].shape[0], 7)  # noqa: E731 - holds the arm: no reach succeeds
    path = record_clip("panda-reach", cfg, still, tmp_path / "episodes.gif", seed=3, worlds=3, size=(48, 64))
    assert path == tmp_path / "episodes.gif"
    clip = Image.open(path)
    steps = sim.make("panda-reach", 1, torch.device("cpu"), cfg).max_episode_length
    assert clip.size == (3 * 64, 48)
    durations = []  # ms; the writer merges identical frames (this arm holds still) and adds up their durations
    for k in range(clip.n_frames):
        clip.seek(k)
        durations.append(clip.info["duration"])
    assert sum(durations) == steps * 40 + 1500  # every control step at 25 Hz, then the verdicts for 1.5 s
    last = np.asarray(clip.convert("RGB"))
    for w in range(3):
        corner = last[0, w * 64 + 1].astype(int)
        assert corner[0] > 180 and corner[1] < 80  # red: failed


def test_a_task_without_a_mujoco_model_has_no_clip(tmp_path: Path) -> None:
    from robot_rl.clip import record_clip

    cfg = load_config("quadrotor-hover").env
    path = record_clip(
        "quadrotor-hover", cfg, lambda obs: torch.zeros(obs["policy"].shape[0], 4), tmp_path / "c.gif", 0
    )
    assert path is None and not (tmp_path / "c.gif").exists()
