"""ONNX policy + contract -> a folder of C99 for a microcontroller, built, sized and verified.

:func:`export_firmware` writes into ``out``::

    rr_policy.h, rr_policy.c      the generated policy (weights, rr_policy_step, observation helpers)
    rr_safety.h, rr_safety.c      action limits and the energy-tank passivity filter
    rr_example_task.c             a control task at the contract's rate calling them
    rr_policy.mk                  Makefile fragment: sources and flags for the target
    firmware_report.yaml          what the CLI prints: size, cost, verification

Everything is generated, compiled and verified in a scratch folder first; ``out`` is replaced only when all of it
succeeded, so a failure leaves no partial output (and an earlier export in ``out`` intact). ``out`` must be new, empty
or an earlier firmware export (its ``.robot-rl-export`` marker): a folder holding anything else, or the model itself,
is refused before any work (:func:`policies.runtime.files.check_export_folder`), so an export never deletes a file it
did not write.

Text from the model file reaches the generated C and ``rr_policy.mk`` only through
:mod:`policies.runtime.text` (validated when the contract loads, escaped where it is written), and
:func:`firmware_export.codegen.check_generated` re-reads the generated C before anything is compiled or run.

Verification: ``vectors`` random observations (seeded) run through onnxruntime and through the generated C,
compiled for the host (``-std=c99 -Wall -Wextra -Werror -pedantic``) and, for ``cortex-m4f``, cross-compiled and run
under ``qemu-system-arm -M mps2-an386`` with semihosting. Commands are compared in normalised units
``(command - offset) / scale`` (float32 RPM commands near 2e4 cannot agree to 1e-5 absolute); the tolerance is 1e-5.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import yaml

from firmware_export.codegen import c_array, generate
from firmware_export.graph import Graph, UnsupportedModelError, from_model, load_onnx
from firmware_export.targets import (
    LIBRARY_SOURCES,
    TARGETS,
    TEMPLATES,
    Footprint,
    ToolchainError,
    compile_objects,
    execute,
    footprint,
    link,
)
from policies.runtime.contract import METADATA_KEY, Contract, ContractError
from policies.runtime.files import check_export_folder, replace_export_folder
from policies.runtime.text import make_comment

EXPORT_KIND = "firmware"
"""The kind in the output folder's export marker."""

TOLERANCE = 1e-5
"""Largest accepted difference to onnxruntime, in normalised command units."""
INT8_TOLERANCE = 1e-2
"""The same for an int8 policy (``robot-rl export int8``), as a share of its largest normalised command (at least 1:
the policy's range [-1, 1]); all but :data:`INT8_STEP_SHARE` of the vectors must also agree within
:data:`TOLERANCE`. An activation within float rounding of a rounding boundary (the C library's and onnxruntime's
``tanh`` differ in the last bit) may land one int8 step apart in the two; such a vector differs by a step times a
weight, not by float rounding."""
INT8_STEP_SHARE = 0.05
"""Largest share of verification vectors an int8 policy may have beyond :data:`TOLERANCE` (an error in the kernel
shows on most of them; the hover policy has about 1 in 1,000 a step apart, the every-operator test graph 2 %)."""
QEMU_CPI_NOTE = "instructions counted by QEMU -icount (1 instruction = 1 ns of virtual time), read by SysTick"


@dataclass
class FirmwareReport:
    """What an export produced and measured.

    Attributes:
        target: Target name.
        out: Output folder.
        parameters: Constant values stored (weights, biases, normaliser, limits).
        macs: Multiply-accumulates per step.
        flash_bytes: Code + constant data of policy and safety library on the target.
        static_ram_bytes: Static RAM of the library (it keeps no state).
        stack_bytes: Stack of one ``rr_policy_step`` call.
        verified: ``{"host": max_diff, "cortex-m4f": max_diff}`` in normalised units, per run target.
        instructions_per_step: Executed instructions per ``rr_policy_step`` under QEMU (Cortex-M4F only).
        max_rate_hz_168mhz: Steps per second at 168 MHz assuming 1.0 cycle per instruction (``None``: not measured).
        int8: Whether the matrix products compute in int8 (an ``robot-rl export int8`` model).
        tolerance: The largest difference accepted (:data:`TOLERANCE`; for int8 :data:`INT8_TOLERANCE` times the
            largest normalised command, at least 1).
        int8_steps: Per run target, vectors beyond :data:`TOLERANCE` (int8 only: a rounding step apart).
    """

    target: str
    out: str
    parameters: int
    macs: int
    flash_bytes: int | None = None
    static_ram_bytes: int | None = None
    stack_bytes: int | None = None
    verified: dict[str, float] = field(default_factory=dict)
    instructions_per_step: float | None = None
    max_rate_hz_168mhz: float | None = None
    int8: bool = False
    tolerance: float = TOLERANCE
    int8_steps: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """Readable summary lines."""
        out = [
            f"firmware for {self.target}: {self.out}",
            f"  parameters {self.parameters:,}, {self.macs:,} {'int8 ' if self.int8 else ''}MACs per step",
        ]
        if self.flash_bytes is not None:
            out.append(
                f"  flash {self.flash_bytes:,} B, static RAM {self.static_ram_bytes:,} B, "
                f"stack per step {self.stack_bytes:,} B"
            )
        for where, diff in self.verified.items():
            steps = (
                f"; {self.int8_steps[where]} vector(s) an int8 rounding step apart (beyond {TOLERANCE:g})"
                if self.int8_steps.get(where)
                else ""
            )
            out.append(
                f"  verified on {where}: max |C - onnxruntime| = {diff:.2e} (normalised), "
                f"tolerance {self.tolerance:g}{steps}"
            )
        if self.instructions_per_step is not None and self.max_rate_hz_168mhz is not None:
            out.append(
                f"  {self.instructions_per_step:,.0f} instructions per step ({QEMU_CPI_NOTE}); "
                f"at 168 MHz and 1 cycle per instruction: {self.max_rate_hz_168mhz:,.0f} Hz"
            )
        return out


