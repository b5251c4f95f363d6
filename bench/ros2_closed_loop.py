"""The hover policy against the simulated Crazyflie over DDS: ``trigger: timer`` against ``trigger: input``, with and
without a CPU load beside it, at the policy's own rate or faster (``--rates``).

Each run is ``robot-rl deploy --sim`` for a few seconds (``robot_rl_ros.graph.run_graph``: the policy node and the
simulated robot on one executor, real DDS). Per rate, trigger and load it prints the runs that crashed, the median
age of the odometry when each command left the node (the wait for the control step), the share of the robot's
periods stepped with no new command (the controller missed the period), the commands per second and the worst run's
mean position error over its last 2 s (the hover criterion: below 5 cm). At a rate other than the policy's 50 Hz the
robot publishes odometry at that rate (``sim_robot_node`` ``rate_hz``) and the node runs the policy at it
(``control_rate_hz``). The load is a separate process running float32 matrix products on ``--load-threads``
threads, what a second test worker or a training run does to the machine.

Run::

    python bench/ros2_closed_loop.py --model runs/quadrotor-hover/<run>/policy.onnx --runs 5
    python bench/ros2_closed_loop.py --model ... --runs 3 --rates 50 250 500 --triggers input
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from robot_rl_ros import commands, policy_node
from robot_rl_ros.graph import read_params, run_graph

from robot_rl.bench import format_table

PARAMS = Path(__file__).resolve().parents[1] / "ros2_ws" / "src" / "robot_rl_ros" / "config" / "quadrotor_sim.yaml"
LOAD = """
import time, torch
torch.set_num_threads({threads})
a = torch.randn(1500, 1500)
while True:
    a = (a @ a).tanh()
"""


def closed_loop(
    model: Path,
    trigger: str,
    seconds: float,
    namespace: str,
    rate_hz: float = 0.0,
    settings: dict[str, Any] | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """One run: crashes, the median odometry age at command time (ms), the share of stale robot periods, commands
    per second, the mean position error over the last 2 s (m) and the p99 / largest change per second of the
    commands sent (command units / s); ``rate_hz`` 0: the contract's rate; ``settings``: more ``policy_node``
    parameters; ``seed``: the simulated robot's (its starts)."""
    ages: list[float] = []
    sent: list[np.ndarray] = []
    original, publish = policy_node.PolicyNode.trigger_deactivate, commands.CommandPublisher.publish

    def keep_ages(node: policy_node.PolicyNode) -> object:
        ages.extend(node.input_age_s)
        return original(node)

    def keep_command(self: commands.CommandPublisher, command: np.ndarray) -> Any:
        sent.append(np.array(command))
        return publish(self, command)

    params = read_params(PARAMS)
    params["policy_node"].update(model_path=str(model), trigger=trigger, watchdog_s=0.5, control_rate_hz=rate_hz)
    params["policy_node"].update(settings or {})
    params["sim_robot_node"].update(rate_hz=rate_hz, seed=seed)
    policy_node.PolicyNode.trigger_deactivate = keep_ages  # type: ignore[method-assign]
    commands.CommandPublisher.publish = keep_command  # type: ignore[method-assign]
    try:
        r = run_graph(params, sim=True, duration_s=seconds, namespace=namespace)
    finally:
        policy_node.PolicyNode.trigger_deactivate = original  # type: ignore[method-assign]
        commands.CommandPublisher.publish = publish  # type: ignore[method-assign]
    errors = np.asarray(r.sim["position_errors_m"])
    period = r.sim["control_period_s"]
    change = np.abs(np.diff(np.asarray(sent), axis=0)).max(axis=1) / period if len(sent) > 1 else np.zeros(1)
    return {
        "crashes": r.sim["crashes"],
        "age_ms": 1e3 * float(np.median(ages)) if ages else float("nan"),
        "stale": r.sim["stale_ticks"] / max(1, r.sim["steps"]),
        "commands_per_s": r.commands / seconds,
        "tail_m": float(errors[-round(2.0 / period) :].mean()),
        "change_p99": float(np.percentile(change, 99)),
        "change_max": float(change.max()),
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="an exported quadrotor-hover policy.onnx")
    ap.add_argument("--runs", type=int, default=5, help="runs per trigger and load")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one run")
    ap.add_argument("--load-threads", type=int, default=2, help="threads of the load process (0: no loaded rows)")
    ap.add_argument("--rates", type=float, nargs="+", default=[50.0], help="control rates, Hz (default: 50)")
    ap.add_argument("--triggers", nargs="+", default=["timer", "input"], choices=["timer", "input"])
    args = ap.parse_args(argv)
    rows = []
    for load in [0, args.load_threads] if args.load_threads else [0]:
        hog = subprocess.Popen([sys.executable, "-c", LOAD.format(threads=load)]) if load else None
        time.sleep(2.0 if hog else 0.0)
        try:
            for rate, trigger in [(r, t) for r in args.rates for t in args.triggers]:
                runs = [
                    closed_loop(args.model, trigger, args.seconds, f"bench_{trigger}_{load}_{int(rate)}_{i}", rate)
                    for i in range(args.runs)
                ]
                rows.append(
                    {
                        "rate Hz": f"{rate:g}",
                        "load": f"{load} threads" if load else "none",
                        "trigger": trigger,
                        "crashed runs": f"{sum(r['crashes'] > 0 for r in runs)} of {len(runs)}",
                        "crashes": sum(int(r["crashes"]) for r in runs),
                        "odometry age median ms": " / ".join(f"{r['age_ms']:.1f}" for r in runs),
                        "stale periods %": f"{100 * float(np.mean([r['stale'] for r in runs])):.1f}",
                        "commands/s": f"{np.mean([r['commands_per_s'] for r in runs]):.0f}",
                        "tail error cm, worst run": f"{100 * max(r['tail_m'] for r in runs):.2f}",
                    }
                )
                print(rows[-1], flush=True)
        finally:
            if hog is not None:
                hog.kill()
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
