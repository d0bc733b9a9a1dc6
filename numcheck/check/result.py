"""What one check gives: the verdict of a (case, variant, device), as every room fills it.

The numerics (:func:`numcheck.check.against_golden.run_numerics`) make a :class:`CheckResult` with
one :class:`SeedResult` per seed; :func:`numcheck.check.run_check` adds what the speed gate and
the overhead audit measured and how a known-bad variant's expectation settled
(:class:`Settled`); the report (:mod:`numcheck.report.records`) reads it into a record.

It sits below every module of the check that fills a result, and the rooms that read one
(:mod:`numcheck.report`, the plugin) sit above the check; it names the speed gate's part by
the little it needs of it (:class:`PerfPart`): the module that makes it imports this one.
Every part is typed as its gate made it: the record's plain sections are made from them
once, at the edge (numcheck.report.records), and a result travels whole from a worker
process (``torch.save``; what the gates watched, without its tensors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from numcheck.cases import Case
from numcheck.check.against_sim import SimReport
from numcheck.check.plotdata import Plots
from numcheck.invariance.limits import InvarianceReport
from numcheck.localize.findings import Localization
from numcheck.numerics.metrics import ErrorMetrics
from numcheck.numerics.topk import TopkReport
from numcheck.numerics.verdict import Violation, worst
from numcheck.ops.spec import Outputs
from numcheck.overhead.limits import OverheadReport
from numcheck.prepare import Prepared

__all__ = ["CheckResult", "PerfPart", "SeedResult", "Settled", "display_id"]


def display_id(case: Case, variant: str, device: str) -> str:
    """``indexer::v4flash-b4-l2k::bf16[cpu]``: how a check is named in messages and tables."""
    return f"{case.op}::{case.id}::{variant}[{device}]"


class PerfPart(Protocol):
    """What the speed gate leaves in a result (a :class:`numcheck.check.perf.PerfResult`):
    its violations, the device class it held, and the record's ``timing`` section."""

    device_class: str

    def violations(self) -> list[Violation]: ...

    def record_section(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Settled:
    """How a known-bad variant's expectation (``expect.<variant>``) came out.

    ``caught``: the expected failures seen (violation keys). ``missed``: what the
    expectation names, among the gates and outputs that ran, that caught nothing (each must):
    an output or gate named whole, or the metrics named of one. ``outside``: violations the
    expectation does not cover. ``expected`` is the expectation as written
    (:meth:`numcheck.cases.Expectation.describe`). ``xfail`` when nothing was missed and
    nothing failed outside it: the variant failed as expected, and only so.
    """

    caught: tuple[str, ...]
    missed: tuple[str, ...]
    reason: str
    outside: tuple[Violation, ...] = ()
    expected: str = ""

    @property
    def xfail(self) -> bool:
        return not self.missed and not self.outside


@dataclass
class SeedResult:
    """What one seed measured: metrics per output, the top-k report, and violations."""

    seed: int
    metrics: dict[str, ErrorMetrics] = field(default_factory=dict)
    topk: TopkReport | None = None
    violations: list[Violation] = field(default_factory=list)
    #: The variant's outputs on the CPU, when the caller asked to keep them (calibration,
    #: the report's plot data, a failure's obtained file).
    outputs: Outputs | None = None
    #: Where the error sits, per failing output (only on a check's first failing seed).
    localization: list[Localization] = field(default_factory=list)
    #: Limits of the budget nothing measured on this seed (``<output>.<metric>`` -> why):
    #: ``max_err_ratio`` where the op's rounding envelope cannot run on this device or
    #: install. Not gated, and the record says so rather than listing them as limits.
    ungated: dict[str, str] = field(default_factory=dict)
    #: A low-precision variant's second reference on this seed, without the simulated
    #: outputs; None without a declared quantization.
    quant: SimReport | None = None


@dataclass
class CheckResult:
    """The verdict of one (case, variant, device)."""

    case: Case
    variant: str
    device: str
    seeds: list[SeedResult]
    violations: list[Violation]
    #: What the perf gate (speedup with its interval) and the cast ledger measured, when run.
    perf: PerfPart | None = None
    overhead: OverheadReport | None = None
    #: Seconds the numerics waited for the device lock (shared), reported with the timing.
    numerics_lock_wait_s: float = 0.0
    #: A known-bad variant's expected failures, settled (None for an ordinary check).
    settled: Settled | None = None
    #: The record's compact plot data (numcheck.check.plotdata) and a note shown in its row.
    plots: Plots | None = None
    note: str | None = None
    #: Seconds of the check's first call of its variant (compile, warm-up), timed apart
    #: (numcheck.check.firstcall); None when the check made no call of its own.
    first_call_s: float | None = None
    #: The variant's one-time preparation on the case's first seed; None without one.
    prepared: Prepared | None = None
    #: Where a failed check's outputs were written for diffing against the golden (its
    #: obtained file, numcheck.goldens.obtained); None when none was kept.
    obtained: Path | None = None
    #: What the determinism and batch-invariance gates measured; None when neither ran.
    invariance: InvarianceReport | None = None
    #: The op's outputs the variant does not compute (``Variant.produces``); empty for a
    #: variant that computes them all.
    not_produced: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.violations

    @property
    def id(self) -> str:
        return display_id(self.case, self.variant, self.device)

    def worst(self) -> Violation | None:
        return worst(self.violations)

    def metric(self, output: str, name: str) -> float | None:
        """Worst value of an error metric over seeds (None when not measured: no seed, or
        ``max_err_ratio`` without a rounding reference)."""
        values = [s.metrics[output].value(name) for s in self.seeds
                  if output in s.metrics and s.metrics[output].measured(name)]
        if any(math.isnan(v) for v in values):  # undefined on some seed: say so
            return math.nan
        return max(values) if values else None

    @property
    def ungated(self) -> dict[str, str]:
        """Limits of the budget that no seed measured (``<output>.<metric>`` -> why)."""
        found: dict[str, str] = {}
        for s in self.seeds:
            found.update(s.ungated)
        return found

    def quant_summary(self) -> SimReport | None:
        """The second reference over seeds (None for a variant without a declared
        quantization): the worst ``sim_ratio`` and where, the operands' findings, where the
        operands came from."""
        per_seed = [(s.seed, s.quant) for s in self.seeds if s.quant is not None]
        if not per_seed:
            return None
        ratios = [(q.sim_ratio, seed, q.sim_ratio_at) for seed, q in per_seed
                  if q.sim_ratio is not None]
        worst = max(ratios, key=lambda r: r[0], default=None)
        first = per_seed[0][1]
        return SimReport(
            {}, first.scheme, first.operands, first.calls, first.recorded,
            sim_ratio=None if worst is None else worst[0],
            sim_ratio_at="" if worst is None else f"seed {worst[1]}, {worst[2]}",
            findings=[f"seed {seed}: {f}" for seed, q in per_seed for f in q.findings][:6],
            n_findings=sum(q.n_findings for _, q in per_seed))

    def topk_value(self, name: str) -> float | None:
        """Worst (lowest) value of a top-k statistic over seeds."""
        values = [s.topk.value(name) for s in self.seeds if s.topk is not None]
        return min(values) if values else None

    @property
    def localization(self) -> list[Localization]:
        """Where the error of each failing output sits (empty for a pass)."""
        return next((s.localization for s in self.seeds if s.localization), [])

    def worst_topk(self) -> TopkReport | None:
        """The seed's top-k report with the most unexplained flips."""
        reports = [s.topk for s in self.seeds if s.topk is not None]
        return max(reports, key=lambda r: (r.n_unexplained, -r.recall_min), default=None)
