"""robot-rl training: PPO, runners, configs, evaluation and the ``robot-rl`` CLI.

OpenMP worker threads that busy-wait fight the main thread for the cores of small machines (2 cores here) and
slow small tensor operations down by 10-300x whenever anything else runs; training defaults to passive waiting.
Export ``OMP_WAIT_POLICY`` yourself to override (it must be set before torch is imported).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
