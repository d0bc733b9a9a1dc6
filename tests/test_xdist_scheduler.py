"""The tests' own xdist scheduler choice (tests/conftest.py): work stealing where the run left
``--dist`` at ``load``, anything else kept."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import pytest_xdist_make_scheduler

xdist_scheduler = pytest.importorskip("xdist.scheduler", reason="pytest-xdist is not installed")


class _Config(SimpleNamespace):
    def getvalue(self, name: str) -> object:
        return getattr(self, name)


def test_load_becomes_work_stealing_and_other_modes_are_kept() -> None:
    assert pytest_xdist_make_scheduler(_Config(dist="loadfile"), None) is None
    assert pytest_xdist_make_scheduler(_Config(dist="worksteal"), None) is None
    config = _Config(dist="load", tx=["2*popen"],
                     option=SimpleNamespace(tx=["2*popen"]))
    sched = pytest_xdist_make_scheduler(config, None)
    assert isinstance(sched, xdist_scheduler.WorkStealingScheduling)
    assert sched.numnodes == 2
