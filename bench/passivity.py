"""What the energy tank costs a trained position-commanding policy: success against the tank's size, in simulation.

Any exported ``panda-*`` or ``quadruped-velocity`` policy (a PPO run or a ``train-bc`` student, with or without
cameras) runs through
``policies.runtime`` (ONNX + contract) in the batched MuJoCo task with randomisation on, one episode per world. Every
command's arm set-point goes through ``policies.runtime.passivity.EnergyTank`` exactly as in the ROS 2 policy node
(set-point jumps scaled so the virtual spring energy they inject fits in the tank, the impedance damping's
dissipation harvested; a gripper command is not in the tank), for several ``T_max`` (``T_min`` 0.1 J; ``T_0`` the
same fraction of ``T_max`` as in the run's contract: half, or full for a refilled tank; the refill the contract's
unless ``--power-w`` says), and without a tank. Printed: success rate, mean and smallest ``alpha``, and the lowest
tank level reached.

Run::

    python bench/passivity.py runs/panda-reach/<run> --episodes 64
    python bench/passivity.py runs/quadruped-velocity/<run> --episodes 200 --t-max 5 10 20 40
    python bench/passivity.py runs/panda-lift/<train-bc run> --episodes 100 --t-max 5 10 20 40 80
    python bench/passivity.py RUN_TRAINED_WITH RUN_TRAINED_WITHOUT --episodes 500 --t-max 10 20 40 80 \
        --plot docs/img/lift_tank_curve.png

A run trained with the tank in the loop (``env.passivity``) is evaluated here without the simulator's tank: only this
script's (the node's) tank is in front of its policy.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import torch

from policies.runtime import open_policy
from policies.runtime.passivity import EnergyTank, TankParams
from robot_rl.bench import format_table
from robot_rl.evaluate import evaluate_env, make_eval_env
from robot_rl.runs import BCRun, open_run
from sim.tasks.panda.passivity import PassivityConfig


def env_config(run_dir: Path) -> object:
    """The task config a run was trained (PPO) or its demonstrations collected (train-bc) under, without a tank in
    the simulator's loop (``env.passivity``): this script puts the node's own tank in front of the policy."""
    run = open_run(run_dir)
    cfg = run.env_cfg if isinstance(run, BCRun) else run.cfg.env
    if getattr(cfg, "passivity", None) is not None:
        cfg = dataclasses.replace(cfg, passivity=PassivityConfig())
    return cfg


def run(run_dir: Path, episodes: int, t_max: float | None, seed: int, power_w: float | None = None) -> dict[str, float]:
    """One randomised evaluation of ``episodes`` episodes with a tank of ``t_max`` J (``None``: no tank) refilled at
    ``power_w`` W (``None``: the contract's refill), starting at the contract's fraction of ``T_max``."""
    policy = open_policy(run_dir / "policy.onnx", num_envs=episodes)
    contract = policy.contract
    deploy = TankParams.from_contract(contract.filter)
    power_w = deploy.power_w if power_w is None else power_w
    env = make_eval_env(contract.task, env_config(run_dir), episodes, torch.device("cpu"), True)
    stiffness = np.asarray(contract.extra["impedance"]["stiffness_nm_per_rad"], dtype=np.float64)
    joints = stiffness.size  # the commands' first joints (a gripper after them is not in the tank)
    damping = tuple(contract.extra["impedance"]["damping_nms_per_rad"])
    tanks = []
    if t_max is not None:
        start = t_max * deploy.t_init / deploy.t_max
        params = TankParams(t_init=start, t_min=0.1, t_max=t_max, damping=damping, power_w=power_w)
        tanks = [EnergyTank(params, joints) for _ in range(episodes)]
    cameras = contract.chunk.cameras if contract.chunk is not None else {}
    renderer = None
    if cameras:
        from sim.rendering import CameraRenderer

        renderer = CameraRenderer(env, {c: contract.chunk.image_shape(c)[:2] for c in cameras})  # type: ignore[union-attr]
    setpoint: np.ndarray | None = None
    alphas: list[float] = []
    lowest = [t_max or float("nan")]

    def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        nonlocal setpoint
        q = env._q.numpy().astype(np.float64)  # type: ignore[attr-defined]
        dq = env._dq.numpy().astype(np.float64)  # type: ignore[attr-defined]
        images = [renderer.render()] if renderer is not None else []
        command = policy.run_obs(obs["policy"].numpy(), *images).astype(np.float64)  # type: ignore[call-arg]
        if setpoint is None:
            setpoint = q.copy()
        for i, tank in enumerate(tanks):
            step = tank.setpoint(command[i, :joints], setpoint[i], q[i], dq[i], stiffness, contract.control_period_s)
            command[i, :joints] = step.command
            alphas.append(step.alpha)
            lowest[0] = min(lowest[0], step.tank)
        setpoint = command[:, :joints].copy()
        return torch.from_numpy(policy.normalized_action(command.astype(np.float32)))

    result = evaluate_env(env, act, seed=seed)
    if renderer is not None:
        renderer.close()
    env.close()
    return {
        "tank T_max [J]": t_max if t_max is not None else float("nan"),
        "refill [W]": power_w if t_max is not None else float("nan"),
        "success": float(result.episodes["success"].mean()),
        "mean alpha": float(np.mean(alphas)) if alphas else 1.0,
        "min alpha": float(np.min(alphas)) if alphas else 1.0,
        "lowest tank [J]": lowest[0],
    }


def label(run_dir: Path) -> str:
    """The run in a few words: task, folder, and the tank it trained with (if any)."""
    run = open_run(run_dir)
    trained = None if isinstance(run, BCRun) else getattr(run.cfg.env, "passivity", PassivityConfig()).tank_max_j
    how = f"trained with a {trained:g} J tank" if trained is not None else "trained without a tank"
    return f"{run_dir.parent.name}/{run_dir.name} ({how})"


def plot(curves: dict[str, list[dict[str, float]]], path: Path) -> None:
    """Success against ``T_max`` (log axis), one line per run and refill, the run's no-tank success dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from robot_rl.logger import save_png

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in curves.items():
        tanks = [r for r in rows if r["tank T_max [J]"] == r["tank T_max [J]"]]  # not NaN: with a tank
        for power in sorted({r["refill [W]"] for r in tanks}):
            these = [r for r in tanks if r["refill [W]"] == power]
            label = name if power == 0 else f"{name}, refill {power:g} W"
            (line,) = ax.plot([r["tank T_max [J]"] for r in these], [100 * r["success"] for r in these], "o-",
                              label=label)  # fmt: skip
        free = [r["success"] for r in rows if r not in tanks]
        if free:
            ax.axhline(100 * free[0], color=line.get_color(), ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("energy tank T_max [J] (starting as the contract's)")
    ax.set_ylabel("success [%] (dashed: no tank)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """Evaluate each run without a tank and with several tank sizes; print the table (and plot the curves)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="+", help="run folders with policy.onnx (train or train-bc)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--t-max", type=float, nargs="+", default=[2.0, 5.0, 10.0, 20.0])
    p.add_argument(
        "--power-w",
        type=float,
        nargs="+",
        default=[None],
        help="tank refill(s), W (tank_power_w): every T_max with every refill (default: the contract's)",
    )
    p.add_argument("--plot", type=Path, help="write success against T_max for every run as this PNG")
    args = p.parse_args(argv)
    curves: dict[str, list[dict[str, float]]] = {}
    for run_dir in args.runs:
        rows = [run(run_dir, args.episodes, None, args.seed)]
        rows += [run(run_dir, args.episodes, t, args.seed, p) for t in args.t_max for p in args.power_w]
        curves[label(run_dir)] = rows
    print(format_table([{"run": name, **r} for name, rows in curves.items() for r in rows]))
    if args.plot is not None:
        plot(curves, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
