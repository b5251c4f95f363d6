"""The Crazyflie app's controller core (``robot-rl export crazyflie``), built for the host, flying the hover task's
simulation from the simulated state estimate: the same C as on the drone, through the firmware's force
normalisation and its ``THRUST_MAX`` clip.

Per control period and world: the state (position relative to the hover point, world velocity, attitude
quaternion as ``x, y, z, w``, body rates in deg/s: the firmware's ``state_t`` / ``sensorData_t`` units) goes into
``rr_cf_step`` with an absolute position setpoint at the origin; its four normalised forces times ``thrust_max_n``
are turned back into the task's normalised action through the contract's thrust model. Held-out starts
(``seed + EVAL_SEED_OFFSET``), one episode per world.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from firmware_export.targets import require
from policies.runtime.contract import METADATA_KEY

FIRMWARE_THRUST_MAX_N = 0.12
"""crazyflie-firmware ``platform_defaults_cf2.h``: ``THRUST_MAX`` per motor with the 2.1+ and the legacy propellers,
N (the force a normalised motor force of 1 stands for; 0.18 N with the thrust upgrade kit)."""


@dataclass
class AppFlight:
    """Held-out hover episodes flown by the app's C.

    Attributes:
        episodes: Worlds flown.
        crash_free_rate: Share of episodes without a crash.
        tail_position_error_m: Mean position error over the last 2 s of the episodes without a crash, m.
        clipped_share: Share of motor commands the ``THRUST_MAX`` clip cut.
    """

    episodes: int
    crash_free_rate: float
    tail_position_error_m: float
    clipped_share: float


def host_library(src: Path, out: Path) -> ctypes.CDLL:
    """Build the app's core and policy (``src``: the app's ``src/``) as a host shared library, strict warnings."""
    sources = [str(src / "rr_crazyflie.c"), str(src / "rr_policy.c")]
    cmd = [require("cc"), "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-shared", "-fPIC",
           "-DRR_STATIC_BUFFERS", *sources, "-lm", "-o", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    lib = ctypes.CDLL(str(out))
    f = ctypes.POINTER(ctypes.c_float)
    lib.rr_cf_step.argtypes = [ctypes.c_void_p, f, f, f, f, ctypes.c_int, f, f, ctypes.c_float, f]
    lib.rr_cf_step.restype = ctypes.c_int
    lib.rr_cf_reset.argtypes = [ctypes.c_void_p]
    lib.rr_cf_state_bytes.restype = ctypes.c_ulong
    return lib


def airframe(onnx_path: Path) -> dict[str, float]:
    """The contract's thrust model and rotor-speed mapping (``extra.airframe``)."""
    props = {p.key: p.value for p in onnx.load(str(onnx_path)).metadata_props}
    facts = json.loads(props[METADATA_KEY])["extra"]["airframe"]
    return {k: float(facts[k]) for k in ("max_thrust_per_rotor_n", "thrust_curve_linear", "max_rpm", "hover_rpm")}


def normalized_action(force_n: np.ndarray, a: dict[str, float]) -> np.ndarray:
    """The task's normalised action for per-rotor forces, N (inverse of the contract's thrust model and mapping)."""
    c, share = a["thrust_curve_linear"], np.clip(force_n / a["max_thrust_per_rotor_n"], 0.0, 1.0)
    u = share if c == 1.0 else (-c + np.sqrt(c * c + 4.0 * (1.0 - c) * share)) / (2.0 * (1.0 - c))
    hover = a["hover_rpm"] / a["max_rpm"]
    return ((u - hover) / (1.0 - hover)).astype(np.float32)


def world_facts(env: Any, i: int) -> dict[str, float]:
    """World ``i``'s own thrust model (its randomised maximum thrust and curve) in the form of :func:`airframe`."""
    p = env.physical_params()
    nominal = env.nominal
    return {
        "max_thrust_per_rotor_n": float(p.max_thrust[i]),
        "thrust_curve_linear": float(p.thrust_curve_linear[i]),
        "max_rpm": nominal.max_rpm,
        "hover_rpm": nominal.hover_rotor * nominal.max_rpm,
    }


def fly_app(
    app_src: Path,
    onnx_path: Path,
    env_cfg: object,
    seed: int,
    worlds: int,
    thrust_max_n: float = FIRMWARE_THRUST_MAX_N,
    delivered: str = "contract",
) -> AppFlight:
    """Fly ``worlds`` held-out hover episodes with the app's C (see the module docstring).

    ``delivered`` says how a motor force becomes the simulated rotor's: ``contract`` maps it to a rotor speed with the
    contract's nominal thrust model, so each world's randomised motors (thrust-to-weight, curve) still scale what it
    gets (no thrust compensation: pessimistic); ``world`` gives each world exactly the force asked for, up to what its
    rotors can make (the firmware's battery-compensated thrust model taken as exact: optimistic).
    """
    if delivered not in ("contract", "world"):
        raise ValueError(f"delivered must be 'contract' or 'world', got '{delivered}'")
    from robot_rl.evaluate import EVAL_SEED_OFFSET, make_eval_env

    lib = host_library(app_src, app_src.parent / "librrcf-host.so")
    facts = airframe(onnx_path)
    env = make_eval_env("quadrotor-hover", env_cfg, worlds, torch.device("cpu"), randomize=True)
    states = [ctypes.create_string_buffer(lib.rr_cf_state_bytes()) for _ in range(worlds)]
    for s in states:
        lib.rr_cf_reset(s)
    env.reset(seed=seed + EVAL_SEED_OFFSET)
    fp = ctypes.POINTER(ctypes.c_float)
    zero, forces = np.zeros(3, dtype=np.float32), np.zeros(4, dtype=np.float32)
    crashed = np.zeros(worlds, dtype=bool)
    tail: list[np.ndarray] = []
    clipped = commands = 0
    tail_from = env.max_episode_length - round(2.0 / env.dt)
    exact = delivered == "world"
    try:
        for k in range(env.max_episode_length - 1):  # one short of the limit: nothing resets but crashes
            st = env.state  # type: ignore[attr-defined]
            action = np.zeros((worlds, 4), dtype=np.float32)
            for i in range(worlds):
                w, x, y, z = st.quat[i].tolist()
                arrays = (
                    st.pos[i].numpy().astype(np.float32),
                    st.vel[i].numpy().astype(np.float32),
                    np.array([x, y, z, w], dtype=np.float32),
                    np.degrees(st.omega[i].numpy()).astype(np.float32),
                )
                rc = lib.rr_cf_step(states[i], *(a.ctypes.data_as(fp) for a in arrays), 1, zero.ctypes.data_as(fp),
                                    zero.ctypes.data_as(fp), thrust_max_n, forces.ctypes.data_as(fp))  # fmt: skip
                if rc != 0:
                    raise RuntimeError(f"rr_cf_step returned {rc} in world {i} at step {k}")
                clipped += int((forces >= 1.0).sum())
                commands += 4
                action[i] = normalized_action(forces * thrust_max_n, world_facts(env, i) if exact else facts)
            _, _, terminated, _, _ = env.step(torch.from_numpy(action))
            crashed |= terminated.numpy()
            if k + 1 >= tail_from:
                tail.append(env.state.pos.norm(dim=-1).numpy())  # type: ignore[attr-defined]
    finally:
        env.close()
    error = np.mean(tail, axis=0)[~crashed]
    return AppFlight(worlds, float(1.0 - crashed.mean()), float(error.mean()), clipped / max(commands, 1))
