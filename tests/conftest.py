from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.fresh import HOME_ENV, FreshPython, make_home, stop
from tests.importgraph import importable_up_front

#: Set by pytest_configure when this run gave the test processes one thread (see there).
_ONE_THREAD = False
#: The fresh-interpreter home this process made for its run, and what HOME_ENV was before.
_FRESH_HOME: tuple[Path, str | None] | None = None

def pytest_configure(config: pytest.Config) -> None:
    global _ONE_THREAD, _FRESH_HOME
    # `pytest --numcheck` (the gate) loads this file too (testpaths): it keeps the machine's
    # thread count. Everything else here is for numcheck's own tests.
    if config.getoption("--numcheck", False):
        return
    # One torch (OpenMP) thread per test process, and for the processes they start (xdist
    # workers, subprocesses), unless the environment says otherwise. The tests' tensors are
    # small, and their processes share the cores (`pytest -n 2` on 2 cores, a test's own
    # xdist workers, other jobs): there OpenMP's threads spin waiting for each other,
    # measured at 30x the CPU time of one thread on the same op (torch.isfinite on 229k
    # doubles: 32 ms vs 1 ms). Set here, before xdist starts its workers and before this
    # process imports torch; tests of thread counts set their own (test_determinism.py).
    # The plugin's own tests run their pytest runs' checks in the test process, where their
    # variants were registered (some by objects a worker process cannot import):
    # tests/test_isolation.py turns the worker process on where it is what they test.
    os.environ.setdefault("NUMCHECK_ISOLATE", "off")
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
        _ONE_THREAD = True
    # And glibc's allocator as the gate's workers have it (numcheck.execute.isolated):
    # freed memory kept for the next tensor, for xdist's workers and subprocesses.
    from numcheck.execute.isolated import MALLOC_ENV

    for name, value in MALLOC_ENV.items():
        os.environ.setdefault(name, value)
    # Collection mostly imports (torch, scipy, the package, the tests): the garbage collector
    # would walk that growing heap again and again for nothing. Off until the first test,
    # where _test_process freezes what was loaded and turns it back on. Not in an xdist
    # controller, which collects nothing and runs no test.
    worker = hasattr(config, "workerinput")
    if worker or not getattr(config.option, "numprocesses", None):
        gc.disable()
    # One fresh-interpreter server for the run (tests/fresh.py): its home is made here, in
    # the xdist controller or the one test process, and handed to the workers.
    if not worker:
        _FRESH_HOME = (make_home(), os.environ.get(HOME_ENV))
        os.environ[HOME_ENV] = str(_FRESH_HOME[0])
    else:
        atexit.register(_end_worker)


