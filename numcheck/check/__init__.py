"""One (case, variant, device) check, end to end: the single definition of what a check is.

    golden + inputs --numerics (numcheck.numerics)---> metrics, top-k, violations
                    --speed gate (numcheck.perf)----> speedup interval, violations
                    --overhead (numcheck.overhead)--> cast ledger / kernel audit, violations
                    --expectations (case file)-----> known-bad variant caught as expected
                                                     (an output, a gate or metrics), or not
                    ==> one :class:`~numcheck.check.result.CheckResult`

The pytest item (through :mod:`numcheck.execute.executor`), the self-test
(:mod:`numcheck.selftest`) and calibration (:mod:`numcheck.calibrate`) all call
:func:`run_check`; they differ only in which gates they switch on and what they do with the
result. No pytest here.

This package is the room of the code that runs a check, on the floor above the measures it
composes and below where a run executes it (:mod:`numcheck.execute`; docs/architecture.md,
"Floors"); this module is its entry, and beside it:

- :mod:`~numcheck.check.run`: a case's inputs made once per seed, a variant run and checked
  for what it returns, the rounding envelope of a precision class;
- :mod:`~numcheck.check.against_golden`: one check's numerics, seed by seed, against the
  golden validated for its case;
- :mod:`~numcheck.check.perf` and :mod:`~numcheck.check.overhead`: the speed gate and the
  overhead audit of one check;
- :mod:`~numcheck.check.result`: what a check gives (:class:`CheckResult`);
- :mod:`~numcheck.check.firstcall`: the variant's first call, timed apart;
- :mod:`~numcheck.check.make_golden`: a golden made by running the op's reference;
- what a check keeps for its readers: :mod:`~numcheck.check.plotdata`,
  :mod:`~numcheck.check.cpu_tf32` (the tf32-on-CPU note), :mod:`~numcheck.check.extras`.

A variant's one-time preparation (``Variant.prepare``, :mod:`numcheck.prepare`) is made once
per seed and shared by the numerics, the speed gate and the cast ledger; only the call is
timed, and audited per call.

The golden arrives read and validated for the case
(:class:`~numcheck.goldens.case_golden.CaseGolden`: a missing, stale or corrupt one raised its
:class:`~numcheck.goldens.files.GoldenError` there). A variant that raises or returns the
wrong outputs (:class:`~numcheck.ops.spec.VariantError`) and a timer that cannot time
(:class:`~numcheck.perf.timing.TimingError`) are raised: they leave no verdict to return.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence

from numcheck.cases import Case, Expectation
from numcheck import phase
from numcheck.check.against_golden import run_numerics
from numcheck.check.firstcall import DEFAULT_NOTE_S, FirstCallWatch, Progress, device_sync
from numcheck.check.invariance import measure_invariance
from numcheck.check.overhead import audit_overhead
from numcheck.check.perf import measure_perf
from numcheck.check.result import CheckResult, Settled, display_id
from numcheck.check.run import CaseInputs, run_variant
from numcheck.devices import run_class
from numcheck.gates import BATCH_INVARIANCE_GATE, DETERMINISM_GATE, INVARIANCE_GATES, QUANT_GATE
from numcheck.goldens.case_golden import CaseGolden
from numcheck.inputs import to_device
from numcheck.invariance.limits import BATCH_INVARIANT_KEY, DETERMINISTIC_KEY, InvarianceReport
from numcheck.numerics.metric_names import MAX_FLIPS
from numcheck.numerics.verdict import Violation
from numcheck.ops.registry import OpSpec
from numcheck.overhead.limits import OVERHEAD_GATES
from numcheck.perf.sections import DeviceSections
from numcheck.prepare import Preparations


def settle_expected(
    expected: Expectation, violations: Sequence[Violation], active: Callable[[str], bool]
) -> Settled | None:
    """A known-bad variant's verdict against its expectation, or None for an ordinary check.

    What the expectation names (an output or gate whole, or metrics of one:
    :meth:`~numcheck.cases.Expectation.targets`) counts only where that gate or output ran
    (``active(name)``). Each of those must catch the variant (a violation it covers), and no
    violation may fall outside the expectation: then the result is an xfail, whichever
    metrics each seed tripped. Otherwise it is a failure that says which expected failures
    were missed and which violations fell outside (:class:`~numcheck.check.result.Settled`). With
    nothing named active and nothing failed, the check is an ordinary (passing) one.
    """
    live = {name: metrics for name, metrics in expected.targets().items() if active(name)}
    outside = tuple(v for v in violations if not expected.covers(v.key))
    if not live and not outside:
        return None
    caught = sorted({v.key for v in violations if v.output in live and expected.covers(v.key)})
    missed: list[str] = []
    for name, metrics in live.items():
        if any(v.output == name and (metrics is None or v.metric in metrics)
               for v in violations):
            continue
        missed += [name] if metrics is None or name in expected.gates else [
            f"{name}.{m}" for m in metrics]
    return Settled(tuple(caught), tuple(missed), expected.reason, outside,
                   expected.describe())


def cannot_run(
    op: OpSpec,
    case: Case,
    variant: str,
    device: str,
    *,
    gates: Collection[str] = (),
    perf_switch: str = "the perf gate on",
) -> str | None:
    """Why this (case, variant, device) check cannot run here, or None when it can.

    A case runs only on its ``devices``; a variant only where it is available (its
    ``unavailable`` text says why not, e.g. a missing Triton); a perf-only case (no golden)
    only when the perf gate is among ``gates``. ``perf_switch`` names how to switch that gate
    on in the message (the plugin passes its command-line flag).
    """
    spec = op.variants[variant]
    if device not in case.devices:
        return f"case {case.id!r} does not run on {device} (its devices: {', '.join(case.devices)})"
    why = spec.why_not(device)
    if why:
        return f"variant {variant!r}: {why}" if spec.unavailable else f"variant {variant!r} {why}"
    if case.perf_only and "perf" not in gates:
        return f"perf-only case {case.id!r} (no golden): runs with {perf_switch}"
    if case.perf_only and spec.produces is not None:
        return (f"variant {variant!r} computes part of the op ({', '.join(op.produced(variant))}"
                f"): a perf-only case times it against the whole reference, which is not "
                "like for like, so it is not timed")
    return None


def held_gates(case: Case, variant: str, device: str, gates: Collection[str]) -> set[str]:
    """The gates of ``gates`` that hold this check: the run's, less the determinism and
    batch-invariance gates where the case does not turn them on for the variant on the
    device."""
    held = set(gates)
    for gate, spec in ((DETERMINISM_GATE.name, case.deterministic),
                       (BATCH_INVARIANCE_GATE.name, case.batch_invariant)):
        if spec is None or not spec.holds(variant, device):
            held.discard(gate)
    return held


def _gated_on_class(case: Case, device: str,
                    report: InvarianceReport) -> tuple[list[Violation], set[str]]:
    """The invariance gates' violations that fail the check on this device's class, and
    the gates that do not: a gate whose key does not name the class (a GPU model nobody
    measured it on) measures and reports (the report is told why), and never fails."""
    cls = run_class(device)
    kept = report.violations()
    for gate, key, spec in ((DETERMINISM_GATE.name, DETERMINISTIC_KEY, case.deterministic),
                            (BATCH_INVARIANCE_GATE.name, BATCH_INVARIANT_KEY,
                             case.batch_invariant)):
        ran = report.runs if gate == DETERMINISM_GATE.name else report.batch
        if ran is None or spec is None or spec.gates_on(cls, device):
            continue
        report.ungated[gate] = spec.unset(cls, key)
        report.device_class = cls
        kept = [v for v in kept if v.output != gate]
    return kept, set(report.ungated)


#: Why a variant that computes part of the op is not timed by the perf gate (its row's
#: note): a speedup against the whole reference would flatter it.
PARTIAL_NOT_TIMED = "not timed: computes part of the op"


@contextlib.contextmanager
def _unlocked(*, exclusive: bool) -> Iterator[float]:
    yield 0.0


def run_check(
    op: OpSpec,
    case: Case,
    variant: str,
    device: str,
    inputs: CaseInputs,
    golden: CaseGolden | None,
    *,
    gates: Collection[str] = (),
    explain: bool = False,
    max_flips: int = MAX_FLIPS,
    keep_outputs: bool = False,
    sections: DeviceSections | None = None,
    progress: Progress | None = None,
    first_call_note_s: float = DEFAULT_NOTE_S,
) -> CheckResult:
    """Run one check: numerics against ``golden``, then the active gates, then expectations.

    Args:
        golden: the case's golden, validated for it; None only for a perf-only case (no
            numerics).
        gates: the gates beyond the numerics to run: ``perf`` (time against the reference),
            ``casts`` (cast ledger), ``kernels`` (kernel audit, CUDA only), ``determinism``
            and ``batch_invariance`` (where the case turns them on for the variant and the
            device: :func:`held_gates`). A variant that computes part of the op
            (``Variant.produces``) is never timed: the note says so.
        explain: audit casts (and kernels on CUDA) without gating on them.
        max_flips: unexplained top-k flips kept per seed.
        keep_outputs: keep each seed's variant outputs (on the CPU) in the result.
        sections: the device lock of a run with several processes on one device
            (:mod:`numcheck.perf.gpulock`): numerics hold it shared, timing and the kernel
            audit exclusively. None: no lock (a single process).
        progress: where a first call of more than ``first_call_note_s`` seconds is
            announced (numcheck.check.firstcall); None: nowhere. The figure is kept either way.
    """
    gates = held_gates(case, variant, device, gates)
    partial = op.variants[variant].produces is not None
    not_timed = partial and "perf" in gates
    if not_timed:
        gates.discard("perf")  # not like for like: see PARTIAL_NOT_TIMED
    hold = sections.hold if sections is not None else _unlocked
    numerics_wait = 0.0
    first_seed, _ = inputs.get(case.seeds[0])
    # The variant's first call (compiles, warm-up) is timed apart and never by the perf gate.
    watch = FirstCallWatch(display_id(case, variant, device), progress,
                           note_after_s=first_call_note_s, sync=device_sync(device),
                           device=device)
    # One-time preparations (Variant.prepare), made once per seed and shared by the gates.
    preparations = Preparations()
    preparer = preparations.at(case.seeds[0])
    if golden is None:
        if not case.perf_only:
            raise ValueError(f"case {case.id!r} has numerics to check: it needs its golden")
        result = CheckResult(case, variant, device, [], [])
        if "perf" in gates:  # no numerics call came first: make the first call here
            spec = op.variants[variant]
            dev_inputs = to_device(first_seed, device)
            with hold(exclusive=False):
                with phase.span("prepare"):
                    prepared = preparer(spec, dev_inputs, case.params, device)
                with watch:
                    run_variant(spec, op, dev_inputs, case, device, prepared=prepared)
            result.first_call_s = watch.seconds
    else:
        # Shared: other workers' numerics run alongside, never a timed section.
        with hold(exclusive=False) as numerics_wait:
            result = run_numerics(op, case, variant, device, golden, inputs,
                                  max_flips=max_flips, keep_outputs=keep_outputs,
                                  preparations=preparations, first_call=watch)
    if golden is not None and gates & set(INVARIANCE_GATES):
        # Shared like the numerics: calls of the variant, nothing timed.
        with hold(exclusive=False), phase.span("invariance"):
            report = measure_invariance(
                op, case, variant, device, first_seed, preparer=preparer,
                determinism=DETERMINISM_GATE.name in gates,
                batch=BATCH_INVARIANCE_GATE.name in gates)
        result.invariance = report
        kept, ungated = _gated_on_class(case, device, report)
        result.violations += kept
        gates -= ungated  # measured and reported: no expectation counts on them here
    if "perf" in gates:
        with hold(exclusive=True) as waited, phase.span("timing"):  # the device alone
            perf = measure_perf(op, case, variant, device, first_seed, preparer=preparer)
        perf.lock_wait_s = waited
        result.perf = perf
        result.violations += perf.violations()
        result.numerics_lock_wait_s = numerics_wait
        if perf.decision.threshold is None:
            gates.discard("perf")  # no threshold on this class: reported, expects nothing
    audited = gates & set(OVERHEAD_GATES)
    if audited or explain:
        profile = device == "cuda" and (explain or "kernels" in audited)
        # A kernel audit times kernels (torch.profiler): it holds the device alone too.
        with hold(exclusive=profile) as waited, phase.span("ledger"):
            overhead, found = audit_overhead(op, case, variant, device, first_seed,
                                             gates=set() if explain else audited,
                                             kernels=profile, preparer=preparer)
        overhead.lock_wait_s = waited if profile else None
        result.overhead = overhead
        result.violations += found
    result.prepared = preparations.first(variant)
    if partial:
        result.not_produced = op.not_produced(variant)
    if not_timed:
        result.note = PARTIAL_NOT_TIMED
    expected = case.expect.get(variant)
    if expected is not None:
        # The outputs are checked when the numerics ran (a perf-only case has none).
        numerics = golden is not None
        # The quant gate runs with the numerics of a variant that declares its quantization.
        quant = numerics and op.variants[variant].quant is not None
        result.settled = settle_expected(
            expected, result.violations,
            lambda gate: (gate in op.outputs and numerics) or gate in gates
            or (gate == QUANT_GATE.name and quant),
        )
    return result
