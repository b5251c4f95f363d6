"""Does the energy tank hold its floor when the world pushes back? A trained ``panda-*`` policy behind the tank, over
many randomised episodes, with pushes on the arm and on the object.

The policy of a PPO run (the kept ``best.pt``) acts in its task with randomisation on and the energy tank in the loop
(``env.passivity``, the ROS 2 node's :func:`~policies.runtime.passivity.setpoint_step`): the run's own tank, else
the contract's deploy tank (its ``T_0`` and refill); ``--t-max`` sets another ``T_max`` (starting at the same
fraction of it as the contract's tank). Every ``--interval-s`` each world draws new pushes, held until
the next draw: on the hand, ``--arm-push-n`` newtons along the hand's current velocity (the direction that pumps
energy into the arm; a random direction while the hand is still), and on the cube ``--object-push-n`` newtons in a
random direction (a task without a free object, ``panda-insert``: the arm only). Printed: episodes, success, the
lowest tank level any episode reached against ``T_min``, and how often the tank scaled a set-point.

Run::

    python bench/tank_pushes.py runs/panda-lift/<run> --episodes 10000
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import torch

from policies.runtime.passivity import TankParams
from robot_rl.bench import format_table
from robot_rl.evaluate import EVAL_SEED_OFFSET, deterministic_policy, make_eval_env
from robot_rl.runs import PPORun


def unit(x: torch.Tensor) -> torch.Tensor:
    """Rows of ``x [N, 3]`` scaled to length 1 (random directions where a row is ~0)."""
    norm = x.norm(dim=1, keepdim=True)
    rand = torch.randn_like(x)
    x = torch.where(norm > 1e-3, x, rand)
    return x / x.norm(dim=1, keepdim=True)


def run_batch(run: PPORun, env_cfg: object, worlds: int, seed: int, args: argparse.Namespace) -> dict[str, np.ndarray]:
    """One episode in each of ``worlds`` worlds under pushes; per-episode success, lowest tank, scaled steps."""
    env = make_eval_env(run.cfg.task, env_cfg, worlds, torch.device("cpu"), True)
    policy = deterministic_policy(run.model, run.cfg.policy.actor_obs)
    torch.manual_seed(seed)
    obs = env.reset(seed=seed)
    hand, cube = env._hand, getattr(env, "_cube_body", None)  # type: ignore[attr-defined]  # insert: no free object
    every = max(1, round(args.interval_s / env.dt))
    previous = env._tcp_pos.clone()  # type: ignore[attr-defined]
    scaled, steps = np.zeros(worlds), np.zeros(worlds)
    success, lowest = np.zeros(worlds, bool), np.full(worlds, np.nan)
    ended = np.zeros(worlds, bool)
    for step in range(env.max_episode_length):
        if step % every == 0:
            velocity = env._tcp_pos - previous  # type: ignore[attr-defined]
            env.physics.set_external_force(hand, args.arm_push_n * unit(velocity))  # type: ignore[attr-defined]
            if cube is not None:
                push = args.object_push_n * unit(torch.zeros(worlds, 3))
                env.physics.set_external_force(cube, push)  # type: ignore[attr-defined]
        previous = env._tcp_pos.clone()  # type: ignore[attr-defined]
        obs, _, terminated, truncated, info = env.step(policy(obs))
        scaled += (info.log["metric/tank_alpha"].numpy() < 1.0) & ~ended
        steps += ~ended
        done = (terminated | truncated).numpy() & ~ended  # each world's first episode only
        if done.any():
            success[done] = info.success.numpy()[done]  # type: ignore[union-attr]
            lowest[done] = info.episode_metrics["lowest_tank_j"].numpy()[done]
            ended |= done
    env.close()
    return {"success": success, "lowest": lowest, "scaled": scaled / np.maximum(steps, 1)}


def main(argv: list[str] | None = None) -> None:
    """Run the batches and print one summary row."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="PPO run folder of a panda-* task")
    p.add_argument("--episodes", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=1000, help="worlds per batch (one episode each)")
    p.add_argument("--t-max", type=float, help="tank T_max, J (default: the run's tank, else the contract's)")
    p.add_argument("--arm-push-n", type=float, default=30.0, help="push on the hand, N")
    p.add_argument("--object-push-n", type=float, default=3.0, help="push on the cube, N")
    p.add_argument("--interval-s", type=float, default=0.5, help="time between new pushes, s")
    p.add_argument("--seed", type=int, default=11)
    args = p.parse_args(argv)
    run = PPORun.load(args.run)
    passivity = run.cfg.env.passivity
    if args.t_max is None and passivity.enabled:  # the run's own tank, as it trained and deploys
        env_cfg = run.cfg.env
    else:  # the given size, or the contract's deploy tank (its start, as a fraction of T_max, and refill kept)
        deploy = TankParams.from_contract(run.contract().filter)
        t_max = float(args.t_max or deploy.t_max)
        start = t_max * deploy.t_init / deploy.t_max
        tank = dataclasses.replace(passivity, tank_max_j=t_max, tank_init_j=start, tank_power_w=deploy.power_w)
        env_cfg = dataclasses.replace(run.cfg.env, passivity=tank)
    parts = []
    for b in range(0, args.episodes, args.batch):
        worlds = min(args.batch, args.episodes - b)
        parts.append(run_batch(run, env_cfg, worlds, args.seed + EVAL_SEED_OFFSET + b, args))
    res = {k: np.concatenate([x[k] for x in parts]) for k in parts[0]}
    row = {
        "run": f"{run.cfg.task} {args.run.name}",
        "T_max [J]": env_cfg.passivity.tank_max_j,
        "T_0 [J]": env_cfg.passivity.initial_j,
        "refill [W]": env_cfg.passivity.tank_power_w,
        "T_min [J]": env_cfg.passivity.tank_min_j,
        "episodes": len(res["success"]),
        "success": float(res["success"].mean()),
        "lowest tank [J]": float(res["lowest"].min()),
        "below T_min": int((res["lowest"] < env_cfg.passivity.tank_min_j - 1e-9).sum()),
        "steps scaled": float(res["scaled"].mean()),
    }
    print(format_table([row]))


if __name__ == "__main__":
    main()
