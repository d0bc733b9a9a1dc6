"""A worker process of an isolated run: it runs checks one at a time for the pytest
process that started it (:mod:`numcheck.execute.isolated`) and answers with their results.

Started as ``python -m numcheck.execute.worker SOCKET`` (under compute-sanitizer when the
run asks for it), it connects to the pytest process's Unix socket and reads a :class:`WorkerSetup` first: the parent's import path,
the modules whose ``pytest_numcheck_register`` hook (or import) registered variants, and
what the run's executor needs. It registers the same ops and variants as the parent, builds
an :class:`~numcheck.execute.executor.InProcess` executor of its own, says it is ready, and
then runs the requests it is sent (checks, or a calibration's measure requests). While one
runs it tells the parent each phase (:mod:`numcheck.phase`) and each progress line (a
first call that runs long); a request ends with its answer, the exception that left no verdict, or an :class:`Aborted` (the CUDA
context lost, out of memory), after which this process exits: a new one runs the next
check. A crash or a hang needs no cooperation from here: the parent sees the socket close or
the time limit pass.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import io
import os
import pickle
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numcheck import phase
from numcheck.execute.aborted import (
    CRASH,
    OOM,
    Aborted,
    bytes_asked,
    chain,
    kind_of,
    megabytes_text,
    root_error,
)

if TYPE_CHECKING:
    from numcheck.execute.executor import Answer, Request


@dataclass(frozen=True)
class WorkerSetup:
    """What the worker needs to run the parent's checks (plain, picklable data)."""

    sys_path: list[str]
    #: (module name, file) of each module whose hook registered ops or variants, in order.
    plugins: list[tuple[str, str | None]]
    device: str
    #: The GPU this worker uses (the parent's, under pytest-xdist); None: the default.
    device_index: int | None
    goldens_dir: Path
    regen: bool
    gates: frozenset[str]
    explain: bool
    sections_enabled: bool
    first_call_note_s: float
    obtained_dir: Path
    root: Path
    #: torch's intra-op threads in this worker (None: torch's default).
    threads: int | None = None


class Worker:
    """This process's executor, caches and connection to the parent."""

    def __init__(self, setup: WorkerSetup, send: Callable[..., None]) -> None:
        from numcheck.execute.case_cache import CaseCache
        from numcheck.execute.executor import InProcess
        from numcheck.perf.sections import DeviceSections

        self.setup = setup
        self.send = send
        self.cases = CaseCache(setup.goldens_dir, setup.device, regen=setup.regen)
        self.sections = DeviceSections(setup.device, enabled=setup.sections_enabled)
        self.executor = InProcess(
            self.cases, gates=setup.gates, explain=setup.explain, sections=self.sections,
            progress=lambda line: send(("progress", line), True),
            first_call_note_s=setup.first_call_note_s, obtained_dir=setup.obtained_dir,
            root=setup.root)
        #: One Case object per case: the caches key on the object, and each request
        #: arrives as a new copy.
        self._cases: dict[tuple[str, str], Any] = {}

    def run(self, request: Request) -> Answer:
        """``request``'s answer from this process's executor, on the first copy received of
        its case (so its inputs and envelopes are made once); a check's output tensors stay
        here (a failed check's are in its obtained file already)."""
        case = self._cases.setdefault((str(request.case.source), request.case.id), request.case)
        answer = self.executor(replace(request, case=case))
        for seed in getattr(answer, "seeds", ()):
            seed.outputs = None
        return answer

    def regen_shipment(self) -> dict[str, dict[str, Any]]:
        """The goldens this worker regenerated, for the parent's summary."""
        return {"regenerated": dict(self.cases.regenerated),
                "regen_notes": dict(self.cases.regen_notes)}


def register(setup: WorkerSetup) -> None:
    """Register what the parent registered: installed packages' entry points, then each
    plugin module's ``pytest_numcheck_register`` hook (importing the module registers what
    it registers at import)."""
    from numcheck.honest.gemm_family import complete_members
    from numcheck.ops import registry

    registry.load_entry_points()
    for name, file in setup.plugins:
        module = _import(name, file)
        hook = getattr(module, "pytest_numcheck_register", None)
        if hook is not None:
            hook(registry=registry.Registrar("a pytest_numcheck_register hook"))
    complete_members()  # as the parent's collection did


def _import(name: str, file: str | None) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    if file is not None:
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
    return importlib.import_module(name)


