"""Atomic file writes: a reader (or a crash) never sees a half-written policy, contract or checkpoint.

Every writer stages its data in a temporary file in the destination's folder, flushes it to disk and then
``os.replace``-s it over the destination, which is atomic on POSIX and Windows as long as both live on the
same file system (hence the same folder). Standard library only, so the robot runtime and the trainer can
both use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

EXPORT_MARKER = ".robot-rl-export"
"""File an export writes into every folder it owns (JSON ``{"kind": ...}``): only a folder holding it, with the same
kind, is ever replaced by a later export."""


class OutputFolderError(ValueError):
    """An output folder would lose something the user had: it holds files of its own, or the export's source."""


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


def check_export_folder(out: str | Path, kind: str, sources: Iterable[str | Path] = ()) -> None:
    """Refuse ``out`` as the folder of an export of ``kind`` unless nothing the user had can be lost by replacing it:
    it does not exist, is an empty folder, or holds :data:`EXPORT_MARKER` of an earlier export of the same ``kind``;
    and no ``sources`` (the files the export reads) lie inside it.

    Raises:
        OutputFolderError: Naming the folder and what it holds.
    """
    out = Path(out)
    target = out.resolve()
    for src in sources:
        s = Path(src).resolve()
        if s == target or target in s.parents:
            raise OutputFolderError(f"--out '{out}' holds the export's source '{src}'; choose another folder")
    if out.is_symlink():
        raise OutputFolderError(f"--out '{out}' is a symbolic link; give the folder itself")
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputFolderError(f"--out '{out}' is a file, not a folder")
    if not any(out.iterdir()):
        return
    found = export_kind(out)
    if found is None:
        raise OutputFolderError(
            f"--out '{out}' already holds files that no robot-rl {kind} export wrote (no {EXPORT_MARKER}); "
            "choose a new or empty folder"
        )
    if found != kind:
        raise OutputFolderError(f"--out '{out}' holds a robot-rl {found} export, not a {kind} export")


def export_kind(folder: str | Path) -> str | None:
    """The kind in ``folder``'s :data:`EXPORT_MARKER`, or ``None`` when it has none (or a malformed one)."""
    try:
        data = json.loads((Path(folder) / EXPORT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def replace_export_folder(staged: str | Path, out: str | Path, kind: str) -> None:
    """Move the finished export ``staged`` to ``out`` with no moment of a half-written ``out``: the marker is added,
    ``out`` is checked again (:func:`check_export_folder`), and an earlier export of the same kind is swapped out by
    renames and only then removed.

    Raises:
        OutputFolderError: ``out`` may not be replaced (see :func:`check_export_folder`); ``staged`` is left as is.
    """
    staged, out = Path(staged), Path(out)
    check_export_folder(out, kind)
    (staged / EXPORT_MARKER).write_text(json.dumps({"kind": kind}) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copytree(staged, tmp, dirs_exist_ok=True)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{secrets.token_hex(4)}"
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(out.parent)
