"""``robot-rl eval RUN``: a run in simulation, randomisation on and off; or its exported policy in an independent
simulator (``--sim``), one parameter swept past its training range (``--sweep``), corners of the randomisation
(``--corner``), another control rate (``--control-rate``), a moving setpoint (``--trajectory``), another task's worlds
(``--task``, PPO runs). Run folders of every kind (:func:`robot_rl.runs.open_run`)."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path
from typing import Any, Literal

from policies.runtime.text import printable
from robot_rl.cli.common import MAX_EPISODES, check_folder_writable, in_range, open_run_noting_edits
from robot_rl.config import check_device
from robot_rl.transfer.harness import SIMULATORS
from sim.typed_config import ConfigError

DEFAULT_SEEDS = 3
"""Evaluation seeds of a student (and of ``--task``) unless ``--seeds`` says otherwise."""

MAX_STEM = 120
"""Longest file stem of an evaluation under ``--set`` (a file system allows 255 bytes a name)."""


def add_parser(sub: Any) -> None:
    """The ``eval`` verb's arguments."""
    ev = sub.add_parser("eval", help="evaluate a trained run (randomisation on and off), write eval.yaml/eval.png")
    ev.add_argument("run", type=Path, help="run folder (runs/<task>/<stamp>-<seed>)")
    ev.add_argument("--episodes", type=int, default=256, help="episodes per setting (default: 256)")
    ev.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    ev.add_argument(
        "--sim",
        choices=SIMULATORS,
        help="instead: run the exported policy.onnx (policies.runtime only) in this independent simulator",
    )
    ev.add_argument(
        "--sweep",
        metavar="PARAM=LO:HI",
        help="instead: success and errors with one parameter scaled from LO to HI x nominal (e.g. link_mass=0.5:1.5)",
    )
    ev.add_argument("--points", type=int, default=11, help="values of a --sweep (default: 11)")
    ev.add_argument(
        "--trajectory",
        choices=("step", "figure8", "figure8-position"),
        help="instead: fly a moving setpoint (a 0.3 m step; a 0.3 m figure-eight, 6 s per lap, with its velocity or "
        "as positions only) and measure rise time, overshoot and settling, or the tracking error; writes "
        "tracking_<kind>.yaml/png (quadrotor tasks)",
    )
    ev.add_argument(
        "--sweep-others",
        default="randomised",
        metavar="randomised|nominal",
        help="the parameters a --sweep does not scale: randomised as in training (default), or all at nominal "
        "(one at a time; latency and sensor noise stay as trained)",
    )
    ev.add_argument(
        "--corner",
        metavar="PARAM=lo|hi[,...]|worst",
        help="instead: the named parameters pinned at the low or high edge of their training range, the others "
        "randomised as trained (e.g. motor_time_constant_up=hi,action_latency=hi); writes corner_<...>.yaml. "
        "'worst': each parameter at each edge, then the worst corner grown one parameter at a time "
        "(--corner-depth); writes corners.yaml/png",
    )
    ev.add_argument(
        "--corner-depth",
        type=int,
        metavar="K",
        help="--corner worst: grow the worst corner to K parameters (default: 3)",
    )
    ev.add_argument(
        "--corner-beam",
        type=int,
        metavar="B",
        help="--corner worst: grow the B worst corners at each size, not only the worst (default: 1, greedy; "
        "about B times the evaluations, a firmer bound on the worst corner)",
    )
    ev.add_argument(
        "--control-rate",
        type=float,
        metavar="HZ",
        help="instead: evaluate at this control rate, not the trained one (what a robot running the policy at "
        "another rate gets; physics step kept, action latency in control periods); writes eval_<HZ>hz.yaml/png",
    )
    ev.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="env.KEY=VALUE",
        help="evaluate in another world than the trained one (PPO runs) or the demonstrations' (train-bc runs; "
        "repeatable; the policy stays as trained), "
        "e.g. env.noise.bias_std.object_pos=0.005, env.passivity.tank_max_j=10 or "
        "env.randomization.action_latency=null (a randomisation term by its name); refused where it would change the "
        "policy's inputs or outputs; writes eval_set-<settings>.yaml/png",
    )
    ev.add_argument(
        "--task",
        metavar="TASK",
        help="PPO runs: evaluate in another task's worlds, on the view that task gives of the run's own (a "
        "panda-lift teacher in panda-multitask, as `collect TASK --teacher RUN` records it): TASK's defaults with "
        "the run's shared env settings (tank, delays, gripper mapping), then --set; success pooled over --seeds, "
        "per instruction where TASK gives them; writes eval_task-TASK.yaml/png",
    )
    ev.add_argument(
        "--seeds", type=int, help=f"train-bc runs and --task: evaluation seeds, pooled (default: {DEFAULT_SEEDS})"
    )
    ev.add_argument("--steps", type=int, help="train-bc diffusion runs: DDIM steps per chunk (default: the run's)")
    ev.add_argument(
        "--action-horizon",
        type=int,
        help="train-bc runs: receding horizon, K actions executed per plan, 1..pred_horizon (turns the run's "
        "temporal ensembling off unless --ensemble-decay is given; default: the run's)",
    )
    ev.add_argument(
        "--ensemble-decay",
        type=float,
        metavar="M",
        help="train-bc runs: plan every step and average the plans, each older one weighted exp(M) x the next "
        "newer (M < 0 favours newer plans; default: the run's)",
    )
    ev.add_argument(
        "--noise-scale",
        type=float,
        metavar="S",
        help="train-bc diffusion and flow students: scale each plan's initial noise by S in [0, 1] (1 samples what "
        "the student learned, 0 makes it deterministic; default: the run's policy.noise_scale)",
    )
    ev.add_argument(
        "--chunking",
        choices=("sync", "async", "rtc"),
        help="train-bc runs: execute receding-horizon chunks under an inference delay (--inference-delay): sync "
        "(the loop waits, holding its last command), async (the next chunk computed while the current one executes), "
        "rtc (async with real-time chunking: the new chunk inpainted to join the current one; flow students); "
        "sync and rtc turn temporal ensembling off; async keeps the run's (or --ensemble-decay's: a plan every "
        "period, each averaged in from --inference-delay periods later; --action-horizon K for receding async); "
        "writes eval_chunking-MODE-dN.yaml/png with the action steps at the joins",
    )
    ev.add_argument(
        "--inference-delay",
        type=int,
        default=0,
        metavar="STEPS",
        help="train-bc runs, with --chunking: simulated time to plan a chunk, control periods (default: 0)",
    )
    ev.add_argument(
        "--instructions",
        metavar="SET",
        help="train-bc runs that read an instruction: the task's instruction set to evaluate with instead of the "
        "training phrasings (panda-multitask: heldout, heldout2 or heldout3 paraphrases, or the probes wrong-colour, "
        "wrong-skill and empty); writes eval_instructions-SET.yaml/png and prints success per instruction",
    )
    ev.add_argument(
        "--visual",
        choices=("dataset", "nominal", "randomized"),
        default="dataset",
        help="train-bc runs that see cameras: render them as the demonstrations were (dataset, the default), "
        "without visual randomisation (nominal), or with sim/rendering.py's default randomisation (randomized)",
    )


