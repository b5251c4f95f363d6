"""ROS 2 policy node timing: control-period jitter, input-to-command latency, lost messages and CPU at 500 Hz and
1 kHz over real DDS; and the same policy's inference in onnxruntime (what the node runs) against torch, side by side.

What it measures, per rate, ``trigger`` (``timer``: the node's own clock; ``input``: a step on each odometry
message), executor (``single``: rclpy's ``SingleThreadedExecutor``, what ``robot-rl deploy`` uses; ``events``:
``rclpy.experimental.EventsExecutor``) and peer placement: a peer publishes a hovering drone's odometry at that
rate, each message stamped with the wall time it was sent, from a separate process (``process``: as a robot's
driver would) or from a node on the policy node's own executor (``same``: one Python process for both);
``policy_node`` (the exported quadrotor policy, its rate set with ``control_rate_hz``) runs in this process. From
the node: the period between control steps (p50 / p99 / max); the measurement-to-command latency, from the stamp of
the newest odometry to the moment its command was published (DDS transport, the executor's wait, waiting for the
tick with ``timer``, and inference); odometry messages received against sent (lost); commands published against
steps expected; the node process's CPU time over wall time. Then the per-step inference time of ``OnnxPolicy``
(numpy + onnxruntime, one thread) and of the torch actor on one observation.

``--native``: the same policy as a native node (``robot-rl export ros2-node``: rcl + the generated C, built here for
each rate) in its own process against the same publisher process; its figures come from the node's ``--stats``
(latency from the odometry's stamp to the command's publication, as above; CPU of the node process).

For a manipulator policy (``--model`` of ``panda-reach``) the peer publishes a Panda at rest instead: joint states
(stamped) and the tool pose every period and a latched goal, as the Franka driver and an operator would; latency and
lost messages count joint states, and the energy tank is on (the shipped Panda settings). The native node drives
multirotors only: ``--native`` is skipped for it.

Run::

    python bench/ros2_latency.py --model runs/quadrotor-hover/<run>/policy.onnx --seconds 60
    python bench/ros2_latency.py --model ... --seconds 60 --native --executors events --triggers input
    python bench/ros2_latency.py --model ... --rates 1000 --native --executors events --triggers input --load-threads 2
    python bench/ros2_latency.py --model runs/panda-reach/<run>/policy.onnx --rates 1000 --seconds 60
    python bench/ros2_latency.py --model ... --rates 1000 --executors events --triggers input \
        --backends onnxruntime torch
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from robot_rl_ros.messages import fill_odometry
from robot_rl_ros.policy_node import PolicyNode
from sensor_msgs.msg import JointState

from robot_rl.bench import format_table


class _TimedNode(PolicyNode):
    """The policy node, also recording the time from each odometry or joint state message's stamp (set by the
    publisher when it sent it) to the command computed from it: measurement to command, DDS transport included."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stamp_ns = 0
        self.stamp_to_command_ns: list[int] = []
        self.measurements = 0  # odometry or joint state messages taken
        self.draining = False  # the peer has stopped: count only the steps of messages still arriving
        self._last_stamp = 0

    def _accept(self, signals: dict[str, Any], kind: str, msg: Any) -> None:
        if isinstance(msg, Odometry | JointState):  # the message that starts a step (the tool pose does not)
            self.stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            self.measurements += 1
        super()._accept(signals, kind, msg)

    def _tick(self) -> None:
        super()._tick()
        if self.stamp_ns and not (self.draining and self.stamp_ns == self._last_stamp):
            self.stamp_to_command_ns.append(time.time_ns() - self.stamp_ns)
        self._last_stamp = self.stamp_ns


class _HoverOdometry:
    """A publisher of a hovering drone's odometry on ``node``, each message stamped with the wall time it is sent."""

    def __init__(self, node: Any) -> None:
        self.pub = node.create_publisher(Odometry, "odom", qos_profile_sensor_data)
        self.msg = Odometry()
        fill_odometry(self.msg, np.array([0.02, -0.01, 0.03]), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3))
        self.msg.header.frame_id, self.msg.child_frame_id = "world", "base_link"
        self.sent = 0

    def publish(self) -> None:
        self.msg.header.stamp.sec, self.msg.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
        self.pub.publish(self.msg)
        self.sent += 1


