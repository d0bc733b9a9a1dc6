"""What a localization says: where the error of one failing output sits, as plain data.

:class:`Localization` holds the message lines (most telling first), the structural
:class:`Transform` the output matches, if any, and every grouping's :class:`Concentration`;
a check's result keeps them per failing output, and its record as plain data
(:meth:`Localization.as_dict`, docs/report.md ``localization``). Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Concentration", "Localization", "Transform"]


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
    #: For heatmaps: labels (at most :data:`numcheck.localize.spread.MAX_GROUPS_KEPT`),
    #: their error and element shares.
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
