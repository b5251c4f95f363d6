"""Offscreen camera images of a batched MuJoCo task: what a camera on (or beside) the robot would see in each world.

Used to record demonstrations with images (``robot-rl collect --images``) and to run image-conditioned students
in evaluation. Rendering is MuJoCo's OpenGL renderer on one context (``MUJOCO_GL=egl`` on a machine without a
display; the CLI sets it), one world after another, about 1 ms per 64 x 64 image on a CPU (software EGL).

What is drawn: each world's current joint positions (``qpos``) in the *nominal* model. Per-world geometry changes
from domain randomisation (a randomised cube size) are not drawn, nor are lighting or textures randomised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


class RenderError(ValueError):
    """A camera is unknown or offscreen rendering is unavailable; the message says which and what to do."""


class CameraRenderer:
    """Renders every world of ``env`` from named cameras of its MuJoCo model.

    Args:
        env: A task built on a MuJoCo model (``env._model``) with ``env.physics.qpos [N, nq]``.
        cameras: Camera name -> image ``(height, width)``, pixels.

    Raises:
        RenderError: The task has no MuJoCo model, a camera is not in it, or no GL context could be made.
    """

    def __init__(self, env: Any, cameras: Mapping[str, tuple[int, int]]) -> None:
        import mujoco

        model = getattr(env, "_model", None)
        if not isinstance(model, mujoco.MjModel):
            raise RenderError(f"task '{env.task_name}' has no MuJoCo model to render images from")
        names = [model.camera(i).name for i in range(model.ncam)]
        for c in cameras:
            if c not in names:
                raise RenderError(f"camera '{c}' is not in the task's model (cameras: {', '.join(names) or 'none'})")
        self.env, self.model, self.cameras = env, model, dict(cameras)
        self.data = mujoco.MjData(model)
        self.options = mujoco.MjvOption()
        self.options.sitegroup[:] = 0  # sites (the tcp marker) are for the viewer, not what a camera sees
        self._renderers: dict[tuple[int, int], Any] = {}
        try:
            for size in set(self.cameras.values()):
                self._renderers[size] = mujoco.Renderer(model, *size)
        except Exception as exc:  # no GL context: the message says which backend was tried
            raise RenderError(f"offscreen rendering failed ({exc}); set MUJOCO_GL=egl (or osmesa)") from None

    def render(self) -> dict[str, np.ndarray]:
        """Every world's current view: camera name -> ``uint8 [N, H, W, 3]`` RGB."""
        import mujoco

        qpos = self.env.physics.qpos.detach().cpu().double().numpy()
        out = {c: np.empty((len(qpos), h, w, 3), np.uint8) for c, (h, w) in self.cameras.items()}
        for world, q in enumerate(qpos):
            self.data.qpos[:] = q
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_camlight(self.model, self.data)
            for c, size in self.cameras.items():
                renderer = self._renderers[size]
                renderer.update_scene(self.data, camera=c, scene_option=self.options)
                out[c][world] = renderer.render()
        return out

    def mounts(self) -> dict[str, dict[str, Any]]:
        """Where each camera is and what it sees, for a deployment contract: the body it is fixed to, its position
        (m) and orientation (quaternion w, x, y, z) in that body's frame, MuJoCo's camera convention (looks along
        its -z, image up is +y), vertical field of view (degrees) and image size."""
        out = {}
        for c, (h, w) in self.cameras.items():
            cam = self.model.camera(c)
            body = self.model.body(int(cam.bodyid[0])).name or "world"
            out[c] = {
                "body": body,
                "pos_m": [round(float(x), 6) for x in cam.pos],
                "quat_wxyz": [round(float(x), 6) for x in cam.quat],
                "convention": "MuJoCo camera frame: looks along -z, image up is +y",
                "fovy_deg": float(cam.fovy[0]),
                "height": h,
                "width": w,
            }
        return out

    def close(self) -> None:
        """Release the GL contexts."""
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()
