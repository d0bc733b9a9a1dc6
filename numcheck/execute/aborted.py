"""A check that ended without a verdict of its numbers: its process crashed, it ran past its
time limit, it ran out of memory, or the memory checker found errors in its kernels.

An isolated run (:mod:`numcheck.execute.isolated`) turns each of these into an
:class:`Aborted`: the kind, the phase the check was in (:mod:`numcheck.phase`), the
error, and what it means for the run. The item raises it as :class:`CheckAborted`, whose
message is the failure the user reads; the record keeps the kind as its ``error_kind``.

The classification of an exception (:func:`kind_of`) is pure text and type names, so that
it is the same in the worker that saw the exception and in the tests that plant one.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from numcheck.errors import reduce_whole

#: The kinds, as the first word of the failure and the record's ``error_kind``.
CRASH = "CRASH"
TIMEOUT = "TIMEOUT"
OOM = "OOM"
SANITIZER = "SANITIZER"
KINDS = (CRASH, TIMEOUT, OOM, SANITIZER)

#: What an error of the CUDA runtime says when the context is lost: after any of these every
#: later CUDA call of the process fails, so the worker that saw it is ended.
CONTEXT_LOST = (
    "device-side assert",
    "illegal memory access",
    "misaligned address",
    "illegal instruction",
    "unspecified launch failure",
    "an illegal address",
    "cudaErrorLaunchFailure",
    "CUDA error: ",
    "CUDA_ERROR_",
    "launch timed out",
    "hardware stack error",
)
#: What an allocator says when it is out of memory (torch's CUDA and CPU allocators).
OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "OutOfMemoryError")

MEANINGS = {
    CRASH: "the check's process died or its CUDA context is lost (the variant's kernel "
           "faulted); the run went on in a new worker process, and no other check saw it",
    TIMEOUT: "the check ran past its time limit; its worker process was ended and the run "
             "went on in a new one",
    OOM: "the variant asked for more memory than the device had free; the run went on in a "
         "new worker process",
    SANITIZER: "compute-sanitizer found memory or synchronisation errors in the check's "
               "kernels (its numbers may still match: the error is in what the kernel "
               "touched, not in what it returned)",
}


@dataclass
class Aborted:
    """Why a check ended without a verdict of its numbers."""

    kind: str
    check: str
    phase: str
    error: str
    #: Further lines: the allocator's figures, the sanitizer's first errors, the worker's
    #: last output lines.
    details: list[str] = field(default_factory=list)
    #: Which of the run's workers it ran in (``2 of 2 (pid 123)``), when one did.
    worker: str = ""

    @property
    def meaning(self) -> str:
        return MEANINGS[self.kind]

    def lines(self) -> list[str]:
        """The failure's head: the kind and check, then phase, error and meaning."""
        out = [f"numcheck {self.kind} {self.check}",
               f"  phase:       {self.phase or 'before the check began'}",
               *([f"  worker:      {self.worker}"] if self.worker else []),
               f"  error:       {self.error}",
               f"  means:       {self.meaning}"]
        out += [f"  {line}" for line in self.details]
        return out


class CheckAborted(Exception):
    """Raised by the item for an :class:`Aborted` check; the message is its lines."""

    __reduce__ = reduce_whole

    def __init__(self, aborted: Aborted) -> None:
        super().__init__("\n".join(aborted.lines()))
        self.aborted = aborted


def chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes and contexts, outermost first (no cycles)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and all(cur is not s for s in seen):
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def kind_of(exc: BaseException) -> str | None:
    """OOM for an allocator's out-of-memory error anywhere in ``exc``'s chain, CRASH for an
    error that leaves the CUDA context lost, None for an ordinary exception."""
    texts = [f"{type(e).__name__}: {e}" for e in chain(exc)]
    if any(m in t for t in texts for m in OUT_OF_MEMORY):
        return OOM
    if any(m in t for t in texts for m in CONTEXT_LOST):
        return CRASH
    return None


def root_error(exc: BaseException) -> str:
    """The innermost error of ``exc``'s chain, on one line, as ``Type: message``."""
    inner = chain(exc)[-1]
    text = " ".join(str(inner).split())
    return f"{type(inner).__name__}: {text}"[:600]


_BYTES = re.compile(r"(?:allocate|you tried to allocate)\s+([\d.]+)\s*(bytes|[KMGT]iB|B)?",
                    re.IGNORECASE)
_UNITS = {"bytes": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def bytes_asked(text: str) -> int | None:
    """The bytes an allocator's out-of-memory message says were asked for, if it says."""
    m = _BYTES.search(text)
    if m is None:
        return None
    unit = (m.group(2) or "bytes").lower()
    return int(float(m.group(1)) * _UNITS.get(unit, 1))


def exit_error(returncode: int | None) -> str:
    """What a worker's exit status says: the signal that killed it, or its exit code."""
    if returncode is None:
        return "the worker process stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the worker process was killed by {name}"
    return f"the worker process exited with status {returncode}"


def megabytes_text(n: int | None) -> str:
    """Bytes as the failure shows them (``2.15 GB (2147483648 bytes)``)."""
    if n is None:
        return "unknown"
    return f"{n / 1e9:.2f} GB ({n} bytes)"
