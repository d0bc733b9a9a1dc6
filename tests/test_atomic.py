"""Atomic writes: the old file survives a failed write, and no temporary file is left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from numcheck.disk.atomic import atomic_write, remove_leftovers, temp_name


def test_writes_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "r.json"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.json"]


def test_failed_write_keeps_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "golden.safetensors"
    atomic_write(path, b"old")

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["golden.safetensors"]


def test_interrupt_mid_write_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "report.json"

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, b"x")
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_killed_writers_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    atomic_write(path, b"kept")
    leftover = temp_name(path)
    leftover.write_bytes(b"half")
    other = temp_name(tmp_path / "other.safetensors")
    other.write_bytes(b"not ours")
    assert leftover.name.startswith(".g.safetensors.") and leftover.suffix == ".tmp"
    remove_leftovers(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, other.name])


def test_a_given_mode_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "cases.toml"
    atomic_write(path, b"a = 1\n", mode=0o640)
    assert path.stat().st_mode & 0o777 == 0o640
