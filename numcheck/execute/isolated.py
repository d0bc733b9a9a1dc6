"""Checks run in a worker process, so that a check that crashes, hangs or runs out of
memory fails alone (docs/architecture.md, "Where a check is executed").

:class:`Isolated` is an :class:`~numcheck.execute.executor.Executor`: the run's items call it
as they call :class:`~numcheck.execute.executor.InProcess`. It keeps one worker process
(:mod:`numcheck.execute.worker`), started as soon as the run knows its checks and booting
while pytest collects, and sends it one check at a time. A worker whose process dies, whose
CUDA context is lost, that runs out of memory or passes the check's time limit is ended
and replaced; the check it ran fails as :class:`~numcheck.execute.aborted.CheckAborted`, with
the phase it was in, and every later check runs in the new worker.

The time limit counts the check's time outside its first call; the first call (compile and
warm-up) has an allowance of its own. Under ``sanitize`` each check runs in a worker of its
own, under compute-sanitizer (:mod:`numcheck.execute.sanitizer`), once per tool.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from numcheck.check.firstcall import Progress
from numcheck.check.phase import FIRST_CALL
from numcheck.check.result import display_id
from numcheck.execute.aborted import CRASH, SANITIZER, TIMEOUT, Aborted, CheckAborted, exit_error
from numcheck.execute.case_cache import CaseCache
from numcheck.execute.executor import Answer, Request
from numcheck.execute.sanitizer import Sanitizer
from numcheck.execute.worker import WorkerSetup, receive, send

#: Seconds a new worker may take to import torch and register the variants.
BOOT_LIMIT_S = 600.0
#: Lines of a dead worker's log the failure shows.
LOG_TAIL = 12
#: Lines of the log of a worker that failed to start the error shows.
BOOT_LOG_TAIL = 40


class IsolationError(RuntimeError):
    """A worker that cannot start (its setup failed): nothing in the run can be checked."""


@dataclass(frozen=True)
class Limits:
    """A check's time limits in seconds (None: none)."""

    check_s: float | None = None
    first_call_s: float | None = None

    def describe(self) -> str:
        def s(v: float | None) -> str:
            return "none" if v is None else f"{v:g} s"

        return f"{s(self.check_s)} (first call: {s(self.first_call_s)})"


#: Where a check's time limits are set, under a TIMEOUT.
LIMITS_LINE = ("limits:      --numcheck-timeout and --numcheck-timeout-first-call "
               "(ini numcheck_timeout, numcheck_timeout_first_call)")


class TimeUsed:
    """A check's time against its :class:`Limits`, phase by phase: the first call against
    its own allowance, every other phase against the check's limit together. Pure: the
    caller gives the clock's readings."""

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits = limits
        self.phase = ""
        self._start = now
        #: Seconds outside the first call, before the current phase.
        self._spent = 0.0

    @property
    def in_first_call(self) -> bool:
        return self.phase == FIRST_CALL

    @property
    def limit(self) -> float | None:
        return self.limits.first_call_s if self.in_first_call else self.limits.check_s

    def enter(self, phase: str, now: float) -> None:
        if not self.in_first_call:
            self._spent += now - self._start
        self.phase, self._start = phase, now

    def used(self, now: float) -> float:
        """Seconds counted against the current phase's limit."""
        return now - self._start + (0.0 if self.in_first_call else self._spent)

    def remaining(self, now: float) -> float | None:
        """Seconds left under the current phase's limit (None: no limit)."""
        limit = self.limit
        return None if limit is None else limit - self.used(now)

    def overrun(self, now: float) -> str:
        """The TIMEOUT's error line."""
        what = "its first call" if self.in_first_call else "the check"
        return (f"{what} ran past its time limit: {self.used(now):.1f} s of {self.limit:g} s "
                f"(limits: {self.limits.describe()})")