def run(args: argparse.Namespace) -> int:
    """``robot-rl eval RUN``."""
    from robot_rl.runs import BCRun
    from robot_rl.runs.bc import check_execution

    in_range("--episodes", args.episodes, 1, MAX_EPISODES)
    check_execution(args.ensemble_decay, args.chunking)
    check_device(args.device)
    if sum(x is not None for x in (args.sim, args.sweep, args.control_rate, args.trajectory, args.corner)) > 1:
        raise ConfigError(
            "--sim, --sweep, --corner, --control-rate and --trajectory are separate evaluations; give one of them"
        )
    if args.task is not None and any(
        x is not None for x in (args.sim, args.sweep, args.control_rate, args.trajectory, args.corner)
    ):
        raise ConfigError("--task evaluates in another task's worlds; give it without --sim, --sweep, --corner, "
                          "--control-rate and --trajectory")  # fmt: skip
    if args.set and any(x is not None for x in (args.sim, args.sweep, args.control_rate, args.trajectory, args.corner)):
        raise ConfigError(
            "--set applies to the plain evaluation; give it without --sim, --sweep, --corner, "
            "--control-rate and --trajectory"
        )
    if args.control_rate is not None and not (math.isfinite(args.control_rate) and args.control_rate > 0):
        raise ConfigError(f"--control-rate must be a positive rate in Hz, got {args.control_rate}")
    if args.sweep_others != "randomised" and not args.sweep:
        raise ConfigError("--sweep-others applies to a --sweep; give --sweep PARAM=LO:HI as well")
    if args.sweep:
        from robot_rl.transfer.sweep import Sweep

        sweep = Sweep.parse(args.sweep, args.points, args.sweep_others)  # malformed specs fail before any loading
    corner = _parse_corner(args)
    loaded = open_run_noting_edits(args.run, args.device)
    check_folder_writable(args.run, "run folder")
    if args.chunking is not None and (args.sim or not isinstance(loaded, BCRun)):
        raise ConfigError("--chunking evaluates a train-bc run in its own simulator; it takes no --sim")
    if isinstance(loaded, BCRun):
        if args.task is not None:
            raise ConfigError("--task applies to PPO runs; a train-bc run is evaluated in its dataset's task")
        if args.sweep or args.control_rate or args.trajectory or args.corner:
            raise ConfigError(
                "--sweep, --corner, --control-rate and --trajectory are not available for train-bc runs yet"
            )
        if args.sim:
            if args.action_horizon is None and args.ensemble_decay is None and args.noise_scale is None:
                return _eval_sim_to_sim(loaded, args.sim, args.episodes)
            import tempfile

            loaded.execute_with(args.action_horizon, args.ensemble_decay, noise_scale=args.noise_scale)
            with tempfile.TemporaryDirectory(prefix="robot-rl-sim2sim-") as tmp:  # the run's policy.onnx stays as it is
                return _eval_sim_to_sim(loaded, args.sim, args.episodes, loaded.export(Path(tmp)))
        return _eval_bc(loaded, args)
    _refuse_student_flags(args)
    if args.task is not None:
        return _eval_other_task(loaded, args)
    if args.sim:
        return _eval_sim_to_sim(loaded, args.sim, args.episodes)
    if args.sweep:
        return _eval_sweep(loaded, sweep, args.episodes)
    if args.trajectory:
        return _eval_trajectory(loaded, args.trajectory, args.episodes)
    if args.corner:
        return _eval_corner(loaded, corner, args.episodes, args.corner_depth, args.corner_beam)
    stem = "eval"
    if args.set:
        loaded.set_env(args.set)
        stem = settings_stem(args.set)
        print(f"evaluating in another world than the trained one: {' '.join(args.set)}")
    if args.control_rate is not None:
        from sim.tasks.base import at_control_period

        trained = 1.0 / loaded.cfg.env.dt
        loaded.cfg.env = at_control_period(loaded.cfg.env, 1.0 / args.control_rate)
        stem = f"eval_{args.control_rate:g}hz"
        print(f"control rate {args.control_rate:g} Hz (trained at {trained:g} Hz)")
    for r in loaded.evaluate(args.episodes, stem=stem):
        print(
            f"{r.setting}: criterion {'MET' if r.met else 'not met'}  "
            + "  ".join(f"{k}={v:.4g}" for k, v in r.summary().items() if isinstance(v, float))
        )
    for note in loaded.skipped:
        print(note)
    print(f"wrote {args.run / f'{stem}.yaml'} and {args.run / f'{stem}.png'}")
    return 0


