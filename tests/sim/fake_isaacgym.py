"""A fake of Isaac Gym's ``gymapi`` and ``gymtorch``: just enough of the API that
:mod:`sim.backends.isaac_gym` calls, with trivial physics, to test the adapter's logic (name mapping, layouts,
frames, the actuator law, resets, randomised properties) where Isaac Gym cannot be installed.

Deliberately unlike MuJoCo where the real Isaac Gym differs too: DOFs and rigid bodies in alphabetical order (Isaac
Gym orders them depth-first, not as the MuJoCo model does), quaternions ``x, y, z, w``, root velocities of the centre
of mass with the angular velocity in the world frame, per-actor property arrays that must be written back.

Physics: no contacts and no gravity; each DOF integrates ``qdd = (effort - damping qd) / (1 + armature)`` (semi-
implicit Euler); the root moves with its velocities; every body sits at the root's pose. Calls are recorded for the
tests (``gym.efforts``: each substep's DOF efforts; ``gym.forces``: applied body forces).
"""

from __future__ import annotations

import types
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

DOF_MODE_EFFORT = 3
UP_AXIS_Z = 1
SIM_PHYSX = 1
ENV_SPACE = 1
DOF_PROPS = np.dtype(
    [("hasLimits", "?"), ("lower", "f4"), ("upper", "f4"), ("driveMode", "i4"), ("velocity", "f4"), ("effort", "f4"),
     ("stiffness", "f4"), ("damping", "f4"), ("friction", "f4"), ("armature", "f4")]
)  # fmt: skip


@dataclass
class Vec3:
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0


@dataclass
class Transform:
    p: Vec3 = field(default_factory=Vec3)


class _Params:
    def __init__(self) -> None:
        self.physx = types.SimpleNamespace()


class SimParams(_Params):
    pass


class PlaneParams:
    normal = Vec3()
    static_friction = dynamic_friction = restitution = 1.0


class AssetOptions:
    pass


@dataclass
class BodyProps:
    mass: float = 1.0
    com: Vec3 = field(default_factory=Vec3)


@dataclass
class ShapeProps:
    friction: float = 1.0


@dataclass
class IndexRange:
    start: int
    count: int


@dataclass
class Asset:
    dofs: list[str]
    bodies: list[str]
    shapes: list[int]  # collision shapes per body: its own, then those of the links fused into it


def _read_urdf(path: Path) -> Asset:
    """Movable joints and the links left after fusing fixed joints, each sorted by name, and their shape counts."""
    root = ET.parse(path).getroot()
    parent = {j.find("child").get("link"): (j.find("parent").get("link"), j.get("type"))  # type: ignore[union-attr]
              for j in root.findall("joint")}  # fmt: skip
    dofs = sorted(j.get("name", "") for j in root.findall("joint") if j.get("type") in ("revolute", "continuous"))
    bodies = sorted(
        n for link in root.findall("link") if (n := link.get("name", "")) and parent.get(n, ("", ""))[1] != "fixed"
    )
    shapes = dict.fromkeys(bodies, 0)
    for link in root.findall("link"):
        name = link.get("name", "")
        while name not in shapes:  # fused into its parent
            name = parent[name][0]
        shapes[name] += len(link.findall("collision"))
    return Asset(dofs, bodies, [shapes[b] for b in bodies])


