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
REPORT_OPTION = "--numcheck-report"
MARKDOWN_OPTION = "--numcheck-markdown"
BASELINE_OPTION = "--numcheck-baseline"
CASES_INI = "numcheck_cases"
GOLDENS_INI = "numcheck_goldens"
DRIFT_INI = "numcheck_drift_rules"
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
        REPORT_OPTION,
        metavar="PATH",
        default=None,
        help="write every check's record (metrics, budgets, verdicts, environment) as JSON "
        "to PATH; schema in docs/report.md. With -n N the workers' records are merged here.",
    )
    group.addoption(
        MARKDOWN_OPTION,
        metavar="PATH",
        default=None,
        help="write the human summary (headline, failing checks, a table per op) as "
        "markdown to PATH, and append it to $GITHUB_STEP_SUMMARY when that is set.",
    )
    group.addoption(
        BASELINE_OPTION,
        metavar="PATH",
        default=None,
        help="compare this run with a baseline report (e.g. main's --numcheck-report) and "
        f"fail on a regression; rules in the {DRIFT_INI} ini key.",
    )
    parser.addini(
        DRIFT_INI,
        "baseline drift rules as name=value: calc_diff_factor (2), calc_diff_floor (1e-10), "
        "recall_drop (0), speedup_drop (0.05)",
        type="args",
        default=[],
    )
    parser.addini(CASES_INI, "folder of numcheck case files (*.toml), relative to the rootdir",
                  default="cases")
    parser.addini(GOLDENS_INI, "folder of numcheck goldens, relative to the rootdir",
                  default="goldens")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "numcheck: a numcheck (case, variant, device) check")
    if not config.getoption(OPTION):
        for needs in (REGEN_OPTION, REPORT_OPTION, MARKDOWN_OPTION, BASELINE_OPTION):
            if config.getoption(needs):
                raise pytest.UsageError(f"{needs} only works together with {OPTION}")
        return
    from numcheck.session import NumcheckSession  # torch is imported only when switched on

    session = NumcheckSession(config)
    config.stash[NumcheckSession.KEY] = session
    config.pluginmanager.register(session, "numcheck-session")
