"""What one behaviour-cloning gradient step costs, per student kind: as ``train_bc`` runs it now against how it ran
it before 2026-12-01, side by side in one run.

A step is what :func:`robot_rl.imitation.train_bc.train_bc` does per batch: the loss (image encoders, heads), backward,
gradient clipping, the AdamW step and the EMA update. The two sides differ only in three places:

- ``before``: torch's per-tensor AdamW (``foreach=False``: a dozen small ops per parameter tensor), the EMA folded in
  one ``lerp_`` per tensor, and the wrist images shifted by indexing a padded copy (:func:`legacy_shift`);
- ``now``: AdamW with ``fused=`` :func:`robot_rl.algorithms.optim.fused` (one kernel for all tensors), the EMA in one
  ``torch._foreach_lerp_``, and :func:`policies.nets.vision.random_shift` (one gather with clamped indices).

Students are built from the shipped configs (``configs/bc-<kind>.yaml``) with random weights and batches (the cost
does not depend on the values): the MLP student with the 64 x 64 wrist camera of the camera benchmark, the diffusion
U-Net, the VLA (state and instruction; and with the wrist camera). Timed on one torch thread (as the suite trains) and
interleaved (before, now, before, now, ...) so that the machine's drift hits both sides alike; the fastest of
``--repeats`` blocks of ``--steps`` steps per side (a shared host's noise only ever adds time: medians of five blocks
moved by 10-15 % between runs, the fastest by a few %).

Run::

    python bench/bc_step.py                 # ~4 min on one core
    python bench/bc_step.py --steps 10 --repeats 3 --kinds vla 'suite: vla'
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import policies.nets.vision as vision
from policies.nets.language import DIM as LANGUAGE_DIM
from policies.nets.vision import random_shift
from robot_rl.algorithms.optim import fused
from robot_rl.bench import format_table
from robot_rl.imitation.config import load_bc_config
from robot_rl.imitation.students import build_student
from robot_rl.imitation.train_bc import EMA
from tests.imitation.test_bc_learning import CAMERA_STUDENT, CI_STUDENT
from tests.imitation.test_vla_learning import CI_VLA

OBS_DIM, ACTION_DIM = 32, 8
"""Widths of a Panda lift student's observation and action (joint targets and the finger)."""

KINDS: dict[str, tuple[str, list[str], int]] = {
    "mlp + wrist 64x64": ("mlp", ["policy.cameras=[wrist]"], 64),
    "diffusion": ("diffusion", [], 0),
    "vla": ("vla", [], 0),
    "vla + wrist 64x64": ("vla", ["policy.cameras=[wrist]"], 64),
    "suite: mlp + wrist 32x32": ("mlp", CAMERA_STUDENT, 32),
    "suite: diffusion": ("diffusion", CI_STUDENT, 0),
    "suite: vla": ("vla", CI_VLA, 0),
}
"""Row name -> (config, ``--set`` overrides, wrist image size; 0: no camera). The shipped configs, then the smaller
students ``make test`` trains (``tests/imitation``)."""


