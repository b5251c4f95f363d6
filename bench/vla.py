"""Language-conditioned students side by side: success with the training instructions, with held-out paraphrases,
with an instruction naming another cube and with none, and the exported graph's time per chunk on one CPU core.

For each ``train-bc`` run of a language task (``panda-multitask``) given, it evaluates ``--episodes`` episodes per seed
over ``--seeds`` seeds for each instruction set (``env.instructions``: ``train``, ``heldout``, ``heldout2``,
``heldout3``, ``wrong-colour``, ``wrong-skill`` (students of two skills), ``empty``; the same starts and randomised
parameters in every set), and prints one row per run: pooled success per set, the share of episodes whose fingertips
came within 5 cm of the named cube, and the median / 99th-percentile latency of one chunk of the run's ``policy.onnx``
(onnxruntime, one intra-op thread, batch 1, ``--latency-calls`` calls). Language is used when ``wrong-colour`` falls far
below ``train``; chance (ignoring the instruction) would lift the named cube in a third of what ``train`` lifts, in
both.

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

With ``--plot PNG``, it evaluates nothing and draws, from the files earlier evaluations of this script left in
each run (read as ``--read`` says: ``eval_<reading>-<set>.yaml``, or ``eval_instructions-<set>.yaml`` where the
student was trained reading that way, and for ``train``, whose texts every reading passes unchanged), success per
instruction set with its 95 % interval, one bar per run, labelled ``--labels`` or by run folder.

With ``--distances TEXT...``, it evaluates nothing and prints how far each held-out paraphrase of the run's task
and each given text lies from the nearest instruction of the run's exported table (Euclidean, in the encoder's
space; cosine beside it): what the ROS 2 node's ``instruction_max_distance`` compares.

With ``--deploy``, it evaluates each run with the training phrasings as recorded, with the robot's measured command
delay in place of the recorded latency, behind the contract's deploy tank, and behind it with the measured delay
(what the ROS 2 node runs).

Run::

    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 [more runs] --episodes 100 --seeds 2
    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 --single-task runs/<task>/panda-multitask/<stamp>-*
    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 --distances "stop" "open the drawer" ""
    python bench/vla.py RUN_A RUN_B --plot docs/img/vla_sets.png --labels "state" "state + wrist camera"
    python bench/vla.py runs/panda-multitask/<stamp>-bc-vla-0 --deploy --episodes 100 --seeds 3
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
from sim.tasks.panda.multitask import HELDOUT_LISTS, INSTRUCTION_SETS

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


def trained_reading(run: Path) -> str:
    """How the student of ``run`` was trained to read its instruction (:data:`READINGS` but ``trained``), from its
    ``config.yaml``."""
    try:
        data = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else None
    except yaml.YAMLError as exc:
        raise SystemExit(f"{run}/config.yaml is not valid YAML: {str(exc).splitlines()[0]}") from None
    policy = data.get("policy") if isinstance(data, dict) else None
    if not isinstance(policy, dict):
        raise SystemExit(f"{run}/config.yaml is missing or has no policy section: not a train-bc run folder")
    return "nearest" if policy.get("language_nearest") else "projected" if policy.get("language_subspace") else "raw"


def set_file(run: Path, reading: str, name: str) -> Path | None:
    """The evaluation file of instruction set ``name`` in ``run`` read as ``reading``, or ``None`` (``--plot``): the
    trained reading's file stands for ``reading`` when the student was trained reading that way, and for ``train``
    (its texts pass every reading unchanged)."""
    trained = run / f"eval_instructions-{name}.yaml"
    if reading == "trained":
        return trained if trained.is_file() else None
    path = run / f"eval_{reading}-{name}.yaml"
    if not path.is_file() and (name == "train" or trained_reading(run) == reading):
        path = trained
    return path if path.is_file() else None


def plot_sets(runs: list[Path], labels: list[str], sets: list[str], reading: str, path: Path) -> None:
    """Grouped bars of success per instruction set, one bar per run, 95 % intervals (``--plot``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from robot_rl.logger import save_png

    cells: dict[tuple[int, str], tuple[float, float, float, int]] = {}
    for i, run in enumerate(runs):
        for name in sets:
            found = set_file(run, reading, name)
            if found is None:
                continue
            try:
                data = yaml.safe_load(found.read_text())
                lo, hi = (float(v) for v in data["success_ci95"])
                cells[i, name] = (float(data["success_rate"]), lo, hi, int(data["episodes"]))
            except (KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
                raise SystemExit(
                    f"{found}: not an evaluation file (success_rate, success_ci95, episodes): {exc!r}"
                ) from None
    if not cells:
        raise SystemExit(
            f"no evaluation read {reading} in the runs given: evaluate first (python bench/vla.py RUN ...)"
        )
    shown = [s for s in sets if any((i, s) in cells for i in range(len(runs)))]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(runs)
    for i, label in enumerate(labels):
        xs = [k + (i - (len(runs) - 1) / 2) * width for k, s in enumerate(shown) if (i, s) in cells]
        got = [cells[i, s] for s in shown if (i, s) in cells]
        rate = np.array([100 * c[0] for c in got])
        err = np.array([[100 * (c[0] - c[1]), 100 * (c[2] - c[0])] for c in got]).T
        bars = ax.bar(xs, rate, width, yerr=err, capsize=2, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax.set_xticks(range(len(shown)), shown)
    ax.set_ylabel("success [%] (bars: 95 % interval)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3, axis="y")
    episodes = sorted({c[3] for c in cells.values()})
    ax.set_title(
        f"success per instruction set ({'/'.join(map(str, episodes))} episodes per bar; read {reading})", fontsize=9
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    print(f"wrote {path}")


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
    for listed in HELDOUT_LISTS:
        run.env_cfg = dataclasses.replace(trained, instructions=listed)
        held += [(listed, t) for t in run.instruction_texts()]
    rows = [*held, *(("given", t) for t in texts)]
    for (kind, text), e in zip(rows, embed([t for _, t in rows]), strict=True):
        nearest, d = policy.nearest_instruction(e)
        print(f"{kind:<9}{d:6.2f}  cos {1 - d * d / 2:5.2f}  {text!r:<50} nearest: {nearest!r}")


def deploy_table(run_dir: Path, episodes: int, seeds: int) -> None:
    """``run_dir``'s student (the training phrasings) as recorded, with the robot's measured command delay in place
    of the recorded latency, behind the contract's deploy tank, and behind it with the measured delay: what the ROS 2
    node runs (``eval_deploy-<n>.yaml``)."""
    import sim
    from robot_rl.evaluate import measured_latency, switched_tank, tank_of

    run = BCRun.load(run_dir)

    def and_delayed(words: str, cfg: Any) -> list[tuple[str, Any]]:
        """``cfg`` and, where the task has one, ``cfg`` with the measured delay, labelled."""
        env = sim.make(run.cfg.task, 1, "cpu", cfg)
        delay, tank = measured_latency(env), switched_tank(cfg, env)
        env.close()
        out = [(words, cfg)] + ([(f"{words}, {delay.words}", delay.cfg)] if delay is not None else [])
        if tank is not None and tank_of(tank) is not None and tank_of(cfg) is None:  # the deploy tank, once
            out += and_delayed(f"behind the deploy tank ({tank_of(tank):g} J)", tank)
        return out

    print(f"{run_dir}: the training phrasings, {episodes} episodes x {seeds} seeds per setting")
    for n, (words, cfg) in enumerate(and_delayed("as recorded", run.env_cfg)):
        run.env_cfg = cfg
        result = run.evaluate(episodes, tuple(range(seeds)), stem=f"eval_deploy-{n}")
        print(f"  {words:<80} {result.line()}", flush=True)


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
    parser.add_argument(
        "--sets",
        nargs="+",
        choices=INSTRUCTION_SETS,
        default=list(INSTRUCTION_SETS),
        help="instruction sets (default: all)",
    )
    parser.add_argument("--plot", type=Path, metavar="PNG", help="draw the runs' earlier evaluations, evaluate nothing")
    parser.add_argument("--labels", nargs="+", help="--plot: one legend label per run (default: the run folder)")
    parser.add_argument(
        "--deploy", action="store_true", help="as recorded, with the measured delay, behind the deploy tank, both"
    )
    args = parser.parse_args()
    if args.deploy:
        for path in args.runs:
            deploy_table(path, args.episodes, args.seeds)
        return
    stem = "eval_instructions" if args.read == "trained" else f"eval_{args.read}"
    sets = [s for s in INSTRUCTION_SETS if s in args.sets]
    if args.plot is not None:
        if args.plot.suffix.lower() != ".png" or args.plot.is_dir():
            parser.error(f"--plot must name a .png file, got '{args.plot}'")
        labels = args.labels or [p.name for p in args.runs]
        if len(labels) != len(args.runs):
            parser.error(f"--labels gives {len(labels)} labels for {len(args.runs)} runs")
        plot_sets(args.runs, labels, sets, args.read, args.plot)
        return
    if args.distances is not None:
        for path in args.runs:
            distance_table(path, args.distances)
        return
    if args.single_task:
        if len(args.runs) != 1:
            parser.error("--single-task compares one multi-task run with single-task students")
        single_task_table(args.runs[0], args.single_task)
        return
    header = f"{'run':<44}" + "".join(f"{s:>14}" for s in sets) + f"{'chunk ms':>16}"
    print(header)
    print(" " * 44 + "".join(f"{'success/reach':>14}" for _ in sets) + f"{'median/p99':>16}")
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
