"""Firmware figures of the quadrotor 2x64 actor: robot-rl's generated C against emlearn, side by side in one run.

What it measures, for the hover actor (34 inputs -> 64 -> 64 -> 4, tanh; the shipped architecture, its normaliser
fitted on simulator observations of a random policy, or the trained policy given with ``--onnx``):

- robot-rl (``firmware_export``, target ``cortex-m4f``): flash and RAM from ``arm-none-eabi-size`` and
  ``-fstack-usage``, MACs per step, executed instructions per step under QEMU (``-icount shift=0``, SysTick,
  calibrated on a loop of known length), agreement with onnxruntime.
- Host latency of one step: the generated C (``-O2``, timed in C over 100k calls) against onnxruntime's
  single-sample ``InferenceSession.run`` (timed from Python: includes the binding's overhead, which is what a robot
  process pays).
- emlearn (PyPI ``emlearn``, its ``eml_net`` float MLP from an sklearn ``MLPRegressor`` holding the same weights):
  the same flash / instruction figures for the MLP alone (emlearn has no normaliser or action scaling: robot-rl's
  figures include both), and its agreement with torch on normalised inputs (emlearn prints weights with six decimals).

Run (needs ``pip install emlearn scikit-learn`` for the baseline; skipped with a note otherwise)::

    python bench/firmware.py
    python bench/firmware.py --onnx runs/quadrotor-hover/<run>/policy.onnx
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import sim
from firmware_export.export import export_firmware, read_model
from firmware_export.targets import TARGETS, TEMPLATES, execute, link
from policies.nets import ActorCritic
from policies.nets.export import export_onnx

M4 = TARGETS["cortex-m4f"]


def hover_actor(out: Path) -> tuple[Path, ActorCritic]:
    """A hover-shaped actor with its normaliser fitted on 50 steps of 256 randomly flown quadrotors."""
    torch.manual_seed(0)
    env = sim.make("quadrotor-hover", 256, seed=0)
    model = ActorCritic(env.obs_sizes["policy"], env.obs_sizes["critic"], 4, (64, 64), (64, 64), "tanh")
    obs = env.reset(seed=0)
    for _ in range(50):
        model.update_normalizers(obs["policy"], obs["critic"])
        obs, *_ = env.step(0.3 * torch.randn(256, 4))
    return export_onnx(model, env.contract(["policy"]), out), model


def host_latency_c(fw: Path, work: Path) -> float:
    """Nanoseconds per ``rr_policy_step`` on the host, timed in C."""
    (work / "lat.c").write_text(
        """#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <time.h>
#include "rr_policy.h"
int main(void) {
    static float obs[64][RR_OBS_DIM];
    float cmd[RR_ACTION_DIM];
    int i, k;
    struct timespec a, b;
    volatile float sink = 0;
    for (k = 0; k < 64; ++k)
        for (i = 0; i < RR_OBS_DIM; ++i) obs[k][i] = (float)((k * 31 + i * 17) % 23) / 11.0f - 1.0f;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (k = 0; k < 100000; ++k) { rr_policy_step(obs[k & 63], cmd); sink += cmd[0]; }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.1f\\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 100000.0);
    return sink == 12345.0f;
}
"""
    )
    subprocess.run(["cc", "-std=c99", "-O2", f"-I{fw}", "lat.c", str(fw / "rr_policy.c"), "-lm", "-o", "lat"],
                   cwd=work, check=True)  # fmt: skip
    return float(subprocess.run([str(work / "lat")], capture_output=True, text=True, check=True).stdout)


def host_latency_ort(onnx_path: Path, obs_dim: int, repeats: int = 20000) -> float:
    """Median nanoseconds of one single-sample ``InferenceSession.run`` (one thread)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])
    x = np.zeros((1, obs_dim), dtype=np.float32)
    times = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        session.run(None, {"obs": x})
        times.append(time.perf_counter_ns() - t)
    return float(statistics.median(times))


