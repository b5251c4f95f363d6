"""The energy tank in the training loop: every world's arm set-points pass through the deploy-time passivity filter.

With ``env.passivity.tank_max_j`` set (``--set env.passivity.tank_max_j=40``), each world owns an energy tank and
every set-point the policy commands goes through :func:`policies.runtime.passivity.setpoint_step` — the same function
the ROS 2 node's :class:`~policies.runtime.passivity.EnergyTank` runs — where the node runs it: on the newest command,
before the transport latency (``PandaTask._filter_action``). The jump from the set-point in force is scaled by
``alpha`` so that the virtual spring energy it injects fits in the tank, and the impedance damping's dissipation
refills it ("Towards passive safe RL": the policy learns with the filter it will be deployed behind, so the filtered
policy keeps its success). The filtered set-points go on as normalised actions, mapped back as the node's
``normalized_action`` maps them (clipped to ``[-1, 1]``), so that training, ``robot-rl eval``,
``bench/passivity.py`` and the simulated robot over DDS see one behaviour. (A first version filtered after the
latency, at the simulated controller: the lift teacher it trained kept 87 % there and 43 % through the node's path
with 0-1 steps of latency, 84 % without latency.) The tank starts each episode
at ``tank_init_j`` (half of ``tank_max_j`` unless set, as the contract's default), the gripper is not on the tank's
port, and the stiffness is the nominal ``env.stiffness`` the contract carries (the robot's controller gains are
randomised; the deployed filter knows only the nominal ones, and so does this one).

The filter runs in float64 on the host (``[N, 7]`` numbers per step; on CUDA one small copy each way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from policies.runtime.passivity import TankParams, setpoint_step
from sim.vec_env import TaskConfigError


@dataclass
class PassivityConfig:
    """The energy tank on the arm's set-points during training and evaluation (``env.passivity``).

    Attributes:
        tank_max_j: ``T_max``, J; ``null`` (default): no tank in the loop. The deploy default of a task is its
            contract's ``filter.tank_max_j`` (``PandaTask.tank_max_j``: lift 40 J, push 80 J).
        tank_init_j: ``T_0`` at every episode start, J; ``null``: half of ``tank_max_j`` (the contract's default).
        tank_min_j: ``T_min``, J.
        tank_margin_j: Margin ``M`` kept above ``T_min``, J.
        tank_power_w: Refill ``P``, W (0: a pure tank): the power the policy may inject on average, on top of what
            the damping harvests; the stored energy still never exceeds ``T_max``.
    """

    tank_max_j: float | None = None
    tank_init_j: float | None = None
    tank_min_j: float = 0.1
    tank_margin_j: float = 0.0
    tank_power_w: float = 0.0

    def __post_init__(self) -> None:
        for name in ("tank_max_j", "tank_init_j", "tank_min_j", "tank_margin_j", "tank_power_w"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise TaskConfigError(f"env.passivity.{name} must be a finite number >= 0, got {v}")
        if self.tank_max_j is None:
            return
        t0 = self.initial_j
        if not 0 < self.tank_min_j <= t0 <= self.tank_max_j:
            raise TaskConfigError(
                f"env.passivity needs 0 < tank_min_j <= tank_init_j <= tank_max_j, got {self.tank_min_j}, {t0}, "
                f"{self.tank_max_j}"
            )

    @property
    def enabled(self) -> bool:
        """Whether the tank is in the loop."""
        return self.tank_max_j is not None

    @property
    def initial_j(self) -> float:
        """``T_0``, J (half of ``T_max`` unless ``tank_init_j`` is set)."""
        assert self.tank_max_j is not None
        return self.tank_init_j if self.tank_init_j is not None else self.tank_max_j / 2

    def params(self, damping: tuple[float, ...]) -> TankParams:
        """The tank's parameters, harvesting ``damping`` ``[7]`` (N m s/rad)."""
        assert self.tank_max_j is not None
        return TankParams(
            self.initial_j, self.tank_min_j, self.tank_max_j, self.tank_margin_j, tuple(damping), self.tank_power_w
        )


class SetpointTanks:
    """One energy tank per world on the arm's joint set-points.

    Args:
        params: Tank parameters.
        num_envs: Worlds ``N``.
        stiffness: Nominal impedance stiffness ``[7]``, N m/rad.
        dt: Control period, s.
    """

    def __init__(self, params: TankParams, num_envs: int, stiffness: tuple[float, ...], dt: float) -> None:
        self.params = params
        self.dt = dt
        self.stiffness = np.asarray(stiffness, dtype=np.float64)
        self.damping = np.broadcast_to(np.asarray(params.damping, dtype=np.float64), (len(stiffness),)).copy()
        self.level = np.full(num_envs, params.t_init)  # T [N], J
        self.lowest = self.level.copy()  # lowest T of the episode [N], J
        self.alpha = np.ones(num_envs)  # scaling of the last step [N]
        self.setpoint = np.zeros((num_envs, len(stiffness)))  # set-point in force [N, 7], rad

    def reset(self, rows: torch.Tensor, q: torch.Tensor) -> None:
        """Refill the tanks of worlds ``rows`` ``[n]`` and hold their set-points at the joint positions ``q [n, 7]``."""
        r = rows.cpu().numpy()
        self.level[r] = self.lowest[r] = self.params.t_init
        self.alpha[r] = 1.0
        self.setpoint[r] = q.detach().cpu().numpy()

    def filter(self, target: torch.Tensor, q: torch.Tensor, dq: torch.Tensor) -> torch.Tensor:
        """The set-points to apply ``[N, 7]`` (rad, on ``target``'s device) for the commanded ``target [N, 7]``, at the
        joint positions ``q`` and velocities ``dq`` ``[N, 7]`` (rad, rad/s)."""

        def host(x: torch.Tensor) -> np.ndarray:
            return x.detach().cpu().numpy().astype(np.float64)

        step = setpoint_step(
            self.params, self.damping, self.level, host(target), self.setpoint, host(q), host(dq), self.stiffness,
            self.dt,
        )  # fmt: skip
        self.level, self.alpha, self.setpoint = step.tank, step.alpha, step.command
        np.minimum(self.lowest, self.level, out=self.lowest)
        return torch.from_numpy(step.command).to(target.device, target.dtype)

    def state(self) -> dict[str, torch.Tensor]:
        """Tank levels, lowest levels, last scalings and set-points, for exact resume."""
        return {k: torch.from_numpy(getattr(self, k).copy()) for k in ("level", "lowest", "alpha", "setpoint")}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state`."""
        for k in ("level", "lowest", "alpha", "setpoint"):
            getattr(self, k)[...] = state[k].numpy()
