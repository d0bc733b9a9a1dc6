"""Valid values of an op's parameters: checked when a case is read and when an op registers.

An op declares, per parameter, a range or the allowed values (:class:`ParamSpec` ``min``,
``max``, ``gt``, ``choices``) and, for rules between parameters, a function
(:attr:`OpSpec.check_params`). A case file that breaks them fails when it is read, with the
key, the rule and a value that works, instead of crashing deep inside the input maker or
writing a golden of NaN or of empty outputs. The same declarations are checked when an op
registers, so a user op with a default outside its own range fails there. Nothing here
imports pytest or the registry (the registry imports this module).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from numcheck.distributions import DISTRIBUTIONS, INPUTS_PARAM
from numcheck.ops.spec import OpSpec, ParamProblem, ParamSpec

__all__ = ["NONFINITE_KINDS", "PARAM_TYPES", "ParamProblem", "check_declaration",
           "check_params", "check_value", "describe_range"]

#: The parameter types a case file can hold (TOML scalars).
PARAM_TYPES = (int, float, bool, str)
#: Non-finite kinds an op may allow in an output (:attr:`OpSpec.nonfinite`).
NONFINITE_KINDS = ("nan", "+inf", "-inf")


def describe_range(spec: ParamSpec) -> str:
    """``an integer >= 1``, ``a number > 0 and <= 1``, ``one of "amax448", "ue8m0"``."""
    if spec.choices is not None:
        return "one of " + ", ".join(_literal(c) for c in spec.choices)
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    parts = []
    if spec.gt is not None:
        parts.append(f"> {spec.gt:g}")
    if spec.min is not None:
        parts.append(f">= {spec.min:g}")
    if spec.max is not None:
        parts.append(f"<= {spec.max:g}")
    base = words.get(spec.type, f"a {getattr(spec.type, '__name__', spec.type)}")
    return base + (" " + " and ".join(parts) if parts else "")


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def check_value(name: str, spec: ParamSpec, value: Any) -> ParamProblem | None:
    """The problem with ``value`` for parameter ``name`` (type already checked), or None."""
    example = f"{name} = {_literal(spec.default)}"
    if spec.choices is not None:
        if value not in spec.choices:
            return ParamProblem(name, f"{_literal(value)} is not allowed",
                                f"use {describe_range(spec)}, e.g. {example}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    broken = (
        (isinstance(value, float) and math.isnan(value))
        or (spec.gt is not None and not value > spec.gt)
        or (spec.min is not None and not value >= spec.min)
        or (spec.max is not None and not value <= spec.max)
    )
    if broken:
        return ParamProblem(name, f"{_literal(value)} is out of range (needs "
                            f"{describe_range(spec)})", f"write e.g. {example}")
    return None


def check_params(op: OpSpec, params: Mapping[str, Any]) -> list[ParamProblem]:
    """Every broken rule of resolved ``params``: single ranges first, then the op's own
    cross-parameter check (only when the single values are valid, so it may rely on them)."""
    problems = [
        p for name, spec in op.params.items() if name in params
        if (p := check_value(name, spec, params[name])) is not None
    ]
    if problems or op.check_params is None:
        return problems
    return list(_as_problems(op.check_params(params)))


def _as_problems(found: Iterable[Any] | None) -> Iterable[ParamProblem]:
    for item in found or ():
        if isinstance(item, ParamProblem):
            yield item
        else:  # a (key, problem, fix) tuple from a user's check
            key, problem, fix = item
            yield ParamProblem(str(key), str(problem), str(fix))


def check_declaration(op: OpSpec) -> str:
    """What is wrong with an op's parameter declarations ('' when nothing): types, ranges,
    defaults and presets inside their ranges, the cross check accepting the defaults,
    allowed non-finite values naming outputs. Used by the registry on every registration."""
    if INPUTS_PARAM in op.params:
        return (f"parameter {INPUTS_PARAM!r}: the name holds a case's inputs (their "
                "distribution, or a recorded file). Fix: name the parameter otherwise")
    drawn = op.distributions
    if (not isinstance(drawn, tuple) or "normal" not in drawn
            or any(d not in DISTRIBUTIONS for d in drawn)):
        return (f"distributions={drawn!r}. Fix: a tuple of names among "
                f"{', '.join(DISTRIBUTIONS)}, with 'normal' (the default draw)")
    for name, spec in op.params.items():
        where = f"parameter {name!r}"
        if spec.type not in PARAM_TYPES:
            return (f"{where} has type {getattr(spec.type, '__name__', spec.type)!r}. Fix: use "
                    "int, float, bool or str (what a case file can hold)")
        default_ok = isinstance(spec.default, spec.type) and not (
            isinstance(spec.default, bool) and spec.type is not bool
        ) or (spec.type is float and type(spec.default) is int)
        if not default_ok:
            return (f"{where}: default {spec.default!r} is not of type {spec.type.__name__}. "
                    "Fix: give a default of the declared type")
        bounds = {"min": spec.min, "max": spec.max, "gt": spec.gt}
        for label, bound in bounds.items():
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)
                                      or math.isnan(bound)):
                return f"{where}: {label}={bound!r} is not a number. Fix: give a number or None"
        if any(b is not None for b in bounds.values()) and spec.type not in (int, float):
            return (f"{where}: a range (min/max/gt) on a {spec.type.__name__} parameter. "
                    "Fix: use choices=(...) for a fixed set of values")
        low = spec.min if spec.min is not None else spec.gt
        if low is not None and spec.max is not None and low > spec.max:
            return f"{where}: the range is empty ({describe_range(spec)}). Fix: correct min/max"
        if spec.choices is not None:
            if not isinstance(spec.choices, tuple) or not spec.choices:
                return f"{where}: choices must be a non-empty tuple. Fix: choices=(\"a\", \"b\")"
            if any(not isinstance(c, spec.type) for c in spec.choices):
                return (f"{where}: choices {spec.choices!r} are not all of type "
                        f"{spec.type.__name__}. Fix: list values of the declared type")
        problem = check_value(name, spec, spec.default)
        if problem is not None:
            return (f"{where}: its default {_literal(spec.default)} breaks its own range "
                    f"({describe_range(spec)}). Fix: correct the default or the range")
    for preset, values in op.presets.items():
        for name, value in values.items():
            if name not in op.params:
                return (f"preset {preset!r} sets unknown parameter {name!r}. Fix: declare it "
                        f"in params or remove it (params: {', '.join(op.params)})")
            problem = check_value(name, op.params[name], value)
            if problem is not None:
                return f"preset {preset!r}: {name}: {problem.problem}. Fix: {problem.fix}"
    if op.check_params is not None:
        if not callable(op.check_params):
            return "check_params is not a function. Fix: pass def check(params): ... or None"
        defaults = {name: spec.default for name, spec in op.params.items()}
        try:
            found = list(_as_problems(op.check_params(defaults)))
        except Exception as exc:
            return (f"check_params raised {type(exc).__name__}: {exc} on the default "
                    "parameters. Fix: it must return a list of ParamProblem (empty when valid)")
        if found:
            return (f"check_params rejects the defaults ({found[0].key}: {found[0].problem}). "
                    "Fix: make the defaults valid")
    for output, kinds in op.nonfinite.items():
        if output not in op.outputs:
            return (f"nonfinite names {output!r}, not one of its outputs {list(op.outputs)}. "
                    "Fix: name an output")
        bad = [k for k in kinds if k not in NONFINITE_KINDS]
        if bad or not isinstance(kinds, tuple):
            return (f"nonfinite[{output!r}] = {kinds!r}. Fix: a tuple of "
                    f"{', '.join(NONFINITE_KINDS)}")
    return ""
