"""Operand rounding bit for bit: TF32 rounded to nearest even (cuBLAS) and truncated (Triton),
bf16 and fp16, with signs, subnormals, overflow, infinities and NaN."""

from __future__ import annotations

import pytest
import torch

from numcheck.precision.operand_rounding import (
    FORMATS,
    round_mantissa,
    to_bf16_values,
    to_format,
    to_fp16_values,
    to_tf32,
)


def _f(pattern: int) -> torch.Tensor:
    """The float32 whose bit pattern is ``pattern`` (a 32-bit unsigned int)."""
    signed = pattern - (1 << 32) if pattern >= 1 << 31 else pattern
    return torch.tensor([signed], dtype=torch.int32).view(torch.float32)


def _bits(x: torch.Tensor) -> list[int]:
    return [v & 0xFFFFFFFF for v in x.view(torch.int32).tolist()]


ULP = 2.0**-10  # one TF32 step at 1.0


def test_the_h200_element_rounded_and_truncated() -> None:
    """1 + 0.75 * 2^-10: cuBLAS reads 1 + 2^-10, Triton's tl.dot reads 1.0 (measured on an
    H200; test_gemm_impls.py checks the devices themselves where there is one)."""
    a = torch.tensor([1 + 0.75 * ULP])
    assert to_tf32(a, "rn").item() == 1 + ULP
    assert to_tf32(a, "trunc").item() == 1.0


@pytest.mark.parametrize(("value", "rn"), [
    (1 + 0.5 * ULP, 1.0),                 # a tie: to the even neighbour, 1.0
    (1 + 1.5 * ULP, 1 + 2 * ULP),         # a tie between 1 + ULP (odd) and 1 + 2 ULP (even)
    (1 + 0.5 * ULP + 2.0**-23, 1 + ULP),  # just past the tie: up
    (1 + 0.5 * ULP - 2.0**-23, 1.0),      # just short of it: down
    (2 - 0.25 * ULP, 2.0),                # a carry out of the mantissa into the exponent
])
def test_round_to_nearest_breaks_ties_to_even(value: float, rn: float) -> None:
    x = torch.tensor([value, -value])
    assert to_tf32(x, "rn").tolist() == [rn, -rn]  # signs are symmetric


def test_truncation_goes_toward_zero_on_both_signs() -> None:
    x = torch.tensor([1 + 0.99 * ULP, -(1 + 0.99 * ULP), 2 - 2.0**-23, -(2 - 2.0**-23)])
    assert to_tf32(x, "trunc").tolist() == [1.0, -1.0, 2 - ULP, -(2 - ULP)]


def test_zeros_keep_their_sign() -> None:
    z = torch.tensor([0.0, -0.0])
    for mode in ("rn", "trunc"):
        assert _bits(to_tf32(z, mode)) == [0x00000000, 0x80000000]


def test_subnormals_round_like_any_mantissa() -> None:
    # TF32 keeps the top 10 of the 23 mantissa bits, so its subnormal step is 2^13 fp32 steps.
    step = 1 << 13
    tiny = _f(1)                          # 2^-149: far below half a TF32 step
    half = _f(step // 2)                  # exactly half a step: a tie, to even (zero)
    three_quarters = _f(3 * step // 4)
    largest = _f(0x007FFFFF)              # the largest subnormal: rounds up into the normals
    x = torch.cat([tiny, half, three_quarters, largest, -three_quarters])
    assert _bits(to_tf32(x, "rn")) == [0, 0, step, 0x00800000, 0x80000000 | step]
    assert _bits(to_tf32(x, "trunc")) == [0, 0, 0, 0x007FE000, 0x80000000]


def test_overflow_rounds_to_infinity_and_truncation_stays_finite() -> None:
    biggest = torch.tensor([torch.finfo(torch.float32).max, -torch.finfo(torch.float32).max])
    assert to_tf32(biggest, "rn").tolist() == [float("inf"), float("-inf")]
    assert _bits(to_tf32(biggest, "trunc")) == [0x7F7FE000, 0xFF7FE000]


def test_infinities_and_nan_are_kept_bit_for_bit() -> None:
    # 0x7F800001 is a NaN whose payload sits only in the dropped bits: masking those bits
    # would turn it into +inf.
    specials = torch.cat([_f(0x7F800000), _f(0xFF800000), _f(0x7F800001), _f(0xFFC00000)])
    for mode in ("rn", "trunc"):
        assert _bits(round_mantissa(specials, 10, mode)) == _bits(specials)


def test_every_kept_value_is_within_one_step_and_rn_within_half() -> None:
    x = torch.randn(100_000) * torch.exp(torch.randn(100_000) * 10)
    rn, trunc = to_tf32(x, "rn"), to_tf32(x, "trunc")
    step = torch.ldexp(torch.ones_like(x), torch.frexp(x).exponent - 11)  # 2^(e-1-10)
    assert bool(((rn - x).abs() <= step / 2).all())
    assert bool(((trunc - x).abs() < step).all() and (trunc.abs() <= x.abs()).all())
    assert bool((round_mantissa(rn, 10, "rn") == rn).all())  # idempotent
    assert bool((rn.view(torch.int32) & 0x1FFF == 0).all())  # 13 low bits cleared


def test_bf16_rounding_equals_torchs_cast_on_every_kind_of_pattern() -> None:
    gen = torch.Generator().manual_seed(0)
    patterns = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=gen, dtype=torch.int64)
    x = torch.cat([patterns.to(torch.int32).view(torch.float32),  # NaNs, subnormals, all
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"),
                                 torch.finfo(torch.float32).max, 1 + 2.0**-8, 1 + 3 * 2.0**-8])])
    mine, torchs = to_bf16_values(x), x.to(torch.bfloat16).float()
    same = (mine.view(torch.int32) == torchs.view(torch.int32)) | (mine.isnan() & torchs.isnan())
    assert bool(same.all())


def test_fp16_uses_fp16s_own_range() -> None:
    x = torch.tensor([70000.0, 1e-8, 1 + 2.0**-11])
    assert to_fp16_values(x).tolist() == [float("inf"), 0.0, 1.0]  # overflow, underflow, tie


def test_formats_and_bad_arguments() -> None:
    assert set(FORMATS) == {"fp32", "tf32_rn", "tf32_trunc", "bf16", "fp16"}
    x = torch.tensor([1 + 0.75 * ULP])
    assert to_format(x, "fp32") is x
    with pytest.raises(KeyError, match="unknown operand format 'tf19'; known: fp32"):
        to_format(x, "tf19")
    with pytest.raises(ValueError, match="needs a float32 tensor"):
        round_mantissa(x.double(), 10)
    with pytest.raises(ValueError, match="bits must be 0..23"):
        round_mantissa(x, 24)
    with pytest.raises(ValueError, match="mode must be one of"):
        round_mantissa(x, 10, "up")
