"""Command limits applied after the policy and before the robot (numpy only; mirrored in generated C).

:func:`limit_command` is the last gate every command passes: a non-finite command is refused (the previous,
already limited command is held), then the command is clamped to ``[low, high]`` and its change per control period
to ``max_delta`` (a rate limit: ``max_delta = rate * dt``). The C version is ``rr_limit_command`` in
``firmware_export/templates/rr_safety.c``; tests run both on the same streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LimitResult:
    """Output of :func:`limit_command`: the command to apply and whether the input was refused as non-finite."""

    command: np.ndarray
    refused: bool


def limit_command(
    command: np.ndarray, previous: np.ndarray, low: np.ndarray, high: np.ndarray, max_delta: np.ndarray
) -> LimitResult:
    """Clamp ``command`` ``[A]`` to ``[low, high]`` and to ``|command - previous| <= max_delta``.

    Args:
        command: Proposed command ``[A]`` (float32).
        previous: Command applied in the previous control period ``[A]``.
        low: Lower limits ``[A]``.
        high: Upper limits ``[A]``.
        max_delta: Largest change per control period ``[A]``; a negative entry disables the rate limit there.

    Returns:
        The limited float32 command, or ``previous`` (``refused=True``) if ``command`` holds NaN or inf.
    """
    c, p = np.asarray(command, dtype=np.float32), np.asarray(previous, dtype=np.float32)
    if not np.isfinite(c).all():
        return LimitResult(p.copy(), True)
    v = np.minimum(np.maximum(c, np.asarray(low, dtype=np.float32)), np.asarray(high, dtype=np.float32))
    d = np.asarray(max_delta, dtype=np.float32)
    limited = np.where(d >= 0, np.minimum(np.maximum(v, p - d), p + d), v).astype(np.float32)
    return LimitResult(limited, False)
