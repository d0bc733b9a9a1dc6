"""The kernels a declared FP8 / FP4 GEMM runs (numcheck.ops.fp8_gemm) on what a CPU can run
of them: torch._scaled_mm (torch's CPU build has it), DeepSeek's block-scaled Triton kernel
and tl.dot on e4m3 under Triton's interpreter, the dequantized float32 GEMM. Each result
against its simulated reference, within the bound of the accumulation it declares, and
recorded as multiplied. (On CUDA the gpu_regression.py steps fp8-real and fp8-families run
them compiled.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import numcheck
from numcheck.fp8 import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FAST_ACCUMULATION,
    FP8_ROW,
    FP8_TENSOR,
    FP32_ACCUMULATION,
    NVFP4,
    PROMOTED_128,
    AsStored,
    GemmQuant,
)
from numcheck.ops.fp8_gemm import (
    fp8_values,
    quant_gemm,
    quant_matmul,
    quantize_fp8,
    torchao_placement,
)
from numcheck.precision.quant_record import recording


def _operands(quant: GemmQuant, m: int, n: int, k: int, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    if isinstance(quant.a, AsStored):  # e4m3 values, as the indexer holds them
        a, b = a.to(torch.float8_e4m3fn).float(), b.to(torch.float8_e4m3fn).float()
    qa, qb = quant.operands(a, b)
    return (numcheck.fp8.Quantized(fp8_values(qa), qa.scales, qa.scheme),
            numcheck.fp8.Quantized(fp8_values(qb), qb.scales, qb.scheme))


@pytest.mark.parametrize("scheme", [DEEPSEEK_ACT, DEEPSEEK_WEIGHT, FP8_ROW, FP8_TENSOR,
                                    replace(DEEPSEEK_ACT, scale="ue8m0"),
                                    replace(DEEPSEEK_WEIGHT, scale="ue8m0"),
                                    replace(FP8_ROW, element="e5m2")],
                         ids=["act", "weight", "row", "tensor", "act-ue8m0", "weight-ue8m0",
                              "row-e5m2"])
def test_the_sync_free_fp8_quantizer_gives_numchecks_operands(scheme: object) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(130, 300, generator=g) * torch.rand(130, 1, generator=g) * 50
    x[5, 7] = 0.0
    x[:, 260:] = 0.0  # an all-zero block: its scale at the amax floor
    ours, theirs = quantize_fp8(x, scheme), numcheck.fp8.quantize(x, scheme)  # type: ignore[arg-type]
    assert ours.values.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    assert torch.equal(ours.values.float(), theirs.values.float())
    assert torch.equal(ours.scales, theirs.scales)
    assert numcheck.fp8.validate(ours, scheme, x).ok  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", [FP8_TENSOR, FP8_ROW, AsStored("e4m3fn")],
                         ids=["tensor", "row", "stored"])
@pytest.mark.parametrize("accumulation", [PROMOTED_128, FAST_ACCUMULATION],
                         ids=["promoted", "fast"])
@pytest.mark.parametrize("out", ["fp32", "bf16"])
def test_scaled_mm_pads_to_cublas_tiles_and_stays_within_its_bound(
        scheme: object, accumulation: object, out: str) -> None:
    quant = GemmQuant(scheme, scheme, accumulation, out)  # type: ignore[arg-type]
    qa, qb = _operands(quant, 8, 200, 256)  # neither M nor N a multiple of 16
    try:
        with recording() as rec:
            y = quant_gemm(qa, qb, quant, "scaled_mm")
    except RuntimeError as exc:  # a torch whose CPU build lacks this scaling
        pytest.skip(f"torch._scaled_mm on the CPU: {exc}".splitlines()[0])
    assert y.shape == (8, 200) and y.dtype == quant.out
    (call,) = rec.calls
    assert call.y is y and call.a == (qa,)
    assert numcheck.fp8.compare_to_simulated(y.float(), qa, qb, accumulation, quant.out).passed


def _on_kernel_device(q: numcheck.fp8.Quantized) -> numcheck.fp8.Quantized:
    """A Triton kernel runs on the GPU where there is one (under the interpreter, on the
    CPU, only without one): its operands go there."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return numcheck.fp8.Quantized(q.values.to(device), q.scales.to(device), q.scheme)


@pytest.mark.parametrize("out", ["fp32", "bf16"])
def test_the_block_scaled_triton_kernel_is_an_honest_kernel_of_deepseeks_recipe(out: str) -> None:
    pytest.importorskip("triton", reason="triton not installed: pip install 'numcheck[fused]'")
    quant = GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT, PROMOTED_128, out)
    for m, n, k in ((8, 200, 300), (70, 130, 256)):  # ragged blocks, several tiles
        qa, qb = map(_on_kernel_device, _operands(quant, m, n, k))
        y = quant_gemm(qa, qb, quant, "triton_block", record=False)
        assert y.dtype == quant.out
        assert numcheck.fp8.compare_to_simulated(y.float(), qa, qb, PROMOTED_128, quant.out).passed


def test_tl_dot_on_e4m3_is_an_unpromoted_kernel() -> None:
    pytest.importorskip("triton", reason="triton not installed: pip install 'numcheck[fused]'")
    quant = GemmQuant(FP8_ROW, FP8_ROW, FAST_ACCUMULATION, "fp32")
    qa, qb = map(_on_kernel_device, _operands(quant, 8, 70, 256))
    y = quant_gemm(qa, qb, quant, "triton", record=False)
    assert numcheck.fp8.compare_to_simulated(y, qa, qb, FAST_ACCUMULATION, torch.float32).passed


def test_fp4_is_emulated_by_a_dequantized_float32_gemm_recorded_per_matrix() -> None:
    quant = GemmQuant(NVFP4, NVFP4, FP32_ACCUMULATION, "bf16")
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 8, 64, generator=g), torch.randn(3, 64, 40, generator=g)
    with recording() as rec:
        y = quant_matmul(a, b, quant, "dequantized")
    (call,) = rec.calls
    assert y.shape == (3, 8, 40) and call.batch == 3
    for i in range(3):
        assert numcheck.fp8.compare_to_simulated(y[i].float(), call.a[i], call.b[i],
                                             FP32_ACCUMULATION, torch.bfloat16).passed


def test_an_unknown_backend_and_a_missing_torchao_say_what_to_do() -> None:
    quant = GemmQuant(FP8_ROW, FP8_ROW)
    qa, qb = _operands(quant, 4, 16, 32)
    with pytest.raises(ValueError, match="backend must be one of emulated, scaled_mm"):
        quant_gemm(qa, qb, quant, "cutlass")
    devices, missing = torchao_placement()
    assert (devices, missing) == (("cuda",), "") or (devices == () and missing.endswith(
        "pip install 'numcheck[fp8]' (torchao >= 0.18)"))
