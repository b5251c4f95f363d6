"""Compilers, flags and runners for each target: ``host`` (gcc / clang), ``cortex-m4f`` (verified under QEMU),
``cortex-m7`` and ``cortex-m33`` (built and sized only).

Every build uses ``-std=c99 -Wall -Wextra -Werror -pedantic``: a warning in generated code is a bug in the
generator. Sizes come from the toolchain's own ``size`` on the policy and safety objects (what a firmware links),
stack from ``-fstack-usage``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "templates"
WARNINGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")
LIBRARY_SOURCES = ("rr_policy.c", "rr_safety.c")


class ToolchainError(RuntimeError):
    """A compiler, ``size`` or QEMU is missing, or a build or run failed (the message holds its output)."""


@dataclass(frozen=True)
class Target:
    """One target: compiler, flags, and how to run a verification binary (``None``: build only).

    Attributes:
        name: Target name as given to ``--target``.
        cc: Compiler executable.
        cflags: Architecture and optimisation flags (warnings are added by :func:`compile_objects`).
        size: The toolchain's ``size`` executable (``None``: not reported).
        link: Extra flags to link the verification harness.
        qemu: QEMU command prefix to run the harness (``None``: run natively on the host, or not at all).
        runs: Whether the verification harness can run here.
    """

    name: str
    cc: str
    cflags: tuple[str, ...]
    size: str | None
    link: tuple[str, ...]
    qemu: tuple[str, ...] | None
    runs: bool


_M_COMMON = ("-mthumb", "-mfloat-abi=hard", "-O2", "-ffunction-sections", "-fdata-sections", "-DRR_CORTEX_M")
_M_LINK = ("-nostartfiles", "--specs=rdimon.specs", "-Wl,--gc-sections", "-lm", "-lrdimon")
TARGETS = {
    "host": Target("host", "cc", ("-O2",), "size", ("-lm",), None, True),
    "cortex-m4f": Target(
        "cortex-m4f",
        "arm-none-eabi-gcc",
        ("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", *_M_COMMON),
        "arm-none-eabi-size",
        _M_LINK,
        (
            "qemu-system-arm",
            "-M",
            "mps2-an386",
            "-nographic",
            "-monitor",
            "none",
            "-serial",
            "none",
            "-icount",
            "shift=0",
            "-semihosting-config",
            "enable=on,target=native",
            "-kernel",
        ),
        True,
    ),
    "cortex-m7": Target(
        "cortex-m7",
        "arm-none-eabi-gcc",
        ("-mcpu=cortex-m7", "-mfpu=fpv5-d16", *_M_COMMON),
        "arm-none-eabi-size",
        _M_LINK,
        None,
        False,
    ),
    "cortex-m33": Target(
        "cortex-m33",
        "arm-none-eabi-gcc",
        ("-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16", *_M_COMMON),
        "arm-none-eabi-size",
        _M_LINK,
        None,
        False,
    ),
}
"""Supported targets by name."""

APT_HINT = "install gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm (make test does)"


def require(tool: str) -> str:
    """Absolute path of ``tool``; raise :class:`ToolchainError` with an install hint if it is missing."""
    path = shutil.which(tool)
    if path is None:
        raise ToolchainError(f"'{tool}' was not found on PATH; {APT_HINT}")
    return path


def run(cmd: list[str], cwd: Path, timeout: float = 120.0) -> str:
    """Run a command; return stdout, or raise :class:`ToolchainError` with its output."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"'{cmd[0]}' did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        raise ToolchainError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def compile_objects(target: Target, src: Path, sources: list[str], defines: tuple[str, ...] = ()) -> list[Path]:
    """Compile ``sources`` (in ``src``) to objects with the strict warning set; returns the object paths."""
    cc = require(target.cc)
    objects = []
    for name in sources:
        obj = src / (Path(name).stem + f".{target.name}.o")
        run([cc, *WARNINGS, *target.cflags, *defines, "-fstack-usage", "-c", name, "-o", obj.name], src)
        objects.append(obj)
    return objects


def link(target: Target, src: Path, objects: list[Path], out: str) -> Path:
    """Link ``objects`` into an executable ``src/out`` (with start-up code and linker script on Cortex-M)."""
    cc = require(target.cc)
    extra: list[str] = []
    if target.name != "host":
        startup = compile_objects(target, src, ["startup_cortex_m.c"])
        extra = [str(startup[0]), "-T", "cortex_m.ld"]
    run([cc, *target.cflags, *[o.name for o in objects], *extra, *target.link, "-o", out], src)
    return src / out


def execute(target: Target, binary: Path, timeout: float = 120.0) -> str:
    """Run a verification binary (natively or under QEMU); returns what it printed."""
    if not target.runs:
        raise ToolchainError(f"target {target.name} cannot run here (build only)")
    cmd = [str(binary)] if target.qemu is None else [require(target.qemu[0]), *target.qemu[1:], str(binary)]
    out = run(cmd, binary.parent, timeout)
    if not out.strip():
        raise ToolchainError(f"{' '.join(cmd)} printed nothing")
    return out


@dataclass(frozen=True)
class Footprint:
    """Memory of the policy library on a target, bytes.

    Attributes:
        flash: ``text + data`` of the policy and safety objects (code, weights, initialised data).
        static_ram: ``data + bss`` (the library keeps no state; normally 0).
        stack: Stack of one ``rr_policy_step`` call (``-fstack-usage``), intermediates included.
    """

    flash: int
    static_ram: int
    stack: int


def footprint(target: Target, objects: list[Path]) -> Footprint:
    """Sizes from the toolchain's ``size`` (Berkeley format) and the ``.su`` stack-usage files."""
    if target.size is None:
        raise ToolchainError(f"no size tool for {target.name}")
    out = run([require(target.size), *[o.name for o in objects]], objects[0].parent)
    text = data = bss = 0
    for line in out.strip().splitlines()[1:]:
        t, d, b = (int(v) for v in line.split()[:3])
        text, data, bss = text + t, data + d, bss + b
    stack = 0
    for su in objects[0].parent.glob("rr_policy*.su"):
        for line in su.read_text().splitlines():
            if ":rr_policy_step\t" in line or line.split("\t")[0].endswith(":rr_policy_step"):
                stack = max(stack, int(line.split("\t")[1]))
    return Footprint(text + data, data + bss, stack)
