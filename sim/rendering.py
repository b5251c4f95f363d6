"""Offscreen camera images of a batched MuJoCo task: what a camera on (or beside) the robot would see in each world.

Used to record demonstrations with images (``robot-rl collect --images``) and to run image-conditioned students
in evaluation. Rendering is MuJoCo's OpenGL renderer with one context per camera: each world is drawn into its own
cell of one offscreen grid (:class:`_Sheet`) and the grid is read back at once, since reading the framebuffer costs
about as much as drawing it under software EGL, mostly per read: 1.8-2.1 x faster than one image at a time
(``bench/camera_rendering.py``; docs/benchmarks.md, "Camera images"). Where a cell lies in the framebuffer rounds a
few anti-aliased edge pixels differently from drawing each image alone at its corner (under 0.02 % of the values).
On a machine without a display and without ``MUJOCO_GL``, the renderer uses EGL, and only a process that renders
loads it (``MUJOCO_GL`` is read when MuJoCo is imported, so setting it for everyone would load EGL into every
process that imports ``sim``).

What is drawn: each world's current joint positions (``qpos``), in the nominal model except for the geometry sizes
a task asks to draw per world (``env.drawn_geom_sizes()``: the randomised cube size of the Panda cube tasks) and the
colours it gives each world (``env.drawn_geom_rgba()``: which cube is red in ``panda-multitask``). With a
:class:`VisualRandomization`, each world also draws its own light, colours, camera mount error and pixel noise,
once per episode (:meth:`CameraRenderer.redraw`): domain randomisation of what the camera sees (Tobin et al. 2017),
so that a student does not learn the renderer's exact look.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


class RenderError(ValueError):
    """A camera is unknown or offscreen rendering is unavailable; the message says which and what to do."""


def _headless_egl() -> None:
    """Point MuJoCo's renderer at EGL when no backend was chosen (``MUJOCO_GL``) and there is no display.

    MuJoCo picks its GL backend when it is imported (GLFW by default, which needs a display); its renderer looks the
    context class up when a renderer is made (``mujoco.rendering.classic.gl_context.GLContext``, MuJoCo 4.0).
    """
    if os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    try:
        from mujoco.egl import GLContext
        from mujoco.rendering.classic import gl_context
    except (ImportError, OSError):  # no EGL here: the renderer reports its own backend's failure
        return
    gl_context.GLContext = GLContext


@dataclass(frozen=True)
class VisualRandomization:
    """Per-episode randomisation of what the cameras see; every draw is uniform in the stated range.

    Attributes:
        light_scale: Range of each light's diffuse intensity, as factors of the model's.
        light_shift_m: Largest shift of each light's position per axis, m.
        color_jitter: Largest change of each geom's RGB per channel (colours are in [0, 1]).
        camera_shift_m: Largest shift of each camera's position per axis, m (mounting tolerance).
        camera_tilt_deg: Largest rotation of each camera about a random axis, degrees (mounting tolerance).
        fovy_deg: Largest change of each camera's vertical field of view, degrees (lens and calibration).
        pixel_noise: Standard deviation of Gaussian noise added to every pixel, in 0..255 units (sensor noise).
    """

    light_scale: tuple[float, float] = (0.5, 1.3)
    light_shift_m: float = 0.3
    color_jitter: float = 0.15
    camera_shift_m: float = 0.005
    camera_tilt_deg: float = 2.0
    fovy_deg: float = 3.0
    pixel_noise: float = 3.0

    def __post_init__(self) -> None:
        lo, hi = self.light_scale
        if not 0 <= lo <= hi:
            raise ValueError(f"visual randomisation light_scale must be 0 <= low <= high, got {self.light_scale}")
        for name in ("light_shift_m", "color_jitter", "camera_shift_m", "camera_tilt_deg", "fovy_deg", "pixel_noise"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"visual randomisation {name} must be >= 0, got {getattr(self, name)}")


SHEET_PX = 2048
"""Largest side of the offscreen framebuffer each camera's images are tiled into, pixels (2,048 holds 1,024 images of
64 x 64; measured with Mesa's software EGL, the renderer CI and `make test` use). An image larger than this gets a
sheet of its own size."""


class _Sheet:
    """One camera's GL context, whose offscreen framebuffer holds a grid of ``height x width`` cells: each world is
    drawn into its own cell and a full grid is read back at once. Reading pixels costs about as much as drawing them
    under software EGL, and most of it is per read, not per pixel: one read per grid instead of one per image.

    Args:
        model: The model the context is made for; its offscreen buffer size is raised to the grid's.
        height, width: Image size, pixels.
        count: Images per render (the worlds); the grid holds at most :data:`SHEET_PX` pixels a side.
    """

    def __init__(self, model: Any, height: int, width: int, count: int) -> None:
        import mujoco
        from mujoco.rendering.classic import gl_context

        self.h, self.w = height, width
        self.cols = max(1, min(count, SHEET_PX // width))
        self.rows = max(1, min(-(-count // self.cols), SHEET_PX // height))
        self.cells = self.rows * self.cols
        size = (self.cols * width, self.rows * height)
        model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), size[0])
        model.vis.global_.offheight = max(int(model.vis.global_.offheight), size[1])
        if gl_context.GLContext is None:
            raise RenderError("no OpenGL backend for offscreen rendering; set MUJOCO_GL=egl (or osmesa)")
        self.gl = gl_context.GLContext(*size)
        self.gl.make_current()
        self.context = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self.context)
        self.scene = mujoco.MjvScene(model, maxgeom=10000)
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self.pixels = np.empty((size[1], size[0], 3), np.uint8)

    def draw(self, model: Any, data: Any, camera_id: int, options: Any, cell: int) -> None:
        """Draw ``data``'s scene from camera ``camera_id`` into grid cell ``cell`` (row-major)."""
        import mujoco

        row, col = divmod(cell, self.cols)
        self.camera.fixedcamid = camera_id
        mujoco.mjv_updateScene(model, data, options, None, self.camera, mujoco.mjtCatBit.mjCAT_ALL.value, self.scene)
        mujoco.mjr_render(mujoco.MjrRect(col * self.w, row * self.h, self.w, self.h), self.scene, self.context)

    def read(self, count: int) -> np.ndarray:
        """The first ``count`` cells' images, ``uint8 [count, H, W, 3]`` RGB, top row first."""
        import mujoco

        rows = -(-count // self.cols)
        used = self.pixels[: rows * self.h]
        mujoco.mjr_readPixels(used, None, mujoco.MjrRect(0, 0, self.cols * self.w, rows * self.h), self.context)
        grid = used.reshape(rows, self.h, self.cols, self.w, 3)[:, ::-1]  # GL rows run bottom-up
        return grid.transpose(0, 2, 1, 3, 4).reshape(rows * self.cols, self.h, self.w, 3)[:count]

    def close(self) -> None:
        """Release the GL context."""
        self.gl.make_current()
        self.context.free()
        self.gl.free()


class CameraRenderer:
    """Renders every world of ``env`` from named cameras of its MuJoCo model.

    Args:
        env: A task built on a MuJoCo model (``env._model``) with ``env.physics.qpos [N, nq]``.
        cameras: Camera name -> image ``(height, width)``, pixels.
        randomization: Visual randomisation (``None``: every world looks like the nominal model).
        seed: Seed of the visual draws.

    Raises:
        RenderError: The task has no MuJoCo model, a camera is not in it, or no GL context could be made.
    """

    def __init__(
        self,
        env: Any,
        cameras: Mapping[str, tuple[int, int]],
        randomization: VisualRandomization | None = None,
        seed: int = 0,
    ) -> None:
        import mujoco

        model = getattr(env, "_model", None)
        if not isinstance(model, mujoco.MjModel):
            raise RenderError(f"task '{env.task_name}' has no MuJoCo model to render images from")
        names = [model.camera(i).name for i in range(model.ncam)]
        for c in cameras:
            if c not in names:
                raise RenderError(f"camera '{c}' is not in the task's model (cameras: {', '.join(names) or 'none'})")
        self.env, self.cameras, self.randomization = env, dict(cameras), randomization
        self.model = model = copy.deepcopy(model)  # per-world draws are written into this copy, never the task's
        self.data = mujoco.MjData(model)
        self._rng = np.random.default_rng(seed)
        self._cam_ids = {c: model.camera(c).id for c in self.cameras}
        self._nominal = {
            "light_diffuse": model.light_diffuse.copy(),
            "light_pos": model.light_pos.copy(),
            "geom_rgba": model.geom_rgba.copy(),
            "cam_pos": model.cam_pos.copy(),
            "cam_quat": model.cam_quat.copy(),
            "cam_fovy": model.cam_fovy.copy(),
        }
        n = int(env.physics.qpos.shape[0])
        self._draws = {k: np.repeat(v[None], n, 0) for k, v in self._nominal.items()}
        self.redraw(np.arange(n))
        self.options = mujoco.MjvOption()
        self.options.sitegroup[:] = 0  # sites (the tcp marker) are for the viewer, not what a camera sees
        self._sheets: dict[str, _Sheet] = {}
        _headless_egl()
        try:
            for c, (h, w) in self.cameras.items():
                self._sheets[c] = _Sheet(model, h, w, n)
        except RenderError:
            raise
        except Exception as exc:  # no GL context: the message says which backend was tried
            raise RenderError(f"offscreen rendering failed ({exc}); set MUJOCO_GL=egl (or osmesa)") from None

    def redraw(self, worlds: np.ndarray) -> None:
        """New visual draws for ``worlds`` (indices; call it when their episodes start). No-op without
        randomisation."""
        import mujoco

        r, rng, nom = self.randomization, self._rng, self._nominal
        if r is None or len(worlds) == 0:
            return
        for w in np.asarray(worlds, dtype=np.int64):
            d = {k: v[w] for k, v in self._draws.items()}
            d["light_diffuse"][:] = nom["light_diffuse"] * rng.uniform(*r.light_scale, (len(nom["light_diffuse"]), 1))
            d["light_pos"][:] = nom["light_pos"] + rng.uniform(
                -r.light_shift_m, r.light_shift_m, nom["light_pos"].shape
            )
            rgb = nom["geom_rgba"][:, :3] + rng.uniform(-r.color_jitter, r.color_jitter, (len(nom["geom_rgba"]), 3))
            d["geom_rgba"][:, :3] = np.clip(rgb, 0.0, 1.0)
            for i in self._cam_ids.values():
                d["cam_pos"][i] = nom["cam_pos"][i] + rng.uniform(-r.camera_shift_m, r.camera_shift_m, 3)
                axis = rng.standard_normal(3)
                tilt = np.zeros(4)
                mujoco.mju_axisAngle2Quat(
                    tilt, axis / np.linalg.norm(axis), np.deg2rad(rng.uniform(0, r.camera_tilt_deg))
                )
                mujoco.mju_mulQuat(d["cam_quat"][i], nom["cam_quat"][i], tilt)
                d["cam_fovy"][i] = nom["cam_fovy"][i] + rng.uniform(-r.fovy_deg, r.fovy_deg)

    def render(self) -> dict[str, np.ndarray]:
        """Every world's current view: camera name -> ``uint8 [N, H, W, 3]`` RGB."""
        import mujoco

        qpos = self.env.physics.qpos.detach().cpu().double().numpy()
        sizes_fn = getattr(self.env, "drawn_geom_sizes", None)
        sizes = {g: v.detach().cpu().double().numpy() for g, v in (sizes_fn() if sizes_fn else {}).items()}
        nominal_sizes = {g: self.model.geom_size[g].copy() for g in sizes}
        rgba_fn = getattr(self.env, "drawn_geom_rgba", None)
        rgba = {g: v.detach().cpu().double().numpy() for g, v in (rgba_fn() if rgba_fn else {}).items()}
        nominal_rgba = {g: self._nominal["geom_rgba"][g].copy() for g in rgba}
        out = {c: np.empty((len(qpos), h, w, 3), np.uint8) for c, (h, w) in self.cameras.items()}
        for world, q in enumerate(qpos):
            for g, v in sizes.items():
                self.model.geom_size[g] = v[world]
            if self.randomization is not None:
                for name, draws in self._draws.items():
                    getattr(self.model, name)[:] = draws[world]
            for g, v in rgba.items():  # the task's colour, with this world's colour jitter (if any) on top
                jitter = self.model.geom_rgba[g, :3] - nominal_rgba[g][:3] if self.randomization is not None else 0.0
                self.model.geom_rgba[g] = v[world]
                self.model.geom_rgba[g, :3] = np.clip(v[world][:3] + jitter, 0.0, 1.0)
            self.data.qpos[:] = q
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_comPos(self.model, self.data)  # subtree centres of mass: cameras that track a body need them
            mujoco.mj_camlight(self.model, self.data)
            for c, sheet in self._sheets.items():
                cell = world % sheet.cells
                if len(self._sheets) > 1 or world == 0:
                    sheet.gl.make_current()
                sheet.draw(self.model, self.data, self._cam_ids[c], self.options, cell)
                if cell == sheet.cells - 1 or world == len(qpos) - 1:
                    out[c][world - cell : world + 1] = sheet.read(cell + 1)
        for g, v in nominal_sizes.items():
            self.model.geom_size[g] = v
        for g, v in nominal_rgba.items():
            self.model.geom_rgba[g] = v
        if self.randomization is not None and self.randomization.pixel_noise > 0:
            for c, views in out.items():
                noisy = views + self._rng.normal(0.0, self.randomization.pixel_noise, views.shape)
                out[c] = np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
        return out

    def mounts(self) -> dict[str, dict[str, Any]]:
        """Where each camera is and what it sees, for a deployment contract: the body it is fixed to, its position
        (m) and orientation (quaternion w, x, y, z) in that body's frame, MuJoCo's camera convention (looks along
        its -z, image up is +y), vertical field of view (degrees) and image size. Nominal values: visual
        randomisation draws around them."""
        out = {}
        nom = self._nominal
        for c, (h, w) in self.cameras.items():
            i = self.model.camera(c).id
            body = self.model.body(int(self.model.cam_bodyid[i])).name or "world"
            out[c] = {
                "body": body,
                "pos_m": [round(float(x), 6) for x in nom["cam_pos"][i]],
                "quat_wxyz": [round(float(x), 6) for x in nom["cam_quat"][i]],
                "convention": "MuJoCo camera frame: looks along -z, image up is +y",
                "fovy_deg": float(nom["cam_fovy"][i]),
                "height": h,
                "width": w,
            }
        return out

    def close(self) -> None:
        """Release the GL contexts."""
        for sheet in self._sheets.values():
            sheet.close()
        self._sheets.clear()
