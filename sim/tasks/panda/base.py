"""What every Franka Panda task shares: the physics backend, control modes, joint observations, randomisation of
the MuJoCo model, the action mapping and the deployment contract. A task file (``panda_reach.py``, ...) adds only
its scene, goal, observation terms, rewards and success.

Backends: ``env.backend: mujoco`` (CPU, :mod:`sim.backends.mujoco_batch`) or ``mjwarp`` (MuJoCo Warp,
:mod:`sim.backends.mjwarp`) behind :class:`~sim.backends.physics.Physics`; task logic is torch, written once.

Action ``a`` ``[N, 7 (+1)]`` in ``[-1, 1]``; the exported contract maps it exactly as here:

- ``impedance``: joint targets ``q_d = clip(q + action_scale * a, q_min, q_max)``, rad, relative to the measured
  joint positions ``q`` (contract ``action.reference: joint_pos``), or with ``targets: absolute``
  ``q_d = clip(home + action_scale * a, q_min, q_max)``. Both the simulator and a robot add ``q`` when the
  command is computed (the simulator the true ``q``, the robot its measured one) and hold that absolute set-point
  through the transport latency the training randomises (``_transmit``: a late command arrives as it was
  computed, as the energy tank priced it);
- ``torque``: joint torques ``tau = clip(action_scale * tau_max * a, -tau_max, tau_max)``, N m (added to the
  robot's gravity compensation);
- tasks with a gripper command append the finger opening per finger, m (0 closed .. 0.04 open):
  ``gripper_action: centred`` (default) ``w = 0.02 + 0.02 a`` (half open at ``a = 0``: a 4 cm gap, narrower than
  the 5 cm cube, so a student's uncertain output still holds it); ``open-at-zero`` ``w = clip(0.04 + 0.04 a, 0,
  0.04)``: open for ``a >= 0``, closing linearly below, so an untrained RL policy (mean 0) approaches with the
  fingers open, as Isaac Lab's binary gripper action does (the lift teacher's setting).

Randomisable model parameters (``randomization[].param``; the backend must support each MuJoCo field, else it is
refused when the env is built)::

    link_mass [8] kg        body_mass (+ inertia scaled alike) of panda_link1..7, panda_hand
    com_offset [3] m        added to the centre of mass of every arm body (body_ipos)
    joint_damping [7]       dof_damping, N m s/rad      joint_armature [7]  dof_armature, kg m²
    joint_friction [7]      dof_frictionloss, N m       actuator_gain [7]   impedance K and D (or torque gain), ratio
    gravity [3] m/s²        opt.gravity                 external_force [3] N   a push on the hand (xfrc_applied),
                                                        e.g. redrawn every second (timing: interval)
    (+ the task's object parameters, + action_latency)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import mujoco
import numpy as np
import torch

from policies.runtime.contract import ActionSpec, ObservationTerm
from sim.backends import BACKENDS, make_physics
from sim.backends.physics import check_field, sensor_columns
from sim.measurements import JointStates, Measurement, Pose
from sim.randomization import ParamSpec, RandomizationTerm, sample_bounds
from sim.robots import panda
from sim.tasks.base import BatchedTask, EnvVariant, SensorNoise, check_fields, check_randomization, check_reward_scales
from sim.tasks.panda.passivity import PassivityConfig, SetpointTanks
from sim.vec_env import TaskConfigError

ARM_BODIES = ("panda_link1", "panda_link2", "panda_link3", "panda_link4", "panda_link5", "panda_link6",
              "panda_link7", "panda_hand")  # fmt: skip
"""Bodies whose mass and centre of mass are randomised (the moving arm and the hand)."""


GRIPPER_ACTIONS = ("centred", "open-at-zero")
"""Mappings of the normalised gripper action to the finger opening (see the module docstring)."""


def gripper_scale_offset(mapping: str) -> tuple[float, float]:
    """``(scale, offset)`` of the finger opening ``w = clip(offset + scale * a, 0, FINGER_STROKE)``, m, for the
    gripper action mapping ``mapping`` (one of :data:`GRIPPER_ACTIONS`)."""
    stroke = panda.FINGER_STROKE
    return (stroke, stroke) if mapping == "open-at-zero" else (stroke / 2, stroke / 2)


def default_arm_randomization() -> list[RandomizationTerm]:
    """Randomisation of the arm shared by the Panda tasks (sources in :mod:`sim.robots.panda`)."""
    return [
        # Link masses +-10 % each: [GAZ]'s identified masses differ from the CAD values by that order.
        RandomizationTerm("link_mass", "uniform", (0.9, 1.1), "scale", per_element=True),
        # Centre of mass +-1 cm (cabling, identification error).
        RandomizationTerm("com_offset", "uniform", (-0.01, 0.01), "add", per_element=True),
        # Joint friction 0.5x-1.5x of [GAZ]'s levels; viscous damping 0-1 N m s/rad (none identified).
        RandomizationTerm("joint_friction", "uniform", (0.5, 1.5), "scale", per_element=True),
        RandomizationTerm("joint_damping", "uniform", (0.0, 1.0), "add", per_element=True),
        # Reflected rotor inertia +-20 %; the controller's effective gains +-10 %.
        RandomizationTerm("joint_armature", "uniform", (0.8, 1.2), "scale", per_element=True),
        RandomizationTerm("actuator_gain", "uniform", (0.9, 1.1), "scale", per_element=True),
        # 0 or 1 control step of latency (ROS 2 transport and the controller's cycle).
        RandomizationTerm("action_latency", "uniform", (0.0, 2.0), "add"),
    ]


def _draws_a_whole_period(term: RandomizationTerm) -> bool:
    """Whether an ``action_latency`` term (added to or replacing 0, floored) can draw one control period or more: a
    uniform draw lies in ``[lo, hi)`` (``U(0, 1)`` is no latency), a gaussian one is clipped to ``[lo, hi]``."""
    lo, hi = sample_bounds(term)
    return hi >= 1.0 if term.distribution == "gaussian" else (hi > 1.0 or lo >= 1.0)


def default_arm_noise() -> SensorNoise:
    """Joint encoder noise: the Panda's encoders resolve ~1e-4 rad; velocities are differentiated and filtered; the
    reported TCP pose comes from the same encoders through the robot's kinematic model (1 mm)."""
    return SensorNoise(
        std={"joint_pos": 0.001, "joint_vel": 0.02, "tcp_pos": 0.001, "tcp_rot6": 0.002}, bias_std={"joint_pos": 0.002}
    )


