"""The pytest plugin (entry point ``pytest11: numcheck``): options, ini keys, switch-on.

Glue only. Without ``--numcheck`` nothing is registered and torch is never imported, so
plain ``pytest`` stays fast; with it, the run's state
(:class:`numcheck.plugin.session.NumcheckSession`, in the stash) and its hooks
(:mod:`numcheck.plugin.runhooks`) are registered and do the work through the pure modules. The
``numcheck_golden`` fixture is available in every run (it imports torch when a test asks
for it), and ``pytest_numcheck_register`` (:mod:`numcheck.plugin.hooks`) lets a conftest.py add
ops and variants.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from numcheck.plugin import hooks
from numcheck.plugin import options as o
from numcheck.plugin.calibration_options import CALIBRATION_FLAGS, add_options, settings_from_config
from numcheck.plugin.options import (  # re-exported: numcheck.plugin.OPTION etc.
    BASELINE_OPTION,
    CASES_INI,
    DEVICE_INI,
    DEVICE_OPTION,
    DEVICES,
    DRIFT_INI,
    EXPLAIN_OPTION,
    FIRST_CALL_INI,
    GOLDENS_INI,
    GPU_MODELS_INI,
    GROUP,
    HTML_OPTION,
    MARKDOWN_OPTION,
    OBTAINED_OPTION,
    OPTION,
    PERF_OPTION,
    PRUNE_OPTION,
    REGEN_OPTION,
    REPORT_OPTION,
    SAVE_DIR_OPTION,
    SAVE_OPTION,
)

if TYPE_CHECKING:
    from numcheck.plugin.golden_fixture import GoldenCheck

#: ``(golden path, rewritten?)`` of each fixture golden regenerated in this run.
FIXTURE_GOLDENS = pytest.StashKey[list[tuple[Path, bool]]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "numcheck: precision validation against FP32 goldens")
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
        "from the FP32 reference before checking; without --numcheck, only the goldens "
        "of numcheck_golden checks in the selected tests.",
    )
    group.addoption(
        DEVICE_OPTION,
        choices=DEVICES,
        default=None,
        help="device the variants run on: auto (cuda when available, else cpu), cpu or cuda. "
        f"Default: the {DEVICE_INI} ini key, else auto.",
    )
    parser.addini(DEVICE_INI, "device the variants run on when --numcheck-device is not "
                  "given: auto, cpu or cuda", default="auto")
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
        HTML_OPTION,
        metavar="PATH",
        default=None,
        help="write a self-contained HTML report (no network): run header, every check with "
        "value/budget bars, error histograms, top-k flips, speedup intervals and drift. "
        "Plots need the html extra (matplotlib); without it the tables are written.",
    )
    group.addoption(
        OBTAINED_OPTION,
        metavar="DIR",
        default=None,
        help="folder for the outputs of failed checks, written as "
        "<op>/<case>.<variant>.obtained.safetensors for diffing against the golden "
        "(default: .numcheck/obtained under the rootdir, git-ignored).",
    )
    group.addoption(
        SAVE_OPTION,
        action="store_true",
        default=False,
        help="keep this run's JSON report in the history folder, "
        ".numcheck/history/<device class>/<commit>-<time>.json under the rootdir "
        "(git-ignored), for python -m numcheck history / matrix.",
    )
    group.addoption(
        SAVE_DIR_OPTION,
        metavar="DIR",
        default=None,
        help=f"keep the run's report under DIR instead (implies {SAVE_OPTION}): "
        "DIR/<device class>/<commit>-<time>.json.",
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
        "baseline drift rules as name=value: same_device_factor (1.25), calc_diff_factor "
        "(2, across device names), calc_diff_floor (1e-10), recall_drop (0), speedup_drop "
        "(0.05), allow_removed (false: a check missing from the run fails); a quantized "
        "check's simulated reference: sim_same_device_factor (1.25), sim_factor (4), "
        "sim_floor (1e-6), sim_ratio_factor (2), sim_ratio_floor (0.25)",
        type="args",
        default=[],
    )
    group.addoption(
        PRUNE_OPTION,
        action="store_true",
        default=False,
        help="delete the stale goldens the run reports (golden files no case uses). "
        "Needs the whole cases folder: refused with -k or node ids.",
    )
    add_options(group)
    add_isolation_options(group, parser)
    parser.addini(FIRST_CALL_INI, "seconds after which a check's first call of its variant "
                  "(kernel compiles, warm-up) prints a progress line, and is listed in the "
                  "summary (default 5)", default="5")
    parser.addini(CASES_INI, "folder of numcheck case files (*.toml), relative to the rootdir",
                  default="cases")
    parser.addini(GPU_MODELS_INI, "GPU models (device classes, as python -m numcheck onboard "
                  "--class prints them) case files may key thresholds by, beside the ones "
                  "numcheck knows (numcheck/devices.py)", type="args", default=[])
    parser.addini(GOLDENS_INI, "folder of numcheck goldens, relative to the rootdir",
                  default="goldens")


def add_isolation_options(group: Any, parser: pytest.Parser) -> None:
    """Where checks run, their time limits, and the memory checker (docs/reliability.md)."""
    group.addoption(
        o.ISOLATE_OPTION, choices=o.ISOLATE_MODES, default=None,
        help="where checks run: 'process' (default) runs them in a worker process, so that "
        "one that crashes, hangs or runs out of memory fails alone and the run goes on; "
        "'off' runs them in the pytest process. Default: ini numcheck_isolate, else "
        f"${o.ISOLATE_ENV}, else process.")
    parser.addini(o.ISOLATE_INI, "where checks run: process (default) or off", default="")
    group.addoption(
        o.WORKERS_OPTION, default=None, metavar="N",
        help="how many worker processes run the checks, each taking whole cases: a number, "
        "or 'auto' (the default: one per core on the CPU, one on a GPU or when timing). "
        f"Default: ini {o.WORKERS_INI}, else ${o.WORKERS_ENV}, else auto.")
    parser.addini(o.WORKERS_INI, "how many worker processes run the checks: a number or "
                  "auto (default)", default="")
    group.addoption(
        o.TIMEOUT_OPTION, type=float, default=None, metavar="SECONDS",
        help="a check's time limit outside its first call (0: none; default: ini "
        f"numcheck_timeout, else {o.DEFAULT_TIMEOUT_S:g}). Needs process isolation.")
    parser.addini(o.TIMEOUT_INI, "a check's time limit in seconds outside its first call "
                  f"(0: none; default {o.DEFAULT_TIMEOUT_S:g})", default="")
    group.addoption(
        o.TIMEOUT_FIRST_CALL_OPTION, type=float, default=None, metavar="SECONDS",
        help="the time limit of a check's first call of its variant, which compiles "
        f"(0: none; default: ini numcheck_timeout_first_call, else "
        f"{o.DEFAULT_TIMEOUT_FIRST_CALL_S:g}).")
    parser.addini(o.TIMEOUT_FIRST_CALL_INI, "the time limit in seconds of a check's first "
                  f"call (0: none; default {o.DEFAULT_TIMEOUT_FIRST_CALL_S:g})", default="")
    group.addoption(
        o.SANITIZE_OPTION, nargs="?", const="memcheck", default=None,
        metavar="TOOLS",
        help="run each selected check under compute-sanitizer (CUDA; comma-separated tools "
        "of memcheck, racecheck, initcheck, synccheck; default memcheck), in a worker of its "
        "own with the caching allocator off; a check with sanitizer errors fails.")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    # Before any conftest or ini value is read: a space-separated option value that pytest
    # took for a test path must not move the rootdir (numcheck/plugin/rootdir_repair.py).
    from numcheck.plugin.rootdir_repair import repair, value_options

    repair(early_config, args, value_options(parser, GROUP))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "numcheck: a numcheck (case, variant, device) check")
    config.stash[FIXTURE_GOLDENS] = []
    if not config.getoption(OPTION):
        # --numcheck-regen alone is allowed: it regenerates numcheck_golden fixture goldens.
        needs_numcheck = (PERF_OPTION, EXPLAIN_OPTION, REPORT_OPTION, MARKDOWN_OPTION,
                          BASELINE_OPTION, PRUNE_OPTION, HTML_OPTION, OBTAINED_OPTION,
                          SAVE_OPTION, SAVE_DIR_OPTION, "--numcheck-isolate", "--numcheck-workers",
                          "--numcheck-timeout", "--numcheck-timeout-first-call",
                          "--numcheck-sanitize", *CALIBRATION_FLAGS)
        for needs in needs_numcheck:
            if config.getoption(needs) not in (None, False, []):
                raise pytest.UsageError(f"{needs} only works together with {OPTION}")
        return
    from numcheck.plugin.isolation import start_early

    start_early(config)  # before this process imports torch
    register_user_ops(config)
    # torch is imported only when switched on.
    from numcheck.plugin.runhooks import RunHooks
    from numcheck.plugin.session import NumcheckSession

    session = NumcheckSession(config)
    config.stash[NumcheckSession.KEY] = session
    config.pluginmanager.register(RunHooks(session), "numcheck-session")
    register_calibration(config)


def register_calibration(config: pytest.Config) -> None:
    """With a calibration option, the checks measure instead of gating (plugin/calibration.py)."""
    settings = settings_from_config(config)
    if settings.on:
        from numcheck.plugin.calibration import CalibrationMode

        mode = CalibrationMode(config, settings)
        config.stash[CalibrationMode.KEY] = mode
        config.pluginmanager.register(mode, "numcheck-calibrate")


def register_user_ops(config: pytest.Config) -> None:
    """Installed packages' ``numcheck.ops`` entry points, then the conftest hook."""
    from numcheck.ops import registry

    try:
        registry.load_entry_points()
        # What the hook registers lives for this run only (pytester runs pytest many times
        # in one process); installed packages' entry points stay, like their imports.
        scope = contextlib.ExitStack()
        scope.enter_context(registry.isolated())
        config.add_cleanup(scope.close)
        # Historic: a conftest.py that loads later (in a sub-folder) is called when it loads.
        config.hook.pytest_numcheck_register.call_historic(
            kwargs={"registry": registry.Registrar("a pytest_numcheck_register hook")}
        )
    except registry.RegistrationError as exc:
        raise pytest.UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a hook's own error: one line, where it raised
        raise pytest.UsageError(
            f"numcheck: a pytest_numcheck_register hook raised {type(exc).__name__}"
            f"{_hook_line(exc)}: {exc}") from None


