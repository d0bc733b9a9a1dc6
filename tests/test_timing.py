"""Timers, roofline and the perf tables of case files (no speed is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from numcheck.cases import CaseFileError, load_case_file
from numcheck.ops.registry import get_op
from numcheck.perf.limits import PerfSpec
from numcheck.perf.roofline import Peaks, Roofline, measure_peaks
from numcheck.perf.timing import (
    GRAPH,
    TimerRequest,
    TimingConfig,
    capture_graph,
    make_pair_timer,
    override,
    time_interleaved,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cpu_timing_interleaves_and_alternates_order() -> None:
    calls: list[str] = []
    times = time_interleaved(lambda: calls.append("A"), lambda: calls.append("B"), "cpu",
                             TimingConfig(rounds=4, warmup=1, target_sample_s=0))
    assert calls == ["A", "B", "A", "B", "B", "A", "A", "B", "B", "A"]
    assert len(times.reference) == len(times.variant) == 4
    assert all(t >= 0 for t in times.reference + times.variant)
    assert times.timer == "perf_counter" and times.calls_per_sample == 1


def test_cpu_timing_notes_ignored_gpu_options() -> None:
    times = time_interleaved(lambda: None, lambda: None, "cpu",
                             TimingConfig(rounds=1, warmup=0, cold_l2=True, cuda_graph=True))
    assert times.notes == ["cold_l2 ignored on cpu"]


def test_short_calls_are_batched_to_the_target_sample_length() -> None:
    from numcheck.perf.timing import _batch_size

    assert _batch_size(20e-6, 1e-3) == 50  # a 20 us op: 50 back-to-back calls per sample
    assert _batch_size(3e-3, 1e-3) == 1
    assert _batch_size(1e-9, 1e-3) == 10_000  # capped
    assert _batch_size(20e-6, 0) == 1  # 0: call by call


def test_cpu_batches_run_back_to_back_calls_per_sample() -> None:
    calls: list[str] = []

    def ref() -> None:
        calls.append("A")

    timer = make_pair_timer(TimerRequest(ref, lambda: calls.append("B"), "cpu",
                                         TimingConfig(warmup=0, target_sample_s=1.0)))
    k = timer.calls_per_sample
    assert k > 1  # a no-op is far shorter than the 1 s target
    calls.clear()
    ref_s, var_s = timer.draw(2)
    assert len(ref_s) == len(var_s) == 2
    assert calls == ["A"] * k + ["B"] * k + ["B"] * k + ["A"] * k  # order flips per pair
    assert timer.elapsed() > 0


def test_an_injected_timer_replaces_the_device_timer() -> None:
    from tests.faketimer import FakePairTimer

    with override(lambda request: FakePairTimer(2.0, name=f"fake-{request.device}")):
        timer = make_pair_timer(TimerRequest(lambda: None, lambda: None, "cuda", TimingConfig()))
    assert timer.timer == "fake-cuda"
    ref, var = timer.draw(3)
    assert len(ref) == 3 and timer.elapsed() == pytest.approx(sum(ref) + sum(var))


def test_timing_rejects_bad_config() -> None:
    with pytest.raises(ValueError, match="rounds >= 1"):
        time_interleaved(lambda: None, lambda: None, "cpu", TimingConfig(rounds=0))
    with pytest.raises(ValueError, match="unknown device"):
        time_interleaved(lambda: None, lambda: None, "tpu", TimingConfig())


@needs_cuda
def test_cuda_timing_with_cold_l2_and_graph() -> None:
    a = torch.randn(1024, 1024, device="cuda")
    times = time_interleaved(lambda: a @ a, lambda: a + a, "cuda",
                             TimingConfig(rounds=5, warmup=2, cold_l2=True, cuda_graph=True))
    assert len(times.variant) == 5 and min(times.reference) > 0
    assert times.timer == GRAPH and times.notes


@needs_cuda
def test_cuda_capture_failure_falls_back_to_eager_and_says_why() -> None:
    a = torch.randn(8, device="cuda")
    timer = make_pair_timer(TimerRequest(lambda: a.sum().item(), lambda: a + a, "cuda",
                                         TimingConfig(warmup=1)))
    assert timer.timer == "cuda-events-eager"
    assert "CUDA graph capture failed" in timer.notes[0] and timer.calls_per_sample >= 1
    ref, var = timer.draw(2)
    assert min(ref + var) > 0


@needs_cuda
def test_graph_capture_failure_names_the_fix() -> None:
    from numcheck.perf.timing import TimingError

    a = torch.randn(8, device="cuda")
    with pytest.raises(TimingError, match="set cuda_graph = false"):
        capture_graph(lambda: a.sum().item())  # a host sync cannot be captured


@needs_cuda
def test_a_failed_capture_leaves_no_trace() -> None:
    """A callable that cannot be captured leaves the CUDA random generator, the current
    stream and the capture state as they were: CUDA random numbers still work (and are the
    ones they would have been), and a good callable still captures."""
    from numcheck.perf.timing import TimingError

    torch.cuda.manual_seed(1234)
    a = torch.randn(8, device="cuda")
    stream, rng = torch.cuda.current_stream(), torch.cuda.get_rng_state()
    with pytest.raises(TimingError, match="CUDA graph capture failed"):
        capture_graph(lambda: a.sum().item())  # a host sync cannot be captured
    assert torch.cuda.current_stream() == stream
    assert not torch.cuda.is_current_stream_capturing()
    assert torch.equal(torch.cuda.get_rng_state(), rng)
    b = torch.randn(8, device="cuda")  # raised "Offset increment outside graph capture"
    torch.cuda.manual_seed(1234)
    torch.randn(8, device="cuda")
    assert torch.equal(b, torch.randn(8, device="cuda"))  # the same stream of numbers
    out = torch.zeros(8, device="cuda")
    replay = capture_graph(lambda: out.add_(b))
    out.zero_()  # capture_graph ran it once eagerly (the side-stream warm-up)
    replay()
    replay()
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * b)


@needs_cuda
def test_a_pair_timer_after_a_failed_capture_still_draws_random_numbers() -> None:
    """The fallback to eager timing (a variant that cannot be captured) keeps the process's
    CUDA generator usable for the next check, including a variant that draws random
    numbers inside the captured graph."""
    a = torch.randn(8, device="cuda")
    timer = make_pair_timer(TimerRequest(lambda: a.sum().item(), lambda: a + a, "cuda",
                                         TimingConfig(warmup=1)))
    assert timer.timer == "cuda-events-eager"
    noise = torch.empty(1024, device="cuda")
    timer = make_pair_timer(TimerRequest(lambda: a * 2, lambda: noise.uniform_(), "cuda",
                                         TimingConfig(warmup=1)))
    assert timer.timer == GRAPH
    ref, var = timer.draw(2)
    assert min(ref + var) > 0
    assert torch.randn(4, device="cuda").isfinite().all()


def test_roofline_figures() -> None:
    peaks = Peaks("cuda", bandwidth=4e12, flops=800e12, matmul_dtype="bfloat16")
    r = Roofline(flops=2e12, min_bytes=4e9, seconds=0.01, peaks=peaks)
    assert r.tflops == pytest.approx(200.0)
    assert r.gbps == pytest.approx(400.0)
    assert r.floor_seconds == pytest.approx(1e-3)
    assert r.pct_of_floor == pytest.approx(10.0)
    none = Roofline(None, None, 0.01, peaks)
    assert none.tflops is none.gbps is none.pct_of_floor is None


def test_cpu_peaks_are_measured() -> None:
    peaks = measure_peaks("cpu")
    assert peaks.bandwidth > 0 and peaks.flops > 0 and peaks.matmul_dtype == "float32"


def test_op_flops_and_bytes_at_the_design_shapes() -> None:
    idx = get_op("indexer")
    p = idx.resolve_params("v4flash", {"batch": 64, "max_context": 8192})
    assert idx.flops is not None and idx.min_bytes is not None
    assert idx.flops(p) == 2 * 64 * 64 * 128 * 8192
    # The fp8 keys dominate: 64 * 8192 * 128 bytes, plus scales, q, weights, logits, top-k.
    assert idx.min_bytes(p) == 64 * 8192 * 132 + 64 * 64 * 132 + 64 * 8192 * 4 + 64 * 512 * 4
    mhc = get_op("mhc_pre")
    p = mhc.resolve_params("v4pro", {"tokens": 4096})
    assert mhc.flops is not None and mhc.min_bytes is not None
    assert mhc.flops(p) == 2 * 4096 * 24 * 28672
    # x read once dominates; then y (bf16), hc_fn and the fp32 mixes/pre/post/comb.
    x_bytes, y_bytes = 4096 * 28672 * 2, 4096 * 7168 * 2
    assert mhc.min_bytes(p) == x_bytes + 24 * 28672 * 4 + 4096 * (24 + 4 + 4 + 16) * 4 + y_bytes


CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = ["bf16", "tf32"]
{extra}
"""


