"""The Crazyflie app against the policy it was made from, in one run: held-out hover episodes flown by the app's C
core built for the host (``robot-rl export crazyflie``; the state estimate in, normalised motor forces out) with
forces of the training model's maximum thrust (0.149 N per rotor) and under the firmware's THRUST_MAX clip (0.12 N,
the 2.1+ propellers), beside the exported ONNX policy through onnxruntime on the same episodes. Under the clip, two
bounds: each simulated world's randomised motors still scale the commanded thrust (no compensation: pessimistic), or
each world gets the force asked for up to what its rotors can make (the firmware's battery-compensated thrust model
taken as exact). Also the app's own figures: stack per control step, the policy's instructions per step under QEMU
and, with ``--firmware``, the cf2 build's size next to the firmware's stock out-of-tree controller example.

Run::

    python bench/crazyflie_app.py runs/quadrotor-hover/<run> [--firmware /path/to/crazyflie-firmware]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from firmware_export.crazyflie import export_crazyflie
from robot_rl.bench import format_table
from robot_rl.evaluate import EVAL_SEED_OFFSET, evaluate_env, make_eval_env, onnx_policy_fn
from robot_rl.runs import PPORun, open_run
from robot_rl.transfer.crazyflie_app import FIRMWARE_THRUST_MAX_N, airframe, fly_app


def stock_size(firmware: Path) -> list[str]:
    """The firmware's size summary of its own out-of-tree controller example (the PID controller), built here."""
    example = firmware / "examples" / "app_out_of_tree_controller"
    env = {**os.environ, "PWD": str(example)}  # its Makefile finds itself through $(PWD)
    for stale in ("firmware.elf", "cf2.elf", "cf2.bin", "cf2.hex"):  # relink: the summary is printed by the link
        (example / "build" / stale).unlink(missing_ok=True)
    done = subprocess.run(["make", "-j2"], cwd=example, env=env, capture_output=True, text=True, check=True)
    return [ln.strip() for ln in done.stdout.splitlines() if ln.strip().startswith(("Flash", "RAM"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--firmware", type=Path, help="a crazyflie-firmware checkout with its submodules")
    args = parser.parse_args()
    run = open_run(args.run)
    if not isinstance(run, PPORun):
        raise SystemExit(f"{args.run} is not a PPO run")
    cfg = run.cfg
    with tempfile.TemporaryDirectory(prefix="robot-rl-cf-bench-") as tmp:
        onnx_path = run.export(Path(tmp) / "onnx")
        report = export_crazyflie(onnx_path, Path(tmp) / "app", args.firmware)
        rows: list[dict[str, Any]] = []
        env = make_eval_env(cfg.task, cfg.env, args.episodes, torch.device("cpu"), True)
        ref = evaluate_env(env, onnx_policy_fn(onnx_path, cfg.policy.actor_obs), seed=cfg.seed + EVAL_SEED_OFFSET)
        env.close()
        rows.append(
            {
                "policy": "policy.onnx (onnxruntime)",
                "crash-free": f"{ref.figures['crash_free_rate']:.1%}",
                "tail error cm": round(100 * ref.figures["tail_position_error_m"], 2),
                "commands clipped": "-",
            }
        )
        cap = FIRMWARE_THRUST_MAX_N
        for label, thrust_max, delivered in (
            ("app C, no clip (training model's 0.149 N)", airframe(onnx_path)["max_thrust_per_rotor_n"], "contract"),
            (f"app C, {cap:g} N clip, world motors scale it", cap, "contract"),
            (f"app C, {cap:g} N clip, force delivered exactly", cap, "world"),
        ):
            flight = fly_app(
                Path(tmp) / "app" / "src", onnx_path, cfg.env, cfg.seed, args.episodes, thrust_max, delivered
            )
            rows.append(
                {
                    "policy": label,
                    "crash-free": f"{flight.crash_free_rate:.1%}",
                    "tail error cm": round(100 * flight.tail_position_error_m, 2),
                    "commands clipped": f"{flight.clipped_share:.2%}",
                }
            )
    print(f"{cfg.task}: {args.run}, {args.episodes} held-out episodes, randomisation on")
    print(format_table(rows))
    print("\n".join(report.lines()))
    if args.firmware is not None:
        print("stock out-of-tree controller example (PID), same firmware:")
        print("\n".join(f"    {line}" for line in stock_size(args.firmware)))


if __name__ == "__main__":
    main()
