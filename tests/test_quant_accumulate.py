"""The GEMM of two quantized operands under an accumulation model (numcheck.precision.quant_accumulate)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from numcheck.precision.quant_accumulate import (
    FAST_ACCUMULATION,
    FP32_ACCUMULATION,
    PROMOTED_128,
    Accumulation,
    chunks,
    emulated_gemm,
    simulated_reference,
)
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    E5M2_TENSOR,
    FP8_ROW,
    FP8_TENSOR,
    NVFP4,
    groups,
)
from numcheck.precision.quantize import Quantized, as_quantized, quantize
from tests.quant_kernels import operand


def _exact(values: list[list[float]]) -> Quantized:
    """e4m3 values with one scale of 1 (the products are the values themselves)."""
    return as_quantized(torch.tensor(values), torch.tensor(1.0), FP8_TENSOR)


def test_the_tensor_core_drops_bits_below_its_kept_width() -> None:
    # 256 + 2^-7: the step's largest exponent is 8, so 13 kept bits cut at 2^-5 and the small
    # product is dropped; 15 kept bits cut at 2^-7 and keep it; fp32 keeps it too.
    a, b = _exact([[256.0, 2.0**-7]]), _exact([[1.0, 1.0]])
    assert emulated_gemm(a, b, FAST_ACCUMULATION).item() == 256.0
    assert emulated_gemm(a, b, replace(FAST_ACCUMULATION, mantissa_bits=15)).item() == 256.0 + 2**-7
    assert emulated_gemm(a, b, FP32_ACCUMULATION).item() == 256.0 + 2**-7
    # Truncation is toward zero, rounding to nearest rounds: -3 * 2^-7 is -0.75 of a step.
    neg = _exact([[256.0, -3 * 2.0**-7]])
    assert emulated_gemm(neg, b, FAST_ACCUMULATION).item() == 256.0
    assert emulated_gemm(neg, b, replace(FAST_ACCUMULATION, rounding="rn")).item() == 256 - 2**-5


def _one_sum(a: list[float], b: list[float], acc: Accumulation) -> float:
    """The tensor core's sum of one row pair, one product at a time in Python floats: the
    module docstring's model written out, the oracle of the tensor-wide emulation."""
    cut = {"trunc": math.trunc, "rn": round, "floor": math.floor}[acc.rounding]
    c = 0.0
    for s0 in range(0, len(a), acc.fused):
        p = [x * y for x, y in zip(a[s0:s0 + acc.fused], b[s0:s0 + acc.fused], strict=True)]
        e = math.frexp(max([abs(c)] + [abs(t) for t in p]))[1]
        q = math.ldexp(1.0, e - 1 - acc.mantissa_bits)
        c = cut(c / q) * q + sum(cut(t / q) * q for t in p)
    return c


@pytest.mark.parametrize("acc", [FAST_ACCUMULATION, replace(FAST_ACCUMULATION, rounding="rn"),
                                 replace(FAST_ACCUMULATION, rounding="floor"),
                                 replace(FAST_ACCUMULATION, mantissa_bits=9, fused=16,
                                         fused_min=4)],
                         ids=lambda a: f"{a.rounding}-{a.mantissa_bits}-{a.fused}")
def test_the_emulation_sums_each_step_as_the_model_says_one_product_at_a_time(
        acc: Accumulation) -> None:
    # e4m3 values over a wide range of magnitudes, both signs and zeros, on a ragged K: each
    # output's steps as the one-at-a-time model computes them, bit for bit.
    g = torch.Generator().manual_seed(11)

    def values(rows: int) -> torch.Tensor:
        x = torch.randn(rows, 203, generator=g) * 2.0 ** torch.randint(-8, 8, (rows, 203),
                                                                        generator=g)
        x[torch.rand(rows, 203, generator=g) < 0.1] = 0.0
        return x.to(torch.float8_e4m3fn).float()

    a, b = values(5), values(6)
    y = emulated_gemm(_exact(a.tolist()), _exact(b.tolist()), acc)
    want = [[_one_sum(ra, rb, acc) for rb in b.tolist()] for ra in a.tolist()]
    assert y.tolist() == want