def read_model(path: Path) -> tuple[onnx.ModelProto, Contract]:
    """The ONNX model and the contract in its metadata.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsupportedModelError: Not an ONNX file.
        ContractError: No contract, or a malformed one.
    """
    model = load_onnx(path)
    props = {p.key: p.value for p in model.metadata_props}
    if METADATA_KEY not in props:
        raise ContractError(f"{path} carries no deployment contract (metadata key '{METADATA_KEY}' missing)")
    return model, Contract.from_json(props[METADATA_KEY])


def export_firmware(
    onnx_path: Path, out: Path, target: str = "cortex-m4f", vectors: int = 1000, verify: bool = True, seed: int = 0
) -> FirmwareReport:
    """Generate, build, size and verify C for ``onnx_path`` into ``out`` (see the module docstring).

    Raises:
        ContractError / UnsupportedModelError: The model or its contract cannot become firmware (named).
        ToolchainError: A compiler or QEMU is missing, a build fails, or verification exceeds the tolerance.
    """
    if target not in TARGETS:
        raise UnsupportedModelError(f"unknown target '{target}'; choose one of {', '.join(TARGETS)}")
    check_export_folder(out, EXPORT_KIND, [onnx_path])
    model, contract = read_model(onnx_path)
    if contract.chunk is not None:
        raise UnsupportedModelError(
            f"'{onnx_path}' is an action-chunk policy (contract section 'chunk', sampler "
            f"{contract.chunk.sampler.get('name', 'none')}); the C export runs one command per query only"
        )
    if contract.action.reference:
        raise UnsupportedModelError(
            f"the C export does not support commands relative to a signal yet (action.reference "
            f"'{contract.action.reference}'); export a policy with absolute commands"
        )
    graph = from_model(model)
    sources = generate(graph, contract).files
    report = FirmwareReport(target, str(out), graph.parameters, graph.macs, int8=graph.quantized)
    report.tolerance = INT8_TOLERANCE if graph.quantized else TOLERANCE
    with tempfile.TemporaryDirectory(prefix="robot-rl-firmware-") as scratch:
        work = Path(scratch)
        package = work / "package"
        package.mkdir()
        for name, text in sources.items():
            (package / name).write_text(text)
        for name in ("rr_safety.h", "rr_safety.c", "rr_example_task.c"):
            shutil.copy(TEMPLATES / name, package / name)
        (package / "rr_policy.mk").write_text(_makefile(target, contract))
        _build_and_measure(graph, contract, onnx_path, package, work, target, vectors if verify else 0, seed, report)
        (package / "firmware_report.yaml").write_text(yaml.safe_dump(asdict(report), sort_keys=False))
        replace_export_folder(package, out, EXPORT_KIND)
    return report


