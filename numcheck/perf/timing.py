"""Timers: a reference and a variant timed interleaved in one process, correctly on GPU.

On CUDA each call is bracketed by CUDA events (device time, not host time: a launch
returns before the kernel ends), after warm-up calls, and the host waits for the events
once per round. Optional: a cold L2 (a buffer larger than L2 is overwritten before every
call, so neither op finds its operands cached by the other), and CUDA-graph replay (for
launch-bound shapes: the Python and launch overhead disappears, only kernels remain).
On the CPU, ``time.perf_counter`` brackets each call.

Order alternates each round (A B, B A, ...) so neither op always runs first after a
sync or a flush, and drift (clocks, thermals) lands on both members of a pair.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

#: Bytes written to evict L2 before a cold-L2 call: larger than any current L2 (H200: 60 MiB).
L2_FLUSH_BYTES = 256 * 2**20


@dataclass(frozen=True)
class TimingConfig:
    """How to time one (case, variant) pair; case files set these under ``perf``."""

    rounds: int = 30
    warmup: int = 3
    cold_l2: bool = False
    cuda_graph: bool = False


@dataclass
class PairedTimes:
    """Per-round seconds of the reference and the variant, round ``i`` in both lists."""

    reference: list[float] = field(default_factory=list)
    variant: list[float] = field(default_factory=list)
    timer: str = ""
    notes: list[str] = field(default_factory=list)


class TimingError(Exception):
    """A callable could not be timed as asked (e.g. a CUDA graph capture failed)."""


Fn = Callable[[], object]


def time_interleaved(
    reference: Fn, variant: Fn, device: str, config: TimingConfig
) -> PairedTimes:
    """Time ``reference`` and ``variant`` for ``config.rounds`` interleaved rounds.

    Both are zero-argument callables with their inputs already on ``device``.
    """
    if config.rounds < 1 or config.warmup < 0:
        raise ValueError(f"time_interleaved: need rounds >= 1 and warmup >= 0, got {config}")
    if device == "cuda":
        return _time_cuda(reference, variant, config)
    if device == "cpu":
        return _time_cpu(reference, variant, config)
    raise ValueError(f"time_interleaved: unknown device {device!r}")


def _time_cpu(reference: Fn, variant: Fn, config: TimingConfig) -> PairedTimes:
    out = PairedTimes(timer="time.perf_counter")
    if config.cold_l2:
        out.notes.append("cold_l2 ignored on cpu")
    if config.cuda_graph:
        out.notes.append("cuda_graph ignored on cpu")
    for _ in range(config.warmup):
        reference()
        variant()
    for i in range(config.rounds):
        order = ((reference, out.reference), (variant, out.variant))
        for fn, sink in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            sink.append(time.perf_counter() - start)
    return out


def _time_cuda(reference: Fn, variant: Fn, config: TimingConfig) -> PairedTimes:
    out = PairedTimes(timer="torch.cuda.Event")
    torch.cuda.synchronize()
    for _ in range(config.warmup):
        reference()
        variant()
    torch.cuda.synchronize()
    if config.cuda_graph:
        reference, variant = capture_graph(reference), capture_graph(variant)
        out.timer += " + CUDAGraph replay"
    flush = (
        torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        if config.cold_l2 else None
    )
    if flush is not None:
        out.notes.append(f"cold L2: {L2_FLUSH_BYTES >> 20} MiB overwritten before each call")
    for i in range(config.rounds):
        order = ((reference, out.reference), (variant, out.variant))
        pending = []
        for fn, sink in order if i % 2 == 0 else order[::-1]:
            if flush is not None:
                flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pending.append((start, end, sink))
        # One host wait per round: the events timestamp on the device, so syncing later
        # does not change the times, and the next round is not launched into a busy queue.
        torch.cuda.synchronize()
        for start, end, sink in pending:
            sink.append(start.elapsed_time(end) / 1e3)
    return out


def capture_graph(fn: Fn) -> Fn:
    """A replay function for ``fn`` captured into a CUDA graph (after a side-stream warm-up)."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # capture needs its allocations warmed on a side stream first
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception as exc:  # capture rejects host syncs and CPU-side control flow
        raise TimingError(
            f"CUDA graph capture failed ({type(exc).__name__}: {exc}); set cuda_graph = false "
            "in the case's perf table"
        ) from exc
    torch.cuda.synchronize()
    return graph.replay
