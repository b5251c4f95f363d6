"""Lockstep over DDS on the wall clock against the simulated robot's clock: one episode of the hover policy flown by
the policy node against the simulated Crazyflie, both ways, back to back.

On the wall clock (``lockstep: true``) the simulated robot steps at most one period per tick of its timer, so a 5 s
episode takes at least 5 s however fast the node answers; on its own clock (``robot_rl_ros.graph.use_simulated_time``:
``publish_clock``, ``use_sim_time``, ``trigger: input``) it steps as soon as the command arrives. Per rate it prints
the wall time of the episode, the simulated seconds per wall second, the commands, the periods stepped with no new
command and the mean position error over the last 2 s (the two runs fly the same starts: the errors should agree),
and the ratio of the wall times. Start-up (configure, discovery) is inside the wall time, the same for both.

Run::

    python bench/lockstep_clock.py --model runs/quadrotor-hover/<run>/policy.onnx
    python bench/lockstep_clock.py --model ... --rates 50 250 --runs 3
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import numpy as np
import rclpy
from robot_rl_ros.graph import read_params, run_graph, use_simulated_time

from robot_rl.bench import format_table

PARAMS = Path(__file__).resolve().parents[1] / "ros2_ws" / "src" / "robot_rl_ros" / "config" / "quadrotor_sim.yaml"
EPISODE_S = 5.0


def episode(model: Path, rate_hz: float, sim_time: bool) -> dict[str, float]:
    """One lockstep episode: wall time (s), simulated s per wall s, commands, stale periods, tail error (m)."""
    params = read_params(PARAMS)
    params["policy_node"].update(model_path=str(model), watchdog_s=0.5, trigger="input")
    params["sim_robot_node"].update(episode_length_s=EPISODE_S, lockstep=True)
    if rate_hz != 50.0:
        params["policy_node"]["control_rate_hz"] = rate_hz
        params["sim_robot_node"]["rate_hz"] = rate_hz
    if sim_time:
        use_simulated_time(params)
    start = time.monotonic()
    result = run_graph(params, sim=True, duration_s=300.0, namespace=f"b{uuid.uuid4().hex[:8]}", episodes=1)
    wall = time.monotonic() - start
    period = float(result.sim["control_period_s"])
    errors = np.array(result.sim["position_errors_m"])[:-1]
    return {
        "wall_s": wall,
        "speed": result.sim["steps"] * period / wall,
        "commands": float(result.commands),
        "stale": float(result.sim["stale_ticks"]),
        "tail_m": float(errors[-round(2.0 / period) :].mean()),
    }


def main(argv: list[str] | None = None) -> None:
    """Print the comparison table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="an exported quadrotor-hover policy.onnx")
    p.add_argument("--rates", type=float, nargs="+", default=[50.0, 250.0], help="control rates, Hz")
    p.add_argument("--runs", type=int, default=1, help="episodes per rate and clock (medians)")
    args = p.parse_args(argv)
    rclpy.init()
    rows: list[dict[str, object]] = []
    try:
        for rate in args.rates:
            med: dict[bool, dict[str, float]] = {}
            for sim_time in (False, True):
                runs = [episode(args.model, rate, sim_time) for _ in range(args.runs)]
                med[sim_time] = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
            for sim_time in (False, True):
                m = med[sim_time]
                rows.append(
                    {
                        "rate": f"{rate:g} Hz",
                        "clock": "simulated (/clock)" if sim_time else "wall",
                        f"wall s ({EPISODE_S:g} s episode)": round(m["wall_s"], 2),
                        "sim s / wall s": round(m["speed"], 2),
                        "commands": int(m["commands"]),
                        "stale": int(m["stale"]),
                        "tail cm": round(100 * m["tail_m"], 2),
                        "speed-up": f"{med[False]['wall_s'] / m['wall_s']:.2f}x",
                    }
                )
    finally:
        rclpy.try_shutdown()
    print(format_table(rows))


if __name__ == "__main__":
    main()
