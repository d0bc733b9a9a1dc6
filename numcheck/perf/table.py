"""The end-of-run speed table and machine-noise lines, read from the report records.

Records, not results: a run with xdist workers gathers its records in the controller, so
the table and the noise lines (one per process that timed) show every worker's checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from numcheck.devices import ONBOARD
from numcheck.perf.noise import noise_warning


def ms_text(seconds: float) -> str:
    """``1.234 ms``: a time as the tables and messages print it."""
    return f"{seconds * 1e3:.4g} ms"


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
        elif t.get("unset_classes"):
            gate = f"not gated (no min for {t.get('device_class')})"
        iqr = t.get("iqr_s")
        med = t.get("median_s")
        calls = t.get("calls_per_sample") or 1
        rows.append([
            f"{rec.op}::{rec.case}", rec.variant, rec.device, str(t.get("timer", "-")),
            ms_text(med) if med else "-",
            f"{iqr / med:.1%}" if med and iqr is not None else "-",
            ms_text(t["reference_median_s"]) if t.get("reference_median_s") else "-",
            speedup,
            f"{t.get('rounds')}x{calls}",
            "-" if t.get("timing_s") is None else f"{t['timing_s']:.2f} s",
            "-" if t.get("tflops") is None else f"{t['tflops']:.3g}",
            "-" if t.get("gbps") is None else f"{t['gbps']:.4g}",
            "-" if t.get("pct_of_floor") is None else f"{t['pct_of_floor']:.1f}%",
            gate,
        ])
    return rows


def unset_lines(records: Iterable[Any]) -> list[str]:
    """One line per device class that ran timed checks a threshold gates on other GPU
    models but not on it: they were reported, not gated, and the command that measures
    this class's thresholds (never a verdict from another model's figure)."""
    unset: dict[str, tuple[int, set[str]]] = {}
    for rec in records:
        t = rec.timing or {}
        if t.get("unset_classes"):
            n, others = unset.get(t.get("device_class") or "?", (0, set()))
            unset[t.get("device_class") or "?"] = (n + 1, others | set(t["unset_classes"]))
    return [f"numcheck perf: {cls} has no speedup_min in {n} timed check(s) that have one for "
            f"{', '.join(sorted(others))}: reported, not gated. Measure {cls}'s thresholds: "
            f"{ONBOARD} --only speed (docs/speed.md, \"Your runner is not an H200\")"
            for cls, (n, others) in sorted(unset.items())]


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
