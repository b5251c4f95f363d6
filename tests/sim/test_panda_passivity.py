"""The energy tank on a contact task in MuJoCo: a passivity-agnostic policy that pumps energy into the Panda
(positive velocity feedback on top of torques that drive the hand down to the table) drives the arm's energy up
without bound (kilojoules in 4 s); behind the tank the energy it delivers stays within what the tank held
(``references.md``: ``T_0 - T_min``, nothing harvested here) and the arm's kinetic energy below ``T_0``."""

from __future__ import annotations

import mujoco
import numpy as np

from policies.runtime.passivity import EnergyTank, TankParams
from sim.robots import panda

DT = 0.04  # control period, s (the Panda tasks' 25 Hz)
SUBSTEPS = 10


def _run(tank: EnergyTank | None, seconds: float = 4.0) -> tuple[float, float, float]:
    """Torque-controlled Panda on the table; returns (max kinetic energy J, energy delivered J, final tank J)."""
    model = panda.build_model("torque", panda.Scene(table=True, cube_size=0.05))
    model.opt.timestep = DT / SUBSTEPS
    model.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    data = mujoco.MjData(model)
    data.qpos[:7] = panda.HOME  # clear of the table: every joule of motion comes through the port
    mujoco.mj_forward(model, data)
    # Torques that drive the hand down to the table (the scene has the table and a cube) ...
    press = 0.5 * np.array([0.0, 10.0, 0.0, -10.0, 0.0, 2.0, 0.0])
    delivered, kinetic = 0.0, 0.0
    for _ in range(round(seconds / DT)):
        q, dq = data.qpos[:7].copy(), data.qvel[:7].copy()
        # ... and positive velocity feedback: every motion is amplified (injects energy without bound).
        tau = np.clip(press + 8.0 * dq + 2.0 * np.sign(dq + 1e-9), -np.asarray(panda.TAU_MAX), panda.TAU_MAX)
        if tank is not None:
            tau = tank.torque(tau, q, dq, DT).command
        data.ctrl[:7] = tau
        data.ctrl[7] = 0.0
        for _ in range(SUBSTEPS):
            mujoco.mj_step(model, data)
        delivered += float(tau @ (data.qpos[:7] - q))  # exact: the torque is held over the control period
        kinetic = max(kinetic, float(data.energy[1]))
    return kinetic, delivered, tank.tank if tank is not None else float("nan")


def test_the_tank_bounds_the_energy_an_injecting_policy_delivers() -> None:
    free_kinetic, free_delivered, _ = _run(None)
    # Torque commands are settled one step late against a one-step prediction (tau . qdot dt); this policy
    # accelerates within every step, so the prediction falls short. Measured here: margin 0 lets T fall 1.06 J below
    # T_min, 0.2 J lets it fall 0.63 J below, 0.5 J keeps it above. The margin is the robot integrator's to size.
    params = TankParams(t_init=2.0, t_min=0.1, t_max=5.0, margin=0.5, damping=(0.0,))
    kinetic, delivered, final = _run(EnergyTank(params, 7))
    assert free_delivered > 1000.0 and free_kinetic > 100.0  # unfiltered: the policy pumps kilojoules in
    # Filtered: no harvesting (damping 0), so the policy may deliver at most what the tank held above T_min (the
    # margin absorbs the one-step prediction error of torque commands).
    assert delivered <= params.t_init - params.t_min + 1e-6
    assert kinetic <= params.t_init
    assert final >= params.t_min - 1e-9
