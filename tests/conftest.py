from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterator

import pytest
from fresh import FreshPython

# One torch (OpenMP) thread per test process, and for the processes the tests start (xdist
# workers, subprocesses), unless the environment says otherwise. The tests' tensors are
# small, and their processes share the cores (`pytest -n 2` on 2 cores, a test's own xdist
# workers, other jobs): there OpenMP's threads spin waiting for each other, measured at 30x
# the CPU time of one thread on the same op (torch.isfinite on 229k doubles: 32 ms vs 1 ms).
# Set before torch is first imported; tests of thread counts set their own
# (test_determinism.py).
_ONE_THREAD = "OMP_NUM_THREADS" not in os.environ
if _ONE_THREAD:
    os.environ["OMP_NUM_THREADS"] = "1"

#: Left to their first call, as in a real run: the Triton kernels (they import triton).
_LAZY = {"numcheck.__main__", "numcheck.ops.indexer_fused", "numcheck.ops.mhc_fused"}


def pytest_configure(config: pytest.Config) -> None:
    # The xdist controller runs no test: it need not import torch or numcheck.
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return
    import torch

    import numcheck

    if _ONE_THREAD:
        torch.set_num_threads(1)  # also where torch was imported before this file (a plugin)
    # Import every numcheck module once, up front. pytester's in-process runs (runpytest)
    # drop from sys.modules whatever was first imported during the run, so a module that
    # only a --numcheck run imports (numcheck.plugin.session and most of the package) would
    # otherwise be imported, and its assertions rewritten, again on each of some 250 runs.
    # The package keeps no per-run state in its modules (what it does keep, a new session
    # resets: reset_machine_noise), and tests that inject through a module
    # (timing.override) already share the test process's.
    for module in pkgutil.walk_packages(numcheck.__path__, "numcheck."):
        if module.name not in _LAZY:
            importlib.import_module(module.name)


@pytest.fixture(scope="session")
def fresh_python() -> Iterator[FreshPython]:
    """Fresh interpreters, forked from one that imported torch (tests/fresh.py)."""
    fresh = FreshPython()
    yield fresh
    fresh.close()


@pytest.fixture(autouse=True)
def _isolated_registry() -> Iterator[None]:
    # pytester runs in-process: a conftest that registers a test-only variant must not
    # leak it into the next test.
    from numcheck.ops import registry

    with registry.isolated():
        yield
