"""Shared fixtures of the ROS 2 tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

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
