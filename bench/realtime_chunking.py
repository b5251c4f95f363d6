"""Chunk execution against the clock: naive (sync) chunking against async execution and real-time chunking (rtc).

Two measurements of one ``train-bc`` run (a flow-matching VLA student for ``rtc``; any chunk student for the
others), side by side in one run of this script (policies/runtime/realtime.py says what each schedule does):

1. **In the simulator, with a simulated inference delay** of ``d`` control periods (``--delays``): success over
   ``--episodes`` episodes per seed, the largest and the mean action step at chunk joins against the mean step
   within chunks (normalised action units, the largest change of any action dimension from one period to the
   next), and the share of control periods the loop sat idle holding its last command. Same starts, randomised
   parameters and sampler seeds for every schedule.
   With ``--action-horizons`` several plan intervals; a run that ensembles adds, per delay, a row of its own
   execution: async, a plan every period, each averaged in ``d`` periods after it started (every step a join).
2. **On the clock**: the run's student exported afresh (onnxruntime, ``--threads`` intra-op threads) driven by a control
   loop at the contract's period for ``--wall-steps`` periods, the planner on a worker thread for async / rtc (async
   keeps the contract's temporal ensembling: a plan from the newest observations whenever the worker is free):
   the time the loop spent blocked waiting for a plan (its idle time) and the longest control step after the first
   (which plans the episode's first chunk at once in every schedule), against sync.
   ``--extra-latency-ms`` adds a sleep to every plan to stand in for a larger model or a slower computer (said so in
   the output; the default model plans in a few ms, far inside a 40 ms period).

Run::

    python bench/realtime_chunking.py runs/panda-multitask/<stamp>-bc-vla-0 --episodes 50 --seeds 2 --delays 1 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from policies.runtime.chunking import ChunkedOnnxPolicy
from policies.runtime.realtime import MODES, RealTime
from robot_rl.imitation.evaluate import evaluate_chunk_policy
from robot_rl.runs.bc import BCRun


def simulated(run: BCRun, mode: str, delay: int, episodes: int, seeds: int, horizon: int | None) -> dict[str, float]:
    """Success and join smoothness of ``run`` under ``mode`` with a simulated ``delay``, receding horizon of
    ``horizon`` actions per plan; ``None``: async with the run's temporal ensembling (a plan every period, each
    averaged in ``delay`` periods after it started; every step a join)."""
    run.execute_with(horizon, timing=RealTime(mode, delay))  # type: ignore[arg-type]
    result = evaluate_chunk_policy(
        run.policy, run.spec(), run.cfg.task, run.env_cfg, run.obs_groups, episodes, tuple(range(seeds)),
        timing=run.timing,
    )  # fmt: skip
    return {"success": result.success_rate, "episodes": result.episodes, **result.motion}


def on_the_clock(path: Path, mode: str, steps: int, threads: int, extra_ms: float) -> dict[str, float]:
    """Idle time and the longest period of a control loop at the contract's period running ``path`` (async keeps
    the contract's temporal ensembling, on the worker thread: ``ensembled``)."""
    policy = ChunkedOnnxPolicy(path, intra_op_threads=threads, timing=RealTime(mode, 1, threaded=True))  # type: ignore[arg-type]
    c = policy.chunk
    if c.language:
        policy.set_instruction(next(iter(c.language["instructions"])))
    if extra_ms > 0:
        plan = policy.sample

        def slow(*args: object, **kwargs: object) -> np.ndarray:
            time.sleep(extra_ms / 1e3)
            return plan(*args, **kwargs)  # type: ignore[arg-type]

        policy.executor.sample = slow
    period = policy.contract.control_period_s
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((1, policy.obs_dim)).astype(np.float32) * 0.1
    images = {n: rng.integers(0, 256, (1, *c.image_shape(n)), np.uint8) for n in c.cameras}
    longest, start = 0.0, time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        policy.run_obs(obs, images or None)
        if i > 0:  # the first period plans a new episode's chunk at once in every schedule
            longest = max(longest, time.perf_counter() - t0)
        time.sleep(max(0.0, start + (i + 1) * period - time.perf_counter()))
    s = policy.executor
    s.close()
    return {"idle_s": s.idle_s, "idle_fraction": s.idle_s / (steps * period), "longest_ms": 1e3 * longest,
            "delay": float(np.mean(s.delays)) if s.delays else 0.0, "period_ms": 1e3 * period,
            "ensembled": s.spec.ensemble_decay is not None}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="train-bc run folder")
    parser.add_argument("--episodes", type=int, default=50, help="episodes per seed and setting (default: 50)")
    parser.add_argument("--seeds", type=int, default=2, help="evaluation seeds (default: 2)")
    parser.add_argument("--delays", type=int, nargs="+", default=[1, 3], help="inference delays, control periods")
    parser.add_argument(
        "--action-horizons", type=int, nargs="+", default=None,
        help="actions executed per plan in the simulator part (default: the run's action horizon)",
    )  # fmt: skip
    parser.add_argument("--wall-steps", type=int, default=200, help="control periods on the clock (default: 200)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default: 1)")
    parser.add_argument("--extra-latency-ms", type=float, default=0.0, help="sleep added to each plan, ms")
    parser.add_argument("--clock-only", action="store_true", help="skip the simulator part")
    args = parser.parse_args()

    run = BCRun.load(args.run)
    modes = [m for m in MODES if m != "rtc" or run.policy.guide_inputs]
    print(f"{run.describe()}; action horizon {run.cfg.policy.action_horizon} of {run.cfg.policy.pred_horizon}")
    print("\n1. simulator, simulated inference delay (normalised action units)")
    print(
        f"{'plan every':>10} {'delay':>5} {'schedule':>8} {'success':>8} {'join max':>9} {'join p95':>9} "
        f"{'join mean':>10} {'within':>7} {'idle':>6}"
    )
    ensembled = [(None, "async")] if run.cfg.policy.ensemble_decay is not None else []
    horizons = args.action_horizons or [run.cfg.policy.action_horizon]
    for horizon in horizons:
        for delay in [] if args.clock_only else args.delays:
            once = ensembled if horizon == horizons[0] else []  # the run's own execution: one row per delay
            for every, mode in [*((horizon, m) for m in modes), *once]:
                r = simulated(run, mode, delay, args.episodes, args.seeds, every)
                run = BCRun.load(args.run)  # execute_with changed this copy's execution
                label = "1, ens." if every is None else str(every)
                print(
                    f"{label:>10} {delay:>5} {mode:>8} {r['success']:>8.1%} {r['join_step_max']:>9.3f} "
                    f"{r['join_step_p95']:>9.3f} {r['join_step_mean']:>10.3f} "
                    f"{r['within_step_mean']:>7.3f} {r['idle_fraction']:>6.1%}"
                )
                sys.stdout.flush()
    run = BCRun.load(args.run)  # as trained (the evaluations above turned ensembling off in this copy)
    tmp = tempfile.TemporaryDirectory(prefix="robot-rl-rtc-")
    path = run.export(Path(tmp.name))  # this version's graph (a run exported before real-time chunking has no guide)
    extra = f" + {args.extra_latency_ms:g} ms added per plan" if args.extra_latency_ms else ""
    print(f"\n2. on the clock: {args.wall_steps} periods, onnxruntime {args.threads} thread(s){extra}")
    print(f"{'schedule':>8} {'idle':>7} {'idle share':>10} {'longest step':>13} {'delay (periods)':>16}")
    for mode in modes:
        w = on_the_clock(path, mode, args.wall_steps, args.threads, args.extra_latency_ms)
        print(
            f"{mode:>8} {w['idle_s']:>6.2f}s {w['idle_fraction']:>10.1%} {w['longest_ms']:>10.1f} ms "
            f"{w['delay']:>16.2f}   (period {w['period_ms']:.0f} ms{', ensembled' if w['ensembled'] else ''})"
        )
    tmp.cleanup()


if __name__ == "__main__":
    main()
