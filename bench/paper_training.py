"""The paper's own training, built from its repository: "Learning to Fly in Seconds" (Eschmann et al. 2023).

What it measures: the wall-clock seconds of the paper's TD3 training of a Crazyflie hover policy, as its repository
builds it for its own benchmark (``src/training.cpp`` compiled with ``LEARNING_TO_FLY_IN_SECONDS_BENCHMARK``: one
run of ``STEP_LIMIT`` = 300,000 environment steps, seed 0, its own simulator; the binary takes no arguments and
prints ``Training took: <s>s``). ``bench/time_to_criterion.py --paper-checkout PATH`` runs it beside robot-rl's
training on the same machine, so the two are compared in one run.

Nothing from the paper's repository is copied into this project: the script configures a build folder of its own
against a checkout you fetched, with a small ``CMakeLists.txt`` that declares only the paper's benchmark target (the
repository's top-level file also turns on its browser UI and a JSON submodule, which need Boost and checkouts the
benchmark does not use). The checkout is only read.

The checkout, as measured in docs/benchmarks.md::

    git clone https://github.com/arplaboratory/learning-to-fly l2f            # commit d07592d
    git -C l2f submodule update --init external/rl_tools                     # pinned: 3a612e2 of rl-tools/rl-tools
    python3.11 -m venv mkl && mkl/bin/pip install mkl-devel                  # Intel MKL, as the paper benchmarks
    python bench/paper_training.py --checkout l2f --mkl-dir mkl/lib/cmake/mkl

Without MKL the build uses RLtools' generic matrix multiply: 528.7 s instead of 31.0 s on the development machine
(2026-12-05), so a time taken without it is not the paper's. The script says which backend it built.

Importable: :func:`build_paper_training` and :func:`run_paper_training` (used by ``bench/time_to_criterion.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PAPER_REPOSITORY = "arplaboratory/learning-to-fly"
PAPER_COMMIT = "d07592d"  # the commit measured; `git -C CHECKOUT rev-parse --short HEAD` is printed beside it
PAPER_STEPS = 300_000  # STEP_LIMIT of the paper's benchmark configuration (src/config/config.h)

# Only the benchmark target of the paper's src/CMakeLists.txt, declared against the checkout (nothing copied).
_CMAKE_LISTS = """cmake_minimum_required(VERSION 3.16)
project(learning_to_fly_benchmark CXX)
set(CMAKE_CXX_STANDARD 17)
add_library(learning_to_fly INTERFACE)
target_include_directories(learning_to_fly INTERFACE "{checkout}/include")
add_subdirectory("{checkout}/external/rl_tools" rl_tools)
add_executable(training_benchmark "{checkout}/src/training.cpp")
target_link_libraries(training_benchmark PRIVATE rl_tools learning_to_fly)
target_compile_definitions(training_benchmark PRIVATE LEARNING_TO_FLY_IN_SECONDS_BENCHMARK)
"""

_TOOK = re.compile(r"^Training took: ([0-9.eE+-]+)s$", re.MULTILINE)


@dataclass(frozen=True)
class PaperBuild:
    """A built ``training_benchmark`` binary.

    Attributes:
        binary: path of the executable.
        backend: ``"MKL"`` or ``"generic"`` (RLtools' own matrix multiply; much slower, not the paper's setting).
        commit: the checkout's short commit hash.
        env: environment to run it with (``LD_LIBRARY_PATH`` holds MKL's libraries when MKL is used).
    """

    binary: Path
    backend: str
    commit: str
    env: dict[str, str]


def _check_checkout(checkout: Path) -> None:
    """Raise a one-line error naming what a checkout lacks."""
    for rel in ("src/training.cpp", "include/learning_to_fly", "external/rl_tools/CMakeLists.txt"):
        if not (checkout / rel).exists():
            hint = " (run `git submodule update --init external/rl_tools` in it)" if "rl_tools" in rel else ""
            raise SystemExit(f"{checkout} is not a learning-to-fly checkout: {rel} is missing{hint}")


def build_paper_training(checkout: Path, build_dir: Path, mkl_dir: Path | None = None) -> PaperBuild:
    """Configure and build the paper's ``training_benchmark`` in ``build_dir`` (Release, as the paper builds it).

    Args:
        checkout: a learning-to-fly checkout with ``external/rl_tools`` initialised; only read.
        build_dir: an empty or earlier build folder of this function; a rebuild is incremental.
        mkl_dir: the folder holding ``MKLConfig.cmake`` (``lib/cmake/mkl`` of a ``pip install mkl-devel``);
            ``None`` builds RLtools' generic backend.

    Returns:
        The built binary and how to run it.
    """
    checkout = checkout.resolve()
    _check_checkout(checkout)
    if mkl_dir is not None and not (mkl_dir / "MKLConfig.cmake").is_file():
        raise SystemExit(f"--mkl-dir {mkl_dir}: no MKLConfig.cmake there (it is lib/cmake/mkl of mkl-devel)")
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / "source"
    source.mkdir(exist_ok=True)
    (source / "CMakeLists.txt").write_text(_CMAKE_LISTS.format(checkout=checkout.as_posix()))
    configure = [
        "cmake",
        "-S",
        str(source),
        "-B",
        str(build_dir / "build"),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON",
        "-DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON",
    ]
    env = dict(os.environ)
    if mkl_dir is not None:
        mkl_dir = mkl_dir.resolve()
        configure += [
            "-DRL_TOOLS_BACKEND_ENABLE_MKL=ON",
            f"-DMKL_DIR={mkl_dir}",
            "-DMKL_INTERFACE=lp64",
            "-DMKL_THREADING=sequential",
        ]
        lib = mkl_dir.parent.parent  # .../lib/cmake/mkl -> .../lib
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p)
    for cmd in (configure, ["cmake", "--build", str(build_dir / "build"), "--target", "training_benchmark"]):
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["(no output)"]
            raise SystemExit(f"building the paper's training failed at `{' '.join(cmd[:2])}`: {tail[0]}")
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return PaperBuild(
        binary=build_dir / "build" / "training_benchmark",
        backend="MKL" if mkl_dir is not None else "generic",
        commit=commit or "unknown",
        env=env,
    )


def parse_training_time(output: str) -> float:
    """The seconds of the ``Training took: <s>s`` line the paper's binary prints last.

    Raises:
        ValueError: the output has no such line (the run failed or was cut short).
    """
    found = _TOOK.findall(output)
    if not found:
        raise ValueError("the paper's training printed no 'Training took: <s>s' line")
    return float(found[-1])


def run_paper_training(build: PaperBuild, timeout_s: float = 1800.0) -> float:
    """Run the paper's training once (its 300,000 steps, seed 0) and return its own timing, s.

    It writes its logs under a ``logs/`` folder of the working directory, so it runs in a temporary one.
    """
    with tempfile.TemporaryDirectory(prefix="l2f-run-") as cwd:
        done = subprocess.run(
            [str(build.binary)], cwd=cwd, env=build.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    if done.returncode != 0:
        raise SystemExit(f"the paper's training exited with {done.returncode}: {done.stderr.strip()[-200:]}")
    return parse_training_time(done.stdout)


def main(argv: list[str] | None = None) -> None:
    """Build the paper's training and time it."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, required=True, help="learning-to-fly checkout with rl_tools initialised")
    p.add_argument("--mkl-dir", type=Path, default=None, help="folder of MKLConfig.cmake (pip install mkl-devel)")
    p.add_argument("--build-dir", type=Path, default=Path("build/paper-l2f"), help="where to build (reused)")
    p.add_argument("--runs", type=int, default=1, help="how many times to run it")
    args = p.parse_args(argv)
    build = build_paper_training(args.checkout, args.build_dir, args.mkl_dir)
    print(f"{PAPER_REPOSITORY} at {build.commit} (measured: {PAPER_COMMIT}), {build.backend} backend")
    for i in range(args.runs):
        print(f"run {i}: {run_paper_training(build):.1f} s for {PAPER_STEPS:,} env steps", flush=True)


if __name__ == "__main__":
    main()
