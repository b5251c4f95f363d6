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

**Refill** (``tank_power_w``, ``P``, default 0): ``P dt`` is credited each step with the harvest (``H`` below
includes it). For robots that must keep injecting energy to do their task (a walking robot loses energy at every
foot impact), the tank then bounds the energy of any burst by ``T_max - T_min`` and the mean power by ``P``.

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

from policies.runtime.contract import Contract, ContractError
from policies.runtime.text import printable


@dataclass(frozen=True)
class TankParams:
    """Energy-tank parameters (the contract's ``filter`` section carries them; ROS parameters may override).

    Attributes:
        t_init: Initial energy ``T_0``, J.
        t_min: Lower bound ``T_min > 0``, J.
        t_max: Upper bound ``T_max``, J (typical 5–10 J; near people 1–2 J).
        margin: Safety margin ``M`` kept above ``T_min`` when predicting, J.
        damping: Damping used for harvesting, N m s/rad per joint (one value for all, or one per joint).
        power_w: Refill ``P``, W: credited every step like harvested energy (while ``T < T_max``). 0: a pure energy
            tank. A walking robot loses energy at every step (foot impacts, friction) that the tank cannot harvest,
            so a pure tank stops it within seconds; with a refill the policy injects at most ``T - T_min + P tau``
            over any window ``tau``: an energy and a power bound.
    """

    t_init: float = 2.0
    t_min: float = 0.1
    t_max: float = 5.0
    margin: float = 0.0
    damping: tuple[float, ...] = (0.0,)
    power_w: float = 0.0

    def __post_init__(self) -> None:
        for name in ("t_init", "t_min", "t_max", "margin", "power_w"):
            if not math.isfinite(getattr(self, name)):
                raise ContractError(f"filter.{name} must be finite, got {getattr(self, name)}")
        if not 0 < self.t_min <= self.t_init <= self.t_max:
            raise ContractError(
                f"filter needs 0 < t_min <= t_init <= t_max, got {self.t_min}, {self.t_init}, {self.t_max}"
            )
        if self.margin < 0 or not self.damping or any(not (math.isfinite(d) and d >= 0) for d in self.damping):
            raise ContractError(f"filter.margin and filter.damping must be >= 0, got {self.margin}, {self.damping}")
        if self.power_w < 0:
            raise ContractError(f"filter.tank_power_w must be >= 0 W, got {self.power_w}")

    @classmethod
    def from_contract(cls, section: dict[str, Any]) -> TankParams:
        """Read the contract's ``filter`` section (keys ``tank_init_j``, ``tank_min_j``, ``tank_max_j``,
        ``tank_margin_j``, ``tank_power_w``, ``harvest_damping``); missing keys keep their defaults."""
        keys = {"tank_init_j": "t_init", "tank_min_j": "t_min", "tank_max_j": "t_max", "tank_margin_j": "margin",
                "tank_power_w": "power_w"}  # fmt: skip
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
        tank, harvested, overflow = credit(np.array([self.tank]), injected, harvest_rate, dt, self.params.t_max)
        self.tank = float(tank[0])
        return injected, float(harvested[0]), float(overflow[0])

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
            rate = float(qd0 @ (self.damping * qd0)) + self.params.power_w
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
        tank = np.array([self.tank])
        step = setpoint_step(self.params, self.damping, tank, target[None], previous[None], q[None], qdot[None], k, dt)
        self.tank = float(step.tank[0])
        return TankStep(
            step.command[0], float(step.alpha[0]), self.tank, float(step.injected[0]), float(step.harvested[0]),
            float(step.overflow[0]),
        )  # fmt: skip


def impedance_stiffness(contract: Contract, num_joints: int) -> np.ndarray:
    """The diagonal joint stiffness ``K`` ``[J]`` (N m/rad) that prices a set-point jump of a position policy:
    the contract's ``extra.impedance.stiffness_nm_per_rad``.

    Raises:
        ContractError: Missing, of another length than ``num_joints``, not finite or negative (one line).
    """
    impedance = contract.extra.get("impedance", {})
    raw = impedance.get("stiffness_nm_per_rad", []) if isinstance(impedance, dict) else []
    try:
        k = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        k = np.zeros(0)
    if k.shape != (num_joints,) or not (np.isfinite(k).all() and (k >= 0).all()):
        raise ContractError(
            f"the passivity filter needs extra.impedance.stiffness_nm_per_rad with {num_joints} finite values >= 0 "
            f"for position commands, got {printable(raw)}"
        )
    return k


