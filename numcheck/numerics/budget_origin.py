"""Where each key of a completed budget comes from, decided once where the budget is completed.

A budget key's value is written in the case file (:class:`Given`), taken by a finer variant
from the storage class's table on a coarse output (:class:`Inherited`: mHC's bf16 ``y``), read
from another variant's tables (:class:`Lent`, ``budget_like``), filled from the precision
class's default row (:class:`Default`), passed to the ``numcheck_golden`` fixture
(:class:`FixtureArg`), or not a limit at all because nothing can measure it
(:class:`NotMeasured`). ``numcheck.cases`` and :func:`numcheck.numerics.budgets.complete_budget`
record it in :attr:`VariantBudget.origins`; the failure message, calibration and the case
writer read that record, never the case file's text again. A case's other limits take the
same kinds, or a gate's default (:class:`GateDefault`): numcheck.cases.limits.

An origin may wrap another: a borrower's key is :class:`Lent` around the key's origin in the
lent tables (given there, inherited, or a default), and an inherited key names the origin of
the key in the table it came from (given there, or lent to that variant in turn).

Plain frozen dataclasses that round-trip through JSON (:func:`origin_to_dict`,
:func:`origin_from_dict`): calibration payloads and the report carry them. Nothing here
imports torch or numcheck.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, get_args

#: Where the per-precision default budgets live, as messages name it.
DEFAULTS_SOURCE = "numcheck/numerics/budgets.py"


@dataclass(frozen=True)
class Given:
    """Set in the case file the budget was loaded from (``Case.source``): in the table
    ``table`` (dotted: ``v4flash-t64.budget.bf16.y``) at 1-based ``line`` (None when the
    file's text could not place it)."""

    table: str
    line: int | None
    kind: ClassVar[str] = "given"


@dataclass(frozen=True)
class Lent:
    """``borrower`` reads ``lender``'s budget tables as its own (``budget_like``, set at
    ``line``); ``source`` is the key's origin in those tables, completed for the borrower."""

    borrower: str
    lender: str
    line: int | None
    source: Origin
    kind: ClassVar[str] = "lent"


@dataclass(frozen=True)
class Inherited:
    """A key of ``output``, stored in ``storage`` (coarser than the checked variant computes),
    taken from ``variant``'s table on it: the op's honest implementation at ``storage``
    (``OpSpec.rounding_reference``). ``source``: the key's origin in that table."""

    variant: str
    output: str
    storage: str
    source: Origin
    kind: ClassVar[str] = "inherited"


@dataclass(frozen=True)
class Default:
    """From the default row of ``precision`` in :data:`DEFAULT_BUDGETS` (:data:`DEFAULTS_SOURCE`),
    or of the declared sums in ``SIM_DEFAULTS`` there (``sums``).
    ``storage``: the output's storage class when that row is the storage's, coarser than the
    variant's class (mHC's ``y`` of a tf32 variant takes the bf16 row); None otherwise."""

    precision: str
    storage: str | None = None
    #: A ``sim_*`` key of a variant with a declared quantization: from the simulated
    #: reference's default row of its sums (``SIM_DEFAULTS``: "promoted sums"), not the
    #: precision's row.
    sums: str | None = None
    kind: ClassVar[str] = "default"


@dataclass(frozen=True)
class GateDefault:
    """A gate's own default limit (the casts and kernels gates': numcheck/overhead/limits.py),
    set by no key of the case; ``table`` is where a key would override it
    (``tiny.overhead.bf16``)."""

    gate: str
    table: str
    kind: ClassVar[str] = "gate_default"


@dataclass(frozen=True)
class FixtureArg:
    """Passed in ``budget=`` of a ``numcheck_golden`` check, at ``where`` (``file:line`` of
    the call)."""

    where: str
    kind: ClassVar[str] = "fixture"


@dataclass(frozen=True)
class NotMeasured:
    """No limit: the metric cannot be measured for the variant wherever it is checked, so
    its default is left out (a key given for it does not load); ``why`` says so."""

    why: str
    kind: ClassVar[str] = "unmeasured"


Origin = Given | Lent | Inherited | Default | GateDefault | FixtureArg | NotMeasured
#: A variant's origins: output -> budget key -> origin.
Origins = Mapping[str, Mapping[str, Origin]]

_KINDS: dict[str, type[Any]] = {cls.kind: cls for cls in get_args(Origin)}


def root(origin: Origin) -> Origin:
    """The origin at the bottom of a chain of :class:`Lent` and :class:`Inherited`: where the
    value is written (:class:`Given`), or the default row it comes from."""
    while isinstance(origin, Lent | Inherited):
        origin = origin.source
    return origin


def lender_of(origins: Origins) -> str | None:
    """The variant whose tables a budget reads as its own (``budget_like``), or None."""
    for keys in origins.values():
        for origin in keys.values():
            if isinstance(origin, Lent):
                return origin.lender
    return None


def origin_to_dict(origin: Origin) -> dict[str, Any]:
    """The origin as plain JSON data: ``{"kind": "given", "table": ..., "line": 105}``;
    a wrapped origin's ``source`` nested the same way."""
    out: dict[str, Any] = {"kind": origin.kind}
    for name, value in vars(origin).items():
        if name == "sums" and value is None:
            continue  # a precision row's default reads as it always did
        out[name] = origin_to_dict(value) if name == "source" else value
    return out


def origin_from_dict(data: Mapping[str, Any]) -> Origin:
    """The inverse of :func:`origin_to_dict`; ValueError for an unknown kind."""
    cls = _KINDS.get(str(data.get("kind")))
    if cls is None:
        raise ValueError(f"numcheck: unknown budget origin kind {data.get('kind')!r} "
                         f"(known: {', '.join(_KINDS)})")
    values = {k: origin_from_dict(v) if k == "source" else v
              for k, v in data.items() if k != "kind"}
    origin: Origin = cls(**values)
    return origin


def origins_to_dict(origins: Origins) -> dict[str, dict[str, dict[str, Any]]]:
    """A variant's origins as JSON data, output -> key -> :func:`origin_to_dict`."""
    return {output: {key: origin_to_dict(o) for key, o in keys.items()}
            for output, keys in origins.items()}


def origins_from_dict(data: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[
        str, dict[str, Origin]]:
    """The inverse of :func:`origins_to_dict`."""
    return {output: {key: origin_from_dict(o) for key, o in keys.items()}
            for output, keys in data.items()}
