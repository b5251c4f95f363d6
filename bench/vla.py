"""Language-conditioned students side by side: success with the training instructions, with held-out paraphrases,
with an instruction naming another cube and with none, and the exported graph's time per chunk on one CPU core.

For each ``train-bc`` run of a language task (``panda-multitask``) given, it evaluates ``--episodes`` episodes per
seed over ``--seeds`` seeds for each instruction set (``env.instructions``: ``train``, ``heldout``, ``heldout2``,
``wrong-colour``, ``wrong-skill`` (students of two skills), ``empty``; the same starts and randomised parameters in
every set), and prints one row per run:
pooled success per set, the share of episodes whose fingertips came within 5 cm of the named cube, and the median /
99th-percentile latency of one chunk of the run's ``policy.onnx`` (onnxruntime, one intra-op thread, batch 1,
``--latency-calls`` calls). Language is used when ``wrong-colour`` falls far below ``train``; chance (ignoring the
instruction) would lift the named cube in a third of what ``train`` lifts, in both.

Run::

    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 [more runs] --episodes 100 --seeds 2
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import numpy as np

from policies.runtime.chunking import ChunkedOnnxPolicy
from robot_rl.imitation.evaluate import ChunkEvalResult
from robot_rl.runs.bc import BCRun

SETS = ("train", "heldout", "heldout2", "wrong-colour", "wrong-skill", "empty")
REACHED_M = 0.05
"""Fingertips within this distance of the named cube's centre: the arm went where the instruction said, m."""


def reached(result: ChunkEvalResult) -> float:
    """Share of episodes whose closest approach to the named cube was under :data:`REACHED_M`."""
    closest = np.concatenate([r.episodes["closest_approach"] for r in result.per_seed])
    return float((closest < REACHED_M).mean())


def chunk_latency_ms(run: BCRun, calls: int) -> tuple[float, float]:
    """Median and 99th-percentile time of one chunk of the run's exported graph, ms (one thread, batch 1)."""
    path = run.run_dir / "policy.onnx"
    if not path.exists():
        run.export()
    policy = ChunkedOnnxPolicy(path, num_envs=1, intra_op_threads=1)
    c = policy.chunk
    rng = np.random.default_rng(0)
    window = rng.standard_normal((1, c.obs_horizon, policy.obs_dim)).astype(np.float32)
    images = {n: rng.integers(0, 256, (1, c.obs_horizon, *c.image_shape(n)), np.uint8) for n in c.cameras}
    if c.language:
        policy.set_instruction(next(iter(c.language["instructions"])))
    times = []
    for _ in range(calls + 10):
        start = time.perf_counter()
        policy.sample(window, images)
        times.append(1e3 * (time.perf_counter() - start))
    times = times[10:]
    return statistics.median(times), float(np.percentile(times, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="train-bc runs of a language task")
    parser.add_argument("--episodes", type=int, default=100, help="episodes per seed and set (default: 100)")
    parser.add_argument("--seeds", type=int, default=2, help="evaluation seeds (default: 2)")
    parser.add_argument("--latency-calls", type=int, default=200, help="timed chunks (default: 200)")
    args = parser.parse_args()
    header = f"{'run':<44}" + "".join(f"{s:>14}" for s in SETS) + f"{'chunk ms':>16}"
    print(header)
    print(" " * 44 + "".join(f"{'success/reach':>14}" for _ in SETS) + f"{'median/p99':>16}")
    for path in args.runs:
        run = BCRun.load(path)
        trained_cfg = run.env_cfg
        cells, by_skill = [], []
        for s in SETS:
            if s == "wrong-skill" and len(getattr(trained_cfg, "skills", ())) < 2:
                cells.append("-")
                continue
            run.env_cfg = dataclasses.replace(trained_cfg, instructions=s)
            result = run.evaluate(args.episodes, tuple(range(args.seeds)), stem=f"eval_instructions-{s}")
            cells.append(f"{result.success_rate:6.1%}/{reached(result):5.1%}")
            skills = result.success_by("skill")
            if len(skills) > 1:  # two skills: each one's success (env.skills order)
                names = trained_cfg.skills  # type: ignore[attr-defined]
                by_skill.append(f"{s} " + " / ".join(f"{names[k]} {won / n:.1%}" for k, (won, n) in skills.items()))
        run.env_cfg = trained_cfg
        median, p99 = chunk_latency_ms(run, args.latency_calls)
        name = f"{path.parent.name}/{path.name}"[-43:]
        print(f"{name:<44}" + "".join(f"{c:>14}" for c in cells) + f"{median:9.1f}/{p99:.1f}", flush=True)
        if by_skill:
            print("  by skill: " + "; ".join(by_skill), flush=True)
    print(f"({args.episodes} episodes x {args.seeds} seeds per set; reach: fingertips within {REACHED_M * 100:.0f} cm)")


if __name__ == "__main__":
    main()
