"""Elementwise error metrics of an op output against its FP32 golden.

Everything here is pure: tensors in, frozen dataclasses out, no pytest. All arithmetic is done
in float64 on the CPU, whatever the dtype and device of the inputs, so a metric never depends
on the precision of the thing it is measuring.

Non-finite values are not errors to be averaged: a position where either side is NaN or
+/-inf is left out of every error metric and accounted for in :class:`NonFinite` instead, so
a budget can demand that the masks match exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from numcheck.numerics.budgets import ERROR_METRICS, MAX_OUTSIDE_ROWS
from numcheck.numerics.metric_names import SIM_METRICS

#: Rows whose counts outside the band the metrics keep (the most a budget may set aside).
ROWS_KEPT = MAX_OUTSIDE_ROWS

#: Budget names of the metrics :meth:`ErrorMetrics.value` understands, in report order
#: (one list, kept with the budget model that gates them).
METRIC_NAMES: tuple[str, ...] = ERROR_METRICS
#: Every name :meth:`ErrorMetrics.value` answers: the metrics against the golden, and those
#: against the simulated reference (NaN, not measured, unless a check filled them in).
BUDGET_METRICS: tuple[str, ...] = (*ERROR_METRICS, *SIM_METRICS)

#: dtype in which ULPs can be counted -> signed integer type of the same width.
_ULP_INT: dict[torch.dtype, tuple[torch.dtype, int]] = {
    torch.bfloat16: (torch.int16, 16),
    torch.float16: (torch.int16, 16),
    torch.float32: (torch.int32, 32),
    torch.float8_e4m3fn: (torch.int8, 8),
    torch.float8_e5m2: (torch.int8, 8),
}


@dataclass(frozen=True)
class NonFinite:
    """Counts of non-finite values in the actual (``_a``) and expected (``_e``) tensors."""

    nan_a: int
    nan_e: int
    posinf_a: int
    posinf_e: int
    neginf_a: int
    neginf_e: int
    #: Positions, NaN in neither tensor, where the +inf / -inf pattern of the two differs
    #: (inf vs finite, or +inf vs -inf).
    mask_mismatch: int
    #: Positions that are NaN in exactly one of the two tensors.
    nan_mismatch: int

    @property
    def clean(self) -> bool:
        """True when the non-finite patterns of actual and expected agree exactly."""
        return self.mask_mismatch == 0 and self.nan_mismatch == 0


@dataclass(frozen=True)
class ErrorMetrics:
    """Every error metric of one actual-vs-expected comparison.

    Error metrics are computed over *compared* positions only: those where both tensors are
    finite. With nothing to compare every metric is 0 and every index is ``()``. Where the
    NaN patterns differ (a NaN on one side only) the error is undefined, and every error
    metric is NaN, so no summary column shows a NaN output as 0 (:func:`undefined_where_nan`).
    """

    numel: int
    #: Positions where both actual and expected are finite.
    n_compared: int
    max_abs: float
    max_abs_index: tuple[int, ...]
    #: max |a - e| / |e| over compared positions with e != 0. Positions where e == 0 have no
    #: relative error; they are covered by ``max_abs``.
    max_rel: float
    max_rel_index: tuple[int, ...]
    #: ||a - e||_F / ||e||_F over compared positions; 0 if both norms are 0, inf if only
    #: ||e|| is.
    rel_fro: float
    #: 1 - 2 sum(a e) / sum(a^2 + e^2), see :func:`calc_diff`.
    calc_diff: float
    ulp_p50: float
    ulp_p99: float
    ulp_max: float
    #: Fraction (and count) of compared positions with |a - e| > atol + rtol |e|.
    frac_outside: float
    n_outside: int
    atol: float
    rtol: float
    nonfinite: NonFinite
    #: The worst element's error as a multiple of the rounding reference's worst element
    #: error on the same inputs: ``max_abs / max(honest_max_abs, floor)``, the floor being
    #: 1/8 of a rounding at the output's largest value (``unit_roundoff * max |e| / 8``), so
    #: an exact rounding reference does not demand exactness. NaN (and not gated) when no
    #: rounding reference was given.
    max_err_ratio: float = math.nan
    #: The rounding reference's worst element error (NaN when none was given).
    honest_max_abs: float = math.nan
    #: The worst element's error in units of the band, ``max |a - e| / (atol + rtol |e|)``
    #: (1.0 = on the band's edge; inf for an error where the band is 0 wide).
    max_band_ratio: float = 0.0
    max_band_ratio_index: tuple[int, ...] = ()
    unit_roundoff: float = 0.0
    #: Elements outside the band in each row (the first axis) that has any, largest first,
    #: the first :data:`ROWS_KEPT` of them: how clustered the count is.
    row_outside: tuple[int, ...] = ()
    #: Against the simulated reference (numcheck.check.against_sim, :func:`with_sim`):
    #: ``rel_fro`` and ``calc_diff`` of the output against the op recomputed on the
    #: variant's own quantized operands. NaN (not measured) for a variant without a declared
    #: quantization.
    sim_rel_fro: float = math.nan
    sim_calc_diff: float = math.nan

    def n_outside_beyond(self, rows: int) -> int:
        """Elements outside the band once the ``rows`` worst rows are set aside."""
        if rows > ROWS_KEPT:
            raise ValueError(f"only the worst {ROWS_KEPT} rows are kept, not {rows}")
        return self.n_outside - sum(self.row_outside[:rows])

    def outside_counts(self) -> dict[str, float]:
        """The counts a calibration file records beside ``frac_outside``, for judging it
        later under ``max_outside`` and ``max_outside_rows = 1`` (numcheck.calibrate.heldout)."""
        return {"n_outside": float(self.n_outside),
                "n_outside_beyond_row": float(self.n_outside_beyond(1)),
                "n_compared": float(self.n_compared)}

    def value(self, name: str) -> float:
        """The metric called ``name`` in a budget (one of :data:`METRIC_NAMES`).

        Raises:
            KeyError: ``name`` is not a metric name.
        """
        if name not in BUDGET_METRICS:
            raise KeyError(f"unknown metric {name!r}; expected one of "
                           f"{', '.join(BUDGET_METRICS)}")
        return float(getattr(self, name))

    def measured(self, name: str) -> bool:
        """False for ``max_err_ratio`` when no rounding reference was given, and for the
        simulated reference's metrics when none was made: not gated."""
        if name in SIM_METRICS:
            return not math.isnan(getattr(self, name))
        return not (name == "max_err_ratio" and math.isnan(self.max_err_ratio))

    def index_of(self, name: str) -> tuple[int, ...] | None:
        """Index of the worst element for ``max_abs`` / ``max_rel``; ``None`` for the others.

        Raises:
            KeyError: ``name`` is not a metric name.
        """
        if name not in BUDGET_METRICS:
            raise KeyError(f"unknown metric {name!r}; expected one of "
                           f"{', '.join(BUDGET_METRICS)}")
        if name == "max_abs":
            return self.max_abs_index
        if name == "max_rel":
            return self.max_rel_index
        if name == "max_err_ratio":
            return self.max_abs_index
        if name == "max_band_ratio":
            return self.max_band_ratio_index
        return None