def _refuse_student_flags(args: argparse.Namespace) -> None:
    """Refuse, for a PPO run, the first flag that only a ``train-bc`` run takes (a PPO actor is executed every
    period, deterministically, on state).

    Raises:
        ConfigError: One line naming the flag.
    """
    given = (
        ("--steps", args.steps is not None),
        ("--action-horizon", args.action_horizon is not None),
        ("--ensemble-decay", args.ensemble_decay is not None),
        ("--noise-scale", args.noise_scale is not None),
        ("--inference-delay", bool(args.inference_delay)),
        ("--instructions", args.instructions is not None),
        ("--visual", args.visual != "dataset"),
        ("--seeds", args.seeds is not None and args.task is None),
    )
    flag = next((name for name, on in given if on), None)
    if flag is None:
        return
    hint = ""
    if flag == "--instructions":
        hint = " (in another task's worlds: --task TASK --set env.instructions=SET)"
    elif flag == "--seeds":
        hint = " (a PPO run is evaluated on its own evaluation seed; --seeds applies with --task)"
    raise ConfigError(f"{flag} applies to train-bc runs; '{printable(str(args.run))}' is a PPO run{hint}")


def settings_stem(overrides: list[str]) -> str:
    """The file stem of an evaluation under ``--set`` overrides: ``eval_set-<key>-<value>_...``, the ``env.`` prefix
    dropped and every character but letters, digits, ``.``, ``_`` and ``-`` written as ``-``; a stem over
    :data:`MAX_STEM` characters ends in a hash of the whole list instead."""
    import hashlib
    import re

    text = "_".join(re.sub(r"[^A-Za-z0-9._-]", "-", o.strip().removeprefix("env.")) for o in overrides)
    stem = f"eval_set-{text}"
    if len(stem) > MAX_STEM:
        digest = hashlib.sha256("\n".join(overrides).encode()).hexdigest()[:12]
        stem = f"{stem[: MAX_STEM - 13]}-{digest}"
    return stem


