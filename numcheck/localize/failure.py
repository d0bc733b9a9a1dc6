"""Where a failed check's error sits, in the op's own structure.

A failure message that says ``logits.rel_fro 0.14 > budget 0.004`` leaves the engineer to
bisect by hand: which request, which page, which MTP row, which tokens. numcheck knows each
output's structure (:mod:`numcheck.ops.structure`), so on a failed check it measures how the error
is spread over every grouping and names the groups that carry it.

What is measured, per element of the failing output (only where golden and output are both
finite, unless the failure is about the non-finite pattern itself):

- **error**: ``(|out - golden| / (atol + rtol |golden|))^2``: the squared error in units of
  the output's own budget band, so honest rounding, which grows with ``|golden|``, weighs
  about the same everywhere and large values do not pass for a localization;
- **mismatches**: positions whose NaN / +inf / -inf pattern differs from the golden's (a mask
  off by one, an overflow), one count each;
- **flips**: unexplained top-k flips, placed on the grid of the scores they rank.

Concentration along one grouping: sort its groups by error density (error / elements), take
the ``k`` densest groups where ``error share - element share`` peaks (the Lorenz curve's
largest gap: the Hoover index, a Gini-like measure), and compare the density inside those
``k`` groups with the density outside (the *lift*). A grouping is **concentrated** when the
``k`` groups carry at least :data:`MIN_SHARE` of the error at a lift of at least
:data:`MIN_LIFT`; otherwise the error is spread out and the message says "no concentration".
docs/reliability.md ("Localization") shows why the thresholds separate honest bf16 rounding
from planted bugs.

Before that, cheap **structural transforms** are tried: the output equal to the golden scaled
by one factor, shifted by one along an axis, with two axes transposed, or with the slices
along an axis permuted. One fits when it leaves at most :data:`TRANSFORM_FIT` of the error.

All of it runs only on a failed check (:func:`numcheck.numerics.against_golden.check` calls
:func:`localize_failure` once per failing check); ``NUMCHECK_LOCALIZE=0`` in the environment
switches it off.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from numcheck.ops.structure import Grouping, Structure, axis_names, groupings_of

if TYPE_CHECKING:
    from numcheck.goldens.packing import StoredOutput

#: Heavy groups must carry at least this share of the error...
MIN_SHARE = 0.5
#: ...at an error density at least this many times the density of the other groups.
#: Honest bf16 rounding on every shipped case reaches lift <= 3.1 along any grouping
#: (docs/reliability.md, "Localization"); bugs that sit somewhere reach 30 and more.
MIN_LIFT = 8.0
#: ...and cover at most this share of the elements: a place is not the whole output.
MAX_ELEMENT_SHARE = 0.8
#: Concentrated groupings whose error shares are this close count as tied; the tie goes to
#: the one explained by a kind of element, then the most specific (smallest element share).
TIE = 0.05
#: "only X is wrong" from this share of the error on.
ONLY_SHARE = 0.99
#: Fewer mismatches or flips than this are listed where they are, not measured.
MIN_EVENTS = 4
#: A transform fits when the error left after undoing it is at most this fraction of the
#: error before, and at most TRANSFORM_LEFT relative error (the output *is* the moved golden,
#: up to rounding).
TRANSFORM_FIT = 0.2
TRANSFORM_LEFT = 0.05
#: Values moved to the wrong places (shifted, transposed, permuted) differ from the golden
#: by much more than rounding (two rows swapped among 32 already give 0.3); below this
#: relative error those transforms are not tried.
MOVED_MIN_ERROR = 0.01
#: The gap (error share - element share) must beat the same gap with the error shuffled at
#: random over the output's elements by this much: groups finer than the error (a few
#: nonzero errors, a few flips, groups of a handful of elements) look concentrated by chance,
#: and the shuffle measures how much. The largest of NULL_DRAWS shuffles counts. When at
#: least MIN_EVENTS elements lie outside the band, the test counts those elements (each one
#: once) rather than squared errors, so that a few huge errors cannot mask a clustered set.
MIN_EXCESS = 0.15
NULL_DRAWS = 3
#: A kind of element explains a heavy set when their elements overlap this much (Jaccard),
#: unless the kind covers nearly everything.
EXPLAIN_JACCARD = 0.8
EXPLAIN_MAX_SHARE = 0.9
#: Axes longer than this are not tested for a permutation (an m x m distance matrix).
MAX_PERMUTE = 1024
#: Heavy groups named one by one in a message (more: the count and the worst one).
MAX_NAMED = 4
#: When no grouping is concentrated but at most MAX_FEW elements carry FEW_SHARE of the
#: error, the message says where those elements are instead of "no concentration".
MAX_FEW = 8
FEW_SHARE = 0.9
#: Outputs larger than this are measured at this many positions (a fixed random sample).
MAX_POSITIONS = 32_768
#: Groups kept per grouping in the record (for heatmaps): the first ones by label.
MAX_GROUPS_KEPT = 256
#: Environment variable that switches localization off (``0``), e.g. to time it.
ENV = "NUMCHECK_LOCALIZE"


def enabled() -> bool:
    """False when ``NUMCHECK_LOCALIZE=0``."""
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class Concentration:
    """How one output's error is spread over one grouping."""

    grouping: str
    plural: str
    groups: int
    #: The densest groups that carry the error (the Lorenz curve's largest gap).
    heavy: int
    error_share: float
    element_share: float
    #: Error density inside the heavy groups over the density outside (inf: none outside).
    lift: float
    #: ``error_share - element_share``: the Hoover index of this grouping.
    score: float
    #: The same for the error shuffled at random over the elements (measured only for a
    #: grouping that passes the other tests; 0 otherwise; on the elements outside the band
    #: when there are enough of them, see MIN_EXCESS).
    null_score: float
    #: The tested gap minus ``null_score`` (must reach MIN_EXCESS; 0 when not measured).
    excess: float
    concentrated: bool
    #: Up to 5 heavy groups, densest first: ``{label, name, share}``.
    top: list[dict[str, Any]] = field(default_factory=list)
    #: The densest group's largest |error| and the band there (error measure only).
    worst_abs: float | None = None
    worst_band: float | None = None
    #: A kind of element that coincides with the heavy groups ("the last, partial page...").
    explained_by: str = ""
    #: For heatmaps: labels (at most :data:`MAX_GROUPS_KEPT`), their error and element shares.
    labels: list[int] = field(default_factory=list)
    error_shares: list[float] = field(default_factory=list)
    element_shares: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Transform:
    """A structural transform of the golden that the output matches."""

    kind: str  # "scale", "shift", "transpose", "permutation"
    text: str
    error_before: float
    error_after: float


