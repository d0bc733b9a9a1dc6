"""tests/conftest.py's pytester: its runs leave out the plugins no test's run needs
(PYTESTER_LEAVES_OUT), unless the test keeps one with ``pytester_keeps``."""

from __future__ import annotations

import pytest

from tests.conftest import PYTESTER_LEAVES_OUT, XDIST_ENV_PREFIX, outside_xdist

PROBE = """
def test_plugins(pytestconfig):
    # A plugin left out with -p no:NAME is listed as blocked, with no plugin object.
    names = {name for name, plugin in pytestconfig.pluginmanager.list_name_plugin()
             if plugin is not None}
    print("LOADED", sorted(n for n in {PLUGINS} if n in names))
"""


def _loaded(pytester: pytest.Pytester) -> str:
    pytester.makepyfile(PROBE.replace("{PLUGINS}", repr(set(PYTESTER_LEAVES_OUT))))
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    return next(line[line.index("LOADED"):] for line in result.outlines if "LOADED" in line)


def test_a_test_s_runs_leave_the_plugins_out(pytester: pytest.Pytester) -> None:
    assert _loaded(pytester) == "LOADED []"


@pytest.mark.pytester_keeps("benchmark")
def test_a_test_keeps_the_plugin_it_names(pytester: pytest.Pytester) -> None:
    assert _loaded(pytester) == "LOADED ['benchmark']"


@pytest.fixture
def _as_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("WORKER", "gw1"), ("WORKER_COUNT", "2"), ("TESTRUNUID", "abc123")):
        monkeypatch.setenv(XDIST_ENV_PREFIX + name, value)


def test_a_test_s_runs_are_no_xdist_workers(_as_an_xdist_worker: None,
                                            pytester: pytest.Pytester) -> None:
    # Requested after _as_an_xdist_worker, as in a test that an xdist worker runs.
    pytester.makepyfile("""
        import os
        def test_env():
            print("XDIST", sorted(k for k in os.environ if k.startswith("PYTEST_XDIST")))
    """)
    for result in (pytester.runpytest("-s"), pytester.runpytest_subprocess("-s")):
        result.assert_outcomes(passed=1)
        assert any(line.endswith("XDIST []") for line in result.outlines), result.outlines
    assert outside_xdist({"PYTEST_XDIST_WORKER": "gw0", "PATH": "/bin"}) == {"PATH": "/bin"}
