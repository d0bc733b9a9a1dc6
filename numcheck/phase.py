"""Which part of a check is running: the phase a crash, a time limit or an out-of-memory
error is reported in.

A check goes through phases: its golden and inputs, the variant's one-time preparation,
its first call (compile and warm-up), the numerics of each seed, the invariance gates, the
timing, the cast and kernel ledger. The code that runs them says where it is with
:func:`span`; a listener (the worker process of an isolated run,
:mod:`numcheck.execute.worker`) hears each change and tells the run, so that a check whose
process dies, or that never returns, is reported in the phase it was in.

Pure: no torch, no pytest; with no listener, a phase change costs a function call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

#: The phase of a variant's first call (compile and warm-up: a time allowance of its own).
FIRST_CALL = "first call"
#: The phase of a check waiting for its device (numcheck.perf.sections): for another
#: process's timed section, or for the numerics before its own. No time limit counts it: a
#: check that hangs while holding the device is ended by its own limit, which frees it.
DEVICE_WAIT = "waiting for the device"

#: Hears every phase change (the name of the phase entered); None: nobody listens.
Listener = Callable[[str], None]

_listener: Listener | None = None
#: The attribute an exception leaving a phase carries: the innermost phase it left.
PHASE_ATTR = "numcheck_phase"
_current = ""


def current() -> str:
    """The phase this process is in ("" outside any check)."""
    return _current


def raised_in(exc: BaseException) -> str:
    """The phase ``exc`` was raised in ("" when it left no span)."""
    return str(getattr(exc, PHASE_ATTR, "") or "")


def enter(name: str) -> None:
    """Enter phase ``name`` (the listener hears it)."""
    global _current
    _current = name
    if _listener is not None:
        _listener(name)


@contextlib.contextmanager
def span(name: str) -> Iterator[None]:
    """Phase ``name`` for the body; the phase before it again afterwards."""
    before = _current
    enter(name)
    try:
        yield
    except BaseException as exc:
        # Where it was raised, for whoever reports it once the phases have unwound.
        if getattr(exc, PHASE_ATTR, None) is None:
            with contextlib.suppress(AttributeError):
                setattr(exc, PHASE_ATTR, _current)
        raise
    finally:
        enter(before)  # heard: the run then counts the time of the phase it is back in


@contextlib.contextmanager
def listening(listener: Listener | None) -> Iterator[None]:
    """``listener`` hears the phase changes made in the body."""
    global _listener
    before = _listener
    _listener = listener
    try:
        yield
    finally:
        _listener = before
