"""Batched MuJoCo on the CPU: ``N`` worlds of one MJCF model stepped together in C, on a thread pool.

This wraps :class:`mujoco.batch.Batch` (MuJoCo >= 4.0), which keeps each world's integration state as one row of a
numpy array and steps every row in C without a Python loop per world. The batch is *persistent*: one ``MjData`` per
world, so results are bit-identical to calling ``mujoco.mj_step`` on one ``MjData`` per world, at any thread count.
A non-persistent batch (one ``MjData`` per thread, serving whichever worlds the thread runs) was not: 20 iterations
of the same panda-lift training (256 worlds, 2 threads, seed 0) gave four different policies in four runs (they
parted from iteration 15 on), while with one thread or a persistent batch every run gave the same one (5 of 5). The
cause inside the shared ``MjData`` was not found (stepping the lift scene with the scripted expert's actions, resets
included, stayed identical across thread counts). A persistent batch costs about 0.2 MB more resident memory per
Panda world (4,096 worlds: 1.09 GB against 0.28 GB) at the same speed within the noise (0.97-1.05 x at 256-4,096
worlds; ``python bench/mujoco_batch_persistent.py --training-runs 3``, which also repeats the training: shared 2
distinct policies of 3, persistent 1 of 3). Physical parameters randomised per world are written into per-world
copies of model fields (``body_mass``, ``dof_damping``, ...); the model constants derived from them are recomputed
(``mj_setConst``) for the changed worlds before their next step.

Layout (``N`` worlds, numpy ``float64``, all live views of the batch's memory)::

    state [N, nstate]   mjSTATE_INTEGRATION row: time | qpos | qvel | act | warmstart | ctrl | ...
    qpos  [N, nq]       slice of state
    qvel  [N, nv]       slice of state
    ctrl  [N, nu]       slice of state (held for all ``frame_skip`` substeps of a control step)

Everything here is numpy; tasks convert to and from torch exactly once per control step.

Why not ``mujoco.rollout``: measured too (cart-pole, 2 cores), a persistent ``rollout.Rollout`` reached half
the throughput at 64 worlds and ~90 % at 1024, needs one ``MjModel`` copy per randomised world, restarts the
solver's warm start at every call (contact-rich models would drift from ``mj_step``) and copies trajectories out.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import mujoco
import numpy as np
import torch
from mujoco import batch as mjbatch

from sim.backends.physics import RANDOMIZABLE_FIELDS, JointStateViews, check_field

ASSETS_DIR = Path(__file__).resolve().parents[1] / "robots" / "assets"
"""Directory of the MJCF files shipped with the package (``sim/robots/assets``)."""

STATE_SPEC = mujoco.mjtState.mjSTATE_INTEGRATION
"""State components held in each world's row (everything ``mj_step`` reads, warm start included)."""

WORLDS_PER_THREAD = 32
"""Fewest worlds worth a thread: waking a worker costs tens of microseconds, about 30 cart-pole substeps."""


def load_model(name: str | Path) -> mujoco.MjModel:
    """Compile an MJCF model.

    Args:
        name: A bare name such as ``"cartpole"`` (read from :data:`ASSETS_DIR`) or a path to an ``.xml`` file.

    Raises:
        FileNotFoundError: No such model; the message lists the shipped ones.
    """
    path = Path(name)
    if path.suffix != ".xml":
        path = ASSETS_DIR / f"{name}.xml"
    if not path.is_file():
        shipped = sorted(p.stem for p in ASSETS_DIR.glob("*.xml"))
        raise FileNotFoundError(f"no MJCF model at '{path}'; shipped models: {', '.join(shipped)}")
    return mujoco.MjModel.from_xml_path(str(path))


