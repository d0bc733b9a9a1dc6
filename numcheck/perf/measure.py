"""Time one (case, variant, device) against the op's reference and decide its speedup gate.

    inputs of the case's first seed, moved to the device once
    reference / variant timed interleaved (numcheck.perf.timing)
    --> medians, IQR, speedup interval (numcheck.perf.speedup) --> gate decision (numcheck.perf.gate)
    --> roofline against the device's measured peaks (numcheck.perf.roofline)

Plain Python, no pytest: the plugin calls :func:`measure_perf` per test item, and the
benchmarks call it directly. The reference's own item is timed against itself (an A/A
pair), so the report shows the noise floor: its interval should contain 1.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

import torch

from numcheck.cases import Case
from numcheck.inputs import to_device
from numcheck.numerics import display_id, run_variant
from numcheck.ops.registry import Inputs, OpSpec, get_op
from numcheck.perf.gate import PerfSpec, violations
from numcheck.perf.roofline import Peaks, Roofline, peaks_for
from numcheck.perf.speedup import (
    Decision,
    SpeedupEstimate,
    Summary,
    decide,
    speedup_interval,
    summarize,
)
from numcheck.perf.timing import PairedTimes, TimingConfig, time_interleaved
from numcheck.verdict import Violation


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

    @property
    def id(self) -> str:
        return display_id(self.case, self.variant, self.device)

    def violations(self) -> list[Violation]:
        return violations(self.speedup, self.decision, _times_text(self))

    def record_section(self) -> dict[str, Any]:
        """The report record's ``timing`` section (docs/report.md): the speedup with its
        interval under the names the drift rules read, and the figures behind it."""
        info = self.extra_info()
        keep = ("confidence", "rounds", "median_s", "iqr_s", "reference_median_s",
                "reference_iqr_s", "speedup_min", "gate", "gate_reason", "tflops", "gbps",
                "pct_of_floor", "timer")
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
            "device_name": device_name(self.device),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "timer": self.times.timer,
            "timing_notes": list(self.times.notes),
            "rounds": self.speedup.rounds,
            "median_s": self.measured.median,
            "iqr_s": self.measured.iqr,
            "reference_median_s": self.reference.median,
            "reference_iqr_s": self.reference.iqr,
            "speedup": self.speedup.median,
            "speedup_low": self.speedup.low,
            "speedup_high": self.speedup.high,
            "confidence": self.speedup.confidence,
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


def _times_text(p: PerfResult) -> str:
    return (f"reference median {_ms(p.reference.median)}, variant median {_ms(p.measured.median)} "
            f"(IQR {p.measured.rel_iqr:.1%}), {p.device} {p.times.timer}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine() or "cpu"


def measure_perf(
    op: OpSpec,
    case: Case,
    variant: str,
    device: str,
    cpu_inputs: Inputs,
    *,
    peaks: Peaks | None = None,
    seed: int = 0,
) -> PerfResult:
    """Time ``variant`` against ``op.reference`` on ``device`` and decide the gate.

    Both are first called once through :func:`numcheck.numerics.run_variant`, so a variant
    that raises or returns the wrong outputs is a :class:`~numcheck.numerics.VariantError`
    here too (perf-only cases have no numerics check to catch it first).
    """
    spec = case.perf.get(variant, PerfSpec())
    inputs = to_device(cpu_inputs, device)
    ref_variant, var_variant = op.variants[op.reference], op.variants[variant]
    run_variant(ref_variant, op, inputs, case, device)
    run_variant(var_variant, op, inputs, case, device)
    params = case.params
    times = time_interleaved(
        lambda: ref_variant.fn(inputs, params),
        lambda: var_variant.fn(inputs, params),
        device,
        TimingConfig(spec.rounds, spec.warmup, spec.cold_l2, spec.cuda_graph),
    )
    estimate = speedup_interval(times.reference, times.variant, confidence=spec.confidence,
                                seed=seed)
    decision = decide(estimate, spec.threshold(device), max_rel_width=spec.max_rel_width)
    peaks = peaks or peaks_for(device)
    flops = op.flops(params) if op.flops else None
    nbytes = op.min_bytes(params) if op.min_bytes else None
    ref_summary, var_summary = summarize(times.reference), summarize(times.variant)
    return PerfResult(
        case, variant, device, spec, times, ref_summary, var_summary, estimate, decision,
        Roofline(flops, nbytes, var_summary.median, peaks),
        Roofline(flops, nbytes, ref_summary.median, peaks),
    )


PERF_HEADER = [
    "case", "variant", "device", "median", "IQR", "ref median", "speedup [CI]",
    "TFLOP/s", "GB/s", "% floor", "gate",
]


def perf_rows(results: list[PerfResult]) -> list[list[str]]:
    """One row per timed check for the end-of-run perf table."""
    rows = []
    for p in results:
        r = p.roofline
        gate = p.decision.verdict
        if p.decision.threshold is not None:
            gate += f" (min {p.decision.threshold:g})"
        rows.append([
            f"{p.case.op}::{p.case.id}", p.variant, p.device,
            _ms(p.measured.median), f"{p.measured.rel_iqr:.1%}", _ms(p.reference.median),
            f"{p.speedup.median:.3f} [{p.speedup.low:.3f}, {p.speedup.high:.3f}]",
            "-" if r.tflops is None else f"{r.tflops:.3g}",
            "-" if r.gbps is None else f"{r.gbps:.4g}",
            "-" if r.pct_of_floor is None else f"{r.pct_of_floor:.1f}%",
            gate,
        ])
    return rows
