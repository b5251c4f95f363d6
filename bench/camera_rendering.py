"""Camera images of many worlds: ``sim.rendering.CameraRenderer`` (each world drawn into its cell of one offscreen
grid, the grid read back once) against drawing and reading one image at a time with MuJoCo's ``mujoco.Renderer``
(what ``CameraRenderer`` did before 2026-11-27), on the same world states.

Both sides render the nominal model (no visual randomisation) of ``--task`` after a few random steps; the two are
interleaved ``--repeats`` times and the median per image is printed with the ratio, and the images are compared
(largest difference in 0..255 levels, share of values that differ: drawing at another place of the framebuffer may
round a few anti-aliased edge pixels the other way).

Run (``MUJOCO_GL=egl`` where there is no display)::

    MUJOCO_GL=egl python bench/camera_rendering.py                    # panda-lift wrist 32 / 64 px, 100 worlds
    MUJOCO_GL=egl python bench/camera_rendering.py --task panda-multitask --camera front --worlds 150
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

import numpy as np
import torch

from robot_rl.bench import format_table


def one_at_a_time(env: Any, camera: str, size: tuple[int, int], renderer: Any) -> np.ndarray:
    """Every world's image drawn and read on its own (``renderer``: a ``mujoco.Renderer`` of a copy of the task's
    model, which this draws each world's cube size and colours into), ``uint8 [N, H, W, 3]``."""
    import mujoco

    model = renderer.model
    data = mujoco.MjData(model)
    options = mujoco.MjvOption()
    options.sitegroup[:] = 0
    qpos = env.physics.qpos.detach().cpu().double().numpy()
    drawn = getattr(env, "drawn_geom_sizes", dict)()  # each world's randomised cube size, as CameraRenderer draws
    sizes = {g: v.detach().cpu().double().numpy() for g, v in drawn.items()}
    drawn = getattr(env, "drawn_geom_rgba", dict)()
    rgba = {g: v.detach().cpu().double().numpy() for g, v in drawn.items()}
    out = np.empty((len(qpos), *size, 3), np.uint8)
    for world, q in enumerate(qpos):
        for g, v in sizes.items():
            model.geom_size[g] = v[world]
        for g, v in rgba.items():
            model.geom_rgba[g] = v[world]
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        mujoco.mj_camlight(model, data)
        renderer.update_scene(data, camera=camera, scene_option=options)
        out[world] = renderer.render()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="panda-lift")
    parser.add_argument("--camera", default="wrist")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64], help="square image sides, pixels")
    parser.add_argument("--worlds", type=int, default=100)
    parser.add_argument("--renders", type=int, default=10, help="renders of all worlds per timed block")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import mujoco

    import sim
    from sim.rendering import CameraRenderer

    env = sim.make(args.task, args.worlds)
    env.reset()
    for _ in range(10):
        env.step(torch.rand(args.worlds, env.num_actions) * 2 - 1)
    rows = []
    for side in args.sizes:
        size = (side, side)
        tiled = CameraRenderer(env, {args.camera: size})
        single = mujoco.Renderer(copy.deepcopy(env._model), side, side)
        times: dict[str, list[float]] = {"one at a time": [], "tiled": []}
        for _ in range(args.repeats):
            t = time.perf_counter()
            for _ in range(args.renders):
                a = one_at_a_time(env, args.camera, size, single)
            times["one at a time"].append(time.perf_counter() - t)
            t = time.perf_counter()
            for _ in range(args.renders):
                b = tiled.render()[args.camera]
            times["tiled"].append(time.perf_counter() - t)
        images = args.worlds * args.renders
        per = {k: statistics.median(v) / images * 1e3 for k, v in times.items()}
        diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
        rows.append({
            "image": f"{side} x {side}",
            "worlds": args.worlds,
            "one at a time, ms/image": round(per["one at a time"], 3),
            "tiled, ms/image": round(per["tiled"], 3),
            "speed-up": round(per["one at a time"] / per["tiled"], 2),
            "max diff": int(diff.max()),
            "values differing": f"{(diff > 0).mean():.4%}",
        })  # fmt: skip
        tiled.close()
        single.close()
    print(f"{args.task}, camera '{args.camera}', median of {args.repeats} interleaved blocks of {args.renders} renders")
    print(format_table(rows))


if __name__ == "__main__":
    main()
