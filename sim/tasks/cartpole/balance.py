"""Task ``cartpole-balance``: keep a pole upright on a cart by pushing the cart (MuJoCo CPU, batched).

The classic benchmark (Barto, Sutton & Anderson 1983; gym's ``CartPole`` constants: 1 kg cart, 0.1 kg pole,
1 m long) with a continuous force, domain randomisation and sensor noise. It is tiny and fast: it proves the
:class:`~sim.vec_env.VecEnv` contract on a real physics engine and backs the "learning improves" test.

Action: one normalised force ``a`` in ``[-1, 1]``; the cart is pushed with ``F = max_force * a`` newtons (kind
``torque``: a generalised force on the slider joint). Randomised actuator strength scales the force applied.

Onboard (``policy``) observation, ``5 + H`` values::

    cart_pos [1] m | (cos, sin) of the pole angle [2] | cart_vel [1] m/s | pole_ang_vel [1] rad/s |
    last_action [1] x H (normalised, newest first)

The pole angle is 0 upright and positive when the pole leans towards +x. Privileged (``critic``) observation:
the noise-free state, the last action, and the randomised parameters relative to nominal (latency in steps).

An episode fails (``terminated``) when the cart leaves ``±max_cart_position`` or the pole leans past
``max_pole_angle``; it succeeds when it reaches the time limit without failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np
import torch

from policies.runtime.contract import ActionSpec, ObservationTerm
from sim import rewards
from sim.backends.mujoco_batch import MujocoBatch, load_model
from sim.randomization import ParamSpec, RandomizationTerm
from sim.registry import TaskSpec
from sim.tasks.base import BatchedTask, SensorNoise, check_fields, check_randomization, check_reward_scales
from sim.vec_env import TaskConfigError

MODEL_PARAMS = ("pole_mass", "cart_mass", "joint_damping", "actuator_strength")
"""Randomisable parameters that live in the MuJoCo model (``action_latency`` is handled by the base class)."""


def _default_randomization() -> list[RandomizationTerm]:
    return [
        # +-20 % on both masses: a different pole or payload on the cart.
        RandomizationTerm("pole_mass", "uniform", (0.8, 1.2), "scale"),
        RandomizationTerm("cart_mass", "uniform", (0.8, 1.2), "scale"),
        # Viscous friction of rail and hinge is poorly known: a factor of 2 either way (one draw for both).
        RandomizationTerm("joint_damping", "uniform", (0.5, 2.0), "scale"),
        # Motor constant / amplifier gain, +-10 %.
        RandomizationTerm("actuator_strength", "uniform", (0.9, 1.1), "scale"),
        # 0 or 1 control step of latency, equally likely (the value is floored).
        RandomizationTerm("action_latency", "uniform", (0.0, 2.0), "add"),
    ]


def _default_rewards() -> dict[str, float]:
    # Per-second rates; the env multiplies by dt. A balanced episode of 5 s earns about 10.
    return {"alive": 1.0, "upright": 1.0, "cart_position": -0.1, "velocity": -0.01, "action": -0.01}


def _default_noise() -> SensorNoise:
    return SensorNoise(
        std={"cart_pos": 0.002, "pole_cos_sin": 0.005, "cart_vel": 0.01, "pole_ang_vel": 0.02},
        bias_std={"cart_pos": 0.005},
    )


@dataclass
class CartpoleBalanceConfig:
    """Configuration of ``cartpole-balance`` (see the module docstring).

    Attributes:
        dt: Control period, s (50 Hz).
        substeps: MuJoCo steps per control period (the physics timestep is ``dt / substeps``).
        episode_length_s: Episode time limit, s.
        max_force: Force at ``|a| = 1``, N.
        action_history: Number of past actions in the onboard observation (``H``).
        init_position_range: Initial cart position, uniform in ``±init_position_range``, m.
        init_angle_range: Initial pole angle, uniform in ``±init_angle_range``, rad.
        init_velocity_range: Initial cart (m/s) and pole (rad/s) velocities, uniform in ``±`` this.
        max_cart_position: Fail when ``|x|`` exceeds this, m.
        max_pole_angle: Fail when the pole leans further than this from upright, rad.
        reward_scales: Scale of each named reward term, per second.
        randomization: Domain randomisation terms.
        noise: Onboard sensor noise.
    """

    dt: float = 0.02
    substeps: int = 2
    episode_length_s: float = 5.0
    max_force: float = 10.0
    action_history: int = 2
    init_position_range: float = 0.2
    init_angle_range: float = 0.1
    init_velocity_range: float = 0.05
    max_cart_position: float = 2.4
    max_pole_angle: float = 0.4
    reward_scales: dict[str, float] = field(default_factory=_default_rewards)
    randomization: list[RandomizationTerm] = field(default_factory=_default_randomization)
    noise: SensorNoise = field(default_factory=_default_noise)

    def __post_init__(self) -> None:
        positive = ("dt", "substeps", "episode_length_s", "max_force", "action_history", "max_cart_position")
        check_fields(self, positive, "env.")
        ranges = ("init_position_range", "init_angle_range", "init_velocity_range")
        check_fields(self, ranges, "env.", positive=False)
        if any(getattr(self, name) < 0 for name in ranges):
            raise TaskConfigError(f"env.{', env.'.join(ranges)} must be >= 0")
        check_reward_scales(self.reward_scales)
        check_randomization(self.randomization, param_specs(load_model("cartpole")))
        if not 0.0 < self.max_pole_angle < np.pi / 2:
            raise TaskConfigError(f"max_pole_angle must be in (0, pi/2) rad, got {self.max_pole_angle}")


def param_specs(model: mujoco.MjModel) -> dict[str, ParamSpec]:
    """Randomisable parameters of the cart-pole, nominal values read from the MuJoCo model."""
    dofs = [int(model.joint(j).dofadr[0]) for j in ("slider", "hinge")]
    return {
        "pole_mass": ParamSpec((float(model.body_mass[model.body("pole").id]),), lower=0.0, unit="kg"),
        "cart_mass": ParamSpec((float(model.body_mass[model.body("cart").id]),), lower=0.0, unit="kg"),
        "joint_damping": ParamSpec(tuple(float(d) for d in model.dof_damping[dofs]), lower=0.0),
        "actuator_strength": ParamSpec((1.0,), lower=0.0, unit="(ratio)"),
    }


class CartpoleBalance(BatchedTask):
    """Cart-pole balancing on batched MuJoCo (see the module docstring)."""

    task_name = "cartpole-balance"

    def __init__(self, cfg: CartpoleBalanceConfig, num_envs: int, device: torch.device, seed: int = 0) -> None:
        self.cfg = cfg
        model = load_model("cartpole")
        model.opt.timestep = cfg.dt / cfg.substeps
        self._pole_body, self._cart_body = model.body("pole").id, model.body("cart").id
        self._qpos_idx = [int(model.joint(j).qposadr[0]) for j in ("slider", "hinge")]
        self._dof_idx = [int(model.joint(j).dofadr[0]) for j in ("slider", "hinge")]
        self._pole_length = 2.0 * float(model.geom("pole").size[1])  # capsule half-length -> length, m
        specs = param_specs(model)
        terms = [
            ObservationTerm("cart_position", 1, "cart_pos", unit="m"),
            ObservationTerm("pole_angle", 2, "pole_cos_sin"),
            ObservationTerm("cart_velocity", 1, "cart_vel", unit="m/s"),
            ObservationTerm("pole_angular_velocity", 1, "pole_ang_vel", unit="rad/s"),
            ObservationTerm("last_action", 1, "last_action", history=cfg.action_history),
        ]
        super().__init__(
            num_envs=num_envs,
            num_actions=1,
            dt=cfg.dt,
            episode_length_s=cfg.episode_length_s,
            device=device,
            seed=seed,
            policy_terms=terms,
            privileged_size=5 + 1 + 5 + 1,
            param_specs=specs,
            randomization=cfg.randomization,
            noise=cfg.noise,
            reward_scales=cfg.reward_scales,
        )
        self.sim = MujocoBatch(model, num_envs, frame_skip=cfg.substeps)
        self._nominal = torch.cat([self.randomizer.nominal(k) for k in MODEL_PARAMS], 1)  # [1, 5]
        self._in_model = self._nominal.expand(num_envs, -1).clone()  # parameter values the sim runs with
        self._state = torch.zeros(num_envs, 4, device=device)  # x, theta, x_dot, theta_dot (noise-free)

    # ------------------------------------------------------------------------------------------- physics
    def _simulate(self, action: torch.Tensor) -> None:
        self._sync_model()
        force = (action * self.cfg.max_force).to("cpu", torch.float64).numpy()
        self.sim.step(force)
        self._read_state()

    def _read_state(self) -> None:
        """Copy the joint state out of the sim (the numpy -> torch boundary)."""
        x = np.concatenate((self.sim.qpos[:, self._qpos_idx], self.sim.qvel[:, self._dof_idx]), 1)
        self._state = torch.from_numpy(x).to(self.device, torch.float32)

    def _sync_model(self) -> None:
        """Write the randomised parameters of worlds whose values changed into their MuJoCo models."""
        current = torch.cat([self.params[k] for k in MODEL_PARAMS], 1)
        changed = (current != self._in_model).any(1)
        if not bool(changed.any()):
            return
        rows = changed.nonzero().squeeze(-1)
        self._in_model[rows] = current[rows]
        ids = rows.cpu().numpy()
        p = {k: self.params[k][rows].to("cpu", torch.float64).numpy() for k in MODEL_PARAMS}
        self.sim.set_body_mass(ids, self._pole_body, p["pole_mass"][:, 0])
        self.sim.set_body_mass(ids, self._cart_body, p["cart_mass"][:, 0])
        for j, dof in enumerate(self._dof_idx):
            self.sim.set_field("dof_damping", ids, p["joint_damping"][:, j], (dof,))
        gear = self.sim.nominal("actuator_gear")[0, 0]
        self.sim.set_field("actuator_gear", ids, gear * p["actuator_strength"][:, 0], (0, 0))

    def _reset_worlds(self, mask: torch.Tensor) -> None:
        rows = mask.nonzero().squeeze(-1)
        c = self.cfg
        half_width = torch.tensor(
            [c.init_position_range, c.init_angle_range, c.init_velocity_range, c.init_velocity_range],
            device=self.device,
        )
        init = half_width * (2 * torch.rand(rows.numel(), 4, generator=self.gen, device=self.device) - 1)
        self._state[rows] = init
        x = init.to("cpu", torch.float64).numpy()
        qpos = np.zeros((rows.numel(), self.sim.model.nq))  # qpos0 of this model is 0
        qvel = np.zeros((rows.numel(), self.sim.model.nv))
        qpos[:, self._qpos_idx] = x[:, :2]
        qvel[:, self._dof_idx] = x[:, 2:]
        self.sim.reset(rows.cpu().numpy(), qpos, qvel)

    def _task_state(self) -> dict[str, torch.Tensor]:
        return {"mujoco_state": torch.from_numpy(self.sim.state.copy()), "state": self._state.clone()}

    def _load_task_state(self, state: dict[str, torch.Tensor]) -> None:
        self.sim.state[:] = state["mujoco_state"].numpy()
        self._state = state["state"].to(self.device).clone()
        self._in_model.fill_(float("nan"))  # every world's model fields are rewritten before the next step

    # ----------------------------------------------------------------------------------------- task logic
    def _signals(self) -> dict[str, torch.Tensor]:
        s = self._state
        return {
            "cart_pos": s[:, 0:1],
            "pole_cos_sin": torch.cat((s[:, 1:2].cos(), s[:, 1:2].sin()), 1),
            "cart_vel": s[:, 2:3],
            "pole_ang_vel": s[:, 3:4],
            "last_action": self.last_action,
        }

    def _privileged(self) -> torch.Tensor:
        s = self._state
        params = torch.cat([self.params[k] for k in MODEL_PARAMS], 1) / self._nominal
        latency = self.params["action_latency"].floor()
        return torch.cat((s[:, 0:1], s[:, 1:2].cos(), s[:, 1:2].sin(), s[:, 2:4], self.last_action, params, latency), 1)

    def reward_names(self) -> list[str]:
        """Reward terms of this task."""
        return ["alive", "upright", "cart_position", "velocity", "action"]

    def _reward_terms(self, action: torch.Tensor, terminated: torch.Tensor) -> dict[str, torch.Tensor]:
        s = self._state
        return {
            "alive": rewards.alive(self.num_envs, self.device),
            "upright": s[:, 1].cos(),
            "cart_position": s[:, 0].square(),
            "velocity": rewards.squared_norm(s[:, 2:4]),
            "action": rewards.squared_norm(action),
        }

    def _terminated(self) -> torch.Tensor:
        s = self._state
        out = (s[:, 0].abs() > self.cfg.max_cart_position) | (s[:, 1].abs() > self.cfg.max_pole_angle)
        return out | ~torch.isfinite(s).all(-1)

    def _success(self) -> torch.Tensor:
        return (self.episode_step >= self.max_episode_length) & ~self._terminated()

    def _metrics(self) -> dict[str, torch.Tensor]:
        return {"cart_position": self._state[:, 0].abs(), "pole_angle": self._state[:, 1].abs()}

    # ------------------------------------------------------------------------------------------ deployment
    def action_spec(self) -> ActionSpec:
        """Normalised action -> cart force ``F = max_force * a`` in N, limited to ``±max_force``."""
        f = self.cfg.max_force
        return ActionSpec(
            size=1, names=["slider"], kind="torque", scale=[f], offset=[0.0], low=[-f], high=[f], unit="N"
        )

    def contract_extra(self) -> dict[str, object]:
        """Sign conventions, failure limits and the nominal robot the policy was trained around."""
        c, nominal = self.cfg, {k: self.randomizer.specs[k].nominal for k in MODEL_PARAMS}
        return {
            "frames": "x along the rail (m); pole angle 0 upright, positive leaning towards +x (rad)",
            "limits": {"cart_position_m": c.max_cart_position, "pole_angle_rad": c.max_pole_angle},
            "robot": {
                "name": "cartpole",
                "cart_mass_kg": nominal["cart_mass"][0],
                "pole_mass_kg": nominal["pole_mass"][0],
                "pole_length_m": self._pole_length,
                "joint_damping_slider_hinge": list(nominal["joint_damping"]),
            },
        }

    def close(self) -> None:
        """Release the MuJoCo batch."""
        self.sim.close()


SPEC = TaskSpec(
    name="cartpole-balance",
    config_cls=CartpoleBalanceConfig,
    factory=CartpoleBalance,
    backend="mujoco",
    description="cart-pole balancing with a continuous force; batched MuJoCo on the CPU; randomised",
    robot="cartpole",
    success=">= 95% of 5 s episodes balanced to the time limit (|x| <= 2.4 m, |theta| <= 0.4 rad)",
)
"""The task's registration (sim/tasks/__init__.py lists it)."""
