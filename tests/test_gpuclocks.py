"""nvidia-smi's clocks and throttle reasons, parsed from captured output; never an error."""

from __future__ import annotations

import pytest

from numcheck.perf import gpuclocks


def test_parse_rows_and_decode_reasons() -> None:
    text = ("0, 1980, 1980, 0x0000000000000000, 41, 118.52\n"
            "1, 1410, 1980, 0x0000000000000024, 83, 695.10\n")
    idle, hot = gpuclocks.parse(text)
    assert idle["sm_clock_mhz"] == 1980 and idle["throttled"] is False
    assert idle["throttle_reasons"] == [] and idle["power_w"] == pytest.approx(118.52)
    assert hot["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert hot["throttled"] is True and hot["temperature_c"] == 83
    assert gpuclocks.describe([idle, hot]) == (
        "cuda:0 SM 1980/1980 MHz, not throttled; cuda:1 SM 1410/1980 MHz, THROTTLED "
        "(sw_power_cap, sw_thermal_slowdown)")


def test_idle_is_not_throttling_and_odd_fields_give_none() -> None:
    (row,) = gpuclocks.parse("0, 345, 1980, 0x1, [N/A], [N/A]\n")
    assert row["throttle_reasons"] == ["gpu_idle"] and row["throttled"] is False
    assert row["temperature_c"] is None and row["power_w"] is None
    (row,) = gpuclocks.parse("0, 345, 1980, [N/A], 40, 100\n")
    assert row["throttled"] is None
    assert "throttle unknown" in gpuclocks.describe([row])
    assert gpuclocks.parse("garbage\n") == []


def test_without_nvidia_smi_the_clocks_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpuclocks.shutil, "which", lambda name: None)
    assert gpuclocks.gpu_clocks() is None
    assert gpuclocks.describe(None) == "clocks unknown (no nvidia-smi)"
