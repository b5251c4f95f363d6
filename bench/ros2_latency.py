"""ROS 2 policy node timing: control-period jitter, input-to-command latency, lost messages and CPU at 500 Hz and
1 kHz over real DDS; and the same policy's inference in onnxruntime (what the node runs) against torch, side by side.

What it measures, per rate and ``trigger`` (``timer``: the node's own clock; ``input``: a step on each odometry
message): a peer node publishes odometry at that rate (a hovering drone); ``policy_node`` (the exported quadrotor
policy, its rate set with ``control_rate_hz``) runs on the same single-threaded executor in this process. From the
node: the period between control steps (p50 / p99 / max), the age of the newest odometry when each command was
published (input-to-command latency inside the node, which includes waiting for the tick with ``timer``), odometry
messages received against published (lost), commands published against steps expected, and the process CPU time
over wall time. Then the per-step inference time of ``OnnxPolicy`` (numpy + onnxruntime, one thread) and of the torch
actor on one observation.

Run::

    python bench/ros2_latency.py --model runs/quadrotor-hover/<run>/policy.onnx --seconds 60
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import rclpy
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from robot_rl_ros.messages import fill_odometry
from robot_rl_ros.policy_node import PolicyNode

from robot_rl.bench import format_table


def run_rate(model: Path, rate: float, seconds: float, trigger: str = "timer") -> dict[str, float]:
    """One rate and trigger: figures of the node and the process."""
    rclpy.init()
    try:
        params = {
            "model_path": str(model), "fade_in_s": 0.0, "watchdog_s": 1.0, "control_rate_hz": rate, "trigger": trigger
        }  # fmt: skip
        node = PolicyNode(
            namespace=f"bench{int(rate)}", parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]
        )
        peer = rclpy.create_node("peer", namespace=f"bench{int(rate)}")
        pub = peer.create_publisher(Odometry, "odom", qos_profile_sensor_data)
        msg = Odometry()
        fill_odometry(msg, np.array([0.02, -0.01, 0.03]), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3))
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.add_node(peer)
        node.trigger_configure()
        node.trigger_activate()
        sent, period = 0, 1.0 / rate
        cpu0, t0 = os.times(), time.monotonic()
        next_pub = t0
        while (now := time.monotonic()) < t0 + seconds:
            if now >= next_pub:
                pub.publish(msg)
                sent += 1
                next_pub += period
            executor.spin_once(timeout_sec=max(0.0, min(next_pub - time.monotonic(), 0.0005)))
        cpu1, wall = os.times(), time.monotonic() - t0
        periods = np.array(node._periods) * 1e3
        age = np.array(node.input_age_s) * 1e3
        figures = {
            "rate_hz": rate,
            "trigger": trigger,
            "period_p50_ms": float(np.percentile(periods, 50)),
            "period_p99_ms": float(np.percentile(periods, 99)),
            "period_max_ms": float(periods.max()),
            "latency_p50_ms": float(np.percentile(age, 50)),
            "latency_p99_ms": float(np.percentile(age, 99)),
            "latency_max_ms": float(age.max()),
            "odom_lost": sent - node.received,
            "commands_vs_ticks": node.published / (seconds * rate),
            "cpu_%": 100.0 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / wall,
            "fault": node.fault or "none",
        }
        node.destroy_node()
        peer.destroy_node()
        return figures  # type: ignore[return-value]
    finally:
        rclpy.try_shutdown()


def inference_side_by_side(model: Path, run_dir: Path | None, repeats: int = 20000) -> dict[str, float]:
    """Median µs per single-observation step: OnnxPolicy (what the node runs) and the torch actor."""
    from policies.runtime import OnnxPolicy

    policy = OnnxPolicy(model)
    x = np.zeros((1, policy.obs_dim), dtype=np.float32)
    times = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        policy.run_obs(x)
        times.append(time.perf_counter_ns() - t)
    out = {"onnxruntime_us": float(np.median(times)) / 1e3}
    if run_dir is not None:
        import torch

        from policies.nets.export import DeployedActor
        from robot_rl.run import load_run

        torch.set_num_threads(1)
        run = load_run(run_dir)
        actor = DeployedActor(run.model, policy.contract).eval()
        xt = torch.zeros(1, policy.obs_dim)
        times = []
        with torch.inference_mode():
            for _ in range(repeats):
                t = time.perf_counter_ns()
                actor(xt)
                times.append(time.perf_counter_ns() - t)
        out["torch_us"] = float(np.median(times)) / 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="policy.onnx (its run folder gives the torch actor)")
    ap.add_argument("--rates", type=float, nargs="+", default=[500.0, 1000.0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--triggers", nargs="+", default=["timer", "input"], choices=["timer", "input"])
    args = ap.parse_args(argv)
    rows = [run_rate(args.model, r, args.seconds, t) for r in args.rates for t in args.triggers]
    print(format_table(rows))
    run_dir = args.model.parent if (args.model.parent / "checkpoint.pt").exists() else None
    inf = inference_side_by_side(args.model, run_dir)
    print("\ninference per step, one observation: " + ", ".join(f"{k} {v:.1f}" for k, v in inf.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
