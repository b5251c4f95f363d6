"""Command limits and the safety layer between the policy and the robot (numpy only; limits mirrored in generated C).

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


SAFE_MODES = ("hold", "zero", "command")
"""What a tripped safety layer sends: the last applied command, zeros (torque off, motors stopped), or a configured
command (e.g. a multirotor's controlled-descent rotor speeds)."""


@dataclass(frozen=True)
class SafetyConfig:
    """Safety-layer settings (what the ROS 2 node's parameters and the contract's ``filter`` section configure).

    Attributes:
        low: Command lower limits ``[A]``.
        high: Command upper limits ``[A]``.
        max_rate: Largest change per second ``[A]`` (negative: none).
        watchdog_s: Inputs older than this trip the watchdog, s.
        fade_in_s: After activation the policy's command is blended in linearly from ``start`` over this time, s.
        safe_mode: ``hold``, ``zero`` or ``command`` (see :data:`SAFE_MODES`).
        safe_command: The command sent in ``command`` mode ``[A]``.
    """

    low: tuple[float, ...]
    high: tuple[float, ...]
    max_rate: tuple[float, ...]
    watchdog_s: float = 0.05
    fade_in_s: float = 2.0
    safe_mode: str = "hold"
    safe_command: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.low)
        if not (len(self.high) == len(self.max_rate) == n) or n == 0:
            raise ValueError("safety: low, high and max_rate need one value per command")
        if any(not (np.isfinite([lo, hi]).all() and lo <= hi) for lo, hi in zip(self.low, self.high, strict=True)):
            raise ValueError("safety: every low must be <= high (and finite)")
        if any(np.isnan(r) for r in self.max_rate):  # a NaN would silently switch the rate limit off
            raise ValueError(f"safety: max_rate must be a number (negative: none), got {list(self.max_rate)}")
        if not np.isfinite(np.asarray(self.safe_command, dtype=np.float64)).all():
            raise ValueError(f"safety: safe_command must be finite, got {list(self.safe_command)}")
        if not (np.isfinite(self.watchdog_s) and self.watchdog_s > 0 and np.isfinite(self.fade_in_s)):
            raise ValueError("safety: watchdog_s must be > 0 and fade_in_s finite")
        if self.safe_mode not in SAFE_MODES:
            raise ValueError(f"safety: safe_mode must be one of {', '.join(SAFE_MODES)}, got {self.safe_mode!r}")
        if self.safe_mode == "command" and len(self.safe_command) != n:
            raise ValueError(f"safety: safe_mode 'command' needs safe_command with {n} values")


@dataclass(frozen=True)
class SafetyStep:
    """One control period of the safety layer: the command to send and why.

    Attributes:
        command: What to send ``[A]`` (always finite and within ``[low, high]``).
        fault: ``""`` while healthy, else the latched reason (``"watchdog"``, ``"e-stop"``, ``"non-finite command"``).
        blend: Share of the policy's command in the output during the fade-in, in ``[0, 1]``.
    """

    command: np.ndarray
    fault: str
    blend: float


class SafetyLayer:
    """Stale-input watchdog, latched e-stop and faults, fade-in, then :func:`limit_command`; always on.

    A fault latches until :meth:`activate` is called again; while latched the safe command is sent. Time is passed
    in (seconds, any monotonic clock) so the same code runs in simulation, in tests and on the robot.

    Args:
        cfg: Settings.
        dt: Control period, s (turns ``max_rate`` into a per-step limit).
        start: Command to fade in from and to hold before the first policy command ``[A]``.
    """

    def __init__(self, cfg: SafetyConfig, dt: float, start: np.ndarray) -> None:
        self.cfg = cfg
        self.low = np.asarray(cfg.low, dtype=np.float32)
        self.high = np.asarray(cfg.high, dtype=np.float32)
        rate = np.asarray(cfg.max_rate, dtype=np.float32)
        self.max_delta = np.where(rate >= 0, rate * np.float32(dt), -1.0).astype(np.float32)
        self.start = np.clip(np.asarray(start, dtype=np.float32), self.low, self.high)
        self.last = self.start.copy()
        self.fault = "inactive"
        self._t0 = 0.0
        self._last_input = -np.inf
        self._estop = False

    def activate(self, now: float) -> None:
        """Clear latched faults (unless the e-stop is still engaged) and start the fade-in at ``now``."""
        self.fault = "e-stop" if self._estop else ""
        self._t0 = now
        self._last_input = now
        self.last = self.start.copy()

    def input_received(self, now: float) -> None:
        """Feed the watchdog: a fresh robot observation arrived at ``now``."""
        self._last_input = now

    def sent(self, command: np.ndarray) -> None:
        """Record the command actually sent after filters downstream of this layer (the energy tank may have scaled
        it): ``hold`` holds it and the rate limit starts from it, not from the unfiltered command."""
        self.last = np.clip(np.asarray(command, dtype=np.float32), self.low, self.high).astype(np.float32)

    def latch(self, reason: str) -> None:
        """Latch a fault found outside the layer (``reason``: e.g. an exception in the control step); the next
        :meth:`step` sends the safe command. An earlier fault keeps its reason."""
        if not self.fault:
            self.fault = reason

    def estop(self, engaged: bool) -> None:
        """Engage (latched: stays tripped until :meth:`activate` after release) or release the e-stop."""
        self._estop = engaged
        if engaged:
            self.fault = "e-stop"

    def stale(self, now: float) -> bool:
        """The newest input is older than ``watchdog_s`` at ``now``: the next :meth:`step` trips the watchdog."""
        return now - self._last_input > self.cfg.watchdog_s

    def step(self, now: float, proposed: np.ndarray | None) -> SafetyStep:
        """The command for this control period given the policy's ``proposed`` command (``None``: none this time)."""
        if not self.fault and self.stale(now):
            self.fault = "watchdog"
        if not self.fault and proposed is not None and not np.isfinite(np.asarray(proposed, dtype=np.float64)).all():
            self.fault = "non-finite command"
        if self.fault:
            self.last = self._safe()
            return SafetyStep(self.last.copy(), self.fault, 0.0)
        blend = 1.0 if self.cfg.fade_in_s <= 0 else float(min(1.0, max(0.0, (now - self._t0) / self.cfg.fade_in_s)))
        target = self.last if proposed is None else np.asarray(proposed, dtype=np.float32)
        mixed = (np.float32(1.0 - blend) * self.start + np.float32(blend) * target).astype(np.float32)
        out = limit_command(mixed, self.last, self.low, self.high, self.max_delta).command
        self.last = out
        return SafetyStep(out.copy(), "", blend)

    def _safe(self) -> np.ndarray:
        if self.cfg.safe_mode == "zero":
            value = np.zeros_like(self.last)
        elif self.cfg.safe_mode == "command":
            value = np.asarray(self.cfg.safe_command, dtype=np.float32)
        else:
            value = self.last
        return np.clip(value, self.low, self.high).astype(np.float32)
