"""A per-device lock across processes: timed sections never share a GPU.

``pytest -n 4 --numcheck --numcheck-perf`` on one GPU runs four workers on it. If two of
them time kernels at the same time, each one's CUDA events also measure the other's
kernels and a speedup verdict can flip either way. So, per device:

- a **timed section** (a speedup measurement, a torch.profiler kernel audit, a calibration
  timing) holds the device *exclusively*;
- a **numerics section** (running a variant to compare it with its golden) holds it
  *shared*: numerics of several workers run in parallel with each other, never during
  another worker's timed section.

Two ``fcntl.flock`` files per device make a writer-preferring read/write lock: a
*turnstile* and the *lock* itself. A timed section takes the turnstile, then the lock
exclusively, and keeps both; a numerics section passes through the turnstile (take,
release) and then takes the lock shared. Once a timed section waits at the lock, it holds
the turnstile, so no new numerics section starts: the running ones finish, the timed one
gets the device, and a steady stream of numerics can never starve it. The kernel drops a
flock when its holder dies (even by SIGKILL), so a killed worker never blocks the others.

The files live in ``$NUMCHECK_LOCK_DIR`` (default: ``<tmp>/numcheck-device-locks``) and
are named by the device (a GPU's UUID where torch knows it, so two runs with different
``CUDA_VISIBLE_DEVICES`` lock the same physical GPU). They are left in place: removing a
flock file while another process waits on it would split the lock in two.

Within one process the sections do not nest (a flock on a second descriptor of the same
file would wait for the first): :class:`DeviceLock` refuses that with an error. Pure: no
torch, no pytest.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, sections may overlap
    fcntl = None  # type: ignore[assignment]

#: How long a section waits for the device before giving up, by default.
DEFAULT_TIMEOUT_S = 3600.0
LOCK_DIR_ENV = "NUMCHECK_LOCK_DIR"


class DeviceLockTimeout(TimeoutError):
    """Another process held the device for longer than the timeout."""


def lock_dir() -> Path:
    """Where the lock files live: ``$NUMCHECK_LOCK_DIR`` or a folder in the temp dir."""
    env = os.environ.get(LOCK_DIR_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / "numcheck-device-locks"


def device_key(device: str, index: int | None = None, uuid: str | None = None) -> str:
    """A file-name-safe key for a device: ``cuda-GPU-1234...`` / ``cuda-0`` / ``cpu``."""
    if device != "cuda":
        return device
    ident = uuid if uuid else str(index if index is not None else 0)
    return "cuda-" + re.sub(r"[^A-Za-z0-9_.-]", "_", ident)


@dataclass
class DeviceLock:
    """The lock of one device, and the seconds this process waited for it."""

    key: str
    directory: Path = field(default_factory=lock_dir)
    timeout: float = DEFAULT_TIMEOUT_S
    waited_s: float = 0.0
    _held: str | None = None

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[float]:
        """Hold the device alone for the ``with`` body; yields the seconds waited."""
        with self._section("exclusive") as waited:
            yield waited

    @contextlib.contextmanager
    def shared(self) -> Iterator[float]:
        """Hold the device with other shared holders; yields the seconds waited."""
        with self._section("shared") as waited:
            yield waited

    @contextlib.contextmanager
    def _section(self, mode: str) -> Iterator[float]:
        if self._held is not None:
            raise RuntimeError(
                f"device lock {self.key}: a {mode} section inside a {self._held} one in the "
                "same process would wait for itself; take the sections one after the other"
            )
        if fcntl is None:  # pragma: no cover
            self._held = mode
            try:
                yield 0.0
            finally:
                self._held = None
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        gate = _open(self.directory / f"{self.key}.turnstile")
        lock = _open(self.directory / f"{self.key}.lock")
        try:
            self._flock(gate, fcntl.LOCK_EX, start)
            if mode == "shared":
                try:
                    self._flock(lock, fcntl.LOCK_SH, start)
                finally:
                    fcntl.flock(gate, fcntl.LOCK_UN)
            else:
                self._flock(lock, fcntl.LOCK_EX, start)
            waited = time.monotonic() - start
            self.waited_s += waited
            self._held = mode
            try:
                yield waited
            finally:
                self._held = None
        finally:
            os.close(lock)  # closing drops the flocks
            os.close(gate)

    def _flock(self, fd: int, how: int, start: float) -> None:
        assert fcntl is not None
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() - start > self.timeout:
                    raise DeviceLockTimeout(
                        f"waited {self.timeout:.0f} s for the device lock {self.directory}/"
                        f"{self.key}: another numcheck process is timing on this device. Fix: "
                        "wait for it, or give each worker its own device; if no numcheck "
                        "process is running, the lock is free and this is a bug worth "
                        "reporting"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
