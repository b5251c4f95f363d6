"""What the energy tank costs a trained ``panda-reach`` policy: success against the tank's size, in simulation.

The exported policy runs through ``policies.runtime`` (ONNX + contract) in the batched MuJoCo task with
randomisation on; every command (a joint set-point) goes through ``policies.runtime.passivity.EnergyTank`` exactly as
in the ROS 2 policy node (set-point jumps scaled so the virtual spring energy they inject fits in the tank, the
impedance damping's dissipation harvested), for several ``T_max`` (``T_0 = T_max / 2``, ``T_min`` 0.1 J), and
without a tank. Printed: success rate, mean and smallest ``alpha``.

Run::

    python bench/passivity_reach.py runs/panda-reach/<run> --episodes 64
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

import sim
from policies.runtime.onnx_policy import OnnxPolicy
from policies.runtime.passivity import EnergyTank, TankParams
from robot_rl.bench import format_table
from robot_rl.run import load_run


def run(run_dir: Path, episodes: int, t_max: float | None, seed: int) -> dict[str, float]:
    """One randomised evaluation of ``episodes`` episodes with a tank of ``t_max`` J (``None``: no tank)."""
    loaded = load_run(run_dir)
    policy = OnnxPolicy(run_dir / "policy.onnx", num_envs=episodes)
    contract = policy.contract
    env = sim.make(contract.task, episodes, cfg=loaded.cfg.env)
    env.reset(seed=seed)
    stiffness = np.asarray(contract.extra["impedance"]["stiffness_nm_per_rad"], dtype=np.float64)
    damping = tuple(contract.extra["impedance"]["damping_nms_per_rad"])
    tanks = None
    if t_max is not None:
        params = TankParams(t_init=t_max / 2, t_min=0.1, t_max=t_max, damping=damping)
        tanks = [EnergyTank(params, 7) for _ in range(episodes)]
    q_now = env._q.numpy().astype(np.float64)  # type: ignore[attr-defined]
    setpoint = q_now.copy()
    alphas: list[float] = []
    info = None
    for _ in range(env.max_episode_length):
        signals = {k: v.numpy() for k, v in env._signals().items()}  # type: ignore[attr-defined]
        command = policy(signals).astype(np.float64)
        q = env._q.numpy().astype(np.float64)  # type: ignore[attr-defined]
        dq = env._dq.numpy().astype(np.float64)  # type: ignore[attr-defined]
        if tanks is not None:
            for i, tank in enumerate(tanks):
                step = tank.setpoint(command[i], setpoint[i], q[i], dq[i], stiffness, contract.control_period_s)
                command[i] = step.command
                alphas.append(step.alpha)
        setpoint = command.copy()
        _, _, _, _, info = env.step(torch.from_numpy(policy.normalized_action(command.astype(np.float32))))
    env.close()
    assert info is not None and info.success is not None
    return {
        "tank T_max [J]": t_max if t_max is not None else float("nan"),
        "success": float(info.success.float().mean()),
        "mean alpha": float(np.mean(alphas)) if alphas else 1.0,
        "min alpha": float(np.min(alphas)) if alphas else 1.0,
    }


def main(argv: list[str] | None = None) -> None:
    """Evaluate without a tank and with several tank sizes; print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="panda-reach run folder with policy.onnx")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--t-max", type=float, nargs="+", default=[2.0, 5.0, 10.0, 20.0])
    args = p.parse_args(argv)
    rows = [run(args.run, args.episodes, None, args.seed)]
    rows += [run(args.run, args.episodes, t, args.seed) for t in args.t_max]
    print(format_table(rows))


if __name__ == "__main__":
    main()
