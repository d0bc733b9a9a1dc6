"""The per-device lock across processes: timed sections never overlap, numerics share.

Real processes, synchronised by a barrier so that without the lock their sections *would*
overlap; each records its sections' (start, end) on a shared monotonic clock. Only the
order of those intervals is asserted, never how long anything took. That numerics share
is shown by a meeting, not by chance overlap: two workers wait inside their sections for
each other, which only a shared section allows (a loaded CI machine once scheduled two
shared workers one after the other and an overlap test went red).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import pytest

from numcheck.perf.gpulock import DeviceLock, DeviceLockTimeout, device_key

HOLD_S = 0.05
CTX = mp.get_context("fork")


def _worker(directory: str, mode: str, barrier: Any, queue: Any, sections: int) -> None:
    lock = DeviceLock("cuda-0", Path(directory))
    barrier.wait()
    for _ in range(sections):
        if mode == "none":
            start = time.monotonic()
            time.sleep(HOLD_S)
            queue.put((mode, start, time.monotonic()))
            continue
        with lock.exclusive() if mode == "exclusive" else lock.shared():
            start = time.monotonic()
            time.sleep(HOLD_S)
            queue.put((mode, start, time.monotonic()))


def _exit_codes(target: Any, args: list[tuple[Any, ...]]) -> list[int | None]:
    """Run ``target`` in one forked process per argument tuple; their exit codes."""
    procs = [CTX.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    return [p.exitcode for p in procs]


def run_workers(tmp_path: Path, modes: list[str],
                sections: int = 3) -> list[tuple[str, float, float]]:
    barrier, queue = CTX.Barrier(len(modes)), CTX.Queue()
    codes = _exit_codes(_worker, [(str(tmp_path), m, barrier, queue, sections) for m in modes])
    assert codes == [0] * len(modes)
    return [queue.get(timeout=5) for _ in range(len(modes) * sections)]


def overlaps(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def pairs_overlapping(intervals: list[tuple[str, float, float]]) -> list[Any]:
    return [(a, b) for i, a in enumerate(intervals) for b in intervals[i + 1:] if overlaps(a, b)]


def test_without_the_lock_two_workers_time_at_once(tmp_path: Path) -> None:
    # The control: the set-up really makes sections collide when nothing excludes them.
    assert pairs_overlapping(run_workers(tmp_path, ["none", "none"]))


def test_timed_sections_of_two_workers_never_overlap(tmp_path: Path) -> None:
    intervals = run_workers(tmp_path, ["exclusive", "exclusive", "exclusive"])
    assert len(intervals) == 9
    assert pairs_overlapping(intervals) == []


def test_numerics_never_run_inside_a_timed_section(tmp_path: Path) -> None:
    intervals = run_workers(tmp_path, ["shared", "shared", "exclusive"], sections=4)
    timed = [i for i in intervals if i[0] == "exclusive"]
    numerics = [i for i in intervals if i[0] == "shared"]
    assert len(timed) == 4 and len(numerics) == 8
    assert all(not overlaps(t, n) for t in timed for n in numerics)


def _meet_inside(directory: str, mode: str, wait_s: float, outside: Any, inside: Any) -> None:
    # Exits 0 only if every worker was inside its section at the same moment.
    lock = DeviceLock("cuda-0", Path(directory))
    outside.wait()
    with lock.exclusive() if mode == "exclusive" else lock.shared():
        inside.wait(timeout=wait_s)


def meet_inside(tmp_path: Path, mode: str, wait_s: float) -> list[int | None]:
    """Two workers each wait, inside their section, for the other to be inside too.

    Whether they meet does not depend on timing: a lock that lets both in meets as soon as
    the second arrives; one that keeps the second out breaks the inner barrier after
    ``wait_s`` in the first, however long ``wait_s`` is.
    """
    outside, inside = CTX.Barrier(2), CTX.Barrier(2)
    return _exit_codes(_meet_inside, [(str(tmp_path), mode, wait_s, outside, inside)] * 2)


def test_numerics_of_two_workers_share_the_device(tmp_path: Path) -> None:
    assert meet_inside(tmp_path, "shared", wait_s=60) == [0, 0]


def test_timed_sections_cannot_meet_inside(tmp_path: Path) -> None:
    # The control: the same meeting fails when the sections exclude each other.
    assert meet_inside(tmp_path, "exclusive", wait_s=1) != [0, 0]


def test_wait_is_counted_and_nesting_is_refused(tmp_path: Path) -> None:
    lock = DeviceLock("cpu", tmp_path)
    with lock.exclusive() as waited:
        assert waited >= 0
        with pytest.raises(RuntimeError, match="would wait for itself"), lock.shared():
            pass
    with lock.shared():
        pass
    assert lock.waited_s >= 0


def test_timeout_names_the_lock_and_the_fix(tmp_path: Path) -> None:
    holding, release = CTX.Event(), CTX.Event()

    def hold() -> None:
        with DeviceLock("cuda-7", tmp_path).exclusive():
            holding.set()
            release.wait(30)

    p = CTX.Process(target=hold)
    p.start()
    try:
        assert holding.wait(30)
        with (pytest.raises(DeviceLockTimeout, match="cuda-7: another numcheck process is "
                            "timing on this device. Fix:"),
              DeviceLock("cuda-7", tmp_path, timeout=0.05).exclusive()):
            pass
    finally:
        release.set()
        p.join(30)


def test_device_keys() -> None:
    assert device_key("cpu") == "cpu"
    assert device_key("cuda", 1) == "cuda-1"
    assert device_key("cuda", 1, "GPU-12ab/cd") == "cuda-GPU-12ab_cd"