class _ArmStates:
    """A publisher of a Panda at rest (``sensor_msgs/JointState`` stamped with the wall time it is sent, and the tool
    pose) with a latched goal 10 cm from the tool: what the Franka driver and an operator publish."""

    def __init__(self, node: Any, model: Path) -> None:
        from geometry_msgs.msg import PoseStamped
        from robot_rl_ros.inputs import LATCHED
        from robot_rl_ros.messages import fill_joint_state, fill_pose

        from policies.runtime import load_contract

        c = load_contract(model)
        joints = [n for n in c.joint_names if n.startswith("panda_joint")]
        self.pub = node.create_publisher(JointState, "joint_states", qos_profile_sensor_data)
        self.tcp_pub = node.create_publisher(PoseStamped, "tcp_pose", qos_profile_sensor_data)
        self.msg, self.tcp, goal = JointState(), PoseStamped(), PoseStamped()
        fill_joint_state(self.msg, joints, np.asarray(c.default_pose[: len(joints)]), np.zeros(len(joints)))
        fill_pose(self.tcp, np.array([0.3, 0.0, 0.5]), np.diag([1.0, -1.0, -1.0]))
        fill_pose(goal, np.array([0.35, 0.05, 0.45]), np.diag([1.0, -1.0, -1.0]))
        self.tcp.header.frame_id = goal.header.frame_id = "panda_link0"
        node.create_publisher(PoseStamped, "goal_pose", LATCHED).publish(goal)
        self.sent = 0

    def publish(self) -> None:
        stamp = divmod(time.time_ns(), 1_000_000_000)
        self.msg.header.stamp.sec, self.msg.header.stamp.nanosec = stamp
        self.tcp.header.stamp.sec, self.tcp.header.stamp.nanosec = stamp
        self.tcp_pub.publish(self.tcp)  # the pose first: the joint state starts the step
        self.pub.publish(self.msg)
        self.sent += 1


def _manipulator(model: Path) -> bool:
    from policies.runtime import load_contract

    return load_contract(model).action.kind in ("position", "torque")


def publish_odometry(namespace: str, rate: float, seconds: float, model: Path | None = None) -> int:
    """The robot side: publish a hovering drone's odometry (or, for a manipulator ``model``, a Panda's joint states
    and tool pose) at ``rate`` for ``seconds``, each message stamped with the wall time it was sent; returns the
    number sent."""
    rclpy.init()
    try:
        peer = rclpy.create_node("peer", namespace=namespace)
        odometry: Any = _ArmStates(peer, model) if model is not None and _manipulator(model) else _HoverOdometry(peer)
        deadline = time.monotonic() + 10.0  # discovery: publish once the node's subscription is matched
        while odometry.pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        period = 1.0 / rate
        end = next_pub = time.monotonic()
        end += seconds
        while (now := time.monotonic()) < end:
            if now >= next_pub:
                odometry.publish()
                next_pub += period
            else:
                time.sleep(min(next_pub - now, 0.0002))
        print(odometry.sent, flush=True)  # the measuring side stops here, before this process shuts down
        peer.destroy_node()
        return odometry.sent
    finally:
        rclpy.try_shutdown()


