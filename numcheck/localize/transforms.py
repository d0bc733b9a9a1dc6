"""Cheap structural transforms of the golden that a failing output may match.

The output equal to the golden scaled by one factor, shifted by one along an axis, with two
axes transposed, or with the slices along an axis permuted: one fits when it leaves at most
:data:`TRANSFORM_FIT` of the error (and at most :data:`TRANSFORM_LEFT` relative error). Such
an output is the golden moved, up to rounding, and the message says how.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from numcheck.localize.findings import Transform
from numcheck.localize.grids import flat_pair, ravel, unravel

__all__ = ["TRANSFORM_FIT", "TRANSFORM_LEFT", "find_transform"]

#: A transform fits when the error left after undoing it is at most this fraction of the
#: error before, and at most TRANSFORM_LEFT relative error (the output *is* the moved golden,
#: up to rounding).
TRANSFORM_FIT = 0.2
TRANSFORM_LEFT = 0.05
#: Values moved to the wrong places (shifted, transposed, permuted) differ from the golden
#: by much more than rounding (two rows swapped among 32 already give 0.3); below this
#: relative error those transforms are not tried.
MOVED_MIN_ERROR = 0.01
#: Axes longer than this are not tested for a permutation (an m x m distance matrix).
MAX_PERMUTE = 1024


def _rel(a: torch.Tensor, e: torch.Tensor) -> float:
    ok = torch.isfinite(a) & torch.isfinite(e)
    zero = torch.zeros((), dtype=a.dtype)
    den = float(torch.where(ok, e, zero).square().sum())
    num = float(torch.where(ok, a - e, zero).square().sum())
    if not bool(ok.any()):
        return math.inf
    return math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else math.inf)


def find_transform(
    name: str, actual: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor | None,
    axes: Sequence[str],
) -> Transform | None:
    """The first cheap structural transform of the golden that the output matches."""
    shape = tuple(actual.shape)
    full, a, e, pos_np = flat_pair(actual, expected, positions)
    before = _rel(a, e)
    if not before > 0 or not math.isfinite(before):
        return None
    pos = torch.from_numpy(pos_np)

    def fits(after: float) -> bool:
        return after <= TRANSFORM_FIT * before and after <= TRANSFORM_LEFT

    ok = torch.isfinite(a) & torch.isfinite(e)
    ee = float((e[ok] * e[ok]).sum())
    if ee > 0:
        c = float((a[ok] * e[ok]).sum()) / ee
        after = _rel(a, c * e)
        if fits(after) and abs(c - 1.0) > 1e-6:
            return Transform("scale", f"{name}: a global scale: output = {c:.6g} x golden "
                             f"(rel error {before:.3g}, {after:.3g} after dividing it out)",
                             before, after)
    if before < MOVED_MIN_ERROR:
        return None
    whole = positions is None
    coords = None if whole else unravel(pos, shape)
    af, ef = full.view(shape), e.view(shape) if whole else e
    for d, size in enumerate(shape):
        if size < 3:
            continue
        for step in (1, -1):
            if whole:  # slices: output[i + step] against golden[i]
                after = _rel(af.narrow(d, max(step, 0), size - 1),
                             ef.narrow(d, max(-step, 0), size - 1))
            else:
                assert coords is not None
                moved = coords.clone()
                moved[:, d] += step
                valid = (moved[:, d] >= 0) & (moved[:, d] < size)
                if int(valid.sum()) < 0.5 * len(pos):
                    continue
                after = _rel(full[ravel(moved[valid], shape)], e[valid])
            if fits(after):
                return Transform(
                    "shift", f"{name}: matches the golden shifted by one {axes[d]} "
                    f"(output[{axes[d]} i {'+' if step > 0 else '-'} 1] = golden[{axes[d]} i]; "
                    f"rel error {before:.3g}, {after:.3g} after the shift)", before, after)
    for i in range(len(shape)):
        for j in range(i + 1, len(shape)):
            if shape[i] != shape[j] or shape[i] < 2:
                continue
            if whole:
                after = _rel(af.transpose(i, j), ef)
            else:
                assert coords is not None
                swapped = coords.clone()
                swapped[:, [i, j]] = coords[:, [j, i]]
                after = _rel(full[ravel(swapped, shape)], e)
            if fits(after):
                return Transform(
                    "transpose", f"{name}: matches the golden with its {axes[i]} and "
                    f"{axes[j]} axes transposed (rel error {before:.3g}, {after:.3g} after "
                    "transposing)", before, after)
    if whole:
        return _permutation(name, af, ef, axes, before)
    return None


def _permutation(
    name: str, a: torch.Tensor, e: torch.Tensor, axes: Sequence[str], before: float
) -> Transform | None:
    """Slices along one axis reordered: matched by nearest neighbour, checked in full."""
    gen = torch.Generator().manual_seed(0)
    for d, size in enumerate(a.shape):
        if size < 2 or size > MAX_PERMUTE:
            continue
        sa = torch.nan_to_num(a.movedim(d, 0).reshape(size, -1), nan=0.0, posinf=0.0,
                              neginf=0.0)
        se = torch.nan_to_num(e.movedim(d, 0).reshape(size, -1), nan=0.0, posinf=0.0,
                              neginf=0.0)
        if sa.shape[1] > 32:  # a random projection keeps the distances, at m x 32 cost
            proj = torch.randn(sa.shape[1], 32, generator=gen, dtype=torch.float64)
            sa, se = sa @ proj, se @ proj
        perm = torch.cdist(sa, se).argmin(dim=1)
        if bool((perm == torch.arange(size)).all()) or len(set(perm.tolist())) != size:
            continue
        after = _rel(a, e.index_select(d, perm))
        if after <= TRANSFORM_FIT * before and after <= TRANSFORM_LEFT:
            moved = int((perm != torch.arange(size)).sum())
            i = int(torch.nonzero(perm != torch.arange(size))[0])
            return Transform(
                "permutation", f"{name}: its {_plural(axes[d])} are permuted: {moved} of {size} "
                f"hold another {axes[d]}'s golden values ({axes[d]} {i} holds golden "
                f"{axes[d]} {int(perm[i])}; rel error {before:.3g}, {after:.3g} after "
                "reordering)", before, after)
    return None


def _plural(noun: str) -> str:
    return noun if noun.endswith("s") else f"{noun}s"
