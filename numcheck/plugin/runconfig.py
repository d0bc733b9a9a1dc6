"""What a ``--numcheck`` run was asked to do: its options and ini keys, read once.

:func:`read_run_config` reads every option and ini key of a gating run at configure time, so
a bad value is a usage error (naming the option or key and the fix) before anything runs;
the rest of the run reads the frozen :class:`RunConfig`. The device is chosen apart
(:mod:`numcheck.plugin.device`); the calibration options are read by
:mod:`numcheck.plugin.calibration_options`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from numcheck.devices import set_gpu_models
from numcheck.gates import INVARIANCE_GATES
from numcheck.goldens.obtained import DEFAULT_FOLDER as DEFAULT_OBTAINED
from numcheck.history.store import save_folder
from numcheck.overhead.limits import default_gates
from numcheck.plugin import options
from numcheck.plugin.selection import collect_cases_folder, narrowing
from numcheck.report.drift_result import Rules
from numcheck.report.records import Report, ReportError, load_report


def run_gates(device: str, *, perf: bool, explain: bool) -> set[str]:
    """The gates beyond the numerics that a run measures.

    The cast ledger always (and the kernel audit on CUDA) unless explain mode prints them
    instead; the speedup gate with --numcheck-perf. A timing run leaves the kernel audit
    off: it attaches CUPTI through torch.profiler, and launches stay slower after it
    (docs/overhead.md, "On a GPU", has the measurement). Determinism and batch invariance
    always: they hold only the variants a case's keys name (numcheck.check.held_gates).
    """
    gates = set() if explain else default_gates(device)
    gates.update(INVARIANCE_GATES)
    if perf:
        gates.add("perf")
        gates.discard("kernels")
    return gates


@dataclass(frozen=True)
class RunConfig:
    """A gating run's options and ini keys, as values (paths resolved, rules parsed)."""

    #: --numcheck-regen: rewrite the selected cases' goldens before checking.
    regen: bool
    cases_dir: Path
    goldens_dir: Path
    #: Where failed checks' outputs go (--numcheck-obtained, else under the rootdir).
    obtained_dir: Path
    report_path: Path | None
    markdown_path: Path | None
    html_path: Path | None
    baseline_path: Path | None
    #: The baseline report, read on the controller (None without one, and on a worker).
    baseline: Report | None
    rules: Rules
    #: --numcheck-save / --numcheck-save-dir: (folder, may mark it git-ignored).
    save_to: tuple[Path, bool] | None
    #: --numcheck-explain: overhead reports are printed, not gated.
    explain: bool
    #: Gates beyond the numerics that this run measures (e.g. "perf" with --numcheck-perf);
    #: an op's outputs are always active.
    active_gates: frozenset[str]
    #: A first call longer than this many seconds prints a progress line while it runs
    #: and is listed in the summary (numcheck.check.firstcall).
    first_call_note_s: float
    #: --numcheck-prune: delete the stale goldens the run finds.
    prune: bool
    #: What keeps the run from covering the whole cases folder ('' when nothing does).
    narrowed_by: str
    #: Where checks run: "process" (a worker process) or "off" (this process).
    isolate: str = "off"
    #: How many worker processes run the checks (None: auto, decided by the session).
    workers: int | None = None
    #: A check's time limit outside its first call, and its first call's (None: none).
    timeout_s: float | None = None
    timeout_first_call_s: float | None = None
    #: --numcheck-sanitize: the compute-sanitizer tools (None: not asked).
    sanitize: tuple[str, ...] | None = None

    @property
    def writes_files(self) -> bool:
        """Whether the run writes a report file or keeps the run."""
        return not (self.save_to is None and self.report_path is None
                    and self.markdown_path is None and self.html_path is None)


