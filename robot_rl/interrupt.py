"""Ctrl-C as a request, not an exception: training stops at the next iteration boundary and saves there.

A ``KeyboardInterrupt`` raised in the middle of a PPO update would leave half-updated weights; one raised during
``torch.save`` would lose the newest checkpoint. While :meth:`StopRequest.deferring` is active, SIGINT only sets
:attr:`StopRequest.requested`; the runner finishes its iteration, writes the checkpoint and returns. Further
Ctrl-C presses during that time are acknowledged and ignored, so a double Ctrl-C is safe. Outside the main thread
(where Python cannot install signal handlers) the context does nothing and a Ctrl-C is an ordinary exception.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType


class StopRequest:
    """A flag set by Ctrl-C while :meth:`deferring` is active."""

    def __init__(self) -> None:
        self.requested = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            print("robot-rl: still saving; Ctrl-C is ignored until the checkpoint is written", file=sys.stderr)
        else:
            print("\nrobot-rl: Ctrl-C: finishing this iteration, then saving the checkpoint", file=sys.stderr)
        self.requested = True

    @contextlib.contextmanager
    def deferring(self) -> Iterator[StopRequest]:
        """Turn SIGINT into :attr:`requested` inside the block (main thread only); restore the handler after."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)
