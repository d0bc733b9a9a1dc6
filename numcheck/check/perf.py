"""The speed gate of one check: time a (case, variant, device) against the op's reference.

    inputs of the case's first seed, moved to the device once
    reference / variant paired samples on demand (numcheck.perf.timing: graph replay by default)
    --> stopping rule: looks until the interval decides (numcheck.perf.sequential)
    --> medians, IQR (numcheck.perf.speedup) --> violations (numcheck.perf.limits)
    --> roofline against the device's measured peaks (numcheck.perf.roofline)

Plain Python, no pytest: :func:`numcheck.check.run_check` calls :func:`measure_perf` per
check (the plugin inside the device's exclusive lock, :mod:`numcheck.perf.gpulock`), and
calibration calls it directly. The measures it composes live in :mod:`numcheck.perf`; the
first timed check of a process also measures the machine's noise there
(:mod:`numcheck.perf.noise`), which warns and never changes a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from numcheck.cases import Case
from numcheck.check.result import display_id
from numcheck.check.run import run_variant
from numcheck.devices import device_name, run_class
from numcheck.inputs import to_device
from numcheck.numerics.verdict import Violation
from numcheck.ops.registry import Inputs, OpSpec, get_op
from numcheck.perf.limits import PerfSpec, violations
from numcheck.perf.noise import machine_noise, noise_warning
from numcheck.perf.roofline import Roofline, peaks_for
from numcheck.perf.sequential import UNGATED, Outcome, run
from numcheck.perf.speedup import Decision, SpeedupEstimate, Summary, summarize
from numcheck.perf.table import ms_text
from numcheck.perf.timing import PairedTimes, TimerRequest, TimingConfig, make_pair_timer
from numcheck.prepare import Preparer, prepare


@dataclass
class PerfResult:
    """The timing of one (case, variant, device) and its gate decision."""

    case: Case
    variant: str
    device: str
    spec: PerfSpec
    times: PairedTimes
    reference: Summary
    measured: Summary
    speedup: SpeedupEstimate
    decision: Decision
    roofline: Roofline
    reference_roofline: Roofline
    outcome: Outcome | None = None
    noise: dict[str, Any] | None = None
    #: Seconds this check waited for the device lock (set by the caller that held it).
    lock_wait_s: float = 0.0
    #: The device's class (``cpu``, ``H100``): the key of the threshold it was held to.
    device_class: str = ""
    #: The classes this check has a threshold for, when its own has none (not gated here).
    unset_classes: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return display_id(self.case, self.variant, self.device)

    def violations(self) -> list[Violation]:
        detail = (f"reference median {ms_text(self.reference.median)}, variant median "
                  f"{ms_text(self.measured.median)} (IQR {self.measured.rel_iqr:.1%}), "
                  f"{self.device} {self.times.timer}")
        warning = noise_warning(self.noise)
        if warning:
            detail += f"; {warning}"
        return violations(self.speedup, self.decision, detail)

    def record_section(self) -> dict[str, Any]:
        """The report record's ``timing`` section (docs/report.md): the speedup with its
        interval under the names the drift rules read, and the figures behind it."""
        info = self.extra_info()
        keep = ("confidence", "rounds", "median_s", "iqr_s", "reference_median_s",
                "reference_iqr_s", "speedup_min", "gate", "gate_reason", "tflops", "gbps",
                "pct_of_floor", "timer", "timing_notes", "calls_per_sample", "looks",
                "look_confidence", "stopped", "timing_s", "lock_wait_s", "noise",
                "device_class", "unset_classes")
        return {"speedup": info["speedup"], "ci_low": info["speedup_low"],
                "ci_high": info["speedup_high"], **{k: info[k] for k in keep}}

    def extra_info(self) -> dict[str, Any]:
        """numcheck's figures for pytest-benchmark's ``extra_info`` (JSON-serializable)."""
        r, ref = self.roofline, self.reference_roofline
        return {
            "numcheck": 1,
            "case": f"{self.case.op}::{self.case.id}",
            "variant": self.variant,
            "reference": get_op(self.case.op).reference,
            "device": self.device,
            "device_name": device_name(self.device, cpu_model=True),
            "device_class": self.device_class,
            "unset_classes": list(self.unset_classes),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "timer": self.times.timer,
            "timing_notes": list(self.times.notes),
            "calls_per_sample": self.times.calls_per_sample,
            "rounds": self.speedup.rounds,
            "looks": self.outcome.looks if self.outcome else None,
            "look_confidence": self.outcome.rule.look_confidence if self.outcome else None,
            "stopped": self.outcome.stopped if self.outcome else None,
            "timing_s": self.outcome.elapsed_s if self.outcome else None,
            "lock_wait_s": self.lock_wait_s,
            "noise": self.noise,
            "median_s": self.measured.median,
            "iqr_s": self.measured.iqr,
            "reference_median_s": self.reference.median,
            "reference_iqr_s": self.reference.iqr,
            "speedup": self.speedup.median,
            "speedup_low": self.speedup.low,
            "speedup_high": self.speedup.high,
            "confidence": self.outcome.rule.confidence if self.outcome else
            self.speedup.confidence,
            "speedup_min": self.decision.threshold,
            "gate": self.decision.verdict,
            "gate_reason": self.decision.reason,
            "flops": r.flops,
            "min_bytes": r.min_bytes,
            "tflops": r.tflops,
            "gbps": r.gbps,
            "pct_of_floor": r.pct_of_floor,
            "reference_pct_of_floor": ref.pct_of_floor,
            "peaks": r.peaks.as_dict(),
            "params": dict(self.case.params),
        }


def measure_perf(
    op: OpSpec,
    case: Case,
    variant: str,
    device: str,
    cpu_inputs: Inputs,
    *,
    preparer: Preparer = prepare,
) -> PerfResult:
    """Time ``variant`` against ``op.reference`` on ``device`` until the rule decides.

    Both are first called once through :func:`numcheck.check.run.run_variant`, so a variant
    that raises or returns the wrong outputs is a :class:`~numcheck.ops.spec.VariantError`
    here too (perf-only cases have no numerics check to catch it first).

    A side with a one-time preparation (``Variant.prepare``) gets it from ``preparer``
    before anything is timed, as an engine prepares its weights at load time: only the
    calls are timed.
    """
    spec = case.perf.get(variant, PerfSpec())
    inputs = to_device(cpu_inputs, device)
    ref_variant, var_variant = op.variants[op.reference], op.variants[variant]
    ref_prepared = preparer(ref_variant, inputs, case.params, device)
    var_prepared = preparer(var_variant, inputs, case.params, device)
    run_variant(ref_variant, op, inputs, case, device, prepared=ref_prepared)
    run_variant(var_variant, op, inputs, case, device, prepared=var_prepared)
    ref_inputs = inputs if ref_prepared is None else ref_prepared.call_inputs(inputs)
    var_inputs = inputs if var_prepared is None else var_prepared.call_inputs(inputs)
    params = case.params
    config = TimingConfig(rounds=spec.rounds, warmup=spec.warmup, cold_l2=spec.cold_l2,
                          cuda_graph=spec.cuda_graph,
                          target_sample_s=spec.target_sample_ms / 1e3)

    def ref_fn() -> object:
        return ref_variant.fn(ref_inputs, params)

    def var_fn() -> object:
        return var_variant.fn(var_inputs, params)

    noise = machine_noise(device, ref_fn, config, spec.rule(), f"{case.op}::{case.id}",
                          op.reference)
    timer = make_pair_timer(TimerRequest(ref_fn, var_fn, device, config, op.reference, variant))
    cls = run_class(device)
    outcome = run(timer.draw, timer.elapsed, spec.rule(), spec.threshold(cls, device))
    unset = spec.unset(cls, device)
    if unset:  # timed and reported; this GPU model has no threshold of its own
        reason = outcome.decision.reason.replace(f"{UNGATED} ", "")
        outcome = replace(outcome, decision=replace(outcome.decision,
                                                    reason=f"{unset}; {reason}"))
    times = PairedTimes(outcome.reference, outcome.variant, timer.timer, list(timer.notes),
                        timer.calls_per_sample)
    peaks = peaks_for(device)
    flops = op.flops(params) if op.flops else None
    nbytes = op.min_bytes(params) if op.min_bytes else None
    ref_summary, var_summary = summarize(times.reference), summarize(times.variant)
    return PerfResult(
        case, variant, device, spec, times, ref_summary, var_summary, outcome.estimate,
        outcome.decision, Roofline(flops, nbytes, var_summary.median, peaks),
        Roofline(flops, nbytes, ref_summary.median, peaks), outcome, noise,
        device_class=cls, unset_classes=tuple(sorted(spec.speedup_min)) if unset else (),
    )