def with_sim(m: ErrorMetrics, actual: torch.Tensor, simulated: torch.Tensor) -> ErrorMetrics:
    """``m`` with the metrics of ``actual`` against its simulated reference filled in
    (numcheck.check.against_sim): ``sim_rel_fro`` and ``sim_calc_diff`` over the positions
    finite in both (the non-finite patterns are the golden check's to judge); NaN where one
    side has a NaN the other has not."""
    _check_shapes(actual, simulated)
    a, s = _to_f64(actual).reshape(-1), _to_f64(simulated).reshape(-1)
    if bool((torch.isnan(a) != torch.isnan(s)).any()):
        return replace(m, sim_rel_fro=math.nan, sim_calc_diff=math.nan)
    both = torch.isfinite(a) & torch.isfinite(s)
    if not bool(both.all()):
        a, s = a[both], s[both]
    return replace(m, sim_rel_fro=_rel_fro(a, s), sim_calc_diff=_calc_diff_f64(a, s))


def _to_f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(device="cpu", dtype=torch.float64)


def _check_shapes(actual: torch.Tensor, expected: torch.Tensor) -> None:
    if actual.shape != expected.shape:
        raise ValueError(
            f"shape mismatch: actual {tuple(actual.shape)} vs expected {tuple(expected.shape)}"
        )


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepSeek's logits metric: ``1 - 2 sum(x y) / sum(x^2 + y^2)``, in float64.

    0 for identical tensors, 1 for orthogonal ones, up to 2 for ``x == -y``. Positions where
    either tensor is non-finite are zeroed in *both* before the sums (so a -inf mask shared by
    the two does not poison the result; whether the masks agree is checked separately, see
    :class:`NonFinite`). Returns 0.0 when the denominator is 0.

    Raises:
        ValueError: the shapes differ.
    """
    _check_shapes(x, y)
    a = _to_f64(x)
    e = _to_f64(y)
    both = torch.isfinite(a) & torch.isfinite(e)
    return _calc_diff_f64(torch.where(both, a, 0.0), torch.where(both, e, 0.0))


def _calc_diff_f64(a: torch.Tensor, e: torch.Tensor) -> float:
    a = a.reshape(-1)
    e = e.reshape(-1)
    denominator = float(torch.dot(a, a)) + float(torch.dot(e, e))
    if denominator == 0.0:
        return 0.0
    return 1.0 - 2.0 * float(torch.dot(a, e)) / denominator


def _ordered_bits(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bits of ``x`` rounded to ``dtype``, mapped to int64 so that float order is int order.

    Sign-magnitude floats become two's-complement-like integers: a non-negative float keeps
    its bit pattern, a negative one becomes minus its magnitude bits. Hence -0.0 and +0.0 both
    map to 0, and the smallest subnormals of either sign map to -1 and +1.
    """
    int_dtype, width = _ULP_INT[dtype]
    bits = x.to(dtype).view(int_dtype).to(torch.int64)
    magnitude = bits & ((1 << (width - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-element distance between ``a`` and ``b`` in units in the last place of ``dtype``.

    Both are rounded to ``dtype`` (round-to-nearest-even; float64 inputs round through torch's
    own conversion), and the distance is the number of representable ``dtype`` values stepped
    over going from one to the other: 0 for +0.0 vs -0.0, 1 for adjacent values, 2 for the
    smallest negative vs the smallest positive subnormal. Values beyond the range of ``dtype``
    round to +/-inf, which sits one step past the largest finite value. The result is
    meaningless where either side is NaN; :func:`compare` excludes those positions.

    Args:
        a, b: tensors of equal shape, any float dtype, any device.
        dtype: ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``.

    Returns:
        An int64 CPU tensor of the same shape.

    Raises:
        ValueError: the shapes differ or ``dtype`` is not supported.
    """
    if dtype not in _ULP_INT:
        supported = ", ".join(str(d) for d in _ULP_INT)
        raise ValueError(f"ULPs can be counted in {supported}, not {dtype}")
    _check_shapes(a, b)
    a_cpu = a.detach().to("cpu")
    b_cpu = b.detach().to("cpu")
    return (_ordered_bits(a_cpu, dtype) - _ordered_bits(b_cpu, dtype)).abs()


def _unravel(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, tuple(shape)))


def _flat(positions: torch.Tensor | None, i: int) -> int:
    """Flat index into the full tensor of the ``i``-th compared element."""
    return i if positions is None else int(positions[i])


def _nonfinite(a: torch.Tensor, e: torch.Tensor) -> NonFinite:
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    pos_a, pos_e = torch.isposinf(a), torch.isposinf(e)
    neg_a, neg_e = torch.isneginf(a), torch.isneginf(e)
    no_nan = ~(nan_a | nan_e)
    inf_differs = (pos_a != pos_e) | (neg_a != neg_e)
    return NonFinite(
        nan_a=_count(nan_a),
        nan_e=_count(nan_e),
        posinf_a=_count(pos_a),
        posinf_e=_count(pos_e),
        neginf_a=_count(neg_a),
        neginf_e=_count(neg_e),
        mask_mismatch=_count(inf_differs & no_nan),
        nan_mismatch=_count(nan_a != nan_e),
    )


def _count(mask: torch.Tensor) -> int:
    return int(torch.count_nonzero(mask))


#: Error metrics set to NaN when the NaN patterns differ.
_NAN_FIELDS = ("max_abs", "max_rel", "rel_fro", "calc_diff", "ulp_p50", "ulp_p99", "ulp_max",
               "frac_outside", "max_err_ratio", "max_band_ratio")


def undefined_where_nan(m: ErrorMetrics) -> ErrorMetrics:
    """``m`` with every error metric NaN when one side has a NaN the other has not: the
    error at such a position is undefined, and averaging the other positions (or, for an
    all-NaN output, comparing nothing) would show it as small, even as 0."""
    if not m.nonfinite.nan_mismatch:
        return m
    return replace(m, **{name: math.nan for name in _NAN_FIELDS})


def compare(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    ulp_dtype: torch.dtype,
    atol: float,
    rtol: float,
    unit_roundoff: float | None = None,
    rounding_ref: torch.Tensor | Sequence[torch.Tensor] | None = None,
) -> ErrorMetrics:
    """Measure ``actual`` against ``expected`` (the golden) with every metric at once.

    Both tensors are moved to the CPU as float64 first; they may be bf16, fp16, fp32 or fp64
    on any device. Positions where either side is non-finite are excluded from all error
    metrics and counted in ``nonfinite``; a NaN on one side only makes every error metric NaN
    (:func:`undefined_where_nan`). ULP percentiles use ``numpy.percentile`` with
    ``method="linear"`` over the compared positions.

    Args:
        actual: the variant's output.
        expected: the golden output, same shape.
        ulp_dtype: dtype whose ULPs are counted (the precision the variant claims).
        atol, rtol: the band ``|a - e| <= atol + rtol |e|`` behind ``frac_outside``.
        unit_roundoff: the rounding unit ``u`` of ``max_err_ratio``'s floor; by default that
            of ``ulp_dtype`` (half its machine epsilon). TF32 variants pass 2^-11.
        rounding_ref: the same output from honest implementations at the variant's
            precision on the same inputs (the op's rounding reference, or every member of
            its rounding envelope: a tensor or a sequence of them); enables
            ``max_err_ratio``, taken against the worst of them.

    Raises:
        ValueError: the shapes differ, or ``ulp_dtype`` is not supported.
    """
    _check_shapes(actual, expected)
    if ulp_dtype not in _ULP_INT:
        supported = ", ".join(str(d) for d in _ULP_INT)
        raise ValueError(f"ULPs can be counted in {supported}, not {ulp_dtype}")
    u = float(torch.finfo(ulp_dtype).eps) / 2 if unit_roundoff is None else float(unit_roundoff)
    a = _to_f64(actual)
    e = _to_f64(expected)
    shape = a.shape
    nonfinite = _nonfinite(a, e)

    compared = (torch.isfinite(a) & torch.isfinite(e)).reshape(-1)
    a_flat = a.reshape(-1)
    e_flat = e.reshape(-1)
    n_compared = _count(compared)
    if n_compared == a.numel():  # the common case: skip the masking copies
        calc = _calc_diff_f64(a_flat, e_flat)
    else:
        calc = _calc_diff_f64(
            torch.where(compared, a_flat, 0.0), torch.where(compared, e_flat, 0.0)
        )

    if n_compared == 0:  # no position finite on both sides: no error measured
        return undefined_where_nan(ErrorMetrics(
            numel=a.numel(), n_compared=0, max_abs=0.0, max_abs_index=(), max_rel=0.0,
            max_rel_index=(), rel_fro=0.0, calc_diff=calc, ulp_p50=0.0, ulp_p99=0.0, ulp_max=0.0,
            frac_outside=0.0, n_outside=0, atol=float(atol), rtol=float(rtol), nonfinite=nonfinite,
            max_err_ratio=0.0 if rounding_ref is not None else math.nan, unit_roundoff=u,
        ))

    if n_compared == a.numel():
        positions = None
        ac, ec = a_flat, e_flat
    else:
        positions = torch.nonzero(compared).reshape(-1)
        ac, ec = a_flat[positions], e_flat[positions]
    abs_err = (ac - ec).abs()

    # torch.argmax returns the first occurrence of the maximum.
    i_abs = int(torch.argmax(abs_err))
    max_abs = float(abs_err[i_abs])
    max_abs_index = _unravel(_flat(positions, i_abs), shape)
    max_rel, i_rel = _max_rel(abs_err, ec)
    max_rel_index = () if i_rel is None else _unravel(_flat(positions, i_rel), shape)

    # float64 holds every bf16/fp16/fp32 value exactly, so rounding from the float64 copies
    # gives the same bits as rounding from the originals.
    ulps_np = ulp_distance(ac, ec, ulp_dtype).numpy().astype(np.float64)
    p50, p99 = np.percentile(ulps_np, [50.0, 99.0], method="linear")

    outside, ratio = _band_ratios(abs_err, ec, atol, rtol)
    n_outside = _count(outside)
    row_outside = _row_outside(outside, positions, shape) if n_outside else ()
    i_band = int(torch.argmax(ratio))
    honest, err_ratio = math.nan, math.nan
    if rounding_ref is not None:
        refs = [rounding_ref] if isinstance(rounding_ref, torch.Tensor) else list(rounding_ref)
        flat = []
        for r in refs:
            _check_shapes(r, expected)
            h = _to_f64(r).reshape(-1)
            flat.append(h if positions is None else h[positions])
        honest, err_ratio = _err_ratio(flat, ec, u, max_abs)
    return undefined_where_nan(ErrorMetrics(
        numel=a.numel(),
        n_compared=n_compared,
        max_abs=max_abs,
        max_abs_index=max_abs_index,
        max_rel=max_rel,
        max_rel_index=max_rel_index,
        rel_fro=_rel_fro(ac, ec),
        calc_diff=calc,
        ulp_p50=float(p50),
        ulp_p99=float(p99),
        ulp_max=float(ulps_np.max()),
        frac_outside=n_outside / n_compared,
        n_outside=n_outside,
        atol=float(atol),
        rtol=float(rtol),
        nonfinite=nonfinite,
        max_err_ratio=err_ratio,
        honest_max_abs=honest,
        max_band_ratio=float(ratio[i_band]),
        max_band_ratio_index=_unravel(_flat(positions, i_band), shape),
        unit_roundoff=u,
        row_outside=row_outside,
    ))


def _max_rel(abs_err: torch.Tensor, ec: torch.Tensor) -> tuple[float, int | None]:
    """The largest relative error and its flat position (None where every golden value is 0)."""
    nonzero_e = ec != 0
    if not bool(nonzero_e.any()):
        return 0.0, None
    # -1 marks "no relative error here" (e == 0); real relative errors are >= 0.
    rel_err = torch.where(nonzero_e, abs_err / ec.abs().where(nonzero_e, 1.0), -1.0)
    i_rel = int(torch.argmax(rel_err))
    return float(rel_err[i_rel]), i_rel


def _rel_fro(ac: torch.Tensor, ec: torch.Tensor) -> float:
    """``||a - e|| / ||e||`` (0 for two zero tensors, inf for an error against zeros)."""
    err_norm = float(torch.linalg.vector_norm(ac - ec))
    ref_norm = float(torch.linalg.vector_norm(ec))
    if ref_norm == 0.0:
        return 0.0 if err_norm == 0.0 else math.inf
    return err_norm / ref_norm


def _band_ratios(abs_err: torch.Tensor, ec: torch.Tensor, atol: float,
                 rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Which errors lie outside ``atol + rtol |e|``, and every error in band units."""
    band = atol + rtol * ec.abs()
    outside = abs_err > band
    # Where the band is 0 wide, an error is infinitely outside it and no error is inside.
    ratio = torch.where(band > 0, abs_err / band.where(band > 0, 1.0),
                        torch.where(abs_err > 0, math.inf, 0.0))
    return outside, ratio


def _row_outside(outside: torch.Tensor, positions: torch.Tensor | None,
                 shape: torch.Size) -> tuple[int, ...]:
    """The count outside the band of each row with any (largest first, :data:`ROWS_KEPT` of
    them); a row is one index of the first axis (a 0-d or 1-d output's rows are elements)."""
    per_row = max(1, math.prod(shape[1:])) if len(shape) > 1 else 1
    flat = torch.nonzero(outside).reshape(-1)
    if positions is not None:
        flat = positions[flat]
    counts = torch.bincount(flat // per_row)
    top = torch.topk(counts, min(ROWS_KEPT, counts.numel())).values
    return tuple(int(c) for c in top if c > 0)


def _err_ratio(honest_refs: Sequence[torch.Tensor], ec: torch.Tensor, u: float,
               max_abs: float) -> tuple[float, float]:
    """The honest implementations' worst error (the largest over them, non-finite ones left
    out) and ``max_abs`` over it, floored at ``u max|e| / 8``:
    ``(honest_max_abs, max_err_ratio)``."""
    honest = 0.0
    for hc in honest_refs:
        h_err = (hc - ec).abs()
        honest = max(honest, float(torch.where(torch.isfinite(h_err), h_err, 0.0).max()))
    denominator = max(honest, u * float(ec.abs().max()) / 8)
    if max_abs == 0.0:
        return honest, 0.0
    return honest, math.inf if denominator == 0.0 else max_abs / denominator
