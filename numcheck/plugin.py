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
PRUNE_OPTION = "--numcheck-prune"
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
        PRUNE_OPTION,
        action="store_true",
        default=False,
        help="delete the stale goldens the run reports (golden files no case uses). "
        "Needs the whole cases folder: refused with -k or node ids.",
    )
    parser.addini(CASES_INI, "folder of numcheck case files (*.toml), relative to the rootdir",
                  default="cases")
    parser.addini(GOLDENS_INI, "folder of numcheck goldens, relative to the rootdir",
                  default="goldens")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "numcheck: a numcheck (case, variant, device) check")
    if not config.getoption(OPTION):
        for flag in (REGEN_OPTION, PRUNE_OPTION):
            if config.getoption(flag):
                raise pytest.UsageError(f"{flag} only works together with {OPTION}")
        return
    from numcheck.session import NumcheckSession  # torch is imported only when switched on

    session = NumcheckSession(config)
    config.stash[NumcheckSession.KEY] = session
    config.pluginmanager.register(session, "numcheck-session")