@dataclass
class PandaConfig:
    """Settings shared by the Panda tasks.

    Attributes:
        backend: Physics engine: ``mujoco`` (CPU) or ``mjwarp`` (MuJoCo Warp; CUDA or Warp's CPU device).
        control_mode: ``impedance`` (joint targets) or ``torque`` (joint torques); see :mod:`sim.robots.panda`.
        dt: Control period, s.
        physics_dt: MuJoCo timestep, s (``dt`` must be a whole multiple).
        finger_armature: Armature of each finger joint, kg (:data:`sim.robots.panda.FINGER_ARMATURE`: stable at
            4 ms; a grasp at 8 ms needs 0.2).
        episode_length_s: Episode time limit, s.
        action_scale: Impedance: rad of target per unit action (about the measured joint positions, or about the
            home pose with absolute targets); torque: fraction of the rated torque per unit action.
        targets: Impedance targets ``relative`` to the measured joint positions (``q_d = q + s a``: the policy
            commands corrections, so holding still is ``a = 0``) or ``absolute`` about the home pose.
        stiffness: Joint impedance stiffness ``[7]``, N m/rad.
        damping: Joint impedance damping ``[7]``, N m s/rad.
        init_joint_range: Initial joint positions: home pose + uniform in ``±`` this, rad (within limits).
        gripper_action: Mapping of the gripper command (tasks that command it): ``open-at-zero`` or ``centred`` (see
            the module docstring).
        action_history: Past actions in the onboard observation (0: none; with relative targets the measured joint
            positions already carry the last command's effect, and leaving it out measured faster: see
            docs/benchmarks.md).
        command_delay: Range ``[lo, hi]`` of a command's delay within the control period, s, drawn per episode
            (uniform, to whole physics steps; under ``dt``; ``(0, 0)``: none): for the first physics steps of each
            period the previous command still acts, as on a robot whose node sends each command some milliseconds
            after the measurement it answers (``bench/ros2_latency.py`` measured up to 10.8 ms). Whole periods of
            latency are the ``action_latency`` randomisation term. Randomisation off: no delay.
        reward_scales: Scale of each named reward term, per second.
        randomization: Domain randomisation terms.
        noise: Onboard sensor noise.
        passivity: The deploy-time energy tank on the arm's set-points during training and evaluation
            (:mod:`sim.tasks.panda.passivity`; off unless ``passivity.tank_max_j`` is set; impedance control only).
    """

    backend: str = "mujoco"
    control_mode: str = "impedance"
    dt: float = 0.04
    physics_dt: float = 0.004
    finger_armature: float = panda.FINGER_ARMATURE
    episode_length_s: float = 3.0
    action_scale: float = 0.25
    targets: str = "relative"
    stiffness: tuple[float, ...] = panda.IMPEDANCE_STIFFNESS
    damping: tuple[float, ...] = panda.IMPEDANCE_DAMPING
    init_joint_range: float = 0.1
    action_history: int = 0
    gripper_action: str = "centred"
    command_delay: tuple[float, float] = (0.0, 0.0)
    reward_scales: dict[str, float] = field(default_factory=dict)
    randomization: list[RandomizationTerm] = field(default_factory=default_arm_randomization)
    noise: SensorNoise = field(default_factory=default_arm_noise)
    passivity: PassivityConfig = field(default_factory=PassivityConfig)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise TaskConfigError(f"env.backend must be one of {', '.join(BACKENDS)}, got '{self.backend}'")
        if self.targets not in ("relative", "absolute"):
            raise TaskConfigError(f"env.targets must be 'relative' or 'absolute', got '{self.targets}'")
        if self.gripper_action not in GRIPPER_ACTIONS:
            raise TaskConfigError(
                f"env.gripper_action must be one of {', '.join(GRIPPER_ACTIONS)}, got '{self.gripper_action}'"
            )
        if self.control_mode not in ("impedance", "torque"):
            raise TaskConfigError(f"env.control_mode must be 'impedance' or 'torque', got '{self.control_mode}'")
        if self.passivity.enabled and self.control_mode != "impedance":
            raise TaskConfigError(
                "env.passivity.tank_max_j needs env.control_mode=impedance (the tank in the training loop filters "
                "set-points; torque commands are filtered only on the robot)"
            )
        check_fields(self, ("dt", "physics_dt", "finger_armature", "episode_length_s", "action_scale"), "env.")
        check_fields(self, ("stiffness", "damping", "init_joint_range", "action_history"), "env.", positive=False)
        if self.action_history < 0:
            raise TaskConfigError(f"env.action_history must be >= 0 (0: no last action), got {self.action_history}")
        for name in ("stiffness", "damping"):
            gains = getattr(self, name)
            if len(gains) != 7 or min(gains) < 0:
                raise TaskConfigError(f"env.{name} must be 7 values >= 0, got {list(gains)}")
        substeps = self.dt / self.physics_dt
        if abs(substeps - round(substeps)) > 1e-6:
            raise TaskConfigError(f"env.dt ({self.dt}) must be a whole multiple of env.physics_dt ({self.physics_dt})")
        delay = tuple(self.command_delay)
        if len(delay) != 2 or not 0.0 <= delay[0] <= delay[1] < self.dt:  # NaN fails too
            raise TaskConfigError(
                f"env.command_delay must be [lo, hi] s with 0 <= lo <= hi < env.dt ({self.dt}), got {list(delay)}"
            )
        check_reward_scales(self.reward_scales)

    @property
    def substeps(self) -> int:
        """Physics steps per control period."""
        return round(self.dt / self.physics_dt)


def build_panda(cfg: PandaConfig, scene: panda.Scene) -> mujoco.MjModel:
    """The Panda of ``cfg`` (control mode, impedance gains, physics step, finger armature) with ``scene``."""
    return panda.build_model(
        cfg.control_mode,  # type: ignore[arg-type]
        scene, cfg.stiffness, cfg.damping, cfg.physics_dt, cfg.finger_armature,
    )  # fmt: skip


def arm_param_specs(model: mujoco.MjModel) -> dict[str, ParamSpec]:
    """Randomisable arm parameters, nominal values read from the compiled model."""
    bodies = [model.body(b).id for b in ARM_BODIES]
    dofs = [int(model.joint(j).dofadr[0]) for j in panda.ARM_JOINTS]
    return {
        "link_mass": ParamSpec(tuple(float(model.body_mass[b]) for b in bodies), lower=0.0, unit="kg"),
        "com_offset": ParamSpec((0.0, 0.0, 0.0), unit="m"),
        "joint_damping": ParamSpec(tuple(float(model.dof_damping[d]) for d in dofs), lower=-1e-12, unit="N m s/rad"),
        "joint_armature": ParamSpec(tuple(float(model.dof_armature[d]) for d in dofs), lower=0.0, unit="kg m^2"),
        "joint_friction": ParamSpec(tuple(float(model.dof_frictionloss[d]) for d in dofs), lower=-1e-12, unit="N m"),
        "actuator_gain": ParamSpec((1.0,) * 7, lower=0.0, unit="(ratio)"),
        "gravity": ParamSpec(tuple(float(g) for g in model.opt.gravity), unit="m/s^2"),
        "external_force": ParamSpec((0.0, 0.0, 0.0), unit="N"),
    }