class _Process:
    """One worker process: its connection (a Unix socket, which a wrapper such as
    compute-sanitizer passes through whatever it does with file descriptors) and its log."""

    def __init__(self, setup: WorkerSetup, prefix: Sequence[str], log_dir: Path,
                 env: dict[str, str]) -> None:
        self.setup = setup
        self.log = Path(tempfile.mkstemp(prefix="worker-", suffix=".log", dir=log_dir)[1])
        self.address = str(self.log.with_suffix(".sock"))
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(1)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", "numcheck.execute.worker", self.address],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **env}, start_new_session=True, cwd=os.getcwd())
        self.conn: Connection | None = None
        self.ready = False

    def connect(self, limit_s: float) -> bool:
        """Wait for the worker to connect, then send it its setup; False when it died or
        did not connect within ``limit_s``."""
        deadline = time.monotonic() + limit_s
        self.listener.settimeout(1.0)
        while self.conn is None:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    return False
                continue
            sock.settimeout(None)
            self.conn = Connection(sock.detach())
        self.listener.close()
        send(self.conn, self.setup)
        return True

    @property
    def connection(self) -> Connection:
        """The connection to the worker (once it connected)."""
        assert self.conn is not None
        return self.conn

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.close()

    def stop(self, wait_s: float = 60.0) -> None:
        """Ask the worker to end (its sanitizer then writes its summary); kill it if it
        does not within ``wait_s``."""
        if self.conn is None:  # still booting, or never connected: nothing to finish
            self.kill()
            return
        try:
            send(self.conn, ("stop",), plain=True)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        self.close()

    def close(self) -> None:
        for closable in (self.conn, self.listener):
            try:
                if closable is not None:
                    closable.close()
            except OSError:
                pass
        Path(self.address).unlink(missing_ok=True)

    def lines(self) -> list[str]:
        """The log's non-empty lines (none when it cannot be read)."""
        try:
            return [line for line in self.log.read_text(errors="replace").splitlines()
                    if line.strip()]
        except OSError:
            return []