def _eval_trajectory(run: Any, kind: str, episodes: int) -> int:
    """``robot-rl eval RUN --trajectory KIND``: the moving setpoint, randomisation on and off
    (:mod:`robot_rl.tracking`)."""
    import yaml

    from policies.runtime.files import atomic_write_text
    from robot_rl.tracking import fly, plot_tracking

    results = [fly(run, kind, episodes, randomize) for randomize in (True, False)]
    for r in results:
        print(
            f"{kind}, randomisation {'on ' if r.randomized else 'off'}: "
            + "  ".join(f"{k}={v:.4g}" for k, v in r.figures.items())
        )
    stem = run.run_dir / f"tracking_{kind}"
    summary = {("randomization_on" if r.randomized else "randomization_off"): r.summary() for r in results}
    atomic_write_text(stem.with_suffix(".yaml"), yaml.safe_dump(summary, sort_keys=False))
    plot_tracking(results[0], stem.with_suffix(".png"), f"{run.task}: {kind}, randomisation on ({episodes} episodes)")
    print(f"wrote {stem.with_suffix('.yaml')} and {stem.with_suffix('.png')}")
    return 0


def _eval_bc(run: Any, args: argparse.Namespace) -> int:
    """``robot-rl eval RUN`` of a train-bc run: success with a 95 % interval over ``--seeds`` seeds."""
    from policies.runtime.realtime import RealTime
    from robot_rl.imitation.evaluate import own_tasks_line
    from robot_rl.imitation.students import DiffusionStudentConfig
    from sim.rendering import VisualRandomization

    seeds = DEFAULT_SEEDS if args.seeds is None else args.seeds
    in_range("--seeds", seeds, 1, 100)
    if args.steps is not None:
        if not isinstance(run.cfg.policy, DiffusionStudentConfig):
            raise ConfigError("--steps applies to diffusion students only")
        in_range("--steps", args.steps, 1, run.cfg.policy.train_steps)
        run.cfg.policy = dataclasses.replace(run.cfg.policy, inference_steps=args.steps)
        run.policy.sampler = dataclasses.replace(run.policy.sampler, inference_steps=args.steps)
    timing = None
    if args.chunking is not None:
        in_range("--inference-delay", args.inference_delay, 0, run.cfg.policy.pred_horizon)
        timing = RealTime(args.chunking, args.inference_delay)
    elif args.inference_delay:
        raise ConfigError("--inference-delay applies with --chunking sync, async or rtc")
    run.execute_with(args.action_horizon, args.ensemble_decay, timing, args.noise_scale)
    if args.visual != "dataset" and not run.policy.cameras:
        raise ConfigError(f"--visual {args.visual}: this student sees no camera")
    visual: VisualRandomization | Literal["dataset"] | None = "dataset"
    if args.visual != "dataset":
        visual = VisualRandomization() if args.visual == "randomized" else None
    stem = "eval"
    if args.set:
        run.set_env(args.set)
        stem = settings_stem(args.set)
        print(f"evaluating in another world than the demonstrations': {' '.join(args.set)}")
    if args.instructions is not None:
        if not run.policy.language_dim or not hasattr(run.env_cfg, "instructions"):
            raise ConfigError("--instructions applies to students that read an instruction, in a language task")
        try:
            run.env_cfg = dataclasses.replace(run.env_cfg, instructions=args.instructions)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"--instructions {printable(args.instructions)}: {exc}") from None
        stem = f"{stem}_instructions-{args.instructions}" if args.set else f"eval_instructions-{args.instructions}"
    if timing is not None:
        stem += f"_chunking-{timing.mode}-d{timing.delay_steps}"
    result = run.evaluate(args.episodes, tuple(range(seeds)), visual=visual, stem=stem, beside_teacher=True)
    print(f"{run.cfg.task}, {run.cfg.policy.kind} student: {result.line()}")
    for line in [result.teacher_line(), *run.skipped]:
        if line:
            print(f"  {line}")
    texts = run.instruction_texts() if run.cfg.tasks or run.policy.language_dim else []
    own = result.on_instructions(texts, run.cfg.tasks) if run.cfg.tasks else None
    if own is not None:
        print(f"  {own_tasks_line(own)}")
    if result.motion:
        m = result.motion
        if run.spec().ensemble_decay is not None:
            where, within = "action steps, a new plan averaged in every period: largest", ""
        else:
            where, within = "chunk joins: largest action step", f"within chunks {m['within_step_mean']:.3f}; "
        print(
            f"  {where} {m['join_step_max']:.3f}, p95 {m['join_step_p95']:.3f}, mean {m['join_step_mean']:.3f} "
            f"({within}normalised units); loop idle {m['idle_fraction']:.1%}"
        )
    if run.policy.language_dim:
        _print_per_instruction(result, texts)
    print(f"wrote {args.run / f'{stem}.yaml'} and {args.run / f'{stem}.png'}")
    return 0


