"""numcheck.numerics.metrics against values worked out by hand in each test."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from numcheck.numerics.metrics import (
    METRIC_NAMES,
    ROWS_KEPT,
    ErrorMetrics,
    NonFinite,
    calc_diff,
    compare,
    ulp_distance,
)

INF = math.inf
NAN = math.nan
BF16_ULP_AT_1 = 2.0**-7  # bf16 keeps 7 explicit mantissa bits
BF16_MIN_SUBNORMAL = 2.0**-133  # 2^-126 (min normal) * 2^-7
FP32_MIN_SUBNORMAL = 2.0**-149


def t(values: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def cmp(
    a: torch.Tensor,
    e: torch.Tensor,
    *,
    ulp_dtype: torch.dtype = torch.bfloat16,
    atol: float = 0.0,
    rtol: float = 0.0,
) -> ErrorMetrics:
    return compare(a, e, ulp_dtype=ulp_dtype, atol=atol, rtol=rtol)


# --- the worked example -------------------------------------------------------------------


def test_worked_example_every_metric() -> None:
    # a = [1, 2, 3], e = [1, 2, 4]: one error of 1 at index 2.
    m = cmp(t([1, 2, 3]), t([1, 2, 4]))
    assert m.numel == 3
    assert m.n_compared == 3
    assert m.max_abs == 1.0
    assert m.max_abs_index == (2,)
    assert m.max_rel == 0.25  # 1 / 4
    assert m.max_rel_index == (2,)
    assert m.rel_fro == pytest.approx(1.0 / math.sqrt(1 + 4 + 16), rel=1e-15)
    # sum(a e) = 1 + 4 + 12 = 17; sum(a^2 + e^2) = 14 + 21 = 35.
    assert m.calc_diff == pytest.approx(1.0 - 2.0 * 17 / 35, rel=1e-14)
    assert m.calc_diff == pytest.approx(1.0 / 35, rel=1e-14)
    # In bf16 the step in [2, 4) is 2^-6, so 3 -> 4 is 1 / 2^-6 = 64 steps; the others 0.
    # Linear percentiles of [0, 0, 64]: p50 at rank 1 -> 0; p99 at rank 1.98 -> 0.98 * 64.
    assert m.ulp_p50 == 0.0
    assert m.ulp_p99 == pytest.approx(0.98 * 64, rel=1e-12)
    assert m.ulp_max == 64.0
    assert m.n_outside == 1
    assert m.frac_outside == pytest.approx(1 / 3)
    assert m.nonfinite == NonFinite(0, 0, 0, 0, 0, 0, 0, 0)
    assert m.nonfinite.clean


def test_identical_tensors_are_all_zero() -> None:
    x = t([[1.5, -2.0], [0.0, 3.25]])
    m = cmp(x, x.clone())
    assert (m.max_abs, m.max_rel, m.rel_fro, m.calc_diff) == (0.0, 0.0, 0.0, 0.0)
    assert (m.ulp_p50, m.ulp_p99, m.ulp_max, m.frac_outside) == (0.0, 0.0, 0.0, 0.0)
    assert m.max_abs_index == (0, 0)  # first occurrence of the maximum (all equal)


def test_value_and_index_of_by_budget_name() -> None:
    m = cmp(t([1, 2, 3]), t([1, 2, 4]), atol=0.5, rtol=0.0)
    for name in METRIC_NAMES:
        assert m.value(name) == getattr(m, name) or not m.measured(name)
    assert m.index_of("max_abs") == (2,)
    assert m.index_of("max_rel") == (2,)
    assert m.index_of("rel_fro") is None
    with pytest.raises(KeyError, match="nope"):
        m.value("nope")
    with pytest.raises(KeyError, match="numel"):
        m.value("numel")  # a field, but not a budget metric
    with pytest.raises(KeyError):
        m.index_of("nope")
    assert (m.atol, m.rtol) == (0.5, 0.0)


# --- indices ------------------------------------------------------------------------------


def test_two_dimensional_indices_of_abs_and_rel_maxima_differ() -> None:
    e = t([[1, 2], [4, 8]])
    a = t([[1, 2.5], [4, 7]])
    # |a - e| = [[0, .5], [0, 1]]; |a - e| / |e| = [[0, .25], [0, .125]]
    m = cmp(a, e)
    assert (m.max_abs, m.max_abs_index) == (1.0, (1, 1))
    assert (m.max_rel, m.max_rel_index) == (0.25, (0, 1))
    assert all(type(i) is int for i in m.max_abs_index + m.max_rel_index)


def test_three_dimensional_index() -> None:
    e = torch.zeros(2, 3, 4)
    a = e.clone()
    a[1, 2, 3] = -5.0
    a[0, 1, 2] = 4.0
    m = cmp(a, e)
    assert (m.max_abs, m.max_abs_index) == (5.0, (1, 2, 3))


def test_first_occurrence_wins_and_zero_expected_has_no_relative_error() -> None:
    # Every |a - e| is 1: max_abs reports the first. e[0] == 0 is skipped by max_rel
    # (1/1 at index 1 beats 1/2 at index 2).
    m = cmp(t([1, 2, 3]), t([0, 1, 2]))
    assert (m.max_abs, m.max_abs_index) == (1.0, (0,))
    assert (m.max_rel, m.max_rel_index) == (1.0, (1,))


def test_all_expected_zero() -> None:
    m = cmp(t([1, 0]), t([0, 0]))
    assert (m.max_abs, m.max_abs_index) == (1.0, (0,))
    assert (m.max_rel, m.max_rel_index) == (0.0, ())  # no e != 0 position: covered by max_abs
    assert m.rel_fro == INF  # ||e|| = 0, ||a - e|| = 1
    assert m.calc_diff == 1.0  # 1 - 2 * 0 / 1


def test_both_zero() -> None:
    m = cmp(t([0, 0]), t([0, -0.0]))
    assert (m.max_abs, m.max_rel, m.rel_fro, m.calc_diff, m.ulp_max) == (0, 0, 0, 0, 0)


def test_zero_dim_tensor() -> None:
    m = cmp(torch.tensor(3.0), torch.tensor(2.0))
    assert (m.numel, m.max_abs, m.max_abs_index, m.max_rel) == (1, 1.0, (), 0.5)


# --- empty comparisons --------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, e",
    [
        (torch.empty(0), torch.empty(0)),
        (torch.empty(3, 0), torch.empty(3, 0)),
        (t([INF, -INF]), t([1, 1])),
    ],
)
def test_nothing_compared_gives_zeros(a: torch.Tensor, e: torch.Tensor) -> None:
    m = cmp(a, e)
    assert m.n_compared == 0
    assert m.numel == a.numel()
    for name in METRIC_NAMES:
        assert m.value(name) == 0.0 or not m.measured(name)
    assert m.max_abs_index == () and m.max_rel_index == ()
    assert m.n_outside == 0


@pytest.mark.parametrize("a, e", [(t([NAN, NAN]), t([1, 2])), (t([NAN, 3]), t([1, 2])),
                                  (t([1, 2]), t([NAN, 2]))])
def test_a_nan_on_one_side_makes_every_error_metric_nan(a: torch.Tensor, e: torch.Tensor) -> None:
    # An all-NaN output compares nothing; averaging would show it as 0 error.
    m = cmp(a, e)
    for name in METRIC_NAMES:
        assert math.isnan(m.value(name)), name
    same = cmp(t([NAN, 3]), t([NAN, 3]))  # matching NaN patterns: the error is defined
    assert same.value("rel_fro") == 0.0


# --- calc_diff ----------------------------------------------------------------------------


def test_calc_diff_helper_by_hand() -> None:
    assert calc_diff(t([1, 2, 3]), t([1, 2, 4])) == pytest.approx(1 / 35, rel=1e-14)
    assert calc_diff(t([1, 2]), t([-1, -2])) == 2.0  # 1 - 2 * (-5) / 10
    assert calc_diff(t([1, 0]), t([0, 1])) == 1.0  # orthogonal
    assert calc_diff(t([0, 0]), t([0, 0])) == 0.0  # zero denominator


def test_calc_diff_zeroes_shared_neg_inf_mask_in_both() -> None:
    # Masked: a -> [1, 0, 2], e -> [1, 0, 3]: 1 - 2 * 7 / (5 + 10) = 1/15.
    a = t([1, -INF, 2])
    e = t([1, -INF, 3])
    assert calc_diff(a, e) == pytest.approx(1 / 15, rel=1e-14)
    m = cmp(a, e)
    assert m.calc_diff == pytest.approx(1 / 15, rel=1e-14)
    assert m.nonfinite.mask_mismatch == 0
    assert m.nonfinite.neginf_a == m.nonfinite.neginf_e == 1


def test_calc_diff_zeroes_position_non_finite_on_one_side_only() -> None:
    # e[1] = 5 is finite but a[1] is -inf: the position is zeroed in *both*, so the result is
    # the same 1/15; the disagreement shows up in mask_mismatch instead.
    a = t([1, -INF, 2])
    e = t([1, 5, 3])
    assert calc_diff(a, e) == pytest.approx(1 / 15, rel=1e-14)
    m = cmp(a, e)
    assert m.calc_diff == pytest.approx(1 / 15, rel=1e-14)
    assert m.nonfinite.mask_mismatch == 1


def test_calc_diff_accumulates_in_float64() -> None:
    # a = 1024 ones; e = a with e[0] = 1 + d, d = 2^-10 (exact in fp32).
    # sum(a e) = 1024 + d; sum(a^2 + e^2) = 2048 + 2d + d^2
    # => calc_diff = d^2 / (2048 + 2d + d^2) ~= 4.66e-10.
    # In fp32 the d^2 = 2^-20 term is below half an ulp of 2048 (2^-12), so fp32 accumulation
    # gives exactly 0.
    n, d = 1024, 2.0**-10
    a = torch.ones(n, dtype=torch.float32)
    e = a.clone()
    e[0] = 1 + d
    expected = d * d / (2 * n + 2 * d + d * d)
    fp32_way = float(1 - 2 * (a * e).sum() / (a * a + e * e).sum())
    assert fp32_way == 0.0
    assert expected > 4e-10
    assert calc_diff(a, e) == pytest.approx(expected, rel=1e-5)
    assert cmp(a, e).calc_diff == pytest.approx(expected, rel=1e-5)


# --- rel_fro ------------------------------------------------------------------------------


def test_rel_fro_by_hand_excludes_non_finite() -> None:
    # Compared positions 0 and 2: a - e = [3, 0], e = [4, 3].
    a = t([7, INF, 3])
    e = t([4, 1, 3])
    # ||a - e|| = 3, ||e|| over compared = sqrt(16 + 9) = 5 (position 1 would add 1)
    assert cmp(a, e).rel_fro == pytest.approx(3 / 5, rel=1e-15)


# --- ULP distance -------------------------------------------------------------------------


def test_ulp_bf16_adjacent_values() -> None:
    assert 1.0 + BF16_ULP_AT_1 == 1.0078125
    d = ulp_distance(t([1.0]), t([1.0078125]), torch.bfloat16)
    assert d.dtype == torch.int64
    assert d.tolist() == [1]


def test_ulp_bf16_signed_zero_and_crossing_zero() -> None:
    a = t([0.0, -BF16_MIN_SUBNORMAL, -BF16_MIN_SUBNORMAL, 0.0])
    b = t([-0.0, BF16_MIN_SUBNORMAL, 0.0, BF16_MIN_SUBNORMAL])
    assert ulp_distance(a, b, torch.bfloat16).tolist() == [0, 2, 1, 1]
    assert ulp_distance(b, a, torch.bfloat16).tolist() == [0, 2, 1, 1]  # symmetric


def test_ulp_bf16_one_to_minus_one() -> None:
    # bits of bf16 1.0 are 0x3F80 = 16256: 16256 steps down to 0, and as many down to -1.
    assert ulp_distance(t([1.0]), t([-1.0]), torch.bfloat16).tolist() == [2 * 0x3F80]


def test_ulp_rounds_to_target_dtype_first() -> None:
    # 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties-to-even gives 1.0.
    # 1 + 3 * 2^-9 rounds up to 1.0078125.
    a = t([1.0, 1.0])
    b = t([1 + 2.0**-8, 1 + 3 * 2.0**-9])
    assert ulp_distance(a, b, torch.bfloat16).tolist() == [0, 1]


def test_ulp_fp32() -> None:
    a = t([1.0, -FP32_MIN_SUBNORMAL, 1.0, 1.0])
    b = t([1 + 2.0**-23, FP32_MIN_SUBNORMAL, 2.0, 1 + 2.0**-23])
    assert ulp_distance(a[:3], b[:3], torch.float32).tolist() == [1, 2, 2**23]
    # Same pair in bf16: 1 + 2^-23 rounds to 1.0.
    assert ulp_distance(a[3:], b[3:], torch.bfloat16).tolist() == [0]


def test_ulp_fp16_and_overflow_to_inf() -> None:
    a = t([1.0, 65504.0, 70000.0])
    b = t([1 + 2.0**-10, INF, 65504.0])
    # 70000 is past fp16's max (65504) and rounds to inf: one step above the max.
    assert ulp_distance(a, b, torch.float16).tolist() == [1, 1, 1]


def test_ulp_unsupported_dtype_and_shape() -> None:
    with pytest.raises(ValueError, match="float64"):
        ulp_distance(t([1.0]), t([1.0]), torch.float64)
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        ulp_distance(t([1, 2]), t([1, 2, 3]), torch.float32)
    with pytest.raises(ValueError, match="float64"):
        cmp(t([1.0]), t([1.0]), ulp_dtype=torch.float64)


def test_ulp_percentiles_linear() -> None:
    # a is e + k bf16 ulps, k = 0..4: distances [0, 1, 2, 3, 4].
    e = torch.ones(5)
    a = 1 + BF16_ULP_AT_1 * torch.arange(5, dtype=torch.float32)
    m = cmp(a, e, ulp_dtype=torch.bfloat16)
    assert m.ulp_p50 == 2.0
    assert m.ulp_p99 == pytest.approx(3.96, rel=1e-12)  # rank 0.99 * 4 = 3.96
    assert m.ulp_max == 4.0


def test_ulp_percentiles_skip_non_finite() -> None:
    # Without the NaN/inf positions the distances are [1, 1]; with them garbage would show.
    a = t([1.0078125, -INF, INF, 1.0])
    e = t([1.0, 1.0, 1.0, 1.0078125])
    m = cmp(a, e, ulp_dtype=torch.bfloat16)
    assert (m.ulp_p50, m.ulp_p99, m.ulp_max) == (1.0, 1.0, 1.0)


# --- frac_outside -------------------------------------------------------------------------


def test_frac_outside_band_edges() -> None:
    # atol 0.25, rtol 0.5: bound 1.25 where |e| = 2, 2.25 where |e| = 4 (all binary-exact).
    e = t([2, 2, -2, 4, 1])
    a = t([3.25, 3.5, -0.75, 6.5, INF])
    # |a - e| = [1.25 (on the edge: inside), 1.5 (out), 1.25 (inside), 2.5 (out), excluded]
    m = cmp(a, e, atol=0.25, rtol=0.5)
    assert m.n_compared == 4
    assert m.n_outside == 2
    assert m.frac_outside == 0.5


def test_frac_outside_atol_only_and_rtol_only() -> None:
    e = t([0, 8])
    a = t([0.5, 9])  # errors 0.5 and 1
    assert cmp(a, e, atol=0.5, rtol=0.0).n_outside == 1  # 1 > 0.5
    assert cmp(a, e, atol=1.0, rtol=0.0).n_outside == 0
    assert cmp(a, e, atol=0.0, rtol=0.125).n_outside == 1  # e = 0 position: 0.5 > 0
    assert cmp(a, e, atol=0.0, rtol=0.0625).n_outside == 2  # 1 > 0.5


# --- non-finite accounting ----------------------------------------------------------------


def test_nonfinite_accounting() -> None:
    a = t([NAN, 1, INF, -INF, INF, NAN, 2, 1.5])
    e = t([NAN, NAN, INF, INF, 3, 1, -INF, 1.0])
    m = cmp(a, e)
    nf = m.nonfinite
    assert (nf.nan_a, nf.nan_e) == (2, 2)  # a: 0, 5; e: 0, 1
    assert (nf.posinf_a, nf.posinf_e) == (2, 2)  # a: 2, 4; e: 2, 3
    assert (nf.neginf_a, nf.neginf_e) == (1, 1)  # a: 3; e: 6
    assert nf.nan_mismatch == 2  # 1 (NaN in e only), 5 (NaN in a only)
    # NaN-free positions 2..7: 2 agrees (+inf both); 3 (-inf vs +inf), 4 (+inf vs 3) and
    # 6 (2 vs -inf) differ; 7 is finite in both.
    assert nf.mask_mismatch == 3
    assert not nf.clean
    # Only position 7 is compared, but a NaN on one side makes the error undefined.
    assert (m.numel, m.n_compared) == (8, 1)
    assert math.isnan(m.max_abs) and m.max_abs_index == (7,)


def test_matching_masks_are_clean_and_excluded() -> None:
    a = t([[-INF, 1.0], [NAN, 2.0]])
    e = t([[-INF, 1.5], [NAN, 2.0]])
    m = cmp(a, e)
    assert m.nonfinite.clean
    assert m.n_compared == 2
    assert (m.max_abs, m.max_abs_index) == (0.5, (0, 1))


# --- inputs -------------------------------------------------------------------------------


def test_shape_mismatch_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"actual \(2, 3\) vs expected \(3, 2\)"):
        cmp(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"\(4,\).*\(2, 2\)"):
        calc_diff(torch.zeros(4), torch.zeros(2, 2))


def test_bf16_actual_against_fp32_expected() -> None:
    a = t([1.0078125, 2.0], dtype=torch.bfloat16)
    e = t([1.0, 2.0])
    m = cmp(a, e, ulp_dtype=torch.bfloat16)
    assert m.max_abs == 2.0**-7
    assert m.max_rel == 2.0**-7
    assert m.ulp_max == 1.0
    # The same error is 2^-7 / 2^-23 = 2^16 fp32 ulps.
    assert cmp(a, e, ulp_dtype=torch.float32).ulp_max == 2.0**16


def test_both_bf16_and_fp64_inputs() -> None:
    a = t([3.0, -1.0], dtype=torch.bfloat16)
    e = t([4.0, -1.0], dtype=torch.bfloat16)
    m = cmp(a, e)
    assert (m.max_abs, m.max_rel, m.ulp_max) == (1.0, 0.25, 64.0)
    m64 = cmp(a.double(), e.double())
    assert (m64.max_abs, m64.max_rel, m64.ulp_max) == (1.0, 0.25, 64.0)


def test_float64_precision_is_kept() -> None:
    # A 1e-12 error is invisible in fp32 but must survive for fp64 inputs.
    a = torch.tensor([1.0 + 1e-12], dtype=torch.float64)
    e = torch.tensor([1.0], dtype=torch.float64)
    m = cmp(a, e, ulp_dtype=torch.float32)
    assert m.max_abs == pytest.approx(1e-12, rel=1e-3)
    assert m.ulp_max == 0.0  # ... while the fp32 ULP view rounds it away


def test_does_not_modify_inputs_and_accepts_grad_tensors() -> None:
    a = t([1.0, 2.0]).requires_grad_()
    e = t([1.0, 3.0])
    m = cmp(a, e)
    assert m.max_abs == 1.0
    assert e.tolist() == [1.0, 3.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_inputs() -> None:
    a = t([1, 2, 3]).cuda()
    e = t([1, 2, 4]).cuda()
    m = cmp(a, e)
    assert (m.max_abs, m.max_abs_index, m.ulp_max) == (1.0, (2,), 64.0)


# --- element-level worst case: max_err_ratio and max_band_ratio ---------------------------


def test_max_band_ratio_is_the_worst_element_in_units_of_the_band() -> None:
    # band = 0.1 + 0.1 |e|: [0.2, 0.3, 0.5]; errors [0.1, 0, 1.0] -> ratios [0.5, 0, 2.0].
    m = cmp(t([1.1, 2.0, 3.0]), t([1.0, 2.0, 4.0]), atol=0.1, rtol=0.1)
    assert m.max_band_ratio == pytest.approx(2.0)
    assert m.index_of("max_band_ratio") == (2,)
    assert m.n_outside == 1


def test_max_band_ratio_of_a_zero_width_band() -> None:
    assert cmp(t([1.0, 2.0]), t([1.0, 2.0])).max_band_ratio == 0.0
    assert cmp(t([1.0, 2.5]), t([1.0, 2.0])).max_band_ratio == INF


def test_max_err_ratio_against_the_rounding_reference() -> None:
    e = t([1.0, 2.0, 4.0])
    honest = t([1.0, 2.0 + 2**-6, 4.0])  # worst honest error 2^-6
    a = t([1.0, 2.0, 4.0 + 2**-3])  # worst error 2^-3: 8x the honest one
    m = compare(a, e, ulp_dtype=torch.bfloat16, atol=0, rtol=0, rounding_ref=honest)
    assert m.honest_max_abs == 2**-6
    assert m.max_err_ratio == 8.0
    assert m.index_of("max_err_ratio") == (2,)
    assert m.measured("max_err_ratio")


def test_max_err_ratio_against_the_worst_of_a_rounding_envelope() -> None:
    e = t([1.0, 2.0, 4.0])
    single = t([1.0, 2.0 + 2**-6, 4.0])  # worst error 2^-6
    split_k = t([1.0 - 2**-5, 2.0, 4.0])  # worst error 2^-5: two roundings
    a = t([1.0, 2.0, 4.0 + 2**-3])
    m = compare(a, e, ulp_dtype=torch.bfloat16, atol=0, rtol=0, rounding_ref=[single, split_k])
    assert m.honest_max_abs == 2**-5
    assert m.max_err_ratio == 4.0
    alone = compare(a, e, ulp_dtype=torch.bfloat16, atol=0, rtol=0, rounding_ref=[single])
    assert alone.max_err_ratio == 8.0


def test_max_err_ratio_floor_when_the_rounding_reference_is_exact() -> None:
    # An exact reference (TF32 on a CPU): the floor is u * max|e| / 8 = 2^-8 * 4 / 8 = 2^-9.
    e = t([1.0, 2.0, 4.0])
    a = t([1.0, 2.0, 4.0 + 2**-7])
    m = compare(a, e, ulp_dtype=torch.bfloat16, atol=0, rtol=0, rounding_ref=e.clone())
    assert m.honest_max_abs == 0.0
    assert m.max_err_ratio == 4.0  # 2^-7 / 2^-9
    tf32 = compare(a, e, ulp_dtype=torch.float32, atol=0, rtol=0, rounding_ref=e.clone(),
                   unit_roundoff=2.0**-11)
    assert tf32.max_err_ratio == 2.0**-7 / (2.0**-11 * 4 / 8)


def test_max_err_ratio_is_unmeasured_without_a_rounding_reference() -> None:
    m = cmp(t([1.0, 3.0]), t([1.0, 2.0]))
    assert math.isnan(m.max_err_ratio) and not m.measured("max_err_ratio")
    assert m.measured("max_abs")


def test_max_err_ratio_skips_non_finite_positions() -> None:
    e = t([-INF, 1.0, 2.0])
    m = compare(t([-INF, 1.0, 2.5]), e, ulp_dtype=torch.bfloat16, atol=0, rtol=0,
                rounding_ref=t([-INF, 1.25, 2.0]))
    assert m.honest_max_abs == 0.25
    assert m.max_err_ratio == 2.0


def test_fp8_ulps() -> None:
    # e4m3 keeps 3 mantissa bits: 1.0 and 1.125 are adjacent; e5m2 steps by 0.25 at 1.
    assert ulp_distance(t([1.125]), t([1.0]), torch.float8_e4m3fn).tolist() == [1]
    assert ulp_distance(t([1.5]), t([1.0]), torch.float8_e5m2).tolist() == [2]


def test_row_outside_counts_each_rows_elements_outside_largest_first() -> None:
    expected = torch.zeros(5, 3)
    actual = expected.clone()
    actual[1, :2] = 1.0
    actual[4, :] = 1.0
    actual[0, 0] = 1.0
    m = compare(actual, expected, ulp_dtype=torch.float32, atol=0.5, rtol=0)
    assert m.row_outside == (3, 2, 1)
    assert (m.n_outside_beyond(0), m.n_outside_beyond(1), m.n_outside_beyond(2)) == (6, 3, 1)
    assert m.outside_counts() == {"n_outside": 6.0, "n_outside_beyond_row": 3.0,
                                  "n_compared": 15.0}


def test_row_outside_maps_positions_past_non_finite_elements_to_their_rows() -> None:
    expected = torch.zeros(3, 4)
    expected[0, :] = float("inf")  # row 0 compares nothing: the rest shift in the flat order
    actual = expected.clone()
    actual[2, 1:] = 1.0
    m = compare(actual, expected, ulp_dtype=torch.float32, atol=0.5, rtol=0)
    assert (m.n_compared, m.row_outside) == (8, (3,))


def test_row_outside_of_a_vector_counts_elements_and_is_empty_when_all_inside() -> None:
    m = compare(torch.tensor([0.0, 1.0, 1.0]), torch.zeros(3), ulp_dtype=torch.float32,
                atol=0.5, rtol=0)
    assert m.row_outside == (1, 1)
    assert compare(torch.zeros(2, 2), torch.zeros(2, 2), ulp_dtype=torch.float32, atol=0,
                   rtol=0).row_outside == ()


def test_only_the_kept_rows_can_be_set_aside() -> None:
    m = compare(torch.zeros(2, 2), torch.zeros(2, 2), ulp_dtype=torch.float32, atol=0, rtol=0)
    with pytest.raises(ValueError, match="only the worst"):
        m.n_outside_beyond(ROWS_KEPT + 1)
