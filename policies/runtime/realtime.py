"""Receding-horizon execution of action chunks against the clock: what the control loop does while a plan is made.

A plan takes time (the inference delay ``d``, in control periods). Three schedules, each planning once every
``Ta`` (action horizon) executed actions, from the observation window of the step the plan starts::

    sync   the loop waits for the plan (the robot holds its last command for d periods: idle), then executes the
           new chunk from its first action; a jump wherever the new chunk disagrees with where the old one was going
    async  the loop keeps executing the current chunk while the next is computed; when it arrives, d steps after it
           started, the loop switches to its action d (its first d are for steps already gone): no idle time, but
           the switch jumps between two independently sampled chunks
    rtc    async, and the new chunk is inpainted with the current one's remaining actions (real-time chunking,
           Black et al. 2025): its first d actions are frozen to what the robot executes meanwhile, the next ones
           are pulled toward the old chunk with weights decaying to 0 at the end of the overlap (their eq. 5),
           so the switch is smooth; needs a sampler that inpaints (``chunk.guide``: the flow-matching VLA's)

    step              ...  s-1   s    s+1  ...  s+d-1  s+d  s+d+1
    current chunk          A[s-1] A[s] A[s+1]   A[s+d-1]
    next chunk (async/rtc)        |---- being computed ----| B[d] B[d+1]        (rtc: B[:d] = A[s:s+d])
    next chunk (sync)             |---- idle: hold A[s-1] ---| B[0] B[1] ...

:class:`Scheduler` runs one of them for ``N`` robots. In evaluation the delay is simulated (``delay_steps``: the
plan is computed at once and released ``d`` steps later, deterministically); on a robot (``threaded``) the plan is
computed on a worker thread and released when it is done, and the delay is measured: the loop waits only when it
must (sync, or an async plan later than the chunk's end), and :attr:`Scheduler.idle_s` says for how long.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np

MODES = ("sync", "async", "rtc")
"""The schedules (module docstring)."""

Plan = Callable[[np.ndarray, "dict[str, np.ndarray] | None", "tuple[np.ndarray, np.ndarray] | None"], np.ndarray]
"""``plan(window [N, To, D_o], images, guide) -> [N, Tp, D_a]``; ``guide``: ``(actions [N, Tp, D_a], weights
[N, Tp])`` to inpaint, or ``None``."""


@dataclass(frozen=True)
class RealTime:
    """How plans are timed against the control loop.

    Attributes:
        mode: ``sync``, ``async`` or ``rtc`` (module docstring).
        delay_steps: Inference delay ``d`` in control periods: simulated (the plan released ``d`` steps after it
            started), or with ``threaded`` the first estimate, updated by each plan's measured delay.
        threaded: Compute plans on a worker thread and release them when done (a robot's control loop).
    """

    mode: Literal["sync", "async", "rtc"] = "sync"
    delay_steps: int = 0
    threaded: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"chunk schedule must be one of {', '.join(MODES)}, got {self.mode!r}")
        if isinstance(self.delay_steps, bool) or not isinstance(self.delay_steps, int) or self.delay_steps < 0:
            raise ValueError(f"inference delay must be a whole number of control periods >= 0, got {self.delay_steps}")


def rtc_weights(pred_horizon: int, start: int, delay: int) -> np.ndarray:
    """Inpainting weights ``[Tp]`` of a chunk planned when ``start`` actions of the current one were executed,
    ``delay`` periods before it arrives (Black et al. 2025, eq. 5): 1 for the ``delay`` actions executed meanwhile,
    then ``c (e^c - 1) / (e - 1)`` with ``c`` falling linearly to 0 at the end of the overlap ``Tp - start``, then 0."""
    h, s, d = pred_horizon, start, min(delay, pred_horizon - start)
    i = np.arange(h, dtype=np.float64)
    c = (h - s - i) / max(h - s - d + 1, 1)
    soft = np.where(i < h - s, c * np.expm1(c) / math.expm1(1.0), 0.0)
    return np.where(i < d, 1.0, soft).astype(np.float32)


class Scheduler:
    """Receding-horizon execution of ``N`` robots' chunks under one :class:`RealTime` schedule.

    Args:
        num_envs: Robots ``N``.
        pred_horizon, action_horizon: ``Tp`` and ``Ta``.
        action_dim: ``D_a``.
        plan: The planner (:data:`Plan`); called with all ``N`` windows (rows that did not ask are ignored).
        timing: The schedule.

    After each :meth:`step`: :attr:`joined` ``[N]`` (this step's action is the first taken from a chunk released
    at this step: its action 0 with sync, ``d`` with async and rtc) and :attr:`idle`
    ``[N]`` (the robot held its last command, waiting for a plan); totals in :attr:`plans`, :attr:`idle_steps`,
    :attr:`idle_s` (threaded: seconds the loop waited) and :attr:`delays` (each plan's delay, control periods).
    """

    def __init__(
        self, num_envs: int, pred_horizon: int, action_horizon: int, action_dim: int, plan: Plan, timing: RealTime
    ) -> None:
        self.timing, self.plan = timing, plan
        self.tp, self.ta = pred_horizon, action_horizon
        n = num_envs
        self._rows = np.arange(n)
        self._cur = np.zeros((n, pred_horizon, action_dim), np.float32)
        self._k = np.zeros(n, np.int64)  # index in the current chunk of the next action
        self._last = np.zeros((n, action_dim), np.float32)
        self._t = np.zeros(n, np.int64)  # steps since the episode began
        self._pending = np.zeros(n, bool)
        self._made = np.zeros(n, np.int64)  # step at which the pending plan started
        self._due = np.zeros(n, np.int64)  # simulated: step at which it is released
        self._next = np.zeros((n, pred_horizon, action_dim), np.float32)  # simulated: the pending plan
        self._future: Future[np.ndarray] | None = None
        self._future_rows = np.zeros(n, bool)  # threaded: the robots the plan in flight is for
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="robot-rl-plan") if timing.threaded else None
        self.delay = timing.delay_steps
        """Current estimate of the inference delay, control periods (threaded: the largest of the last plans)."""
        self.joined = np.zeros(n, bool)
        self.idle = np.zeros(n, bool)
        self.plans = 0
        self.idle_steps = 0
        self.idle_s = 0.0
        self.delays: list[int] = []

    def close(self) -> None:
        """Stop the worker thread (threaded), dropping a plan in flight."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------------------- planning
    def _guide(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The current chunks' remaining actions as each new chunk's guide, and their weights (``rtc`` only)."""
        if self.timing.mode != "rtc":
            return None
        n, tp = len(self._rows), self.tp
        idx = np.minimum(self._k[:, None] + np.arange(tp)[None, :], tp - 1)  # the last action repeats (weight 0)
        actions = self._cur[self._rows[:, None], idx]
        weights = np.zeros((n, tp), np.float32)
        start = np.minimum(self._k, tp)
        for k in np.unique(start[rows]):  # one weight row per executed count (all Ta but for a late plan)
            weights[rows & (start == k)] = rtc_weights(tp, int(k), self.delay)
        return actions, weights

    def _start(
        self, rows: np.ndarray, fresh: np.ndarray, window: np.ndarray, images: dict[str, np.ndarray] | None
    ) -> None:
        """Plan for ``rows`` (released after the delay) and ``fresh`` (at once), in one call where simulated. A
        planner's error propagates with nothing changed: the rows ask again at the next step."""
        guide = self._guide(rows) if rows.any() else None
        if self._pool is None or fresh.any():
            plan = self.plan(window, images, guide if self._pool is None else None)
            self.plans += 1
            self._cur[fresh], self._k[fresh] = plan[fresh], 0
            if self._pool is None:
                self._next[rows] = plan[rows]
                self._due[rows] = self._t[rows] + self.timing.delay_steps
                self._pending |= rows
                self._made[rows] = self._t[rows]
                return
        if rows.any():
            frozen = {c: x.copy() for c, x in images.items()} if images is not None else None  # the loop refills
            self._future = self._pool.submit(self.plan, window.copy(), frozen, guide)
            self._future_rows = rows.copy()
            self.plans += 1
            self._pending |= rows
            self._made[rows] = self._t[rows]

    def _release(self, rows: np.ndarray, plan: np.ndarray) -> None:
        """Swap in the new chunks of ``rows``, at the action of this step (async, rtc) or at their first (sync)."""
        late = self._t[rows] - self._made[rows]
        self._cur[rows] = plan[rows]
        self._k[rows] = 0 if self.timing.mode == "sync" else late
        self._pending[rows] = False
        self.joined[rows] = True
        self.delays.extend(int(x) for x in late)

    def _collect(self, wait: bool) -> None:
        """Release the plans that are ready (``wait``: block until the one in flight is; threaded only)."""
        if self._pool is None:
            rows = self._pending & (self._t >= self._due)
            if rows.any():
                self._release(rows, self._next)
            return
        if self._future is None or not (wait or self._future.done()):
            return
        future, self._future, t0 = self._future, None, time.perf_counter()
        asked = self._future_rows & self._pending
        try:
            plan = future.result()  # a planner's error reaches the control loop here ...
        except BaseException:
            self._pending[asked] = False  # ... and the rows plan again at the next step
            raise
        finally:
            self.idle_s += time.perf_counter() - t0
        self._release(asked, plan)
        recent = self.delays[-8:]
        self.delay = max(recent) if recent else self.delay

    # ------------------------------------------------------------------------------------------- stepping
    def step(self, window: np.ndarray, images: dict[str, np.ndarray] | None, fresh: np.ndarray) -> np.ndarray:
        """The actions ``[N, D_a]`` of this control period (``fresh``: robots starting an episode, planned at once
        from their first observation; a plan in flight for them is dropped)."""
        self.joined[:] = False
        self._pending[fresh] = False
        self._t[fresh] = 0
        self._collect(wait=False)
        start = ~self._pending & ~fresh & (self._k >= self.ta)
        if self._future is not None:  # threaded: one plan in flight at a time; the others ask again next step
            start[:] = False
        if start.any() or fresh.any():
            self._start(start, fresh, window, images)
            self._collect(wait=False)  # no delay: at once
        waiting = self._pending & ((self.timing.mode == "sync") | (self._k >= self.tp))
        if waiting.any() and self._pool is not None:  # a robot's loop blocks: that time is its idle time
            self._collect(wait=True)
            waiting = self._pending & ((self.timing.mode == "sync") | (self._k >= self.tp))
        self.idle = waiting | (self._k >= self.tp)
        k = np.minimum(self._k, self.tp - 1)
        action = np.where(self.idle[:, None], self._last, self._cur[self._rows, k])
        self._k[~self.idle] += 1
        self._last = action.astype(np.float32)
        self._t += 1
        self.idle_steps += int(self.idle.sum())
        return self._last


class Smoothness:
    """How executed actions move across chunk joins, pooled over robots and steps (normalised action units, the
    largest change of any action dimension from one control period to the next).

    Attributes:
        join: Changes at the steps that switched to a new chunk.
        within: Changes at the other steps (a fresh episode's first step excluded).
        steps: Control periods counted.
        idle: Of them, periods in which the loop held its last command waiting for a plan.
    """

    def __init__(self) -> None:
        self.join: list[float] = []
        self.within: list[float] = []
        self.steps = 0
        self.idle = 0
        self._prev: np.ndarray | None = None

    def record(self, action: np.ndarray, joined: np.ndarray, idle: np.ndarray, fresh: np.ndarray) -> None:
        """Add one control period of ``N`` robots: ``action [N, D_a]`` and their flags ``[N]``."""
        if self._prev is not None and self._prev.shape == action.shape:
            change = np.abs(action - self._prev).max(axis=1)
            self.join += change[joined & ~fresh].tolist()
            self.within += change[~joined & ~fresh].tolist()
        self._prev = np.array(action, np.float32)
        self.steps += len(action)
        self.idle += int(idle.sum())

    def summary(self) -> dict[str, float]:
        """``join_step_mean`` / ``join_step_p95`` / ``join_step_max`` / ``within_step_mean`` and ``idle_fraction``."""

        def mean(x: list[float]) -> float:
            return float(np.mean(x)) if x else 0.0

        return {
            "join_step_mean": mean(self.join),
            "join_step_p95": float(np.percentile(self.join, 95)) if self.join else 0.0,
            "join_step_max": float(max(self.join, default=0.0)),
            "within_step_mean": mean(self.within),
            "idle_fraction": self.idle / max(self.steps, 1),
        }
