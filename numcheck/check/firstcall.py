"""A check's first call of its variant, timed apart from everything else.

The first call of a kernel pays for what later calls do not: Triton compiles each new shape
(tens of seconds for kernels that take the token count or K as compile-time constants), CUDA
loads modules and creates handles, allocators warm up. numcheck times that call on its own
(:class:`FirstCallWatch`), keeps the figure in the check's result and record, and never lets
it into a speed measurement (the perf gate times later calls only). A first call that runs
longer than a few seconds says so while it runs, and once more when it ends, so that a run
compiling kernels never looks hung::

    numcheck: mhc_pre::v4flash-t64::liger_bf16[cuda]: first call still running after 5 s (compiling kernels?)
    numcheck: mhc_pre::v4flash-t64::liger_bf16[cuda]: first call took 31.4 s (compile and warm-up; never timed)

Pure of pytest: the plugin hands in the function that prints (:data:`Progress`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Self

from numcheck import phase

#: Where progress lines go (the plugin's terminal writer); None: nowhere.
Progress = Callable[[str], None]

#: Seconds after which a first call is announced, and reported when it ends. A few seconds:
#: longer than any first call of a precompiled kernel at the shipped case sizes, far
#: shorter than a Triton compile of a new shape.
DEFAULT_NOTE_S = 5.0


class FirstCallWatch:
    """Times one first call and announces it when it runs long.

    ``clock`` and ``sync`` are injectable (tests use a fake clock; ``sync`` waits for the
    device, so that a GPU first call's time includes its kernels, not only their launch).
    """

    def __init__(
        self, check_id: str, progress: Progress | None, *, note_after_s: float = DEFAULT_NOTE_S,
        clock: Callable[[], float] = time.perf_counter, sync: Callable[[], Any] | None = None,
        device: str = "cuda",
    ) -> None:
        self.check_id = check_id
        #: What a long first call is likely doing there: compiling on a GPU; on the CPU
        #: nothing compiles (Triton runs under its interpreter), so the variant is slow.
        self.why = ("compiling kernels?" if device != "cpu"
                    else "on the CPU nothing compiles: the variant itself is slow here")
        self.done = ("compile and warm-up" if device != "cpu" else "warm-up")
        self.progress = progress
        self.note_after_s = note_after_s
        self.clock = clock
        self.sync = sync
        self.seconds: float | None = None
        self.announced = threading.Event()
        self._start = 0.0
        self._timer: threading.Timer | None = None
        self._phase: Any = None

    def __enter__(self) -> Self:
        self._phase = phase.span(phase.FIRST_CALL)
        self._phase.__enter__()
        self._start = self.clock()
        if self.progress is not None:
            self._timer = threading.Timer(self.note_after_s, self._still_running)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _still_running(self) -> None:
        assert self.progress is not None
        self.progress(f"numcheck: {self.check_id}: first call still running after "
                      f"{self.note_after_s:g} s ({self.why})")
        self.announced.set()

    def __exit__(self, *exc: object) -> None:
        try:
            if self.sync is not None and exc[0] is None:
                self.sync()
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer.join()  # its line, if it is printing one, comes before ours
            self.seconds = self.clock() - self._start
            self._phase.__exit__(*exc)
        if self.progress is not None and (self.seconds >= self.note_after_s
                                          or self.announced.is_set()):
            self.progress(f"numcheck: {self.check_id}: first call took {self.seconds:.1f} s "
                          f"({self.done}; never timed)")


def device_sync(device: str) -> Callable[[], Any] | None:
    """What waits for ``device``'s queued work: CUDA's synchronize, nothing on the CPU."""
    if device != "cuda":
        return None
    import torch

    return torch.cuda.synchronize


def first_call_lines(records: Any, note_after_s: float = DEFAULT_NOTE_S) -> list[str]:
    """The summary's lines on first calls: the slowest one, and every one of at least
    ``note_after_s`` seconds, slowest first (records without the figure are left out)::

        numcheck first calls (compile and warm-up; never timed): slowest mhc_pre::...[cuda] 31.4 s; 1 over 5 s
          mhc_pre::v4flash-t64::liger_bf16[cuda]  31.4 s
    """
    timed = sorted(((r.first_call_s, r.id) for r in records
                    if getattr(r, "first_call_s", None) is not None), reverse=True)
    if not timed:
        return []
    slow = [(s, check) for s, check in timed if s >= note_after_s]
    # A CPU compiles nothing (Triton runs under its interpreter there): only warm-up.
    gpu = any(getattr(r, "device", "cuda") != "cpu" for r in records)
    what = "compile and warm-up" if gpu else "warm-up"
    lines = [f"numcheck first calls ({what}; never timed): slowest {timed[0][1]} "
             f"{_seconds(timed[0][0])}; {len(slow)} over {note_after_s:g} s"]
    width = max((len(check) for _, check in slow), default=0)
    lines += [f"  {check:<{width}}  {_seconds(s)}" for s, check in slow]
    return lines


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s >= 1 else f"{1e3 * s:.0f} ms"
