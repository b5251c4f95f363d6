"""A short clip of evaluation episodes for the run folder: what the trained policy does, rendered offscreen.

A few worlds (randomisation on, held-out seeds) run one episode each with the deterministic policy, seen by a camera
of the task's MuJoCo model (``front``: fixed in front of the Panda, following the quadruped), tiled side by side and
written as an animated GIF at the control rate or at most :data:`MAX_FPS` frames per second (Pillow; no video codec
needed). A world whose episode ended keeps its last frame, framed green if it
succeeded and red if not. Rendering uses MuJoCo's offscreen renderer (EGL without a display; ``MUJOCO_GL`` as in
:mod:`sim.rendering`); tasks without a MuJoCo model (the torch quadrotor, cart-pole) have no clip.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.runtime.files import atomic_write_bytes
from robot_rl.evaluate import PolicyFn, make_eval_env

CLIP_CAMERA = "front"
"""The camera the clip is seen from (the Panda scene's fixed camera in front of the robot)."""
MAX_FPS = 25
"""Frames per second of the clip at most: a faster control loop shows every k-th step (GIF players clamp shorter
frame times anyway, and the file stays small)."""
BORDER_PX = 4
"""Width of the success (green) / failure (red) frame of a finished episode, pixels."""


def record_clip(
    task: str,
    env_cfg: Any,
    policy: PolicyFn,
    path: Path,
    seed: int,
    worlds: int = 4,
    size: tuple[int, int] = (144, 192),
) -> Path | None:
    """Run ``worlds`` evaluation episodes and write them tiled in a row as a GIF at ``path``.

    Args:
        task: Registered task name.
        env_cfg: The task config the policy runs in.
        policy: Normalised actions ``[N, A]`` from observation groups.
        path: The ``.gif`` file to write (written whole or not at all).
        seed: Evaluation seed.
        worlds: Episodes shown side by side.
        size: Each tile's ``(height, width)``, pixels.

    Returns:
        ``path``, or ``None`` when the task has no MuJoCo model or no ``front`` camera to render.

    Raises:
        sim.rendering.RenderError: Offscreen rendering is unavailable (the message says what to set).
    """
    from PIL import Image

    from sim.rendering import CameraRenderer

    env = make_eval_env(task, env_cfg, worlds, torch.device("cpu"), True)
    model = getattr(env, "_model", None)
    if model is None or CLIP_CAMERA not in [model.camera(i).name for i in range(model.ncam)]:
        env.close()
        return None
    renderer = CameraRenderer(env, {CLIP_CAMERA: size})
    obs = env.reset(seed=seed)
    ended = np.zeros(worlds, dtype=bool)
    last = np.zeros((worlds, *size, 3), np.uint8)
    frames = []
    stride = max(1, round(1.0 / (MAX_FPS * env.dt)))
    for step in range(env.max_episode_length):
        if step % stride == 0:
            view = renderer.render()[CLIP_CAMERA]
            last[~ended] = view[~ended]
            frames.append(np.concatenate(list(last), axis=1))
        obs, _, terminated, truncated, info = env.step(policy(obs))
        done = (terminated | truncated).cpu().numpy() & ~ended
        if done.any():
            success = info.success.cpu().numpy() if info.success is not None else np.zeros(worlds, bool)
            for w in np.flatnonzero(done):
                _frame(last[w], (40, 200, 60) if success[w] else (220, 40, 40))
            ended |= done
        if ended.all():
            break
    frames.append(np.concatenate(list(last), axis=1))
    renderer.close()
    env.close()
    images = [Image.fromarray(f) for f in frames]
    buf = io.BytesIO()
    hold = [round(1000 * env.dt * stride)] * (len(images) - 1) + [1500]  # ms per frame; the verdicts stay up 1.5 s
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=hold, loop=0)
    return atomic_write_bytes(path, buf.getvalue())


def _frame(tile: np.ndarray, rgb: tuple[int, int, int]) -> None:
    """Draw a ``BORDER_PX`` frame of colour ``rgb`` around ``tile`` ``[H, W, 3]`` in place."""
    b = BORDER_PX
    for region in (tile[:b], tile[-b:], tile[:, :b], tile[:, -b:]):
        region[:] = rgb
