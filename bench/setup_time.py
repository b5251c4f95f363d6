"""What ``make test`` spends before its first test: the install into a fresh venv and a type check with no cache,
as the Makefile runs them now against how it ran them before, side by side in one run.

- **Install** (``make install`` on a fresh clone): ``pip install --no-compile torch==2.13.0``, then the project and its
  test tools (``-e '.[dev]'``) with uv (now, since 2026-12-02: ``pip install`` the Makefile's ``UV_PIN``, then
  ``uv pip install``) or with pip ``--no-compile`` (before). Each side gets its own venv and its own empty download
  caches (pip's and uv's) in a temporary folder, removed afterwards: a CI machine starts with none. The torch wheel is
  whatever pip finds first (on this machine a local file), alike on both sides; everything else is downloaded.
- **Type check** (``make lint``'s mypy on a fresh clone): ``mypy`` with an empty cache folder, with the project's
  ``pyproject.toml`` (now: ``follow_imports = "skip"`` for transformers, diffusers and sentence_transformers) and with
  a copy of it without that override (before 2026-12-01: mypy followed three lazy imports into ~7,800 modules of
  those packages). The number of modules mypy read is printed beside each time.

One side after the other, ``before`` first (a machine's drift is not cancelled: run it twice where it matters).

Run::

    python bench/setup_time.py              # ~7 min on 2 cores: two installs and two cold type checks
    python bench/setup_time.py --only mypy  # ~3.5 min
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_OVERRIDE = re.compile(r"\[\[tool\.mypy\.overrides\]\]\n(?:#[^\n]*\n)*module = \[\n[^\]]*transformers[^\]]*\]\n"
                           r"follow_imports = \"skip\"\n\n")  # fmt: skip
"""The override that skips transformers, diffusers and sentence_transformers, with its comment lines."""


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Run ``cmd`` in ``cwd`` (its output discarded, a failure raised with its last lines); seconds of wall time."""
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-5:])
        raise SystemExit(f"'{' '.join(cmd)}' failed ({done.returncode}):\n{tail}")
    return time.monotonic() - t0


def uv_pin() -> str:
    """The uv release the Makefile installs (its ``UV_PIN``), so that this bench times the same one."""
    found = re.search(r"^UV_PIN := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit("Makefile: no 'UV_PIN := uv==<version>' line, so the uv that make installs is unknown")
    return found.group(1)


def install(with_uv: bool, tmp: Path) -> float:
    """Seconds for a fresh venv's installs, torch then the project (the venv's creation not counted), with empty
    download caches: the project with uv as the Makefile installs it, or with pip as it did before."""
    side = "now" if with_uv else "before"
    venv = tmp / f"venv-{side}"
    env = {**os.environ, "PIP_CACHE_DIR": str(tmp / f"pip-cache-{side}"), "UV_CACHE_DIR": str(tmp / f"uv-{side}")}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-compile"]
    seconds = timed([*pip, "torch==2.13.0"], ROOT, env)
    if with_uv:
        seconds += timed([*pip, uv_pin()], ROOT, env)
        uv = [str(venv / "bin" / "uv"), "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
        seconds += timed([*uv, "-e", ".[dev]"], ROOT, env)
    else:
        seconds += timed([*pip, "-e", ".[dev]"], ROOT, env)
    shutil.rmtree(venv)
    return seconds


def modules_read(cache: Path) -> int:
    """Modules in a mypy cache folder (its SQLite shards' ``.meta`` entries)."""
    n = 0
    for db in cache.rglob("cache.*.db"):
        with sqlite3.connect(db) as con:
            n += sum(1 for (p,) in con.execute("select path from files2") if ".meta." in p)
    return n


def mypy(skip: bool, tmp: Path) -> tuple[float, int]:
    """Seconds and modules read for a cold ``mypy`` of the project, with or without the skip override."""
    config = ROOT / "pyproject.toml"
    if not skip:
        text, n = SKIP_OVERRIDE.subn("", config.read_text())
        if n != 1:
            raise SystemExit("pyproject.toml has no mypy override for transformers to leave out: update this bench")
        config = tmp / "pyproject-before.toml"
        config.write_text(text)
    cache = tmp / ("mypy-now" if skip else "mypy-before")
    exe = str(Path(sys.executable).parent / "mypy")
    seconds = timed([exe, "--config-file", str(config), "--cache-dir", str(cache)], ROOT)
    return seconds, modules_read(cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["install", "mypy"], help="time one of the two (default: both)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="setup-time-") as name:
        tmp = Path(name)
        print(f"{'step':<40} {'before':>10} {'now':>10} {'now/before':>11}")
        if args.only in (None, "install"):
            before, now = install(False, tmp), install(True, tmp)
            print(f"{'install (fresh venv, empty caches), s':<40} {before:>10.1f} {now:>10.1f} {now / before:>11.2f}")
        if args.only in (None, "mypy"):
            (before, n_before), (now, n_now) = mypy(False, tmp), mypy(True, tmp)
            print(f"{'mypy, no cache, s':<40} {before:>10.1f} {now:>10.1f} {now / before:>11.2f}")
            print(f"{'mypy, modules read':<40} {n_before:>10,} {n_now:>10,}")


if __name__ == "__main__":
    main()
