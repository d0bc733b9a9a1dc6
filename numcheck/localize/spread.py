"""How the error of one output is spread over a grouping: concentrated in a few groups, or not.

Sort the grouping's groups by error density (error / elements), take the ``k`` densest groups
where ``error share - element share`` peaks (the Lorenz curve's largest gap: the Hoover
index), and compare the density inside those ``k`` groups with the density outside (the
*lift*). A grouping is **concentrated** when the ``k`` groups carry at least
:data:`MIN_SHARE` of the error at a lift of at least :data:`MIN_LIFT`, cover at most
:data:`MAX_ELEMENT_SHARE` of the elements, and beat the same gap with the error shuffled at
random by :data:`MIN_EXCESS`. docs/reliability.md ("Localization") shows why the thresholds
separate honest bf16 rounding from planted bugs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from numcheck.localize.findings import Concentration
from numcheck.localize.grids import Grid, Inputs, Params, unravel
from numcheck.ops.structure import Grouping

__all__ = ["MAX_ELEMENT_SHARE", "MIN_EVENTS", "MIN_EXCESS", "MIN_LIFT", "MIN_SHARE",
           "concentration", "explain", "labels_of", "release"]

#: Heavy groups must carry at least this share of the error...
MIN_SHARE = 0.5
#: ...at an error density at least this many times the density of the other groups.
#: Honest bf16 rounding on every shipped case reaches lift <= 3.1 along any grouping
#: (docs/reliability.md, "Localization"); bugs that sit somewhere reach 30 and more.
MIN_LIFT = 8.0
#: ...and cover at most this share of the elements: a place is not the whole output.
MAX_ELEMENT_SHARE = 0.8
#: Fewer mismatches or flips than this are listed where they are, not measured.
MIN_EVENTS = 4
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
#: Groups kept per grouping in the record (for heatmaps): the first ones by label.
MAX_GROUPS_KEPT = 256


def labels_of(g: Grouping, inputs: Inputs, params: Params, grid: Grid) -> np.ndarray:
    raw = torch.as_tensor(g.labels(inputs, params, grid.shape)).to("cpu", torch.int64)
    view = raw.broadcast_to(grid.shape)
    if len(grid.positions) == view.numel():
        return view.reshape(-1).numpy()
    coords = unravel(torch.from_numpy(grid.positions), grid.shape)
    return view[tuple(coords.T)].numpy()  # only the measured positions


def concentration(
    g: Grouping, labels: np.ndarray, grid: Grid, inputs: Inputs, params: Params
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


def release() -> None:
    """Forget the groupings split so far: they are keyed by object ids, valid within one
    localization only."""
    _SPLITS.clear()


def _split(labels: np.ndarray, grid: Grid) -> _Split:
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


def explain(
    heavy: np.ndarray, best: Grouping, others: Sequence[tuple[Grouping, np.ndarray]],
    grid: Grid, inputs: Inputs, params: Params, groups: int,
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
