"""Time one (case, variant, device) against the op's reference and decide its speedup gate.

    inputs of the case's first seed, moved to the device once
    reference / variant paired samples on demand (numcheck.perf.timing: graph replay by default)
    --> stopping rule: looks until the interval decides (numcheck.perf.sequential)
    --> medians, IQR (numcheck.perf.speedup) --> violations (numcheck.perf.gate)
    --> roofline against the device's measured peaks (numcheck.perf.roofline)

Plain Python, no pytest: the plugin calls :func:`measure_perf` per test item (inside the
device's exclusive lock, :mod:`numcheck.perf.gpulock`), and the benchmarks call it directly.

**Machine noise.** The first timed check of a process on a device also times its
reference against itself (A/A) with the same timer and stopping rule, once. Its interval
should contain 1; :func:`noise_warning` says so in the messages and the summary when it
does not (the machine is noisy or the timer biased), but it never changes a verdict. The
reference's own item of every case is an A/A pair too, so the report shows the noise
floor per case.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from numcheck.cases import Case
from numcheck.devices import device_name
from numcheck.inputs import to_device
from numcheck.check.run import run_variant
from numcheck.numerics.verdict import Violation
from numcheck.ops.registry import Inputs, OpSpec, get_op
from numcheck.perf.gate import PerfSpec, violations
from numcheck.perf.roofline import Peaks, Roofline, peaks_for
from numcheck.perf.sequential import Outcome, StoppingRule, run
from numcheck.perf.speedup import Decision, SpeedupEstimate, Summary, summarize
from numcheck.perf.timing import PairedTimes, TimerRequest, TimingConfig, make_pair_timer
from numcheck.prepare import Preparer, prepare
from numcheck.check.result import display_id

#: A/A noise beyond which messages and the summary warn: the interval misses 1 by more
#: than this fraction, or is wider than ``NOISE_WIDTH`` of its median.
NOISE_OFFSET, NOISE_WIDTH = 0.01, 0.05


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

    @property
    def id(self) -> str:
        return display_id(self.case, self.variant, self.device)

    def violations(self) -> list[Violation]:
        detail = _times_text(self)
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
                "look_confidence", "stopped", "timing_s", "lock_wait_s", "noise")
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


def _times_text(p: PerfResult) -> str:
    return (f"reference median {_ms(p.reference.median)}, variant median {_ms(p.measured.median)} "
            f"(IQR {p.measured.rel_iqr:.1%}), {p.device} {p.times.timer}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def measure_perf(
    op: OpSpec,
    case: Case,
    variant: str,
    device: str,
    cpu_inputs: Inputs,
    *,
    peaks: Peaks | None = None,
    seed: int = 0,
    preparer: Preparer = prepare,
) -> PerfResult:
    """Time ``variant`` against ``op.reference`` on ``device`` until the rule decides.

    Both are first called once through :func:`numcheck.check.run.run_variant`, so a variant
    that raises or returns the wrong outputs is a :class:`~numcheck.ops.spec.VariantError`
    here too (perf-only cases have no numerics check to catch it first). ``seed`` is
    accepted for compatibility; the order-statistic interval needs no resampling.

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
    outcome = run(timer.draw, timer.elapsed, spec.rule(), spec.threshold(device))
    times = PairedTimes(outcome.reference, outcome.variant, timer.timer, list(timer.notes),
                        timer.calls_per_sample)
    peaks = peaks or peaks_for(device)
    flops = op.flops(params) if op.flops else None
    nbytes = op.min_bytes(params) if op.min_bytes else None
    ref_summary, var_summary = summarize(times.reference), summarize(times.variant)
    return PerfResult(
        case, variant, device, spec, times, ref_summary, var_summary, outcome.estimate,
        outcome.decision, Roofline(flops, nbytes, var_summary.median, peaks),
        Roofline(flops, nbytes, ref_summary.median, peaks), outcome, noise,
    )


_NOISE: dict[str, dict[str, Any]] = {}


def reset_machine_noise() -> None:
    """Forget the cached A/A measurements (a new run in the same process measures anew)."""
    _NOISE.clear()


def machine_noise(
    device: str, reference: Any, config: TimingConfig, rule: StoppingRule, case: str,
    reference_name: str,
) -> dict[str, Any]:
    """This process's A/A measurement on ``device``: taken at its first timed check, cached.

    ``reference`` timed against itself with ``config``'s timer and an ungated stopping
    rule capped at 1 s, plus the GPU's clocks (:mod:`numcheck.perf.gpuclocks`).
    """
    if device in _NOISE:
        return _NOISE[device]
    timer = make_pair_timer(
        TimerRequest(reference, reference, device, config, reference_name, reference_name)
    )
    aa_rule = StoppingRule(confidence=rule.confidence, first_look=rule.first_look,
                           max_looks=rule.max_looks, max_time_s=min(1.0, rule.max_time_s),
                           target_rel_width=0.01)
    outcome = run(timer.draw, timer.elapsed, aa_rule, None)
    est = outcome.estimate
    clocks = None
    if device == "cuda":
        from numcheck.perf.gpuclocks import gpu_clocks

        clocks = gpu_clocks()
    _NOISE[device] = {
        "aa_speedup": est.median, "aa_ci_low": est.low, "aa_ci_high": est.high,
        "aa_pairs": est.rounds, "timer": timer.timer, "case": case, "pid": os.getpid(),
        "clocks": clocks,
    }
    return _NOISE[device]


