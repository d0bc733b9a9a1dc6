"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Goldens and the JSON report both go through :func:`atomic_write`: the bytes go to a hidden
temporary file in the same folder, which is flushed, fsynced and moved over the target with
``os.replace``; then the folder is fsynced so the rename itself survives a crash. On any
error (a full disk, a bad path, an interrupt) the temporary file is removed and the old
file is left as it was. Nothing here imports torch or pytest.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
from pathlib import Path


def temp_name(path: Path) -> Path:
    """A fresh hidden name next to ``path`` for its temporary file.

    Hidden and ending in ``.tmp`` (never the target's suffix), so a leftover after a hard kill
    is never taken for the real file by a folder scan.
    """
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def remove_leftovers(path: Path) -> None:
    """Delete temporary files that killed writers of ``path`` left behind.

    Only safe while no other live process writes ``path``: call it under the file's lock
    (:func:`numcheck.disk.locking.exclusive`).
    """
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(OSError):
            leftover.unlink()


def atomic_write(path: Path | str, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically, creating the folder if needed.

    The file gets ``mode`` when given (a rewritten file keeps its permissions), else 0o666
    minus the umask like a plain ``open``: goldens are shared files (``mkstemp`` would make
    them 0o600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (POSIX; ``os.replace`` is atomic elsewhere)."""
    if os.name != "posix":
        return
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
