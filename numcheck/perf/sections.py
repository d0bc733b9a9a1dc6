"""The run's side of timing: per-device sections, GPU sharing, waits and noise in the header,
the summary and the report's environment.

:class:`DeviceSections` is what a numcheck session holds: ``hold(exclusive=True)`` around a
timed section (a speedup measurement, a kernel audit, a calibration timing),
``hold(exclusive=False)`` around numerics on the device (:mod:`numcheck.perf.gpulock` says why
both). The functions below turn the records' waits and noise into lines and JSON fields.
No pytest here; torch only to name the GPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

from numcheck import phase
from numcheck.devices import DEVICE_NAME_ENV, run_class
from numcheck.perf.gpulock import DeviceLock, device_key


class DeviceSections:
    """This process's lock on its device; a no-op when ``enabled`` is False (nothing in the
    run times anything, so nothing needs excluding)."""

    def __init__(self, device: str, *, enabled: bool) -> None:
        self.device = device
        self.enabled = enabled
        self._lock: DeviceLock | None = None

    def lock(self) -> DeviceLock:
        """The lock of this process's current device (made on first use)."""
        if self._lock is None:
            self._lock = DeviceLock(_current_key(self.device))
        return self._lock

    @contextlib.contextmanager
    def hold(self, *, exclusive: bool) -> Iterator[float]:
        """Hold the device (alone or shared) for the body; yields the seconds waited."""
        if not self.enabled:
            yield 0.0
            return
        lock = self.lock()
        with contextlib.ExitStack() as held:
            # The wait is a phase of its own, which no time limit counts: on a GPU shared by
            # processes, a check that hangs while it holds the device would otherwise run out
            # the limits of the checks that wait for it.
            with phase.span(phase.DEVICE_WAIT):
                waited = held.enter_context(lock.exclusive() if exclusive else lock.shared())
            yield waited

    def header_lines(self, workers: int, *, perf: bool) -> list[str]:
        """The run header: who shares which GPU, the timer, the clocks."""
        lines = []
        cls = run_class(self.device)
        named = (f" (named by {DEVICE_NAME_ENV}={os.environ[DEVICE_NAME_ENV]!r})"
                 if os.environ.get(DEVICE_NAME_ENV, "").strip() else "")
        if self.device == "cuda":
            lines.append(f"numcheck devices: {sharing_line(self.sharing(workers))}")
            if perf:
                from numcheck.perf.gpuclocks import describe, gpu_clocks

                lines.append("numcheck timing: CUDA-graph replay by default (eager where "
                             f"capture fails or cuda_graph = false); {describe(gpu_clocks())}")
        if perf:
            where = "cpu, perf_counter; " if self.device != "cuda" else ""
            lines.append(f"numcheck thresholds: {where}device class {cls}{named}: gated where a "
                         f"case sets speedup_min.{cls}, reported elsewhere" + (
                             f"; {workers} workers take turns timing"
                             if workers > 1 and self.device != "cuda" else ""))
        return lines

    def sharing(self, workers: int) -> dict[int, int]:
        """Processes per GPU index (round-robin pinning; see numcheck.plugin.workers)."""
        if self.device != "cuda" or os.environ.get("NUMCHECK_NO_PIN") == "1":
            return {}
        import torch

        return gpu_sharing(workers, torch.cuda.device_count())

    def environment(self, workers: int, records: Iterable[Any]) -> dict[str, Any]:
        """The report's environment fields about timing (docs/report.md)."""
        records = list(records)
        noise = []
        seen = set()
        for rec in records:
            n = (rec.timing or {}).get("noise")
            if n and (rec.worker, n.get("pid")) not in seen:
                seen.add((rec.worker, n.get("pid")))
                noise.append({"worker": rec.worker, "device_index": rec.device_index, **n})
        waits = wait_totals(records)
        return {
            "gpu_sharing": {str(k): v for k, v in self.sharing(workers).items()},
            "device_lock": self.enabled,
            "lock_wait_s": waits["total"],
            "perf_noise": noise,
        }


def _current_key(device: str) -> str:
    if device != "cuda":
        return device
    import torch

    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return device_key("cuda", index, str(uuid) if uuid else None)


def wait_totals(records: Iterable[Any]) -> dict[str, Any]:
    """Seconds waited for device locks, in total and by the longest single check."""
    total, worst, worst_id = 0.0, 0.0, None
    for rec in records:
        waited = 0.0
        for section, key in (("timing", "lock_wait_s"), ("timing", "numerics_lock_wait_s"),
                             ("casts", "lock_wait_s")):
            value = (getattr(rec, section, None) or {}).get(key)
            if isinstance(value, int | float):
                waited += float(value)
        total += waited
        if waited > worst:
            worst, worst_id = waited, rec.id
    return {"total": total, "max": worst, "max_id": worst_id}


def lock_wait_lines(records: Iterable[Any], workers: int) -> list[str]:
    """The summary line on waits: shown whenever the run had workers or waited at all."""
    waits = wait_totals(records)
    if workers <= 1 and waits["total"] < 0.01:
        return []
    line = (f"numcheck device lock: checks waited {waits['total']:.2f} s in total for their "
            "device (timed sections hold it alone)")
    if waits["max_id"] and waits["max"] >= 0.01:
        line += f"; longest {waits['max']:.2f} s ({waits['max_id']})"
    return [line]


def gpu_sharing(workers: int, device_count: int) -> dict[int, int]:
    """How many processes time on each GPU: ``{index: count}`` under round-robin pinning.

    ``workers`` is the xdist worker count (0 for a serial run: one process on device 0).
    Empty without a GPU.
    """
    if device_count <= 0:
        return {}
    if workers <= 0:
        return {0: 1}
    shares: dict[int, int] = {}
    for k in range(workers):
        shares[k % device_count] = shares.get(k % device_count, 0) + 1
    return dict(sorted(shares.items()))


def sharing_line(shares: dict[int, int]) -> str:
    """``4 workers share cuda:0; timed sections take a per-GPU lock`` (the run header)."""
    if not shares:
        return "no GPU"
    parts = [f"{n} worker{'s' if n != 1 else ''} on cuda:{i}" for i, n in shares.items()]
    shared = any(n > 1 for n in shares.values())
    tail = ("timed sections take a per-GPU lock (numerics run in parallel between them)"
            if shared else "one process per GPU")
    return f"{', '.join(parts)}; {tail}"
