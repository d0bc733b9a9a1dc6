"""Spreading many independent pieces of work (reading reports, drawing plots) over cores.

A history of hundreds of reports is mostly JSON parsing and matplotlib drawing, both
CPU-bound Python that one process cannot share between cores. Small jobs stay in this
process: starting workers costs more than they save.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector. Building tens of thousands of small objects
    (records read from 500 reports) makes it walk the growing heap again and again: 0.6 s of
    the 0.9 s it takes to unpickle 500 runs' records. Records hold no reference cycles, so
    reference counting frees them without it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def default_jobs() -> int:
    """The cores this process may use (its CPU affinity where the platform has one), up to 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def start_method() -> str:
    """``fork`` where the platform has it and this process runs no other thread: a forked
    worker starts in milliseconds with every module already imported (a fresh one spends
    about half a second importing matplotlib and numcheck). A process with threads (any
    Python thread, or torch's pools once torch is imported: a test, a notebook) may hold a
    lock that a forked child would wait on forever, so there workers start fresh
    (``spawn``)."""
    if ("fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
            and "torch" not in sys.modules):
        return "fork"
    return "spawn"


def parallel_map(fn: Callable[[T], R], items: Sequence[T], *, jobs: int | None = None,
                 min_items: int = 16) -> list[R]:
    """``[fn(x) for x in items]``, in order, over ``jobs`` worker processes when there are at
    least ``min_items`` items (else, or with ``jobs`` <= 1, in this process).

    ``fn`` must be a module-level function and its arguments and results picklable.
    Workers are forked from this process when that is safe (:func:`start_method`), else
    started fresh.
    """
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 1 or len(items) < min_items:
        return [fn(x) for x in items]
    jobs = min(jobs, len(items))
    # A few chunks per worker: even work without a round trip per item.
    chunk = max(1, len(items) // (jobs * 4))
    context = multiprocessing.get_context(start_method())
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            return list(pool.map(fn, items, chunksize=chunk))
    except BrokenProcessPool:
        # A worker could not start (spawn re-imports the main script, and a script read
        # from stdin cannot be) or was killed: the same work, here.
        return [fn(x) for x in items]
