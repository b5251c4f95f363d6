"""The ``robot-rl`` command's OpenMP spin setting (robot_rl/threads.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from robot_rl.threads import SPIN_COUNT, openmp_environment


def test_a_short_spin_unless_the_user_chose() -> None:
    assert openmp_environment({}) == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
    assert openmp_environment({"OMP_WAIT_POLICY": "PASSIVE"}) == {}
    assert openmp_environment({"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert openmp_environment({"GOMP_SPINCOUNT": "INFINITE"}) == {}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({}, str(SPIN_COUNT)), ({"OMP_WAIT_POLICY": "PASSIVE"}, "None"), ({"GOMP_SPINCOUNT": "5"}, "5")],
)
def test_the_command_sets_it_before_torch_is_loaded(extra: dict[str, str], expected: str) -> None:
    """libgomp reads the variable when torch first loads it, so it must be in place before ``import torch``."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")} | extra
    probe = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        "    if name == 'torch' or name.startswith('torch.'):\n"
        "        import os; print('at torch import:', os.environ.get('GOMP_SPINCOUNT')); builtins.__import__ = real\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = spy\n"
        "import robot_rl.cli\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == f"at torch import: {expected}", out.stdout + out.stderr
