"""Golden writes under faults and concurrency: never a corrupt or half-written golden.

Writers run in forked children (torch is already imported here; a fresh interpreter would
spend seconds importing it per kill). Each child sets torch to one thread first, as torch's
own DataLoader workers do, because an OpenMP pool does not survive a fork.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck.disk.locking import LockTimeout, exclusive, lock_path
from numcheck.goldens.files import GoldenMissing, load_golden, save_golden

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(os, "fork"), reason="fork and flock are POSIX"
)

N = 1 << 21  # 8 MB per golden: a write takes long enough for kills to land inside it


def _meta(version: int) -> dict[str, Any]:
    return {"op": "mhc_pre", "case": "kill", "op_version": 1, "fingerprint": "ab" * 32,
            "device": "cpu", "seeds": [0], "version": version}


def _tensors(version: int) -> dict[str, torch.Tensor]:
    return {"s0/y": torch.full((N,), float(version)), "s0/v": torch.tensor([version])}


def _fork(target: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            torch.set_num_threads(1)
            target()
        except BaseException:  # noqa: BLE001 - a child must never unwind into pytest
            code = 1
        finally:
            os._exit(code)
    return pid


def _wait(pid: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} did not finish in {timeout} s")


def _check_whole(path: Path, versions: range) -> int | None:
    """The golden is absent or one complete version: its metadata, tensors and hash agree."""
    try:
        golden = load_golden(path, case="kill", regen_hint="")  # verifies the content hash
    except GoldenMissing:
        return None
    version = golden.meta["version"]
    assert version in versions
    assert int(golden.tensors["s0/v"]) == version
    y = golden.tensors["s0/y"]
    assert y.shape == (N,) and bool((y == float(version)).all())
    return int(version)


def _await_temp_file(folder: Path, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if folder.is_dir() and any(name.endswith(".tmp") for name in os.listdir(folder)):
            return
    raise AssertionError("the writer never started a write")


def test_regen_killed_at_random_points_never_leaves_a_broken_golden(tmp_path: Path) -> None:
    path = tmp_path / "goldens" / "mhc_pre" / "kill.safetensors"
    rng = random.Random(7)
    written = 0
    mid_write = 0
    for kill in range(10):
        start = written

        def loop(start: int = start) -> None:
            for version in range(start, start + 10_000):
                save_golden(path, _tensors(version), _meta(version))

        before = {p.name for p in path.parent.glob(".*.tmp")} if path.parent.is_dir() else set()
        pid = _fork(loop)
        if kill % 2:
            time.sleep(rng.uniform(0.05, 0.5))  # anywhere in the loop
        else:
            _await_temp_file(path.parent)  # inside a write, at a random offset
            time.sleep(rng.uniform(0, 0.004))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        mid_write += any(p.name not in before for p in path.parent.glob(".*.tmp"))
        seen = _check_whole(path, range(start + 10_000))
        written = (seen + 1) if seen is not None else written
    # The next write cleans up after the killed ones: no temporary file, no lock left.
    save_golden(path, _tensors(written), _meta(written))
    assert _check_whole(path, range(written, written + 1)) == written
    assert os.listdir(path.parent) == [path.name]
    print(f"10 kills, {mid_write} inside a write (temporary file left), last version {written}")
    assert mid_write >= 1  # the interesting case was really exercised


def test_concurrent_writers_and_readers_only_see_whole_goldens(tmp_path: Path) -> None:
    path = tmp_path / "goldens" / "mhc_pre" / "kill.safetensors"
    save_golden(path, _tensors(0), _meta(0))

    def writer(base: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(3):
                save_golden(path, _tensors(base + i), _meta(base + i))
        return run

    live = {_fork(writer(100 * (w + 1))) for w in range(4)}
    reads = 0
    while live:
        assert _check_whole(path, range(500)) is not None
        reads += 1
        for pid in list(live):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                live.discard(pid)
    assert reads > 1
    assert _check_whole(path, range(500)) is not None
    assert os.listdir(path.parent) == [path.name]


def test_lock_serializes_writers_and_dies_with_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "g" / "op" / "case.safetensors"
    read_fd, write_fd = os.pipe()

    def hold() -> None:
        with exclusive(path):
            os.write(write_fd, b"x")
            time.sleep(60)

    pid = _fork(hold)
    assert os.read(read_fd, 1) == b"x"
    with pytest.raises(LockTimeout) as info, exclusive(path, timeout=0.3):
        pass
    msg = str(info.value)
    assert str(lock_path(path).name) in msg and "another process is writing" in msg
    assert "Fix:" in msg
    os.kill(pid, signal.SIGKILL)  # the kernel drops a dead holder's flock
    os.waitpid(pid, 0)
    t0 = time.monotonic()
    with exclusive(path, timeout=5):
        assert time.monotonic() - t0 < 2
    assert not lock_path(path).exists()


def test_lock_is_reentrant_and_sidecar_is_hidden(tmp_path: Path) -> None:
    path = tmp_path / "op" / "case.safetensors"
    assert lock_path(path) == tmp_path / "op" / ".case.safetensors.lock"
    with exclusive(path):
        assert lock_path(path).exists()
        with exclusive(path, timeout=0.1):  # the same thread: no self-deadlock
            save_golden(path, _tensors(1), _meta(1))
    assert sorted(os.listdir(path.parent)) == [path.name]


def test_writers_queue_behind_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "op" / "case.safetensors"
    with exclusive(path):
        pid = _fork(lambda: save_golden(path, _tensors(3), _meta(3)))
        time.sleep(0.5)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the writer did not wait for the lock"
        assert not path.exists()
    assert _wait(pid) == 0
    assert _check_whole(path, range(3, 4)) == 3


# Regeneration by two xdist workers at once (all goldens whole, no temporary or lock file
# left, each equal to a fresh regeneration, the controller's stale report): one end-to-end
# xdist run, tests/test_plugin_report.py::test_xdist_regenerates_safely_and_merges_...


def test_write_if_changed_writes_only_what_changed(tmp_path: Path) -> None:
    from numcheck.goldens.files import write_if_changed

    path = tmp_path / "g.safetensors"
    small = {"s0/y": torch.arange(4.0)}
    meta = {"op": "mhc_pre", "case": "c", "op_version": 1, "fingerprint": "ab" * 32,
            "device": "cpu", "seeds": [0]}
    assert write_if_changed(path, small, meta, case="c") is True
    stamp = path.stat().st_mtime_ns
    assert write_if_changed(path, small, meta, case="c") is False
    assert path.stat().st_mtime_ns == stamp
    assert write_if_changed(path, small, {**meta, "fingerprint": "cd" * 32}, case="c") is True
    assert write_if_changed(path, {"s0/y": torch.arange(4.0) + 1},
                            {**meta, "fingerprint": "cd" * 32}, case="c") is True
    assert torch.equal(load_golden(path, case="c", regen_hint="").tensors["s0/y"],
                       torch.arange(4.0) + 1)
    path.write_bytes(b"not a golden")
    assert write_if_changed(path, small, meta, case="c") is True
    assert not lock_path(path).exists()
