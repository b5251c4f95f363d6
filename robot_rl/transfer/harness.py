"""Sim-to-sim evaluation: the *exported* policy, run only through :mod:`policies.runtime`, flies or moves a robot
in a second, independent simulator.

Nothing of the training simulator runs here: the policy is ``policy.onnx`` (its contract inside), observations are
built by :class:`~policies.runtime.onnx_policy.OnnxPolicy` from the signals a :class:`TransferSim` reports, and the
commands it returns (in robot units, exactly what a robot driver would receive) go to that simulator. Only the
task's success criterion — a pure function of per-episode figures — is shared with training, so the verdict means
the same thing in both engines.

A task names its model in each independent simulator in its :class:`~sim.registry.TaskSpec` (``transfer``:
engine -> ``"module:attr"`` of a :class:`TransferSim` factory); a new engine or task plugs in by implementing
:class:`TransferSim` and naming it there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm import tqdm

from policies.runtime.chunking import open_policy
from policies.runtime.contract import Contract
from policies.runtime.onnx_policy import LAST_ACTION_SIGNAL
from policies.runtime.passivity import EnergyTank, TankParams, impedance_stiffness
from robot_rl.logger import interactive
from sim.typed_config import ConfigError


class TransferSim(Protocol):
    """One robot in an independent simulator, driven with the contract's commands.

    ``reset`` and ``step`` return the robot signals the contract's observation terms read (``{source: [1, size]}``,
    SI units; ``last_action`` is added by the harness). ``figures`` are the per-episode figures the task's criterion
    reads (``success`` 0/1 and the task's errors), valid once the episode has run its ``steps`` control periods.
    """

    steps: int

    def reset(self, rng: np.random.Generator, randomize: bool) -> dict[str, np.ndarray]:
        """Start an episode (new initial state, goal and — with ``randomize`` — physical parameters)."""
        ...

    def step(self, command: np.ndarray) -> dict[str, np.ndarray]:
        """Apply ``command [1, A]`` (robot units) for one control period."""
        ...

    def figures(self) -> dict[str, float]:
        """Per-episode figures of the episode just run."""
        ...

    def close(self) -> None:
        """Release the simulator."""
        ...


SimFactory = Callable[[Contract], TransferSim]


SIMULATORS = ("pybullet",)
"""Independent simulators ``robot-rl eval --sim`` knows."""


class TransferError(ConfigError):
    """No model of that task in that simulator."""


def plug(simulator: str, task: str) -> SimFactory:
    """The :class:`TransferSim` factory of ``task`` in ``simulator`` (the task's ``TaskSpec.transfer``); the error
    lists what exists."""
    from sim.registry import EntryPointError, get_task, task_names

    if simulator not in SIMULATORS:
        raise TransferError(f"unknown simulator '{simulator}'; choose one of: {', '.join(SIMULATORS)}")
    try:
        factory: SimFactory = get_task(task).transfer_factory(simulator)
    except EntryPointError:
        have = ", ".join(n for n in task_names() if simulator in get_task(n).transfer)
        raise TransferError(f"no {simulator} model of task '{task}' (sim-to-sim exists for: {have})") from None
    return factory


@dataclass
class DeployTank:
    """The contract's energy tank in front of a position policy's arm set-points (what the ROS 2 node runs).

    Attributes:
        tank: The tank (sizes and harvest damping from the contract's ``filter``).
        stiffness: Impedance stiffness pricing a jump ``[J]``, N m/rad.
        period: Control period, s.
    """

    tank: EnergyTank
    stiffness: np.ndarray
    period: float

    def reset(self) -> None:
        """Refill to ``T_0`` for a new episode."""
        self.tank.reset()

    def filter(
        self, command: np.ndarray, setpoint: np.ndarray | None, signals: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scale the jump from ``setpoint`` (``None``: the measured joints, the episode's first step) to the arm part
        of ``command [1, A]``; returns the filtered command and the new set-point ``[J]``."""
        n = len(self.stiffness)
        q = signals["joint_pos"][0].astype(np.float64)
        dq = signals["joint_vel"][0].astype(np.float64)
        out = command.astype(np.float64).copy()
        previous = q if setpoint is None else setpoint
        out[0, :n] = self.tank.setpoint(out[0, :n], previous, q, dq, self.stiffness, self.period).command
        return out.astype(np.float32), out[0, :n].copy()


def deploy_tank(contract: Contract) -> DeployTank | None:
    """The tank a policy trained behind one deploys with (contract ``filter.trained_with_tank_j``), else ``None``."""
    if "trained_with_tank_j" not in contract.filter or contract.action.kind != "position":
        return None
    n = next(t.size for t in contract.observation if t.source == "joint_pos")
    tank = EnergyTank(TankParams.from_contract(dict(contract.filter)), n)
    return DeployTank(tank, impedance_stiffness(contract, n), contract.control_period_s)


@dataclass
class TransferResult:
    """Per-episode figures of a sim-to-sim evaluation and the task's verdict on them."""

    simulator: str
    randomized: bool
    episodes: dict[str, np.ndarray]
    met: bool
    figures: dict[str, float]
    seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        """Plain data for YAML."""
        return {
            "simulator": self.simulator,
            "randomized": self.randomized,
            "episodes": len(next(iter(self.episodes.values()))),
            "criterion_met": bool(self.met),
            **{k: float(v) for k, v in self.figures.items()},
            "success_rate": float(self.episodes["success"].mean()),
            "wall_time_s": round(self.seconds, 2),
        }


def run_episodes(
    policy_path: Path,
    simulator: str,
    episodes: int,
    seed: int,
    randomize: bool,
    criterion: Callable[[dict[str, np.ndarray]], tuple[bool, dict[str, float]]],
    progress: bool = True,
) -> TransferResult:
    """Run ``episodes`` episodes of the exported policy (PPO or a state-only student, chunks executed as its contract
    says) in ``simulator`` and apply the task's ``criterion``.

    The command before the first step is the contract's ``offset`` (normalised action 0), as on a robot. A policy
    trained behind the energy tank (contract ``filter.trained_with_tank_j``) runs behind the contract's tank, as the
    ROS 2 node runs it (it refuses to run such a policy without): each arm set-point jump is priced against the
    measured joints (:class:`~policies.runtime.passivity.EnergyTank`, refilled to ``T_0`` every episode).
    """
    import time

    policy = open_policy(policy_path)
    contract = policy.contract
    if contract.chunk is not None and contract.chunk.cameras:
        raise TransferError(
            f"'{policy_path}' sees cameras ({', '.join(contract.chunk.cameras)}); the sim-to-sim harness renders none"
        )
    tank = deploy_tank(contract)
    sim = plug(simulator, contract.task)(contract)
    rng = np.random.default_rng(seed)
    rows: dict[str, list[float]] = {}
    start = time.perf_counter()
    label = f"{simulator} {'DR on ' if randomize else 'DR off'}"
    try:
        for _ in tqdm(range(episodes), desc=label, unit="ep", disable=not progress or not interactive(), leave=False):
            signals = sim.reset(rng, randomize)
            policy.reset()
            command = np.asarray([contract.action.offset], dtype=np.float32)
            if tank is not None:
                tank.reset()
            setpoint: np.ndarray | None = None
            for _ in range(sim.steps):
                signals[LAST_ACTION_SIGNAL] = policy.normalized_action(command)
                command = policy(signals)
                if tank is not None:
                    command, setpoint = tank.filter(command, setpoint, signals)
                signals = sim.step(command)
            for k, v in sim.figures().items():
                rows.setdefault(k, []).append(v)
    finally:
        sim.close()
    data = {k: np.asarray(v) for k, v in rows.items()}
    met, figures = criterion(data)
    return TransferResult(simulator, randomize, data, met, figures, seconds=time.perf_counter() - start)
