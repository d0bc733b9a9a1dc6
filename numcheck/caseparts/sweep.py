"""Shape sweeps: one case checked at many values of its shape parameters.

Kernels break one past a tile, on a ragged last page, for one head dimension: where a fixed
shape never looks. A case may sweep shape axes::

    [sweep-l]
    op = "indexer"
    shape = { batch = 1, index_topk = 32 }
    sweep.max_context = { around = [64, 128], offsets = [-1, 0, 1], also = [1, 100, 257] }
    sweep.next_n = [1, 2]

Each axis is a shape parameter of the op, swept over a list of values or over points around
tile sizes (every ``around`` value plus every ``offset``, then the ``also`` values), sorted
and without repeats. Several axes make every combination, in the order the file lists them.
Each point is a case of its own (:func:`expand`): the id ``<case>@<label>``
(``sweep-l@max_context65``), its own golden, checks and records; every point shares the
case's seeds, devices, variants, budgets and limits. The label (``max_context65``,
``next_n2-max_context65``: each axis's name and value) is what ``-k`` selects.

Nothing here imports torch or pytest.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from numcheck.errors import NumcheckError
from numcheck.numerics.budgets import describe
from numcheck.ops.param_checks import check_params, check_value, describe_range
from numcheck.ops.spec import OpSpec, ParamSpec

__all__ = ["AROUND_KEYS", "MAX_POINTS", "SWEEP_KEY", "SweepError", "SweepPoint", "expand",
           "point_id"]

#: The case key of a sweep: ``sweep.<parameter> = [...]`` or ``{ around = [...], ... }``.
SWEEP_KEY = "sweep"
#: Keys of an axis swept around tile sizes.
AROUND_KEYS = ("around", "offsets", "also")
#: ``offsets`` when an ``around`` axis gives none: one before a tile, the tile, one past it.
DEFAULT_OFFSETS = (-1, 0, 1)
#: Most points one sweep may make: each is a golden file and a check per variant.
MAX_POINTS = 64
#: What a swept value may look like in a label (pytest's ``-k`` reads these characters).
_LABEL_VALUE = re.compile(r"[A-Za-z0-9._+-]+")


class SweepError(NumcheckError):
    """A sweep that cannot be used: ``key`` (dotted, from the case: ``sweep.next_n``), the
    problem and the fix; :mod:`numcheck.cases` adds the file and the case."""


@dataclass(frozen=True)
class SweepPoint:
    """Where one point sits in its sweep: the sweep case's id (its table in the case file),
    the swept parameters' values (in the file's axis order), and its place among the
    sweep's ``count`` points."""

    case: str
    values: Mapping[str, Any]
    index: int
    count: int

    @property
    def label(self) -> str:
        """``max_context65``, ``next_n2-max_context65``: each axis's name and value."""
        return "-".join(f"{name}{_value_text(v)}" for name, v in self.values.items())

    @property
    def id(self) -> str:
        """The point's case id: ``<case>@<label>`` (it names its golden file too)."""
        return point_id(self.case, self.label)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for records and reports."""
        return {"case": self.case, "point": self.label, "values": dict(self.values),
                "index": self.index, "count": self.count}


def point_id(case: str, label: str) -> str:
    """``sweep-l@max_context65``: the id of a sweep's point."""
    return f"{case}@{label}"


def expand(
    op: OpSpec, case: str, raw: Any, *, preset: str | None, shape: Mapping[str, Any],
) -> list[tuple[SweepPoint, dict[str, Any]]]:
    """Every point of the sweep ``raw`` (the case's ``sweep`` table) with its resolved
    parameters: the op's defaults, the preset, ``shape`` (the case's own values), then the
    point's. Raises :class:`SweepError` for an axis that is no parameter of the op or is
    also set in ``shape``, a value of the wrong type or out of range, a point that breaks
    a rule between parameters, an empty sweep or one of more than :data:`MAX_POINTS`
    points."""
    example = "sweep.max_context = [63, 64, 65]"
    if not isinstance(raw, dict) or not raw:
        got = "an empty table" if raw == {} else describe(raw)
        raise SweepError(SWEEP_KEY, f"expected a table of swept parameters, got {got}",
                         f"write {example}, or {{ around = [64], offsets = [-1, 0, 1] }}")
    axes: dict[str, list[Any]] = {}
    for name, given in raw.items():
        key = f"{SWEEP_KEY}.{name}"
        if name not in op.params:
            raise SweepError(key, f"unknown shape parameter '{name}' for op '{op.name}'",
                             f"sweep parameters among: {', '.join(op.params)}")
        if name in shape:
            raise SweepError(key, f"'{name}' is also set in shape (= {shape[name]!r}), and a "
                             "swept parameter takes each point's value",
                             f"remove {name} from shape, or stop sweeping it")
        axes[name] = _axis_values(key, name, op.params[name], given)
    count = math.prod(len(axis) for axis in axes.values())
    if count > MAX_POINTS:
        sizes = " x ".join(f"{len(v)} {n}" for n, v in axes.items())
        raise SweepError(SWEEP_KEY, f"the sweep makes {count} points ({sizes}), more than "
                         f"{MAX_POINTS}: each is a golden file and a check per variant",
                         "sweep fewer values, or split it into several cases")
    points = []
    for index, combo in enumerate(itertools.product(*axes.values())):
        values = dict(zip(axes, combo, strict=True))
        point = SweepPoint(case, values, index, count)
        params = op.resolve_params(preset, {**shape, **values})
        for problem in check_params(op, params):
            where = ", ".join(f"{n} = {v!r}" for n, v in values.items())
            key = (f"{SWEEP_KEY}.{problem.key}" if problem.key in values
                   else f"shape.{problem.key}")
            raise SweepError(key, f"at the point {where} ({point.label}): {problem.problem}",
                             f"{problem.fix}; or drop the value from the sweep (a point "
                             "that needs other values of another parameter goes in a sweep "
                             "case of its own)")
        points.append((point, params))
    return points