def _print_per_instruction(result: Any, texts: list[str]) -> None:
    """One line per instruction the episodes were given: success, counts and the text (``result``:
    :class:`~robot_rl.imitation.evaluate.ChunkEvalResult`)."""
    for index, (won, n) in sorted(result.success_by("instruction").items()):
        text = texts[index] if index < len(texts) else f"instruction {index}"
        print(f"  {won / n:6.1%}  ({won}/{n})  '{printable(text)}'")


def _eval_other_task(run: Any, args: argparse.Namespace) -> int:
    """``robot-rl eval RUN --task TASK``: a PPO run in another task's worlds (:func:`teacher_world`, the world
    ``collect TASK --teacher RUN`` records in), acting on the view ``TASK`` gives of its own (:meth:`PPORun.act_in`);
    success pooled over ``--seeds`` seeds with a 95 % interval, per instruction where ``TASK`` gives them. The seeds
    are a student's (``robot-rl eval STUDENT --seeds``), so a teacher and its student compare episode for episode."""
    from robot_rl.imitation.collect import teacher_world
    from robot_rl.imitation.evaluate import evaluate_teacher
    from robot_rl.runs.bc import task_instructions, write_evaluation
    from robot_rl.runs.worlds import check_env_overrides

    seeds = DEFAULT_SEEDS if args.seeds is None else args.seeds
    in_range("--seeds", seeds, 1, 100)
    if args.task == run.task:
        raise ConfigError(f"--task {printable(args.task)} is the run's own task; evaluate it without --task")
    check_env_overrides(args.set)
    cfg = teacher_world(run, args.task, tuple(args.set))  # an unknown task or a bad setting is refused here
    result = evaluate_teacher(run, args.task, cfg.env, args.episodes, tuple(range(seeds)))
    stem = f"eval_task-{args.task}" + (f"_{settings_stem(args.set).removeprefix('eval_')}" if args.set else "")
    texts = task_instructions(args.task, cfg.env)
    title = f"{run.task} run in {args.task}"
    write_evaluation(run.run_dir, result, title, stem=stem, instructions=texts, env_overrides=args.set or None)
    print(f"{title}, on the view {args.task} gives of {run.task}: {result.line()}")
    _print_per_instruction(result, texts)
    print(f"wrote {args.run / f'{stem}.yaml'} and {args.run / f'{stem}.png'}")
    return 0


