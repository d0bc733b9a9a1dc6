"""The calibration mode of ``pytest --numcheck``: measure the selected checks, suggest
budgets and speed thresholds, and (on request) write them into the case files.

Registered as a plugin by :mod:`numcheck.plugin` when a calibration option is on. The
checks are collected and selected exactly as in a gating run (paths, ``-k``, the device,
ops from conftest hooks and entry points); each check then measures instead of gating: its
item (:class:`~numcheck.plugin.items.MeasureItem`) sends a measure request through the
run's executor, in this process or its worker process, so a variant over its current budget
does not fail the run. What a check measured (typed payloads,
:mod:`numcheck.calibrate.payloads`) travels on its test report as plain data (as the gate's
records do, so pytest-xdist works) and the controller prints the suggestions at the end:

- numerics (:mod:`numcheck.calibrate`): worst values over the case's seeds and N fresh ones,
  against the reference recomputed on the CPU, turned into budget tables by the headroom
  policy; pools budget several variants as one;
- speed (:mod:`numcheck.calibrate.speed`, :mod:`numcheck.perf.thresholds`): K timing runs
  per check, turned into ``speedup_min`` proposals for this device class.

Writing goes through :mod:`numcheck.calibrate.casewriter`, which names this run's command once in each
written file's header (``# set by: pytest ... (<date>, <device>, torch <version>)``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from numcheck.calibrate import LOWER_IS_WORSE
from numcheck.calibrate.casewriter import CaseWriteError, Change, Edit, write_edits
from numcheck.calibrate.guard import SUSPECT, Finding, accepted_notes, blocking
from numcheck.calibrate.payloads import (
    NumericsPayload,
    Payload,
    SpeedPayload,
    payload_from_data,
    payload_to_data,
    save_run,
)
from numcheck.calibrate.plan import RunInfo, plan_numerics
from numcheck.calibrate.speed import combine_speed, speed_section
from numcheck.execute.executor import relative
from numcheck.ops.registry import get_op
from numcheck.plugin.calibration_options import Settings
from numcheck.plugin.options import (
    CALIBRATE_ACCEPT_OPTION,
    CALIBRATE_POOL_OPTION,
    CALIBRATE_RENEW_OPTION,
    CALIBRATE_WITH_OPTION,
    CALIBRATE_WRITE_OPTION,
)
from numcheck.plugin.session import NumcheckSession
from numcheck.plugin.workers import is_worker

#: ``report.user_properties`` name of a check's measurements (their plain form, a list of
#: dicts: :func:`numcheck.calibrate.payloads.payload_to_data`).
PROPERTY = "numcheck_calibration"


class CalibrationMode:
    """Run-wide calibration state: what the checks measure, and what they measured."""

    KEY = pytest.StashKey["CalibrationMode"]()

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.payloads: list[Payload] = []
        #: Set at session finish when the selected checks all skipped (exit status 1).
        self.nothing_measured = False
        #: What the terminal summary prints (a line starting with NUL is a separator title).
        self.summary: list[str] = []
        #: (case file, case) -> the variants of its selected checks: a pool member with a
        #: check of its own is measured there, any other by the check it is pooled with.
        self.selected: dict[tuple[Path, str], set[str]] = {}

    # -- hooks: measurements travel on the reports to the controller ---------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """A pool naming a variant the op does not have is a usage error, before any run."""
        for item in session.items:
            case = getattr(item, "case", None)
            variant = getattr(item, "variant", "")
            if case is not None:
                self.selected.setdefault((case.source, case.id), set()).add(variant)
            members = self.settings.measuring.pools.get(variant, ())
            if case is None or not members:
                continue
            op = get_op(case.op)
            for member in members:
                if member not in op.variants:
                    raise pytest.UsageError(
                        f"{CALIBRATE_POOL_OPTION} {variant}: op {op.name!r} has no variant "
                        f"{member!r} (its variants: {', '.join(op.variants)}). Fix: register it "
                        "(pytest_numcheck_register) or drop it from the pool")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        payloads = getattr(item, "numcheck_calibration", None)
        if payloads and call.when == "call":
            report.user_properties.append((PROPERTY, [payload_to_data(p) for p in payloads]))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if is_worker(self.config):
            return
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, list):
                self.payloads.extend(payload_from_data(p) for p in value)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Suggest, and on request write; the exit status says whether that went through.

        Exit 0 when the selected checks were measured: measuring is not gating, so a value
        over its current budget fails nothing. Exit 1 when a selected variant looks like a
        bug (its measurements would make a budget no honest implementation of its class
        needs) and no --numcheck-calibrate-accept names it, or when a write is refused
        (numcheck.calibrate.guard): then nothing is written. A real error keeps its own
        non-zero status (a variant that raised fails its item; a bad case file is a
        collection error; no check selected is a usage error); selected checks that all
        skipped measured nothing, which a calibration step in a script must not take for
        success."""
        if is_worker(self.config) or self.config.option.collectonly:
            return
        if exitstatus == 0 and not self.payloads:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.nothing_measured = True
            return
        if self.payloads:
            self.summary, refused = self._conclude()
            if refused and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if is_worker(self.config):
            return
        tr = terminalreporter
        if not self.payloads:
            status = "; exit status 1" if self.nothing_measured else ""
            tr.write_line("numcheck calibrate: no check measured anything (all skipped, "
                          f"deselected or failed){status}")
            return
        for line in self.summary:
            if line.startswith("\0"):
                tr.write_sep("=", line[1:])
            else:
                tr.write_line(line)

    def _conclude(self) -> tuple[list[str], bool]:
        """The lines the terminal summary prints, and whether the run refused anything
        (numerics plan, speed proposals, findings, writes)."""
        settings, measuring = self.settings, self.settings.measuring
        # Collection order (the run's): the tables are printed in it, whatever order the
        # checks end in.
        order = {nodeid: i for i, nodeid in enumerate(
            self.config.stash[NumcheckSession.KEY].book.order)}
        payloads = sorted(self.payloads, key=lambda p: order.get(p.check.nodeid, len(order)))
        out: list[str] = []
        edits: dict[str, list[Edit]] = {}
        numerics = [p for p in payloads if isinstance(p, NumericsPayload)]
        earlier = [p for p in settings.earlier if isinstance(p, NumericsPayload)]
        speed = combine_speed([p for p in payloads if isinstance(p, SpeedPayload)],
                              [p for p in settings.earlier if isinstance(p, SpeedPayload)])
        run = RunInfo(_command(self.config), date.today().isoformat(), _torch(),
                      measuring.fresh or 0, measuring.first_seed)
        plan = plan_numerics(numerics, run, earlier=earlier, accepted=settings.accepted)
        sections = []
        if measuring.fresh is not None:
            on = numerics[0].check.device if numerics else "-"
            sections.append((f"suggested budgets ({on}, torch {_torch()})",
                             (plan.lines, plan.edits)))
        if measuring.speed_runs is not None:
            runs = measuring.speed_runs
            on = speed[0].on if speed else "-"
            sections.append((f"suggested speedup_min ({on}, {runs} runs each)",
                             speed_section(speed, margin=settings.margin)))
        for title, (lines, found) in sections:
            out.append(f"\0numcheck calibrate: {title}")
            out += lines
            for path, entries in found.items():
                edits.setdefault(path, []).extend(entries)
        if settings.json_path is not None:
            save_run(settings.json_path, payloads, torch_version=_torch())
            out.append(f"numcheck calibrate: measurements saved to {settings.json_path} "
                       f"(pool them into another run with {CALIBRATE_WITH_OPTION} PATH)")
        stands = blocking(plan.findings, settings.accepted, measuring.renew)
        # A bug-sized measurement, or one no budget can be made of (NaN): exit 1 even when
        # only printing, so that a script never takes the tables for a budget.
        suspects = [f for f in stands if f.kind in SUSPECT or f.kind == "nonfinite"]
        out += refusal_lines(stands, write=settings.write)
        notes = accepted_notes(plan.findings, settings.accepted, CALIBRATE_ACCEPT_OPTION)
        for (case, variant), texts in notes.items():
            out.append(f"numcheck calibrate: {case}: {variant}'s tables take measurements "
                       f"accepted past the honest limits ({CALIBRATE_ACCEPT_OPTION}); the "
                       "record keeps why:")
            out += [f"  {t}" for t in texts]
        if not settings.write:
            out.append(f"numcheck calibrate: nothing written; {CALIBRATE_WRITE_OPTION} writes "
                       "these values into the case files")
            return out, bool(suspects)
        if stands:
            return out, True
        if not edits:
            out.append("numcheck calibrate: no value to write")
        provenance = (run.command, _when(payloads))
        for path, file_edits in edits.items():
            shown = relative(Path(path), self.config.rootpath)
            records = {key: replace(rec, accepted=tuple(notes.get(key, ())))
                       for key, rec in plan.records.get(path, {}).items()}
            try:
                changes, skipped = write_edits(Path(path), file_edits, provenance, records)
            except CaseWriteError as exc:
                out.append(f"numcheck calibrate: {exc}: nothing written to it")
                continue
            values = [c for c in changes if c.old is not None or c.new is not None]
            out.append(f"numcheck calibrate: {shown}: {len(values)} value(s) changed")
            for change in changes:
                tighter = "  (tighter than before)" if _tighter(change) else ""
                out.append(f"  {change.describe()}{tighter}")
            for skip in skipped:
                out.append(f"  not written: {skip.describe()}")
        return out, False


