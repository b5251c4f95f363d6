"""An exported multirotor policy as a native ROS 2 node: the generated C of :mod:`firmware_export` plus rcl.

:func:`build_ros2_node` exports the policy's C for the host (verified against onnxruntime), compiles the node
``ros2_ws/src/robot_rl_fast/src/rr_policy_node.c`` with it against the ROS 2 C client library (rcl), and writes
``out``::

    rr_policy_node           the node: rr_policy_node [--watchdog S] [--max-rate U/S] [--stats FILE] --ros-args ...
    policy/                  the generated C (rr_policy.c/.h, rr_safety.c/.h) and its firmware_report.yaml
    src/rr_policy_node.c     the node's source, with CMakeLists.txt and package.xml to build it with colcon
    CMakeLists.txt, package.xml

It is the fast path of ``robot_rl_ros``'s ``policy_node`` for rates a Python executor cannot keep (1 kHz): the same
topics, signals and safety rules (reject non-finite or non-rotation odometry, never publish a non-finite command,
watchdog and latched e-stop to the motor-stop command), without the lifecycle, diagnostics or recording.

Where ROS 2 comes from: the first ``$AMENT_PREFIX_PATH`` entry that holds ``include/rcl`` (a sourced ROS 2
install), else this Python environment's prefix (the ``ros-*`` wheels from PyPI, whose libraries also need this
interpreter's ``libpython`` at load time).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from firmware_export.export import FirmwareReport, export_firmware, read_model
from firmware_export.graph import UnsupportedModelError
from firmware_export.targets import ToolchainError
from policies.runtime.contract import MAX_CONTROL_RATE_HZ
from policies.runtime.files import check_export_folder, replace_export_folder

EXPORT_KIND = "ros2-node"
"""The kind in the output folder's export marker (an earlier node build is replaced, nothing else)."""

PACKAGE = Path(__file__).resolve().parents[1] / "ros2_ws" / "src" / "robot_rl_fast"
NODE_SIGNALS = {"pos_w", "rot_mat", "lin_vel_w", "ang_vel_b", "last_action"}
"""The signals the node builds from ``nav_msgs/Odometry`` (and its own last command)."""
CFLAGS = ("-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O2", "-Wall", "-Wextra", "-Werror")


def ros_prefix() -> Path:
    """The ROS 2 installation to build against (see the module docstring).

    Raises:
        ToolchainError: No ``include/rcl`` in ``$AMENT_PREFIX_PATH`` nor in this Python environment.
    """
    candidates = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    for prefix in [*candidates, Path(sys.prefix)]:
        if (prefix / "include" / "rcl").is_dir():
            return prefix
    raise ToolchainError(
        "no ROS 2 C headers (include/rcl) in $AMENT_PREFIX_PATH or in this Python environment; source a ROS 2 "
        "install or `pip install ros-rclpy ros-nav-msgs ros-std-msgs` (make install does)"
    )


def link_flags(prefix: Path) -> tuple[list[str], list[str]]:
    """Compiler and linker flags for rcl, ``nav_msgs`` and ``std_msgs`` under ``prefix``.

    Headers come as ``-isystem`` (warnings in them are not ours to fix). Libraries are found at run time through
    ``RPATH`` (not ``RUNPATH``, so that the libraries' own dependencies resolve too): ``prefix/lib`` and, for the PyPI
    wheels, their bundled ``site-packages/ros_*.libs``; the wheels' ``librcl`` also loads Python extension
    libraries, so this interpreter's ``libpython`` is linked.
    """
    include = prefix / "include"
    cflags = ["-isystem", str(include)]
    for d in sorted(include.iterdir()):
        if d.is_dir():
            cflags += ["-isystem", str(d)]
    lib = prefix / "lib"
    rpaths = [lib, *sorted(lib.glob("python3*/site-packages/ros_*.libs"))]
    ldflags = [f"-L{lib}", "-Wl,--disable-new-dtags", *(f"-Wl,-rpath,{p}" for p in rpaths)]
    ldflags += ["-Wl,--allow-shlib-undefined"]  # transitive symbols resolve at load time
    if len(rpaths) > 1:  # the wheels
        libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
        ldflags += [f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-Wl,--no-as-needed", f"-l:{soname}", "-Wl,--as-needed"]
    ldflags += ["-lrcl", "-lrcutils", "-lrmw", "-lrosidl_runtime_c"]
    for pkg in ("nav_msgs", "std_msgs", "geometry_msgs", "builtin_interfaces"):
        ldflags += [f"-l{pkg}__rosidl_typesupport_c", f"-l{pkg}__rosidl_generator_c"]
    return cflags, [*ldflags, "-lm"]


def build_ros2_node(onnx_path: Path, out: Path, rate_hz: float | None = None, vectors: int = 1000) -> FirmwareReport:
    """Export ``onnx_path``'s C, build the node against it and write ``out`` (replaced only when all succeeded).

    Args:
        onnx_path: An exported multirotor policy (action kind ``rpm``).
        out: Output folder.
        rate_hz: Control rate the node runs at (default: the contract's); the integral terms integrate over it.
        vectors: Random observations to verify the C against onnxruntime with.

    Raises:
        UnsupportedModelError: The policy is not a multirotor policy the node can feed (named).
        ContractError: The contract is malformed.
        ToolchainError: No ROS 2 headers, no compiler, or a build failed (its output in the message).
    """
    check_export_folder(out, EXPORT_KIND, [onnx_path])
    _, contract = read_model(onnx_path)
    signals = {t.source for t in contract.observation}
    if contract.action.kind != "rpm" or not signals <= NODE_SIGNALS:
        raise UnsupportedModelError(
            f"the native ROS 2 node drives multirotors from odometry (action kind 'rpm', signals "
            f"{sorted(NODE_SIGNALS)}); this policy commands '{contract.action.kind}' and reads {sorted(signals)}"
        )
    if rate_hz is not None and not 0 < rate_hz <= MAX_CONTROL_RATE_HZ:
        raise ValueError(f"rate_hz must be in (0, {MAX_CONTROL_RATE_HZ:g}] Hz, got {rate_hz}")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ToolchainError("no C compiler (cc or gcc) on PATH")
    cflags, ldflags = link_flags(ros_prefix())
    target = contract.extra.get("target_position_m", [0.0, 0.0, 0.0])  # 3 finite numbers (Contract.validate)
    defines = [f"-DRR_TARGET={{{', '.join(repr(float(v)) for v in target)}}}"]
    if rate_hz is not None:
        defines.append(f"-DRR_OBS_DT={1.0 / rate_hz!r}f")
    with tempfile.TemporaryDirectory(prefix="robot-rl-ros2-node-") as scratch:
        package = Path(scratch) / "package"
        report = export_firmware(onnx_path, package / "policy", "host", vectors)
        shutil.copytree(PACKAGE / "src", package / "src")
        for name in ("CMakeLists.txt", "package.xml"):
            shutil.copy(PACKAGE / name, package / name)
        sources = [package / "src" / "rr_policy_node.c", package / "policy" / "rr_policy.c"]
        sources.append(package / "policy" / "rr_safety.c")
        cmd = [cc, *CFLAGS, *defines, f"-I{package / 'policy'}", *cflags, *map(str, sources)]
        cmd += ["-o", str(package / "rr_policy_node"), *ldflags]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ToolchainError(f"building rr_policy_node failed:\n{done.stderr.strip()[-4000:]}")
        report.out = str(out)
        replace_export_folder(package, out, EXPORT_KIND)
    return report
