"""Record numcheck's timings in pytest-benchmark's own session, storage and JSON.

pytest-benchmark keeps one :class:`pytest_benchmark.stats.Metadata` per benchmark in
``config._benchmarksession.benchmarks`` and builds its table, ``--benchmark-json``,
``--benchmark-autosave`` and ``--benchmark-compare`` from that list. numcheck does not use
the ``benchmark`` fixture (its host timer would time kernel launches, not kernels): it
appends a Metadata filled with the per-round device times it measured, so every option
users know works on GPU-correct numbers, with numcheck's figures in ``extra_info``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from numcheck.check.perf import PerfResult


def benchmark_session(config: Any) -> Any | None:
    """pytest-benchmark's session when its plugin is loaded and enabled, else None."""
    session = getattr(config, "_benchmarksession", None)
    if session is None or getattr(session, "disabled", True) or getattr(session, "skip", False):
        return None
    return session


def record(config: Any, name: str, fullname: str, result: PerfResult) -> bool:
    """Append one (case, variant) to pytest-benchmark's results; False when it is not active.

    ``name``/``fullname`` are the test item's name and node id, so ``--benchmark-compare``
    matches runs by node id; the group is the case, so the table lists the reference and
    its variants together.
    """
    session = benchmark_session(config)
    if session is None:
        return False
    from pytest_benchmark.stats import Metadata

    # The attributes of a BenchmarkFixture that Metadata reads.
    entry = SimpleNamespace(name=name, fullname=fullname, param=None, params=None,
                            group=f"{result.case.op}::{result.case.id}", has_error=False,
                            extra_info=result.extra_info(), cprofile_stats=None)
    meta = Metadata(
        entry,
        iterations=1,
        options={
            "timer": result.times.timer,
            "min_rounds": result.spec.rounds,
            "warmup": result.spec.warmup,
            "cold_l2": result.spec.cold_l2,
            "cuda_graph": result.spec.cuda_graph,
            "disable_gc": False,
            "max_time": 0.0,
            "min_time": 0.0,
        },
    )
    for seconds in result.times.variant:
        meta.update(seconds)
    session.benchmarks.append(meta)
    return True