def run_rate(
    model: Path,
    rate: float,
    seconds: float,
    trigger: str = "timer",
    peer: str = "process",
    executor: str = "single",
    backend: str = "onnxruntime",
) -> dict[str, Any]:
    """One rate, trigger, peer placement and policy backend: figures of the node and its process.

    ``peer="process"``: the odometry comes from a separate process (as from a robot's driver); ``"same"``: from a
    node on the policy node's own executor (one process, one core's worth of Python for both). ``backend="torch"``:
    the node's policy graph runs in torch (the run folder's checkpoint, one thread) instead of onnxruntime; the
    observation builder, checks and safety layer are the same."""
    namespace = f"bench{int(rate)}{trigger}{peer}{backend}"
    rclpy.init()
    try:
        params = {
            "model_path": str(model), "fade_in_s": 0.0, "watchdog_s": 1.0, "control_rate_hz": rate, "trigger": trigger
        }  # fmt: skip
        if _manipulator(model):
            params["safe_mode"] = "hold"  # the shipped Panda files' settings; the energy tank is on
        node = _TimedNode(namespace=namespace, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        spinner: Any = SingleThreadedExecutor() if executor == "single" else EventsExecutor()
        spinner.add_node(node)
        node.trigger_configure()
        if backend == "torch":
            _run_in_torch(node, model)
        sent, period = 0, 1.0 / rate
        if peer == "process":
            cmd = [sys.executable, __file__, "--publish", namespace, str(rate), str(seconds), str(model)]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            done: list[int] = []  # the publisher's count, the moment it has sent its last message
            assert proc.stdout is not None
            reader = threading.Thread(target=lambda: done.append(int(proc.stdout.readline())), daemon=True)  # type: ignore[union-attr]
            reader.start()
            while node.measurements == 0 and not done:  # discovery: wait for the first message
                spinner.spin_once(timeout_sec=0.01)
            node.trigger_activate()  # now: a watchdog started earlier would trip (and latch) before the first one
            node._periods.clear()
            node.input_age_s.clear()
            node.stamp_to_command_ns.clear()
            received0, published0 = node.measurements - 1, node.published
            cpu0, t0 = os.times(), time.monotonic()
            while not done:
                spinner.spin_once(timeout_sec=0.001)
            drain = time.monotonic() + 0.05  # the last messages may still be in flight when the publisher says done
            node.draining, kept_periods = True, len(node._periods)
            while time.monotonic() < drain:
                spinner.spin_once(timeout_sec=0.001)
            del node._periods[kept_periods:]  # none but the watchdog's safe command, should the drain outlast it
            sent = done[0]
        else:
            node.trigger_activate()
            other = rclpy.create_node("peer", namespace=namespace)
            spinner.add_node(other)
            odometry: Any = _ArmStates(other, model) if _manipulator(model) else _HoverOdometry(other)
            received0, published0 = 0, 0
            cpu0, t0 = os.times(), time.monotonic()
            next_pub = t0
            while (now := time.monotonic()) < t0 + seconds:
                if now >= next_pub:
                    odometry.publish()
                    next_pub += period
                spinner.spin_once(timeout_sec=max(0.0, min(next_pub - time.monotonic(), 0.0005)))
            sent = odometry.sent
        cpu1, wall = os.times(), time.monotonic() - t0
        if peer == "process":
            proc.wait()
        periods = np.array(node._periods) * 1e3
        age = np.array(node.stamp_to_command_ns) * 1e-6
        figures: dict[str, Any] = {
            "rate_hz": rate,
            "peer": peer,
            "executor": executor,
            "trigger": trigger,
            "policy": backend,
            "period_p50_ms": float(np.percentile(periods, 50)),
            "period_p99_ms": float(np.percentile(periods, 99)),
            "period_max_ms": float(periods.max()),
            "latency_p50_ms": float(np.percentile(age, 50)),
            "latency_p99_ms": float(np.percentile(age, 99)),
            "latency_max_ms": float(age.max()),
            "odom_lost": sent - (node.measurements - received0),
            "odom_sent": sent,
            "commands_vs_ticks": (node.published - published0) / (wall * rate),
            "node_cpu_%": 100.0 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / wall,
            "fault": node.fault or "none",
        }
        node.destroy_node()
        return figures
    finally:
        rclpy.try_shutdown()


def _run_in_torch(node: PolicyNode, model: Path) -> None:
    """Swap the configured node's onnxruntime graph for the torch actor of ``model``'s run folder."""
    import torch

    from policies.nets.export import DeployedActor
    from robot_rl.runs import PPORun

    assert node.policy is not None
    torch.set_num_threads(1)
    actor = DeployedActor(PPORun.load(model.parent).model, node.policy.contract).eval()

    def run_obs(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out: np.ndarray = actor(torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32))).numpy()
        return out

    node.policy.run_obs = run_obs  # type: ignore[method-assign]


