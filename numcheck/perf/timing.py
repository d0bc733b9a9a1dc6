"""Timers: a reference and a variant timed interleaved in one process, correctly on GPU.

Two entry points:

- :func:`make_pair_timer` gives a :class:`PairTimer` that the speedup gate's stopping rule
  (:mod:`numcheck.perf.sequential`) draws paired samples from, as many as it needs;
- :func:`time_interleaved` times a fixed number of rounds (benchmarks use it).

How a sample is taken, per device (each timer has a name that every record carries):

- ``cuda-graph`` (the default on CUDA): both callables are captured into CUDA graphs and
  replayed, as decode engines run these ops. Python and launch overhead disappear, only the
  kernels remain. A callable that cannot be captured (a host sync, CPU-side control flow)
  falls back to ``cuda-events-eager`` for *both* members, with the reason in the notes.
- ``cuda-events-eager`` (``cuda_graph = false``): the calls are launched from Python.
- ``perf_counter`` (CPU): ``time.perf_counter`` around the calls.

**Batches.** One sample is ``calls_per_sample`` back-to-back calls between one pair of
events, divided by that count. The count is sized once per pair after warm-up so that one
sample of the faster member lasts at least ``target_sample_s`` (1 ms by default): CUDA
events resolve ~0.5 us and a launch jitters by several us, which would dominate a 20 us op
timed call by call. With ``cold_l2`` a buffer larger than L2 is overwritten before every
call, so a sample is one call (the flush would otherwise be timed too).

**Order.** Reference and variant alternate within each pair, the order flipping every pair
(A B, B A, ...), so neither always runs first after a sync, and drift (clocks, thermals)
lands on both members of a pair and cancels in their ratio.

Tests inject a fake timer with :func:`override` (no unit test depends on the machine's
speed).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

#: Timer names, as records and messages show them.
GRAPH, EAGER, CPU = "cuda-graph", "cuda-events-eager", "perf_counter"

#: Bytes written to evict L2 before a cold-L2 call: larger than any current L2 (H200: 60 MiB).
L2_FLUSH_BYTES = 256 * 2**20


@dataclass(frozen=True)
class TimingConfig:
    """How to time one (case, variant) pair; case files set these under ``perf``.

    ``rounds`` is used by :func:`time_interleaved` only (the gate's stopping rule decides
    how many samples it needs). ``target_sample_s`` sizes the batch of back-to-back calls
    of one sample; 0 times call by call.
    """

    rounds: int = 30
    warmup: int = 3
    cold_l2: bool = False
    cuda_graph: bool = True
    target_sample_s: float = 1e-3


@dataclass
class PairedTimes:
    """Per-sample seconds per call of the reference and the variant, sample ``i`` in both."""

    reference: list[float] = field(default_factory=list)
    variant: list[float] = field(default_factory=list)
    timer: str = ""
    notes: list[str] = field(default_factory=list)
    calls_per_sample: int = 1


class TimingError(Exception):
    """A callable could not be timed as asked."""


Fn = Callable[[], object]


class PairTimer(Protocol):
    """Paired samples on demand: what the stopping rule draws from."""

    timer: str
    notes: list[str]
    calls_per_sample: int

    def draw(self, n: int) -> tuple[list[float], list[float]]:
        """``n`` more (reference, variant) samples, seconds per call."""
        ...

    def elapsed(self) -> float:
        """Seconds spent sampling so far (what the time cap counts)."""
        ...


@dataclass(frozen=True)
class TimerRequest:
    """What a timer factory is asked to time (names too, so a fake timer can tell them apart)."""

    reference: Fn
    variant: Fn
    device: str
    config: TimingConfig
    reference_name: str = "reference"
    variant_name: str = "variant"


TimerFactory = Callable[[TimerRequest], PairTimer]
_OVERRIDE: list[TimerFactory] = []


@contextlib.contextmanager
def override(factory: TimerFactory) -> Iterator[None]:
    """Use ``factory`` instead of the device timers inside the ``with`` body (tests: a fake
    timer whose samples do not depend on the machine's speed)."""
    _OVERRIDE.append(factory)
    try:
        yield
    finally:
        _OVERRIDE.remove(factory)


def make_pair_timer(request: TimerRequest) -> PairTimer:
    """The timer for ``request``: an injected one (tests), else the device's own."""
    config = request.config
    if config.warmup < 0 or config.target_sample_s < 0:
        raise ValueError(f"make_pair_timer: need warmup >= 0 and target_sample_s >= 0, "
                         f"got {config}")
    if _OVERRIDE:
        return _OVERRIDE[-1](request)
    if request.device == "cuda":
        return _CudaPairTimer(request.reference, request.variant, config)
    if request.device == "cpu":
        return _CpuPairTimer(request.reference, request.variant, config)
    raise ValueError(f"make_pair_timer: unknown device {request.device!r}")


def time_interleaved(
    reference: Fn, variant: Fn, device: str, config: TimingConfig
) -> PairedTimes:
    """Time ``reference`` and ``variant`` for ``config.rounds`` interleaved samples.

    Both are zero-argument callables with their inputs already on ``device``.
    """
    if config.rounds < 1 or config.warmup < 0:
        raise ValueError(f"time_interleaved: need rounds >= 1 and warmup >= 0, got {config}")
    if device not in ("cuda", "cpu") and not _OVERRIDE:
        raise ValueError(f"time_interleaved: unknown device {device!r}")
    timer = make_pair_timer(TimerRequest(reference, variant, device, config))
    ref, var = timer.draw(config.rounds)
    return PairedTimes(list(ref), list(var), timer.timer, list(timer.notes),
                       timer.calls_per_sample)


def _batch_size(single_s: float, target_s: float) -> int:
    """Calls per sample so that one sample lasts at least ``target_s`` (1 when 0)."""
    if target_s <= 0 or single_s <= 0:
        return 1
    return max(1, min(10_000, math.ceil(target_s / single_s)))


class _CpuPairTimer:
    """``time.perf_counter`` around batches of calls."""

    def __init__(self, reference: Fn, variant: Fn, config: TimingConfig) -> None:
        self.timer = CPU
        self.notes: list[str] = []
        if config.cold_l2:
            self.notes.append("cold_l2 ignored on cpu")
        self._fns = (reference, variant)
        self._pairs = 0
        for _ in range(config.warmup):
            reference()
            variant()
        self.calls_per_sample = 1
        if config.target_sample_s > 0:
            single = min(self._one(reference, 1), self._one(variant, 1))
            self.calls_per_sample = _batch_size(single, config.target_sample_s)
        self._spent = 0.0

    @staticmethod
    def _one(fn: Fn, k: int) -> float:
        start = time.perf_counter()
        for _ in range(k):
            fn()
        return (time.perf_counter() - start) / k

    def draw(self, n: int) -> tuple[list[float], list[float]]:
        t0 = time.perf_counter()
        ref: list[float] = []
        var: list[float] = []
        for _ in range(n):
            pair = ((self._fns[0], ref), (self._fns[1], var))
            for fn, sink in pair if self._pairs % 2 == 0 else pair[::-1]:
                sink.append(self._one(fn, self.calls_per_sample))
            self._pairs += 1
        self._spent += time.perf_counter() - t0
        return ref, var

    def elapsed(self) -> float:
        return self._spent


class _CudaPairTimer:
    """CUDA events around batches of graph replays (or eager calls)."""

    def __init__(self, reference: Fn, variant: Fn, config: TimingConfig) -> None:
        self.notes: list[str] = []
        self.timer = EAGER
        torch.cuda.synchronize()
        for _ in range(config.warmup):
            reference()
            variant()
        torch.cuda.synchronize()
        self._graphs: list[object] = []
        if config.cuda_graph:
            try:
                ref_graph, var_graph = _capture(reference), _capture(variant)
            except TimingError as exc:
                self.notes.append(f"{exc}: timed eagerly ({EAGER})")
            else:
                self._graphs = [ref_graph, var_graph]
                reference, variant = ref_graph.replay, var_graph.replay  # type: ignore[attr-defined]
                self.timer = GRAPH
        self._fns = (reference, variant)
        self._flush = None
        if config.cold_l2:
            self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
            self.notes.append(f"cold L2: {L2_FLUSH_BYTES >> 20} MiB overwritten before each "
                              "call; one call per sample")
        self.calls_per_sample = 1
        self._pairs = 0
        self._spent = 0.0
        if config.target_sample_s > 0 and self._flush is None:
            r, v = self._sample(1), self._sample(1)  # two pairs: the first may still warm up
            single = min(r[0], r[1], v[0], v[1])
            self.calls_per_sample = _batch_size(single, config.target_sample_s)
        self._pairs = 0

    def _sample(self, k: int) -> tuple[float, float]:
        pending = []
        order = (0, 1) if self._pairs % 2 == 0 else (1, 0)
        for which in order:
            fn = self._fns[which]
            if self._flush is not None:
                self._flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(k):
                fn()
            end.record()
            pending.append((which, start, end))
        # One host wait per pair: the events timestamp on the device, so syncing later does
        # not change the times, and the next pair is not launched into a busy queue.
        torch.cuda.synchronize()
        self._pairs += 1
        out = [0.0, 0.0]
        for which, start, end in pending:
            out[which] = start.elapsed_time(end) / 1e3 / k
        return out[0], out[1]

    def draw(self, n: int) -> tuple[list[float], list[float]]:
        t0 = time.perf_counter()
        ref: list[float] = []
        var: list[float] = []
        for _ in range(n):
            r, v = self._sample(self.calls_per_sample)
            ref.append(r)
            var.append(v)
        self._spent += time.perf_counter() - t0
        return ref, var

    def elapsed(self) -> float:
        return self._spent


def _capture(fn: Fn) -> object:
    """``fn`` captured into a CUDA graph (after a side-stream warm-up).

    A capture that fails leaves the process as it found it (:class:`_CudaState`): a user's
    variant that cannot be captured must not break the CUDA random generator, the current
    stream or the capture state for every later CUDA call of the pytest process.
    """
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # capture needs its allocations warmed on a side stream first
        torch.cuda.current_stream().wait_stream(stream)
    except Exception as exc:
        raise TimingError(f"the warm-up before CUDA graph capture failed "
                          f"({type(exc).__name__}: {str(exc)[:200]})") from exc
    state = _CudaState.save()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except Exception as exc:  # capture rejects host syncs and CPU-side control flow
        state.restore(graph)
        raise TimingError(
            f"CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:200]})"
        ) from exc
    torch.cuda.synchronize()
    return graph


@dataclass
class _CudaState:
    """What a failed capture can leave behind, saved before it and put back after it.

    ``torch.cuda.graph`` leaves three traces when the captured code fails (a host sync,
    say): its ``__exit__`` raises from ``capture_end`` before it restores the current
    stream, so the capture's side stream stays current; the default CUDA generator was
    put in capture mode by ``capture_begin`` and is never taken out of it, so every later
    ``torch.randn(..., device="cuda")`` raises "Offset increment outside graph capture
    encountered unexpectedly"; and a capture that ``capture_end`` never reached is still
    open on that stream. :meth:`restore` ends an open capture, makes the saved stream
    current again, takes the generator out of capture mode by capturing one trivial
    kernel (a capture that ends normally is what resets it; torch has no public call for
    it), and puts the generator's seed and offset back.
    """

    device: int
    stream: Any
    rng: Any

    @classmethod
    def save(cls) -> _CudaState:
        return cls(torch.cuda.current_device(), torch.cuda.current_stream(),
                   torch.cuda.get_rng_state())

    def restore(self, failed: Any) -> None:
        if torch.cuda.is_current_stream_capturing():
            with contextlib.suppress(Exception):
                failed.capture_end()
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        torch.cuda.set_device(self.device)
        torch.cuda.set_stream(self.stream)
        try:
            scratch = torch.zeros(1, device=f"cuda:{self.device}")
            reset = torch.cuda.CUDAGraph()
            with torch.cuda.graph(reset):
                scratch.add_(1)  # no allocation, no random numbers: the generator's reset only
            torch.cuda.synchronize()
            del reset
            torch.cuda.set_rng_state(self.rng)
        except Exception as exc:
            raise RuntimeError(
                "numcheck: could not restore the CUDA state after a failed graph capture "
                f"({type(exc).__name__}: {str(exc)[:200]}); set cuda_graph = false in the "
                "case's perf table") from exc
        if torch.cuda.current_stream() != self.stream or torch.cuda.is_current_stream_capturing():
            raise RuntimeError("numcheck: could not restore the CUDA state after a failed "
                               "graph capture; set cuda_graph = false in the case's perf table")


def capture_graph(fn: Fn) -> Fn:
    """A replay function for ``fn`` captured into a CUDA graph (after a side-stream warm-up).

    Raises :class:`TimingError` naming the fix when capture fails.
    """
    try:
        graph = _capture(fn)
    except TimingError as exc:
        raise TimingError(f"{exc}; set cuda_graph = false in the case's perf table") from exc
    return graph.replay  # type: ignore[attr-defined,no-any-return]
