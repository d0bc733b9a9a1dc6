"""Checks run in worker processes, so that a check that crashes, hangs or runs out of
memory fails alone (docs/architecture.md, "Where a check is executed").

:class:`Isolated` is an :class:`~numcheck.execute.executor.Executor`: the run's items call it
as they call :class:`~numcheck.execute.executor.InProcess`. It keeps a pool of worker
processes (:mod:`numcheck.execute.worker`); the first starts as soon as the run knows its
checks and boots while pytest collects. The run dispatches its checks up front
(:meth:`Isolated.dispatch`): each worker that is free takes the next case whole, so a case's
inputs and golden are made once, in one worker; the cases the last run timed go longest
first (the others first of all, in the order given), so that no worker is left with a long
case while the others idle; an item's call waits for its own check's answer while every
worker is watched. A worker whose process
dies, whose CUDA context is lost, that runs out of memory or passes the check's time limit
is ended and replaced; the check it ran fails as
:class:`~numcheck.execute.aborted.CheckAborted`, with the phase it was in and the worker,
and the rest of its case goes to the next free worker.

The time limit counts the check's time outside its first call; the first call (compile and
warm-up) has an allowance of its own. Under ``sanitize`` each check runs in a worker of its
own, under compute-sanitizer (:mod:`numcheck.execute.sanitizer`), once per tool.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numcheck.execute.aborted import CRASH, SANITIZER, TIMEOUT, Aborted, CheckAborted, exit_error
from numcheck.execute.sanitizer import Sanitizer
from numcheck.execute.worker import WorkerSetup, receive, send
from numcheck.phase import DEVICE_WAIT, FIRST_CALL

# Nothing imported here imports torch: the run's first worker starts before the pytest
# process imports it (numcheck.plugin.isolation.start_early), so that both import it at once.
if TYPE_CHECKING:
    from numcheck.check.firstcall import Progress
    from numcheck.execute.case_cache import CaseCache
    from numcheck.execute.executor import Answer, Request

#: Seconds a new worker may take to import torch and register the variants.
BOOT_LIMIT_S = 600.0
#: Lines of a dead worker's log the failure shows.
LOG_TAIL = 12
#: Lines of the log of a worker that failed to start the error shows.
BOOT_LOG_TAIL = 40
#: Checks a worker is sent ahead: the one it runs, and the next.
AHEAD = 2
#: glibc's allocator, in a worker, where the environment does not say otherwise: freed
#: memory stays with the process for the next tensor, and buffers up to 32 MiB come from
#: the heap, instead of each large tensor costing fresh pages from the kernel (the CPU
#: gate's system time: 4.1 s with glibc's defaults, 1.6 s so). Other C libraries ignore them.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 30),
              "MALLOC_TOP_PAD_": str(256 << 20)}


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
    its own allowance, every other phase against the check's limit together, and a wait for
    the device (phase.DEVICE_WAIT: another check holds it) against none. Pure: the caller
    gives the clock's readings."""

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits = limits
        self.phase = ""
        self._start = now
        #: Seconds counted against the check's limit, before the current phase.
        self._spent = 0.0
        #: In the first call; waiting for the device (no limit counts it).
        self.in_first_call = self.waiting = False

    @property
    def limit(self) -> float | None:
        if self.waiting:
            return None
        return self.limits.first_call_s if self.in_first_call else self.limits.check_s

    def enter(self, phase: str, now: float) -> None:
        if not (self.in_first_call or self.waiting):
            self._spent += now - self._start
        self.phase, self._start = phase, now
        self.in_first_call, self.waiting = phase == FIRST_CALL, phase == DEVICE_WAIT

    def used(self, now: float) -> float:
        """Seconds counted against the current phase's limit."""
        if self.waiting:
            return self._spent
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