def test_promotion_resets_the_tensor_core_and_keeps_what_fast_accumulation_loses() -> None:
    # 128 products of 4, then one of 2^-5 in the next chunk: unpromoted, the running sum 512
    # sets the step (2^-5 < 2^(9-13)); promoted, the new chunk starts from zero.
    a = _exact([[4.0] * 128 + [2.0**-5]])
    b = _exact([[1.0] * 129])
    assert emulated_gemm(a, b, FAST_ACCUMULATION).item() == 512.0
    assert emulated_gemm(a, b, PROMOTED_128).item() == 512.0 + 2**-5


def test_fast_accumulation_loses_far_more_than_promoted_on_a_long_positive_k() -> None:
    x, w = operand("positive", 16, 4096, 0), operand("positive", 24, 4096, 1)
    qa, qb = quantize(x, FP8_TENSOR), quantize(w, FP8_TENSOR)
    sim = simulated_reference(qa, qb)

    def rel(acc: Accumulation) -> float:
        y = emulated_gemm(qa, qb, acc).double()
        return float((y - sim).norm() / sim.norm())

    fast, promoted, fp32 = rel(FAST_ACCUMULATION), rel(PROMOTED_128), rel(FP32_ACCUMULATION)
    assert fast > 20 * promoted > 20 * fp32
    # Truncation only ever shrinks a positive sum.
    assert (emulated_gemm(qa, qb, FAST_ACCUMULATION).double() <= sim).all()


def test_chunks_follow_scale_blocks_and_promotions_with_ragged_edges() -> None:
    a = quantize(operand("normal", 4, 300, 0), DEEPSEEK_ACT)
    b = quantize(operand("normal", 5, 300, 1), DEEPSEEK_WEIGHT)
    assert [(c.start, c.stop) for c in chunks(a, b, PROMOTED_128)] == [
        (0, 128), (128, 256), (256, 300)]
    assert [c.a_block for c in chunks(a, b, FP32_ACCUMULATION)] == [0, 1, 2]
    r = quantize(operand("normal", 4, 300, 2), FP8_ROW)
    g96 = quantize(operand("normal", 5, 300, 3), replace(FP8_ROW, granularity=groups(96)))
    assert [c.start for c in chunks(r, g96, PROMOTED_128)] == [0, 96, 128, 192, 256, 288]
    assert [c.b_block for c in chunks(r, g96, PROMOTED_128)] == [0, 1, 1, 2, 2, 3]
    assert [(c.start, c.stop) for c in chunks(r, r, FAST_ACCUMULATION)] == [(0, 300)]
    with pytest.raises(ValueError, match="'none' .* cannot apply scales that change along K"):
        chunks(a, b, FAST_ACCUMULATION)
    with pytest.raises(ValueError, match="same K"):
        chunks(a, quantize(operand("normal", 5, 299, 1), DEEPSEEK_WEIGHT), PROMOTED_128)


def test_accumulation_models_are_checked_data() -> None:
    assert PROMOTED_128.label == "promoted128" and FAST_ACCUMULATION.label == "fast"
    assert replace(PROMOTED_128, mantissa_bits=14).label == "promoted128_m14f32trunc"
    assert FP32_ACCUMULATION.unit_roundoff == 2.0**-24
    assert PROMOTED_128.unit_roundoff == 2.0**-13
    with pytest.raises(ValueError, match="kind must be one of"):
        Accumulation("fp16")
    with pytest.raises(ValueError, match="do not add exactly in float32"):
        Accumulation("none", mantissa_bits=20)
    with pytest.raises(ValueError, match="promote_every must be a positive integer"):
        Accumulation("promoted", 0)


@pytest.mark.parametrize("acc", [FP32_ACCUMULATION, PROMOTED_128, FAST_ACCUMULATION],
                         ids=lambda a: a.label)
def test_the_emulation_is_deterministic_and_rounds_its_output_once(acc: Accumulation) -> None:
    qa = quantize(operand("outliers", 9, 333, 4), FP8_ROW)
    qb = quantize(operand("normal", 7, 333, 5), FP8_ROW)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = emulated_gemm(qa, qb, acc)
        torch.set_num_threads(2)
        two = emulated_gemm(qa, qb, acc)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert torch.equal(emulated_gemm(qa, qb, acc, torch.bfloat16), one.bfloat16().float())


