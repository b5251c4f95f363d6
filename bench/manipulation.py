"""Where a manipulation teacher stands: time to each success level, success with randomisation on and off, and
through the energy tank.

For each PPO run folder of a ``panda-*`` task (``robot-rl train panda-lift``, ...), printed side by side:

- the training budget it used (wall seconds, env steps, iterations, from ``metrics.csv``) and the wall time at which
  the periodic evaluation (selection seeds) first reached each of ``--levels``;
- success of the policy the folder keeps (``best.pt`` if any, else the last checkpoint) over ``--episodes``
  episodes on the held-out evaluation seeds, randomisation on and off, with the task's median figure;
- success of the exported ``policy.onnx`` through the energy tank at each ``--t-max`` (the ROS 2 node's
  implementation, as ``bench/passivity.py`` runs it), randomisation on;
- with ``--pybullet N``: the exported policy in PyBullet (``robot-rl eval RUN --sim pybullet``'s harness, N episodes
  per setting), randomisation on and off, and its share of the MuJoCo success beside it;
- ``panda-push``: the share of episodes whose cube tumbled (rolled over an edge) in each engine.

With ``--students``, for each ``robot-rl train-bc`` run folder whose demonstrations a PPO teacher recorded
(``robot-rl collect --teacher RUN``): the student (executed as its run says) against that teacher on the same
held-out seeds, starts, randomisation and tank, ``--episodes`` split over ``--student-seeds``. The teacher acts in its
own training config (a teacher of another task, e.g. a ``panda-lift`` teacher of a ``panda-multitask`` student, in
the world it recorded in, on that task's view of its own); a student recorded with ``collect --unbiased`` is judged
with its calibrated sensors, and the teacher with those sensors is shown beside (``nan`` where they are the
teacher's).

Run::

    python bench/manipulation.py runs/panda-lift/<run> runs/panda-push/<run> --episodes 500 --t-max 20 40 80
    python bench/manipulation.py runs/panda-push/<run> --episodes 256 --pybullet 100
    python bench/manipulation.py --students runs/panda-lift/<stamp>-bc-mlp-0 runs/panda-lift/<stamp>-bc-diffusion-0
    python bench/manipulation.py --students runs/panda-multitask/<stamp>-bc-vla-0 --episodes 300 --student-seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from passivity import run as tank_run

from robot_rl.bench import format_table
from robot_rl.imitation.evaluate import evaluate_chunk_policy, evaluate_teacher
from robot_rl.runs import PPORun
from robot_rl.runs.bc import BCRun, teacher_beside, teacher_folder
from robot_rl.transfer.harness import run_episodes
from sim.registry import get_task
from sim.typed_config import to_dict

LEVELS = (0.25, 0.5, 0.7, 0.85, 0.9)
"""Success levels whose first time is reported, fractions of the periodic evaluation's episodes."""