def load(tmp_path: Path, extra: str) -> dict[str, PerfSpec]:
    path = tmp_path / "mhc.toml"
    path.write_text(CASE.format(extra=extra))
    (case,) = load_case_file(path)
    return dict(case.perf)


def test_perf_tables_are_parsed_with_shared_options(tmp_path: Path) -> None:
    perf = load(tmp_path, """
[tiny-mhc.perf]
rounds = 12
speedup_min = { H200 = 1.05 }
[tiny-mhc.perf.bf16]
speedup_min = { H200 = 1.2, cpu = 1 }
cold_l2 = true
""")
    assert set(perf) == {"fp32", "bf16", "tf32"}
    assert perf["bf16"] == PerfSpec(speedup_min={"H200": 1.2, "cpu": 1.0}, rounds=12, cold_l2=True)
    assert perf["tf32"].threshold("H200", "cuda") == 1.05
    assert perf["fp32"].speedup_min == {} and perf["fp32"].rounds == 12  # reference: not gated
    assert perf["tf32"].threshold("cpu", "cpu") is None
    # Another GPU model has no threshold of its own: not gated by the H200's figure.
    assert perf["tf32"].threshold("H100", "cuda") is None
    assert perf["tf32"].unset("H100", "cuda") == (
        "no speedup_min for H100 (this case has H200 1.05): reported, not gated; measure "
        "H100's: python -m numcheck onboard --only speed")
    assert perf["tf32"].unset("H200", "cuda") == "" and perf["fp32"].unset("H100", "cuda") == ""