def noise_warning(noise: dict[str, Any] | None) -> str:
    """A sentence when the A/A measurement is far from 1 or too wide, else ``""``."""
    if not noise:
        return ""
    low, high, mid = noise["aa_ci_low"], noise["aa_ci_high"], noise["aa_speedup"]
    words = []
    if low > 1 + NOISE_OFFSET or high < 1 - NOISE_OFFSET:
        words.append(f"the reference timed against itself gave {mid:.3f}x [{low:.3f}, "
                     f"{high:.3f}], not 1")
    elif mid > 0 and (high - low) / mid > NOISE_WIDTH:
        words.append(f"the reference timed against itself gave an interval "
                     f"[{low:.3f}, {high:.3f}] wider than {NOISE_WIDTH:.0%}")
    for row in noise.get("clocks") or []:
        if row.get("throttled"):
            words.append(f"cuda:{row['index']} was throttled "
                         f"({', '.join(row['throttle_reasons'])})")
    if not words:
        return ""
    return ("machine noise: " + "; ".join(words) +
            " (the verdict stands; re-run on a quiet machine to trust the figure)")


PERF_HEADER = [
    "case", "variant", "device", "timer", "median", "IQR", "ref median", "speedup [CI]",
    "pairs", "timed", "TFLOP/s", "GB/s", "% floor", "gate",
]

#: Stop reasons of an ungated check that ended before its interval was narrow enough.
_CAPPED = ("time cap", "look cap")


def perf_rows(records: Iterable[Any]) -> list[list[str]]:
    """One row per timed check for the end-of-run perf table, from the report records
    (their ``timing`` sections), so a run with xdist workers shows it too."""
    rows = []
    for rec in records:
        t = rec.timing
        if not t:
            continue
        gate = str(t.get("gate"))
        if t.get("speedup_min") is not None:
            gate += f" (min {t['speedup_min']:g})"
        interval = f"[{t['ci_low']:.3f}, {t['ci_high']:.3f}]"
        speedup = f"{t['speedup']:.3f} {interval}"
        if t.get("gate") == "not gated" and t.get("stopped") in _CAPPED:
            speedup, gate = f"too noisy: {interval}", "not gated (too noisy on this machine)"
        iqr = t.get("iqr_s")
        med = t.get("median_s")
        calls = t.get("calls_per_sample") or 1
        rows.append([
            f"{rec.op}::{rec.case}", rec.variant, rec.device, str(t.get("timer", "-")),
            _ms(med) if med else "-",
            f"{iqr / med:.1%}" if med and iqr is not None else "-",
            _ms(t["reference_median_s"]) if t.get("reference_median_s") else "-",
            speedup,
            f"{t.get('rounds')}x{calls}",
            "-" if t.get("timing_s") is None else f"{t['timing_s']:.2f} s",
            "-" if t.get("tflops") is None else f"{t['tflops']:.3g}",
            "-" if t.get("gbps") is None else f"{t['gbps']:.4g}",
            "-" if t.get("pct_of_floor") is None else f"{t['pct_of_floor']:.1f}%",
            gate,
        ])
    return rows


def noise_lines(records: Iterable[Any]) -> list[str]:
    """The run's machine-noise lines: each process's A/A figure and clocks, once, and a
    warning where one is far from 1 (never a verdict)."""
    from numcheck.perf.gpuclocks import describe

    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in records:
        noise = (rec.timing or {}).get("noise")
        if noise:
            seen.setdefault((rec.device, rec.worker, noise.get("pid")), noise)
    lines = []
    for (device, worker, _pid), n in seen.items():
        where = f"{device}" + (f" ({worker})" if worker else "")
        line = (f"machine noise {where}: A/A {n['aa_speedup']:.3f}x [{n['aa_ci_low']:.3f}, "
                f"{n['aa_ci_high']:.3f}] ({n['timer']}, {n['aa_pairs']} pairs, reference of "
                f"{n['case']})")
        if device == "cuda":
            line += f"; {describe(n.get('clocks'))}"
        lines.append(line)
        warning = noise_warning(n)
        if warning:
            lines.append(f"  WARNING {warning}")
    return lines