def legacy_shift(x: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """:func:`policies.nets.vision.random_shift` as it was before 2026-12-01: a replicate-padded copy, indexed."""
    if pad <= 0:
        return x
    b, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    dy = torch.randint(0, 2 * pad + 1, (b, 1), device=x.device, generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (b, 1), device=x.device, generator=generator)
    rows = (dy + torch.arange(h, device=x.device))[:, :, None]
    cols = (dx + torch.arange(w, device=x.device))[:, None, :]
    batch = torch.arange(b, device=x.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)


def make_side(row: str, now: bool) -> dict[str, Callable[[], None]]:
    """The student of ``row`` on a fixed random batch, ``now`` or ``before``: its whole training ``step`` (the image
    shift swapped in :mod:`policies.nets.vision` by the caller) and the parts that differ, each alone (``optimizer``,
    ``ema``, ``shift`` where the student sees images)."""
    config, overrides, size = KINDS[row]
    cfg = load_bc_config(config, overrides=overrides, dataset="unused")  # no dataset is read
    p, t = cfg.policy, cfg.train
    lo, hi = -np.ones(OBS_DIM, np.float32), np.ones(OBS_DIM, np.float32)
    stats = {"observation.state": {"min": lo, "max": hi}, "action": {"min": lo[:ACTION_DIM], "max": hi[:ACTION_DIM]}}
    policy = build_student(p, OBS_DIM, ACTION_DIM, stats, {"wrist": (size, size)} if size else {})
    b, device = t.batch_size, torch.device("cpu")
    obs = torch.randn(b, p.obs_horizon, OBS_DIM)
    action = torch.randn(b, p.pred_horizon, ACTION_DIM)
    images = {"wrist": torch.randint(0, 256, (b, p.obs_horizon, size, size, 3), dtype=torch.uint8)} if size else {}
    instruction = F.normalize(torch.randn(b, LANGUAGE_DIM), dim=-1) if p.language else None
    kernels = {"fused": fused(device)} if now else {"foreach": False}
    opt = torch.optim.AdamW(policy.parameters(), lr=t.learning_rate, weight_decay=t.weight_decay, **kernels)
    ema = EMA(policy, t.ema_power, t.ema_max_decay)
    averaged = list(ema.model.parameters())
    count = [0]

    def fold() -> None:
        count[0] += 1
        if now:
            ema.update(policy, count[0])
            return
        decay = min(ema.max_decay, 1.0 - (1.0 + count[0]) ** -ema.power)
        with torch.no_grad():
            for avg, new in zip(averaged, policy.parameters(), strict=True):
                avg.lerp_(new.detach(), 1.0 - decay)
            for buf, new_buf in zip(ema.model.buffers(), policy.buffers(), strict=True):
                buf.copy_(new_buf)

    def step() -> None:
        loss, _ = policy.compute_loss(obs, action, images, instruction)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        fold()

    parts = {"step": step, "optimizer": opt.step, "ema": fold}
    if size:
        frames = images["wrist"].flatten(0, 1).permute(0, 3, 1, 2).float()  # as the encoder shifts them
        shift = random_shift if now else legacy_shift

        def shifted() -> None:
            shift(frames, p.image_shift)

        parts["shift"] = shifted
    vision.random_shift = random_shift if now else legacy_shift
    step()  # gradients for the optimiser alone; warm-up
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), help=f"rows to time (default: all of {list(KINDS)})")
    ap.add_argument("--steps", type=int, default=5, help="steps per timed block")
    ap.add_argument("--repeats", type=int, default=10, help="blocks per side (the fastest is reported)")
    args = ap.parse_args()
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        ap.error(f"--kinds {unknown}: expected some of {list(KINDS)}")
    torch.set_num_threads(1)
    rows = []
    for row in args.kinds:
        torch.manual_seed(0)
        sides = {"before": make_side(row, False), "now": make_side(row, True)}
        for part in sides["now"]:
            best = {"before": float("inf"), "now": float("inf")}
            calls = args.steps if part == "step" else 20 * args.steps  # the parts are short: more calls per block
            for _ in range(args.repeats):
                for side, fns in sides.items():
                    vision.random_shift = random_shift if side == "now" else legacy_shift
                    start = time.perf_counter()
                    for _ in range(calls):
                        fns[part]()
                    best[side] = min(best[side], (time.perf_counter() - start) / calls * 1e3)
            before, now = best["before"], best["now"]
            rows.append({"student": row, "part": part, "before ms": round(before, 2), "now ms": round(now, 2),
                         "now / before": round(now / before, 2)})  # fmt: skip
            print(format_table(rows[-1:]), flush=True)
        vision.random_shift = random_shift
    print()
    print(format_table(rows))


if __name__ == "__main__":
    main()
