"""Roofline: achieved TFLOP/s and GB/s of a timed call, and how close it is to the memory floor.

Each op declares the FLOPs and the minimum bytes of a case (``OpSpec.flops`` /
``OpSpec.min_bytes``). The floor is the time to move the minimum bytes at the device's
measured copy bandwidth; ``% of floor`` is floor / measured time (100% = at the floor).
Peaks are measured once per process and device (:func:`peaks_for`) and cached, so every
(case, variant) of a run is held to the same numbers.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from numcheck.devices import device_name


@dataclass(frozen=True)
class Peaks:
    """Measured device peaks: copy bandwidth (bytes read + written per second) and matmul FLOP/s."""

    device: str
    bandwidth: float
    flops: float
    matmul_dtype: str
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"device": self.device, "bandwidth_GBps": self.bandwidth / 1e9,
                "matmul_TFLOPs": self.flops / 1e12, "matmul_dtype": self.matmul_dtype,
                "detail": self.detail}


@dataclass(frozen=True)
class Roofline:
    """One measured time placed on the roofline."""

    flops: float | None
    min_bytes: float | None
    seconds: float
    peaks: Peaks

    @property
    def tflops(self) -> float | None:
        return None if self.flops is None else self.flops / self.seconds / 1e12

    @property
    def gbps(self) -> float | None:
        """Minimum bytes over the measured time (an effective bandwidth)."""
        return None if self.min_bytes is None else self.min_bytes / self.seconds / 1e9

    @property
    def floor_seconds(self) -> float | None:
        return None if self.min_bytes is None else self.min_bytes / self.peaks.bandwidth

    @property
    def pct_of_floor(self) -> float | None:
        """Memory floor as a percentage of the measured time: 100 means bandwidth-bound at peak."""
        floor = self.floor_seconds
        return None if floor is None else 100.0 * floor / self.seconds


@functools.cache
def peaks_for(device: str) -> Peaks:
    """The device's peaks, measured on first use in this process and cached."""
    return measure_peaks(device)


def measure_peaks(device: str) -> Peaks:
    """Copy bandwidth and matmul throughput: bf16 on CUDA (tensor cores), fp32 on the CPU."""
    if device == "cuda":
        nbytes, n, dtype = 2 * 2**30, 8192, torch.bfloat16
    else:
        nbytes, n, dtype = 64 * 2**20, 1024, torch.float32
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_s = _best_seconds(lambda: dst.copy_(src), device, repeats=10 if device == "cuda" else 5)
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    mm_s = _best_seconds(lambda: torch.mm(a, b), device, repeats=10 if device == "cuda" else 3)
    name = device_name(device)
    return Peaks(
        device=device,
        bandwidth=2 * nbytes / copy_s,  # the copy reads and writes every byte
        flops=2 * n**3 / mm_s,
        matmul_dtype=str(dtype).removeprefix("torch."),
        detail=f"{name}: copy of {nbytes >> 20} MiB, {n}^3 matmul, best of repeats",
    )


def _best_seconds(call: Callable[[], object], device: str, repeats: int) -> float:
    call()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - t0)
    return best
