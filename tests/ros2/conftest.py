"""Shared fixtures of the ROS 2 tests."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import rclpy


@pytest.fixture
def ros() -> Iterator[str]:
    """An rclpy context and a namespace of its own (parallel test workers share the DDS domain)."""
    rclpy.init()
    try:
        yield f"t{uuid.uuid4().hex[:8]}"
    finally:
        rclpy.try_shutdown()


@pytest.fixture
def hanging_rcl_release(tmp_path: Path) -> dict[str, str]:
    """An environment for a node's process in which releasing a node hangs: ``rcl_node_fini`` sleeps 60 s (a
    library preloaded before rcl's, built by the system compiler), as a DDS participant that does not go away."""
    shim = tmp_path / "hang.c"
    shim.write_text("#include <unistd.h>\nint rcl_node_fini(void *node) { (void)node; sleep(60); return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libhang.so"), str(shim)], check=True)
    return {**os.environ, "LD_PRELOAD": str(tmp_path / "libhang.so")}
