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

``--read`` evaluates the same weights reading the instruction another way than they were trained to (the
training texts' embeddings reach the network unchanged in every mode, so training does not depend on it):
``projected`` onto the training texts' span, ``nearest`` training text, or ``raw`` (the embedding as it is); the
files are ``eval_<mode>-<set>.yaml``, and no chunk latency is timed (the exported graph reads as trained).
``--sets`` evaluates only the sets named.

With ``--single-task``, it evaluates nothing and prints, task by task, the multi-task run against single-task
students (``train-bc --set 'tasks=[...]'``, one per task, on the same dataset) from their end-of-training
evaluations (``eval.yaml``: the same episodes when the runs used the same evaluation seeds): each student's success
on the episodes that gave one of its own instructions, beside the multi-task run's on the same instructions, and
the mean over the tasks.

With ``--distances TEXT...``, it evaluates nothing and prints how far each held-out paraphrase of the run's task
and each given text lies from the nearest instruction of the run's exported table (Euclidean, in the encoder's
space; cosine beside it): what the ROS 2 node's ``instruction_max_distance`` compares.

Run::

    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 [more runs] --episodes 100 --seeds 2
    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 --single-task runs/<task>/panda-multitask/<stamp>-*
    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 --distances "stop" "open the drawer" ""
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

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


def _rate(rows: list[dict[str, Any]]) -> tuple[float, int]:
    """Pooled success and episodes of ``per_instruction`` rows of an ``eval.yaml``."""
    n = sum(int(r["episodes"]) for r in rows)
    won = sum(float(r["success_rate"]) * int(r["episodes"]) for r in rows)
    return (won / n if n else float("nan")), n


def single_task_table(multi: Path, singles: list[Path]) -> None:
    """Print each single-task student's success on its own instructions beside the multi-task run's (module
    docstring), and both means over the tasks."""

    def evaluation(run: Path) -> dict[str, Any]:
        path = run / "eval.yaml"
        if not path.is_file():
            raise SystemExit(f"{path} is missing: not a train-bc run folder with its end-of-training evaluation")
        data = yaml.safe_load(path.read_text())
        return data if isinstance(data, dict) else {}

    rows = evaluation(multi).get("per_instruction")
    if not rows:
        raise SystemExit(f"{multi}/eval.yaml has no success per instruction (not a run of a language task)")
    print(f"{'task (its single-task student)':<44}{'single-task':>16}{'multi-task':>16}")
    means: list[tuple[float, float]] = []
    for path in singles:
        own = evaluation(path).get("tasks")
        if not own:
            raise SystemExit(f"{path}/eval.yaml holds no single-task summary (train-bc --set 'tasks=[...]')")
        multi_rate, multi_n = _rate([r for r in rows if r["instruction"] in own["instructions"]])
        single = float(own["success_rate"]) if own["episodes"] else float("nan")
        means.append((single, multi_rate))
        name = f"{own['instructions'][0]} (+{len(own['instructions']) - 1} phrasings)"[:43]
        print(f"{name:<44}{single:>10.1%} ({own['episodes']:>3}){multi_rate:>10.1%} ({multi_n:>3})")
    single_mean, multi_mean = (float(np.mean([m[i] for m in means])) for i in (0, 1))
    print(f"{'mean over the tasks':<44}{single_mean:>16.1%}{multi_mean:>16.1%}")


READINGS = ("trained", "projected", "nearest", "raw")
"""How ``--read`` makes the student read its instruction (module docstring)."""


def read_instructions(run: BCRun, mode: str) -> None:
    """Make ``run``'s student read its instruction as ``mode`` says (:data:`READINGS`)."""
    import torch

    from policies.nets.language import features

    if mode == "trained":
        return
    if mode == "raw":
        run.policy.instruction_subspace = None
        return
    texts = [str(t) for t in (run.checkpoint.get("language") or {}).get("instructions", [])]
    if not texts or run.policy.instruction_subspace is None:
        raise SystemExit(f"{run.run_dir}: a student without a pooled instruction subspace cannot be read as {mode}")
    run.policy.fit_instructions(torch.from_numpy(features(texts)), nearest=mode == "nearest")


