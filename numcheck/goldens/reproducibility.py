"""The FP32 reference's own reproducibility: when is a regenerated golden "the same"?

The reference is FP32, but its reductions (GEMMs, sums, softmax) are not done in one fixed
order: the thread count, the CPU's instruction set (AVX2 vs AVX-512 kernels) or another
BLAS change the summation order, and the last bits of the outputs move. A regeneration on
another machine must not rewrite a golden for that: the stored bytes are kept when every
value of the new reference output lies within :func:`tolerance` of the stored one.

The bound, per element::

    |new - old| <= REFERENCE_EPS_FACTOR * eps(float32) * scale  +  ulp(output dtype, |old|)

``scale`` is the largest finite magnitude of the stored tensor (a reduction's rounding
error is relative to the size of its terms, not of its result: a value near zero from
cancellation moves as much as a large one); the ulp term lets an output stored in a
coarser dtype (mHC's ``y`` in bf16) round the other way once. Non-finite values (the
indexer's -inf mask), integer outputs (top-k indices) and the exact entries of summary
statistics (numel, NaN/Inf counts) must match exactly. How the factor was measured:
docs/reliability.md, "Byte-stable regeneration". Nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import torch

from numcheck.goldens.packing import STATS_FIELDS, STATS_SUFFIX
from numcheck.precision import dtype_name

#: Multiples of float32's eps (times the output's scale) the reference may move between
#: settings. Measured worst: see docs/reliability.md; this leaves a wide margin above it while
#: staying far below any budget (the tightest fp32 budget is rel_fro 1e-6 ~ 8 eps).
REFERENCE_EPS_FACTOR = 64.0

_F32_EPS = torch.finfo(torch.float32).eps

#: Entries of :data:`~numcheck.goldens.packing.STATS_FIELDS` that are counts (exact); the
#: sums and extremes are tolerant.
_STATS_EXACT = tuple(STATS_FIELDS.index(f) for f in ("numel", "n_nan", "n_posinf", "n_neginf"))
_NUMEL, _SUM, _SUM_SQ, _MIN, _MAX = (STATS_FIELDS.index(f)
                                     for f in ("numel", "sum", "sum_sq", "min", "max"))


@dataclass(frozen=True)
class Difference:
    """How a new output differs from the stored one.

    ``n_differ``: values that are not bit-identical; ``max_abs``: the largest difference
    among finite values; ``rel_to_scale``: ``max_abs`` over the stored tensor's largest
    finite magnitude; ``eps_units``: the same in float32 eps; ``n_exact_differ``: values
    that must match exactly (non-finite positions, integers, counts) and do not;
    ``n_outside``: finite values beyond the tolerance.
    """

    n_differ: int = 0
    max_abs: float = 0.0
    rel_to_scale: float = 0.0
    n_exact_differ: int = 0
    n_outside: int = 0
    #: The largest difference in units of the stored dtype's spacing at that value
    #: (1.0: one rounding step, e.g. a bf16 output rounding the other way).
    max_ulps: float = 0.0

    @property
    def eps_units(self) -> float:
        return self.rel_to_scale / _F32_EPS

    @property
    def within(self) -> bool:
        return self.n_exact_differ == 0 and self.n_outside == 0

    def as_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "eps_units": self.eps_units}

    def merge(self, other: Difference) -> Difference:
        return Difference(
            self.n_differ + other.n_differ,
            max(self.max_abs, other.max_abs),
            max(self.rel_to_scale, other.rel_to_scale),
            self.n_exact_differ + other.n_exact_differ,
            self.n_outside + other.n_outside,
            max(self.max_ulps, other.max_ulps),
        )


def _ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` at ``|x|`` (in float64)."""
    info = torch.finfo(dtype)
    mag = x.abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(mag))) * info.eps