def _end_worker() -> None:
    """An xdist worker's last step, after every atexit handler registered after this one
    (torch's, triton's: they register on import, after pytest_configure): end the process
    without tearing its interpreter down. The controller has its results and waits for the
    process to go; freeing a heap that holds torch, triton and sympy object by object takes
    1-2 s (and triton's bindings report the objects still alive as leaks)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: The test modules with the longest tests (the meta-device sweep, 3-5 s; the self-test, 24
#: tests of up to 4 s, about a quarter of the suite's CPU), run first: a pytest-xdist worker
#: must not end the run alone on one of them while the other waits. Work stealing (below)
#: evens out the rest, taking from the end of a worker's queue.
RUN_FIRST = ("test_variant_devices.py", "test_selftest.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--numcheck", False):
        return
    rank = {name: i for i, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Work stealing for `-n N` (pytest-xdist's `--dist worksteal`) where the run left the
    distribution at its default, `load`. The load scheduler hands out fixed chunks: the
    README's test command on 2 cores had one worker finish 4.3 s before the other
    (2026-12-06); a worker that runs out takes half of the other's queue instead. An
    explicit `--dist` other than load is kept."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _FRESH_HOME
    if _FRESH_HOME is not None:
        home, before = _FRESH_HOME
        stop(home)
        if before is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = before
        _FRESH_HOME = None
    # Objects frozen by _test_process are never collected, and the interpreter's teardown
    # then finds triton's bindings still alive and prints each as a leak: give them back to
    # the collector before a single test process ends (xdist workers end in _end_worker).
    if not hasattr(config, "workerinput"):
        gc.unfreeze()


@pytest.fixture(scope="session", autouse=True)
def _test_process() -> None:
    """What a process that runs numcheck's tests sets up once, before its first test."""
    import torch

    import numcheck

    if _ONE_THREAD:
        torch.set_num_threads(1)  # also where torch was imported before pytest_configure
    # Import every numcheck module once, up front. pytester's in-process runs (runpytest)
    # drop from sys.modules whatever was first imported during the run, so a module that
    # only a --numcheck run imports (numcheck.plugin.session and most of the package) would
    # otherwise be imported, and its assertions rewritten, again on each of some 200 runs.
    # The package keeps no per-run state in its modules (what it does keep, a new session
    # resets: reset_machine_noise), and tests that inject through a module
    # (timing.override) already share the test process's.
    # Not the modules that need triton (read from their source, tests/importgraph.py): left
    # to their first call, as in a real run, and absent on an install without the fused extra.
    for name in importable_up_front(Path(numcheck.__file__).parent):
        importlib.import_module(name)
    # What is loaded now lives as long as the process: out of the garbage collector's sight,
    # so that its full collections do not walk torch's and the package's objects each time
    # (with the collector off while collecting, about 10 s less of the two workers' CPU in
    # the README test command on 2 cores).
    gc.freeze()
    gc.enable()


#: Plugins that the pytest runs made by a test's pytester leave out (``-p no:NAME`` in
#: PYTEST_ADDOPTS, in process and in the subprocesses they start), unless the test is marked
#: ``pytester_keeps(NAME, ...)``. Each run registers every plugin anew: of an in-process run's
#: ~45 ms on this project's 2-core VM, pytest-benchmark's options and session took ~10 ms
#: and these four together ~14 ms, over some 300 runs in the README's test command. The
#: tests that use a run's benchmark JSON or table keep it (test_perf_plugin.py).
PYTESTER_LEAVES_OUT = ("benchmark", "logging", "doctest", "pastebin")


#: The prefix of what pytest-xdist puts in its workers' environment (PYTEST_XDIST_WORKER,
#: _WORKER_COUNT, _TESTRUNUID), the rule benchmarks/reliability/isolation_runs.py keeps to. A
#: pytest run that a test starts (a pytester run, in process or not; a script's subprocess) is
#: no worker of this run, even where the test runs in one (`-n 2`): pytest-benchmark switches
#: itself off where it sees PYTEST_XDIST_WORKER, and its --benchmark-json then writes nothing.
XDIST_ENV_PREFIX = "PYTEST_XDIST_"


def outside_xdist(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a process a test starts: without xdist's worker variables."""
    return {name: value for name, value in env.items() if not name.startswith(XDIST_ENV_PREFIX)}


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """pytest's pytester, whose runs leave out PYTESTER_LEAVES_OUT but what the test keeps,
    and are no xdist workers (XDIST_ENV_PREFIX)."""
    keep = {name for mark in request.node.iter_markers("pytester_keeps") for name in mark.args}
    leave_out = [f"-p no:{name}" for name in PYTESTER_LEAVES_OUT if name not in keep]
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(leave_out))
    for name in os.environ.keys() - outside_xdist(os.environ).keys():
        monkeypatch.delenv(name)
    return pytester


@pytest.fixture(scope="session")
def fresh_python() -> Iterator[FreshPython]:
    """Fresh interpreters, forked from one that imported torch (tests/fresh.py): one server
    for the run, shared by its xdist workers."""
    home = os.environ.get(HOME_ENV)
    fresh = FreshPython(Path(home) if home else None)
    yield fresh
    fresh.close()


@pytest.fixture(autouse=True)
def _isolated_registry() -> Iterator[None]:
    # pytester runs in-process: a conftest that registers a test-only variant must not
    # leak it into the next test.
    from numcheck.ops import registry

    with registry.isolated():
        yield