def _axis_values(key: str, name: str, spec: ParamSpec, given: Any) -> list[Any]:
    """One axis's values, sorted, without repeats, each of the parameter's type and range."""
    if isinstance(given, list):
        values = [_typed(key, name, spec, v) for v in given]
    elif isinstance(given, dict):
        values = _around(key, name, spec, given)
    else:
        raise SweepError(key, f"expected an array of values or a table, got {describe(given)}",
                         f"write {name} = [..] or {name} = {{ around = [64], offsets = "
                         "[-1, 0, 1] }}")
    if not values:
        raise SweepError(key, "the sweep of this parameter has no value", f"give {name} values")
    for value in values:
        problem = check_value(name, spec, value)
        if problem is not None:
            raise SweepError(key, f"{problem.problem}", f"drop the value, or {problem.fix}")
        if not _LABEL_VALUE.fullmatch(_value_text(value)):
            raise SweepError(key, f"the value {value!r} cannot name a point (test ids take "
                             "letters, digits and . _ + -)", "sweep values of that alphabet")
    if len({_value_text(v) for v in values}) != len(set(values)):
        raise SweepError(key, "two values name the same point", "list each value once")
    return sorted(set(values), key=_order)


def _around(key: str, name: str, spec: ParamSpec, given: Mapping[str, Any]) -> list[Any]:
    """``{ around = [64, 128], offsets = [-1, 0, 1], also = [1, 257] }``: each tile size plus
    each offset, then the extra values."""
    unknown = [k for k in given if k not in AROUND_KEYS]
    if unknown:
        raise SweepError(f"{key}.{unknown[0]}", f"unknown key '{unknown[0]}'",
                         f"use {', '.join(AROUND_KEYS)}")
    if spec.type is not int:
        raise SweepError(key, f"'{name}' is {describe_range(spec)}: only integer parameters "
                         "are swept around tile sizes", f"list its values: {name} = [..]")
    if "around" not in given:
        raise SweepError(key, "a sweep around tile sizes needs around = [...]",
                         f"write {name} = {{ around = [64, 128], offsets = [-1, 0, 1] }}")
    tiles = _ints(f"{key}.around", given["around"], positive=True)
    offsets = _ints(f"{key}.offsets", given.get("offsets", list(DEFAULT_OFFSETS)))
    also = _ints(f"{key}.also", given.get("also", []), empty=True)
    return [t + o for t in tiles for o in offsets] + also


def _ints(key: str, value: Any, *, positive: bool = False, empty: bool = False) -> list[int]:
    fix = f"write {key.rsplit('.', 1)[-1]} = [...], integers"
    if not isinstance(value, list) or (not value and not empty):
        raise SweepError(key, f"expected a non-empty array of integers, got {describe(value)}",
                         fix)
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or (positive and v < 1):
            raise SweepError(key, f"expected {'positive ' if positive else ''}integers, got "
                             f"{describe(v)}", fix)
    return list(value)


def _typed(key: str, name: str, spec: ParamSpec, value: Any) -> Any:
    """``value`` as the parameter's type (an integer for a float parameter reads as a float);
    the wrong type is an error, ``true`` for an integer too."""
    if spec.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if (isinstance(value, bool) and spec.type is not bool) or not isinstance(value, spec.type):
        raise SweepError(key, f"expected values of {describe_range(spec)}, got "
                         f"{describe(value)}", f"write {name} = [..] with such values")
    return value


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _order(value: Any) -> tuple[int, Any]:
    # Numbers in value order; strings and booleans after them, as written.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value)
    return (1, _value_text(value))

