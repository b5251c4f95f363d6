"""``python -m robot_rl.cli ...``: the ``robot-rl`` command (what ``--nproc`` runs under torchrun)."""

import sys

from robot_rl.cli import main

sys.exit(main())