def cuda_context_lost(device: str) -> bool:
    """Whether this process's CUDA context is lost (a synchronize and an allocation fail)."""
    if device != "cuda":
        return False
    import torch

    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
    except Exception:
        return True
    return False


def free_bytes(device: str) -> int | None:
    """Bytes free on the device now: the GPU's (when its context still works), else the
    machine's available memory."""
    if device == "cuda":
        import torch

        try:
            return int(torch.cuda.mem_get_info()[0])
        except Exception:
            return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def kind_in(exc: BaseException, device: str) -> str | None:
    """What ``exc`` does to this worker: CRASH when the CUDA context is lost (probed on a
    CUDA run; read from the error's text otherwise), OOM for an allocator's error, None for
    an ordinary error that leaves the process healthy."""
    kind = kind_of(exc)
    if device != "cuda":
        return kind
    if cuda_context_lost(device):
        return CRASH
    return OOM if kind == OOM else None  # a CUDA error that left the context working


def run_job(worker: Worker, request: Request) -> tuple[tuple[Any, ...], bool]:
    """Run one request; the answer to send, and whether this process must end after it. An
    aborted answer names no check: the pytest process knows which it sent."""
    try:
        with phase.listening(lambda name: worker.send(("phase", name), True)):
            value = worker.run(request)
    except Exception as exc:  # every exception leaves this check; which ones end the worker
        device = worker.setup.device
        kind = kind_in(exc, device)
        if kind is None:
            return ("raised", _portable(exc)), False
        details = []
        if kind == OOM:
            text = " ".join(f"{type(e).__name__}: {e}" for e in chain(exc))
            details = [f"asked:       {megabytes_text(bytes_asked(text))}",
                       f"free:        {megabytes_text(free_bytes(device))} on {device}"]
        return ("aborted", Aborted(kind, "", phase.raised_in(exc), root_error(exc),
                                   details)), True
    return ("done", value, worker.regen_shipment()), False


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def send(conn: Connection, message: Any, *, plain: bool = False) -> None:
    """Send ``message``: a ``plain`` one (no tensors: a phase, a progress line, a request) by
    pickle, anything else (results: tensors, a cast ledger) as torch.save's bytes, because
    multiprocessing's own pickler would share tensors' memory through a server that only
    processes of one multiprocessing family can reach, and the plain pickle cannot rebuild
    every storage. The first byte says which."""
    if plain:
        conn.send_bytes(b"P" + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        return
    import torch

    buffer = io.BytesIO(b"T")
    buffer.seek(1)
    torch.save(message, buffer)
    conn.send_bytes(buffer.getvalue())


def receive(conn: Connection) -> Any:
    """What :func:`send` sent (EOFError when the other side is gone)."""
    data = conn.recv_bytes()
    if data[:1] == b"P":
        return pickle.loads(data[1:])
    import torch

    return torch.load(io.BytesIO(data[1:]), weights_only=False)


def serve(conn: Connection) -> int:
    """Read the setup, then requests until told to stop or one ends this process."""
    setup: WorkerSetup = receive(conn)
    sys.path[:] = setup.sys_path
    try:
        import torch

        if setup.threads is not None:  # the run's workers share the cores
            torch.set_num_threads(setup.threads)
        if setup.device == "cuda" and setup.device_index is not None:
            torch.cuda.set_device(setup.device_index)
        register(setup)
        worker = Worker(setup, lambda message, plain=False: send(conn, message, plain=plain))
    except BaseException as exc:
        import traceback

        send(conn, ("failed", "".join(traceback.format_exception(exc)).strip()))
        return 2
    send(conn, ("ready", os.getpid()), plain=True)
    while True:
        try:
            message = receive(conn)
        except EOFError:  # the parent is gone
            return 0
        if message[0] == "stop":
            return 0
        answer, end = run_job(worker, message[1])
        send(conn, answer)
        if end:
            # At once: a process whose CUDA context is lost can hang in its own teardown.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(3)


def main(argv: list[str]) -> int:
    faulthandler.enable()  # a segfault prints the Python stack into the worker's log
    # torch and the checks' code load first, while the pytest process starts: it sends the
    # setup once it knows its checks (this module imports neither, so that it can start
    # workers before it imports torch itself).
    import numcheck.check  # noqa: F401
    # Whatever the checks print goes to the log (stdout and stderr), never to the socket.
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(argv[0])
    return serve(Connection(sock.detach()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