class Gym:
    """The fake ``Gym`` (see the module docstring)."""

    def __init__(self) -> None:
        self.asset: Asset | None = None
        self.envs: list[dict[str, Any]] = []
        self.plane: PlaneParams | None = None
        self.params: SimParams | None = None
        self.efforts: list[torch.Tensor] = []
        self.forces: list[torch.Tensor] = []
        self.simulated = 0

    def create_sim(self, compute: int, graphics: int, kind: int, params: SimParams) -> object:
        self.params = params
        return object()

    def add_ground(self, sim: object, plane: PlaneParams) -> None:
        self.plane = plane

    def load_asset(self, sim: object, root: str, filename: str, options: AssetOptions) -> Asset:
        self.asset = _read_urdf(Path(root) / filename)
        self.options = options
        return self.asset

    def get_asset_dof_names(self, asset: Asset) -> list[str]:
        return list(asset.dofs)

    def get_asset_rigid_body_names(self, asset: Asset) -> list[str]:
        return list(asset.bodies)

    def get_asset_rigid_body_shape_indices(self, asset: Asset) -> list[IndexRange]:
        starts = np.cumsum([0, *asset.shapes])
        return [IndexRange(int(starts[i]), c) for i, c in enumerate(asset.shapes)]

    def create_env(self, sim: object, lower: Vec3, upper: Vec3, per_row: int) -> int:
        return len(self.envs)

    def create_actor(self, env: int, asset: Asset, pose: Transform, name: str, group: int, filt: int, seg: int) -> int:
        self.envs.append(
            {
                "dof": np.zeros(len(asset.dofs), dtype=DOF_PROPS),
                "body": [BodyProps() for _ in asset.bodies],
                "shape": [ShapeProps() for _ in range(sum(asset.shapes))],
                "filter": filt,
            }
        )
        return 0

    def get_actor_dof_properties(self, env: int, actor: int) -> np.ndarray:
        return self.envs[env]["dof"].copy()

    def set_actor_dof_properties(self, env: int, actor: int, props: np.ndarray) -> bool:
        self.envs[env]["dof"] = props.copy()
        return True

    def get_actor_rigid_body_properties(self, env: int, actor: int) -> list[BodyProps]:
        return [BodyProps(b.mass, Vec3(b.com.x, b.com.y, b.com.z)) for b in self.envs[env]["body"]]

    def set_actor_rigid_body_properties(self, env: int, actor: int, props: list[BodyProps], inertia: bool) -> bool:
        self.envs[env]["body"] = props
        return True

    def get_actor_rigid_shape_properties(self, env: int, actor: int) -> list[ShapeProps]:
        return [ShapeProps(s.friction) for s in self.envs[env]["shape"]]

    def set_actor_rigid_shape_properties(self, env: int, actor: int, props: list[ShapeProps]) -> bool:
        self.envs[env]["shape"] = props
        return True

    def prepare_sim(self, sim: object) -> None:
        assert self.asset is not None
        n, d, b = len(self.envs), len(self.asset.dofs), len(self.asset.bodies)
        self.root = torch.zeros(n, 13)
        self.root[:, 6] = 1.0
        self.dof = torch.zeros(n * d, 2)
        self.bodies = torch.zeros(n * b, 13)
        self.contact = torch.zeros(n * b, 3)
        self.effort = torch.zeros(n * d)

    def acquire_actor_root_state_tensor(self, sim: object) -> torch.Tensor:
        return self.root

    def acquire_dof_state_tensor(self, sim: object) -> torch.Tensor:
        return self.dof

    def acquire_rigid_body_state_tensor(self, sim: object) -> torch.Tensor:
        return self.bodies

    def acquire_net_contact_force_tensor(self, sim: object) -> torch.Tensor:
        return self.contact

    def _refresh_bodies(self) -> None:
        n = self.root.shape[0]
        self.bodies.view(n, -1, 13)[:] = self.root[:, None, :]

    def refresh_actor_root_state_tensor(self, sim: object) -> None:
        self._refresh_bodies()

    def refresh_dof_state_tensor(self, sim: object) -> None:
        pass

    def refresh_rigid_body_state_tensor(self, sim: object) -> None:
        self._refresh_bodies()

    def refresh_net_contact_force_tensor(self, sim: object) -> None:
        pass

    def set_dof_actuation_force_tensor(self, sim: object, effort: torch.Tensor) -> bool:
        self.effort = effort.reshape(-1).clone()
        self.efforts.append(self.effort.clone())
        return True

    def apply_rigid_body_force_tensors(
        self, sim: object, force: torch.Tensor, torque: torch.Tensor, space: int
    ) -> bool:
        self.forces.append(force.clone())
        return True

    def simulate(self, sim: object) -> None:
        assert self.params is not None
        dt, n = float(self.params.dt), self.root.shape[0]
        props = np.concatenate([e["dof"] for e in self.envs])
        damping = torch.tensor(np.ascontiguousarray(props["damping"]), dtype=torch.float32)
        armature = torch.tensor(np.ascontiguousarray(props["armature"]), dtype=torch.float32)
        qdd = (self.effort - damping * self.dof[:, 1]) / (1.0 + armature)
        self.dof[:, 1] += dt * qdd
        self.dof[:, 0] += dt * self.dof[:, 1]
        self.root[:, 0:3] += dt * self.root[:, 7:10]
        self.simulated += 1
        assert n == len(self.envs)

    def fetch_results(self, sim: object, wait: bool) -> None:
        pass

    def set_actor_root_state_tensor_indexed(self, sim: object, root: torch.Tensor, ids: torch.Tensor, n: int) -> bool:
        assert ids.dtype == torch.int32 and n == ids.numel()
        self.reset_ids = ids.clone()
        return True  # the adapter wrote into the acquired tensor itself

    def set_dof_state_tensor_indexed(self, sim: object, dof: torch.Tensor, ids: torch.Tensor, n: int) -> bool:
        assert ids.dtype == torch.int32 and n == ids.numel()
        return True

    def destroy_sim(self, sim: object) -> None:
        pass


_GYM = Gym()


def acquire_gym() -> Gym:
    """A fresh fake per test session module state (the adapter acquires it once per backend)."""
    global _GYM
    _GYM = Gym()
    return _GYM


def last_gym() -> Gym:
    """The gym the last backend acquired."""
    return _GYM


gymapi = types.SimpleNamespace(
    acquire_gym=acquire_gym, SimParams=SimParams, PlaneParams=PlaneParams, AssetOptions=AssetOptions, Vec3=Vec3,
    Transform=Transform, DOF_MODE_EFFORT=DOF_MODE_EFFORT, UP_AXIS_Z=UP_AXIS_Z, SIM_PHYSX=SIM_PHYSX,
    ENV_SPACE=ENV_SPACE,
)  # fmt: skip
"""The fake ``isaacgym.gymapi`` module."""
gymtorch = types.SimpleNamespace(wrap_tensor=lambda t: t, unwrap_tensor=lambda t: t)
"""The fake ``isaacgym.gymtorch``: the fake's tensors already are torch tensors."""
