"""The ``robot-rl`` command's OpenMP wait setting (robot_rl/threads.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.threads import BUSY_CORES, BUSY_ENV, SPIN_COUNT, busy_cores, note, openmp_environment


def test_a_short_spin_on_an_idle_machine_unless_the_user_chose() -> None:
    assert openmp_environment({}) == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
    assert openmp_environment({}, busy=0.1) == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
    assert openmp_environment({"OMP_WAIT_POLICY": "PASSIVE"}) == {}
    assert openmp_environment({"OMP_WAIT_POLICY": "ACTIVE"}, busy=2.0) == {}
    assert openmp_environment({"GOMP_SPINCOUNT": "INFINITE"}, busy=2.0) == {}


def test_threads_sleep_at_once_on_a_busy_machine() -> None:
    chosen = openmp_environment({}, busy=1.04)
    assert chosen == {"OMP_WAIT_POLICY": "PASSIVE", BUSY_ENV: "1.04"}
    assert openmp_environment({}, busy=BUSY_CORES)["OMP_WAIT_POLICY"] == "PASSIVE"
    line = note(chosen)
    assert line is not None and "1.0 cores busy" in line and "OMP_WAIT_POLICY=PASSIVE" in line
    assert note({"OMP_WAIT_POLICY": "PASSIVE"}) is None  # the user's own choice needs no explaining
    assert note({"GOMP_SPINCOUNT": "1000"}) is None
    assert note({"OMP_WAIT_POLICY": "PASSIVE", BUSY_ENV: "lots"}) is None  # a stray value does not stop training


def _stat(busy_ticks: list[int], idle_ticks: list[int]) -> str:
    lines = [f"cpu  {sum(busy_ticks)} 0 0 {sum(idle_ticks)} 0 0 0 0 0 0"]
    lines += [f"cpu{i} {b} 0 0 {d} 0 0 0 0 0 0" for i, (b, d) in enumerate(zip(busy_ticks, idle_ticks, strict=True))]
    return "\n".join([*lines, "intr 1 2 3", "ctxt 5"]) + "\n"


def test_busy_cores_reads_the_cpus_this_process_may_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPUs in the set: one fully busy, one idle over the sample -> 1.0 core; a third, outside it, is ignored."""
    stat = tmp_path / "stat"
    samples = iter([_stat([100, 100, 100], [100, 100, 100]), _stat([120, 100, 120], [100, 120, 100])])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr("robot_rl.threads.time.sleep", lambda s: stat.write_text(next(samples)))
    stat.write_text(next(samples))
    assert busy_cores(0.2, stat) == pytest.approx(1.0)


def test_busy_cores_is_none_where_it_cannot_be_read(tmp_path: Path) -> None:
    assert busy_cores(0.0, tmp_path / "missing") is None
    (tmp_path / "garbled").write_text("cpu0 a b c\n")
    assert busy_cores(0.0, tmp_path / "garbled") is None
    measured = busy_cores(0.05)  # this machine: a number of cores, or None off Linux
    assert measured is None or 0.0 <= measured <= len(os.sched_getaffinity(0)) + 1e-9


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


def test_a_training_command_beside_a_busy_process_sleeps_its_threads() -> None:
    """``robot-rl train`` started while another process holds a core: PASSIVE is in place before torch loads."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    probe = (
        "import sys, builtins\n"
        "sys.argv = ['robot-rl', 'train', 'quadrotor-hover']\n"
        "real = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        "    if name == 'torch' or name.startswith('torch.'):\n"
        "        import os; print('at torch import:', os.environ.get('OMP_WAIT_POLICY')); builtins.__import__ = real\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = spy\n"
        "import robot_rl.cli\n"
    )
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in os.sched_getaffinity(0)]
    try:
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert out.stdout.splitlines()[0] == "at torch import: PASSIVE", out.stdout + out.stderr