@dataclass(frozen=True)
class TankBatchStep:
    """One set-point step of ``N`` tanks (:func:`setpoint_step`); each field as in :class:`TankStep`, ``[N]`` (the
    command ``[N, J]``)."""

    command: np.ndarray
    alpha: np.ndarray
    tank: np.ndarray
    injected: np.ndarray
    harvested: np.ndarray
    overflow: np.ndarray


def credit(
    tank: np.ndarray, injected: np.ndarray | float, harvest_rate: np.ndarray | float, dt: float, t_max: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Book one step into tanks ``[N]`` (J): ``T <- T - injected + H`` with ``H = harvest_rate * dt`` while
    ``T < T_max``; whatever exceeds ``T_max`` is discarded. Returns the new tanks, ``H`` and the overflow, ``[N]``."""
    harvested = np.where(tank < t_max, np.asarray(harvest_rate, dtype=np.float64) * dt, 0.0)
    t = tank - injected + harvested
    overflow = np.maximum(0.0, t - t_max)
    return np.where(overflow > 0, t_max, t), harvested, overflow  # exactly T_max: no round-off just below it


def setpoint_step(
    params: TankParams,
    damping: np.ndarray,
    tank: np.ndarray,
    target: np.ndarray,
    previous: np.ndarray,
    q: np.ndarray,
    qdot: np.ndarray,
    stiffness: np.ndarray,
    dt: float,
) -> TankBatchStep:
    """The set-point filter of :meth:`EnergyTank.setpoint` for ``N`` tanks at once (float64; inputs already checked).

    The one implementation of the set-point tank: the ROS 2 node's :class:`EnergyTank` calls it with ``N = 1`` and the
    simulator calls it for every world when the tank is in the training loop (``env.passivity``).

    Args:
        params: Tank parameters (shared by the ``N`` tanks).
        damping: Harvesting damping ``[J]``, N m s/rad.
        tank: Energy of each tank before the step ``[N]``, J.
        target: New set-points ``[N, J]``, rad.
        previous: Set-points in force until now ``[N, J]``, rad.
        q: Measured joint positions ``[N, J]``, rad.
        qdot: Measured joint velocities ``[N, J]``, rad/s.
        stiffness: Diagonal stiffness ``K`` ``[J]`` or ``[N, J]``, N m/rad.
        dt: Control period, s.
    """
    e, delta = previous - q, target - previous
    a = np.einsum("nj,nj->n", e, stiffness * delta)  # E(alpha) = a alpha + b alpha^2
    b = 0.5 * np.einsum("nj,nj->n", delta, stiffness * delta)
    budget = tank - params.t_min - params.margin
    alpha = np.where(a + b <= budget, 1.0, largest_root_in_unit(a, b, budget))
    injected = a * alpha + b * alpha * alpha
    rate = np.einsum("nj,nj->n", qdot, damping * qdot) + params.power_w
    tank, harvested, overflow = credit(tank, injected, rate, dt, params.t_max)
    return TankBatchStep(previous + alpha[:, None] * delta, alpha, tank, injected, harvested, overflow)


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


def largest_root_in_unit(a: np.ndarray, b: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Largest ``alpha`` in ``[0, 1]`` with ``a alpha + b alpha² <= budget`` (``b >= 0``), 0 where there is none;
    elementwise over ``[N]``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = a * a + 4.0 * b * budget
        root = (-a + np.sqrt(np.maximum(disc, 0.0))) / (2.0 * b) * (1.0 - 1e-12)  # safe side of round-off
        quadratic = np.where(disc < 0, 0.0, root)
        linear = np.where(a > 0, budget / a, np.where(a <= budget, 1.0, 0.0))
        return np.clip(np.where(b > 0, quadratic, linear), 0.0, 1.0)
