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
import faulthandler
import gc
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import remove_ros_args

EXECUTORS: dict[str, Callable[[], Executor]] = {"single": SingleThreadedExecutor, "events": EventsExecutor}

SHUTDOWN_GRACE_S = 5.0
"""Seconds the release of nodes, executor and context may take after a stop before the process exits without it
(:func:`bounded_release`); the native node's ``SHUTDOWN_GRACE_S`` is the same."""


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


@contextlib.contextmanager
def bounded_release(prog: str, grace_s: float = SHUTDOWN_GRACE_S) -> Iterator[None]:
    """Bound the block (releasing nodes, executor and rclpy's context after a stop) to ``grace_s`` seconds: one
    that hangs (a DDS participant that does not go away) ends the process with exit status 1, unfinished. A second
    Ctrl-C or SIGTERM within the block ends the process at once (the signals' default action, which acts even while
    rclpy's C++ holds the interpreter).

    Two watchdogs: a thread writes ``<prog>: still shutting down after 5 s: exiting without rcl/DDS release``, which
    it can while the hang leaves the interpreter free; a hang inside rclpy's C++ holds the interpreter (measured:
    ``rcl_node_fini``), and there ``faulthandler``'s watchdog, which needs nothing of it, ends the process 1 s later
    with ``Timeout`` and each thread's stack, which names the release step that hung.
    """

    def expire() -> None:
        os.write(2, f"{prog}: still shutting down after {grace_s:g} s: exiting without rcl/DDS release\n".encode())
        os._exit(1)

    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    timer = threading.Timer(grace_s, expire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(grace_s + 1.0, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def spin_node(make: Callable[[], Any], args: list[str] | None = None) -> None:
    """``rclpy.init``, build the node, spin it on ``--executor`` (default ``single``) until Ctrl-C, then destroy it
    and shut down. ``args``: the command line (ROS arguments included); default ``sys.argv``.

    ROS arguments rclpy cannot parse (a ``--params-file`` that does not exist or is not YAML, a malformed remap) and
    parameters the node refuses (unknown, or of the wrong type: :mod:`robot_rl_ros.params`) end the process with exit
    status 2 and a one-line reason, like any other command-line error; Ctrl-C before the node runs ends it with 130.
    Once it spins, Ctrl-C or SIGTERM (what ``ros2 launch`` sends) ends it cleanly with status 0; a release of the
    node and DDS that hangs ends it with status 1 after :data:`SHUTDOWN_GRACE_S` (:func:`bounded_release`), and a
    second Ctrl-C while it shuts down ends it at once.
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
        with bounded_release(parser.prog):
            executor.shutdown()
            node.destroy_node()
            # rclpy finalises the node's rcl handle when the node is garbage (its callbacks hold it in cycles):
            # collected here, inside the bound, not in the interpreter's exit where nothing bounds it
            del node, executor
            gc.collect()
            rclpy.try_shutdown()


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