def test_a_cuda_threshold_holds_on_every_gpu_model_only_where_the_table_says_so(
        tmp_path: Path) -> None:
    perf = load(tmp_path, """
[tiny-mhc.perf.bf16]
speedup_min = { cuda = 1.01, H200 = 1.2, every_class = true }
""")
    spec = perf["bf16"]
    assert spec.every_class and spec.speedup_min == {"cuda": 1.01, "H200": 1.2}
    assert spec.threshold("H200", "cuda") == 1.2  # the class's own wins
    assert spec.threshold("B200", "cuda") == 1.01 and spec.unset("B200", "cuda") == ""
    assert spec.threshold("cpu", "cpu") is None


def test_no_perf_table_gives_defaults(tmp_path: Path) -> None:
    perf = load(tmp_path, "")
    assert perf["bf16"] == PerfSpec()


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ("[tiny-mhc.perf]\nspeedup = 1.1", "perf.speedup",
         "'speedup' is neither a perf option nor a variant this case runs"),
        ("[tiny-mhc.perf.bf16]\nspeedup_min = 1.1", "perf.bf16.speedup_min",
         "expected a table, got float 1.1"),
        ("[tiny-mhc.perf.bf16]\nspeedup_min = { gpu = 1.1 }", "perf.bf16.speedup_min.gpu",
         "'gpu' is a device kind, not a GPU model"),
        # A threshold keyed by the kind: the H200's figure would gate every other GPU model.
        ("[tiny-mhc.perf.bf16]\nspeedup_min = { cuda = 1.1 }", "perf.bf16.speedup_min.cuda",
         "'cuda' is a device kind, not a GPU model: a value measured on one GPU model does "
         "not hold on another. Fix: key it by the GPU model it was measured on (H200 = ...), "
         "or, measured to hold on every GPU model, write cuda = ... with every_class = true"),
        ("[tiny-mhc.perf.bf16]\nspeedup_min = { H2OO = 1.1 }", "perf.bf16.speedup_min.H2OO",
         "'H2OO' is not a device class numcheck knows"),
        ("[tiny-mhc.perf.bf16]\nspeedup_min = { h100 = 1.1 }", "perf.bf16.speedup_min.h100",
         "'h100' is not a device class numcheck knows (cpu, or a GPU model of "
         "numcheck.devices.GPU_MODELS: H100, H200, B200, MI300X...). Fix: write H100"),
        ('[tiny-mhc.perf.bf16]\nspeedup_min = { "NVIDIA H100 80GB HBM3" = 1.1 }',
         "perf.bf16.speedup_min.NVIDIA H100 80GB HBM3",
         "'NVIDIA H100 80GB HBM3' is a device name, not its class. Fix: write H100"),
        ("[tiny-mhc.perf.bf16]\nspeedup_min = { H200 = 0 }", "perf.bf16.speedup_min.H200",
         "expected a number > 0"),
        ('[tiny-mhc.perf.bf16]\nspeedup_min = { H200 = "1.5" }', "perf.bf16.speedup_min.H200",
         "expected a number > 0, got string"),
        ("[tiny-mhc.perf.bf16]\nspeedup_min = { H200 = 1.2, every_class = 1 }",
         "perf.bf16.speedup_min.every_class", "expected true or false"),
        ("[tiny-mhc.perf.bf16]\nspeedup_min = { H200 = 1.2, every_class = true }",
         "perf.bf16.speedup_min.every_class", "every_class = true names the value that holds "
         "on every GPU model, and this table has no cuda value"),
        ("[tiny-mhc.perf.fp32]\nspeedup_min = { H200 = 1.1 }", "perf.fp32.speedup_min",
         "'fp32' is the reference"),
        ("[tiny-mhc.perf.bf16]\nrounds = 2", "perf.bf16.rounds", "2 is out of range"),
        ("[tiny-mhc.perf.bf16]\nwarmup = true", "perf.bf16.warmup", "expected an integer"),
        ("[tiny-mhc.perf.bf16]\nfast = true", "perf.bf16.fast", "unknown perf option 'fast'"),
        ("perf_only = 1", "perf_only", "expected true or false"),
    ],
)
def test_bad_perf_tables_name_file_case_key_and_fix(
    tmp_path: Path, extra: str, key: str, message: str
) -> None:
    with pytest.raises(CaseFileError) as info:
        load(tmp_path, extra)
    text = str(info.value)
    assert f"mhc.toml: case 'tiny-mhc': key '{key}': {message}" in text, text
    assert "Fix:" in text