def difference(
    old: torch.Tensor, new: torch.Tensor, *, factor: float = REFERENCE_EPS_FACTOR
) -> Difference:
    """Compare two tensors of the same shape and dtype under the reproducibility bound."""
    a, b = old.detach().cpu(), new.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        n = max(a.numel(), b.numel())
        return Difference(n_differ=n, n_exact_differ=n)
    a_bits = a.contiguous().reshape(-1).view(torch.uint8).reshape(a.numel(), -1)
    b_bits = b.contiguous().reshape(-1).view(torch.uint8).reshape(b.numel(), -1)
    differ = (a_bits != b_bits).any(dim=1) if a.numel() else torch.zeros(0, dtype=torch.bool)
    n_differ = int(differ.sum())
    if not n_differ:
        return Difference()
    if not a.dtype.is_floating_point:
        return Difference(n_differ=n_differ, n_exact_differ=n_differ)
    x, y = a.reshape(-1).to(torch.float64), b.reshape(-1).to(torch.float64)
    fin_x, fin_y = torch.isfinite(x), torch.isfinite(y)
    both = fin_x & fin_y
    # NaN == NaN is fine whatever its payload; inf must keep its sign; finite vs not is a change.
    same_nonfinite = (torch.isnan(x) & torch.isnan(y)) | (~fin_x & ~fin_y & (x == y))
    n_exact = int((differ & ~both & ~same_nonfinite).sum())
    scale = float(x[fin_x].abs().max()) if bool(fin_x.any()) else 0.0
    d = (x[both] - y[both]).abs()
    max_abs = float(d.max()) if d.numel() else 0.0
    ulp = _ulp(x[both], a.dtype)
    limit = factor * _F32_EPS * scale + ulp
    n_outside = int((d > limit).sum())
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    # In steps of the stored dtype at the value that moved most (a bf16 output rounding the
    # other way is one step); near-zero values move by the scale term instead.
    ulps = float(d[d.argmax()] / ulp[d.argmax()]) if d.numel() else 0.0
    return Difference(n_differ, max_abs, rel, n_exact, n_outside, ulps)


def stats_difference(
    old: torch.Tensor, new: torch.Tensor, *, factor: float = REFERENCE_EPS_FACTOR
) -> Difference:
    """Compare two :func:`~numcheck.goldens.packing.summary_stats` vectors.

    numel and the NaN/Inf counts must match; min and max may move like any value; the sum
    and the sum of squares by what every element moving within the bound can add up to.
    """
    a, b = old.to(torch.float64), new.to(torch.float64)
    if a.shape != b.shape or a.numel() < len(STATS_FIELDS):
        return difference(old, new, factor=factor)
    if torch.equal(a, b):
        return Difference()
    exact = sum(int(a[i] != b[i]) for i in _STATS_EXACT)
    numel = float(a[_NUMEL])
    extremes = a[[_MIN, _MAX]]
    scale = float(extremes.abs().max()) if bool(torch.isfinite(extremes).all()) else 0.0
    step = factor * _F32_EPS * scale + float(_ulp(torch.tensor([scale]), torch.float32)[0])
    limits = {_SUM: numel * step, _SUM_SQ: numel * (2 * scale * step + step * step),
              _MIN: step, _MAX: step}
    outside, max_abs = 0, 0.0
    for i, limit in limits.items():
        d = abs(float(a[i]) - float(b[i]))
        if not d <= limit * (1 + 1e-12):  # NaN compares false: a NaN sum is outside
            outside += 1
        max_abs = max(max_abs, d) if i in (_MIN, _MAX) else max_abs
    n_differ = int((a != b).sum())
    rel = max_abs / scale if scale > 0 else 0.0
    return Difference(n_differ, max_abs, rel, exact, outside)


def compare_by_dtype(
    old: Mapping[str, torch.Tensor],
    new: Mapping[str, torch.Tensor],
    *,
    stats_suffix: str = STATS_SUFFIX,
    factor: float = REFERENCE_EPS_FACTOR,
) -> dict[str, Difference] | None:
    """The difference between two golden tensor sets, per stored dtype name (``float32``,
    ``bfloat16``, ``int64``), so a message can say how far fp32 values moved and how many
    bf16 values rounded the other way; None when their layout differs (other tensor names,
    shapes or dtypes: that is never a reproducibility matter)."""
    if set(old) != set(new):
        return None
    out: dict[str, Difference] = {}
    for name, t in new.items():
        o = old[name]
        if o.shape != t.shape or o.dtype != t.dtype:
            return None
        if name.endswith(stats_suffix):
            d = stats_difference(o, t, factor=factor)
        else:
            d = difference(o, t, factor=factor)
        key = dtype_name(t.dtype)
        out[key] = out.get(key, Difference()).merge(d)
    return out


def describe_unchanged(by_dtype: Mapping[str, Difference]) -> str:
    """``unchanged (within reproducibility tolerance, max diff ...)`` for a regen summary."""
    moved = {k: d for k, d in by_dtype.items() if d.n_differ}
    if not moved:
        return "unchanged"
    parts = []
    for dtype, d in sorted(moved.items()):
        if dtype in ("float32", "float64"):
            parts.append(f"{dtype}: {d.n_differ} values, max diff {d.max_abs:.3g} = "
                         f"{d.eps_units:.2g} fp32 eps x the output's max |value|")
        else:
            parts.append(f"{dtype}: {d.n_differ} values, max diff {d.max_abs:.3g} = "
                         f"{d.max_ulps:.2g} rounding step(s)")
    return (f"unchanged (within reproducibility tolerance, max diff: {'; '.join(parts)}; "
            f"tolerance {REFERENCE_EPS_FACTOR:g} fp32 eps x max |value| + 1 rounding step; "
            "stored bytes kept)")
