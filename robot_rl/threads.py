"""How long OpenMP threads spin before they sleep: set by the ``robot-rl`` command before torch is loaded.

torch's CPU kernels run on OpenMP (GNU libgomp in torch's Linux wheels; a build on Intel's OpenMP reads
``KMP_BLOCKTIME`` instead, which is not set here). A worker thread that waits for work spins ``GOMP_SPINCOUNT`` times
before it sleeps: 300,000 by default, which is the fastest choice on an idle machine and the worst on a busy one,
where the spinning threads take the cores the main thread needs. ``OMP_WAIT_POLICY=PASSIVE`` (no spinning) is safe
there but costs speed on an idle machine. A short spin keeps most of the idle speed and most of the busy one
(``python bench/threads.py``; figures in docs/benchmarks.md, section "Threads").

libgomp reads the variables once, when it is loaded (the first ``import torch``), so the command applies
:func:`openmp_environment` before that. A user's own ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping

SPIN_COUNT = 1000
"""``GOMP_SPINCOUNT`` the ``robot-rl`` command runs with unless told otherwise (spins; libgomp's default 300,000)."""


def openmp_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``environ``: ``GOMP_SPINCOUNT`` = :data:`SPIN_COUNT`, or nothing when ``environ``
    already sets ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` (the user's choice stands)."""
    if "GOMP_SPINCOUNT" in environ or "OMP_WAIT_POLICY" in environ:
        return {}
    return {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
