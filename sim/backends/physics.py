"""The one interface a MuJoCo task sees, whichever engine steps it: ``mujoco`` (CPU) or ``mjwarp`` (Warp).

A task holds a :class:`Physics` and never touches engine objects: it writes controls, reads joint state and site
poses as torch tensors, resets worlds and writes per-world model parameters (domain randomisation). A backend only
moves state in and out; task logic (observations, rewards, resets) is written once, in torch.

Tensors (``N`` worlds, on the physics' ``device``; ``float64`` on ``mujoco``, ``float32`` on ``mjwarp``)::

    qpos [N, nq]   qvel [N, nv]   site_xpos [N, nsite, 3] m (world)   site_xmat [N, nsite, 9] (row-major)
    sensordata [N, nsensordata]   (written) xfrc_applied of one body [N, 3] N

Site poses are those MuJoCo computed in the last physics substep, i.e. of the state one substep before the
returned ``qpos`` (both engines' ``mj_step`` convention); after :meth:`Physics.reset` they are recomputed for the
reset worlds.
"""

from __future__ import annotations

from typing import Protocol

import mujoco
import torch

RANDOMIZABLE_FIELDS = frozenset(
    {
        "body_mass",
        "body_inertia",
        "body_ipos",
        "geom_friction",
        "geom_size",
        "dof_damping",
        "dof_armature",
        "dof_frictionloss",
        "actuator_gainprm",
        "actuator_biasprm",
        "opt.gravity",
    }
)
"""Model fields both backends can give per-world values (``MjModel`` names; ``opt.gravity`` for gravity)."""


class BackendError(ValueError):
    """A backend cannot do what the task or config asks (unsupported field, missing package, ...)."""


class Physics(Protocol):
    """``N`` worlds of one MuJoCo model; one :meth:`step` is one control period (``frame_skip`` substeps)."""

    name: str
    model: mujoco.MjModel
    num_worlds: int
    control_dt: float
    device: torch.device
    supported_fields: frozenset[str]

    def step(self, ctrl: torch.Tensor, substeps: int | None = None) -> None:
        """Hold controls ``ctrl [N, nu]`` (actuator units) for one control period (or ``substeps`` physics steps,
        part of one: a command that arrives within the period) and advance every world."""
        ...

    def reset(self, ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Restart worlds ``ids [n]`` (long) at ``qpos [n, nq]``, ``qvel [n, nv]`` with zero control and warm start;
        per-world model fields are kept. Site poses of those worlds are recomputed."""
        ...

    @property
    def qpos(self) -> torch.Tensor:
        """Joint positions ``[N, nq]``."""
        ...

    @property
    def qvel(self) -> torch.Tensor:
        """Joint velocities ``[N, nv]``."""
        ...

    @property
    def site_xpos(self) -> torch.Tensor:
        """Site positions ``[N, nsite, 3]``, m, world frame."""
        ...

    @property
    def site_xmat(self) -> torch.Tensor:
        """Site orientations ``[N, nsite, 9]`` (row-major rotation matrices, site to world)."""
        ...

    @property
    def sensordata(self) -> torch.Tensor:
        """Sensor readings ``[N, nsensordata]`` of the last substep (e.g. touch sensors, N)."""
        ...

    def set_external_force(self, body: int, force: torch.Tensor) -> None:
        """Apply ``force [N, 3]`` (N, world frame) at the centre of mass of ``body`` in every world until changed
        (``xfrc_applied``; a reset clears it)."""
        ...

    def set_field(
        self, name: str, ids: torch.Tensor, values: torch.Tensor, index: tuple[int | slice, ...] = ()
    ) -> None:
        """Write model field ``name`` (element ``index`` of each world's array) for worlds ``ids``.

        Derived constants (``mj_setConst``) follow before the next step. Raises :class:`BackendError` for a field
        outside :attr:`supported_fields`.
        """
        ...

    def state(self) -> dict[str, torch.Tensor]:
        """Copies of everything that decides the next steps (for exact checkpoint resume)."""
        ...

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state`."""
        ...

    def close(self) -> None:
        """Release the engine's memory."""
        ...


class JointStateViews:
    """``qpos`` and ``qvel`` as the buffers ``_qpos [N, nq]`` and ``_qvel [N, nv]``: the engine's own (live views,
    no copy) where it keeps MuJoCo's layout (``mujoco``, ``mjwarp``), the adapter's after each step otherwise
    (``isaacgym``)."""

    _qpos: torch.Tensor
    _qvel: torch.Tensor

    @property
    def qpos(self) -> torch.Tensor:
        """Joint positions ``[N, nq]``."""
        return self._qpos

    @property
    def qvel(self) -> torch.Tensor:
        """Joint velocities ``[N, nv]``."""
        return self._qvel


def check_field(physics: Physics, name: str) -> None:
    """Refuse a per-world model field the backend does not support, naming the backend and what it does support."""
    if name not in physics.supported_fields:
        raise BackendError(
            f"backend '{physics.name}' cannot randomise model field '{name}'; "
            f"supported: {', '.join(sorted(physics.supported_fields))}"
        )


def sensor_columns(model: mujoco.MjModel, *names: str) -> slice:
    """The ``sensordata`` columns of the named sensors, which the model holds one after another in the order given
    (each sensor's values in its own order): a task reads its sensors by name, so a sensor added to the model
    elsewhere cannot shift what it reads. A slice is a view on both tensors and arrays (no copy, no index upload).

    Raises:
        KeyError: A named sensor is not in the model (the message names it and the sensors there are).
        ValueError: The named sensors are not consecutive in ``sensordata``.
    """
    if not names:
        raise ValueError("sensor_columns needs at least one sensor name")
    start = end = -1
    for name in names:
        try:
            sensor = model.sensor(name)
        except KeyError:
            have = [model.sensor(i).name for i in range(model.nsensor)]
            raise KeyError(f"the model has no sensor '{name}'; it has: {', '.join(have) or 'none'}") from None
        adr, dim = int(sensor.adr[0]), int(sensor.dim[0])
        if start < 0:
            start = adr
        elif adr != end:
            raise ValueError(f"sensors {', '.join(names)} are not consecutive in sensordata ('{name}' at column {adr})")
        end = adr + dim
    return slice(start, end)
