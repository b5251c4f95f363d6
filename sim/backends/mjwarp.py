"""MuJoCo Warp: all worlds in one batched ``Model`` / ``Data`` on a Warp device (CUDA, or Warp's CPU device).

State is shared with torch without host copies: ``qpos``, ``qvel``, ``ctrl`` and the site poses are
``wp.to_torch`` views of the Warp arrays (``float32``), so a task on ``--device cuda`` reads and writes GPU memory
directly. A per-world model field starts shared by all worlds (leading dimension 1, MuJoCo Warp's broadcast) and is
expanded to ``[N, ...]`` the first time a world gets its own value; ``set_const`` then recomputes the constants
derived from it (``body_subtreemass``, the dof inverse weights, ...) before the next step.

On CUDA one control period (``frame_skip`` calls of ``mjw.step``) is captured once as a CUDA graph and replayed;
a model field re-allocated by expansion invalidates the graph, which is captured again at the next step.

Kernel compilation happens at the first step of a new model (about a minute on the CPU device, cached in Warp's
kernel cache — ``~/.cache/warp`` — for later runs); :attr:`MjwarpPhysics.compile_s` reports it.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

from sim.backends.physics import RANDOMIZABLE_FIELDS, JointStateViews, check_field

wp.config.quiet = True  # type: ignore[attr-defined]  # one summary line of compile time (below) instead of one line per Warp module

NCONMAX_PER_WORLD = 16
"""Contacts reserved per world and free body (a Panda task's cube on the table and in the fingers; a legged robot's
feet), scaled by :func:`free_bodies`."""
DERIVED_FIELDS = ("body_subtreemass", "dof_invweight0", "body_invweight0", "actuator_acc0", "geom_rbound", "geom_aabb")
"""Model constants ``mjw.set_const`` recomputes from the fields we randomise (mass, inertia, armature, sizes)."""
NJMAX_PER_WORLD = 96
"""Constraint rows reserved per world and free body (joint limits, friction loss, the finger equality, contacts),
scaled by :func:`free_bodies`: three cubes on a table overflow 96 rows (``panda-multitask``)."""


def free_bodies(model: mujoco.MjModel) -> int:
    """Free joints of ``model`` (at least 1): what the contact and constraint buffers are sized by."""
    return max(1, int((model.jnt_type == mujoco.mjtJoint.mjJNT_FREE).sum()))


def warp_device(device: torch.device) -> str:
    """The Warp device for a torch device: ``cuda:k`` for CUDA, else ``cpu``."""
    if device.type == "cuda":
        return f"cuda:{device.index or 0}"
    return "cpu"


class MjwarpPhysics(JointStateViews):
    """:class:`~sim.backends.physics.Physics` on MuJoCo Warp (see the module docstring)."""

    name = "mjwarp"
    supported_fields = RANDOMIZABLE_FIELDS

    def __init__(self, model: mujoco.MjModel, num_worlds: int, frame_skip: int, device: torch.device) -> None:
        if num_worlds < 1 or frame_skip < 1:
            raise ValueError(f"num_worlds and frame_skip must be >= 1, got {num_worlds} and {frame_skip}")
        self.model = model
        self.num_worlds = num_worlds
        self.frame_skip = frame_skip
        self.control_dt = frame_skip * float(model.opt.timestep)
        self.wp_device = warp_device(device)
        self.device = torch.device("cuda", int(self.wp_device.split(":")[1])) if device.type == "cuda" else device
        with wp.ScopedDevice(self.wp_device):
            self.m = mjw.put_model(model)
            self.d = mjw.make_data(
                model,
                nworld=num_worlds,
                nconmax=NCONMAX_PER_WORLD * free_bodies(model) * num_worlds,
                njmax=NJMAX_PER_WORLD * free_bodies(model),
            )
        self._views()
        self._graph: Any = None
        self._stale = False
        self.compile_s: float | None = None

    def _views(self) -> None:
        d = self.d
        self._qpos = wp.to_torch(d.qpos)
        self._qvel = wp.to_torch(d.qvel)
        self._ctrl = wp.to_torch(d.ctrl)
        self._site_xpos = wp.to_torch(d.site_xpos)
        self._site_xmat = wp.to_torch(d.site_xmat)
        self._sensordata = wp.to_torch(d.sensordata)
        self._xfrc = wp.to_torch(d.xfrc_applied)

    # -------------------------------------------------------------------------------------------- stepping
    def _substeps(self, n: int | None = None) -> None:
        for _ in range(self.frame_skip if n is None else n):
            mjw.step(self.m, self.d)

    def step(self, ctrl: torch.Tensor, substeps: int | None = None) -> None:
        """Advance one control period under ``ctrl [N, nu]`` (copied into the Warp array, no host round trip); with
        ``substeps``, that many physics steps (part of a period: not captured in the period's CUDA graph)."""
        self._ctrl.copy_(ctrl)
        with wp.ScopedDevice(self.wp_device):
            self._refresh_constants()
            if substeps is not None and self.compile_s is not None:
                self._substeps(substeps)
            elif self.compile_s is None:  # first step: compiles (or loads from the cache) every kernel
                start = time.perf_counter()
                self._substeps(substeps)
                wp.synchronize_device(self.wp_device)
                self.compile_s = time.perf_counter() - start
                print(
                    f"MuJoCo Warp on {self.wp_device}: kernels compiled or loaded in {self.compile_s:.1f} s "
                    f"(first step; cached in Warp's kernel cache for later runs)",
                    file=sys.stderr,
                    flush=True,
                )
            elif self.wp_device.startswith("cuda"):
                if self._graph is None:
                    with wp.ScopedCapture() as capture:
                        self._substeps()
                    self._graph = capture.graph
                wp.capture_launch(self._graph)
            else:
                self._substeps()

    def reset(self, ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Restart worlds ``ids`` at ``qpos`` / ``qvel``: ``mjw.reset_data`` on a world mask, then the state."""
        if ids.numel() == 0:
            return
        mask = torch.zeros(self.num_worlds, dtype=torch.bool, device=self.device)
        mask[ids.to(self.device)] = True
        with wp.ScopedDevice(self.wp_device):
            self._refresh_constants()
            mjw.reset_data(self.m, self.d, reset=wp.from_torch(mask))
            rows = ids.to(self.device)
            self._qpos[rows] = qpos.to(self.device, torch.float32)
            self._qvel[rows] = qvel.to(self.device, torch.float32)
            mjw.kinematics(self.m, self.d)  # site poses of the reset worlds (all worlds: one cheap launch)

    @property
    def site_xpos(self) -> torch.Tensor:
        """Site positions ``[N, nsite, 3]``, m (live view)."""
        return self._site_xpos

    @property
    def site_xmat(self) -> torch.Tensor:
        """Site orientations ``[N, nsite, 9]`` (row-major)."""
        return self._site_xmat.reshape(self.num_worlds, -1, 9)

    @property
    def sensordata(self) -> torch.Tensor:
        """Sensor readings ``[N, nsensordata]`` (live view)."""
        return self._sensordata

    def set_external_force(self, body: int, force: torch.Tensor) -> None:
        """Force ``[N, 3]`` (N, world frame) at ``body``'s centre of mass, held until changed."""
        self._xfrc[:, body, :3] = force.to(self.device, torch.float32)

    # ------------------------------------------------------------------------------- per-world parameters
    def _field(self, name: str) -> tuple[Any, str]:
        if name.startswith("opt."):
            return self.m.opt, name.removeprefix("opt.")
        return self.m, name

    def _expanded(self, name: str) -> torch.Tensor:
        """Per-world torch view ``[N, ...]`` of field ``name``, expanding it from its shared row on first use."""
        owner, attr = self._field(name)
        arr = getattr(owner, attr)
        if arr.shape[0] != self.num_worlds:
            view = wp.to_torch(arr)
            full = view.expand(self.num_worlds, *view.shape[1:]).contiguous()
            with wp.ScopedDevice(self.wp_device):
                setattr(owner, attr, wp.from_torch(full, dtype=arr.dtype))
            self._graph = None  # the captured graph points at the old array
            arr = getattr(owner, attr)
        return wp.to_torch(arr)

    def set_field(
        self, name: str, ids: torch.Tensor, values: torch.Tensor, index: tuple[int | slice, ...] = ()
    ) -> None:
        """Write model field ``name[ids, *index]`` (expanded per world on first use)."""
        check_field(self, name)
        view = self._expanded(name)
        view[(ids.to(self.device), *index)] = values.to(self.device, view.dtype)
        self._stale = True

    def _refresh_constants(self) -> None:
        """``set_const`` for changed fields. It writes a derived field only for as many worlds as that field holds,
        so every derived field is given per-world rows first (else all worlds would share world 0's constants)."""
        if self._stale:
            for name in DERIVED_FIELDS:
                if getattr(self.m, name).shape[0] != self.num_worlds:
                    self._expanded(name)
            mjw.set_const(self.m, self.d)
            self._stale = False

    # ---------------------------------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, torch.Tensor]:
        """State arrays and every per-world model field (copies, on the CPU)."""
        names = ("qpos", "qvel", "act", "ctrl", "qacc_warmstart", "time")
        out = {k: wp.to_torch(getattr(self.d, k)).clone().cpu() for k in names}
        for name in sorted(self.supported_fields):
            owner, attr = self._field(name)
            arr = getattr(owner, attr)
            if arr.shape[0] == self.num_worlds:
                out[f"field/{name}"] = wp.to_torch(arr).clone().cpu()
        return out

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state`."""
        for key, values in state.items():
            if key.startswith("field/"):
                name = key.removeprefix("field/")
                self._expanded(name).copy_(values.to(self.device))
                self._stale = True
            else:
                wp.to_torch(getattr(self.d, key)).copy_(values.to(self.device))
        with wp.ScopedDevice(self.wp_device):
            self._refresh_constants()
            mjw.kinematics(self.m, self.d)

    def close(self) -> None:
        """Drop the Warp arrays (freed when no view is left)."""
        self._graph = None
        for name in ("_qpos", "_qvel", "_ctrl", "_site_xpos", "_site_xmat", "_sensordata", "_xfrc"):
            self.__dict__.pop(name, None)