class WorkerProcess:
    """One worker process: its connection (a Unix socket, which a wrapper such as
    compute-sanitizer passes through whatever it does with file descriptors) and its log.
    Started, it imports torch, then waits for its setup (:meth:`accept`)."""

    def __init__(self, log_dir: Path, prefix: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)  # (a temp cleaner may have taken it)
        self.log = Path(tempfile.mkstemp(prefix="worker-", suffix=".log", dir=log_dir)[1])
        self.address = str(self.log.with_suffix(".sock"))
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(1)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", "numcheck.execute.worker", self.address],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**MALLOC_ENV, **os.environ, **(env or {})}, start_new_session=True,
                cwd=os.getcwd())
        self.conn: Connection | None = None
        self.ready = False
        #: When its boot is overdue (the pool's clock; 0: nothing has waited for it yet).
        self.deadline = 0.0

    def accept(self, setup: WorkerSetup) -> None:
        """Take the worker's connection (its listener is readable) and send it ``setup``,
        made now: what a conftest.py loaded since the worker started registers is in it."""
        sock, _ = self.listener.accept()
        self.conn = Connection(sock.detach())
        self.listener.close()
        send(self.conn, setup)

    @property
    def connection(self) -> Connection:
        """The connection to the worker (once it connected)."""
        assert self.conn is not None
        return self.conn

    def kill(self) -> None:
        if self.proc.returncode is None:  # (once reaped, its id may be another's)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for closable in (self.conn, self.listener):
            with contextlib.suppress(OSError):
                if closable is not None:
                    closable.close()
        Path(self.address).unlink(missing_ok=True)

    def stop(self, wait_s: float) -> None:
        """Ask the worker to end (its sanitizer then writes its summary); kill it if it
        does not within ``wait_s``."""
        if self.conn is not None:  # (one still booting has nothing to finish)
            with contextlib.suppress(OSError):
                send(self.conn, ("stop",), plain=True)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=wait_s)
        self.kill()

    def lines(self) -> list[str]:
        """The log's non-empty lines (none when it cannot be read)."""
        try:
            return [line for line in self.log.read_text(errors="replace").splitlines()
                    if line.strip()]
        except OSError:
            return []


@dataclass(eq=False)
class _Ticket:
    """A request on its way to a worker, and its answer once it came (``("done", answer,
    regen shipment)``, ``("raised", exc)`` or ``("aborted", Aborted)``)."""

    request: Request
    check: str
    answer: tuple[Any, ...] | None = None


@dataclass(eq=False)
class _Slot:
    """A place in the pool: its worker process (None until started, and after it was
    lost), the rest of the case it runs, and the checks sent to it."""

    number: int
    prefix: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    proc: WorkerProcess | None = None
    todo: deque[_Ticket] = field(default_factory=deque)
    #: When the worker began the check it runs (the pool's clock).
    began: float = 0.0
    #: The checks sent to it, in the order it runs them: the first is running (``used``
    #: counts its time), the next waits in the socket, so the worker never waits for the
    #: pytest process between two checks.
    sent: deque[_Ticket] = field(default_factory=deque)
    used: TimeUsed | None = None


