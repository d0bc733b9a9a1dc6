"""A lock across processes for one golden file, so concurrent regenerations take turns.

``pytest -n 4 --numcheck --numcheck-regen`` may send the items of one case to several
workers, and each regenerates the case's golden. Each write is atomic already (temporary
file, fsync, ``os.replace``), so no reader ever sees half a file; the lock adds that the
"compare with the stored golden, then write" step of one process is never interleaved with
another's, so the last writer does not undo a decision taken on a file it has not seen.

The lock is ``fcntl.flock`` on a hidden sidecar file ``.<name>.lock`` next to the golden. The
kernel drops a flock when its holder dies (even by SIGKILL), so a killed regen never leaves a
lock that blocks the next one. The sidecar is removed on release; the acquirer re-checks that
the file it locked is still the one at the path (the classic unlink race), so removing it is
safe. Re-entrant within one thread. Nothing here imports torch or pytest.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: os.replace is still atomic; writes do not queue
    fcntl = None  # type: ignore[assignment]

#: How long a writer waits for another process's write of the same golden by default.
DEFAULT_TIMEOUT_S = 600.0

_held = threading.local()


class LockTimeout(TimeoutError):
    """Another process held the golden's lock for longer than the timeout."""


def lock_path(path: Path) -> Path:
    """The sidecar lock file of ``path``: ``.<name>.lock``, hidden and not ``*.safetensors``."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def exclusive(path: Path, *, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold the cross-process lock of ``path`` (the file need not exist) for the ``with`` body.

    Raises :class:`LockTimeout`, naming the lock file and the fix, if another process holds it
    for more than ``timeout`` seconds.
    """
    lock = lock_path(path).absolute()
    if getattr(_held, "pid", None) != os.getpid():
        # A forked child inherits this thread's record but not the lock (flock belongs to the
        # parent's open file): start afresh.
        _held.pid, _held.paths = os.getpid(), set()
    held: set[Path] = _held.paths
    if lock in held or fcntl is None:
        yield  # re-entrant: the outer frame of this thread holds it
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(lock, timeout)
    held.add(lock)
    try:
        yield
    finally:
        held.discard(lock)
        # Unlink before unlocking: a waiter that then gets the old file sees it is no longer
        # the one at the path and retries on a fresh one (see _acquire).
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _acquire(lock: Path, timeout: float) -> int:
    assert fcntl is not None
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > deadline:
                raise LockTimeout(
                    f"waited {timeout:.0f} s for the lock {lock}: another process is writing "
                    "this golden. Fix: wait for it to finish; if no numcheck process is running, "
                    "the lock is free and this is a bug worth reporting"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # we locked a file its previous holder already removed: try again
