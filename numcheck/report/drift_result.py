"""A baseline comparison as a report holds it: the rules it was judged by, a row per check,
the verdict.

:func:`numcheck.report.drift.compare_reports` makes a :class:`Drift`; a report
(:class:`numcheck.report.records.Report`) keeps it and writes it to JSON (:meth:`Drift.to_dict`,
docs/report.md). Plain data: the records and the comparison logic both import it, and it
imports neither. No pytest, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["STATUS_ORDER", "Drift", "DriftRow", "Rules"]


@dataclass(frozen=True)
class Rules:
    """What counts as a regression against the baseline (see the module docstring)."""

    calc_diff_factor: float = 2.0
    calc_diff_floor: float = 1e-10
    recall_drop: float = 0.0
    speedup_drop: float = 0.05
    same_device_factor: float = 1.25
    #: 1 (true): a check missing from the new run is listed, not a regression.
    allow_removed: float = 0.0
    #: A low-precision check's second reference (numcheck.check.against_sim): ``sim_rel_fro``
    #: may grow this many times on the same device name / across device names (squared for
    #: ``sim_calc_diff``), values under ``sim_floor`` (squared) counting as zero; the worst
    #: GEMM result over its bound (``quant.sim_ratio``) may grow ``sim_ratio_factor`` times,
    #: values under ``sim_ratio_floor`` counting as that floor.
    sim_same_device_factor: float = 1.25
    sim_factor: float = 4.0
    sim_floor: float = 1e-6
    sim_ratio_factor: float = 2.0
    sim_ratio_floor: float = 0.25

    @classmethod
    def from_pairs(cls, pairs: Sequence[str]) -> Rules:
        """``["calc_diff_factor=3", "recall_drop=1e-3"]`` (the ``numcheck_drift_rules`` ini key).

        Raises:
            ValueError: an unknown rule name or a value that is not a non-negative number.
        """
        names = [f.name for f in fields(cls)]
        values: dict[str, float] = {}
        for pair in pairs:
            name, sep, raw = pair.partition("=")
            name = name.strip()
            if not sep or name not in names:
                raise ValueError(
                    f"drift rule {pair!r}: expected name=value with name one of {', '.join(names)}"
                )
            values[name] = _flag(raw) if name == "allow_removed" else _non_negative(name, raw)
        return cls(**values)

    def __post_init__(self) -> None:
        for f in fields(self):
            _non_negative(f.name, getattr(self, f.name))


def _flag(raw: str) -> float:
    words = {"1": 1.0, "true": 1.0, "yes": 1.0, "0": 0.0, "false": 0.0, "no": 0.0}
    try:
        return words[raw.strip().lower()]
    except KeyError:
        raise ValueError(f"drift rule allow_removed: {raw!r} must be true or false") from None


def _non_negative(name: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"drift rule {name}: {raw!r} is not a number") from None
    if not value >= 0:
        raise ValueError(f"drift rule {name}: {raw!r} must be >= 0")
    return value


@dataclass
class DriftRow:
    """One check in the comparison. ``pairs`` maps a headline metric to (base, new)."""

    id: str
    status: str  # regression | improved | changed | same | new | removed
    reasons: list[str] = field(default_factory=list)
    pairs: dict[str, list[float | None]] = field(default_factory=dict)


#: Row statuses, in the order rows are listed.
STATUS_ORDER = ("regression", "removed", "improved", "changed", "same", "new")


@dataclass
class Drift:
    """A run compared with a baseline (a report's ``drift``).

    ``baseline`` is a label (usually the path); ``rows`` has one row per check, regressions
    first, then improved, same, new, removed; ``regressions`` the ``"id: why"`` lines (empty
    means the comparison passes); ``counts`` the rows per status.
    """

    baseline: str
    rules: Rules
    rows: list[DriftRow]
    regressions: list[str]
    counts: dict[str, int]

    @property
    def passed(self) -> bool:
        return not self.regressions

    def to_dict(self) -> dict[str, Any]:
        """The plain dict stored in a JSON report (docs/report.md)."""
        return {
            "baseline": self.baseline,
            "rules": asdict(self.rules),
            "rows": [asdict(r) for r in self.rows],
            "regressions": list(self.regressions),
            "counts": dict(self.counts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Drift:
        """The inverse of :meth:`to_dict` (a report read back); unknown keys are ignored."""
        known = {f.name for f in fields(Rules)}
        rules = Rules(**{k: v for k, v in (data.get("rules") or {}).items() if k in known})
        rows = [DriftRow(str(r["id"]), str(r["status"]), list(r.get("reasons") or []),
                         dict(r.get("pairs") or {})) for r in data.get("rows") or []]
        return cls(str(data.get("baseline") or ""), rules, rows,
                   list(data.get("regressions") or []), dict(data.get("counts") or {}))