class PandaTask(BatchedTask):
    """Base of the Panda tasks (see the module docstring).

    Subclasses call :meth:`_setup` from ``__init__`` with their scene, observation terms and parameters, and
    implement the task hooks of :class:`~sim.tasks.base.BatchedTask` plus :meth:`_reset_task`.
    """

    cfg: PandaConfig
    uses_gripper = False
    """Whether the policy commands the gripper (action size 8) or the fingers hold :attr:`finger_opening` (7)."""
    finger_opening = panda.FINGER_STROKE
    """Finger position held when the policy does not command the gripper, m (0 closed, 0.04 open)."""
    tank_max_j = 20.0
    """The energy tank's default ``T_max`` in the contract (J; it starts half full): the smallest of 20 / 40 / 80 J
    that leaves the task's trained policies their unfiltered success (``bench/passivity.py``, docs/benchmarks.md)."""

    def _setup(
        self,
        cfg: PandaConfig,
        scene: panda.Scene,
        num_envs: int,
        device: torch.device,
        seed: int,
        task_terms: list[ObservationTerm],
        task_privileged: int,
        task_params: dict[str, ParamSpec],
    ) -> None:
        self.cfg = cfg
        model = build_panda(cfg, scene)
        self._model = model
        specs = {**arm_param_specs(model), **task_params}
        self._model_params = [k for k in specs]
        num_actions = 8 if self.uses_gripper else 7
        terms = [
            ObservationTerm("joint_positions", 7, "joint_pos", unit="rad"),
            ObservationTerm("joint_velocities", 7, "joint_vel", unit="rad/s"),
            ObservationTerm("tcp_position", 3, "tcp_pos", unit="m"),
            ObservationTerm("tcp_orientation", 6, "tcp_rot6"),
            *task_terms,
        ]
        if cfg.action_history > 0:
            terms.append(ObservationTerm("last_action", num_actions, "last_action", history=cfg.action_history))
        self._param_size = sum(s.size for s in specs.values())
        super().__init__(
            num_envs=num_envs,
            num_actions=num_actions,
            dt=cfg.dt,
            episode_length_s=cfg.episode_length_s,
            device=device,
            seed=seed,
            policy_terms=terms,
            privileged_size=7 + 7 + num_actions + task_privileged + self._param_size + 1 + cfg.passivity.enabled,
            param_specs=specs,
            randomization=cfg.randomization,
            noise=cfg.noise,
            reward_scales=cfg.reward_scales,
            transmit_size=8,
        )
        self.physics = make_physics(cfg.backend, model, num_envs, cfg.substeps, device)
        for name in self._fields_needed():
            check_field(self.physics, name)
        self._bodies = torch.tensor([model.body(b).id for b in ARM_BODIES])
        # Index tensors live on the task's device once (no host-to-device copy per step on CUDA).
        self._dofs = torch.tensor([int(model.joint(j).dofadr[0]) for j in panda.ARM_JOINTS], device=device)
        self._arm_qpos = torch.tensor([int(model.joint(j).qposadr[0]) for j in panda.ARM_JOINTS], device=device)
        self._finger_qpos = torch.tensor([int(model.joint(j).qposadr[0]) for j in panda.FINGER_JOINTS], device=device)
        self._tcp = model.site("tcp").id
        self._hand = model.body("panda_hand").id
        self._pushed = any(t.param == "external_force" for t in cfg.randomization)
        f32: dict[str, Any] = {"device": device, "dtype": torch.float32}
        self.home = torch.tensor(panda.HOME, **f32)
        self.q_min = torch.tensor(panda.Q_MIN, **f32)
        self.q_max = torch.tensor(panda.Q_MAX, **f32)
        self.tau_max = torch.tensor(panda.TAU_MAX, **f32)
        self._nominal_ipos = torch.tensor(model.body_ipos[self._bodies.numpy()], dtype=torch.float64)
        self._nominal_inertia = torch.tensor(model.body_inertia[self._bodies.numpy()], dtype=torch.float64)
        self._nominal_gain = torch.tensor(model.actuator_gainprm[:7, 0], dtype=torch.float64)
        self._nominal_bias = torch.tensor(model.actuator_biasprm[:7, :3], dtype=torch.float64)
        self._in_model = {k: self.params[k].clone() for k in self._model_params}
        self._q = torch.zeros(num_envs, 7, **f32)  # noise-free joint state after the last step
        self._dq = torch.zeros(num_envs, 7, **f32)
        self._tcp_pos = torch.zeros(num_envs, 3, **f32)
        self._tcp_rot = torch.zeros(num_envs, 3, 3, **f32)
        self._delay_steps = torch.zeros(num_envs, dtype=torch.long, device=device)  # env.command_delay, physics steps
        # The longest delay the config allows: a fixed number of split physics steps, no device-to-host read per step.
        self._max_delay_steps = min(round(cfg.command_delay[1] / cfg.physics_dt), cfg.substeps - 1)
        self.tanks: SetpointTanks | None = None
        if cfg.passivity.enabled:
            self.tanks = SetpointTanks(cfg.passivity.params(cfg.damping), num_envs, cfg.stiffness, cfg.dt)

    # ---------------------------------------------------------------------------------- hooks for the tasks
    def _reset_task(self, rows: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Draw the task's own initial state (objects, goals) for worlds ``rows``; edit ``qpos [n, nq]`` in place."""

    def _task_model_params(self, rows: torch.Tensor, changed: dict[str, torch.Tensor]) -> None:
        """Write the task's own randomised parameters ``{name: [n, size]}`` of worlds ``rows`` into the physics."""

    def _task_fields(self) -> list[str]:
        """MuJoCo fields the task's own parameters write (checked against the backend)."""
        return []

    def _read_task_state(self) -> None:
        """Copy the task's own state (objects) out of the physics after a step or reset."""

    # -------------------------------------------------------------------------------------------- physics
    def _fields_needed(self) -> list[str]:
        fields = {
            "link_mass": ["body_mass", "body_inertia"],
            "com_offset": ["body_ipos"],
            "joint_damping": ["dof_damping"],
            "joint_armature": ["dof_armature"],
            "joint_friction": ["dof_frictionloss"],
            "actuator_gain": ["actuator_gainprm", "actuator_biasprm"],
            "gravity": ["opt.gravity"],
            "external_force": [],
        }
        randomized = {t.param for t in self.cfg.randomization}
        out = [f for p, fs in fields.items() if p in randomized for f in fs]
        return out + (self._task_fields() if randomized - set(fields) - {"action_latency"} else [])

    def command(self, action: torch.Tensor) -> torch.Tensor:
        """Actuator controls ``[N, 8]`` for normalised actions ``[N, A]`` (see the module docstring)."""
        arm = action[:, :7]
        if self.cfg.control_mode == "impedance":
            base = self._q if self.cfg.targets == "relative" else self.home
            arm_ctrl = torch.maximum(torch.minimum(base + self.cfg.action_scale * arm, self.q_max), self.q_min)
        else:
            arm_ctrl = (self.cfg.action_scale * self.tau_max * arm).clamp(-self.tau_max, self.tau_max)
        if self.uses_gripper:
            scale, offset = gripper_scale_offset(self.cfg.gripper_action)
            grip = (offset + scale * action[:, 7:8]).clamp(0.0, panda.FINGER_STROKE)
        else:
            grip = torch.full_like(arm[:, :1], self.finger_opening)
        return torch.cat((arm_ctrl, grip), 1)

    def _transmit(self, action: torch.Tensor) -> torch.Tensor:
        """The actuator set-points ``[N, 8]`` computed now (relative targets: about the joint positions now), which
        the latency delays as a robot's transport delays them: a late command is held as it was computed."""
        return self.command(action)

    def _transmit_idle(self, mask: torch.Tensor) -> torch.Tensor:
        """A just-reset world's queue holds the command of the zero action (hold the joints where they are)."""
        return self.command(torch.zeros(self.num_envs, self.num_actions, device=self.device))[mask][:, None]

    def _simulate(self, ctrl: torch.Tensor) -> None:
        """One control period under ``ctrl [N, nu]``; in worlds with a command delay (``env.command_delay``) the
        previous period's command acts for the delay's first physics steps."""
        self._sync_model()
        if self._pushed:
            self.physics.set_external_force(self._hand, self.params["external_force"].to(self.physics.device))
        longest = self._max_delay_steps
        if longest == 0:
            self.physics.step(ctrl.to(self.physics.device))
        else:
            previous = self._previous_command()
            for k in range(longest):
                held = torch.where((self._delay_steps > k)[:, None], previous, ctrl)
                self.physics.step(held.to(self.physics.device), substeps=1)
            self.physics.step(ctrl.to(self.physics.device), substeps=self.cfg.substeps - longest)
        self._read_state()
        self._after_step()

    def _previous_command(self) -> torch.Tensor:
        """The command each world acted on in the last period ``[N, nu]``: the one behind this period's in the
        latency queue (a just-reset world's queue holds its idle command throughout; at the queue's longest latency,
        ``MAX_LATENCY`` periods, there is none behind it and this period's own is returned)."""
        latency = self.params["action_latency"][:, 0].floor().long().clamp(0, self.max_latency)
        return self.action_queue[self._rows, (latency + 1).clamp(max=self.max_latency)]

    def _draw_command_delay(self, rows: torch.Tensor) -> None:
        """Draw the command delay of worlds ``rows`` (whole physics steps; none with the randomisation off)."""
        lo, hi = self.cfg.command_delay
        if hi <= 0.0 or not self.randomizer.enabled:
            self._delay_steps[rows] = 0
            return
        u = torch.rand(rows.numel(), generator=self.gen, device=self.device)
        steps = ((lo + (hi - lo) * u) / self.cfg.physics_dt).round().long()
        self._delay_steps[rows] = steps.clamp(0, self._max_delay_steps)

    def _after_step(self) -> None:
        """Advance the task's own per-step buffers (delayed estimates) after a physics step."""

    def _read_state(self) -> None:
        p = self.physics
        qpos = p.qpos.to(self.device, torch.float32)
        self._q = qpos[:, self._arm_qpos]
        self._dq = p.qvel.to(self.device, torch.float32)[:, self._dofs]
        self._tcp_pos = p.site_xpos[:, self._tcp].to(self.device, torch.float32)
        self._tcp_rot = p.site_xmat[:, self._tcp].to(self.device, torch.float32).reshape(-1, 3, 3)
        self._read_task_state()

    def _reset_worlds(self, mask: torch.Tensor) -> None:
        rows = mask.nonzero().squeeze(-1)
        n = rows.numel()
        self._sync_model()
        qpos = torch.tensor(self._model.qpos0, dtype=torch.float32, device=self.device).repeat(n, 1)
        noise = self.cfg.init_joint_range * (2 * torch.rand(n, 7, generator=self.gen, device=self.device) - 1)
        q = torch.maximum(torch.minimum(self.home + noise, self.q_max), self.q_min)
        qpos[:, self._arm_qpos] = q
        qpos[:, self._finger_qpos] = self.finger_opening if not self.uses_gripper else panda.FINGER_STROKE
        qvel = torch.zeros(n, self._model.nv, device=self.device)
        self._reset_task(rows, qpos, qvel)
        self._draw_command_delay(rows)
        self.physics.reset(rows.to(self.physics.device), qpos, qvel)
        self._read_state()
        if self.tanks is not None:
            self.tanks.reset(rows, self._q[rows])

    def _sync_model(self) -> None:
        """Write randomised parameters of the worlds whose values changed into the physics."""
        changed_rows = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        for k in self._model_params:
            changed_rows |= (self.params[k] != self._in_model[k]).any(1)
        if not bool(changed_rows.any()):
            return
        rows = changed_rows.nonzero().squeeze(-1)
        ids = rows.to(self.physics.device)
        p = {k: self.params[k][rows].to(torch.float64) for k in self._model_params}
        for k in self._model_params:
            self._in_model[k][rows] = self.params[k][rows]
        phys = self.physics
        randomized = {t.param for t in self.cfg.randomization}
        if "link_mass" in randomized:
            ratio = p["link_mass"] / torch.tensor(self.randomizer.specs["link_mass"].nominal, dtype=torch.float64)
            for j, body in enumerate(self._bodies.tolist()):
                phys.set_field("body_mass", ids, p["link_mass"][:, j], (body,))
                phys.set_field("body_inertia", ids, ratio[:, j : j + 1] * self._nominal_inertia[j], (body,))
        if "com_offset" in randomized:
            for j, body in enumerate(self._bodies.tolist()):
                phys.set_field("body_ipos", ids, self._nominal_ipos[j] + p["com_offset"], (body,))
        for param, fld in (
            ("joint_damping", "dof_damping"),
            ("joint_armature", "dof_armature"),
            ("joint_friction", "dof_frictionloss"),
        ):
            if param in randomized:
                for j, dof in enumerate(self._dofs.tolist()):
                    phys.set_field(fld, ids, p[param][:, j], (dof,))
        if "actuator_gain" in randomized:
            for j in range(7):
                g = p["actuator_gain"][:, j]
                phys.set_field("actuator_gainprm", ids, g * self._nominal_gain[j], (j, 0))
                phys.set_field("actuator_biasprm", ids, g[:, None] * self._nominal_bias[j], (j, slice(0, 3)))
        if "gravity" in randomized:
            phys.set_field("opt.gravity", ids, p["gravity"])
        self._task_model_params(rows, p)

    # ------------------------------------------------------------------------------------------ observation
    def _arm_signals(self) -> dict[str, torch.Tensor]:
        return {
            "joint_pos": self._q,
            "joint_vel": self._dq,
            "tcp_pos": self._tcp_pos,
            "tcp_rot6": rot6(self._tcp_rot),
            "last_action": self.last_action,
        }

    def hand_tilt(self) -> torch.Tensor:
        """How far each hand leans from pointing straight down: the angle between the TCP's approach axis (its z
        axis, flange to finger tips) and the world's -z, rad ``[N]`` in ``[0, pi]``. The scripted experts hold it
        near 0 (:data:`GRIPPER_DOWN`)."""
        return (-self._tcp_rot[:, 2, 2]).clamp(-1.0, 1.0).acos()

    BASE_FRAME = "panda_link0"
    """The frame of every pose the robot reports (libfranka's ``O``)."""

    def measurements(self, world: int = 0) -> list[Measurement]:
        """What the Franka driver, the gripper and a tracker would publish for ``world``: the tool pose
        (``O_T_EE``), the task's own poses (:meth:`_task_measurements`: an object tracker's estimate, the goal),
        then the joint states (arm and fingers, ``joint_state_broadcaster``) last, so that a node stepping on them
        has the period's other inputs."""
        names = [self._model.joint(j).name for j in range(self._model.njnt)]
        joints = [n for n in names if n.startswith("panda_")]
        qadr = [int(self._model.joint(n).qposadr[0]) for n in joints]
        dadr = [int(self._model.joint(n).dofadr[0]) for n in joints]
        qpos, qvel = (
            x[world].detach().cpu().numpy().astype(np.float64) for x in (self.physics.qpos, self.physics.qvel)
        )
        pos, rot = (x[world].detach().cpu().numpy() for x in (self._tcp_pos, self._tcp_rot))
        tcp = Pose("tcp_pose", pos, rot, self.BASE_FRAME)
        states = JointStates("joint_states", tuple(joints), qpos[qadr], qvel[dadr], self.BASE_FRAME)
        return [tcp, *self._task_measurements(world), states]

    def _task_measurements(self, world: int) -> list[Measurement]:
        """The task's own measurements for ``world`` (poses of objects and goals)."""
        return []

    def _arm_privileged(self) -> torch.Tensor:
        """Noise-free joints, last action, randomised parameters relative to nominal (offsets as is), latency."""
        parts = []
        for k in self._model_params:
            nominal = self.randomizer.nominal(k)
            v = self.params[k]
            parts.append(torch.where(nominal.abs() > 1e-9, v / nominal.clamp_min(1e-9) - 1.0, v))
        # Whole periods of latency plus the command delay within the period, in control periods.
        latency = self.params["action_latency"].floor() + (self._delay_steps[:, None] / self.cfg.substeps)
        if self.tanks is not None:  # the tank's level as a fraction of T_max
            parts.append(torch.from_numpy(self.tanks.level / self.tanks.params.t_max).to(self._q)[:, None])
        return torch.cat((self._q, self._dq, self.last_action, *parts, latency), 1)

    def _filter_action(self, action: torch.Tensor) -> torch.Tensor:
        """The energy tank, where the ROS 2 node runs it: the newest command's set-points (about the joint positions
        now) are filtered, then mapped back to normalised actions as the node's ``normalized_action`` does (clipped
        to ``[-1, 1]``), and those travel through the latency queue. Without a tank: ``action`` as is."""
        if self.tanks is None:
            return action
        base = self._q if self.cfg.targets == "relative" else self.home
        filtered = self.tanks.filter(self.command(action)[:, :7], self._q, self._dq)
        arm = ((filtered - base) / self.cfg.action_scale).clamp(-1.0, 1.0)
        return torch.cat((arm, action[:, 7:]), 1)

    def _filter_metrics(self) -> dict[str, torch.Tensor]:
        """The tank's level (J) and last set-point scaling per world, when the tank is in the loop."""
        if self.tanks is None:
            return {}
        return {k: torch.from_numpy(getattr(self.tanks, k)).to(self._q) for k in ("level", "alpha")}

    def _filter_episode_metrics(self) -> dict[str, torch.Tensor]:
        """The lowest tank level of the episode ending now (J), when the tank is in the loop."""
        return {} if self.tanks is None else {"lowest_tank_j": torch.from_numpy(self.tanks.lowest.copy()).to(self._q)}

    def _state_finite(self) -> torch.Tensor:
        return torch.isfinite(self._q).all(-1) & torch.isfinite(self._dq).all(-1)

    # ------------------------------------------------------------------------------------------- checkpoints
    goal_state: tuple[str, ...] = ()
    """Names of the task's own tensor attributes (goals, object estimates) saved with the env state."""

    def _task_state(self) -> dict[str, torch.Tensor]:
        goals = {f"goal/{k}": getattr(self, k).clone() for k in self.goal_state}
        tanks = {f"tank/{k}": v for k, v in self.tanks.state().items()} if self.tanks is not None else {}
        physics = {f"physics/{k}": v for k, v in self.physics.state().items()}
        return {**goals, **tanks, **physics, "command_delay_steps": self._delay_steps.clone()}

    def _load_task_state(self, state: dict[str, torch.Tensor]) -> None:
        self.physics.load_state({k.removeprefix("physics/"): v for k, v in state.items() if k.startswith("physics/")})
        for k in self.goal_state:
            getattr(self, k).copy_(state[f"goal/{k}"])
        if self.tanks is not None:
            self.tanks.load_state({k.removeprefix("tank/"): v for k, v in state.items() if k.startswith("tank/")})
        if "command_delay_steps" in state:  # checkpoints before env.command_delay had none
            self._delay_steps.copy_(state["command_delay_steps"])
        for k in self._model_params:
            self._in_model[k].copy_(self.params[k])
        self._read_state()

    # ------------------------------------------------------------------------------------------ deployment
    def action_spec(self) -> ActionSpec:
        """Normalised action -> joint targets (rad) or torques (N m), plus the finger opening (m) if commanded."""
        s = self.cfg.action_scale
        names = list(panda.ARM_JOINTS)
        reference = ""
        if self.cfg.control_mode == "impedance":
            relative = self.cfg.targets == "relative"
            reference = "joint_pos" if relative else ""
            offset = [0.0] * 7 if relative else list(panda.HOME)
            spec = {"kind": "position", "scale": [s] * 7, "offset": offset, "low": list(panda.Q_MIN),
                    "high": list(panda.Q_MAX), "unit": "rad"}  # fmt: skip
        else:
            tau = list(panda.TAU_MAX)
            spec = {"kind": "torque", "scale": [s * t for t in tau], "offset": [0.0] * 7,
                    "low": [-t for t in tau], "high": tau, "unit": "N m"}  # fmt: skip
        if self.uses_gripper:
            grip_scale, grip_offset = gripper_scale_offset(self.cfg.gripper_action)
            names.append(panda.FINGER_JOINTS[0])
            grip = (("scale", grip_scale), ("offset", grip_offset), ("low", 0.0), ("high", panda.FINGER_STROKE))
            for key, value in grip:
                spec[key] = [*spec[key], value]
        return ActionSpec(size=len(names), names=names, reference=reference, **spec)  # type: ignore[arg-type]

    def filter_defaults(self) -> dict[str, Any]:
        """Energy-tank defaults: :attr:`tank_max_j` at most, starting half full, harvesting the impedance damping's
        dissipation, no refill.

        Measured with the trained panda-reach policy (64 randomised episodes, MuJoCo; docs/benchmarks.md): success
        89 % unfiltered, 91 % with ``T_max`` 20 J, 80 % with 10 J, 31 % with 5 J — the policy was trained without the
        tank. Lift and push move the cube against gravity and friction and need more (their classes say how much).
        Near people set 1–2 J (``tank_max_j``) and accept slower motion.

        A policy trained behind the tank (``env.passivity``) deploys behind the same tank: its sizes and refill are
        the defaults, and ``trained_with_tank_j`` tells the node that it must not run the policy without one (such a
        policy commands set-point jumps that only the tank makes gentle).
        """
        p = self.cfg.passivity
        t_max, t_init, t_min, power = self.tank_max_j, self.tank_max_j / 2, 0.1, 0.0
        trained: dict[str, float] = {}
        if p.tank_max_j is not None:
            t_max, t_init, t_min, power = p.tank_max_j, p.initial_j, p.tank_min_j, p.tank_power_w
            trained = {"trained_with_tank_j": p.tank_max_j}
        sizes = {"tank_init_j": t_init, "tank_min_j": t_min, "tank_max_j": t_max, "tank_power_w": power}
        return {
            **sizes,
            "tank_margin_j": p.tank_margin_j if p.enabled else 0.0,
            "harvest_damping": list(self.cfg.damping),
            **trained,
        }

    def measured_latency(self) -> EnvVariant | None:
        """This config with the ROS 2 node's measured command delay in place of the training's latency: no whole
        periods (the ``action_latency`` term dropped) and ``command_delay`` from 0 to
        :data:`sim.robots.panda.COMMAND_DELAY_S` within the period, as PyBullet's robot draws it. ``None`` where
        training already draws exactly that, or where the control period is no longer than that delay (a delay within
        the period cannot express it)."""
        c, delay = self.cfg, (0.0, panda.COMMAND_DELAY_S)
        if delay[1] >= c.dt:
            return None
        periods = [t for t in c.randomization if t.param == "action_latency" and t.operation != "scale"]
        if tuple(c.command_delay) == delay and not any(_draws_a_whole_period(t) for t in periods):
            return None
        kept = [t for t in c.randomization if t.param != "action_latency"]
        words = f"measured command delay 0-{delay[1] * 1e3:g} ms, no whole periods"
        return EnvVariant(replace(c, randomization=kept, command_delay=delay), words, "measured_delay")

    def default_pose(self) -> list[float]:
        """Home pose the policy starts from (rad), and the open gripper (m) if commanded."""
        return [*panda.HOME, *([panda.FINGER_STROKE] if self.uses_gripper else [])]

    def arm_contract_extra(self) -> dict[str, object]:
        """Control mode, gains, limits and the nominal robot the policy was trained for."""
        c = self.cfg
        return {
            "robot": {"name": "franka-emika-panda", "model": "sim/robots/assets/panda.xml"},
            "control_mode": c.control_mode,
            "gravity_compensation": "by the robot (libfranka / franka_ros2 convention)",
            "impedance": {"stiffness_nm_per_rad": list(c.stiffness), "damping_nms_per_rad": list(c.damping)},
            "limits": {
                "q_min_rad": list(panda.Q_MIN),
                "q_max_rad": list(panda.Q_MAX),
                "dq_max_rad_s": list(panda.DQ_MAX),
                "tau_max_nm": list(panda.TAU_MAX),
            },
            "frames": "base frame of panda_link0, z up; tcp 0.1034 m beyond the flange along the hand's z axis",
            "command_delay_s": list(c.command_delay),
            "start": "move to default_pose, then start the policy with last_action = 0",
        }

    def close(self) -> None:
        """Release the physics."""
        self.physics.close()


CUBE_SIZE = 0.05
"""Nominal edge of the cube, m (``env.cube_size`` sets it per task)."""
CUBE_SIZE_RANGE = (0.02, 0.07)
"""Edges ``env.cube_size`` accepts, m: at 7 cm, 10 % larger still fits the open gripper (0.08 m,
franka_description's hand); below 2 cm the closed finger pads (1.8 cm across, ``sim/robots/assets/panda.xml``) cover
it."""
CUBE_MASS = 0.1
"""Nominal cube mass, kg."""


def default_cube_randomization() -> list[RandomizationTerm]:
    """Arm randomisation plus the cube: mass 0.05–0.3 kg, edge ±10 % of ``env.cube_size`` (4.5–5.5 cm at 5 cm),
    friction coefficient 0.5–1.2 (wood / plastic on wood)."""
    return [
        *default_arm_randomization(),
        RandomizationTerm("object_mass", "uniform", (0.5, 3.0), "scale"),
        RandomizationTerm("object_size", "uniform", (0.9, 1.1), "scale"),
        RandomizationTerm("object_friction", "uniform", (0.6, 1.5), "scale"),
    ]


def default_cube_noise() -> SensorNoise:
    """Arm encoders plus a camera tracker: 5 mm white noise and a 1 cm per-episode bias on the cube position."""
    noise = default_arm_noise()
    noise.std["object_pos"] = 0.005
    noise.bias_std["object_pos"] = 0.01
    return noise


@dataclass
class CubeTaskConfig(PandaConfig):
    """What the cube tasks' configurations share (see :class:`PandaConfig`).

    Attributes:
        cube_low: Lower corner of the cube's start area (x, y), m.
        cube_high: Upper corner of the cube's start area, m.
        cube_size: Nominal edge of the cube, m (``object_size`` randomises around it), within
            :data:`CUBE_SIZE_RANGE`. ManiSkill's PushCube and PickCube use a 4 cm cube, Isaac Lab's Franka lift a
            4.8 cm one (its DexCube at scale 0.8).
    """

    episode_length_s: float = 5.0
    cube_size: float = CUBE_SIZE
    cube_low: tuple[float, float] = (0.4, -0.15)
    cube_high: tuple[float, float] = (0.6, 0.15)
    randomization: list[RandomizationTerm] = field(default_factory=default_cube_randomization)
    noise: SensorNoise = field(default_factory=default_cube_noise)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self, ("cube_low", "cube_high"), "env.", positive=False)
        low, high = CUBE_SIZE_RANGE
        if not low <= self.cube_size <= high:  # NaN fails too
            raise TaskConfigError(f"env.cube_size must be in [{low}, {high}] m, got {self.cube_size}")
        model = panda.build_model("impedance", self.scene())
        check_randomization(self.randomization, {**arm_param_specs(model), **CubeTask.cube_param_specs(model)})

    def scene(self) -> panda.Scene:
        """The table and this task's cube (:attr:`cube_size`, :data:`CUBE_MASS`)."""
        return panda.Scene(table=True, cube_size=self.cube_size, cube_mass=CUBE_MASS)