@dataclass(frozen=True)
class Localization:
    """Where the error of one failing output sits."""

    output: str
    seed: int | None
    #: ``error``, ``mismatches`` or ``flips``.
    measure: str
    #: Elements (error) or events (mismatches, flips) measured.
    events: int
    #: The message lines, most telling first (the failure message shows them).
    lines: tuple[str, ...]
    concentrated: bool
    transform: Transform | None = None
    groupings: tuple[Concentration, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the JSON record (docs/report.md, ``localization``); a non-finite
        number (the lift when no error lies outside the heavy groups) becomes None."""
        return dict(_finite(asdict(self)))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# -- measuring ---------------------------------------------------------------------------


_Inputs = Mapping[str, torch.Tensor]
_Params = Mapping[str, Any]


@dataclass
class _Grid:
    """One output's measured weights at the compared positions."""

    name: str
    shape: tuple[int, ...]
    positions: np.ndarray  # flat positions measured
    weight: np.ndarray  # error / event weight at each position
    counted: np.ndarray  # bool: position belongs to the population
    measure: str
    events: int
    abs_err: np.ndarray | None = None
    band: np.ndarray | None = None
    #: Error measure: the elements outside the band (what the shuffle test counts).
    outside: np.ndarray | None = None


def _classes(x: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +inf, 3 -inf."""
    c = torch.zeros(x.shape, dtype=torch.int8)
    c[torch.isnan(x)] = 1
    c[torch.isposinf(x)] = 2
    c[torch.isneginf(x)] = 3
    return c


def _flat_pair(
    actual: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    full = actual.detach().to("cpu", torch.float64).reshape(-1)
    e = expected.detach().to("cpu", torch.float64).reshape(-1)
    if positions is None:
        pos = torch.arange(full.numel())
        return full, full, e, pos.numpy()
    pos = positions.to(torch.int64)
    return full, full[pos], e, pos.numpy()


def error_grid(
    name: str, actual: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor | None,
    *, atol: float, rtol: float,
) -> _Grid:
    """Weights of one output: its non-finite mismatches if any, else its error in bands."""
    _, a, e, pos = _flat_pair(actual, expected, positions)
    mismatch = _classes(a) != _classes(e)
    finite = torch.isfinite(a) & torch.isfinite(e)
    shape = tuple(actual.shape)
    if bool(mismatch.any()):
        m = mismatch.numpy()
        return _Grid(name, shape, pos, m.astype(np.float64), (finite | mismatch).numpy(),
                     "mismatches", int(m.sum()))
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    band = atol + rtol * e.abs()
    band = torch.where(finite & (band > 0), band, torch.ones_like(band))
    if atol <= 0 and rtol <= 0:
        weight = err.square()
    else:
        weight = (err / band).square()
    raw_band = atol + rtol * e.abs()
    return _Grid(name, shape, pos, weight.numpy(), finite.numpy(), "error",
                 int(finite.sum()), err.numpy(), raw_band.numpy(),
                 (finite & (err > raw_band)).numpy())


def flip_grid(
    name: str, scores: torch.Tensor, flips: Sequence[tuple[int, int]], n_flips: int
) -> _Grid:
    """Unexplained flips ``(row, token)`` placed on the ``[R, L]`` grid of golden scores."""
    e = scores.detach().to("cpu", torch.float64)
    shape = tuple(e.shape)
    weight = torch.zeros(shape, dtype=torch.float64)
    if flips:
        at = torch.tensor(list(flips), dtype=torch.int64)
        weight.index_put_((at[:, 0], at[:, 1]), torch.ones(len(at), dtype=torch.float64),
                          accumulate=True)
    counted = torch.isfinite(e) | (weight > 0)
    return _Grid(name, shape, np.arange(e.numel()), weight.reshape(-1).numpy(),
                 counted.reshape(-1).numpy(), "flips", n_flips)


def _labels(g: Grouping, inputs: _Inputs, params: _Params, grid: _Grid) -> np.ndarray:
    raw = torch.as_tensor(g.labels(inputs, params, grid.shape)).to("cpu", torch.int64)
    view = raw.broadcast_to(grid.shape)
    if len(grid.positions) == view.numel():
        return view.reshape(-1).numpy()
    coords = _unravel(torch.from_numpy(grid.positions), grid.shape)
    return view[tuple(coords.T)].numpy()  # only the measured positions


def concentration(
    g: Grouping, labels: np.ndarray, grid: _Grid, inputs: _Inputs, params: _Params
) -> tuple[Concentration, np.ndarray] | None:
    """How ``grid``'s weight is spread over the groups of ``g``; also the heavy-element mask.

    None when the grouping splits nothing (fewer than two groups) or there is no error.
    """
    sel, uniq, inv, count = _split(labels, grid)
    if uniq.size < 2:
        return None
    w = grid.weight[sel]
    weight = np.bincount(inv, weights=w, minlength=uniq.size)
    total = float(weight.sum())
    if not total > 0 or not math.isfinite(total):
        return None
    order, k, e_k, f_k = _knee(weight, count)
    lift = math.inf if e_k >= 1.0 else (e_k / f_k) / ((1.0 - e_k) / (1.0 - f_k))
    enough = grid.measure == "error" or grid.events >= MIN_EVENTS
    concentrated = (enough and e_k >= MIN_SHARE and lift >= MIN_LIFT
                    and f_k <= MAX_ELEMENT_SHARE)
    null = excess = 0.0
    if concentrated:  # only then is the shuffle worth its cost
        tested = w
        if grid.outside is not None and int(grid.outside[sel].sum()) >= MIN_EVENTS:
            tested = grid.outside[sel].astype(np.float64)
        _, _, e_t, f_t = _knee(np.bincount(inv, weights=tested, minlength=uniq.size), count)
        rng = np.random.default_rng(0)
        for _ in range(NULL_DRAWS):
            shuffled = np.bincount(inv, weights=rng.permutation(tested), minlength=uniq.size)
            _, _, e_n, f_n = _knee(shuffled, count)
            null = max(null, e_n - f_n)
        excess = e_t - f_t - null
        concentrated = excess >= MIN_EXCESS
    top = [
        {"label": int(uniq[i]), "name": g.label_name(inputs, params, int(uniq[i])),
         "share": float(weight[i] / total)}
        for i in order[: min(k, 5)]
    ]
    worst_abs = worst_band = None
    if grid.abs_err is not None and grid.band is not None:
        inside = sel.copy()
        inside[sel] = inv == order[0]
        j = int(np.argmax(np.where(inside, grid.abs_err, -1.0)))
        worst_abs, worst_band = float(grid.abs_err[j]), float(grid.band[j])
    kept = slice(0, MAX_GROUPS_KEPT)
    heavy_labels = uniq[order[:k]]
    heavy_mask = sel & np.isin(labels, heavy_labels)
    c = Concentration(
        grouping=g.name, plural=g.names, groups=int(uniq.size), heavy=k,
        error_share=e_k, element_share=f_k, lift=lift, score=e_k - f_k, null_score=null,
        excess=excess,
        concentrated=concentrated, top=top, worst_abs=worst_abs, worst_band=worst_band,
        labels=[int(x) for x in uniq[kept]],
        error_shares=[float(x) for x in (weight / total)[kept]],
        element_shares=[float(x) for x in (count / count.sum())[kept]],
    )
    return c, heavy_mask


_Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_SPLITS: dict[tuple[int, int], _Split] = {}


def _split(labels: np.ndarray, grid: _Grid) -> _Split:
    """The compared elements of a grouping: mask, group labels, each element's group index
    and the element count per group (computed once per grouping and grid)."""
    key = (id(labels), id(grid))
    if key not in _SPLITS:
        sel = grid.counted & (labels >= 0)
        uniq, inv = np.unique(labels[sel], return_inverse=True)
        _SPLITS[key] = (sel, uniq, inv, np.bincount(inv, minlength=uniq.size).astype(np.float64))
    return _SPLITS[key]


def _knee(weight: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, int, float, float]:
    """Groups by density, densest first; the ``k`` where error share - element share peaks,
    and those two shares."""
    order = np.argsort(-(weight / count), kind="stable")
    e_cum = np.cumsum(weight[order]) / weight.sum()
    f_cum = np.cumsum(count[order]) / count.sum()
    k = int(np.argmax(e_cum[:-1] - f_cum[:-1])) + 1
    return order, k, float(e_cum[k - 1]), float(f_cum[k - 1])


def _explain(
    heavy: np.ndarray, best: Grouping, others: Sequence[tuple[Grouping, np.ndarray]],
    grid: _Grid, inputs: _Inputs, params: _Params, groups: int,
) -> str:
    """A kind of element of another, no finer grouping whose elements are the heavy ones."""
    size = int(heavy.sum())
    if size == 0:
        return ""
    found: tuple[tuple[float, bool], str] | None = None
    for g, labels in others:
        if g is best:
            continue
        sel, uniq, inv, count = _split(labels, grid)
        if uniq.size < 2 or uniq.size > groups:
            continue
        inter = np.bincount(inv[heavy[sel]], minlength=uniq.size)
        jaccard = inter / (size + count - inter)
        jaccard[count >= EXPLAIN_MAX_SHARE * count.sum()] = 0.0
        i = int(np.argmax(jaccard))
        # Ties go to declared kinds (they have their own words) over plain axes.
        rank = (float(jaccard[i]), g.describe is not None)
        if jaccard[i] >= EXPLAIN_JACCARD and (found is None or rank > found[0]):
            found = (rank, g.label_name(inputs, params, int(uniq[i])))
    return "" if found is None else found[1]


# -- transforms --------------------------------------------------------------------------


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
    full, a, e, pos_np = _flat_pair(actual, expected, positions)
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
    coords = None if whole else _unravel(pos, shape)
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
                after = _rel(full[_ravel(moved[valid], shape)], e[valid])
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
                after = _rel(full[_ravel(swapped, shape)], e)
            if fits(after):
                return Transform(
                    "transpose", f"{name}: matches the golden with its {axes[i]} and "
                    f"{axes[j]} axes transposed (rel error {before:.3g}, {after:.3g} after "
                    "transposing)", before, after)
    if whole:
        return _permutation(name, af, ef, axes, before)
    return None


def _unravel(pos: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    coords = torch.empty(len(pos), len(shape), dtype=torch.int64)
    rest = pos.clone()
    for d in range(len(shape) - 1, -1, -1):
        coords[:, d] = rest % shape[d]
        rest = rest // shape[d]
    return coords


def _ravel(coords: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    flat = torch.zeros(len(coords), dtype=torch.int64)
    for d, size in enumerate(shape):
        flat = flat * size + coords[:, d]
    return flat


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


# -- the whole localization --------------------------------------------------------------


def localize_grid(
    grid: _Grid, structure: Structure | None, inputs: _Inputs, params: _Params, *,
    seed: int | None = None, transform: Transform | None = None,
) -> Localization:
    """Concentration along every grouping of one measured output, and its message lines."""
    _SPLITS.clear()  # keyed by object ids: valid within one call only
    groupings = groupings_of(structure, grid.shape)
    labelled = [(g, _labels(g, inputs, params, grid)) for g in groupings]
    found: list[tuple[Grouping, Concentration, np.ndarray]] = []
    for g, labels in labelled:
        measured = concentration(g, labels, grid, inputs, params)
        if measured is not None:
            found.append((g, *measured))
    hot = [item for item in found if item[1].concentrated]
    lines: list[str] = []
    if transform is not None:
        lines.append(transform.text)
    if grid.measure != "error" and grid.events < MIN_EVENTS:
        lines.append(_few_events(grid, labelled, inputs, params))
    elif hot:
        explained = []
        for g, c, heavy in hot:
            expl = _explain(heavy, g, labelled, grid, inputs, params, c.groups)
            if not expl and c.heavy == 1 and g.describe is not None:
                expl = c.top[0]["name"]
            explained.append((g, _with(c, explained_by=expl), heavy))
        found = [next(((g2, c2, h2) for g2, c2, h2 in explained if g2 is g), (g, c, h))
                 for g, c, h in found]
        best_share = max(c.error_share for _, c, _ in explained)
        ranked = sorted(explained, key=lambda item: (
            item[1].error_share < best_share - TIE, not item[1].explained_by,
            round(item[1].element_share, 3), -item[1].groups))
        g, c, heavy = ranked[0]
        lines.append(_concentrated_line(grid, c))
        for _g2, c2, heavy2 in ranked[1:]:
            if _jaccard(heavy, heavy2) < 0.8:
                lines.append(_concentrated_line(grid, c2))
                break
    elif transform is None and (few := _few_elements(grid)) is not None:
        lines.append(_few_elements_line(grid, few, labelled, inputs, params))
    elif transform is None:
        spread = ", ".join(c.plural for _, c, _ in found) or "its elements"
        what = {"error": "the error", "mismatches": "the mismatches", "flips": "the flips"}
        lines.append(f"{grid.name}: no concentration: {what[grid.measure]} is spread evenly "
                     f"across {spread} (a systematic error, e.g. a scale or a formula)")
    _SPLITS.clear()
    return Localization(
        output=grid.name, seed=seed, measure=grid.measure, events=grid.events,
        lines=tuple(lines[:2]), concentrated=bool(hot), transform=transform,
        groupings=tuple(c for _, c, _ in found),
    )


def _with(c: Concentration, **changes: Any) -> Concentration:
    from dataclasses import replace

    return replace(c, **changes)


def _jaccard(x: np.ndarray, y: np.ndarray) -> float:
    union = int((x | y).sum())
    return 1.0 if union == 0 else int((x & y).sum()) / union


def _pct(share: float) -> str:
    pct = 100.0 * share
    if pct >= 99.95:
        return "100%"
    if pct < 1.0:
        return "<1%" if pct > 0 else "0%"
    return f"{pct:.1f}%" if pct >= 99.0 else f"{pct:.0f}%"


def _concentrated_line(grid: _Grid, c: Concentration) -> str:
    what = {"error": "of the error", "mismatches": "of the mismatches (NaN/inf pattern)",
            "flips": "of the unexplained top-k flips"}[grid.measure]
    names = ", ".join(t["name"] for t in c.top[:MAX_NAMED])
    where = c.explained_by or (names if c.heavy <= MAX_NAMED else "")
    count = f"{c.heavy} of {c.groups} {c.plural if c.groups != 1 else c.grouping}"
    worst = ""
    if c.worst_abs is not None and c.worst_band is not None:
        named = "" if c.top[0]["name"] == where else f" {c.top[0]['name']},"
        worst = (f"; worst{named} |err| {c.worst_abs:.3g} where the band "
                 f"allows {c.worst_band:.3g}")
    elif c.heavy > MAX_NAMED and not c.explained_by:
        worst = f"; worst {c.top[0]['name']}"
    if c.error_share >= ONLY_SHARE and where:
        return f"{grid.name}: only {where} {'is' if c.heavy == 1 or c.explained_by else 'are'} " \
               f"wrong ({count}, {_pct(c.error_share)} {what}{worst})"
    tail = f": {where}" if where else ""
    verb = "carries" if c.heavy == 1 else "carry"
    return f"{grid.name}: {count} {verb} {_pct(c.error_share)} {what}{tail} " \
           f"({_pct(c.element_share)} of its elements{worst})"


def _few_elements(grid: _Grid) -> np.ndarray | None:
    """The largest errors when at most MAX_FEW elements carry FEW_SHARE of the error (flat
    indices into the grid, largest first); None otherwise."""
    w = np.where(grid.counted, grid.weight, 0.0)
    total = float(w.sum())
    if grid.measure != "error" or not total > 0:
        return None
    top = np.argsort(-w, kind="stable")[:MAX_FEW]
    carried = np.cumsum(w[top]) / total
    m = int(np.searchsorted(carried, FEW_SHARE)) + 1
    return top[:m] if m <= MAX_FEW else None


def _few_elements_line(
    grid: _Grid, few: np.ndarray, labelled: Sequence[tuple[Grouping, np.ndarray]],
    inputs: _Inputs, params: _Params,
) -> str:
    """A handful of elements carry the error: where the worst is, and what they share."""
    share = float(grid.weight[few].sum() / np.where(grid.counted, grid.weight, 0.0).sum())
    index = tuple(_unravel(torch.from_numpy(grid.positions[few[:1]]), grid.shape)[0].tolist())
    common = _common_groups(few, labelled, inputs, params, plain_axes=len(few) > 1)
    worst = ""
    if grid.abs_err is not None and grid.band is not None:
        worst = (f" (|err| {grid.abs_err[few[0]]:.3g} where the band allows "
                 f"{grid.band[few[0]]:.3g})")
    n = len(few)
    where = f"; {'in' if n == 1 else 'all in'} {', '.join(common[:3])}" if common else ""
    return (f"{grid.name}: {n} element{'s' if n > 1 else ''} carr{'y' if n > 1 else 'ies'} "
            f"{_pct(share)} of the error, the worst at index {index}{worst}{where}")


def _common_groups(
    at: np.ndarray, labelled: Sequence[tuple[Grouping, np.ndarray]], inputs: _Inputs,
    params: _Params, *, plain_axes: bool,
) -> list[str]:
    """The groups (of groupings that split the output) holding every one of ``at``."""
    common = []
    for g, labels in labelled:
        labs = set(labels[at].tolist())
        if (len(labs) == 1 and next(iter(labs)) >= 0 and (plain_axes or g.describe is not None)
                and np.unique(labels[labels >= 0]).size > 1):
            common.append(g.label_name(inputs, params, next(iter(labs))))
    return common


def _few_events(
    grid: _Grid, labelled: Sequence[tuple[Grouping, np.ndarray]], inputs: _Inputs,
    params: _Params,
) -> str:
    """Too few mismatches or flips to measure a spread: where they are, and the declared
    groups they all share."""
    at = np.nonzero(grid.weight > 0)[0]
    if at.size == 0:
        # A recall floor can fail on near-ties alone: no flip is left to place.
        what = {"mismatches": "no NaN/inf mismatch to place",
                "flips": "no unexplained flip: every flip lies within the tie band"}[grid.measure]
        return f"{grid.name}: {what}"
    index = _unravel(torch.from_numpy(grid.positions[at[:1]]), grid.shape)[0].tolist()
    common = _common_groups(at, labelled, inputs, params, plain_axes=len(at) > 1)
    n = grid.events
    noun = {"mismatches": ("NaN/inf mismatch", "NaN/inf mismatches"),
            "flips": ("unexplained flip", "unexplained flips")}[grid.measure][n != 1]
    first = "at" if n == 1 else "first at"
    where = f"; {'in' if n == 1 else 'all in'} {', '.join(common[:3])}" if common else ""
    return f"{grid.name}: {n} {noun}, {first} index {tuple(index)}{where}"


def nonfinite_grid(
    name: str, actual: torch.Tensor, golden_counts: Sequence[int]
) -> _Grid | None:
    """A sampled golden and non-finite values outside its sample: the output's own NaN /
    +inf / -inf of each kind the golden has none of (its summary statistics say so)."""
    a = actual.detach().to("cpu", torch.float64).reshape(-1)
    kinds = (torch.isnan(a), torch.isposinf(a), torch.isneginf(a))
    bad = torch.zeros_like(a, dtype=torch.bool)
    for kind, golden in zip(kinds, golden_counts, strict=True):
        if golden == 0:
            bad |= kind
    if not bool(bad.any()):
        return None
    counted = torch.isfinite(a) | bad
    return _Grid(name, tuple(actual.shape), np.arange(a.numel()), bad.numpy().astype(np.float64),
                 counted.numpy(), "mismatches", int(bad.sum()))


def localize_output(
    name: str, actual: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor | None,
    structure: Structure | None, inputs: _Inputs, params: _Params, *,
    atol: float, rtol: float, seed: int | None = None,
) -> Localization:
    """Localize the error of one output against its golden (whole, or sampled at
    ``positions``, flat indices into ``actual``)."""
    if positions is None and actual.numel() > MAX_POSITIONS:
        full_a = actual.detach().to("cpu").reshape(-1)
        full_e = expected.detach().to("cpu").reshape(-1)
        if bool(torch.isfinite(full_a).all()) and bool(torch.isfinite(full_e).all()):
            # A large output is measured at a fixed random sample of its positions, like a
            # sampled golden: shares and transforms need no more, and the cost stays small.
            gen = torch.Generator().manual_seed(0)
            positions = torch.randperm(full_a.numel(), generator=gen)[:MAX_POSITIONS].sort()[0]
            expected = full_e[positions]
    grid = error_grid(name, actual, expected, positions, atol=atol, rtol=rtol)
    axes = axis_names(structure, actual.dim())
    transform = find_transform(name, actual, expected, positions, axes)
    return localize_grid(grid, structure, inputs, params, seed=seed, transform=transform)


def failed(output: str, seed: int | None, exc: BaseException) -> Localization:
    """The localization of a check whose localization raised: one line that says so (the
    check's verdict and violations stand; a bug here must not hide them)."""
    text = f"{output}: localization failed ({type(exc).__name__}: {exc}); the verdict stands"
    return Localization(output=output, seed=seed, measure="error", events=0, lines=(text,),
                        concentrated=False)


def localize_failure(
    op: Any, params: _Params, inputs: _Inputs, outputs: Mapping[str, torch.Tensor],
    stored: Mapping[str, StoredOutput], violations: Sequence[Any], budget: Any, *,
    seed: int | None = None,
) -> list[Localization]:
    """Localize every output with a violation (worst first), from one seed's run.

    ``stored`` holds the golden's stored outputs of that seed by output name (whole, or
    sampled at their positions). A top-k violation is localized as the unexplained flips on
    the grid of the scores they rank.
    """
    from numcheck.numerics.topk import topk_agreement

    structures: Mapping[str, Structure] = getattr(op, "structure", None) or {}
    severity: dict[str, float] = {}
    for v in violations:
        if v.output in outputs:
            severity[v.output] = max(severity.get(v.output, 0.0), v.severity)
    found = []
    spec = op.topk
    # The scores' own error first: it covers every element; flips are a sparse echo of it,
    # localized only when the scores pass their own budget.
    flips_last = {name: spec is not None and name == spec.indices for name in severity}
    for name in sorted(severity, key=lambda n: (flips_last[n], -severity[n])):
        if flips_last[name] and spec is not None and spec.scores in severity:
            continue  # the scores' own error is localized, and the flips follow from it
        if spec is not None and name == spec.indices:
            if budget.topk is None:
                continue
            golden_scores = stored[spec.scores].values
            report = topk_agreement(
                stored[name].values, outputs[name].detach().cpu(), golden_scores,
                band=budget.topk.tie_band, band_kind=budget.topk.tie_band_kind,
                max_flips=10**9,
            )
            flips = [(f.row, f.token) for f in report.unexplained]
            grid = flip_grid(name, golden_scores, flips, report.n_unexplained)
            found.append(localize_grid(grid, structures.get(spec.scores), inputs, params,
                                       seed=seed))
            continue
        if name not in stored:
            continue
        expected, positions, stats = stored[name].values, stored[name].positions, stored[name].stats
        if positions is not None and stats is not None and any(
                v.output == name and v.metric.endswith("_count") for v in violations):
            grid = nonfinite_grid(name, outputs[name], [int(x) for x in stats[5:8].tolist()])
            if grid is not None:
                found.append(localize_grid(grid, structures.get(name), inputs, params,
                                           seed=seed))
                continue
        ob = budget.outputs[name]
        found.append(localize_output(
            name, outputs[name], expected, positions, structures.get(name), inputs, params,
            atol=ob.atol, rtol=ob.rtol, seed=seed,
        ))
    return found
