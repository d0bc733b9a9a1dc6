"""The pytest plugin (entry point ``pytest11: numcheck``): options, ini keys, switch-on.

Glue only. Without ``--numcheck`` nothing is registered and torch is never imported, so
plain ``pytest`` stays fast; with it, :class:`numcheck.session.NumcheckSession` is
registered as a plugin and does the work through the pure modules.
"""

from __future__ import annotations

import pytest

OPTION = "--numcheck"
REGEN_OPTION = "--numcheck-regen"
DEVICE_OPTION = "--numcheck-device"
PERF_OPTION = "--numcheck-perf"
EXPLAIN_OPTION = "--numcheck-explain"
CASES_INI = "numcheck_cases"
GOLDENS_INI = "numcheck_goldens"
DEVICES = ("auto", "cpu", "cuda")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("numcheck", "numcheck: precision validation against FP32 goldens")
    group.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="run every (case, variant) of the case files against its FP32 golden. "
        "With no path arguments the cases folder is collected.",
    )
    group.addoption(
        REGEN_OPTION,
        action="store_true",
        default=False,
        help="rewrite the goldens of the selected cases (respects -k and node ids) "
        "from the FP32 reference before checking.",
    )
    group.addoption(
        DEVICE_OPTION,
        choices=DEVICES,
        default="auto",
        help="device the variants run on: auto (cuda when available, else cpu), cpu or cuda.",
    )
    group.addoption(
        PERF_OPTION,
        action="store_true",
        default=False,
        help="also time every variant against its reference (interleaved, device timers), "
        "gate on the case files' speedup_min and record the times in pytest-benchmark "
        "(--benchmark-json, --benchmark-autosave, --benchmark-compare).",
    )
    group.addoption(
        EXPLAIN_OPTION,
        action="store_true",
        default=False,
        help="print each selected check's cast ledger (and, on CUDA, its kernel table) "
        "without gating on them (the overhead gates are off; numerics still run).",
    )
    parser.addini(CASES_INI, "folder of numcheck case files (*.toml), relative to the rootdir",
                  default="cases")
    parser.addini(GOLDENS_INI, "folder of numcheck goldens, relative to the rootdir",
                  default="goldens")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "numcheck: a numcheck (case, variant, device) check")
    if not config.getoption(OPTION):
        for flag in (REGEN_OPTION, PERF_OPTION, EXPLAIN_OPTION):
            if config.getoption(flag):
                raise pytest.UsageError(f"{flag} only works together with {OPTION}")
        return
    from numcheck.session import NumcheckSession  # torch is imported only when switched on

    session = NumcheckSession(config)
    config.stash[NumcheckSession.KEY] = session
    config.pluginmanager.register(session, "numcheck-session")
