"""Simulation backends: the engines MuJoCo tasks step on, behind one interface (:class:`~sim.backends.physics.Physics`).

:func:`make_physics` is the one place that knows the engines: ``mujoco`` (``mujoco.batch``, CPU) in
:mod:`sim.backends.mujoco_batch`, ``mjwarp`` (MuJoCo Warp, CUDA or Warp's CPU device) in :mod:`sim.backends.mjwarp`,
``isaacgym`` (NVIDIA Isaac Gym's tensor API, PhysX; the robot loaded from the file the MuJoCo model was compiled
from) in :mod:`sim.backends.isaac_gym`.
An engine imports only :mod:`sim.backends.physics` (the interface and its checks); adding one is a module and a
branch here.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import torch

from sim.backends.physics import BackendError, Physics

BACKENDS = ("mujoco", "mjwarp", "isaacgym")
"""Engines a MuJoCo task can run on (``env.backend``)."""


def make_physics(
    backend: str,
    model: mujoco.MjModel,
    num_worlds: int,
    frame_skip: int,
    device: torch.device,
    asset: Path | None = None,
) -> Physics:
    """Build backend ``backend`` for ``num_worlds`` worlds of ``model``; ``asset`` is the URDF or MJCF file the
    model was compiled from (Isaac Gym loads the robot from it).

    Raises:
        BackendError: Unknown backend, ``mjwarp`` without ``mujoco-warp`` installed, ``isaacgym`` without Isaac Gym
            or for a task that names no asset file.
    """
    if backend == "mujoco":
        from sim.backends.mujoco_batch import MujocoPhysics

        return MujocoPhysics(model, num_worlds, frame_skip, device)
    if backend == "mjwarp":
        try:
            from sim.backends.mjwarp import MjwarpPhysics
        except ImportError as err:
            raise BackendError(
                f"backend 'mjwarp' needs the mujoco-warp package ({err}); install it with pip install -e '.[mjwarp]'"
            ) from None
        return MjwarpPhysics(model, num_worlds, frame_skip, device)
    if backend == "isaacgym":
        from sim.backends.isaac_gym import IsaacGymPhysics

        if asset is None:
            raise BackendError("backend 'isaacgym' loads the robot from its URDF or MJCF file; this task names none")
        return IsaacGymPhysics(model, asset, num_worlds, frame_skip, device)
    raise BackendError(f"unknown backend '{backend}'; choose one of: {', '.join(BACKENDS)}")
