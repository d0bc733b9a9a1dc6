"""Checking another quantizer's output against its declared scheme (numcheck.precision.quant_validate)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    E5M2_TENSOR,
    FP8_ROW,
    FP8_TENSOR,
    MXFP4,
    NVFP4,
    OperandScheme,
)
from numcheck.precision.quant_validate import FINDING_KINDS, QuantizationError, validate
from numcheck.precision.quantize import as_quantized, quantize
from tests.quant_kernels import DATA, HONEST_QUANTIZERS, QUANTIZER_BUGS, operand

UE8M0_ACT = replace(DEEPSEEK_ACT, scale="ue8m0")
UE8M0_WEIGHT = replace(DEEPSEEK_WEIGHT, scale="ue8m0")
SCHEMES = {s.label: s for s in (FP8_TENSOR, FP8_ROW, DEEPSEEK_ACT, DEEPSEEK_WEIGHT, UE8M0_ACT,
                                UE8M0_WEIGHT, E5M2_TENSOR, NVFP4, MXFP4,
                                replace(MXFP4, element="e4m3fn"))}
#: Shapes with ragged edges (rows and K not multiples of 128, 32 or 16) and tiny ones.
SHAPES = ((1, 1), (3, 40), (130, 300), (256, 256))


def _honest_pairs() -> list[tuple[str, str]]:
    return [(who, label) for who, (_, formats) in HONEST_QUANTIZERS.items()
            for label, s in SCHEMES.items()
            if s.scale in formats and (who != "mx" or s.element == "e2m1")
            and (who not in ("deepgemm", "torchao") or s.element == "e4m3fn")]


@pytest.mark.parametrize(("who", "label"), _honest_pairs())
def test_honest_quantizers_of_other_projects_pass(who: str, label: str) -> None:
    scheme, (quantizer, _) = SCHEMES[label], HONEST_QUANTIZERS[who]
    for i, shape in enumerate(SHAPES):
        x = operand(DATA[i % len(DATA)], *shape, seed=i)
        v = validate(quantizer(x, scheme, x), scheme, x)
        assert v.ok, v.describe()


@pytest.mark.slow  # 5 data kinds x 4 shapes x 10 seeds x every pair
@pytest.mark.parametrize(("who", "label"), _honest_pairs())
def test_honest_quantizers_pass_on_every_data_kind_and_seed(who: str, label: str) -> None:
    scheme, (quantizer, _) = SCHEMES[label], HONEST_QUANTIZERS[who]
    for kind in DATA:
        for shape in SHAPES:
            for seed in range(10):
                x = operand(kind, *shape, seed=seed)
                v = validate(quantizer(x, scheme, x), scheme, x)
                assert v.ok, (kind, shape, seed, v.describe())


#: Each planted quantizer bug on schemes where it exists: the finding kinds it must raise and
#: a word of the likely cause.
CAUGHT = [
    ("per_tensor_scale", DEEPSEEK_WEIGHT, "scale_value", "per-tensor scale"),
    ("per_tensor_scale", UE8M0_ACT, "scale_value", "per-tensor scale"),
    ("transposed_scales", DEEPSEEK_WEIGHT, "scale_value", "transposed"),
    ("transposed_scales", UE8M0_WEIGHT, "scale_value", "transposed"),
    ("shifted_scales", DEEPSEEK_ACT, "scale_value", "shifted by one block along K"),
    ("shifted_scales", UE8M0_WEIGHT, "scale_value", "shifted by one block along K"),
    ("shifted_scales", NVFP4, "scale_value", "shifted by one block along K"),
    ("ue8m0_rounded_down", UE8M0_ACT, "scale_value", "rounded down"),
    ("ue8m0_rounded_down", UE8M0_WEIGHT, "scale_value", "rounded down"),
    ("no_clamp_overflow", FP8_TENSOR, "nonfinite", "without clamping"),
    ("no_clamp_overflow", UE8M0_ACT, "nonfinite", "without clamping"),
    ("e5m2_for_e4m3", FP8_ROW, "overflow", ""),
    ("e5m2_for_e4m3", DEEPSEEK_ACT, "rounding", ""),
    ("stale_scale", DEEPSEEK_WEIGHT, "scale_value", "stale"),
    ("stale_scale", FP8_TENSOR, "scale_value", "stale"),
    ("stale_quantization", DEEPSEEK_WEIGHT, "rounding", "stale"),
    ("stale_quantization", NVFP4, "rounding", "stale"),
    ("stale_quantization", MXFP4, "rounding", "stale"),
]


@pytest.mark.parametrize(("bug", "scheme", "kind", "hint"), CAUGHT,
                         ids=[f"{b}-{s.label}" for b, s, _, _ in CAUGHT])
@pytest.mark.parametrize("seed", [0, 1])
def test_each_planted_quantizer_bug_is_caught(bug: str, scheme: OperandScheme, kind: str,
                                              hint: str, seed: int) -> None:
    old = operand("blocky", 384, 384, seed=100 + seed)  # a square grid: transposable
    x = old * (1 + 0.25 * operand("normal", 384, 384, seed=200 + seed))  # the weight changed
    v = validate(QUANTIZER_BUGS[bug](x, scheme, old), scheme, x)
    assert kind in v.kinds(), v.describe()
    found = next(f for f in v.findings if f.kind == kind)
    assert hint in found.hint, v.describe()
    assert found.count >= 1 and found.first is not None
    with pytest.raises(QuantizationError, match=f"does not follow {scheme.label}"):
        v.raise_if_bad("w")


def test_layout_findings_name_the_expected_grid() -> None:
    x = operand("blocky", 256, 384, seed=3)
    q = quantize(x, DEEPSEEK_WEIGHT)  # grid [2, 3]
    v = validate(replace(q, scales=q.scales.T.contiguous()), DEEPSEEK_WEIGHT, x)
    assert v.kinds() == ("layout",) and "transposed" in v.findings[0].hint
    assert "need [2, 3]" in v.findings[0].message
    one = as_quantized(q.values, x.abs().max() / 448, DEEPSEEK_WEIGHT)
    v = validate(one, DEEPSEEK_WEIGHT, x)
    assert v.kinds() == ("layout",) and "per-tensor" in v.findings[0].hint
    assert validate(q, DEEPSEEK_WEIGHT, x[:, :100]).kinds() == ("layout",)
    nv = quantize(x, NVFP4)
    assert validate(replace(nv, global_scale=None), NVFP4, x).kinds() == ("layout",)
    assert validate(replace(q, global_scale=torch.tensor(1.0)), DEEPSEEK_WEIGHT,
                    x).kinds() == ("layout",)


def test_a_scheme_other_than_the_declared_one_is_named() -> None:
    x = operand("normal", 8, 256, seed=4)
    q = quantize(x, DEEPSEEK_ACT)
    v = validate(q, UE8M0_ACT, x)
    assert v.kinds()[0] == "scheme"
    assert "declares e4m3fn/1x128/ue8m0" in v.findings[0].message
    assert "scale_format" in v.kinds()  # fp32 scales are not powers of two


def test_a_wrong_global_scale_and_elements_past_the_format_are_found() -> None:
    x = operand("normal", 4, 64, seed=5)
    q = quantize(x, NVFP4)
    assert q.global_scale is not None
    v = validate(replace(q, global_scale=q.global_scale * 2), NVFP4, x)
    assert "global_scale" in v.kinds() and "rounding" in v.kinds()
    q8 = quantize(x, FP8_TENSOR)
    vals = q8.values.clone()
    vals[0, 0] = 480.0
    vals[0, 1] = 0.1  # not an e4m3fn value
    v = validate(replace(q8, values=vals), FP8_TENSOR, x)
    assert {"overflow", "element_format", "rounding"} <= set(v.kinds())
    assert set(v.kinds()) <= set(FINDING_KINDS)


def test_the_original_must_be_usable() -> None:
    q = quantize(torch.ones(2, 2), FP8_TENSOR)
    with pytest.raises(ValueError, match="NaN or infinity"):
        validate(q, FP8_TENSOR, torch.tensor([[1.0, float("nan")], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="must be 2-D"):
        validate(q, FP8_TENSOR, torch.ones(4))
    assert validate(q, FP8_TENSOR, torch.ones(2, 2)).describe().startswith(
        "quantized operand follows e4m3fn/tensor/fp32")


# -- declared conventions: checked exactly, and named when undeclared --------------------------


def _conventions_data() -> torch.Tensor:
    x = operand("normal", 64, 512, seed=21)
    x[0, 0] = 3e4  # every other block far below the tensor's amax
    x[5] = 0
    x[9, 32:64] = 0
    return x


@pytest.mark.parametrize(("preset", "plain", "hint"), [
    ("torchao.float8_row_bf16", FP8_ROW, "scales computed in bf16"),
    ("torchao.nvfp4", NVFP4, "clamped from below at 0.015625"),
    ("compressed_tensors.nvfp4", NVFP4, "zero-block substitute (declare zero_scale=0.125"),
    ("compressed_tensors.fp8_channel", replace(FP8_ROW, amax_floor=1e-9), "zero-block substitute"),
])
def test_a_convention_passes_declared_and_is_named_undeclared(preset: str, plain: OperandScheme,
                                                              hint: str) -> None:
    from numcheck.precision.quant_scheme import QUANT_PRESETS

    scheme = QUANT_PRESETS[preset]
    x = _conventions_data()
    if scheme.scale_dtype == "bf16":
        x = x.clone()
        x[5], x[9] = 1.0, 1.0  # no zero rows: torchao's path has no floor to give them
        x = x.to(torch.bfloat16)
    q = quantize(x, scheme)
    assert validate(q, scheme, x).ok
    v = validate(replace(q, scheme=plain), plain, x)
    assert v.kinds() == ("scale_value",), v.describe()
    assert hint in v.findings[0].hint and "scale pointer" not in v.findings[0].hint


def test_a_floor_the_fp4_rules_do_not_have_is_named() -> None:
    x = operand("normal", 8, 256, seed=22) * 1e-6
    for scheme in (MXFP4, NVFP4):
        floored = quantize(x, replace(scheme, amax_floor=1e-4))
        v = validate(replace(floored, scheme=scheme), scheme, x)
        assert "scale_value" in v.kinds()
        found = next(f for f in v.findings if f.kind == "scale_value")
        assert "amax floored at 1e-4 (DeepGEMM's FP8 convention)" in found.hint


def test_a_zero_block_follows_each_rule_exactly() -> None:
    """A block of zeros: the smallest E8M0 for mx (a floor's 2^-16 is flagged), e4m3 0 for
    nvfp4 (a substitute or a clamp only where declared); fp32's floor may be lower."""
    x = operand("normal", 4, 64, seed=23)
    x[1] = 0
    for scheme in (MXFP4, NVFP4, FP8_ROW):
        assert validate(quantize(x, scheme), scheme, x).ok
    mx = quantize(x, MXFP4)
    wrong = replace(mx, scales=torch.where(mx.scales == 2.0**-127, 2.0**-16, mx.scales))
    assert validate(wrong, MXFP4, x).kinds() == ("scale_value",)
    lower = quantize(x, replace(FP8_ROW, amax_floor=1e-12))  # a lower floor passes
    assert validate(replace(lower, scheme=FP8_ROW), FP8_ROW, x).ok
