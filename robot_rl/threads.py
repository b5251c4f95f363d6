"""How long OpenMP threads spin before they sleep: set by the ``robot-rl`` command before torch is loaded.

torch's CPU kernels run on OpenMP (GNU libgomp in torch's Linux wheels; a build on Intel's OpenMP reads
``KMP_BLOCKTIME`` instead, which is not set here). A worker thread that waits for work spins ``GOMP_SPINCOUNT`` times
before it sleeps: 300,000 by default, which is the fastest choice on an idle machine and the worst on a busy one,
where the spinning threads take the cores the main thread needs. ``OMP_WAIT_POLICY=PASSIVE`` (no spinning) is the
fastest on a busy machine and costs speed on an idle one; a short spin sits in between.

So the commands that train or evaluate look before torch loads: :func:`busy_cores` samples, for
:data:`SAMPLE_S`, how busy the CPUs this process may run on are. With at least :data:`BUSY_CORES` of them taken by
other processes, threads sleep at once (``PASSIVE``); otherwise they spin :data:`SPIN_COUNT` times, which keeps most
of the idle speed and degrades gently should the machine get busy later (``python bench/threads.py``; figures in
docs/benchmarks.md, section "Threads"). A user's own ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` is left alone.

libgomp reads the variables once, when it is loaded (the first ``import torch``), so the command applies
:func:`openmp_environment` before that.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

SPIN_COUNT = 1000
"""``GOMP_SPINCOUNT`` the ``robot-rl`` command runs with on an idle machine (spins; libgomp's default 300,000)."""

BUSY_CORES = 0.5
"""Cores kept busy by other processes at start from which the command runs with ``OMP_WAIT_POLICY=PASSIVE``."""

COMPUTE_COMMANDS = (["train"], ["eval"], ["collect"], ["train-bc"], ["bench"])
"""``sys.argv[1:2]`` of the commands that look at the machine first (the others leave a short spin)."""

BUSY_ENV = "ROBOT_RL_BUSY_CORES"
"""Set beside ``OMP_WAIT_POLICY=PASSIVE`` when :func:`openmp_environment` chose it: the busy cores it saw."""

SAMPLE_S = 0.2
"""How long :func:`busy_cores` watches the CPUs, s (``/proc/stat`` counts in 10 ms ticks)."""


def busy_cores(sample_s: float = SAMPLE_S, stat: Path = Path("/proc/stat")) -> float | None:
    """Cores of this process's CPU set kept busy (by anything) over ``sample_s`` seconds, from Linux ``/proc/stat``.

    Only the CPUs in ``os.sched_getaffinity(0)`` count (a container pinned to two cores of a large host looks at
    its two). Returns ``None`` where this cannot be read (not Linux, an unreadable or unexpected file).
    """
    try:
        cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        before = _ticks(stat, cpus)
        time.sleep(sample_s)
        after = _ticks(stat, cpus)
    except (OSError, ValueError, AttributeError):
        return None
    total = sum(after[0]) - sum(before[0])
    idle = sum(after[1]) - sum(before[1])
    if total <= 0 or not before[0]:
        return None
    return len(before[0]) * (1.0 - idle / total)


def _ticks(stat: Path, cpus: set[str]) -> tuple[list[int], list[int]]:
    """Total and idle ticks (idle + iowait) of each CPU in ``cpus``, from a ``/proc/stat`` file."""
    total, idle = [], []
    for line in stat.read_text().splitlines():
        name, *fields = line.split()
        if name in cpus:
            ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
            total.append(sum(ticks))
            idle.append(ticks[3] + ticks[4])
    return total, idle


def openmp_environment(environ: Mapping[str, str], busy: float | None = None) -> dict[str, str]:
    """The variables to add to ``environ``, given ``busy`` (:func:`busy_cores`; ``None``: not measured).

    Nothing when ``environ`` already sets ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` (the user's choice, or a
    parent ``robot-rl``'s, stands); ``OMP_WAIT_POLICY=PASSIVE`` (and :data:`BUSY_ENV`) when
    ``busy >= BUSY_CORES``; else ``GOMP_SPINCOUNT`` = :data:`SPIN_COUNT`.
    """
    if "GOMP_SPINCOUNT" in environ or "OMP_WAIT_POLICY" in environ:
        return {}
    if busy is not None and busy >= BUSY_CORES:
        return {"OMP_WAIT_POLICY": "PASSIVE", BUSY_ENV: f"{busy:.2f}"}
    return {"GOMP_SPINCOUNT": str(SPIN_COUNT)}


def note(environ: Mapping[str, str]) -> str | None:
    """A line for the training header when :func:`openmp_environment` chose ``PASSIVE`` (``None`` otherwise)."""
    if environ.get("OMP_WAIT_POLICY") != "PASSIVE" or BUSY_ENV not in environ:
        return None
    try:
        busy = float(environ[BUSY_ENV])
    except ValueError:  # not written by openmp_environment: nothing to explain
        return None
    return (
        f"other processes kept {busy:.1f} cores busy at start: OpenMP threads sleep when idle "
        "(OMP_WAIT_POLICY=PASSIVE; set GOMP_SPINCOUNT or OMP_WAIT_POLICY to choose)"
    )
