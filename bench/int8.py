"""int8 against float for one PPO run, side by side in one run: held-out flights, command error and firmware cost.

For the run's kept policy it exports the float ``policy.onnx`` and its int8 copy (``robot-rl export int8``: inputs
per channel with MSE-calibrated ranges folded into per-output-channel int8 weights, calibrated on the run's own
randomised flights from calibration seeds), then:

- flies both through onnxruntime on the run's held-out evaluation (randomisation on and off) and, with ``--sim``, in
  the independent simulator; compares their commands on every input of the float policy's randomised flights;
- exports both to C for ``--target`` (default ``cortex-m4f``): flash and stack from the toolchain, instructions per
  step under QEMU (``-icount``: an instruction count, not cycles; the rate column assumes one cycle per instruction),
  agreement with onnxruntime.

Nothing is written into the run folder (everything goes to a temporary folder, or ``--out``).

Run::

    python bench/int8.py runs/quadrotor-hover/<run> --sim pybullet
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from firmware_export.export import export_firmware
from robot_rl.bench import format_table
from robot_rl.quantization import compare, export_int8
from robot_rl.runs import PPORun, open_run
from robot_rl.transfer.harness import run_episodes
from sim.registry import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="PPO run folder")
    parser.add_argument("--episodes", type=int, default=256, help="held-out episodes per setting (default: 256)")
    parser.add_argument("--calibration-episodes", type=int, default=64)
    parser.add_argument("--sim", choices=("pybullet",), help="also fly both in this simulator (randomisation on)")
    parser.add_argument("--target", default="cortex-m4f")
    parser.add_argument("--out", type=Path, help="keep the files here (default: a temporary folder)")
    args = parser.parse_args()
    run = open_run(args.run)
    if not isinstance(run, PPORun):
        raise SystemExit(f"{args.run} is not a PPO run")
    with tempfile.TemporaryDirectory(prefix="robot-rl-int8-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        float_onnx = run.export(out)
        int8_onnx, record = export_int8(run, float_onnx, out, args.calibration_episodes)
        comparison = compare(run, float_onnx, int8_onnx, args.episodes)
        rows: list[dict[str, Any]] = []
        for kind, path, results in (
            ("float", float_onnx, comparison.float_results),
            ("int8", int8_onnx, comparison.int8_results),
        ):
            row: dict[str, Any] = {"policy": kind}
            for r in results:
                tag = "on" if r.randomized else "off"
                row[f"DR {tag}: success"] = f"{r.episodes['success'].mean():.1%}"
                for k, v in r.figures.items():
                    row[f"DR {tag}: {k}"] = round(float(v), 4)
            if args.sim:
                criterion = get_task(run.task).factory.criterion  # type: ignore[attr-defined]
                t = run_episodes(path, args.sim, args.episodes, run.cfg.seed, True, criterion, progress=False)
                for k, v in t.figures.items():
                    row[f"{args.sim}: {k}"] = round(float(v), 4)
            fw = export_firmware(path, out / f"firmware-{kind}", args.target, vectors=1000)
            row |= {
                "flash B": fw.flash_bytes,
                "stack B": fw.stack_bytes,
                "instructions/step": round(fw.instructions_per_step or 0),
                "Hz at 168 MHz, 1 CPI": round(fw.max_rate_hz_168mhz or 0),
                "max |C - ort|": f"{max(fw.verified.values()):.1e}",
            }
            rows.append(row)
        columns = list(rows[0])
        print(f"{run.task}: {args.run} (calibration: {record.calibration_source})")
        for block in (columns[1:-5], columns[-5:]):
            print(format_table(rows, ["policy", *block]))
        e = comparison.action_error
        print(
            f"int8 - float commands on {e.inputs:,} recorded inputs (normalised, range [-1, 1]): max {e.max:.3f}, "
            f"mean {e.mean:.4f}, 99th percentile {e.p99:.3f}"
        )


if __name__ == "__main__":
    main()
