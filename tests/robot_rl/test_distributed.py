"""Data-parallel PPO on torch.distributed (torchrun, gloo on the CPU): ranks agree, the normaliser is merged exactly,
2 ranks x N/2 worlds equal 1 rank x N worlds on the same data, and a killed rank leaves a usable checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from robot_rl.checkpoint import read_checkpoint

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(nproc: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    return subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("task", ["cartpole-balance", "quadrotor-hover"])
def test_two_ranks_keep_identical_weights_and_merge_the_normaliser_exactly(task: str, tmp_path: Path) -> None:
    proc = torchrun(2, str(HERE / "dist_worker.py"), "train", task, str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert len(r0["params"]) == len(r1["params"]) == 3
    for a, b in zip(r0["params"], r1["params"], strict=True):
        assert torch.equal(a, b)  # after every update
    assert not torch.equal(r0["seen"], r1["seen"])  # the ranks really saw different worlds
    every = torch.cat((r0["seen"], r1["seen"])).double()
    torch.testing.assert_close(r0["mean"].double(), every.mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r0["var"].double(), every.var(0, unbiased=False), rtol=1e-4, atol=1e-6)
    assert float(r0["count"]) == every.shape[0]
    assert torch.equal(r0["mean"], r1["mean"]) and torch.equal(r0["var"], r1["var"])


def test_every_rank_switches_to_the_refined_kl_target_with_rank_0(tmp_path: Path) -> None:
    # Rank 0 alone evaluates; its first evaluation meets the criterion, and every rank then adapts its learning rate
    # to ppo.refine_kl: the KL targets, and so the weights after every update, stay the same on both ranks.
    proc = torchrun(2, str(HERE / "dist_worker.py"), "train", "quadrotor-hover", str(tmp_path), "refine")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert r0["desired_kl"] == r1["desired_kl"] == 0.0001
    for a, b in zip(r0["params"], r1["params"], strict=True):
        assert torch.equal(a, b)


def test_two_ranks_of_half_the_worlds_make_the_same_first_update_as_one(tmp_path: Path) -> None:
    for nproc in (1, 2):
        proc = torchrun(nproc, str(HERE / "dist_worker.py"), "first-update", str(tmp_path))
        assert proc.returncode == 0, proc.stderr[-3000:]
    one = torch.load(tmp_path / "update-1-0.pt", weights_only=True)
    two = [torch.load(tmp_path / f"update-2-{r}.pt", weights_only=True) for r in (0, 1)]
    assert torch.equal(two[0]["params"], two[1]["params"])
    torch.testing.assert_close(two[0]["mean"], one["mean"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(two[0]["params"], one["params"], rtol=1e-5, atol=1e-6)  # stated tolerance


def test_a_killed_rank_stops_the_job_and_the_checkpoint_resumes(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "robot_rl.cli"]
    cmd += ["train", "cartpole-balance", "--num-envs", "64", "--max-iterations", "100000", "--quiet", "--no-export"]
    cmd += ["--run-root", str(root), "--set", "runner.eval_interval=0", "--set", "runner.save_interval=2"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        ckpt = None
        while ckpt is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            found = list(root.glob("cartpole-balance/*/checkpoint.pt"))
            ckpt = found[0] if found else None
            time.sleep(0.2)
        time.sleep(1.0)
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
                   .stdout.split()]  # fmt: skip
        ranks = {w: _rank_of(w) for w in workers}
        victim = next(w for w, r in ranks.items() if r == 1)
        os.kill(victim, signal.SIGKILL)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode != 0
    run = ckpt.parent
    state = read_checkpoint(ckpt)  # complete and loadable
    assert state["iteration"] >= 2 and state["iteration"] % 2 == 0
    assert not [p for p in run.iterdir() if p.name.startswith(".")]
    from robot_rl.cli import main

    more = str(state["iteration"] + 2)
    argv = ["train", "cartpole-balance", "--resume", str(run), "--max-iterations", more, "--quiet", "--no-export"]
    assert main([*argv, "--run-root", str(tmp_path / "resumed")]) == 0  # one process resumes a 2-process run
    (resumed,) = (tmp_path / "resumed" / "cartpole-balance").iterdir()
    assert read_checkpoint(resumed / "checkpoint.pt")["iteration"] == state["iteration"] + 2


def _rank_of(pid: int) -> int:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return int(next(e for e in env if e.startswith(b"RANK=")).split(b"=")[1])


def test_nproc_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli import main

    root = tmp_path / "runs"
    assert main(["train", "cartpole-balance", "--nproc", "3", "--num-envs", "64", "--run-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_envs=64 is not divisible by --nproc 3" in err
    assert main(["train", "cartpole-balance", "--nproc", "0", "--run-root", str(root)]) == 2
    assert "--nproc must be in [1, 1024], got 0" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["train", "cartpole-balance", "--nproc", "2", "--device", "cuda", "--run-root", str(root)]) == 2
        assert "CUDA is not available" in capsys.readouterr().err
    assert not root.exists()


def test_nproc_re_runs_the_given_command_under_torchrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``main(argv)`` execs torchrun with *that* argv (minus --nproc), not whatever started this process."""
    from robot_rl.cli import main

    seen: list[list[str]] = []
    monkeypatch.setattr(os, "execv", lambda exe, cmd: seen.append(cmd))
    argv = ["train", "cartpole-balance", "--nproc", "2", "--num-envs", "64", "--run-root", str(tmp_path / "r")]
    assert main(argv) == 0
    (cmd,) = seen
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cmd[5:] == ["-m", "robot_rl.cli", "train", "cartpole-balance", "--num-envs", "64", "--run-root",
                       str(tmp_path / "r")]  # fmt: skip
    assert not (tmp_path / "r").exists()
