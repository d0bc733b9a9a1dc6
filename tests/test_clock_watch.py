"""benchmarks/speed/clock_watch.py: what a timing window's clock samples say (pure), and that
the watcher is inert where there is no NVML."""

from __future__ import annotations

from benchmarks.speed import clock_watch


def test_a_window_summarizes_only_its_own_samples() -> None:
    samples = [(0.0, 1980, 0x0), (1.0, 1755, 0x4), (1.5, 1740, 0x4 | 0x1), (3.0, 1980, 0x1)]
    got = clock_watch.summarize(samples, 0.5, 2.0)
    assert got == {"samples": 2, "median_mhz": 1747.5, "min_mhz": 1740,
                   "reasons": ["gpu_idle", "sw_power_cap"], "throttled": True}
    idle = clock_watch.summarize(samples, 2.5, 4.0)
    assert idle is not None and idle["throttled"] is False and idle["reasons"] == ["gpu_idle"]
    assert clock_watch.summarize(samples, 5.0, 6.0) is None


def test_without_nvml_every_window_is_none(monkeypatch) -> None:
    monkeypatch.setattr(clock_watch, "_nvml_reader", lambda index: None)
    with clock_watch.ClockWatch() as watch:
        t0 = watch.now()
        assert watch.window(t0, watch.now() + 1) is None
