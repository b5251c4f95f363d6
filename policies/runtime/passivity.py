"""Passivity filter: an energy tank on the policy's port to the robot (numpy only; mirrored in generated C).

The tank stores energy ``T`` (J), ``0 < T_min <= T <= T_max``. Power flowing from the policy into the robot is
positive. Sources: Ferraguti et al., T-RO 2015; Schindlbeck & Haddadin, ICRA 2015; Dietrich et al., RA-L 2017;
formulas as in ``shared/references.md``.

**Torque commands** (``kind: torque``), one call per control period ``dt`` with the measured ``q_k, qdot_k``:

1. *Settle* the previous step with the energy actually delivered under zero-order hold by the command that was
   applied, ``E = tau_appliedᵀ (q_k - q_{k-1})``, and harvest the damping dissipation
   ``H = sigma * qdot_{k-1}ᵀ D qdot_{k-1} dt`` (``sigma = 1`` while ``T < T_max``):
   ``T <- T - E + H``, and whatever exceeds ``T_max`` is discarded (reported as ``overflow``).
2. *Predict* the energy the new command would inject, ``E_hat = tauᵀ qdot_k dt``, and scale the command by
   ``alpha = 1`` if ``E_hat <= T - T_min - M`` or ``E_hat <= 0``, else ``clip((T - T_min - M) / E_hat, 0, 1)``.

**Set-point commands** (``kind: position``, an impedance controller with stiffness ``K`` and damping ``D``): the
virtual spring stores ``V(e) = ½ eᵀ K e`` with ``e = q_d - q``. Moving the set-point from ``q_d`` to
``q_d + alpha Δ`` injects exactly ``E(alpha) = alpha eᵀ K Δ + ½ alpha² Δᵀ K Δ`` before it acts, so the largest
``alpha`` in ``[0, 1]`` with ``E(alpha) <= T - T_min - M`` is taken and ``E(alpha)`` debited at once; the spring then
exchanges energy with the robot conservatively and the damper's dissipation ``qdotᵀ D qdot dt`` is harvested.

Energy bookkeeping is exact: ``sum(E) = T_0 - T_k + sum(H) - sum(overflow)`` to float64 round-off. ``T >= T_min``
holds exactly whenever the motion over a step matches its prediction (set-point commands always; torque commands on
plants that move by ``qdot dt`` per step); on a real robot the margin ``M`` must cover the one-step prediction error
of a torque command. A shortfall is never hidden by clipping ``T``: ``T`` is reported as it is, and while
``T - T_min - M <= 0`` every new command that would inject energy is scaled to zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.runtime.contract import ContractError


@dataclass(frozen=True)
class TankParams:
    """Energy-tank parameters (the contract's ``filter`` section carries them; ROS parameters may override).

    Attributes:
        t_init: Initial energy ``T_0``, J.
        t_min: Lower bound ``T_min > 0``, J.
        t_max: Upper bound ``T_max``, J (typical 5–10 J; near people 1–2 J).
        margin: Safety margin ``M`` kept above ``T_min`` when predicting, J.
        damping: Damping used for harvesting, N m s/rad per joint (one value for all, or one per joint).
    """

    t_init: float = 2.0
    t_min: float = 0.1
    t_max: float = 5.0
    margin: float = 0.0
    damping: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        for name in ("t_init", "t_min", "t_max", "margin"):
            if not math.isfinite(getattr(self, name)):
                raise ContractError(f"filter.{name} must be finite, got {getattr(self, name)}")
        if not 0 < self.t_min <= self.t_init <= self.t_max:
            raise ContractError(
                f"filter needs 0 < t_min <= t_init <= t_max, got {self.t_min}, {self.t_init}, {self.t_max}"
            )
        if self.margin < 0 or not self.damping or any(not (math.isfinite(d) and d >= 0) for d in self.damping):
            raise ContractError(f"filter.margin and filter.damping must be >= 0, got {self.margin}, {self.damping}")

    @classmethod
    def from_contract(cls, section: dict[str, Any]) -> TankParams:
        """Read the contract's ``filter`` section (keys ``tank_init_j``, ``tank_min_j``, ``tank_max_j``,
        ``tank_margin_j``, ``harvest_damping``); missing keys keep their defaults."""
        keys = {"tank_init_j": "t_init", "tank_min_j": "t_min", "tank_max_j": "t_max", "tank_margin_j": "margin"}
        kw: dict[str, Any] = {v: float(section[k]) for k, v in keys.items() if k in section}
        if "harvest_damping" in section:
            d = section["harvest_damping"]
            kw["damping"] = tuple(float(x) for x in (d if isinstance(d, list | tuple) else [d]))
        return cls(**kw)


@dataclass(frozen=True)
class TankStep:
    """What one filter step did.

    Attributes:
        command: ``[J]`` the command to apply (torque: ``alpha * tau``; set-point: ``q_d + alpha Δ``).
        alpha: Scaling in ``[0, 1]`` (1 when the tank sufficed).
        tank: Energy ``T`` after the step's bookkeeping, J.
        injected: Energy debited this step, J (torque: settled energy of the previous command; set-point: the jump).
        harvested: Damping energy credited this step, J.
        overflow: Energy discarded above ``T_max`` this step, J.
    """

    command: np.ndarray
    alpha: float
    tank: float
    injected: float
    harvested: float
    overflow: float


class EnergyTank:
    """Energy tank for ``num_joints`` joints; see the module docstring for the two command kinds.

    Args:
        params: Tank parameters.
        num_joints: Joints ``J`` on the port.
    """

    def __init__(self, params: TankParams, num_joints: int) -> None:
        if len(params.damping) not in (1, num_joints):
            raise ContractError(f"filter.harvest_damping has {len(params.damping)} values, expected 1 or {num_joints}")
        self.params = params
        self.num_joints = num_joints
        self.damping = np.broadcast_to(np.asarray(params.damping, dtype=np.float64), (num_joints,)).copy()
        self.reset()

    def reset(self) -> None:
        """Refill the tank to ``T_0`` and forget the previous step."""
        self.tank = float(self.params.t_init)
        self._prev: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # q, qdot, applied torque

    def _credit(self, injected: float, harvest_rate: float, dt: float) -> tuple[float, float, float]:
        """``T <- T - injected + H``, discarding overflow above ``T_max``; returns (injected, harvested, overflow)."""
        harvested = harvest_rate * dt if self.tank < self.params.t_max else 0.0
        t = self.tank - injected + harvested
        overflow = max(0.0, t - self.params.t_max)
        self.tank = self.params.t_max if overflow > 0 else t  # exactly T_max: no round-off just below it
        return injected, harvested, overflow

    def _alpha(self, e_hat: float) -> float:
        budget = self.tank - self.params.t_min - self.params.margin
        if e_hat <= budget or e_hat <= 0.0:  # fits, or predicted to give energy back (or none)
            return 1.0
        return float(min(1.0, max(0.0, budget / e_hat)))

    def torque(self, tau: np.ndarray, q: np.ndarray, qdot: np.ndarray, dt: float) -> TankStep:
        """Settle the previous step, then scale the new torque command ``tau`` ``[J]`` (N m); see the module doc.

        Raises:
            ContractError: An input is non-finite or of the wrong size (the tank is left unchanged).

        Args:
            tau: Commanded joint torques ``[J]``.
            q: Measured joint positions now ``[J]``, rad.
            qdot: Measured joint velocities now ``[J]``, rad/s.
            dt: Control period, s.
        """
        tau, q, qdot = _finite(self.num_joints, tau=tau, q=q, qdot=qdot, dt=dt)
        injected = harvested = overflow = 0.0
        if self._prev is not None:
            q0, qd0, applied = self._prev
            rate = float(qd0 @ (self.damping * qd0))
            injected, harvested, overflow = self._credit(float(applied @ (q - q0)), rate, dt)
        alpha = self._alpha(float(tau @ qdot) * dt)
        command = alpha * tau
        self._prev = (q.copy(), qdot.copy(), command.copy())
        return TankStep(command, alpha, self.tank, injected, harvested, overflow)

    def setpoint(
        self,
        target: np.ndarray,
        previous: np.ndarray,
        q: np.ndarray,
        qdot: np.ndarray,
        stiffness: np.ndarray,
        dt: float,
    ) -> TankStep:
        """Scale a set-point jump ``previous -> target`` so the spring energy it injects fits in the tank.

        Args:
            target: New set-point ``[J]``, rad.
            previous: Set-point in force until now ``[J]``, rad.
            q: Measured joint positions ``[J]``, rad.
            qdot: Measured joint velocities ``[J]``, rad/s (for harvesting the damper's dissipation).
            stiffness: Diagonal stiffness ``K`` ``[J]``, N m/rad.
            dt: Control period, s.
        """
        target, previous, q, qdot, k = _finite(
            self.num_joints, target=target, previous=previous, q=q, qdot=qdot, stiffness=stiffness, dt=dt
        )
        e, delta = previous - q, target - previous
        a, b = float(e @ (k * delta)), 0.5 * float(delta @ (k * delta))  # E(alpha) = a alpha + b alpha^2
        budget = self.tank - self.params.t_min - self.params.margin
        alpha = 1.0 if a + b <= budget else _largest_root_in_unit(a, b, budget)
        injected = a * alpha + b * alpha * alpha
        rate = float(qdot @ (self.damping * qdot))
        injected, harvested, overflow = self._credit(injected, rate, dt)
        return TankStep(previous + alpha * delta, alpha, self.tank, injected, harvested, overflow)


def _finite(num_joints: int, dt: float, **arrays: Any) -> list[np.ndarray]:
    """The arrays as float64 ``[J]``; a wrong size or a NaN / inf (or ``dt <= 0``) raises, naming it.

    The tank never turns a bad input into a command: the caller must hold its safe command instead.
    """
    if not (math.isfinite(dt) and dt > 0):
        raise ContractError(f"passivity filter: dt must be finite and > 0, got {dt}")
    out = []
    for name, value in arrays.items():
        x = np.asarray(value, dtype=np.float64)
        if x.size != num_joints:
            raise ContractError(f"passivity filter: '{name}' has {x.size} values, expected {num_joints}")
        if not np.isfinite(x).all():
            raise ContractError(f"passivity filter: '{name}' holds a non-finite value; nothing was applied")
        out.append(x.reshape(num_joints))
    return out


def _largest_root_in_unit(a: float, b: float, budget: float) -> float:
    """Largest ``alpha`` in ``[0, 1]`` with ``a alpha + b alpha² <= budget`` (``b >= 0``), 0 if there is none."""
    if b > 0:
        disc = a * a + 4.0 * b * budget
        if disc < 0:
            return 0.0
        root = (-a + math.sqrt(disc)) / (2.0 * b) * (1.0 - 1e-12)  # stay on the safe side of round-off
        return float(min(1.0, max(0.0, root)))
    if a > 0:
        return float(min(1.0, max(0.0, budget / a)))
    return 1.0 if a <= budget else 0.0