def _build_and_measure(
    graph: Graph,
    contract: Contract,
    onnx_path: Path,
    package: Path,
    work: Path,
    target: str,
    vectors: int,
    seed: int,
    report: FirmwareReport,
) -> None:
    defines = (f"-DRR_TANK_MAX_JOINTS={contract.action.size}",)
    sized = TARGETS[target] if TARGETS[target].size else TARGETS["host"]
    size_dir = _copy(package, work / f"size-{sized.name}")
    objects = compile_objects(sized, size_dir, [*LIBRARY_SOURCES, "rr_example_task.c"], defines)
    fp: Footprint = footprint(sized, objects[: len(LIBRARY_SOURCES)])
    report.flash_bytes, report.static_ram_bytes, report.stack_bytes = fp.flash, fp.static_ram, fp.stack
    if vectors <= 0:
        return
    obs = _vectors(contract, vectors, seed)
    expected = _onnxruntime(onnx_path, contract, obs)
    runners = ["host"] + ([target] if target != "host" and TARGETS[target].runs else [])
    for name in runners:
        t = TARGETS[name]
        build = _copy(package, work / f"verify-{name}")
        for tmpl in ("rr_verify_main.c", "startup_cortex_m.c", "cortex_m.ld"):
            shutil.copy(TEMPLATES / tmpl, build / tmpl)
        (build / "rr_test_vectors.h").write_text(_vectors_header(obs))
        objs = compile_objects(t, build, [*LIBRARY_SOURCES, "rr_verify_main.c"], defines)
        printed = execute(t, link(t, build, objs, "verify.elf"), timeout=300)
        got, nan_status, cost = _parse(printed, len(obs), contract.action.size)
        if nan_status != -1:
            raise ToolchainError(f"{name}: a NaN input returned {nan_status}, expected RR_ERR_NONFINITE_INPUT (-1)")
        scale = np.asarray(contract.action.scale, dtype=np.float64)
        per_vector = np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)) / scale, axis=1)
        diff = float(per_vector.max())
        if report.int8:
            offset = np.asarray(contract.action.offset, dtype=np.float64)
            largest = float(np.max(np.abs(expected.astype(np.float64) - offset) / scale))
            report.tolerance = INT8_TOLERANCE * max(1.0, largest)
        if not diff <= report.tolerance:
            raise ToolchainError(
                f"{name}: generated C differs from onnxruntime by {diff:.3g} (normalised) > {report.tolerance:g}"
            )
        if report.int8:
            steps = int((per_vector > TOLERANCE).sum())
            if steps > INT8_STEP_SHARE * len(per_vector):
                raise ToolchainError(
                    f"{name}: generated int8 C differs from onnxruntime beyond {TOLERANCE:g} on {steps} of "
                    f"{len(per_vector)} vectors (more than {INT8_STEP_SHARE:.0%}: not rounding steps, an error)"
                )
            report.int8_steps[name] = steps
        report.verified[name] = diff
        if cost is not None:
            per_step = cost["step_ticks"] / cost["step_reps"] * cost["calib_instr"] / max(cost["calib_ticks"], 1)
            report.instructions_per_step = per_step
            report.max_rate_hz_168mhz = 168e6 / per_step


def _vectors(contract: Contract, n: int, seed: int) -> np.ndarray:
    """Observations: standard normal, a tenth scaled by 10 (beyond the normaliser's clip), float32."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, contract.obs_dim)).astype(np.float32)
    obs[: n // 10] *= 10.0
    return obs


def _onnxruntime(path: Path, contract: Contract, obs: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    rows = [session.run([contract.output_name], {contract.input_name: x[None]})[0][0] for x in obs]
    return np.asarray(rows, dtype=np.float32)


def _vectors_header(obs: np.ndarray) -> str:
    return (
        f"#define RR_NUM_VECTORS {len(obs)}\n"
        f"static const float rr_test_obs[{len(obs)}][RR_OBS_DIM] = {{\n"
        + ",\n".join("{" + c_array(row).strip() + "}" for row in obs)
        + "\n};\n"
    )


def _parse(printed: str, n: int, a: int) -> tuple[np.ndarray, int, dict[str, int] | None]:
    got = np.full((n, a), np.nan, dtype=np.float32)
    nan_status, cost, done = None, None, False
    for line in printed.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "V":
            v, rc = int(parts[1]), int(parts[2])
            if rc != 0:
                raise ToolchainError(f"vector {v}: rr_policy_step returned {rc}")
            got[v] = [float(x) for x in parts[3 : 3 + a]]
        elif parts[0] == "NAN_INPUT":
            nan_status = int(parts[1])
        elif parts[0] == "COST":
            cost = {k: int(v) for k, v in (p.split("=") for p in parts[1:])}
        elif parts[0] == "DONE":
            done = True
    if not done or np.isnan(got).any() or nan_status is None:
        raise ToolchainError(f"the verification run did not complete; it printed:\n{printed[-2000:]}")
    return got, nan_status, cost


def _makefile(target: str, contract: Contract) -> str:
    t = TARGETS[target]
    return (
        f"# robot-rl firmware for task {make_comment(contract.task)}, target {target}. Include from your Makefile:\n"
        f"#   include rr_policy.mk\n#   CFLAGS += $(RR_CFLAGS)\n#   SRCS += $(RR_SRCS)\n"
        f"RR_DIR ?= $(dir $(lastword $(MAKEFILE_LIST)))\n"
        f"RR_SRCS = $(RR_DIR)rr_policy.c $(RR_DIR)rr_safety.c\n"
        f"RR_CFLAGS = -I$(RR_DIR) -std=c99 {' '.join(t.cflags)} -DRR_TANK_MAX_JOINTS={contract.action.size}\n"
        f"RR_LDLIBS = -lm\n"
    )


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def max_rate_hz(instructions: float, clock_hz: float = 168e6, cpi: float = 1.0) -> float:
    """Steps per second on a core at ``clock_hz`` with ``cpi`` cycles per instruction."""
    return math.inf if instructions <= 0 else clock_hz / (instructions * cpi)


def plain(report: FirmwareReport) -> dict[str, Any]:
    """The report as plain data."""
    return asdict(report)
