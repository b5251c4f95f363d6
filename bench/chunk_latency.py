"""Inference latency per action chunk on one CPU core: torch against onnxruntime, DDIM 100 / 10 / 3 steps, and
(with ``--run``) the success each step count keeps.

What it measures: median and 99th-percentile wall time of one chunk (batch 1, ``obs [1, 2, 32]``, ``noise
[1, 16, 7]``: the panda-reach student's sizes) for

- ``torch``: the student's own sampler (``DiffusionPolicy.predict_action_chunk``: the ``diffusers`` DDIM loop),
  ``torch.inference_mode``, one intra-op thread;
- ``onnxruntime``: the exported graph (``robot-rl export onnx``), one intra-op thread, CPU provider;

for the U-Net (``configs/bc-diffusion.yaml``) and the transformer denoiser, and for the MLP student (one forward
pass). With ``--camera SIZE`` the U-Net and the MLP are also timed seeing one ``SIZE x SIZE`` camera
(``policy.cameras``: its image encoder runs once per chunk, on the ``To`` frames). With ``--run RUN`` (a trained
``train-bc`` diffusion run) it also evaluates that run at each step count (``--episodes`` x 3 seeds, pooled success
and 95 % interval).

Run::

    python bench/chunk_latency.py
    python bench/chunk_latency.py --steps 10 --seconds 1 --camera 64
    python bench/chunk_latency.py --run runs/panda-reach/<stamp>-bc-diffusion-0 --episodes 100
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from policies.nets.bc_mlp import MLPChunkPolicy
from policies.nets.chunk import ChunkPolicy, Horizons
from policies.nets.diffusion import DiffusionPolicy, SamplerSettings
from policies.nets.export import chunk_to_onnx_model
from policies.runtime.contract import ActionSpec, ChunkSpec, Contract, ObservationTerm
from robot_rl.bench import format_table

OBS, ACT = 32, 7
H = Horizons(2, 16, 8)


def _time(fn: Callable[[], object], seconds: float) -> tuple[float, float]:
    for _ in range(3):
        fn()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 20:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, float(np.percentile(times, 99)) * 1e3


def _contract(policy: ChunkPolicy) -> Contract:
    noise = "noise" if isinstance(policy, DiffusionPolicy) else ""
    names = [f"j{i}" for i in range(ACT)]
    action = ActionSpec(ACT, names, "position", [0.25] * ACT, [0.0] * ACT, [-3.0] * ACT, [3.0] * ACT, "rad")
    return Contract(
        "bench",
        0.04,
        [ObservationTerm("state", OBS, "state")],
        action,
        output_name="action_chunk",
        chunk=ChunkSpec(
            H.obs,
            H.pred,
            H.action,
            noise,
            policy.sampler_settings(),
            cameras={c: {"input": f"image_{c}", "height": h, "width": w} for c, (h, w) in policy.cameras.items()},
        ),
    )


def mlp_ranges() -> tuple[np.ndarray, ...]:
    """Observation and action ranges of the timed students (their values do not change the cost)."""
    return -np.ones(OBS), np.ones(OBS), -np.ones(ACT), np.ones(ACT)


def _students(steps: int, camera: int) -> dict[str, ChunkPolicy]:
    lo, hi, alo, ahi = -np.ones(OBS), np.ones(OBS), -np.ones(ACT), np.ones(ACT)
    s = SamplerSettings(100, steps)
    seeing = {"cameras": {"wrist": (camera, camera)}} if camera else {}
    extra = {f"unet (32/64/128) + {camera}x{camera} camera": DiffusionPolicy(
        OBS, ACT, H, lo, hi, alo, ahi, down_dims=(32, 64, 128), sampler=s, **seeing
    )} if camera else {}  # fmt: skip
    return {
        **extra,
        "unet (32/64/128)": DiffusionPolicy(OBS, ACT, H, lo, hi, alo, ahi, down_dims=(32, 64, 128), sampler=s),
        "unet (64/128/256)": DiffusionPolicy(OBS, ACT, H, lo, hi, alo, ahi, down_dims=(64, 128, 256), sampler=s),
        "transformer (64x3)": DiffusionPolicy(
            OBS, ACT, H, lo, hi, alo, ahi, denoiser="transformer", d_model=64, layers=3, sampler=s
        ),
    }


def main(argv: list[str] | None = None) -> None:
    """Time every student and step count; optionally evaluate a trained run per step count."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", nargs="+", type=int, default=[100, 10, 3])
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per setting")
    parser.add_argument("--run", type=Path, help="a trained train-bc diffusion run: success per step count")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--camera", type=int, default=0, help="also time students seeing one SIZE x SIZE camera")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((1, H.obs, OBS)).astype(np.float32)
    noise = rng.standard_normal((1, H.pred, ACT)).astype(np.float32)
    rows = []
    mlp = MLPChunkPolicy(OBS, ACT, H, *mlp_ranges())
    cases: list[tuple[str, int, ChunkPolicy]] = [("mlp (256x3)", 0, mlp)]
    if args.camera:
        size = (args.camera, args.camera)
        seeing = MLPChunkPolicy(OBS, ACT, H, *mlp_ranges(), cameras={"wrist": size})
        cases.append((f"mlp (256x3) + {args.camera}x{args.camera} camera", 0, seeing))
    for steps in args.steps:
        cases += [(name, steps, p) for name, p in _students(steps, args.camera).items()]
    with tempfile.TemporaryDirectory() as tmp:
        for name, steps, policy in cases:
            policy.eval()
            path = Path(tmp) / "p.onnx"
            path.write_bytes(chunk_to_onnx_model(policy, _contract(policy)).SerializeToString())
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            images = {c: rng.integers(0, 256, (1, H.obs, h, w, 3), np.uint8) for c, (h, w) in policy.cameras.items()}
            feed = {"obs": obs, **({"noise": noise} if steps else {}), **{f"image_{c}": x for c, x in images.items()}}
            tobs, tnoise = torch.from_numpy(obs), torch.from_numpy(noise)
            timages = {c: torch.from_numpy(x) for c, x in images.items()}

            def run_torch(
                p: ChunkPolicy = policy,
                o: torch.Tensor = tobs,
                n: torch.Tensor = tnoise,
                i: dict[str, torch.Tensor] = timages,
            ) -> object:
                with torch.inference_mode():
                    return p.predict_action_chunk(o, n, images=i)

            t_med, t_p99 = _time(run_torch, args.seconds)
            o_med, o_p99 = _time(lambda s=session, f=feed: s.run(None, f), args.seconds)
            rows.append(
                {
                    "student": name,
                    "ddim_steps": steps or "-",
                    "torch_ms": round(t_med, 2),
                    "torch_p99": round(t_p99, 2),
                    "onnxruntime_ms": round(o_med, 2),
                    "ort_p99": round(o_p99, 2),
                    "ratio": round(t_med / o_med, 1),
                }
            )
            print(format_table(rows[-1:]), flush=True)
    print("\nper chunk, batch 1, one CPU thread (median and 99th percentile, ms)")
    print(format_table(rows))
    if args.run is not None:
        from robot_rl.runs.bc import EVAL_SEEDS, BCRun

        torch.set_num_threads(2)
        run = BCRun.load(args.run)
        assert isinstance(run.policy, DiffusionPolicy)
        success = []
        for steps in args.steps:
            run.policy.sampler = dataclasses.replace(run.policy.sampler, inference_steps=steps)
            run.cfg.policy = dataclasses.replace(run.cfg.policy, inference_steps=steps)
            res = run.evaluate(args.episodes, EVAL_SEEDS)
            lo, hi = res.ci95
            success.append({"ddim_steps": steps, "success": res.success_rate, "ci95": f"{lo:.0%}-{hi:.0%}"})
            print(format_table(success[-1:]), flush=True)
        print(f"\n{args.run}: success per DDIM step count")
        print(format_table(success))


if __name__ == "__main__":
    sys.exit(main())
