"""Quantization schemes as data, and quantizing by them bit for bit (numcheck.precision.quant_scheme,
numcheck.precision.quantize)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from numcheck.precision.quant_formats import is_representable, round_to_element
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FP8_ROW,
    FP8_TENSOR,
    MXFP4,
    NVFP4,
    PER_ROW,
    PER_TENSOR,
    QUANT_PRESETS,
    Granularity,
    OperandScheme,
    block_amax,
    blocks,
    expand_to_elements,
    groups,
)
from numcheck.precision.quantize import as_quantized, dequantize, quantize, scales_for
from tests.shipped import shipped_cases


def _x(rows: int, k: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, k, generator=g) * torch.exp(2 * torch.randn(rows, 1, generator=g))


def test_granularity_grids_with_ragged_edges() -> None:
    shape = (300, 520)  # neither a multiple of 128
    assert PER_TENSOR.grid(shape) == (1, 1) and PER_TENSOR.name == "tensor"
    assert PER_ROW.grid(shape) == (300, 1) and PER_ROW.name == "row"
    assert groups(128).grid(shape) == (300, 5) and groups(128).name == "1x128"
    assert blocks(128).grid(shape) == (3, 5) and blocks(128).name == "128x128"
    assert groups(128).k_boundaries(520) == [0, 128, 256, 384, 512]
    assert not PER_ROW.varies_along_k(520) and groups(128).varies_along_k(520)
    assert not groups(128).varies_along_k(128)
    with pytest.raises(ValueError, match="rows must be an integer >= 0"):
        Granularity(-1, 0)


def test_ragged_blocks_take_the_amax_of_the_elements_they_have() -> None:
    x = torch.zeros(130, 200)
    x[129, 199] = -7.0  # the lone element of the last (ragged) block
    x[0, 130] = 3.0
    amax = block_amax(x, blocks(128))
    assert amax.tolist() == [[0.0, 3.0], [0.0, 7.0]]
    grid = torch.arange(4.0).reshape(2, 2)
    full = expand_to_elements(grid, (130, 200), blocks(128))
    assert full.shape == (130, 200) and full[129, 199] == 3 and full[127, 127] == 0
    with pytest.raises(ValueError, match=r"expected \[2, 2\]"):
        expand_to_elements(grid.T[:1], (130, 200), blocks(128))


def test_schemes_are_checked_data() -> None:
    assert DEEPSEEK_WEIGHT.label == "e4m3fn/128x128/fp32"
    assert replace(FP8_TENSOR, saturate=False).label == "e4m3fn/tensor/fp32/nosat"
    assert NVFP4.scale_shape((4, 40)) == (4, 3)
    with pytest.raises(ValueError, match="unknown scale format 'e8m0'"):
        OperandScheme(scale="e8m0")
    with pytest.raises(ValueError, match="e2m1 has no infinity and no NaN.*saturate=True"):
        OperandScheme("e2m1", groups(32), "mx", saturate=False)
    with pytest.raises(ValueError, match="amax_floor must be a finite number >= 0"):
        OperandScheme(amax_floor=-1.0)
    with pytest.raises(ValueError, match="no amax floor make a block of zeros scale 0"):
        OperandScheme(amax_floor=0.0)  # fp32 scales: 0 / 0 in a zero block
    with pytest.raises(ValueError, match="unknown element format"):
        OperandScheme("e3m4")
    with pytest.raises(ValueError, match="scale_dtype must be one of"):
        OperandScheme(scale_dtype="e8m0")
    with pytest.raises(ValueError, match="ue8m0 scales are made otherwise"):
        OperandScheme(scale="ue8m0", scale_dtype="bf16")
    with pytest.raises(ValueError, match="block_scale_min clamps NVFP4"):
        OperandScheme(block_scale_min=2.0**-6)
    with pytest.raises(ValueError, match="zero_scale must be positive"):
        replace(NVFP4, zero_scale=0.0)


def test_each_rule_has_the_floor_its_source_writes() -> None:
    """DeepGEMM's 1e-4 is an FP8 convention; the OCP MX rule and NVFP4's recipe have none."""
    assert (FP8_ROW.floor, DEEPSEEK_ACT.floor, replace(DEEPSEEK_ACT, scale="ue8m0").floor,
            MXFP4.floor, NVFP4.floor) == (1e-4, 1e-4, 1e-4, 0.0, 0.0)
    assert replace(FP8_ROW, scale="mx").floor == 0.0  # the rule's own, not the preset's
    assert replace(MXFP4, amax_floor=1e-4).floor == 1e-4
    assert MXFP4.label == "e2m1/1x32/mx" and NVFP4.conventions == ()
    assert replace(MXFP4, amax_floor=1e-4).label == "e2m1/1x32/mx/floor=0.0001"
    assert QUANT_PRESETS["torchao.nvfp4"].label == "e2m1/1x16/nvfp4/block_scale_min=0.015625"
    assert QUANT_PRESETS["compressed_tensors.nvfp4"].label == "e2m1/1x16/nvfp4/zero_scale=0.125"
    assert (QUANT_PRESETS["torchao.float8_row_bf16"].label
            == "e4m3fn/row/fp32/floor=1e-12/scale_dtype=bf16")


@pytest.mark.parametrize("sd", [1e-6, 1e-5])
@pytest.mark.parametrize("scheme", [MXFP4, NVFP4], ids=["mxfp4", "nvfp4"])
def test_fp4_keeps_small_magnitudes(scheme: OperandScheme, sd: float) -> None:
    """N(0, sd) well under 1e-4: without a floor FP4 keeps its usual ~10% error; the 1e-4
    floor of the FP8 rules flushes (1e-6) or coarsens (1e-5) every block."""
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(7)) * sd
    err = float((dequantize(quantize(x, scheme)) - x.double()).norm() / x.double().norm())
    floored = replace(scheme, amax_floor=1e-4)
    err_floor = float((dequantize(quantize(x, floored)) - x.double()).norm()
                      / x.double().norm())
    assert 0.05 < err < 0.13
    assert err_floor > 1.5 * err
    if sd == 1e-6:
        assert err_floor > 0.9  # nearly every element flushed to zero


def test_the_fp4_rules_on_zero_blocks_and_a_zero_tensor() -> None:
    x = _x(2, 64, seed=8)
    x[0, :32] = 0
    q = quantize(x, MXFP4)
    assert q.scales[0, 0] == 2.0**-127 and (q.values[0, :32] == 0).all()  # smallest E8M0
    nv = quantize(x, NVFP4)
    assert (nv.scales[0, :2] == 0).all() and (nv.values[0, :32] == 0).all()
    zero = quantize(torch.zeros(2, 32), NVFP4)  # encode scale 1: zeros, finite scales
    assert zero.global_scale == 1 and (zero.scales == 0).all() and (zero.values == 0).all()
    assert (quantize(torch.zeros(2, 64), MXFP4).scales == 2.0**-127).all()
    tiny = torch.full((1, 32), 2.0**-140)  # a float32 subnormal block: exponent clamped
    assert quantize(tiny, MXFP4).scales.item() == 2.0**-127


def test_declared_conventions_are_quantized_as_declared() -> None:
    x = _x(16, 64, seed=9)
    x[1] = 0
    x[2, :16] *= 1e-7  # a block far below the tensor's amax
    bf = quantize(x.bfloat16(), QUANT_PRESETS["torchao.float8_row_bf16"])
    amax = x.bfloat16().abs().amax(1, keepdim=True)
    rows = amax[:, 0] > 0
    assert torch.equal(bf.scales[rows], (amax / 448).float()[rows])  # divided in bf16
    assert bf.scales[1, 0] == torch.tensor(1e-12 / 448, dtype=torch.bfloat16).float()
    clamp = quantize(x, QUANT_PRESETS["torchao.nvfp4"])
    plain = quantize(x, NVFP4)
    assert (clamp.scales >= 2.0**-6).all()
    assert torch.equal(clamp.scales, plain.scales.clamp(min=2.0**-6))
    assert (clamp.values[1] == 0).all()
    sub = quantize(x, QUANT_PRESETS["compressed_tensors.nvfp4"])
    assert torch.equal(sub.scales, torch.where(plain.scales == 0, 0.125, plain.scales))
    ct8 = quantize(x, QUANT_PRESETS["compressed_tensors.fp8_channel"])
    assert ct8.scales[1, 0] == 2.0**-23 and (ct8.values[1] == 0).all()


def test_fp32_scales_are_amax_over_fmax_and_elements_the_rounding_of_x_over_scale() -> None:
    x = _x(70, 300)
    for scheme in (FP8_TENSOR, FP8_ROW, DEEPSEEK_ACT, DEEPSEEK_WEIGHT,
                   replace(DEEPSEEK_ACT, element="e5m2")):
        q = quantize(x, scheme)
        amax = block_amax(x, scheme.granularity).clamp(min=1e-4)
        assert torch.equal(q.scales, amax / scheme.format.max_value)
        full = expand_to_elements(q.scales, q.shape, scheme.granularity)
        assert torch.equal(q.values, round_to_element(x / full, scheme.element, saturate=True))
        # The block's largest element lands on (or one rounding from) the format's largest.
        top = (q.values.abs() == scheme.format.max_value).sum()
        assert top >= q.scales.numel()


def test_ue8m0_scales_are_the_smallest_power_of_two_that_keeps_amax_in_range() -> None:
    x = _x(40, 384, seed=1)
    x[0, :128] = 448.0 * 2.0**-3  # amax / 448 exactly a power of two: kept, not doubled
    scheme = replace(DEEPSEEK_ACT, scale="ue8m0")
    q = quantize(x, scheme)
    s = q.scales.double()
    amax = block_amax(x, scheme.granularity).double()
    mant, _ = torch.frexp(s)
    assert (mant == 0.5).all()
    assert (amax / s <= 448).all() and (amax / (s / 2) > 448).all()
    assert q.scales[0, 0] == 2.0**-3
    assert (q.values.abs() <= 448).all()


def test_mx_scales_follow_the_ocp_rule_and_saturate_past_fmax() -> None:
    x = _x(16, 96, seed=2)
    q = quantize(x, MXFP4)
    amax = block_amax(x, MXFP4.granularity).double()
    _, e = torch.frexp(amax)
    assert torch.equal(q.scales.double(), torch.ldexp(torch.ones_like(amax), e - 1 - 2))
    ratio = amax / q.scales.double()
    assert (ratio >= 4).all() and (ratio < 8).all()
    # amax / scale in [6, 8) saturates at 6: those blocks hold a 6 for their largest.
    over = ratio >= 6
    assert over.any()
    assert (q.values.abs() <= 6).all()
    # The same rule for MXFP8: amax / scale in [256, 512), elements saturate past 448.
    q8 = quantize(x, replace(MXFP4, element="e4m3fn"))
    r8 = block_amax(x, MXFP4.granularity).double() / q8.scales.double()
    assert (r8 >= 256).all() and (r8 < 512).all()


def test_nvfp4_follows_the_two_level_recipe() -> None:
    x = _x(8, 80, seed=3)
    q = quantize(x, NVFP4)
    amax_t = x.abs().max()
    assert q.global_scale is not None
    assert q.global_scale == amax_t / torch.tensor(2688.0)
    s_enc = torch.tensor(2688.0) / amax_t
    block = block_amax(x, NVFP4.granularity)
    assert torch.equal(q.scales, round_to_element(block / 6 * s_enc, "e4m3fn", saturate=True))
    assert is_representable(q.scales, "e4m3fn").all() and q.scales.max() == 448
    full = expand_to_elements(q.scales, q.shape, NVFP4.granularity)
    assert torch.equal(q.values, round_to_element(x * (s_enc / full), "e2m1", saturate=True))
    # Each element is within half e2m1's widest step (2) of its scaled value, plus what the
    # block's largest lost to saturation where its e4m3 scale rounded down.
    scale = q.element_scales()
    lost = (expand_to_elements(block, q.shape, NVFP4.granularity).double() - 6 * scale)
    err = (dequantize(q) - x.double()).abs()
    assert (err <= scale + lost.clamp(min=0)).all()


def test_a_block_whose_e4m3_scale_underflows_holds_zeros() -> None:
    x = torch.zeros(1, 32)
    x[0, 0] = 1000.0
    x[0, 16:] = 1e-9  # 448 * 1e-9 / 1000 is far under e4m3's smallest 2^-9
    q = quantize(x, NVFP4)
    assert q.scales[0, 1] == 0 and (q.values[0, 16:] == 0).all()
    assert torch.isfinite(dequantize(q)).all()


def test_dequantize_is_exact_in_float64() -> None:
    x = _x(33, 200, seed=4)
    for scheme in (FP8_ROW, DEEPSEEK_WEIGHT, NVFP4, MXFP4):
        q = quantize(x, scheme)
        d = dequantize(q)
        assert d.dtype == torch.float64
        # Each product has at most 4 + 24 (+ 24) significant bits: float64 holds it, so
        # dividing back by the scale recovers the element exactly.
        assert torch.equal(d / q.element_scales(), q.values.double())
        assert torch.equal(dequantize(q, torch.float32), d.float())


def test_quantize_is_deterministic_and_reads_any_float_dtype_as_float32() -> None:
    x = _x(20, 256, seed=5).bfloat16()
    a, b = quantize(x, DEEPSEEK_ACT), quantize(x.float(), DEEPSEEK_ACT)
    assert torch.equal(a.values, b.values) and torch.equal(a.scales, b.scales)


def test_bad_operands_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"2-D operand \[rows, K\].*\[2, 3, 4\]"):
        quantize(torch.ones(2, 3, 4), FP8_TENSOR)
    with pytest.raises(ValueError, match="1 NaN or infinite value"):
        quantize(torch.tensor([[1.0, float("inf")]]), FP8_TENSOR)
    with pytest.raises(ValueError, match="floating-point"):
        quantize(torch.ones(2, 2, dtype=torch.int32), FP8_TENSOR)


def test_zero_blocks_get_the_floor_scale() -> None:
    q = quantize(torch.zeros(4, 8), FP8_ROW)
    assert torch.equal(q.scales, torch.full((4, 1), 1e-4) / 448)
    assert (q.values == 0).all()


def test_as_quantized_wraps_another_quantizers_output() -> None:
    x = _x(6, 64, seed=6)
    s = x.abs().amax(1) / 448
    fp8 = (x / s[:, None]).to(torch.float8_e4m3fn)
    q = as_quantized(fp8, s, FP8_ROW)
    # Kept as given (issue 44: no conversion, so recording costs the variant nothing); read
    # in float64 where numcheck uses it.
    assert q.scales.shape == (6, 1) and q.values is fp8
    assert torch.equal(dequantize(q), fp8.double() * s.double()[:, None])
    assert as_quantized(fp8, torch.tensor(2.0), FP8_TENSOR).scales.shape == (1, 1)
    kept = as_quantized(fp8, torch.ones(2, 3), DEEPSEEK_ACT)  # a wrong grid is kept as given
    assert kept.scales.shape == (2, 3)
    with pytest.raises(ValueError, match="expected"):
        dequantize(kept)
    assert scales_for(x, FP8_ROW)[1] is None


def test_the_shipped_fp4_cases_quantize_as_they_did_with_the_old_floor() -> None:
    """The 1e-4 floor left MX and NVFP4; on the operands of every shipped case with an FP4
    variant (every seed, every GEMM the op makes, each matrix of a batch) the rules' own
    floor (none) gives the old elements bit for bit and the same dequantized operands, so
    the shipped results stand. Scales move only in blocks of zeros (the indexer's unused KV
    pages: 2^-127, the smallest E8M0, where the floor gave 2^-16), which hold zeros either
    way."""
    from numcheck.check.run import CaseInputs
    from numcheck.ops.registry import get_op

    seen = zero_blocks = 0
    for case in shipped_cases():
        op = get_op(case.op)
        schemes = {s for name in case.variants if op.variants[name].quant is not None
                   for s in op.variants[name].quant.schemes if s.scale in ("mx", "nvfp4")}
        if not schemes or op.gemm_site is None:
            continue
        made = CaseInputs(op, case)

        def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            nonlocal seen, zero_blocks
            for x, w in zip(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]),
                            strict=True):
                for m in (x, w.transpose(-1, -2)):
                    for scheme in schemes:
                        new, old = quantize(m, scheme), quantize(m, replace(scheme,
                                                                            amax_floor=1e-4))
                        assert torch.equal(new.values, old.values), (case.id, scheme.label)
                        assert torch.equal(dequantize(new), dequantize(old))
                        moved = new.scales != old.scales
                        zero = block_amax(m, scheme.granularity) == 0
                        assert bool((zero | ~moved).all()), (case.id, scheme.label)
                        zero_blocks += int(moved.sum())
                        assert torch.equal(new.global_scale if new.global_scale is not None
                                           else torch.zeros(()),
                                           old.global_scale if old.global_scale is not None
                                           else torch.zeros(()))
                        seen += 1
            return a.float() @ b.float()

        for seed in case.seeds:
            inputs, _ = made.get(seed)
            op.gemm_site(inputs, case.params, gemm)
    assert seen >= 20  # linear's FP4 cases and the indexer's
    assert zero_blocks > 0  # the indexer's unused pages: the zero-block rule is exercised


def test_wrapping_an_operand_costs_the_variant_nothing() -> None:
    """as_quantized converts nothing: under the cast ledger, wrapping a float8 operand and
    its scales (inputs of the call, as a prepared weight is) leaves no entry, and the
    operand reads the same as a float32 copy would (issue 44)."""
    from numcheck.overhead.casts import CastLedger

    x = _x(128, 256, seed=7)
    s = x.abs().amax(1) / 448
    fp8 = (x / s[:, None]).to(torch.float8_e4m3fn)
    grid = torch.ones(1, 2, dtype=torch.bfloat16)
    with CastLedger(inputs={"wq": fp8, "ws": s, "grid": grid}) as ledger:
        q = as_quantized(fp8, s, FP8_ROW)
        as_quantized(fp8[:1], grid, DEEPSEEK_ACT)
    assert ledger.entries == [] and ledger.input_passes() == {}
    copy = as_quantized(fp8.float(), s.clone(), FP8_ROW)
    assert torch.equal(dequantize(q), dequantize(copy))
