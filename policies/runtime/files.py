"""Atomic file writes: a reader (or a crash) never sees a half-written policy, contract or checkpoint.

Every writer stages its data in a temporary file in the destination's folder, flushes it to disk and then
``os.replace``-s it over the destination, which is atomic on POSIX and Windows as long as both live on the
same file system (hence the same folder). Standard library only, so the robot runtime and the trainer can
both use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    Use it for writers that want a file name rather than bytes (``torch.save``, ``Contract.save_yaml``)::

        with atomic_path(run_dir / "model_100.pt") as tmp:
            torch.save(state, tmp)

    Args:
        path: Final destination. Its folder must exist.

    Yields:
        A fresh, empty file in the destination's folder, named ``.<name>.<random>.tmp``.
    """
    dest = Path(path)
    tmp = _reserve_temp(dest)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(dest.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (all or nothing); return ``path`` as a :class:`~pathlib.Path`."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (all or nothing); return ``path`` as a :class:`~pathlib.Path`."""
    return atomic_write_bytes(path, text.encode(encoding))


def _reserve_temp(dest: Path) -> Path:
    """Create an empty, uniquely named file beside ``dest`` (mode 0o666 minus the umask, like open())."""
    for _ in range(100):
        tmp = dest.parent / f".{dest.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"could not create a temporary file beside {dest}")


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(folder: Path) -> None:
    """Persist the rename itself (POSIX); silently skipped where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
