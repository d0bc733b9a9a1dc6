"""The GPU's SM clock and throttle reasons, from ``nvidia-smi`` when it is there.

A speedup measured while the GPU was power- or thermal-throttled is still a paired ratio
(both members ran under the same clock), but a clock that moves *during* a check widens
its interval, and a run at half clock says little about serving. The run header and the
report show what ``nvidia-smi`` said; a missing or failing ``nvidia-smi`` gives None,
never an error. Parsing is a pure function, tested on captured output.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from typing import Any

#: nvidia-smi's clock event ("throttle") reason bits (nvml.h, nvmlClocksEventReason*).
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: Reasons that mean the clock is held down by power or heat (worth a warning).
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

_FIELDS = "index,clocks.sm,clocks.max.sm,{reasons},temperature.gpu,power.draw"


def parse(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=<_FIELDS> --format=csv,noheader,nounits``."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            continue
        index, sm, sm_max, reasons, temp, power = parts
        mask = _number(reasons, lambda t: int(t, 16)) if reasons.lower().startswith("0x") else None
        rows.append({
            "index": _number(index),
            "sm_clock_mhz": _number(sm),
            "sm_clock_max_mhz": _number(sm_max),
            "throttle_mask": mask,
            "throttle_reasons": [] if mask is None else
            [name for bit, name in REASONS.items() if mask & bit],
            "throttled": None if mask is None else bool(mask & THROTTLING),
            "temperature_c": _number(temp),
            "power_w": _number(power, float),
        })
    return rows


def gpu_clocks() -> list[dict[str, Any]] | None:
    """Every visible GPU's clocks and throttle reasons, or None without ``nvidia-smi``."""
    if shutil.which("nvidia-smi") is None:
        return None
    # Drivers >= 535 call the field clocks_event_reasons; older ones clocks_throttle_reasons.
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={_FIELDS.format(reasons=reasons)}",
                 "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10, check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode == 0 and out.stdout.strip():
            return parse(out.stdout)
    return None


def describe(rows: list[dict[str, Any]] | None) -> str:
    """``cuda:0 SM 1980/1980 MHz, not throttled`` (one entry per GPU), or why unknown."""
    if rows is None:
        return "clocks unknown (no nvidia-smi)"
    parts = []
    for r in rows:
        state = ("throttle unknown" if r["throttled"] is None else
                 f"THROTTLED ({', '.join(r['throttle_reasons'])})" if r["throttled"] else
                 "not throttled")
        parts.append(f"cuda:{r['index']} SM {r['sm_clock_mhz']}/{r['sm_clock_max_mhz']} MHz, "
                     f"{state}")
    return "; ".join(parts)


def _number(text: str, parse: Callable[[str], Any] = int) -> Any:
    """``parse(text)``, or None where nvidia-smi printed no number (``[N/A]``)."""
    try:
        return parse(text)
    except ValueError:
        return None