def read_run_config(config: pytest.Config, device: str, *, is_worker: bool) -> RunConfig:
    """The run's options and ini keys; a bad value is a :class:`pytest.UsageError`.

    With no path arguments the cases folder becomes the suite (``config.args``).
    """
    root = config.rootpath
    # Before any case file loads: the GPU models this project's case files may name.
    set_gpu_models(config.getini(options.GPU_MODELS_INI))
    cases_dir = (root / config.getini(options.CASES_INI)).resolve()
    goldens_dir = (root / config.getini(options.GOLDENS_INI)).resolve()

    def path_option(name: str) -> Path | None:
        value = config.getoption(name)
        return None if not value else config.invocation_params.dir / value

    try:
        rules = Rules.from_pairs(config.getini(options.DRIFT_INI))
    except ValueError as exc:
        raise pytest.UsageError(f"{options.DRIFT_INI}: {exc}") from None
    baseline_path = path_option(options.BASELINE_OPTION)
    baseline = None
    if baseline_path is not None and not is_worker:
        try:
            baseline = load_report(baseline_path)
        except ReportError as exc:
            raise pytest.UsageError(f"{options.BASELINE_OPTION} {exc}") from None
    explain = bool(config.getoption(options.EXPLAIN_OPTION))
    gates = run_gates(device, perf=bool(config.getoption(options.PERF_OPTION)), explain=explain)
    raw = config.getini(options.FIRST_CALL_INI)
    try:
        first_call_note_s = float(raw)
        if not first_call_note_s >= 0:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(
            f"{options.FIRST_CALL_INI} = {raw!r}: expected a number of seconds >= 0 "
            f"(e.g. {options.FIRST_CALL_INI} = 5)") from None
    collect_cases_folder(config, cases_dir)
    prune = bool(config.getoption(options.PRUNE_OPTION))
    narrowed_by = narrowing(config, cases_dir)
    if prune and narrowed_by:
        raise pytest.UsageError(
            f"{options.PRUNE_OPTION} deletes goldens no case uses, so it needs the whole "
            f"cases folder, but the run is narrowed by {narrowed_by}. Fix: run "
            f"pytest {options.OPTION} {options.PRUNE_OPTION} without it"
        )
    isolate, workers, timeout_s, timeout_first_call_s, sanitize = read_isolation(config)
    return RunConfig(
        isolate=isolate,
        workers=workers,
        timeout_s=timeout_s,
        timeout_first_call_s=timeout_first_call_s,
        sanitize=sanitize,
        regen=bool(config.getoption(options.REGEN_OPTION)),
        cases_dir=cases_dir,
        goldens_dir=goldens_dir,
        obtained_dir=path_option(options.OBTAINED_OPTION) or root / DEFAULT_OBTAINED,
        report_path=path_option(options.REPORT_OPTION),
        markdown_path=path_option(options.MARKDOWN_OPTION),
        html_path=path_option(options.HTML_OPTION),
        baseline_path=baseline_path,
        baseline=baseline,
        rules=rules,
        save_to=save_folder(root, save=bool(config.getoption(options.SAVE_OPTION)),
                            save_dir=path_option(options.SAVE_DIR_OPTION)),
        explain=explain,
        active_gates=frozenset(gates),
        first_call_note_s=first_call_note_s,
        prune=prune,
        narrowed_by=narrowed_by,
    )


def read_isolation(
    config: pytest.Config,
) -> tuple[str, int | None, float | None, float | None, tuple[str, ...] | None]:
    """Where checks run, how many workers run them (None: auto), their time limits and the
    sanitizer's tools, from the options, the ini keys and the environment; a bad value is a
    :class:`pytest.UsageError`."""
    from numcheck.execute.sanitizer import parse_tools
    from numcheck.plugin.isolation import setting

    isolate, where = setting(config, options.ISOLATE_OPTION, options.ISOLATE_INI,
                             options.ISOLATE_ENV, "process")
    if isolate not in options.ISOLATE_MODES:
        raise pytest.UsageError(
            f"{where} = {isolate!r}: not a place to run checks. Fix: set it to one of "
            f"{', '.join(options.ISOLATE_MODES)}")
    count, source = setting(config, options.WORKERS_OPTION, options.WORKERS_INI,
                            options.WORKERS_ENV, "auto")
    workers = None if count == "auto" else int(count) if count.isdecimal() else 0
    if workers is not None and workers < 1:
        raise pytest.UsageError(
            f"{source} = {count!r}: not a number of check workers. Fix: set it to a whole "
            f"number >= 1, or auto (one per core on the CPU, one on a GPU or when timing)")

    def seconds(option: str, ini: str, default: float) -> float | None:
        value = config.getoption(option)
        source = option
        if value is None:
            raw = str(config.getini(ini)).strip()
            source = f"ini key {ini}"
            try:
                value = float(raw) if raw else default
            except ValueError:
                value = -1.0
        if not value >= 0:
            raise pytest.UsageError(f"{source}: expected seconds >= 0 (0: no limit). Fix: "
                                    f"e.g. {option}=300")
        return float(value) or None

    timeout_s = seconds(options.TIMEOUT_OPTION, options.TIMEOUT_INI, options.DEFAULT_TIMEOUT_S)
    first_s = seconds(options.TIMEOUT_FIRST_CALL_OPTION, options.TIMEOUT_FIRST_CALL_INI,
                      options.DEFAULT_TIMEOUT_FIRST_CALL_S)
    raw_tools = config.getoption(options.SANITIZE_OPTION)
    sanitize = None
    if raw_tools is not None:
        try:
            sanitize = parse_tools(raw_tools)
        except ValueError as exc:
            raise pytest.UsageError(f"{exc}. Fix: e.g. {options.SANITIZE_OPTION}=memcheck "
                                    f"(with '=' before any test path)") from None
        if isolate == "off":
            raise pytest.UsageError(
                f"{options.SANITIZE_OPTION} runs each check in a worker process under "
                f"compute-sanitizer, but {where} = off. Fix: drop one of the two")
    if isolate == "off":
        ends = "ends a check that runs too long by ending its worker process"
        for option, does in ((options.TIMEOUT_OPTION, ends),
                             (options.TIMEOUT_FIRST_CALL_OPTION, ends),
                             (options.WORKERS_OPTION, "sets how many worker processes run "
                                                      "the checks")):
            if config.getoption(option) is not None:
                raise pytest.UsageError(
                    f"{option} {does}, but {where} = off. Fix: drop {option}, or run with "
                    f"{options.ISOLATE_OPTION}=process")
    return isolate, workers, timeout_s, first_s, sanitize
