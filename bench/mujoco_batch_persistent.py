"""A persistent ``mujoco.batch.Batch`` (one ``MjData`` per world, what ``MujocoBatch`` builds) against a shared one
(one ``MjData`` per thread, MuJoCo's default): speed, memory and whether training is repeatable.

- ``steps/s``: ``Batch.step(nstep=10)`` on a task's compiled model for ``--seconds``, both kinds interleaved
  ``--repeats`` times (median), 2 threads;
- ``RSS MB``: the peak resident memory of a fresh process holding the batch after 500 steps (``VmHWM``);
- ``--training-runs K``: ``K`` fresh processes per kind each train ``panda-lift`` for ``--iterations`` PPO iterations
  (256 worlds, seed 0, one torch thread) and print a hash of the policy weights; a repeatable batch gives one hash.

Run::

    python bench/mujoco_batch_persistent.py                          # panda-lift, 256 / 1024 / 4096 worlds (~1 min)
    python bench/mujoco_batch_persistent.py --training-runs 3        # + 6 trainings of 20 iterations (~5 min)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from robot_rl.bench import format_table

CHILD = """
import sys
import sim
from mujoco import batch as mjbatch
task, n, persistent = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
env = sim.make(task, 4)
b = mjbatch.Batch(env.physics.batch.model, n, nthread=2, persistent=persistent)
for _ in range(50):
    b.step(nstep=10)
# VmHWM: this process's peak (ru_maxrss would carry the parent's peak across exec on Linux)
print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024)
"""

TRAIN = """
import sys, hashlib, tempfile, torch
from pathlib import Path
from mujoco import batch as mjbatch
import sim.backends.mujoco_batch as mb
persistent, iterations = sys.argv[1] == "1", int(sys.argv[2])
shared = mjbatch.Batch
class Chosen(shared):
    def __init__(self, *args, **kwargs):
        kwargs["persistent"] = persistent
        super().__init__(*args, **kwargs)
mb.mjbatch.Batch = Chosen
torch.set_num_threads(1)
from robot_rl.config import load_config
from robot_rl.runner import OnPolicyRunner
with tempfile.TemporaryDirectory() as d:
    cfg = load_config("panda-lift", None, ["num_envs=256", f"runner.max_iterations={iterations}",
                                          "runner.eval_interval=1000"])
    runner = OnPolicyRunner(cfg, Path(d), quiet=True)
    runner.train()
    weights = b"".join(p.detach().numpy().tobytes() for p in runner.model.parameters())
print(hashlib.sha256(weights).hexdigest()[:12])
"""


def steps_per_s(task: str, n: int, persistent: bool, seconds: float) -> float:
    """World steps per second of a fresh batch of ``n`` worlds."""
    from mujoco import batch as mjbatch

    import sim

    env = sim.make(task, 4)
    batch = mjbatch.Batch(env.physics.batch.model, n, nthread=2, persistent=persistent)  # type: ignore[attr-defined]
    batch.step(nstep=10)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        batch.step(nstep=10)
        done += 10
    return n * done / (time.perf_counter() - t0)


def _run(code: str, *argv: str) -> str:
    """The last word a fresh Python process running ``code`` prints."""
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


def _rss(task: str, n: int, persistent: bool) -> float:
    """Resident memory of a fresh process holding the batch, MB."""
    return float(_run(CHILD, task, str(n), "1" if persistent else "0"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="panda-lift")
    p.add_argument("--num-envs", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--training-runs", type=int, default=0, metavar="K")
    p.add_argument("--iterations", type=int, default=20)
    args = p.parse_args()
    rows = []
    for n in args.num_envs:
        speed: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for persistent in (False, True):
                speed[persistent].append(steps_per_s(args.task, n, persistent, args.seconds))
        rss = {persistent: _rss(args.task, n, persistent) for persistent in (False, True)}
        shared, own = statistics.median(speed[False]), statistics.median(speed[True])
        rows.append({
            "worlds": n, "shared steps/s": round(shared), "persistent steps/s": round(own),
            "ratio": round(own / shared, 3), "shared RSS MB": round(rss[False]), "persistent RSS MB": round(rss[True]),
        })  # fmt: skip
    print(f"{args.task}, 2 threads, Batch.step(nstep=10), median of {args.repeats}")
    print(format_table(rows))
    if args.training_runs:
        print(f"\npanda-lift, {args.iterations} iterations x 256 worlds, seed 0: policy weight hashes per run")
        for persistent in (False, True):
            flag = "1" if persistent else "0"
            hashes = [_run(TRAIN, flag, str(args.iterations)) for _ in range(args.training_runs)]
            kind = "persistent" if persistent else "shared"
            print(f"  {kind:10s} {' '.join(hashes)}  ({len(set(hashes))} distinct of {len(hashes)})")


if __name__ == "__main__":
    main()
