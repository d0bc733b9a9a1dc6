"""Variants that crash, hang or run out of memory, for tests/test_isolation.py.

Each is an ``mhc_pre`` variant of the bf16 class; ``honest`` is numcheck's own bf16 path.
They are registered by a test project's conftest.py, so that the worker process of an
isolated run imports and registers them as the pytest process did.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch

from numcheck import phase
from numcheck.ops import mhc
from numcheck.ops.spec import Inputs, Outputs, Params


def honest(inputs: Inputs, p: Params) -> Outputs:
    return mhc.bf16(inputs, p)


def exits(inputs: Inputs, p: Params) -> Outputs:
    """Ends its own process, as an extension calling exit() does."""
    os._exit(3)


def segfault(inputs: Inputs, p: Params) -> Outputs:
    """Dies of SIGSEGV, as an extension reading a wild pointer does."""
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(60)
    raise AssertionError("unreachable")


def hangs(inputs: Inputs, p: Params) -> Outputs:
    """Never returns (a kernel waiting on a flag nobody sets)."""
    while True:
        time.sleep(1)


def oom(inputs: Inputs, p: Params) -> Outputs:
    """Asks the allocator for 4 EiB: its out-of-memory error, at once, with nothing used."""
    torch.empty(2**62, dtype=torch.uint8)
    raise AssertionError("unreachable")


def context_lost(inputs: Inputs, p: Params) -> Outputs:
    """What torch raises after a kernel faulted: the CUDA context is lost."""
    raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel "
                       "errors might be asynchronously reported at some other API call")


def raises(inputs: Inputs, p: Params) -> Outputs:
    """An ordinary bug: an exception that leaves the process healthy."""
    raise ValueError("shape mismatch in my kernel")


def slow_first_call(inputs: Inputs, p: Params) -> Outputs:
    """A first call that compiles for SLOW_FIRST_CALL_S seconds (once per process)."""
    global _compiled
    if not _compiled:
        time.sleep(float(os.environ.get("SLOW_FIRST_CALL_S", "6")))
        _compiled = True
    return mhc.bf16(inputs, p)


_compiled = False


def where(inputs: Inputs, p: Params) -> Outputs:
    """Honest, and writes the id of the process that ran it into $WHERE_FILE."""
    Path(os.environ["WHERE_FILE"]).write_text(str(os.getpid()))
    return mhc.bf16(inputs, p)


def killed_when_timed(inputs: Inputs, p: Params) -> Outputs:
    """Honest everywhere but in the perf gate's timing (phase "timing"), where it is killed
    by SIGKILL (as the kernel's OOM killer ends a process) at its second call: the first
    there (measure_perf's check of the outputs) returns, the second (the timer's warm-up)
    never does."""
    global _timed_calls
    if phase.current() == "timing":
        _timed_calls += 1
        if _timed_calls >= 2:
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)
            raise AssertionError("unreachable")
    return mhc.bf16(inputs, p)


_timed_calls = 0


def logs_where(inputs: Inputs, p: Params) -> Outputs:
    """Honest, and appends a line to $WHERE_FILE per call: the process that ran it, its
    torch threads and the case's token count (which case it was)."""
    with open(os.environ["WHERE_FILE"], "a") as log:
        log.write(f"{os.getpid()} {torch.get_num_threads()} {inputs['x'].shape[0]}\n")
    return mhc.bf16(inputs, p)


def hangs_later(inputs: Inputs, p: Params) -> Outputs:
    """Honest at its first call; at its second (the numerics' first seed) it writes its
    process id to $HANG_FILE and never returns."""
    global _later_calls
    _later_calls += 1
    if _later_calls == 1:
        return mhc.bf16(inputs, p)
    flag = Path(os.environ["HANG_FILE"])
    flag.with_suffix(".tmp").write_text(str(os.getpid()))
    flag.with_suffix(".tmp").rename(flag)  # (whole, for the reader)
    while True:
        time.sleep(1)


_later_calls = 0


def waits_for_hang_end(inputs: Inputs, p: Params) -> Outputs:
    """Honest, once ``hangs_later`` (in another worker process) hangs and its process has
    been ended: a run that did not watch that worker while it waited for this one would
    wait here forever (300 s, then it raises)."""
    flag = Path(os.environ["HANG_FILE"])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if flag.exists():
            try:
                os.kill(int(flag.read_text()), 0)
            except ProcessLookupError:
                return mhc.bf16(inputs, p)
        time.sleep(0.05)
    raise RuntimeError("the hanging variant's worker was never ended")


NAMES = ("honest", "exits", "segfault", "hangs", "oom", "context_lost", "raises",
         "slow_first_call", "where", "killed_when_timed", "logs_where", "hangs_later",
         "waits_for_hang_end")