def _eval_sim_to_sim(run: Any, simulator: str, episodes: int, onnx: Path | None = None) -> int:
    """``robot-rl eval RUN --sim SIM``: the exported policy (``onnx``, default the run's ``policy.onnx``, exported
    if missing) in an independent simulator, DR on and off."""
    import yaml

    from policies.runtime.files import atomic_write_text
    from robot_rl.runs import BCRun
    from robot_rl.runs.bc import execution_record
    from robot_rl.transfer.harness import plug, run_episodes
    from sim.registry import get_task

    plug(simulator, run.task)  # a task without a model in that simulator fails here, naming what exists
    if onnx is None:
        onnx = run.run_dir / "policy.onnx"
        if not onnx.exists():
            run.export()
    criterion = get_task(run.task).factory.criterion  # type: ignore[attr-defined]
    results = [run_episodes(onnx, simulator, episodes, run.cfg.seed, rnd, criterion) for rnd in (True, False)]
    execution = execution_record(run.spec()) if isinstance(run, BCRun) else None  # as exported to `onnx`
    trained = _training_engine_success(run, execution=execution)
    measured = _training_engine_success(run, "measured_delay").get(True)  # the delay PyBullet's Panda draws
    for r in results:
        verdict = "MET" if r.met else "not met"
        line = f"{simulator}, randomisation {'on ' if r.randomized else 'off'}: criterion {verdict}  " + "  ".join(
            f"{k}={v:.4g}" for k, v in r.figures.items()
        )
        success = float(r.episodes["success"].mean())
        mujoco = trained.get(r.randomized)
        if mujoco:
            line += f"  ({success / mujoco:.0%} of the training simulator's {mujoco:.1%}, eval.yaml"
            if r.randomized and measured:
                line += f"; {success / measured:.0%} of its {measured:.1%} with the measured command delay"
            line += ")"
        print(line)
    out = run.run_dir / f"sim2sim_{simulator}.yaml"
    summary: dict[str, Any] = {
        ("randomization_on" if r.randomized else "randomization_off"): {
            **r.summary(),
            **({"training_simulator_success": trained[r.randomized]} if r.randomized in trained else {}),
            **({"training_simulator_success_measured_delay": measured} if r.randomized and measured else {}),
        }
        for r in results
    }
    if execution is not None:
        summary["execution"] = execution
    atomic_write_text(out, yaml.safe_dump(summary, sort_keys=False))
    print(f"wrote {out}")
    return 0


def _training_engine_success(
    run: Any, variant_key: str = "", execution: dict[str, Any] | None = None
) -> dict[bool, float]:
    """Success in the training simulator by randomisation, in the run's own setting (its tank, if it trained with
    one: the tank the sim-to-sim harness runs too) or that setting's ``variant_key`` (``measured_delay``: the
    robot's measured latency, :func:`robot_rl.evaluate.measured_latency`), from the run's ``eval.yaml``; empty where
    there is none. A student's counts only with ``execution`` (:func:`robot_rl.runs.bc.execution_record` of the chunks
    evaluated) and where ``eval.yaml`` executed its chunks alike."""
    import yaml

    from robot_rl.evaluate import setting_key, tank_of

    path = run.run_dir / "eval.yaml"
    try:
        saved = yaml.safe_load(path.read_text()) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(saved, dict):
        return {}
    from robot_rl.runs import BCRun

    if isinstance(run, BCRun):  # a student: eval.yaml pools its seeds, randomisation as recorded
        if variant_key or execution is None:  # without the execution compared, no peer is known
            return {}
        executed = saved.get("execution")  # an evaluation of chunks executed otherwise is not this one's peer
        if isinstance(executed, dict) and any(executed.get(k) != v for k, v in execution.items()):
            return {}
        value = saved.get("success_rate")
        if not (isinstance(value, int | float) and 0 < value <= 1):
            return {}
        return {bool(saved.get("randomization", True)): float(value)}
    tank = tank_of(run.cfg.env)
    out = {}
    for randomized in (True, False):
        entry = saved.get(setting_key(randomized, tank, variant_key))
        value = entry.get("success_rate") if isinstance(entry, dict) else None
        if isinstance(value, int | float) and 0 < value <= 1:
            out[randomized] = float(value)
    return out


