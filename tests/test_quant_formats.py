"""Element formats: rounding float32 to e4m3fn, e5m2 and e2m1 bit for bit (numcheck.precision.quant_formats)."""

from __future__ import annotations

import pytest
import torch

from numcheck.precision import PRECISION_CLASSES, UNIT_ROUNDOFF
from numcheck.precision.quant_formats import (
    E2M1_VALUES,
    ELEMENT_FORMATS,
    decode_e2m1,
    element_format,
    encode_e2m1,
    is_representable,
    pow2,
    round_to_element,
    unpack_fp4x2,
)

FP8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _grid(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of an fp8 dtype, each midpoint between neighbours, and the float32
    values just above and below each midpoint: every tie and every near-tie."""
    codes = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    codes = codes[torch.isfinite(codes)].unique()
    mids = (codes[1:] + codes[:-1]) / 2
    up = torch.nextafter(mids, torch.full_like(mids, float("inf")))
    down = torch.nextafter(mids, torch.full_like(mids, -float("inf")))
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(20000, generator=g) * torch.exp2(torch.randint(-20, 18, (20000,),
                                                                        generator=g).float())
    x = torch.cat([codes, mids, up, down, spread])
    return torch.cat([x, -x])


@pytest.mark.parametrize("name", list(FP8))
def test_saturating_rounding_is_torchs_cast_of_the_clamped_value(name: str) -> None:
    """Within the range torch's cast agrees with IEEE rounding on every version, so compare
    against the cast of the clamped value (what an honest quantizer does)."""
    f = ELEMENT_FORMATS[name]
    x = _grid(FP8[name])
    mine = round_to_element(x, name, saturate=True, exact=True)
    ref = x.clamp(-f.max_value, f.max_value).to(FP8[name]).float()
    assert torch.equal(mine, ref)
    # The default path (torch's cast, issue 44: 8-20x faster) gives the same bits, signed
    # zeros, subnormals, NaN and infinities included.
    special = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-30])
    for v in (x, special, x * 1e-6, x * 1e6):
        assert torch.equal(round_to_element(v, name, saturate=True).view(torch.int32),
                           round_to_element(v, name, saturate=True, exact=True)
                           .view(torch.int32))


def test_unsaturated_overflow_is_nan_for_e4m3fn_and_inf_for_e5m2() -> None:
    e4 = round_to_element(torch.tensor([448.0, 464.0, 464.0001, 479.0, 1e30, -500.0]),
                          "e4m3fn", saturate=False)
    assert e4[:2].tolist() == [448.0, 448.0]  # 464 is the tie between 448 and 480: to even
    assert torch.isnan(e4[2:]).all()
    e5 = round_to_element(torch.tensor([57344.0, 61439.0, 61440.0, -1e9, float("inf")]),
                          "e5m2", saturate=False)
    assert e5.tolist() == [57344.0, 57344.0, float("inf"), -float("inf"), float("inf")]
    # The same values saturate when the scheme says so; NaN stays NaN either way.
    sat = round_to_element(torch.tensor([1e30, -1e30, float("inf"), float("nan")]), "e4m3fn",
                           saturate=True)
    assert sat[:3].tolist() == [448.0, -448.0, 448.0] and torch.isnan(sat[3])


def _e2m1_by_search(x: torch.Tensor) -> torch.Tensor:
    """e2m1 rounding written another way: the nearest of the 8 magnitudes, a tie going to the
    one with an even mantissa bit (0, 1, 2, 4, 6 have it even; 0.5, 1.5, 3 odd)."""
    mags = torch.tensor(E2M1_VALUES[:8])
    even = torch.tensor([True, False, True, False, True, False, True, False])
    d = (x.abs().clamp(max=6.0).unsqueeze(-1) - mags).abs()
    best = d.min(-1, keepdim=True).values
    candidates = (d == best) & (even | (d == best).sum(-1, keepdim=True).eq(1))
    return mags[candidates.to(torch.int64).argmax(-1)].copysign(x)


def test_e2m1_rounding_matches_a_nearest_value_search_ties_to_even() -> None:
    mags = torch.tensor(E2M1_VALUES[:8])
    mids = (mags[1:] + mags[:-1]) / 2
    x = torch.cat([mags, mids, torch.nextafter(mids, mids + 1), torch.nextafter(mids, mids - 1),
                   torch.linspace(0, 9, 4001), torch.tensor([1e-30, 100.0])])
    x = torch.cat([x, -x])
    assert torch.equal(round_to_element(x, "e2m1", saturate=True), _e2m1_by_search(x))
    # The ties, spelled out: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
    # 5 -> 4; past 6 everything saturates.
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 1e9])
    assert round_to_element(ties, "e2m1", saturate=True).tolist() == [
        0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0]
    with pytest.raises(ValueError, match="e2m1 has no infinity and no NaN"):
        round_to_element(ties, "e2m1", saturate=False)


def test_rounding_is_exact_float32_arithmetic_on_its_own_values() -> None:
    for name in ELEMENT_FORMATS:
        x = _grid(torch.float8_e4m3fn) * 3
        once = round_to_element(x, name, saturate=True)
        assert torch.equal(round_to_element(once, name, saturate=True), once)  # idempotent
        assert is_representable(once, name).all()
        assert not is_representable(torch.tensor([float("nan"), 1e6]), name).any()


def test_formats_are_data_with_their_classes() -> None:
    e4, e5, e2 = (element_format(n) for n in ("e4m3fn", "e5m2", "e2m1"))
    assert (e4.max_exponent, e5.max_exponent, e2.max_exponent) == (8, 15, 2)
    assert (e4.smallest_subnormal, e5.smallest_subnormal, e2.smallest_subnormal) == (
        2.0**-9, 2.0**-16, 0.5)
    for f in (e4, e5, e2):
        assert f.precision in PRECISION_CLASSES
        assert f.unit_roundoff == UNIT_ROUNDOFF[f.precision]
    for f in (e4, e5):
        assert f.max_value == torch.finfo(getattr(torch, f.torch_dtype)).max
        assert f.smallest_subnormal == torch.finfo(getattr(torch, f.torch_dtype)).smallest_normal \
            * 2.0**-f.mantissa_bits
    with pytest.raises(ValueError, match="unknown element format 'fp8'.*e4m3fn, e5m2, e2m1"):
        element_format("fp8")
    with pytest.raises(ValueError, match="needs a float32 tensor"):
        round_to_element(torch.ones(2, dtype=torch.float64), "e4m3fn", saturate=True)


def test_pow2_is_exact_over_float32s_range() -> None:
    e = torch.arange(-149, 128)
    assert torch.equal(pow2(e).double(), torch.tensor([2.0**int(i) for i in e],
                                                      dtype=torch.float64))
    with pytest.raises(ValueError, match="-149..127"):
        pow2(torch.tensor([128]))


def test_e2m1_codes_round_trip_and_unpack_low_nibble_first() -> None:
    codes = torch.arange(16, dtype=torch.uint8)
    values = decode_e2m1(codes)
    assert values.tolist() == list(E2M1_VALUES)
    assert torch.equal(encode_e2m1(values), codes)
    packed = torch.tensor([[0x21, 0xF7], [0x80, 0x0C]], dtype=torch.uint8)
    assert unpack_fp4x2(packed).tolist() == [[0.5, 1.0, 6.0, -6.0], [0.0, -0.0, -2.0, 0.0]]
    with pytest.raises(ValueError, match="not an e2m1 value"):
        encode_e2m1(torch.tensor([2.5]))
    with pytest.raises(ValueError, match="codes must lie in 0..15"):
        decode_e2m1(torch.tensor([16]))
