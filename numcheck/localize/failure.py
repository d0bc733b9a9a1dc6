"""The localization of a failed check: every failing output measured, its message lines.

:func:`localize_failure` takes one seed's run of a failed check (the numerics call it once
per failing check, :func:`numcheck.check.against_golden.run_numerics`): for each output with a
violation, worst first, it measures a grid (:mod:`numcheck.localize.grids`), tries the
structural transforms (:mod:`numcheck.localize.transforms`), measures the concentration along
every grouping of the output's structure (:mod:`numcheck.localize.spread`) and writes the
lines that name the place (:class:`~numcheck.localize.findings.Localization`).
``NUMCHECK_LOCALIZE=0`` in the environment switches it off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from numcheck.localize.findings import Concentration, Localization, Transform
from numcheck.localize.grids import (
    Grid,
    Inputs,
    Params,
    error_grid,
    flip_grid,
    nonfinite_grid,
    unravel,
)
from numcheck.localize.spread import MIN_EVENTS, concentration, explain, labels_of, release
from numcheck.localize.transforms import find_transform
from numcheck.numerics.metric_names import SIM_METRICS
from numcheck.ops.structure import Grouping, Structure, axis_names, groupings_of
from numcheck.precision import one_thread

if TYPE_CHECKING:
    from numcheck.goldens.packing import StoredOutput

__all__ = ["ENV", "enabled", "failed", "localize_failure", "localize_grid", "localize_output"]

#: Concentrated groupings whose error shares are this close count as tied; the tie goes to
#: the one explained by a kind of element, then the most specific (smallest element share).
TIE = 0.05
#: "only X is wrong" from this share of the error on.
ONLY_SHARE = 0.99
#: Heavy groups named one by one in a message (more: the count and the worst one).
MAX_NAMED = 4
#: When no grouping is concentrated but at most MAX_FEW elements carry FEW_SHARE of the
#: error, the message says where those elements are instead of "no concentration".
MAX_FEW = 8
FEW_SHARE = 0.9
#: Outputs larger than this are measured at this many positions (a fixed random sample).
MAX_POSITIONS = 32_768
#: Environment variable that switches localization off (``0``), e.g. to time it.
ENV = "NUMCHECK_LOCALIZE"


def enabled() -> bool:
    """False when ``NUMCHECK_LOCALIZE=0``."""
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")



def localize_grid(
    grid: Grid, structure: Structure | None, inputs: Inputs, params: Params, *,
    seed: int | None = None, transform: Transform | None = None,
) -> Localization:
    """Concentration along every grouping of one measured output, and its message lines."""
    release()  # the groupings' splits are valid within one call only
    groupings = groupings_of(structure, grid.shape)
    labelled = [(g, labels_of(g, inputs, params, grid)) for g in groupings]
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
            expl = explain(heavy, g, labelled, grid, inputs, params, c.groups)
            if not expl and c.heavy == 1 and g.describe is not None:
                expl = c.top[0]["name"]
            explained.append((g, replace(c, explained_by=expl), heavy))
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
    release()
    return Localization(
        output=grid.name, seed=seed, measure=grid.measure, events=grid.events,
        lines=tuple(lines[:2]), concentrated=bool(hot), transform=transform,
        groupings=tuple(c for _, c, _ in found),
    )


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


def _concentrated_line(grid: Grid, c: Concentration) -> str:
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


def _few_elements(grid: Grid) -> np.ndarray | None:
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
    grid: Grid, few: np.ndarray, labelled: Sequence[tuple[Grouping, np.ndarray]],
    inputs: Inputs, params: Params,
) -> str:
    """A handful of elements carry the error: where the worst is, and what they share."""
    share = float(grid.weight[few].sum() / np.where(grid.counted, grid.weight, 0.0).sum())
    index = tuple(unravel(torch.from_numpy(grid.positions[few[:1]]), grid.shape)[0].tolist())
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
    at: np.ndarray, labelled: Sequence[tuple[Grouping, np.ndarray]], inputs: Inputs,
    params: Params, *, plain_axes: bool,
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
    grid: Grid, labelled: Sequence[tuple[Grouping, np.ndarray]], inputs: Inputs,
    params: Params,
) -> str:
    """Too few mismatches or flips to measure a spread: where they are, and the declared
    groups they all share."""
    at = np.nonzero(grid.weight > 0)[0]
    if at.size == 0:
        # A recall floor can fail on near-ties alone: no flip is left to place.
        what = {"mismatches": "no NaN/inf mismatch to place",
                "flips": "no unexplained flip: every flip lies within the tie band"}[grid.measure]
        return f"{grid.name}: {what}"
    index = unravel(torch.from_numpy(grid.positions[at[:1]]), grid.shape)[0].tolist()
    common = _common_groups(at, labelled, inputs, params, plain_axes=len(at) > 1)
    n = grid.events
    noun = {"mismatches": ("NaN/inf mismatch", "NaN/inf mismatches"),
            "flips": ("unexplained flip", "unexplained flips")}[grid.measure][n != 1]
    first = "at" if n == 1 else "first at"
    where = f"; {'in' if n == 1 else 'all in'} {', '.join(common[:3])}" if common else ""
    return f"{grid.name}: {n} {noun}, {first} index {tuple(index)}{where}"


def localize_output(
    name: str, actual: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor | None,
    structure: Structure | None, inputs: Inputs, params: Params, *,
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


@one_thread()  # many small steps over a failed output (numcheck.precision.one_thread)
def localize_failure(
    op: Any, params: Params, inputs: Inputs, outputs: Mapping[str, torch.Tensor],
    stored: Mapping[str, StoredOutput], violations: Sequence[Any], budget: Any, *,
    seed: int | None = None, simulated: Mapping[str, torch.Tensor] | None = None,
) -> list[Localization]:
    """Localize every output with a violation (worst first), from one seed's run.

    ``stored`` holds the golden's stored outputs of that seed by output name (whole, or
    sampled at their positions). A top-k violation is localized as the unexplained flips on
    the grid of the scores they rank. ``simulated``: a low-precision variant's simulated
    reference (numcheck.check.against_sim); an output is localized against it too, and the
    sharper of the two is kept (a transform over a concentration over neither; the
    simulated reference on a tie where only its own limits failed): the quantization error
    that hides a 2% scale from the golden is not in it.
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
        expected, positions, counts = (stored[name].values, stored[name].positions,
                                       stored[name].nonfinite)
        if counts is not None and any(
                v.output == name and v.metric.endswith("_count") for v in violations):
            grid = nonfinite_grid(name, outputs[name], counts)
            if grid is not None:
                found.append(localize_grid(grid, structures.get(name), inputs, params,
                                           seed=seed))
                continue
        ob = budget.outputs[name]
        loc = localize_output(
            name, outputs[name], expected, positions, structures.get(name), inputs, params,
            atol=ob.atol, rtol=ob.rtol, seed=seed,
        )
        if simulated is not None and name in simulated:
            sim = localize_output(
                name, outputs[name], simulated[name].to(outputs[name].dtype), None,
                structures.get(name), inputs, params, atol=ob.atol, rtol=ob.rtol, seed=seed)
            own = all(v.metric in SIM_METRICS for v in violations if v.output == name)
            if _sharpness(sim) > _sharpness(loc) or (own and _sharpness(sim) == _sharpness(loc)):
                loc = _against_simulated(sim)
        found.append(loc)
    return found


def _sharpness(loc: Localization) -> int:
    """How much a localization says: a transform (2), a concentration (1), neither (0)."""
    return 2 if loc.transform is not None else 1 if loc.concentrated else 0


def _against_simulated(loc: Localization) -> Localization:
    """A localization measured against the simulated reference, said so."""
    name = loc.output
    lines = tuple(line.replace(f"{name}:", f"{name} (against the simulated reference):", 1)
                  .replace("golden", "simulated") for line in loc.lines)
    return replace(loc, lines=lines)