class CubeTask(PandaTask):
    """A Panda task with a cube on the table (push, lift): cube state, its randomised mass and friction, and the
    cube position as the robot would see it — a camera tracker's estimate, ``object_delay`` control periods old, with
    noise (``noise.std.object_pos``) and a per-episode bias (``noise.bias_std.object_pos``).

    Object parameters: ``object_mass`` [1] kg, ``object_size`` [1] m (edge length: ``geom_size``; the inertia
    follows mass and size, ``m a² / 6``), ``object_friction`` [1] (sliding friction of the cube's geom).
    Privileged extras: exact cube pose and velocity, and the normal force each finger pad feels (touch sensors, N).
    """

    cfg: CubeTaskConfig
    object_delay = 1
    """Age of the cube position estimate, control periods (camera exposure + tracking + transport at 25 Hz)."""

    def _setup_cube(self, model: mujoco.MjModel) -> None:
        self._cube_body = model.body("cube").id
        self._pad_touch = sensor_columns(model, "left_touch", "right_touch")
        self._palm_touch = sensor_columns(model, "palm_touch")
        self._cube_geom = model.geom("cube").id
        adr = int(model.joint("cube").qposadr[0])
        self._cube_qpos = torch.arange(adr, adr + 7, device=self.device)
        vadr = int(model.joint("cube").dofadr[0])
        self._cube_qvel = torch.arange(vadr, vadr + 6, device=self.device)
        n = self.num_envs
        self.cube_pos = torch.zeros(n, 3, device=self.device)
        self.cube_quat = torch.zeros(n, 4, device=self.device)
        self.cube_vel = torch.zeros(n, 6, device=self.device)
        self._cube_seen = torch.zeros(n, self.object_delay + 1, 3, device=self.device)

    @staticmethod
    def cube_param_specs(model: mujoco.MjModel) -> dict[str, ParamSpec]:
        """Randomisable cube parameters, nominal values from the model."""
        body, geom = model.body("cube").id, model.geom("cube").id
        return {
            "object_mass": ParamSpec((float(model.body_mass[body]),), lower=0.0, unit="kg"),
            "object_size": ParamSpec((2 * float(model.geom_size[geom][0]),), lower=0.0, unit="m"),
            "object_friction": ParamSpec((float(model.geom_friction[geom][0]),), lower=0.0),
        }

    def _task_fields(self) -> list[str]:
        return ["body_mass", "body_inertia", "geom_size", "geom_friction"]

    def drawn_geom_sizes(self) -> dict[int, torch.Tensor]:
        """Per-world sizes a camera must draw (:mod:`sim.rendering`): the cube's half edges ``[N, 3]``, m."""
        return {self._cube_geom: self.cube_half()[:, None].expand(-1, 3)}

    def cube_half(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Half edge of each world's cube, m ``[N]`` (or ``[n]`` for ``rows``)."""
        size = self.params["object_size"][:, 0]
        return (size if rows is None else size[rows]) / 2

    def _task_model_params(self, rows: torch.Tensor, changed: dict[str, torch.Tensor]) -> None:
        ids = rows.to(self.physics.device)
        randomized = {t.param for t in self.cfg.randomization}
        if randomized & {"object_mass", "object_size"}:
            mass, edge = changed["object_mass"][:, 0], changed["object_size"][:, 0]
            inertia = (mass * edge.square() / 6.0)[:, None].expand(-1, 3)
            self.physics.set_field("body_mass", ids, mass, (self._cube_body,))
            self.physics.set_field("body_inertia", ids, inertia, (self._cube_body,))
            self.physics.set_field("geom_size", ids, (edge / 2)[:, None].expand(-1, 3), (self._cube_geom,))
        if "object_friction" in randomized:
            self.physics.set_field("geom_friction", ids, changed["object_friction"][:, 0], (self._cube_geom, 0))

    def _place_cube(self, rows: torch.Tensor, qpos: torch.Tensor, xy: torch.Tensor) -> None:
        """Put the cube of worlds ``rows`` flat on the table at ``xy [n, 2]`` (in ``qpos [n, nq]``)."""
        adr = self._cube_qpos
        qpos[:, adr[:2]] = xy
        qpos[:, adr[2]] = panda.TABLE_HEIGHT + self.cube_half(rows)
        qpos[:, adr[3:]] = torch.tensor([1.0, 0.0, 0.0, 0.0], device=self.device)
        self._cube_seen[rows] = qpos[:, adr[:3]].unsqueeze(1)

    def _read_task_state(self) -> None:
        qpos = self.physics.qpos.to(self.device, torch.float32)
        adr = self._cube_qpos
        self.cube_pos = qpos[:, adr[:3]]
        self.cube_quat = qpos[:, adr[3:]]
        self.cube_vel = self.physics.qvel.to(self.device, torch.float32)[:, self._cube_qvel]

    def _after_step(self) -> None:
        self._cube_seen = torch.cat((self.cube_pos.unsqueeze(1), self._cube_seen[:, :-1]), 1)

    def cube_tilt(self) -> torch.Tensor:
        """How far each cube is from lying on a face: the angle between the world's z axis and the nearest of the
        cube's axes, rad ``[N]``, in ``[0, acos(1/sqrt(3))]`` (0.96). A cube rolled over onto another face reads 0
        again; while it rolls over an edge it passes pi/4."""
        w, x, y, z = self.cube_quat.unbind(-1)
        # The world z axis in the cube's frame: the third row of the cube's rotation matrix (MuJoCo's w, x, y, z).
        up = torch.stack((2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), -1)
        return up.abs().amax(-1).clamp(max=1.0).acos()

    def _task_measurements(self, world: int) -> list[Measurement]:
        """The cube tracker's estimate, as the policy sees it in training (delayed, noisy, biased while the
        randomisation is on); position only."""
        seen = self.last_signals["object_pos"][world].detach().cpu().numpy()
        return [Pose("object_pose", seen, np.eye(3), self.BASE_FRAME)]

    def _cube_signals(self) -> dict[str, torch.Tensor]:
        return {"object_pos": self._cube_seen[:, -1]}

    def cube_estimate(self) -> torch.Tensor:
        """The cube centre as the latest onboard observation gives it (delayed, noisy, biased), m ``[N, 3]``."""
        return self.builder.latest("object_position")

    def _cube_privileged(self) -> torch.Tensor:
        """Exact cube position, orientation and velocity, and the finger pads' touch forces ``[N, 15]``."""
        return torch.cat((self.cube_pos, self.cube_quat, self.cube_vel, self._pad_forces()), 1)

    def _terminated(self) -> torch.Tensor:
        return self._cube_lost() | ~self._state_finite()

    def cube_facts(self, **envelope: object) -> dict[str, object]:
        """Contract facts every cube task shares: the arm, the cube, and the training envelope.

        Args:
            envelope: The task's own envelope entries (added to cube placement and episode length).
        """
        c = self.cfg
        size = self.randomizer.specs["object_size"].nominal[0]
        return {
            **self.arm_contract_extra(),
            "object": f"{size:g} m cube; object_position: its centre in the base frame from a camera tracker, "
            f"{self.object_delay} control period(s) old",
            "cube": {
                "size_m": size,
                "mass_kg": self.randomizer.specs["object_mass"].nominal[0],
                "estimate_delay_periods": self.object_delay,
                "estimate_noise_m": self.noise.std.get("object_pos", 0.0),
                "estimate_bias_m": self.noise.bias_std.get("object_pos", 0.0),
            },
            "training_envelope": {
                "cube_low_m": list(c.cube_low),
                "cube_high_m": list(c.cube_high),
                "init_joint_range_rad": c.init_joint_range,
                **envelope,
                "episode_length_s": c.episode_length_s,
            },
        }

    TOUCH_FORCE_N = 1.0
    """Normal force above which a touch sensor (finger pads, housing) counts as touching, N: both pads for a grasp,
    the housing for ``palm_contact``. Chosen, not published: well above the sensors' contact jitter at rest, far
    below the gripper's ~50 N squeeze on the cube (sim.robots.panda)."""

    def _pad_forces(self) -> torch.Tensor:
        """Normal force on the left and right finger pad (touch sensors), N ``[N, 2]``."""
        return self.physics.sensordata[:, self._pad_touch].to(self.device, torch.float32)

    def palm_force(self) -> torch.Tensor:
        """Normal force on the hand's housing (the palm box's touch sensor) at the control period's last physics
        step, N ``[N]``: the cube's top edge or the table pressing on it."""
        return self.physics.sensordata[:, self._palm_touch.start].to(self.device, torch.float32)

    def housing_contact(self) -> torch.Tensor:
        """The hand's housing presses on something (the cube, the table) with more than :attr:`TOUCH_FORCE_N`,
        ``[N]`` bool: what the ``palm_contact`` reward term prices."""
        return self.palm_force() > self.TOUCH_FORCE_N

    def _grasped(self) -> torch.Tensor:
        """Both finger pads press on something with at least :attr:`TOUCH_FORCE_N` while the cube's centre lies
        between the finger tips (TCP within a half edge + 1 cm of it): the cube is held, ``[N]`` bool. A pad on the
        table or one finger on the cube is not a grasp."""
        between = (self._tcp_pos - self.cube_pos).norm(dim=-1) < self.cube_half() + 0.01
        return (self._pad_forces() > self.TOUCH_FORCE_N).all(-1) & between

    def _cube_lost(self) -> torch.Tensor:
        """The cube left the table (fell off or was thrown), ``[N]``."""
        return (self.cube_pos[:, 2] < panda.TABLE_HEIGHT - 0.05) | ~torch.isfinite(self.cube_pos).all(-1)


def rotation_error(r: torch.Tensor, r_target: torch.Tensor) -> torch.Tensor:
    """Angle (rad) of the rotation between ``r`` and ``r_target`` ``[N, 3, 3] -> [N]``."""
    cos = ((r.transpose(1, 2) @ r_target).diagonal(dim1=1, dim2=2).sum(-1) - 1.0) / 2.0
    return torch.arccos(cos.clamp(-1.0, 1.0))


def rot6(r: torch.Tensor) -> torch.Tensor:
    """Continuous 6-value orientation: the first two columns of ``r`` ``[N, 3, 3] -> [N, 6]``, column by column."""
    return r[:, :, :2].transpose(1, 2).reshape(-1, 6)


def yaw_rotation(yaw: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[N, 3, 3]`` about z by ``yaw [N]`` rad."""
    c, s = yaw.cos(), yaw.sin()
    zero, one = torch.zeros_like(yaw), torch.ones_like(yaw)
    return torch.stack((c, -s, zero, s, c, zero, zero, zero, one), -1).reshape(-1, 3, 3)


GRIPPER_DOWN = torch.tensor([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])
"""TCP orientation with the gripper pointing down and its fingers along the base y axis (the home pose's)."""