def run_native(
    model: Path, rate: float, seconds: float, work: Path, node_args: tuple[str, ...] = (), load: str = "none"
) -> dict[str, Any]:
    """The policy as a native node (built for ``rate``) in its own process against the odometry publisher process;
    ``node_args``: its scheduling flags (``--cpu N --rt-priority P``), ``load``: what runs beside, for the table."""
    import signal

    import yaml

    from firmware_export.ros2_node import build_ros2_node

    node_dir = work / f"node{int(rate)}"
    namespace = f"native{int(rate)}_{len(node_args)}_{'idle' if load == 'none' else 'load'}"
    stats = work / f"stats{namespace}.yaml"
    if not (node_dir / "rr_policy_node").exists():
        build_ros2_node(model, node_dir, rate_hz=rate, vectors=100)
    cmd = [str(node_dir / "rr_policy_node"), "--watchdog", "1.0", *node_args, "--stats", str(stats), "--ros-args"]
    node = subprocess.Popen([*cmd, "-r", f"__ns:=/{namespace}"], stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    publisher = [sys.executable, __file__, "--publish", namespace, str(rate), str(seconds)]
    sent = int(subprocess.run(publisher, capture_output=True, text=True, check=True).stdout.split()[-1])
    node.send_signal(signal.SIGINT)
    _, _, usage = os.wait4(node.pid, 0)
    s = yaml.safe_load(stats.read_text())
    span = s["stamps_s"][1] - s["stamps_s"][0]
    lat, per = s["latency_ms"], s["period_ms"]
    return {
        "rate_hz": rate,
        "load": load,
        "peer": "process",
        "executor": "native " + (" ".join(node_args) or "(default scheduling)"),
        "trigger": "input",
        "policy": "generated C",
        "period_p50_ms": per["p50"],
        "period_p99_ms": per["p99"],
        "period_max_ms": per["max"],
        "latency_p50_ms": lat["p50"],
        "latency_p99_ms": lat["p99"],
        "latency_max_ms": lat["max"],
        "odom_lost": sent - s["received"],
        "odom_sent": sent,
        "commands_vs_ticks": s["steps"] / (span * rate + 1),
        "node_cpu_%": 100.0 * (usage.ru_utime + usage.ru_stime) / span,
        "fault": "none" if s["fault"] in ("", "watchdog") else s["fault"],  # the watchdog trips when the peer stops
    }


RT_FLAGS = ("--cpu", "1", "--rt-priority", "80")
"""The native node's real-time scheduling in the benchmark: pinned to CPU 1, SCHED_FIFO priority 80."""


def native_under_load(model: Path, rates: list[float], seconds: float, threads: int) -> int:
    """The native node idle and beside ``threads`` busy threads, default scheduling against :data:`RT_FLAGS`, in
    one table (the issue's target: 1 kHz with p99 <= 1 ms beside a busy process)."""
    from ros2_closed_loop import LOAD

    rows = []
    with tempfile.TemporaryDirectory(prefix="ros2-latency-") as work:
        for rate in rates:
            for load in ("none", f"{threads} busy threads"):
                hog = None
                if load != "none":
                    hog = subprocess.Popen([sys.executable, "-c", LOAD.format(threads=threads)])
                    time.sleep(2.0)
                try:
                    for flags in ((), RT_FLAGS):
                        rows.append(run_native(model, rate, seconds, Path(work), flags, load))
                        print(format_table(rows[-1:]), flush=True)
                finally:
                    if hog is not None:
                        hog.kill()
                        hog.wait()
    print(format_table(rows))
    return 0


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
        from robot_rl.runs import PPORun

        torch.set_num_threads(1)
        run = PPORun.load(run_dir)
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
    ap.add_argument("--peers", nargs="+", default=["process"], choices=["process", "same"])
    ap.add_argument("--executors", nargs="+", default=["single", "events"], choices=["single", "events"])
    ap.add_argument("--native", action="store_true", help="also the native node (rcl + generated C), per rate")
    ap.add_argument(
        "--backends",
        nargs="+",
        default=["onnxruntime"],
        choices=["onnxruntime", "torch"],
        help="policy graph in the Python node (torch: the run folder's checkpoint beside policy.onnx)",
    )
    ap.add_argument(
        "--load-threads", type=int, default=0, help="run a process of float32 matrix products on N threads beside"
    )
    ap.add_argument(
        "--native-load",
        type=int,
        metavar="THREADS",
        help="instead: the native node only, idle and beside a process of THREADS busy threads, with default "
        "scheduling and with --cpu 1 --rt-priority 80, side by side",
    )
    args = ap.parse_args(argv)
    if args.native_load is not None:
        return native_under_load(args.model, args.rates, args.seconds, args.native_load)
    rows = []
    hog = None
    if args.load_threads:  # what a second test worker or a training run does to the machine
        from ros2_closed_loop import LOAD

        hog = subprocess.Popen([sys.executable, "-c", LOAD.format(threads=args.load_threads)])
        time.sleep(2.0)
    with tempfile.TemporaryDirectory(prefix="ros2-latency-") as work:
        for r in args.rates:
            for peer in args.peers:
                for ex in args.executors:
                    for t in args.triggers:
                        for b in args.backends:
                            rows.append(run_rate(args.model, r, args.seconds, t, peer, ex, b))
                            print(format_table(rows[-1:]), flush=True)
            if args.native and _manipulator(args.model):
                print("--native: the native node drives multirotors only; skipped for this manipulator policy")
            elif args.native:
                rows.append(run_native(args.model, r, args.seconds, Path(work)))
                print(format_table(rows[-1:]), flush=True)
    if hog is not None:
        hog.kill()
    print(format_table(rows))
    run_dir = args.model.parent if (args.model.parent / "checkpoint.pt").exists() else None
    inf = inference_side_by_side(args.model, run_dir)
    print("\ninference per step, one observation: " + ", ".join(f"{k} {v:.1f}" for k, v in inf.items()))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--publish"]:  # the robot side of run_rate(peer="process")
        model_arg = Path(sys.argv[5]) if sys.argv[5:] else None
        publish_odometry(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), model_arg)
        sys.exit(0)
    sys.exit(main())