def distance_table(run_dir: Path, texts: list[str]) -> None:
    """Print each held-out paraphrase's and each of ``texts``' distance to the nearest instruction of the run's
    exported table (module docstring)."""
    from policies.nets.language import embed

    run = BCRun.load(run_dir)
    path = run_dir / "policy.onnx"
    if not path.exists():
        run.export()
    policy = ChunkedOnnxPolicy(path, num_envs=1)
    trained = run.env_cfg
    held: list[tuple[str, str]] = []
    for listed in ("heldout", "heldout2"):
        run.env_cfg = dataclasses.replace(trained, instructions=listed)
        held += [(listed, t) for t in run.instruction_texts()]
    rows = [*held, *(("given", t) for t in texts)]
    for (kind, text), e in zip(rows, embed([t for _, t in rows]), strict=True):
        nearest, d = policy.nearest_instruction(e)
        print(f"{kind:<9}{d:6.2f}  cos {1 - d * d / 2:5.2f}  {text!r:<50} nearest: {nearest!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="train-bc runs of a language task")
    parser.add_argument("--episodes", type=int, default=100, help="episodes per seed and set (default: 100)")
    parser.add_argument("--seeds", type=int, default=2, help="evaluation seeds (default: 2)")
    parser.add_argument("--latency-calls", type=int, default=200, help="timed chunks (default: 200)")
    parser.add_argument(
        "--single-task", nargs="+", type=Path, metavar="RUN", help="single-task students to set beside the one run"
    )
    parser.add_argument("--distances", nargs="*", metavar="TEXT", help="distances to the run's instruction table")
    parser.add_argument("--read", choices=READINGS, default="trained", help="how the instruction is read")
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS), help="instruction sets (default: all)")
    args = parser.parse_args()
    if args.distances is not None:
        for path in args.runs:
            distance_table(path, args.distances)
        return
    if args.single_task:
        if len(args.runs) != 1:
            parser.error("--single-task compares one multi-task run with single-task students")
        single_task_table(args.runs[0], args.single_task)
        return
    sets = [s for s in SETS if s in args.sets]
    header = f"{'run':<44}" + "".join(f"{s:>14}" for s in sets) + f"{'chunk ms':>16}"
    print(header)
    print(" " * 44 + "".join(f"{'success/reach':>14}" for _ in sets) + f"{'median/p99':>16}")
    stem = "eval_instructions" if args.read == "trained" else f"eval_{args.read}"
    for path in args.runs:
        run = BCRun.load(path)
        read_instructions(run, args.read)
        trained_cfg = run.env_cfg
        cells, by_skill = [], []
        for s in sets:
            if s == "wrong-skill" and len(getattr(trained_cfg, "skills", ())) < 2:
                cells.append("-")
                continue
            run.env_cfg = dataclasses.replace(trained_cfg, instructions=s)
            result = run.evaluate(args.episodes, tuple(range(args.seeds)), stem=f"{stem}-{s}")
            cells.append(f"{result.success_rate:6.1%}/{reached(result):5.1%}")
            skills = result.success_by("skill")
            if len(skills) > 1:  # two skills: each one's success (env.skills order)
                names = trained_cfg.skills  # type: ignore[attr-defined]
                by_skill.append(f"{s} " + " / ".join(f"{names[k]} {won / n:.1%}" for k, (won, n) in skills.items()))
        run.env_cfg = trained_cfg
        latency = "-"
        if args.read == "trained":
            latency = "{:.1f}/{:.1f}".format(*chunk_latency_ms(run, args.latency_calls))
        name = f"{path.parent.name}/{path.name}"[-43:]
        print(f"{name:<44}" + "".join(f"{c:>14}" for c in cells) + f"{latency:>16}", flush=True)
        if by_skill:
            print("  by skill: " + "; ".join(by_skill), flush=True)
    print(
        f"({args.episodes} episodes x {args.seeds} seeds per set; reach: fingertips within {REACHED_M * 100:.0f} cm; "
        f"instructions read: {args.read})"
    )


if __name__ == "__main__":
    main()