def _hook_line(exc: BaseException) -> str:
    """`` at conftest.py:6 (pytest_numcheck_register)``: the user's line that raised (the
    innermost frame outside numcheck and the plugin machinery), else where it raised."""
    import os
    import traceback

    from numcheck.ops.spec import raised_at

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    machinery = (package, os.path.dirname(pytest.__file__), os.path.dirname(os.__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<")  # generated code (a dataclass __init__)
              and not os.path.abspath(f.filename).startswith(machinery)
              and "pluggy" not in f.filename and "_pytest" not in f.filename]
    if not frames:
        return raised_at(exc)
    f = frames[-1]
    path = os.path.abspath(f.filename)
    shown = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else f.filename
    return f" at {shown}:{f.lineno} ({f.name})"


@pytest.fixture
def numcheck_golden(request: pytest.FixtureRequest) -> Iterator[GoldenCheck]:
    """Compare a tensor (``.check``) or a top-k selection (``.check_topk``) with a golden
    stored under the goldens folder by test id; ``--numcheck-regen`` (re)writes it from
    the reference function. See :class:`numcheck.plugin.golden_fixture.GoldenCheck`."""
    from numcheck.plugin.golden_fixture import GoldenCheck

    config = request.config
    nodeid = request.node.nodeid
    yield GoldenCheck(
        goldens_dir=config.rootpath / config.getini(GOLDENS_INI),
        test_id=nodeid,
        regen=bool(config.getoption(REGEN_OPTION)),
        regen_command=f"pytest {REGEN_OPTION} {shlex.quote(nodeid)}",
        reproduce_command=f"pytest {shlex.quote(nodeid)}",
        written=config.stash[FIXTURE_GOLDENS],
    )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    written = config.stash.get(FIXTURE_GOLDENS, [])
    regen = config.getoption(REGEN_OPTION)
    if written:
        terminalreporter.write_sep("=", "numcheck_golden goldens")
        for path, rewritten in written:
            try:
                shown = path.relative_to(config.rootpath)
            except ValueError:
                shown = path
            terminalreporter.write_line(f"golden {'rewritten' if rewritten else 'unchanged'}: "
                                        f"{shown}")
    elif regen and not config.getoption(OPTION):
        # Say plainly what the flag did not do: case goldens need --numcheck too.
        terminalreporter.write_line(
            f"numcheck: {REGEN_OPTION} without {OPTION} regenerates only numcheck_golden "
            f"checks, and none ran. For case goldens: pytest {OPTION} {REGEN_OPTION}"
        )