def default_nthread(num_worlds: int) -> int:
    """Threads for ``num_worlds`` worlds: one per :data:`WORLDS_PER_THREAD` worlds, at most one per CPU."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cpus, num_worlds // WORLDS_PER_THREAD))


class MujocoBatch:
    """``num_worlds`` copies of ``model`` stepped together; one control step is ``frame_skip`` physics steps.

    Args:
        model: Nominal compiled model. It is copied; later edits to it do not reach the batch.
        num_worlds: Number of worlds ``N``.
        frame_skip: Physics steps (of ``model.opt.timestep``) per :meth:`step`.
        nthread: Worker threads (including the caller's); ``None`` picks :func:`default_nthread`.

    Attributes:
        model: The nominal model (per-world parameters live in the batch, see :meth:`set_field`).
        num_worlds: ``N``.
        frame_skip: Physics steps per control step.
        control_dt: Duration of one :meth:`step`, seconds (``frame_skip * timestep``).
    """

    def __init__(self, model: mujoco.MjModel, num_worlds: int, frame_skip: int = 1, nthread: int | None = None) -> None:
        if num_worlds < 1 or frame_skip < 1:
            raise ValueError(f"num_worlds and frame_skip must be >= 1, got {num_worlds} and {frame_skip}")
        self.model = copy.copy(model)
        self.num_worlds = num_worlds
        self.frame_skip = frame_skip
        self.control_dt = frame_skip * float(self.model.opt.timestep)
        nthread = default_nthread(num_worlds) if nthread is None else nthread
        self._batch = mjbatch.Batch(self.model, num_worlds, nthread=nthread, persistent=True)
        self.state: np.ndarray = self._batch.state
        self.qpos: np.ndarray = self._batch.bind("qpos")
        self.qvel: np.ndarray = self._batch.bind("qvel")
        self.ctrl: np.ndarray = self._batch.bind("ctrl")
        self._stale = np.zeros(num_worlds, dtype=bool)  # per-world fields written since the last mj_setConst

    @property
    def nthread(self) -> int:
        """Threads the batch steps on."""
        return int(self._batch.nthread)

    # -------------------------------------------------------------------------------------------- stepping
    def step(self, ctrl: np.ndarray | None = None, nstep: int | None = None) -> None:
        """Advance every world by ``frame_skip`` (or ``nstep``) physics steps under constant controls.

        Args:
            ctrl: ``[N, nu]`` controls in actuator units, held for every substep (``None``: keep the current).
            nstep: Physics steps to take (default: ``frame_skip``, one control period).
        """
        self._refresh_constants()
        if ctrl is not None:
            self.ctrl[:] = ctrl
        self._batch.step(nstep=self.frame_skip if nstep is None else nstep)

    def reset(self, ids: np.ndarray, qpos: np.ndarray | None = None, qvel: np.ndarray | None = None) -> None:
        """Restart worlds ``ids`` at time 0 from ``qpos``/``qvel`` (defaults: ``model.qpos0``, rest).

        Controls, applied forces, activations and the solver warm start are cleared; per-world model fields
        (randomised parameters) are kept.

        Args:
            ids: Sorted, unique world indices ``[n]``.
            qpos: ``[n, nq]`` initial joint positions, or ``None``.
            qvel: ``[n, nv]`` initial joint velocities, or ``None``.
        """
        ids = np.asarray(ids, dtype=np.int32)
        if ids.size == 0:
            return
        self._batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        if qpos is not None:
            self.qpos[ids] = qpos
        if qvel is not None:
            self.qvel[ids] = qvel

    # ------------------------------------------------------------------------------- per-world parameters
    def nominal(self, name: str) -> np.ndarray:
        """The nominal model's value of field ``name`` (for example ``body_mass``: ``[nbody]``); read-only."""
        value: np.ndarray = getattr(self.model, name).copy()
        value.flags.writeable = False
        return value

    def field(self, name: str) -> np.ndarray:
        """Per-world values ``[N, ...]`` of model field ``name``, read-only (write with :meth:`set_field`)."""
        values = self._batch.expanded(name)
        if values is None:
            return np.broadcast_to(getattr(self.model, name), (self.num_worlds, *getattr(self.model, name).shape))
        return values

    def set_field(
        self, name: str, ids: np.ndarray, values: np.ndarray, index: int | tuple[int | slice, ...] = ()
    ) -> None:
        """Write model field ``name`` (element ``index`` of each world's array) for worlds ``ids``.

        Args:
            name: ``MjModel`` field, e.g. ``dof_damping`` or ``actuator_gear``.
            ids: World indices ``[n]``.
            values: Values of ``field[ids, *index]``, e.g. ``[n]`` for one element per world.
            index: Element of each world's array (``()``: the whole array), e.g. ``(dof,)`` or ``(act, 0)``.
        """
        where = index if isinstance(index, tuple) else (index,)
        self._batch.expand(name)[(ids, *where)] = values
        self._stale[ids] = True

    def set_body_mass(self, ids: np.ndarray, body: int, mass: np.ndarray) -> None:
        """Set the mass (kg) of ``body`` in worlds ``ids``, scaling its inertia by the same factor.

        A uniform change of density keeps the centre of mass, the inertia's shape, and so its validity.

        Args:
            ids: World indices ``[n]``.
            body: Body id.
            mass: ``[n]`` new masses, kg (> 0).
        """
        factor = np.asarray(mass, dtype=np.float64) / self.model.body_mass[body]
        self.set_field("body_mass", ids, mass, (body,))
        self.set_field("body_inertia", ids, factor[:, None] * self.model.body_inertia[body], (body,))

    def _refresh_constants(self) -> None:
        """Recompute derived constants (``mj_setConst``) of worlds whose model fields changed."""
        if self._stale.any():
            self._batch.set_const(np.flatnonzero(self._stale).astype(np.int32))
            self._stale[:] = False

    def close(self) -> None:
        """Release the thread pool and the per-world memory (the batch cannot be used afterwards)."""
        for name in ("state", "qpos", "qvel", "ctrl", "_batch"):
            self.__dict__.pop(name, None)


class MujocoPhysics(JointStateViews):
    """:class:`~sim.backends.physics.Physics` on :class:`MujocoBatch`: torch views of the batch's numpy rows.

    ``qpos`` / ``qvel`` are zero-copy ``float64`` views of the integration state; site poses are copied out of the
    batch after every step. Tensors live on the CPU whatever ``device`` the task uses (the task moves them once).
    """

    name = "mujoco"
    supported_fields = RANDOMIZABLE_FIELDS

    def __init__(self, model: mujoco.MjModel, num_worlds: int, frame_skip: int, device: torch.device) -> None:
        self.batch = MujocoBatch(model, num_worlds, frame_skip)
        self.model = self.batch.model
        self.num_worlds = num_worlds
        self.control_dt = self.batch.control_dt
        self.device = torch.device("cpu")
        self._qpos = torch.from_numpy(self.batch.qpos)
        self._qvel = torch.from_numpy(self.batch.qvel)
        self._site_xpos = self.batch._batch.bind("site_xpos")
        self._site_xmat = self.batch._batch.bind("site_xmat")
        self._sensordata = self.batch._batch.bind("sensordata")
        self._xfrc = torch.from_numpy(self.batch._batch.bind("xfrc_applied"))
        self.batch._batch.forward(stage=mujoco.mjtStage.mjSTAGE_POS)

    def step(self, ctrl: torch.Tensor, substeps: int | None = None) -> None:
        """Advance one control period (or ``substeps`` physics steps) under ``ctrl [N, nu]``."""
        self.batch.step(ctrl.detach().to("cpu", torch.float64).numpy(), substeps)

    def reset(self, ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Restart worlds ``ids`` at ``qpos`` / ``qvel`` and recompute their kinematics."""
        rows = ids.to("cpu", torch.int64).numpy().astype(np.int32)
        self.batch.reset(rows, qpos.to("cpu", torch.float64).numpy(), qvel.to("cpu", torch.float64).numpy())
        self.batch._refresh_constants()
        self.batch._batch.forward(rows, stage=mujoco.mjtStage.mjSTAGE_POS)

    @property
    def site_xpos(self) -> torch.Tensor:
        """Site positions ``[N, nsite, 3]``, m."""
        return torch.from_numpy(np.array(self._site_xpos))

    @property
    def site_xmat(self) -> torch.Tensor:
        """Site orientations ``[N, nsite, 9]``."""
        return torch.from_numpy(np.array(self._site_xmat))

    @property
    def sensordata(self) -> torch.Tensor:
        """Sensor readings ``[N, nsensordata]``."""
        return torch.from_numpy(np.array(self._sensordata))

    def set_external_force(self, body: int, force: torch.Tensor) -> None:
        """Force ``[N, 3]`` (N, world frame) at ``body``'s centre of mass, held until changed."""
        self._xfrc[:, body, :3] = force.to("cpu", torch.float64)

    def set_field(
        self, name: str, ids: torch.Tensor, values: torch.Tensor, index: tuple[int | slice, ...] = ()
    ) -> None:
        """Write model field ``name[ids, *index]`` (``opt.gravity`` included)."""
        check_field(self, name)
        self.batch.set_field(name, ids.to("cpu").numpy(), values.to("cpu", torch.float64).numpy(), index)

    def state(self) -> dict[str, torch.Tensor]:
        """Integration state rows and every per-world model field written so far (copies)."""
        out = {"state": torch.from_numpy(self.batch.state.copy())}
        for name in sorted(self.supported_fields):
            values = self.batch._batch.expanded(name)
            if values is not None:
                out[f"field/{name}"] = torch.from_numpy(np.array(values))
        return out

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state`."""
        self.batch.state[:] = state["state"].numpy()
        everyone = np.arange(self.num_worlds)
        for key, values in state.items():
            if key.startswith("field/"):
                self.batch.set_field(key.removeprefix("field/"), everyone, values.numpy())
        self.batch._refresh_constants()
        self.batch._batch.forward(stage=mujoco.mjtStage.mjSTAGE_POS)

    def close(self) -> None:
        """Release the batch."""
        self.batch.close()
