"""Running one node as a console script (``policy_node``, ``sim_robot_node``), and the executors nodes spin on.

Executors (``--executor`` of the console scripts and of ``robot-rl deploy``):

- ``single``: rclpy's ``SingleThreadedExecutor`` (the default; what ``rclpy.spin`` uses).
- ``events``: ``rclpy.experimental.EventsExecutor``, which dispatches callbacks from middleware events instead of
  rebuilding a wait set every spin. Measured on 2 cores (``bench/ros2_latency.py``, odometry from another process):
  1.7 ms median odometry-to-command latency at 500 Hz where ``single`` saturates at 8-10 ms. rclpy marks it
  experimental.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import remove_ros_args

EXECUTORS: dict[str, Callable[[], Executor]] = {"single": SingleThreadedExecutor, "events": EventsExecutor}


def check_executor(kind: str) -> None:
    """Raise ``ValueError`` (listing the choices) unless ``kind`` is a key of :data:`EXECUTORS`; needs no context."""
    if kind not in EXECUTORS:
        raise ValueError(f"executor '{kind}' is not one of {', '.join(EXECUTORS)}")


def make_executor(kind: str) -> Executor:
    """A new executor of ``kind`` (a key of :data:`EXECUTORS`) in the initialised default context.

    Raises:
        ValueError: ``kind`` is not one of them (the message lists them).
    """
    check_executor(kind)
    return EXECUTORS[kind]()


class StopSignals:
    """Within the block, Ctrl-C and SIGTERM only request a stop (:meth:`requested`), which the spin loop (a console
    script's, ``robot-rl deploy``'s) checks between callbacks; raising from the handler instead would land inside
    rclpy's C++ calls. Outside the main thread (no signal handlers there) it does nothing."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        """Whether a stop signal arrived."""
        return self.signum != 0

    def _handle(self, signum: int, frame: object) -> None:
        self.signum = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def spin_node(make: Callable[[], Any], args: list[str] | None = None) -> None:
    """``rclpy.init``, build the node, spin it on ``--executor`` (default ``single``) until Ctrl-C, then destroy it
    and shut down. ``args``: the command line (ROS arguments included); default ``sys.argv``.

    ROS arguments rclpy cannot parse (a ``--params-file`` that does not exist or is not YAML, a malformed remap) and
    parameters the node refuses (unknown, or of the wrong type: :mod:`robot_rl_ros.params`) end the process with exit
    status 2 and a one-line reason, like any other command-line error; Ctrl-C before the node runs ends it with 130.
    Once it spins, Ctrl-C or SIGTERM (what ``ros2 launch`` sends) ends it cleanly with status 0.
    """
    parser = argparse.ArgumentParser(description="robot_rl_ros node (ROS arguments after --ros-args)")
    parser.add_argument("--executor", choices=list(EXECUTORS), default="single", help="executor to spin on")
    try:
        rest = remove_ros_args(args)
    except rclpy_implementation.RCLInvalidROSArgsError as exc:
        reason = re.sub(r", at \S+:\d+", "", str(exc).splitlines()[0])  # rcl's source locations
        parser.exit(2, f"{parser.prog}: error: {reason}\n")
    own = parser.parse_args(rest[1:])
    # Ctrl-C / SIGTERM are ours (StopSignals): rclpy's handler shuts the context down and then re-raises Python's
    # KeyboardInterrupt wherever the interpreter is, once inside rclpy's C++ taking a message, where it surfaced as
    # "RuntimeError: Unable to convert call argument '0' to Python object" and exit status 1.
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = make()
    except ValueError as exc:  # ParamError and other refusals of the node's own settings
        rclpy.try_shutdown()
        parser.exit(2, f"{parser.prog}: error: {' '.join(str(exc).split())}\n")
    except KeyboardInterrupt:
        rclpy.try_shutdown()
        parser.exit(130, f"{parser.prog}: interrupted (Ctrl-C) while starting\n")
    executor = make_executor(own.executor)
    executor.add_node(node)
    try:
        with StopSignals() as stopped:
            while rclpy.ok() and not stopped.requested():  # checked between callbacks, every 0.1 s at the latest
                executor.spin_once(timeout_sec=0.1)
    except ExternalShutdownException:
        pass
    finally:
        for step in (executor.shutdown, node.destroy_node, rclpy.try_shutdown):
            # a Ctrl-C after the stop signals were handed back
            with contextlib.suppress(KeyboardInterrupt):
                step()


def spin_for(
    executor: Executor, seconds: float, publish: Callable[[], None] | None = None, every: float = 0.01
) -> None:
    """Spin ``executor`` for ``seconds``, calling ``publish`` every ``every`` seconds (a robot's side in tests and
    benchmarks)."""
    end, next_pub = time.monotonic() + seconds, 0.0
    while time.monotonic() < end:
        if publish is not None and time.monotonic() >= next_pub:
            publish()
            next_pub = time.monotonic() + every
        executor.spin_once(timeout_sec=0.002)