def test_the_fp32_model_stays_within_floats_worst_case() -> None:
    qa = quantize(operand("normal", 6, 1000, 6), DEEPSEEK_ACT)
    qb = quantize(operand("blocky", 8, 1000, 7), DEEPSEEK_WEIGHT)
    y = emulated_gemm(qa, qb, FP32_ACCUMULATION).double()
    sim = simulated_reference(qa, qb)
    from numcheck.precision.quantize import dequantize

    absprod = dequantize(qa).abs() @ dequantize(qb).abs().T
    assert ((y - sim).abs() <= 1010 * 2.0**-24 * absprod).all()


def test_mixed_formats_and_global_scales_multiply() -> None:
    qa = quantize(operand("normal", 3, 64, 8), FP8_TENSOR)
    qb = quantize(operand("normal", 4, 64, 9), E5M2_TENSOR)
    assert (emulated_gemm(qa, qb, PROMOTED_128).double() - simulated_reference(qa, qb)).abs(
    ).max() < 1e-3 * simulated_reference(qa, qb).abs().max()
    na, nb = quantize(operand("normal", 3, 64, 8), NVFP4), quantize(operand("normal", 4, 64, 9),
                                                                 NVFP4)
    sim = simulated_reference(na, nb)
    assert torch.allclose(emulated_gemm(na, nb, FP32_ACCUMULATION).double(), sim, rtol=1e-5,
                          atol=1e-6 * sim.abs().max().item())


#: The H200 figures the model's defaults reproduce: rel_fro of cuBLAS's FP8 GEMM
#: (torch._scaled_mm, fp32 output) against the product of its own dequantized operands
#: (docs/fp8.md, "The model against the H200").
H200 = {("normal", "promoted128"): 1.28e-4, ("normal", "fast"): 1.33e-3,
        ("positive", "promoted128"): 6.5e-4, ("positive", "fast"): 7.1e-2}


@pytest.mark.parametrize(("data", "acc"), [("normal", PROMOTED_128), ("normal", FAST_ACCUMULATION),
                                           ("positive", PROMOTED_128),
                                           ("positive", FAST_ACCUMULATION)],
                         ids=lambda v: getattr(v, "label", v))
def test_the_default_model_lands_near_the_h200_figures(data: str, acc: Accumulation) -> None:
    m, n = (64, 128) if data == "normal" else (128, 128)
    qa = quantize(operand(data, m, 4096, 10), FP8_TENSOR)
    qb = quantize(operand(data, n, 4096, 11), FP8_TENSOR)
    sim = simulated_reference(qa, qb)
    rel = float((emulated_gemm(qa, qb, acc).double() - sim).norm() / sim.norm())
    assert rel == pytest.approx(H200[(data, acc.label)], rel=0.2)


def test_the_sums_of_the_same_operands_are_made_once_and_never_handed_out() -> None:
    """emulated_gemm keeps the float32 sums of operands it saw (a family's members multiply
    the same ones: issue 44): the same operands give the same result, a result changed in
    place changes nothing held, and an operand changed in place is summed again."""
    from numcheck.precision import tensor_digest

    g = torch.Generator().manual_seed(44)
    qa = quantize(torch.randn(4, 256, generator=g), DEEPSEEK_ACT)
    qb = quantize(torch.randn(128, 256, generator=g), DEEPSEEK_WEIGHT)
    first = emulated_gemm(qa, qb, PROMOTED_128)
    kept = first.clone()
    first.add_(1.0)  # the caller's tensor is its own
    again = emulated_gemm(qa, qb, PROMOTED_128)
    assert torch.equal(again, kept)
    assert torch.equal(emulated_gemm(qa, qb, PROMOTED_128, torch.bfloat16),
                       again.to(torch.bfloat16).float())
    before = tensor_digest(qa.values)
    qa.values.mul_(2.0)  # in place: a new version, a new digest, new sums
    assert tensor_digest(qa.values) != before
    assert torch.equal(emulated_gemm(qa, qb, PROMOTED_128), 2.0 * again)
    assert tensor_digest(torch.ones(2, device="meta")) is None  # only CPU tensors are hashed