@dataclass(eq=False)
class Isolated:
    """Executes each check in a pool of worker processes; see the module's docstring."""

    #: Made when a worker connects (after collection: every conftest.py is loaded).
    setup: Callable[[], WorkerSetup]
    #: The parent's cache: what the workers regenerated is reported from it.
    cases: CaseCache
    limits: Limits = Limits()
    #: How many workers run the dispatched checks (fewer when fewer cases are dispatched).
    workers: int = 1
    #: Each worker's torch intra-op threads (None: torch's default).
    threads: int | None = None
    progress: Progress | None = None
    sanitizer: Sanitizer | None = None
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(
        prefix="numcheck-workers-")))
    clock: Callable[[], float] = time.monotonic
    #: Each case's seconds in a worker in an earlier run (:func:`case_key`): the order in
    #: which the cases are dispatched.
    cost: dict[str, float] = field(default_factory=dict)
    #: Checks that ended without a verdict of their numbers (their logs are kept).
    aborted: int = field(default=0, init=False)
    #: Each case's seconds in a worker in this run, check by check as answers come.
    seconds: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._slots = [_Slot(1)]
        #: Dispatched cases no worker took yet, each a list of its checks in order.
        self._queue: deque[list[_Ticket]] = deque()
        #: Dispatched checks by their request's id (the ticket keeps the request alive).
        self._tickets: dict[int, _Ticket] = {}

    # -- the workers' lives ---------------------------------------------------------------

    def start(self, proc: WorkerProcess) -> None:
        """Take ``proc`` (started with its log in :attr:`log_dir`) as the first
        worker: it boots while the run collects its checks."""
        self._slots[0].proc = proc

    def dispatch(self, requests: Sequence[Request]) -> None:
        """Queue the run's checks, case by case in the order given, and start as many
        workers as there are cases (up to :attr:`workers`); each worker that is free takes
        the next case whole. A call for a request answers from its worker's result."""
        if self.sanitizer is not None:
            return
        cases: dict[str, list[_Ticket]] = {}
        for request in requests:
            ticket = self._tickets[id(request)] = _Ticket(request, _check(request))
            cases.setdefault(case_key(request), []).append(ticket)
        self._queue.extend(cases[key] for key in longest_first(list(cases), self.cost))
        while len(self._slots) < min(self.workers, len(cases)):
            self._slots.append(_Slot(len(self._slots) + 1))
        self._feed(self._slots, self._queue)

    def _spawn(self, slot: _Slot) -> None:
        slot.proc = WorkerProcess(self.log_dir, slot.prefix, slot.env)

    def _booted(self, slot: _Slot) -> None:
        """The booting worker of ``slot`` spoke: take its connection, or its word."""
        proc = slot.proc
        assert proc is not None
        if proc.conn is None:
            proc.accept(replace(self.setup(), threads=self.threads))
            return
        try:
            message = receive(proc.connection)
        except (EOFError, OSError):
            message = ("failed", _last_words(proc))
        if message[0] != "ready":
            self._lose(slot)
            raise IsolationError(
                "numcheck: the check worker process could not start; it said:\n"
                f"{message[1]}\n"
                "Fix: register your ops from a conftest.py hook or an entry point (the "
                "worker imports those again), or run the checks in the pytest process "
                "with --numcheck-isolate=off")
        proc.ready = True

    def _lose(self, slot: _Slot, aborted: Aborted | None = None) -> None:
        """End ``slot``'s worker; its check in flight ends as ``aborted``, the rest of its
        case goes back to the front of the queue for the next free worker."""
        proc = slot.proc
        assert proc is not None
        proc.kill()
        if slot.sent and aborted is not None:
            self.aborted += 1
            if slot in self._slots:  # (not a sanitized check's worker of its own)
                aborted.worker = f"{slot.number} of {len(self._slots)} (pid {proc.proc.pid})"
            slot.sent.popleft().answer = ("aborted", aborted)
        if slot.sent or slot.todo:
            self._queue.appendleft([*slot.sent, *slot.todo])
        slot.proc, slot.used = None, None
        slot.sent.clear()
        slot.todo.clear()

    def close(self) -> None:
        """End the workers (the run's end); their logs go unless a failure names one."""
        for slot in self._slots:
            if slot.proc is not None:
                # Nothing of theirs is left to keep (their answers came; a check still
                # running is one the run no longer waits for, after pytest -x), and a
                # worker's interpreter takes a second to end by itself.
                slot.proc.kill()
                slot.proc = None
        self._queue.clear()
        self._tickets.clear()
        if not self.aborted:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    # -- the checks -----------------------------------------------------------------------

    def __call__(self, request: Request) -> Answer:
        """``request``'s answer from a worker, or the exception it raised (an exception
        that leaves no verdict), or :class:`CheckAborted`. A request not dispatched runs
        next."""
        if self.sanitizer is not None:
            return self._sanitized(request, _check(request))
        ticket = self._tickets.pop(id(request), None)
        if ticket is None:
            ticket = _Ticket(request, _check(request))
            self._queue.appendleft([ticket])
        self._serve(ticket, self._slots, self._queue)
        assert ticket.answer is not None
        kind, *rest = ticket.answer
        if kind == "done":
            self._merge_regen(rest[1])
            return rest[0]
        raise rest[0] if kind == "raised" else CheckAborted(rest[0])

    def _feed(self, slots: Sequence[_Slot], queue: deque[list[_Ticket]]) -> None:
        """Send each worker its case's next checks (:data:`AHEAD`), taking the next case
        when its own is done (a free worker first); start a worker where a slot has work
        and none."""
        for ahead, slot in [(n, slot) for n in (1, AHEAD) for slot in slots]:
            while len(slot.sent) < ahead and (slot.todo or queue):
                if not slot.todo:
                    slot.todo.extend(queue.popleft())
                if slot.proc is None:
                    self._spawn(slot)
                assert slot.proc is not None
                if not slot.proc.ready:
                    break
                slot.sent.append(slot.todo.popleft())
                if slot.used is None:
                    slot.used = TimeUsed(self.limits, self.clock())
                    slot.began = self.clock()
                try:
                    send(slot.proc.connection, ("run", slot.sent[-1].request), plain=True)
                except OSError:  # it died
                    self._lose(slot, self._died(slot.proc, slot.sent[0].check, slot.used.phase))
                    break

    def _serve(self, until: _Ticket, slots: Sequence[_Slot],
               queue: deque[list[_Ticket]]) -> None:
        """Keep the workers of ``slots`` busy until ``until`` has its answer, watching them
        all at once up to the nearest time limit: a hang or a crash in one is seen while
        the answer awaited comes from another."""
        while True:
            self._feed(slots, queue)
            if until.answer is not None:
                return
            now = self.clock()
            watched: dict[Any, _Slot] = {}
            waits: list[float] = []
            for slot in slots:
                proc = slot.proc
                if proc is None or proc.ready and not slot.sent:
                    continue  # nothing to hear from it
                if slot.sent:
                    assert slot.used is not None
                    left = slot.used.remaining(now)
                    if left is not None and left <= 0:
                        # The time reported is the one judged, not the kill's end.
                        self._lose(slot, Aborted(TIMEOUT, slot.sent[0].check, slot.used.phase,
                                                 slot.used.overrun(now), [LIMITS_LINE]))
                        break
                else:  # its boot, counted from when the run first waits for it
                    proc.deadline = proc.deadline or now + BOOT_LIMIT_S
                    left = proc.deadline - now
                    if left <= 0 or proc.conn is None and proc.proc.poll() is not None:
                        alive = proc.proc.poll() is None
                        self._lose(slot)
                        raise IsolationError(
                            "numcheck: the check worker process " + (
                                f"did not start within {BOOT_LIMIT_S:g} s" if alive
                                else "died starting") + f"; its log ({proc.log}):\n"
                            f"{_last_words(proc)}")
                    if proc.conn is None:
                        left = min(left, 1.0)  # a worker that dies before it connects
                waits += [] if left is None else [left]
                watched[proc.conn or proc.listener] = slot
            else:
                assert watched, f"{until.check}: dispatched to no worker"
                for ready in wait(list(watched), min(waits, default=None)):
                    self._hear(watched[ready])

    def _hear(self, slot: _Slot) -> None:
        """One message from ``slot``'s worker: its boot, a phase, a progress line, or the
        answer of its check in flight (or its end)."""
        proc, used = slot.proc, slot.used
        assert proc is not None
        if not slot.sent or used is None:
            self._booted(slot)
            return
        ticket = slot.sent[0]
        try:
            message = receive(proc.connection)
        except (EOFError, OSError):
            self._lose(slot, self._died(proc, ticket.check, used.phase))
            return
        kind = message[0]
        if kind == "phase":
            used.enter(message[1], self.clock())
        elif kind == "progress":
            if self.progress is not None:
                self.progress(message[1])
        elif kind == "aborted":  # the worker exits by itself
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.proc.wait(timeout=10.0)
            message[1].check = ticket.check
            message[1].details += _log_lines(proc)
            self._lose(slot, message[1])
        else:  # its answer: the worker goes on with the next check sent, now
            done, now = slot.sent.popleft(), self.clock()
            done.answer = message
            key = case_key(done.request)
            self.seconds[key] = self.seconds.get(key, 0.0) + now - slot.began
            slot.used, slot.began = (TimeUsed(self.limits, now) if slot.sent else None), now

    def _died(self, proc: WorkerProcess, check: str, phase: str) -> Aborted:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.proc.wait(timeout=30)
        proc.kill()
        return Aborted(CRASH, check, phase, exit_error(proc.proc.returncode), _log_lines(proc))

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
            slot = _Slot(1, self.sanitizer.command(tool, log), self.sanitizer.env)
            ticket = _Ticket(request, check)
            slot.todo.append(ticket)
            try:
                self._serve(ticket, [slot], deque())
            finally:
                if slot.proc is not None and slot.proc.proc.poll() is None:
                    slot.proc.stop(wait_s=120.0)
            assert ticket.answer is not None
            errors = self.sanitizer.errors(tool, log)
            found += errors
            kind, *rest = ticket.answer
            if kind == "aborted":
                aborted = rest[0]
                if errors:
                    # memcheck stops a kernel at its first bad access, and the launch then
                    # fails: the access is the finding, the crash its consequence.
                    raise CheckAborted(Aborted(
                        SANITIZER, check, aborted.phase,
                        f"{len(errors)} error(s) from compute-sanitizer ({tool}), which "
                        f"stopped the kernel ({aborted.kind}: {aborted.error}); the first:",
                        errors[: self.sanitizer.shown]))
                raise CheckAborted(aborted)
            self.aborted += bool(errors)
            if kind == "raised":
                raise rest[0]
            if result is None:
                self._merge_regen(rest[1])
                result = rest[0]
        assert result is not None
        if found:
            raise CheckAborted(Aborted(
                SANITIZER, check, "the whole check",
                f"{len(found)} error(s) from compute-sanitizer "
                f"({', '.join(self.sanitizer.tools)}); the first:", found[: self.sanitizer.shown]))
        return result


def case_key(request: Request) -> str:
    """``source::case id``: what a worker takes whole, and what its seconds are kept by."""
    return f"{request.case.source}::{request.case.id}"


def longest_first(keys: list[str], cost: dict[str, float]) -> list[str]:
    """``keys`` in dispatch order: those without a cost first, as given (a new case may be
    long), then the rest longest first (ties as given)."""
    order = {key: i for i, key in enumerate(keys)}
    return sorted(keys, key=lambda k: (k in cost, -cost.get(k, 0.0), order[k]))


def _check(request: Request) -> str:
    from numcheck.check.result import display_id

    return display_id(request.case, request.variant, request.device)


def _last_words(proc: WorkerProcess) -> str:
    """What a worker that failed to start left: its log's last lines, else its exit status."""
    return "\n".join(proc.lines()[-BOOT_LOG_TAIL:]) or exit_error(proc.proc.poll())


def _log_lines(proc: WorkerProcess) -> list[str]:
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