def _tighter(change: Change) -> bool:
    """A written value that demands more than the file did (a lower error budget, a higher
    recall floor or speed threshold)."""
    if change.old is None or change.new is None:
        return False
    parts = change.where.split(".")
    raises = parts[-1] in LOWER_IS_WORSE or "speedup_min" in parts
    return change.new > change.old if raises else change.new < change.old


def refusal_lines(findings: list[Finding], *, write: bool) -> list[str]:
    """The findings that stand, as the terminal summary says them: what was (or would be)
    refused and the way out of each kind."""
    if not findings:
        return []
    suspects = [f for f in findings if f.kind in SUSPECT]
    others = [f for f in findings if f.kind not in SUSPECT]
    lines = [("numcheck calibrate: refused to write; nothing written (exit status 1):" if write
              else f"numcheck calibrate: {CALIBRATE_WRITE_OPTION} would refuse these tables"
              + (" (exit status 1: a selected variant looks like a bug):" if suspects else
                 " (exit status 1: a measurement is not finite):"
                 if any(f.kind == "nonfinite" for f in findings) else ":"))]
    if suspects:
        lines.append("  a selected variant looks like a bug, not an honest implementation of "
                     "its class (docs/budgets.md, \"What calibration refuses\"):")
        heads: dict[tuple[str, str], list[str]] = {}
        for f in suspects:  # one entry per variant and case: its worst element, then why
            entry = heads.setdefault((f.case, f.variant), [f"  - {f.head}"])
            entry += [f"      {d}" for d in f.details]
        for entry in heads.values():
            lines += entry
        names = ",".join(dict.fromkeys(f.variant.split()[0] for f in suspects))
        lines.append("    Fix: a variant past its class's honest limits is the suspect: keep its "
                     "budget and fix it (run 'reproduce' with --numcheck-explain to see where "
                     "it strays); budgets come from the class's honest implementations. If it "
                     "is honest and rounds where the class's envelope does not (a scheme of "
                     f"its own), write anyway with {CALIBRATE_ACCEPT_OPTION} {names}: the case "
                     "file records it")
    for f in others:
        first, *rest = f.text.split("\n")
        lines.append(f"  - {first}")
        lines += [f"      {r}" for r in rest]
    if any(f.kind in ("record", "unrecorded") for f in others):
        lines.append(f"    ({CALIBRATE_RENEW_OPTION} sets tables from this run alone)")
    return lines


def _command(config: pytest.Config) -> str:
    """This run's command line, as the case file's header names it."""
    return "pytest " + shlex.join(config.invocation_params.args)


def _when(payloads: Sequence[Payload]) -> str:
    """``2026-12-03, cpu, torch 2.13.0+cpu``: the date, the devices measured, torch."""
    devices = ", ".join(sorted({p.check.device for p in payloads})) or "-"
    return f"{date.today().isoformat()}, {devices}, torch {_torch()}"


def _torch() -> str:
    import torch

    return torch.__version__
