"""The GPU's SM clock and clock event reasons, sampled every few milliseconds while a timer runs.

numcheck reads the clock once per process (``numcheck/perf/gpuclocks.py``); that says nothing
about the clock *during* a long timing loop, which is when a power-capped GPU lowers it. This
watcher samples NVML from a thread (``libnvidia-ml`` by ctypes: no extra package, and ctypes
releases the GIL while the main thread waits on the GPU), so a timing window can be asked what
the clock was and whether the driver said why it was low. Without NVML every window is None,
and nothing is inferred from it. :func:`summarize` is pure and tested on the CPU.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from typing import Any

from numcheck.perf.gpuclocks import REASONS, THROTTLING

#: NVML's SM clock domain (nvmlClockType_t NVML_CLOCK_SM).
_CLOCK_SM = 1


def summarize(samples: list[tuple[float, int, int]], start: float, end: float
              ) -> dict[str, Any] | None:
    """The samples ``(time, sm_mhz, reason_mask)`` taken in ``[start, end]``: their median and
    lowest SM clock, and every clock event reason seen; None when there are none."""
    window = [s for s in samples if start <= s[0] <= end]
    if not window:
        return None
    mask = 0
    for _, _, m in window:
        mask |= m
    return {"samples": len(window),
            "median_mhz": statistics.median(s[1] for s in window),
            "min_mhz": min(s[1] for s in window),
            "reasons": [name for bit, name in REASONS.items() if mask & bit],
            "throttled": bool(mask & THROTTLING)}


class ClockWatch:
    """``with ClockWatch(index) as w: t0 = w.now(); ...; w.window(t0, w.now())``."""

    def __init__(self, index: int = 0, period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read = _nvml_reader(index)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def __enter__(self) -> ClockWatch:
        if self._read is not None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def window(self, start: float, end: float) -> dict[str, Any] | None:
        return summarize(list(self.samples), start, end)

    def _loop(self) -> None:
        assert self._read is not None
        while not self._stop.is_set():
            got = self._read()
            if got is not None:
                self.samples.append((time.monotonic(), *got))
            self._stop.wait(self.period_s)


def _nvml_reader(index: int) -> Any:
    """A function returning ``(sm_mhz, reason_mask)`` for GPU ``index``, or None without NVML."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
            return None
        reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons")
    except (OSError, AttributeError):
        return None

    def read() -> tuple[int, int] | None:
        mhz, mask = ctypes.c_uint(), ctypes.c_ulonglong()
        if nvml.nvmlDeviceGetClockInfo(handle, ctypes.c_int(_CLOCK_SM), ctypes.byref(mhz)) != 0:
            return None
        if reasons_fn(handle, ctypes.byref(mask)) != 0:
            return None
        return mhz.value, mask.value

    return read if read() is not None else None