class Isolated:
    """Executes each check in a worker process; see the module's docstring."""

    def __init__(
        self,
        setup: Callable[[], WorkerSetup],
        *,
        cases: CaseCache,
        limits: Limits = Limits(),
        progress: Progress | None = None,
        sanitizer: Sanitizer | None = None,
        log_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Made at each worker's start: a conftest.py loaded since registers in the next.
        self.setup = setup
        #: The parent's cache: what the workers regenerated is reported from it.
        self.cases = cases
        self.limits = limits
        self.progress = progress
        self.sanitizer = sanitizer
        self.clock = clock
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="numcheck-workers-"))
        self._proc: _Process | None = None
        #: Checks that ended without a verdict of their numbers (their logs are kept).
        self.aborted = 0

    # -- the worker's life ----------------------------------------------------------------

    def start(self) -> None:
        """Start a worker now if none runs (it boots while the caller goes on)."""
        if self._proc is None and self.sanitizer is None:
            self._proc = self._spawn(())

    def _spawn(self, prefix: Sequence[str], env: dict[str, str] | None = None) -> _Process:
        self.log_dir.mkdir(parents=True, exist_ok=True)  # (a temp cleaner may have taken it)
        return _Process(self.setup(), prefix, self.log_dir, env or {})

    def _ready(self, proc: _Process) -> None:
        if proc.ready:
            return
        if proc is self._proc and proc.conn is None and proc.setup != self.setup():
            # Registered since it started (a conftest.py of a sub-folder): start it again.
            proc.kill()
            proc = self._proc = self._spawn(())
        if not proc.connect(BOOT_LIMIT_S) or not proc.connection.poll(BOOT_LIMIT_S):
            alive = proc.proc.poll() is None
            proc.kill()
            said = _last_words(proc)
            raise IsolationError(
                f"numcheck: the check worker process "
                f"{f'did not start within {BOOT_LIMIT_S:g} s' if alive else 'died starting'}"
                f"; its log ({proc.log}):\n{said}")
        try:
            message = receive(proc.connection)
        except (EOFError, OSError):
            message = ("failed", _last_words(proc))
        if message[0] != "ready":
            proc.kill()
            raise IsolationError(
                "numcheck: the check worker process could not start; it said:\n"
                f"{message[1]}\n"
                "Fix: register your ops from a conftest.py hook or an entry point (the "
                "worker imports those again), or run the checks in the pytest process "
                "with --numcheck-isolate=off")
        proc.ready = True

    def close(self) -> None:
        """End the worker (the run's end); its logs go unless a failure names one."""
        if self._proc is not None:
            self._proc.stop(wait_s=10.0)
            self._proc = None
        if not self.aborted:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    # -- one check ------------------------------------------------------------------------

    def __call__(self, request: Request) -> Answer:
        """Run ``request`` in the worker; its answer, or the exception it raised (an
        exception that leaves no verdict), or :class:`CheckAborted`."""
        check = display_id(request.case, request.variant, request.device)
        if self.sanitizer is not None:
            return self._sanitized(request, check)
        if self._proc is None:
            self._proc = self._spawn(())
        self._ready(self._proc)
        proc = self._proc
        answer = self._answer(proc, request, check)
        if answer[0] == "done":
            self._merge_regen(answer[2])
            return answer[1]
        if answer[0] == "raised":
            raise answer[1]
        # The worker is gone or told to go: a new one boots now, for the next check.
        self._proc = None
        self.aborted += 1
        self.start()
        raise CheckAborted(answer[1])

    def _answer(self, proc: _Process, request: Request, check: str) -> tuple[Any, ...]:
        """Send ``request`` and wait for its answer within the time limits; a dead or stuck
        worker becomes an ``("aborted", Aborted)`` answer."""
        send(proc.connection, ("run", request))
        used = TimeUsed(self.limits, self.clock())
        while True:
            now = self.clock()
            remaining = used.remaining(now)
            if remaining is not None and remaining <= 0:
                proc.kill()  # the time reported is the one judged, not the kill's end
                return ("aborted", Aborted(TIMEOUT, check, used.phase, used.overrun(now),
                                           [LIMITS_LINE]))
            if not proc.connection.poll(remaining):
                continue
            try:
                message = receive(proc.connection)
            except (EOFError, OSError):
                return ("aborted", self._died(proc, check, used.phase))
            kind = message[0]
            if kind == "phase":
                used.enter(message[1], self.clock())
            elif kind == "progress":
                if self.progress is not None:
                    self.progress(message[1])
            else:
                if kind == "aborted":  # the worker exits by itself
                    try:
                        proc.proc.wait(timeout=10.0)
                    except subprocess.TimeoutExpired:
                        pass
                    proc.kill()
                    message[1].check = check
                    message[1].details += _log_lines(proc)
                return message

    def _died(self, proc: _Process, check: str, phase: str) -> Aborted:
        try:
            code = proc.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.proc.returncode
        proc.close()
        return Aborted(CRASH, check, phase, exit_error(code), _log_lines(proc))

    def _merge_regen(self, shipment: dict[str, dict[Any, Any]]) -> None:
        self.cases.regenerated.update(shipment["regenerated"])
        self.cases.regen_notes.update(shipment["regen_notes"])

    # -- under compute-sanitizer ------------------------------------------------------------

    def _sanitized(self, request: Request, check: str) -> Answer:
        """The check once per tool, each in a new worker under compute-sanitizer; the first
        run's result is the verdict of the numbers, every tool's errors are gathered."""
        assert self.sanitizer is not None
        result: Answer | None = None
        found: list[str] = []
        for tool in self.sanitizer.tools:
            log = Path(tempfile.mkstemp(prefix=f"{tool}-", suffix=".log", dir=self.log_dir)[1])
            proc = self._spawn(self.sanitizer.command(tool, log), self.sanitizer.env)
            try:
                self._ready(proc)
                answer = self._answer(proc, request, check)
            finally:
                if proc.proc.poll() is None:
                    proc.stop(wait_s=120.0)
            errors = self.sanitizer.errors(tool, log)
            found += errors
            if errors or answer[0] == "aborted":
                self.aborted += 1
            if answer[0] == "aborted":
                aborted = answer[1]
                if errors:
                    # memcheck stops a kernel at its first bad access, and the launch then
                    # fails: the access is the finding, the crash its consequence.
                    raise CheckAborted(Aborted(
                        SANITIZER, check, aborted.phase,
                        f"{len(errors)} error(s) from compute-sanitizer ({tool}), which "
                        f"stopped the kernel ({aborted.kind}: {aborted.error}); the first:",
                        errors[: self.sanitizer.shown]))
                raise CheckAborted(aborted)
            if answer[0] == "raised":
                raise answer[1]
            if result is None:
                self._merge_regen(answer[2])
                result = answer[1]
        assert result is not None
        if found:
            raise CheckAborted(Aborted(
                SANITIZER, check, "the whole check",
                f"{len(found)} error(s) from compute-sanitizer "
                f"({', '.join(self.sanitizer.tools)}); the first:", found[: self.sanitizer.shown]))
        return result


def _last_words(proc: _Process) -> str:
    """What a worker that failed to start left: its log's last lines, else its exit status."""
    return "\n".join(proc.lines()[-BOOT_LOG_TAIL:]) or exit_error(proc.proc.poll())


def _log_lines(proc: _Process) -> list[str]:
    """The worker log's lines a failure shows: a fatal error's Python stack (innermost
    frames first, where the variant is), else the log's last lines."""
    lines = proc.lines()
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")),
                 None)
    if fatal is not None:
        shown = [line for line in lines[fatal:]
                 if not line.startswith("Extension modules")][:LOG_TAIL]
    else:
        shown = lines[-LOG_TAIL:]
    if not shown:
        return []
    return [f"worker log:  {proc.log}", *(f"  | {line}" for line in shown)]
