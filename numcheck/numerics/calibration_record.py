"""What set a variant's budget tables: the calibration record a case file keeps beside them.

``pytest --numcheck --numcheck-calibrate-write`` writes, next to the budget tables it sets,
one record per variant::

    [v4pro-t32.provenance.bf16]
    command = "pytest --numcheck --numcheck-calibrate --numcheck-calibrate-pool bf16=bf16,gemm_bf16_out --numcheck-calibrate-write"
    date = "2026-12-04"
    torch = "2.13.0+cpu"
    pool = ["bf16", "gemm_bf16_out"]    # whose measurements set the tables
    devices = ["cpu"]                   # where they were measured (earlier runs pooled in too)
    seeds = [0]                         # the case's own seeds
    fresh_seeds = 20                    # and fresh ones from first_fresh_seed on
    first_fresh_seed = 1000
    accepted = ["..."]                  # measurements written past the honest limits on request

The gate never reads it: budgets mean the same with or without it. The next calibration
does: it measures the same pool on the same seeds unless told otherwise, and refuses to
write over tables whose record names a device it did not measure (docs/budgets.md,
"Calibration remembers"). A case file is data, so the record is checked like every other
key (:func:`parse_record`). Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from numcheck.numerics.budgets import BudgetError, describe

#: ``[<case>.provenance.<variant>]``: the case key holding the records.
PROVENANCE = "provenance"
#: Keys a record holds, with their TOML types (``accepted`` may be left out).
RECORD_KEYS: Mapping[str, str] = {
    "command": "string", "date": "string", "torch": "string", "pool": "strings",
    "devices": "strings", "seeds": "integers", "fresh_seeds": "integer",
    "first_fresh_seed": "integer", "accepted": "strings",
}
_OPTIONAL = frozenset({"accepted"})
_FIX = ("the table is written by pytest --numcheck --numcheck-calibrate-write; restore its "
        "value, or delete the whole table (the budgets stay, and the next calibration treats "
        "them as set by hand)")


@dataclass(frozen=True)
class CalibrationRecord:
    """How one variant's budget tables were calibrated (see the module docstring)."""

    command: str
    date: str
    torch: str
    pool: tuple[str, ...]
    devices: tuple[str, ...]
    seeds: tuple[int, ...]
    fresh_seeds: int
    first_fresh_seed: int
    accepted: tuple[str, ...] = ()

    def as_table(self) -> dict[str, Any]:
        """The record as the TOML table the case writer emits (``accepted`` only if any)."""
        table = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        if not self.accepted:
            del table["accepted"]
        return table

    def seed_text(self) -> str:
        """``seeds 0, 1 + 20 fresh (1000..1019)``."""
        own = ", ".join(str(s) for s in self.seeds) or "none"
        if not self.fresh_seeds:
            return f"seeds {own}"
        last = self.first_fresh_seed + self.fresh_seeds - 1
        return f"seeds {own} + {self.fresh_seeds} fresh ({self.first_fresh_seed}..{last})"


def parse_record(variant: str, raw: Any) -> CalibrationRecord:
    """A record read from a case file; :class:`BudgetError` (key relative to
    ``provenance``) for a table that is not one."""
    if not isinstance(raw, Mapping):
        raise BudgetError(variant, f"expected a table, got {describe(raw)}", _FIX)
    for key in raw:
        if key not in RECORD_KEYS:
            raise BudgetError(f"{variant}.{key}", f"unknown record key '{key}' (keys: "
                              f"{', '.join(RECORD_KEYS)})", _FIX)
    missing = [k for k in RECORD_KEYS if k not in raw and k not in _OPTIONAL]
    if missing:
        raise BudgetError(variant, f"the record lacks {', '.join(missing)}", _FIX)
    values = {key: _typed(variant, key, raw[key]) for key in raw}
    return CalibrationRecord(**values)


def _typed(variant: str, key: str, value: Any) -> Any:
    kind = RECORD_KEYS[key]
    item = {"strings": str, "integers": int}.get(kind)
    if item is not None:
        if not isinstance(value, list) or not all(
                isinstance(v, item) and not isinstance(v, bool) for v in value):
            raise BudgetError(f"{variant}.{key}", f"expected an array of {kind}, got "
                              f"{describe(value)}", _FIX)
        return tuple(value)
    want, words = (str, "a string") if kind == "string" else (int, "an integer >= 0")
    if not isinstance(value, want) or isinstance(value, bool) or (
            isinstance(value, int) and value < 0):
        raise BudgetError(f"{variant}.{key}", f"expected {words}, got {describe(value)}", _FIX)
    return value
