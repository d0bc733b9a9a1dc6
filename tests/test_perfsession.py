"""The run-level timing lines and fields, from records (no device, no clock)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from numcheck.perf.sections import DeviceSections, lock_wait_lines, wait_totals
from numcheck.perf.table import noise_lines, perf_rows

NOISE = {"aa_speedup": 1.001, "aa_ci_low": 0.998, "aa_ci_high": 1.004, "aa_pairs": 20,
         "timer": "cuda-graph", "case": "mhc_pre::seed", "pid": 11,
         "clocks": [{"index": 0, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980,
                     "throttled": False, "throttle_reasons": []}]}


def rec(variant: str, worker: str | None = None, **timing: Any) -> Any:
    base = {"speedup": 1.1, "ci_low": 1.09, "ci_high": 1.11, "gate": "pass",
            "speedup_min": 1.05, "timer": "cuda-graph", "rounds": 20, "calls_per_sample": 3,
            "timing_s": 0.12, "median_s": 1e-3, "iqr_s": 1e-5, "reference_median_s": 1.1e-3,
            "stopped": "decided", "noise": NOISE, "lock_wait_s": 0.0,
            "numerics_lock_wait_s": 0.0, **timing}
    return SimpleNamespace(op="mhc_pre", case="seed", variant=variant, device="cuda",
                           id=f"mhc_pre::seed::{variant}[cuda]", worker=worker,
                           device_index=0, timing=base, casts=None)


def test_waits_are_summed_and_the_longest_named() -> None:
    records = [rec("bf16", "gw0", lock_wait_s=1.5), rec("tf32", "gw1", lock_wait_s=0.25,
                                                        numerics_lock_wait_s=0.25)]
    records[1].casts = {"lock_wait_s": 1.0}
    totals = wait_totals(records)
    assert totals["total"] == 3.0 and totals["max"] == 1.5
    assert totals["max_id"] == "mhc_pre::seed::bf16[cuda]"
    assert lock_wait_lines(records, workers=2) == [
        ("numcheck device lock: checks waited 3.00 s in total for their device (timed "
         "sections hold it alone); longest 1.50 s (mhc_pre::seed::bf16[cuda])")]
    assert lock_wait_lines([rec("bf16")], workers=0) == []  # serial, nothing waited


def test_noise_lines_once_per_process_with_clocks_and_warnings() -> None:
    lines = noise_lines([rec("bf16", "gw0"), rec("tf32", "gw0")])
    assert lines == [("machine noise cuda (gw0): A/A 1.001x [0.998, 1.004] (cuda-graph, 20 "
                      "pairs, reference of mhc_pre::seed); cuda:0 SM 1980/1980 MHz, not "
                      "throttled")]
    far = dict(NOISE, aa_speedup=1.05, aa_ci_low=1.04, aa_ci_high=1.06, pid=12)
    lines = noise_lines([rec("bf16", "gw1", noise=far)])
    assert lines[1].startswith("  WARNING machine noise: the reference timed against itself "
                               "gave 1.050x [1.040, 1.060], not 1")


def test_perf_rows_name_the_timer_pairs_and_decision_time() -> None:
    (row,) = perf_rows([rec("bf16")])
    assert row[3:5] == ["cuda-graph", "1 ms"]
    assert row[7:10] == ["1.100 [1.090, 1.110]", "20x3", "0.12 s"]
    assert row[-1] == "pass (min 1.05)"


def test_sections_disabled_do_nothing_and_environment_fields() -> None:
    sections = DeviceSections("cpu", enabled=False)
    with sections.hold(exclusive=True) as waited:
        assert waited == 0.0
    env = sections.environment(0, [rec("bf16", lock_wait_s=0.5)])
    assert env["gpu_sharing"] == {} and env["device_lock"] is False
    assert env["lock_wait_s"] == 0.5 and env["perf_noise"][0]["aa_pairs"] == 20
    assert sections.header_lines(0, perf=True)[0].startswith("numcheck thresholds: cpu")