def training_figures(run_dir: Path, levels: tuple[float, ...]) -> dict[str, float]:
    """Budget used and the wall time (s) the periodic evaluation first reached each level (NaN: never)."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{run_dir / 'metrics.csv'} holds no rows")
    last = rows[-1]
    out = {
        "wall s": float(last["perf/wall_time_s"]),
        "env steps [M]": float(last["env_steps"]) / 1e6,
        "iterations": float(len(rows)),
    }
    evals = [(float(r["perf/wall_time_s"]), float(r["eval/success_rate"])) for r in rows if r.get("eval/success_rate")]
    for level in levels:
        out[f"t({level:.0%}) s"] = next((t for t, s in evals if s >= level), math.nan)
    return out


def pybullet_figures(run: PPORun, episodes: int, mujoco: dict[str, object]) -> dict[str, float]:
    """The exported policy in PyBullet, randomisation on and off (the setting MuJoCo's ``mujoco`` row names ``DR on``
    / ``DR off``: behind the run's tank where it trained behind one), and its share of that MuJoCo success."""
    criterion = get_task(run.task).factory.criterion  # type: ignore[attr-defined]
    tank = f", energy tank {run.cfg.env.passivity.tank_max_j:g} J" if run.cfg.env.passivity.tank_max_j else ""
    row: dict[str, float] = {}
    for randomize, tag in ((True, "on"), (False, "off")):
        result = run_episodes(run.run_dir / "policy.onnx", "pybullet", episodes, run.cfg.seed, randomize, criterion)
        success = float(result.episodes["success"].mean())
        row[f"PyBullet DR {tag}"] = success
        reference = mujoco.get(f"success DR {tag}{tank}")
        if isinstance(reference, float) and reference > 0:
            row[f"PyBullet / MuJoCo DR {tag}"] = success / reference
        if "tumbled" in result.episodes:
            row[f"PyBullet tumbled DR {tag}"] = float(result.episodes["tumbled"].mean())
    return row


def student_row(student_dir: Path, args: argparse.Namespace) -> dict[str, object]:
    """One student against its PPO teacher (``--teacher``, else the run folder its demonstrations name),
    ``--episodes`` split over ``--student-seeds``, in the demonstrations' task config."""
    student = BCRun.load(student_dir)
    student.execute_with(args.action_horizon, args.ensemble_decay, noise_scale=args.noise_scale)
    teacher_dir = teacher_folder(args.teacher or student.teacher)
    episodes, seeds = args.episodes, args.student_seeds
    if args.teacher is not None and teacher_dir is None:
        raise SystemExit(f"--teacher {args.teacher}: no PPO run folder (no checkpoint.pt there)")
    if teacher_dir is None:
        raise SystemExit(
            f"{student_dir}: its demonstrations name no PPO run folder as teacher ({student.teacher!r}); "
            "collect them with robot-rl collect --teacher RUN, or name it with --teacher"
        )
    teacher = PPORun.load(teacher_dir)
    per_seed = max(1, episodes // len(seeds))
    spec = student.spec()
    mine = evaluate_chunk_policy(
        student.policy, spec, student.task, student.env_cfg, student.obs_groups, per_seed, seeds
    )
    # the teacher where it acts (its own config; a teacher of another task: the dataset's world, on that task's view)
    theirs = teacher_beside(teacher, student.task, student.env_cfg, per_seed, seeds)
    # A student recorded with `collect --unbiased` is judged with its calibrated sensors, the teacher as it acts
    # (its own config); what the teacher would do with the student's sensors is shown beside.
    calibrated = math.nan
    if teacher.task == student.task and to_dict(student.env_cfg) != to_dict(teacher.cfg.env):
        calibrated = evaluate_teacher(teacher, student.task, student.env_cfg, per_seed, seeds).success_rate
    execution = f"Ta {spec.action_horizon}" if spec.ensemble_decay is None else f"ensemble m={spec.ensemble_decay:g}"
    execution += f", noise x{spec.noise_scale:g}" if spec.noise_input else ""
    return {
        "student": f"{student.task} {student.cfg.policy.kind} {student_dir.name}",
        "execution": execution,
        "teacher": teacher_dir.name,
        "episodes": float(mine.episodes),
        "student success": mine.success_rate,
        "teacher success": theirs.success_rate,
        "gap [points]": 100 * (theirs.success_rate - mine.success_rate),
        "teacher, student's sensors": calibrated,
    }


def main(argv: list[str] | None = None) -> None:
    """Print one row per run folder."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="*", help="PPO run folders of panda-* tasks")
    p.add_argument("--episodes", type=int, default=500, help="held-out episodes per setting (default: 500)")
    p.add_argument("--t-max", type=float, nargs="*", default=[], help="energy tank sizes, J (default: none)")
    p.add_argument("--levels", type=float, nargs="+", default=list(LEVELS))
    p.add_argument("--pybullet", type=int, default=0, metavar="N", help="PyBullet episodes per setting (default: 0)")
    p.add_argument("--students", type=Path, nargs="*", default=[], help="train-bc run folders of PPO teachers")
    p.add_argument("--teacher", type=Path, help="PPO teacher of every --students run (default: as recorded)")
    p.add_argument("--action-horizon", type=int, help="students: actions per plan, ensembling off (robot-rl eval)")
    p.add_argument("--ensemble-decay", type=float, help="students: temporal-ensembling weight (robot-rl eval)")
    p.add_argument("--noise-scale", type=float, help="sampling students: initial noise scale (robot-rl eval)")
    p.add_argument("--student-seeds", type=int, nargs="+", default=[0, 1], help="held-out seeds (default: 0 1)")
    args = p.parse_args(argv)
    if not args.runs and not args.students:
        p.error("give PPO run folders, --students, or both")
    if args.students:
        print(format_table([student_row(s, args) for s in args.students]))
    rows = []
    for run_dir in args.runs:
        run = PPORun.load(run_dir)
        row: dict[str, object] = {"run": f"{run.task} {run_dir.name}"}
        row.update(training_figures(run_dir, tuple(args.levels)))
        for result in run.evaluate(args.episodes, stem="eval_bench"):
            tag = result.setting.removeprefix("randomisation ")  # on / off / on, energy tank 40 J
            if result.variant:  # a short column name: "on, energy tank 40 J, measured delay"
                tag = tag.replace(result.variant, result.variant_key.replace("_", " "))
            row[f"success DR {tag}"] = float(result.episodes["success"].mean())
            for name, values in result.episodes.items():
                if name.startswith("final_"):
                    row[f"median {name} DR {tag}"] = float(sorted(values)[len(values) // 2])
            if "tumbled" in result.episodes:
                row[f"tumbled DR {tag}"] = float(result.episodes["tumbled"].mean())
        if args.t_max or args.pybullet:
            run.export()
        if args.pybullet:
            row.update(pybullet_figures(run, args.pybullet, row))
        for t_max in args.t_max:
            row[f"tank {t_max:g} J"] = tank_run(run_dir, args.episodes, t_max, seed=3)["success"]
        rows.append(row)
    if rows:
        print(format_table(rows))


if __name__ == "__main__":
    main()
