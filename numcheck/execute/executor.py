"""Where a run executes its checks: one request in, one :class:`CheckResult` out.

This is the seam between a run (the pytest items, :mod:`numcheck.plugin.items`) and the
code that runs a check. The items build a :class:`CheckRequest` (plain data: the case, the
variant, the device) and call an :class:`Executor`; they read nothing back but the
:class:`~numcheck.check.result.CheckResult` (or the error that left no verdict:
:class:`~numcheck.goldens.files.GoldenError`, :class:`~numcheck.ops.spec.VariantError`,
:class:`~numcheck.perf.timing.TimingError`), and decide the pytest outcome from it. A
calibration run's items send a :class:`~numcheck.calibrate.measuring.MeasureRequest` through
the same call instead, and get back what the check measured (its payloads).

:class:`InProcess` runs each check in the calling process, with the run's
:class:`~numcheck.execute.case_cache.CaseCache`: the case's golden, then
:func:`numcheck.check.run_check`, then what the report keeps beyond the verdict (plot data,
the tf32-on-CPU note) and, for a check that failed outside what its case expects, the
obtained file (:attr:`CheckResult.obtained`). Everything the item needs is on the result,
so the variant's output tensors never have to leave the executor: an executor that runs
each check in a process of its own (a worker per device, restarted after a crash, a time
limit per check) replaces :class:`InProcess` behind the same call (docs/architecture.md,
"Where a check is executed").
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Protocol

from numcheck.calibrate.measuring import MeasureRequest, measure_check
from numcheck.calibrate.payloads import Payload
from numcheck.cases import Case
from numcheck.check import run_check
from numcheck.check.extras import annotate, keep_failed
from numcheck.check.firstcall import DEFAULT_NOTE_S, Progress
from numcheck.check.result import CheckResult
from numcheck.execute.case_cache import CaseCache
from numcheck.ops.registry import get_op
from numcheck.perf.sections import DeviceSections


@dataclass(frozen=True)
class CheckRequest:
    """One check to execute, as plain data (what a check's process would be sent)."""

    case: Case
    variant: str
    device: str
    #: The command that regenerates the case's golden, named when the golden is refused.
    regen_hint: str


#: What an executor is asked, and what it answers: a check's result, or what it measured.
Request = CheckRequest | MeasureRequest
Answer = CheckResult | list[Payload]


class Executor(Protocol):
    """Runs one request and gives its answer; raises only the errors that leave no verdict."""

    def __call__(self, request: Request) -> Answer: ...


def failed_outside_expectation(result: CheckResult) -> bool:
    """A failure the run reports as one: not a known-bad variant caught as its case expects
    (an xfail) nor one that escaped its expectation (a strict xpass), but violations of its
    own."""
    settled = result.settled
    return not result.passed and (settled is None or bool(settled.outside))


@dataclass(eq=False)
class InProcess:
    """Executes each check in this process (the run's gates, device locks and caches)."""

    cases: CaseCache
    _: KW_ONLY
    gates: Collection[str]
    obtained_dir: Path
    #: The obtained file names its golden relative to this folder (the rootdir).
    root: Path
    explain: bool = False
    sections: DeviceSections | None = None
    progress: Progress | None = None
    first_call_note_s: float = DEFAULT_NOTE_S

    def __call__(self, request: Request) -> Answer:
        case = request.case
        op = get_op(case.op)
        if isinstance(request, MeasureRequest):  # calibration: measured, never gated
            return measure_check(request, op, references=self.cases.references(op, case),
                                 inputs=self.cases.inputs, sections=self.sections,
                                 progress=self.progress)
        golden = None if case.perf_only else self.cases.golden(op, case,
                                                               regen_hint=request.regen_hint)
        inputs = self.cases.inputs(op, case)
        result = run_check(
            op, case, request.variant, request.device, inputs, golden,
            gates=self.gates, explain=self.explain, sections=self.sections,
            keep_outputs=True, progress=self.progress,
            first_call_note_s=self.first_call_note_s,
        )
        if golden is not None:
            annotate(result, op, golden, inputs)
        if failed_outside_expectation(result):
            result.obtained = keep_failed(self.obtained_dir, result, inputs,
                                          golden=relative(self.cases.path(op, case), self.root))
        return result


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` where it lies under it, else as it is."""
    return str(path.relative_to(root) if path.is_relative_to(root) else path)
