"""Simulation backends: the engines MuJoCo tasks step on, behind one interface (:class:`~sim.backends.physics.Physics`).

:func:`make_physics` is the one place that knows the engines: ``mujoco`` (``mujoco.batch``, CPU) in
:mod:`sim.backends.mujoco_batch`, ``mjwarp`` (MuJoCo Warp, CUDA or Warp's CPU device) in :mod:`sim.backends.mjwarp`.
An engine imports only :mod:`sim.backends.physics` (the interface and its checks); adding one is a module and a
branch here.
"""

from __future__ import annotations

import mujoco
import torch

from sim.backends.physics import BackendError, Physics

BACKENDS = ("mujoco", "mjwarp")
"""Engines a MuJoCo task can run on (``env.backend``)."""


def make_physics(
    backend: str, model: mujoco.MjModel, num_worlds: int, frame_skip: int, device: torch.device
) -> Physics:
    """Build backend ``backend`` (``mujoco`` or ``mjwarp``) for ``num_worlds`` worlds of ``model``.

    Raises:
        BackendError: Unknown backend, or ``mjwarp`` without ``mujoco-warp`` installed.
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
    raise BackendError(f"unknown backend '{backend}'; choose one of: {', '.join(BACKENDS)}")