def _eval_sweep(run: Any, sweep: Any, episodes: int) -> int:
    """``robot-rl eval RUN --sweep PARAM=LO:HI``: one parameter through and past its training range."""
    from robot_rl.transfer.sweep import run_sweep

    rows = run_sweep(run, sweep, episodes)
    keys = [k for k in rows[0] if k not in ("value", "criterion_met", "episodes", "failures_go_with")]
    print(f"{sweep.param} (x nominal)  " + "  ".join(keys))
    for row in rows:
        print(f"{row['value']:>8.3f}            " + "  ".join(f"{row[k]:.4g}" for k in keys))
    factors = [(row["value"], row["failures_go_with"]) for row in rows if row["failures_go_with"]]
    if factors:
        print("failed episodes went with (their mean, and the mean of all episodes at that point):")
        for value, text in factors:
            print(f"  {sweep.param} x{value:.3g}: {text}")
    print(f"wrote {run.run_dir / f'{sweep.stem}.csv'} and {run.run_dir / f'{sweep.stem}.png'}")
    return 0


def _parse_corner(args: argparse.Namespace) -> Any:
    """``--corner``'s corner (``None`` for ``worst`` or none given); malformed specs fail before any loading."""
    from robot_rl.transfer.corners import DEFAULT_DEPTH, MAX_BEAM, MAX_DEPTH, WORST, Corner

    for flag, key, default, low, top in (("--corner-depth", "corner_depth", DEFAULT_DEPTH, 2, MAX_DEPTH),
                                          ("--corner-beam", "corner_beam", 1, 1, MAX_BEAM)):  # fmt: skip
        if getattr(args, key) is None:
            setattr(args, key, default)
        elif args.corner != WORST:
            raise ConfigError(f"{flag} applies to --corner {WORST}; give that as well")
        in_range(flag, getattr(args, key), low, top)
    if args.corner is None or args.corner == WORST:
        return None
    return Corner.parse(args.corner)


def _eval_corner(run: Any, corner: Any, episodes: int, depth: int, beam: int) -> int:
    """``robot-rl eval RUN --corner SPEC``: one corner of the randomisation, or the search for the worst."""
    from robot_rl.transfer.corners import evaluate_corner, row, search_worst, write_corner, write_search

    def line(r: dict[str, Any]) -> str:
        keys = [k for k, v in r.items() if isinstance(v, float) and k not in ("return_std",)]
        met = "criterion " + ("MET" if r["criterion_met"] else "not met")
        met += ", quality bar " + ("met" if r["quality_met"] else "not met")
        return f"{r['corner']}: {met}  " + "  ".join(f"{k}={r[k]:.4g}" for k in keys)

    if corner is not None:
        result = evaluate_corner(run, corner, episodes)
        print(line(row(corner.name, result)))
        print(f"wrote {run.run_dir / write_corner(run, corner, result)}")
        return 0
    rows = search_worst(run, episodes, depth, beam)
    for r in rows:
        print(line(r))
    worst = min(rows, key=lambda r: float(r["score"]))
    print(f"worst setting found: {worst['corner']} (score {float(worst['score']):.4g}; {episodes} episodes each)")
    write_search(run, rows, episodes)
    print(f"wrote {run.run_dir / 'corners.yaml'} and {run.run_dir / 'corners.png'}")
    return 0