def emlearn_baseline(model: ActorCritic, work: Path) -> dict[str, float] | str:
    """Flash, instructions per step and accuracy of emlearn's ``eml_net`` for the same MLP (or why not)."""
    try:
        import emlearn
        from sklearn.neural_network import MLPRegressor
    except ImportError:
        return "emlearn / scikit-learn not installed (pip install emlearn scikit-learn)"
    import warnings

    layers = [m for m in model.actor if isinstance(m, torch.nn.Linear)]
    reg = MLPRegressor(hidden_layer_sizes=(64, 64), activation="tanh", max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.fit(np.zeros((4, layers[0].in_features)), np.zeros((4, 4)))
    reg.coefs_ = [lin.weight.detach().numpy().T.astype(np.float64) for lin in layers]
    reg.intercepts_ = [lin.bias.detach().numpy().astype(np.float64) for lin in layers]
    emlearn.convert(reg, method="inline").save(file=str(work / "net.h"), name="net")
    inc = Path(emlearn.__file__).parent
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, layers[0].in_features)).astype(np.float32)
    with torch.no_grad():
        ref = model.actor(torch.from_numpy(x)).numpy()
    vecs = ",\n".join("{" + ", ".join(f"{v:.9g}f" for v in row) + "}" for row in x)
    (work / "eml_main.c").write_text(
        f"""#include <stdio.h>
#include "net.h"
static const float X[200][{x.shape[1]}] = {{{vecs}}};
#ifdef RR_CORTEX_M
#define SYST_CSR (*(volatile unsigned int *)0xE000E010u)
#define SYST_RVR (*(volatile unsigned int *)0xE000E014u)
#define SYST_CVR (*(volatile unsigned int *)0xE000E018u)
static void spin(unsigned int n) {{ __asm volatile("1: nop\\n subs %0, %0, #1\\n bne 1b" : "+r"(n)); }}
#endif
int main(void) {{
    float out[4]; int v, i;
    for (v = 0; v < 200; ++v) {{
        net_regress(X[v], {x.shape[1]}, out, 4);
        printf("V");
        for (i = 0; i < 4; ++i) printf(" %.9g", (double)out[i]);
        printf("\\n");
    }}
#ifdef RR_CORTEX_M
    {{
        unsigned int t0, t1, t2, t3;
        SYST_RVR = 0x00FFFFFFu; SYST_CVR = 0u; SYST_CSR = 5u; spin(1000u);
        t0 = SYST_CVR; spin(30000u); t1 = SYST_CVR;
        t2 = SYST_CVR; for (v = 0; v < 200; ++v) net_regress(X[v], {x.shape[1]}, out, 4); t3 = SYST_CVR;
        printf("COST %u %u\\n", (t0 - t1) & 0xFFFFFFu, (t2 - t3) & 0xFFFFFFu);
    }}
#endif
    printf("DONE\\n");
    return 0;
}}
"""
    )
    (work / "eml_lib.c").write_text(
        '#include "net.h"\nint eml_step(const float *x, float *y);\n'
        f"int eml_step(const float *x, float *y) {{ return net_regress(x, {x.shape[1]}, y, 4); }}\n"
    )
    for tmpl in ("startup_cortex_m.c", "cortex_m.ld"):
        (work / tmpl).write_bytes((TEMPLATES / tmpl).read_bytes())
    flags = (f"-I{inc}",)
    cc = ["arm-none-eabi-gcc", "-std=c99", *M4.cflags, *flags, "-c", "eml_lib.c", "-o", "eml_lib.o"]
    subprocess.run(cc, cwd=work, check=True)
    size = subprocess.run(["arm-none-eabi-size", "eml_lib.o"], cwd=work, capture_output=True, text=True, check=True)
    text, data, bss = (int(v) for v in size.stdout.splitlines()[1].split()[:3])
    main_o = work / "eml_main.o"
    cc = ["arm-none-eabi-gcc", "-std=c99", *M4.cflags, *flags, "-c", "eml_main.c", "-o", main_o.name]
    subprocess.run(cc, cwd=work, check=True)
    printed = execute(M4, link(M4, work, [main_o], "eml.elf"), timeout=300)
    rows = [line.split()[1:] for line in printed.splitlines() if line.startswith("V ")]
    got = np.array(rows, dtype=np.float32)
    cost = next(line.split()[1:] for line in printed.splitlines() if line.startswith("COST"))
    calib, steps = int(cost[0]), int(cost[1])
    return {
        "flash_bytes": text + data,
        "static_ram_bytes": data + bss,
        "instructions_per_step": steps / 200 * 90000 / calib,
        "max_abs_diff_to_torch": float(np.abs(got - ref).max()),
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", type=Path, help="exported policy (default: a hover-shaped actor, see the docstring)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="robot-rl-bench-fw-") as tmp:
        work = Path(tmp)
        if args.onnx is None:
            onnx_path, model = hover_actor(work / "policy")
        else:
            onnx_path, model = args.onnx, None
        report = export_firmware(onnx_path, work / "fw", "cortex-m4f", vectors=1000)
        print("\n".join(report.lines()))
        contract = read_model(onnx_path)[1]
        c_ns = host_latency_c(work / "fw", work)
        ort_ns = host_latency_ort(onnx_path, contract.obs_dim)
        print(f"\nhost, one step: generated C {c_ns / 1000:.2f} us, onnxruntime {ort_ns / 1000:.2f} us "
              f"(ratio {ort_ns / c_ns:.1f}x)")  # fmt: skip
        if model is not None:
            (work / "eml").mkdir()
            eml = emlearn_baseline(model, work / "eml")
            print("\nemlearn eml_net, same MLP (no normaliser, no action scaling):")
            if isinstance(eml, str):
                print(f"  skipped: {eml}")
            else:
                print(f"  flash {eml['flash_bytes']:,} B, static RAM {eml['static_ram_bytes']:,} B")
                print(f"  {eml['instructions_per_step']:,.0f} instructions per step under QEMU")
                print(f"  max |emlearn - torch| on the MLP output: {eml['max_abs_diff_to_torch']:.2e}")
                assert report.instructions_per_step is not None and report.flash_bytes is not None
                print(
                    f"\nside by side (robot-rl / emlearn): flash {report.flash_bytes / eml['flash_bytes']:.2f}x, "
                    f"instructions {report.instructions_per_step / eml['instructions_per_step']:.2f}x"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
