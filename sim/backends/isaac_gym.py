"""Isaac Gym backend (``env.backend=isaacgym``): the :class:`~sim.backends.physics.Physics` interface on NVIDIA Isaac
Gym's tensor API (PhysX), so a robot-rl task's MDP (observations, rewards, resets, randomisation, all in torch)
runs unchanged on Isaac Gym's GPU pipeline, as legged_gym runs its tasks.

**Not run on a real Isaac Gym here.** Isaac Gym (Preview 4) is not on PyPI and needs an NVIDIA GPU; this module is
typed against ``isaacgym-stubs`` and its logic tested against a fake ``gymapi`` / ``gymtorch``
(``tests/sim/fake_isaacgym.py``). What only a real Isaac Gym can confirm is listed in docs/backends.md.

The robot comes from the same file the MuJoCo model was compiled from (``asset``: a URDF or MJCF path, e.g.
``pybullet_data``'s ``a1/a1.urdf``), one actor per world on a flat ground plane. Everything a task reads stays in
MuJoCo's layout, mapped by name:

- ``qpos [N, nq]``, ``qvel [N, nv]``: the free joint (root position, quaternion ``w, x, y, z``; linear velocity of
  the body frame's origin in the world frame, angular velocity in the body frame, MuJoCo's free-joint convention)
  from Isaac Gym's root state (``x, y, z, w`` quaternion, velocities of the centre of mass in the world frame,
  PhysX's convention), then hinge joints by name from the DOF state (Isaac Gym orders DOFs depth-first).
- Actuators: MuJoCo's affine position servos (``force = gain ctrl + bias0 + bias1 q + bias2 qdot``, clamped to
  ``forcerange``) are evaluated here in torch on every physics substep and sent as DOF efforts (DOF drive mode
  effort, as legged_gym's ``control_type = 'P'``); other actuator kinds are refused.
- Sensors: ``gyro`` (the site's body angular velocity in the site frame), ``accelerometer`` (finite difference of
  the body's velocity over a substep, minus gravity, in the site frame) and ``touch`` (the norm of the net contact
  force on the site's body); other sensor kinds are refused.
- Randomised fields: ``body_mass`` and ``body_ipos`` (rigid body properties), ``dof_damping``, ``dof_armature``,
  ``dof_frictionloss`` (DOF properties), ``actuator_gainprm`` / ``actuator_biasprm`` (held here), and
  ``geom_friction``. Isaac Gym's ground plane is one for all worlds and PhysX averages two surfaces' friction, while
  MuJoCo takes the larger: the plane is made frictionless and each robot shape gets twice the friction MuJoCo would
  use against the ground (the larger of the shape's and that world's ground geom's), so every world's foot-ground
  contact has MuJoCo's friction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import mujoco
import numpy as np
import torch

from sim.backends.physics import BackendError, JointStateViews, check_field

if TYPE_CHECKING:
    from isaacgym import gymapi


SUPPORTED_FIELDS = frozenset(
    {"body_mass", "body_ipos", "geom_friction", "dof_damping", "dof_armature", "dof_frictionloss",
     "actuator_gainprm", "actuator_biasprm"}
)  # fmt: skip
"""Model fields this backend gives per-world values (``MjModel`` names)."""
INSTALL = (
    "env.backend=isaacgym needs NVIDIA Isaac Gym (Preview 4: download it from NVIDIA and pip install its python/ "
    "folder; it is not on PyPI) and a CUDA GPU"
)


def import_isaacgym() -> tuple[Any, Any]:
    """``(gymapi, gymtorch)``.

    Raises:
        BackendError: Isaac Gym is not installed (one line saying how to get it), or torch was imported first and
            Isaac Gym refused to load (``robot-rl`` imports it first when ``env.backend=isaacgym`` is on its
            command line).
    """
    try:
        from isaacgym import gymapi, gymtorch
    except ImportError as exc:
        raise BackendError(f"{INSTALL} ({exc})") from None
    return gymapi, gymtorch


@dataclass(frozen=True)
class _Sensor:
    """One MuJoCo sensor as this backend computes it: ``kind`` ``gyro``, ``accelerometer`` or ``touch``, the Isaac
    rigid body it reads, the site's rotation in that body ``[3, 3]`` (on the physics' device), and its columns in
    ``sensordata``."""

    kind: str
    body: int
    rot: torch.Tensor
    adr: int


def _quat_wxyz_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[N, 3, 3]`` of quaternions ``[N, 4]`` (w, x, y, z)."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
         2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
         2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
        -1,
    ).reshape(*q.shape[:-1], 3, 3)  # fmt: skip


class IsaacGymPhysics(JointStateViews):
    """``num_worlds`` actors of ``asset`` in Isaac Gym, read and written in the layout of ``model`` (see the module
    docstring); one :meth:`step` is ``frame_skip`` physics steps of ``model.opt.timestep``.

    Args:
        model: The MuJoCo model compiled from ``asset`` (names, actuators, sensors, nominal parameters).
        asset: URDF or MJCF file Isaac Gym loads (the same robot).
        num_worlds: Worlds ``N`` (one actor each).
        frame_skip: Physics steps per control step.
        device: ``cuda:K`` runs Isaac Gym's GPU pipeline on GPU ``K``; ``cpu`` its CPU pipeline.
        api: ``(gymapi, gymtorch)`` (default: :func:`import_isaacgym`; tests pass a fake).

    Raises:
        BackendError: Isaac Gym is missing, the model has a joint, actuator or sensor kind this backend does not
            map, or a joint or body of the model is not in the asset (named).
    """

    name = "isaacgym"
    supported_fields = SUPPORTED_FIELDS

    def __init__(
        self,
        model: mujoco.MjModel,
        asset: Path,
        num_worlds: int,
        frame_skip: int,
        device: torch.device,
        api: tuple[Any, Any] | None = None,
    ) -> None:
        self.gymapi, self.gymtorch = api if api is not None else import_isaacgym()
        self.model, self.num_worlds, self.device = model, num_worlds, torch.device(device)
        self.frame_skip = frame_skip
        self.dt = float(model.opt.timestep)
        self.control_dt = self.dt * frame_skip
        self._check_model(model)
        ga = self.gymapi
        # the engine's objects are typed against isaacgym-stubs (mypy checks every call on them); the modules
        # themselves come in as values (a test passes a fake)
        self.gym = cast("gymapi.Gym", ga.acquire_gym())
        self.sim = self._create_sim()
        options = cast("gymapi.AssetOptions", ga.AssetOptions())
        options.default_dof_drive_mode = ga.DOF_MODE_EFFORT  # the PD law runs here, as MuJoCo's actuators
        options.collapse_fixed_joints = True  # as MuJoCo's URDF compiler fuses fixed links
        options.fix_base_link = False
        options.armature = 0.0
        options.angular_damping = 0.0
        options.linear_damping = 0.0
        self.asset = self.gym.load_asset(self.sim, str(asset.parent), asset.name, options)
        self._map_names(model)
        self._create_actors(model)
        self.gym.prepare_sim(self.sim)
        wrap = self.gymtorch.wrap_tensor
        self._root = wrap(self.gym.acquire_actor_root_state_tensor(self.sim))  # [N, 13]
        self._dof = wrap(self.gym.acquire_dof_state_tensor(self.sim)).view(num_worlds, self.ndof, 2)
        self._bodies = wrap(self.gym.acquire_rigid_body_state_tensor(self.sim)).view(num_worlds, self.nbody, 13)
        self._contact = wrap(self.gym.acquire_net_contact_force_tensor(self.sim)).view(num_worlds, self.nbody, 3)
        f32: dict[str, Any] = {"device": self.device, "dtype": torch.float32}
        self._ctrl = torch.zeros(num_worlds, model.nu, **f32)
        self._gain = torch.tensor(model.actuator_gainprm[:, 0], **f32).repeat(num_worlds, 1)
        self._bias = torch.tensor(model.actuator_biasprm[:, :3], **f32).repeat(num_worlds, 1, 1)
        limited = model.actuator_forcelimited.astype(bool)
        inf = torch.full((model.nu,), math.inf, **f32)
        self._force_lo = torch.where(torch.tensor(limited, device=self.device), torch.tensor(
            model.actuator_forcerange[:, 0], **f32), -inf)  # fmt: skip
        self._force_hi = torch.where(torch.tensor(limited, device=self.device), torch.tensor(
            model.actuator_forcerange[:, 1], **f32), inf)  # fmt: skip
        self._xfrc = torch.zeros(num_worlds, self.nbody, 3, **f32)
        self._torque = torch.zeros(num_worlds, self.nbody, 3, **f32)
        self._prev_vel = torch.zeros(num_worlds, self.nbody, 3, **f32)
        self._sensordata = torch.zeros(num_worlds, model.nsensordata, **f32)
        # constants of the per-substep paths, built once
        self._root_com = torch.tensor(model.body_ipos[int(model.jnt_bodyid[0])], **f32)  # root COM, body frame, m
        self._gravity = torch.tensor(model.opt.gravity, **f32)
        self._act_q = torch.tensor([self._qadr[j] for j in self._dof_of_actuator], device=self.device)
        self._act_v = torch.tensor([self._vadr[j] for j in self._dof_of_actuator], device=self.device)
        self._act_dof = self._dof_of_joint[self._dof_of_actuator]
        self._site_local = [
            (k, torch.tensor(rot, **f32), torch.tensor(offset, **f32)) for k, rot, offset in self._site_in_body
        ]
        self._refresh()

    # --------------------------------------------------------------------------------------------- set-up
    def _check_model(self, model: mujoco.MjModel) -> None:
        """Refuse what this backend does not map (named)."""
        kinds = {int(mujoco.mjtJoint.mjJNT_FREE): "free", int(mujoco.mjtJoint.mjJNT_HINGE): "hinge"}
        for j in range(model.njnt):
            if int(model.jnt_type[j]) not in kinds or (int(model.jnt_type[j]) == 0) != (j == 0):
                raise BackendError(
                    f"backend 'isaacgym' maps one free root joint and hinges; joint '{model.joint(j).name}' is not one"
                )
        for a in range(model.nu):
            affine = int(model.actuator_biastype[a]) in (0, 1)  # none or affine
            if (int(model.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT) or int(model.actuator_dyntype[a])
                    or int(model.actuator_gaintype[a]) or not affine):  # fmt: skip
                raise BackendError(
                    f"backend 'isaacgym' maps joint actuators with fixed gain and affine bias; actuator "
                    f"'{model.actuator(a).name}' is another kind"
                )

    def _create_sim(self) -> Any:
        ga = self.gymapi
        params = cast("gymapi.SimParams", ga.SimParams())
        params.dt = self.dt
        params.substeps = 1
        params.up_axis = ga.UP_AXIS_Z
        params.gravity = ga.Vec3(*(float(g) for g in self.model.opt.gravity))
        params.use_gpu_pipeline = self.device.type == "cuda"
        # legged_gym's PhysX settings (legged_robot_config.py, sim.physx)
        params.physx.solver_type = 1
        params.physx.num_position_iterations = 4
        params.physx.num_velocity_iterations = 0
        params.physx.contact_offset = 0.01
        params.physx.rest_offset = 0.0
        params.physx.bounce_threshold_velocity = 0.5
        params.physx.max_depenetration_velocity = 1.0
        params.physx.use_gpu = self.device.type == "cuda"
        gpu = self.device.index or 0 if self.device.type == "cuda" else 0
        sim = self.gym.create_sim(gpu, -1, ga.SIM_PHYSX, params)
        if sim is None:
            raise BackendError("Isaac Gym could not create a PhysX simulation (see its log above)")
        plane = cast("gymapi.PlaneParams", ga.PlaneParams())
        plane.normal = ga.Vec3(0.0, 0.0, 1.0)
        plane.static_friction = plane.dynamic_friction = 0.0  # see the module docstring: shapes carry the friction
        plane.restitution = 0.0
        self.gym.add_ground(sim, plane)
        return sim

    def _map_names(self, model: mujoco.MjModel) -> None:
        """MuJoCo joints and bodies -> Isaac Gym DOF and rigid-body indices, by name."""
        dofs = list(self.gym.get_asset_dof_names(self.asset))
        bodies = list(self.gym.get_asset_rigid_body_names(self.asset))
        self.ndof, self.nbody = len(dofs), len(bodies)
        hinges = [model.joint(j).name for j in range(1, model.njnt)]
        missing = [h for h in hinges if h not in dofs]
        if missing or len(hinges) != len(dofs):
            raise BackendError(f"the Isaac Gym asset's DOFs {dofs} are not the model's joints {hinges}")
        self._dof_of_joint = torch.tensor([dofs.index(h) for h in hinges], device=self.device)
        self._qadr = [int(model.jnt_qposadr[j]) for j in range(1, model.njnt)]
        self._vadr = [int(model.jnt_dofadr[j]) for j in range(1, model.njnt)]
        self._dof_of_actuator = [
            hinges.index(model.joint(int(model.actuator_trnid[a, 0])).name) for a in range(model.nu)
        ]
        self._body: dict[int, int] = {}  # MuJoCo body id -> Isaac rigid body index (bodies Isaac Gym kept)
        for b in range(1, model.nbody):
            if model.body(b).name in bodies:
                self._body[b] = bodies.index(model.body(b).name)
        root = int(model.jnt_bodyid[0])
        if root not in self._body:
            raise BackendError(f"the model's root body '{model.body(root).name}' is not in the Isaac Gym asset")
        # Isaac Gym fuses links on fixed joints into their parents (collapse_fixed_joints) where MuJoCo keeps welded
        # bodies: each MuJoCo body maps to its nearest kept ancestor, a site to its pose in that body's frame
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        self._owner = {b: self._kept_ancestor(model, b) for b in range(1, model.nbody)}
        self._site_in_body: list[tuple[int | None, np.ndarray, np.ndarray]] = []
        for site in range(model.nsite):
            k = self._owner.get(int(model.site_bodyid[site]))
            if k is None:  # a site of the world body: its world pose
                self._site_in_body.append(
                    (None, data.site_xmat[site].reshape(3, 3).copy(), data.site_xpos[site].copy())
                )
                continue
            b = next(b for b, i in self._body.items() if i == k)
            r_b = data.xmat[b].reshape(3, 3)
            rot = r_b.T @ data.site_xmat[site].reshape(3, 3)
            pos = r_b.T @ (data.site_xpos[site] - data.xpos[b])
            self._site_in_body.append((k, rot, pos))
        self._sensors: list[_Sensor] = []
        names = {int(mujoco.mjtSensor.mjSENS_GYRO): "gyro", int(mujoco.mjtSensor.mjSENS_ACCELEROMETER): "accelerometer",
                 int(mujoco.mjtSensor.mjSENS_TOUCH): "touch"}  # fmt: skip
        for s in range(model.nsensor):
            kind = names.get(int(model.sensor_type[s]))
            on_site = int(model.sensor_objtype[s]) == int(mujoco.mjtObj.mjOBJ_SITE)
            k, rot, _ = self._site_in_body[int(model.sensor_objid[s])] if on_site else (None, np.eye(3), None)
            if kind is None or k is None:
                raise BackendError(
                    f"backend 'isaacgym' computes gyro, accelerometer and touch sensors on sites of the robot's "
                    f"bodies; sensor '{model.sensor(s).name}' is another kind or elsewhere"
                )
            rot_t = torch.tensor(rot, dtype=torch.float32, device=self.device)
            self._sensors.append(_Sensor(kind, k, rot_t, int(model.sensor_adr[s])))
        # MuJoCo geoms of each robot body -> that body's Isaac shapes; geoms of the world body are the ground
        shape_ranges = self.gym.get_asset_rigid_body_shape_indices(self.asset)
        self._shapes_of_body = {b: range(r.start, r.start + r.count) for b, r in enumerate(shape_ranges)}
        self._ground_geoms = {g for g in range(model.ngeom) if int(model.geom_bodyid[g]) == 0}
        self._geoms_of_body = {
            k: [g for g in range(model.ngeom) if self._owner.get(int(model.geom_bodyid[g])) == k]
            for k in range(self.nbody)
        }

    def _kept_ancestor(self, model: mujoco.MjModel, body: int) -> int | None:
        """The Isaac rigid body a MuJoCo body is part of: itself, or the nearest ancestor welded to it (``None``: the
        world)."""
        b = body
        while b > 0 and b not in self._body:
            if int(model.body_jntnum[b]) > 0:
                raise BackendError(f"body '{model.body(b).name}' has joints but is not in the Isaac Gym asset")
            b = int(model.body_parentid[b])
        return self._body.get(b)

    def _create_actors(self, model: mujoco.MjModel) -> None:
        ga, gym, n = self.gymapi, self.gym, self.num_worlds
        spacing = 2.0
        lower, upper = ga.Vec3(-spacing, -spacing, 0.0), ga.Vec3(spacing, spacing, spacing)
        per_row = max(1, int(math.sqrt(n)))
        pose = ga.Transform()
        pose.p = ga.Vec3(*(float(v) for v in model.qpos0[:3]))
        self.envs: list[Any] = []
        self.actors: list[int] = []
        # nominal per-world values of the randomisable fields, as MuJoCo's model has them
        self._ground_friction = np.full((n, 1), max((float(model.geom_friction[g, 0]) for g in self._ground_geoms),
                                                    default=0.0))  # fmt: skip
        self._geom_friction = np.repeat(model.geom_friction[None, :, 0].copy(), n, 0)
        for i in range(n):
            env = gym.create_env(self.sim, lower, upper, per_row)
            actor = gym.create_actor(env, self.asset, pose, "robot", i, 1, 0)  # filter 1: no self-collisions
            self.envs.append(env)
            self.actors.append(actor)
            dof = gym.get_actor_dof_properties(env, actor)
            for j, d in enumerate(self._dof_of_joint.tolist()):
                v = self._vadr[j]
                dof["driveMode"][d] = ga.DOF_MODE_EFFORT
                dof["stiffness"][d] = 0.0  # no drive: the effort is the actuators' force
                dof["damping"][d] = float(model.dof_damping[v])
                dof["friction"][d] = float(model.dof_frictionloss[v])
                dof["armature"][d] = float(model.dof_armature[v])
            gym.set_actor_dof_properties(env, actor, dof)
            props = gym.get_actor_rigid_body_properties(env, actor)
            for b, k in self._body.items():
                props[k].mass = float(model.body_mass[b])
                props[k].com = ga.Vec3(*(float(v) for v in model.body_ipos[b]))
            gym.set_actor_rigid_body_properties(env, actor, props, False)
            self._write_friction(i)

    def _write_friction(self, world: int) -> None:
        """Each robot shape's friction: twice the larger of its geoms' and the ground's (see the module docstring)."""
        gym, env, actor = self.gym, self.envs[world], self.actors[world]
        shapes = gym.get_actor_rigid_shape_properties(env, actor)
        ground = float(self._ground_friction[world, 0])
        for k, geoms in self._geoms_of_body.items():
            own = self._shapes_of_body[k]
            if len(own) == len(geoms):  # the body's shapes in the order of MuJoCo's geoms (its own, then fused)
                for s, g in zip(own, geoms, strict=True):
                    shapes[s].friction = 2.0 * max(float(self._geom_friction[world, g]), ground)
                continue
            mine = max((float(self._geom_friction[world, g]) for g in geoms), default=0.0)
            for s in own:
                shapes[s].friction = 2.0 * max(mine, ground)
        gym.set_actor_rigid_shape_properties(env, actor, shapes)

    # ---------------------------------------------------------------------------------------------- state
    def _refresh(self) -> None:
        """Read Isaac Gym's tensors into MuJoCo's layout (and the sensors)."""
        gym = self.gym
        for refresh in (gym.refresh_actor_root_state_tensor, gym.refresh_dof_state_tensor,
                        gym.refresh_rigid_body_state_tensor, gym.refresh_net_contact_force_tensor):  # fmt: skip
            refresh(self.sim)
        m, n = self.model, self.num_worlds
        root = self._root.to(torch.float32)
        quat = root[:, [6, 3, 4, 5]]  # x y z w -> w x y z
        rot = _quat_wxyz_to_matrix(quat)
        omega_w = root[:, 10:13]
        com_w = rot @ self._root_com
        origin_vel = root[:, 7:10] - torch.cross(omega_w, com_w, dim=-1)  # COM velocity -> the body origin's
        qpos = torch.zeros(n, m.nq, dtype=torch.float32, device=self.device)
        qvel = torch.zeros(n, m.nv, dtype=torch.float32, device=self.device)
        qpos[:, 0:3], qpos[:, 3:7] = root[:, 0:3], quat
        qvel[:, 0:3] = origin_vel
        qvel[:, 3:6] = (rot.transpose(1, 2) @ omega_w[..., None]).squeeze(-1)
        dof = self._dof[:, self._dof_of_joint].to(torch.float32)
        qpos[:, self._qadr], qvel[:, self._vadr] = dof[..., 0], dof[..., 1]
        self._qpos, self._qvel = qpos, qvel
        self._read_sensors()

    def _read_sensors(self) -> None:
        bodies = self._bodies.to(torch.float32)
        quat = bodies[..., [6, 3, 4, 5]]
        vel = bodies[..., 7:10]
        for s in self._sensors:
            rot_site = _quat_wxyz_to_matrix(quat[:, s.body]) @ s.rot
            if s.kind == "gyro":
                value = (rot_site.transpose(1, 2) @ bodies[:, s.body, 10:13, None]).squeeze(-1)
                self._sensordata[:, s.adr : s.adr + 3] = value
            elif s.kind == "accelerometer":
                acc = (vel[:, s.body] - self._prev_vel[:, s.body]) / self.dt - self._gravity
                self._sensordata[:, s.adr : s.adr + 3] = (rot_site.transpose(1, 2) @ acc[..., None]).squeeze(-1)
            else:
                self._sensordata[:, s.adr] = self._contact[:, s.body].to(torch.float32).norm(dim=-1)
        self._prev_vel = vel.clone()

    @property
    def site_xpos(self) -> torch.Tensor:
        """Site positions ``[N, nsite, 3]``, m, from their bodies' poses."""
        return self._sites()[0]

    @property
    def site_xmat(self) -> torch.Tensor:
        """Site orientations ``[N, nsite, 9]`` (row-major)."""
        return self._sites()[1]

    def _sites(self) -> tuple[torch.Tensor, torch.Tensor]:
        bodies = self._bodies.to(torch.float32)
        f32: dict[str, Any] = {"device": self.device, "dtype": torch.float32}
        pos = torch.zeros(self.num_worlds, self.model.nsite, 3, **f32)
        mat = torch.zeros(self.num_worlds, self.model.nsite, 9, **f32)
        for site, (k, r_local, p_local) in enumerate(self._site_local):
            if k is None:
                pos[:, site], mat[:, site] = p_local, r_local.reshape(9)
                continue
            r_body = _quat_wxyz_to_matrix(bodies[:, k, [6, 3, 4, 5]])
            pos[:, site] = bodies[:, k, 0:3] + r_body @ p_local
            mat[:, site] = (r_body @ r_local).reshape(-1, 9)
        return pos, mat

    @property
    def sensordata(self) -> torch.Tensor:
        """Sensor readings ``[N, nsensordata]`` of the last substep (gyro, accelerometer, touch)."""
        return self._sensordata

    # --------------------------------------------------------------------------------------------- stepping
    def step(self, ctrl: torch.Tensor, substeps: int | None = None) -> None:
        """Hold ``ctrl [N, nu]`` for ``frame_skip`` (or ``substeps``) substeps, the actuators' force law evaluated on
        each."""
        self._ctrl = ctrl.to(self.device, torch.float32)
        gym, wrap = self.gym, self.gymtorch.unwrap_tensor
        effort = torch.zeros(self.num_worlds, self.ndof, dtype=torch.float32, device=self.device)
        pushing = bool(self._xfrc.any())
        for _ in range(self.frame_skip if substeps is None else substeps):
            q, qd = self._qpos[:, self._act_q], self._qvel[:, self._act_v]
            force = self._gain * self._ctrl + self._bias[..., 0] + self._bias[..., 1] * q + self._bias[..., 2] * qd
            force = torch.maximum(torch.minimum(force, self._force_hi), self._force_lo)
            effort.zero_()
            effort[:, self._act_dof] = force
            gym.set_dof_actuation_force_tensor(self.sim, wrap(effort))
            if pushing:
                gym.apply_rigid_body_force_tensors(
                    self.sim, wrap(self._xfrc.reshape(-1, 3)), wrap(self._torque.reshape(-1, 3)), self.gymapi.ENV_SPACE
                )
            gym.simulate(self.sim)
            if self.device.type == "cpu":
                gym.fetch_results(self.sim, True)
            self._refresh()

    def reset(self, ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Restart worlds ``ids`` at MuJoCo-layout ``qpos [n, nq]``, ``qvel [n, nv]`` (zero control, no push)."""
        rows = ids.to(self.device, torch.long)
        qpos, qvel = qpos.to(self.device, torch.float32), qvel.to(self.device, torch.float32)
        quat = qpos[:, 3:7]
        rot = _quat_wxyz_to_matrix(quat / quat.norm(dim=-1, keepdim=True))
        omega_w = (rot @ qvel[:, 3:6, None]).squeeze(-1)
        com_w = rot @ self._root_com
        self._root[rows, 0:3] = qpos[:, 0:3].to(self._root.dtype)
        self._root[rows, 3:7] = quat[:, [1, 2, 3, 0]].to(self._root.dtype)
        self._root[rows, 7:10] = (qvel[:, 0:3] + torch.cross(omega_w, com_w, dim=-1)).to(self._root.dtype)
        self._root[rows, 10:13] = omega_w.to(self._root.dtype)
        self._dof[rows[:, None], self._dof_of_joint, 0] = qpos[:, self._qadr].to(self._dof.dtype)
        self._dof[rows[:, None], self._dof_of_joint, 1] = qvel[:, self._vadr].to(self._dof.dtype)
        index = rows.to(torch.int32)
        wrap = self.gymtorch.unwrap_tensor
        self.gym.set_actor_root_state_tensor_indexed(self.sim, wrap(self._root), wrap(index), len(index))
        self.gym.set_dof_state_tensor_indexed(self.sim, wrap(self._dof.view(-1, 2)), wrap(index), len(index))
        self._ctrl[rows] = 0.0
        self._xfrc[rows] = 0.0
        self._refresh()
        self._prev_vel[rows] = self._bodies[rows, :, 7:10].to(torch.float32)

    def set_external_force(self, body: int, force: torch.Tensor) -> None:
        """Apply ``force [N, 3]`` (N, world frame) at ``body``'s centre of mass until changed."""
        if body not in self._body:
            raise BackendError(f"body '{self.model.body(body).name}' is not a rigid body of the Isaac Gym asset")
        self._xfrc[:, self._body[body]] = force.to(self.device, torch.float32)

    def set_field(
        self, name: str, ids: torch.Tensor, values: torch.Tensor, index: tuple[int | slice, ...] = ()
    ) -> None:
        """Write model field ``name`` (element ``index``) for worlds ``ids`` (see the module docstring)."""
        check_field(self, name)
        rows = [int(i) for i in ids.tolist()]
        v = values.detach().to("cpu", torch.float64).reshape(len(rows), -1).numpy()
        if name in ("actuator_gainprm", "actuator_biasprm"):
            a, k = int(index[0]), int(index[1])  # type: ignore[arg-type]
            target = self._gain[:, a] if name == "actuator_gainprm" else self._bias[:, a, k]
            if name == "actuator_gainprm" and k != 0:
                raise BackendError("backend 'isaacgym' holds actuator_gainprm[:, 0] only (fixed gain)")
            target[torch.tensor(rows, device=self.device)] = torch.tensor(v[:, 0], dtype=torch.float32,
                                                                          device=self.device)  # fmt: skip
            return
        gym, ga = self.gym, self.gymapi
        for r, row in enumerate(rows):
            env, actor = self.envs[row], self.actors[row]
            if name == "geom_friction":
                g = int(index[0])  # type: ignore[arg-type]
                if g in self._ground_geoms:
                    self._ground_friction[row, 0] = v[r, 0]
                else:
                    self._geom_friction[row, g] = v[r, 0]
                self._write_friction(row)
            elif name in ("body_mass", "body_ipos"):
                b = int(index[0])  # type: ignore[arg-type]
                if b not in self._body:
                    raise BackendError(f"body '{self.model.body(b).name}' is not a rigid body of the Isaac Gym asset")
                props = gym.get_actor_rigid_body_properties(env, actor)
                if name == "body_mass":
                    props[self._body[b]].mass = float(v[r, 0])
                else:
                    props[self._body[b]].com = ga.Vec3(*(float(x) for x in v[r, :3]))
                gym.set_actor_rigid_body_properties(env, actor, props, False)
            else:  # dof_damping, dof_armature, dof_frictionloss
                dof_index = self._vadr.index(int(index[0]))  # type: ignore[arg-type]
                key = {"dof_damping": "damping", "dof_armature": "armature", "dof_frictionloss": "friction"}[name]
                dof = gym.get_actor_dof_properties(env, actor)
                dof[key][int(self._dof_of_joint[dof_index])] = float(v[r, 0])
                gym.set_actor_dof_properties(env, actor, dof)

    def state(self) -> dict[str, torch.Tensor]:
        """Root and DOF states and the held controls (Isaac Gym keeps no solver warm start to save: a resumed run
        continues from the same state, not bit-identically)."""
        return {"root": self._root.clone(), "dof": self._dof.clone(), "ctrl": self._ctrl.clone()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state` in every world."""
        self._root.copy_(state["root"])
        self._dof.copy_(state["dof"])
        self._ctrl.copy_(state["ctrl"])
        index = torch.arange(self.num_worlds, dtype=torch.int32, device=self.device)
        wrap = self.gymtorch.unwrap_tensor
        self.gym.set_actor_root_state_tensor_indexed(self.sim, wrap(self._root), wrap(index), self.num_worlds)
        self.gym.set_dof_state_tensor_indexed(self.sim, wrap(self._dof.view(-1, 2)), wrap(index), self.num_worlds)
        self._refresh()

    def close(self) -> None:
        """Release the simulation."""
        if self.sim is not None:
            self.gym.destroy_sim(self.sim)
            self.sim = None
