"""The op registry: op name -> reference, variants, input maker, named outputs.

An op is a plain description (:class:`OpSpec`, from :mod:`numcheck.ops.spec`, re-exported
here); the registry is a dict keyed by name. Nothing here imports pytest, so cases, goldens
and reports can be built without it.

Ops arrive lazily, on the first lookup: the built-in ops (:mod:`numcheck.ops.builtin`, the
one place that lists them), then the ``numcheck.ops`` entry points of installed packages (:func:`load_entry_points`); under ``pytest --numcheck``
the plugin then calls the ``pytest_numcheck_register`` hook with a :class:`Registrar`.
Every registration is checked (names, precision, devices, function signatures) and a
clash names both origins (docs/extending.md).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from numcheck.ops.batch import Batch, declaration_problems
from numcheck.ops.param_checks import check_declaration
from numcheck.ops.spec import (
    DEVICES,
    PRECISIONS,
    InputMaker,
    Inputs,
    OpSpec,
    Outputs,
    Params,
    ParamSpec,
    PrepareFn,
    TopkSpec,
    Variant,
    VariantFn,
)
from numcheck.ops.structure import Structure

__all__ = [  # the op description types are re-exported: users import them from here
    "DEVICES", "ENTRY_POINT_GROUP", "PRECISIONS", "InputMaker", "Inputs", "OpSpec", "Outputs",
    "ParamSpec", "Params", "PrepareFn", "Registrar", "RegistrationError", "TopkSpec", "Variant",
    "VariantFn", "add_variant", "all_ops", "get_op", "isolated", "load_entry_points", "register",
    "set_variant",
]

#: Group of the entry points through which installed packages register ops and variants.
ENTRY_POINT_GROUP = "numcheck.ops"
#: Op and variant names become test ids, TOML keys and golden folder names.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

#: The registered ops by name; None until the first lookup fills it (:func:`_ops`).
_REGISTRY: dict[str, OpSpec] | None = None
#: Who registered each op (``op``) and added each variant (``op::variant``), for messages.
_ORIGINS: dict[str, str] = {}
#: Entry points already loaded (``dist:name = value``); loading is idempotent per entry point.
_LOADED_ENTRY_POINTS: set[str] = set()


def _ops() -> dict[str, OpSpec]:
    """The registry, filled on first use: the built-in ops, then installed entry points.

    Lazy so that ``import numcheck`` stays light. The dict exists before it is filled, so
    the registrations made while filling it (which look it up again) find it.
    """
    global _REGISTRY
    if _REGISTRY is None:
        from numcheck.ops import builtin

        _REGISTRY = {}
        for op in builtin.ops():
            register(op)
        for op_name, variant in builtin.added_variants():
            add_variant(op_name, variant)
        load_entry_points()
    return _REGISTRY


class RegistrationError(ValueError):
    """An op or variant that cannot be registered; the message names it, its origin and the fix."""


def _origin_of(fn: Callable[..., Any]) -> str:
    return f"module {getattr(fn, '__module__', None) or '?'}"


def register(op: OpSpec, *, origin: str | None = None) -> OpSpec:
    """Add an op to the registry; a second op of the same name is an error.

    Every variant is checked (name, precision class, devices, and that ``fn`` can be called
    as ``fn(inputs, params)``), so a mistake fails at registration, not in the middle of a
    run. ``origin`` (who registers it: a hook, an entry point) only serves messages.
    """
    registry = _ops()  # a user's op: the built-in names are taken first
    origin = origin or _origin_of(op.make_inputs)
    _check_name("op", op.name, origin)
    if op.name in registry:
        raise RegistrationError(
            f"numcheck: an op named {op.name!r} is already registered (by {_ORIGINS[op.name]}); "
            f"this one comes from {origin}. Fix: give your op another name, or add your "
            f"implementation to the existing op with add_variant({op.name!r}, Variant(...))"
        )
    if op.reference not in op.variants:
        raise RegistrationError(
            f"numcheck: op {op.name!r} (from {origin}): reference {op.reference!r} is not one "
            f"of its variants {sorted(op.variants)}. Fix: add Variant({op.reference!r}, ...) to "
            "variants, or name an existing variant as the reference"
        )
    _check_outputs(op, origin)
    declaration = check_declaration(op)
    if declaration:
        raise RegistrationError(f"numcheck: op {op.name!r} (from {origin}): {declaration}")
    _check_callable(op.name, "make_inputs", op.make_inputs, ("params", "seed"), origin)
    if op.gemm_site is not None:
        _check_callable(op.name, "gemm_site", op.gemm_site, ("inputs", "params", "gemm"), origin)
    for key, variant in op.variants.items():
        if key != variant.name:
            raise RegistrationError(
                f"numcheck: op {op.name!r} (from {origin}): variants[{key!r}] is a variant "
                f"named {variant.name!r}. Fix: key each variant by its own name"
            )
        _check_variant(op.name, variant, origin, op.outputs)
        _check_quant(op, variant, origin)
    if op.variants[op.reference].produces is not None and set(
            op.variants[op.reference].produces) != set(op.outputs):
        raise RegistrationError(
            f"numcheck: op {op.name!r} (from {origin}): its reference {op.reference!r} "
            f"produces only {list(op.variants[op.reference].produces or ())}, but the "
            f"reference makes the golden of every output {list(op.outputs)}. Fix: make the "
            "reference compute every output (drop produces), or name another reference")
    registry[op.name] = op
    _ORIGINS[op.name] = origin
    for name in op.variants:
        _ORIGINS[f"{op.name}::{name}"] = origin
    return op


def add_variant(op_name: str, variant: Variant, *, origin: str | None = None) -> OpSpec:
    """Add a variant to a registered op (a new name only); returns the updated op."""
    origin = origin or _origin_of(variant.fn)
    try:
        op = get_op(op_name)
    except KeyError as exc:
        raise RegistrationError(
            f"numcheck: cannot add variant {variant.name!r} (from {origin}): {exc.args[0]}. "
            "Fix: register the op first (register(OpSpec(...))), or fix the op name"
        ) from None
    if variant.name in op.variants:
        first = _ORIGINS.get(f"{op_name}::{variant.name}", "numcheck")
        raise RegistrationError(
            f"numcheck: op {op_name!r} already has a variant {variant.name!r} (from {first}); "
            f"this one comes from {origin}. Fix: give your variant another name"
        )
    return set_variant(op_name, variant, origin=origin)


def variant_origin(op_name: str, name: str) -> str | None:
    """Who registered variant ``name`` of op ``op_name`` (the ``origin`` it was added with),
    or None for an unknown one."""
    return _ORIGINS.get(f"{op_name}::{name}")


def _check_quant(op: OpSpec, variant: Variant, origin: str) -> None:
    """A declared quantization (``Variant.quant``) is a GemmQuant of the variant's precision
    class, on an op that says where its GEMM sits: the simulated reference runs through
    ``gemm_site`` (numcheck.check.against_sim)."""
    if variant.quant is None:
        return
    from numcheck.precision.quant_declare import GemmQuant

    where = f"numcheck: variant {variant.name!r} of op {op.name!r} (from {origin})"
    if not isinstance(variant.quant, GemmQuant):
        raise RegistrationError(
            f"{where}: quant is {type(variant.quant).__name__}, not a GemmQuant. Fix: declare "
            "quant=numcheck.fp8.GemmQuant(a=<OperandScheme>, b=<OperandScheme>, "
            "accumulation=..., out_dtype=...)")
    if variant.quant.precision != variant.precision:
        raise RegistrationError(
            f"{where}: precision {variant.precision!r}, but its declared quantization "
            f"({variant.quant.label}) computes in the {variant.quant.precision!r} class. Fix: "
            f"declare precision={variant.quant.precision!r} (the coarser of the operands' "
            "element formats)")
    if op.gemm_site is None:
        raise RegistrationError(
            f"{where}: it declares its quantization, but op {op.name!r} declares no gemm_site, "
            "through which numcheck recomputes the op on the variant's own quantized operands "
            "(the simulated reference). Fix: give OpSpec(gemm_site=...) a function "
            "site(inputs, params, gemm) that runs the op with gemm for its matrix product "
            "(docs/extending.md, \"Where the GEMM sits\")")


def _check_name(what: str, name: str, origin: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise RegistrationError(
            f"numcheck: {what} name {name!r} (from {origin}) cannot be used: names become test "
            "ids, case-file keys and golden folders. Fix: use letters, digits, '_', '.' and "
            "'-', starting with a letter or digit"
        )


def _check_outputs(op: OpSpec, origin: str) -> None:
    where = f"numcheck: op {op.name!r} (from {origin})"
    if not op.outputs or len(set(op.outputs)) != len(op.outputs):
        raise RegistrationError(
            f"{where}: outputs {list(op.outputs)} must be a non-empty tuple of distinct names. "
            "Fix: name every output the variants return once"
        )
    if op.topk is not None:
        for role, name in (("indices", op.topk.indices), ("scores", op.topk.scores)):
            if name not in op.outputs:
                raise RegistrationError(
                    f"{where}: TopkSpec {role} {name!r} is not one of its outputs "
                    f"{list(op.outputs)}. Fix: name an output of the op"
                )
    for precision, name in op.rounding_reference.items():
        if precision not in PRECISIONS or name not in op.variants:
            raise RegistrationError(
                f"{where}: rounding_reference {{{precision!r}: {name!r}}} needs a precision "
                f"class ({', '.join(PRECISIONS)}) and one of its variants "
                f"{sorted(op.variants)}. Fix: correct the entry or drop it"
            )
        if op.variants[name].produces is not None:
            raise RegistrationError(
                f"{where}: rounding_reference {{{precision!r}: {name!r}}} names a variant that "
                "computes part of the op (produces), but every variant of the class is held "
                "to its error on every output. Fix: name a variant that computes every output"
            )
    for precision, alternatives in op.rounding_alternatives.items():
        if precision not in op.rounding_reference or not all(
            isinstance(label, str) and callable(fn) for label, fn in dict(alternatives).items()
        ):
            raise RegistrationError(
                f"{where}: rounding_alternatives[{precision!r}] needs a precision class the op "
                f"names a rounding_reference for ({sorted(op.rounding_reference)}) and a "
                "mapping of labels to functions like a variant's. Fix: name the reference "
                "first, or correct the entry"
            )
    for name, declared in op.structure.items():
        if name not in op.outputs or not isinstance(declared, Structure):
            raise RegistrationError(
                f"{where}: structure[{name!r}] needs an output of the op and a "
                f"numcheck.Structure, got {type(declared).__name__}. Fix: key each Structure "
                f"by one of {list(op.outputs)}"
            )
    if op.batch is not None:
        problems = (declaration_problems(op.batch, op.outputs, op.params)
                    if isinstance(op.batch, Batch) else
                    [f"batch is {type(op.batch).__name__}, not a numcheck.Batch"])
        if problems:
            raise RegistrationError(
                f"{where}: {'; '.join(problems)}. Fix: correct OpSpec(batch=numcheck.Batch("
                "inputs=..., outputs=..., size_param=...)) (docs/extending.md, \"What a "
                "request is\"), or drop it")
    for name, precision in op.output_precision.items():
        if name not in op.outputs or precision not in PRECISIONS:
            raise RegistrationError(
                f"{where}: output_precision {{{name!r}: {precision!r}}} needs an output of the op "
                f"and one of {', '.join(PRECISIONS)}. Fix: correct the entry or drop it"
            )


def _check_variant(op_name: str, variant: Variant, origin: str,
                   outputs: tuple[str, ...]) -> None:
    where = f"numcheck: variant {variant.name!r} of op {op_name!r} (from {origin})"
    _check_name("variant", variant.name, origin)
    if variant.produces is not None:
        declared = variant.produces
        if (isinstance(declared, str) or not isinstance(declared, tuple | list)
                or not declared or len(set(declared)) != len(declared)
                or not all(isinstance(o, str) for o in declared)):
            raise RegistrationError(
                f"{where}: produces={declared!r} must be a non-empty tuple of distinct output "
                f"names. Fix: name the outputs it computes, e.g. produces={tuple(outputs[:2])!r}, "
                "or leave produces out for a variant that computes every output")
        unknown = [o for o in declared if o not in outputs]
        if unknown:
            raise RegistrationError(
                f"{where}: produces names {unknown}, not outputs of the op {list(outputs)}. "
                "Fix: name outputs of the op")
    unknown = set(variant.devices) - set(DEVICES)
    if unknown:
        raise RegistrationError(
            f"{where}: unknown devices {sorted(unknown)}. Fix: use a subset of {list(DEVICES)}"
        )
    if variant.precision not in PRECISIONS:
        raise RegistrationError(
            f"{where}: precision {variant.precision!r} is not one of {', '.join(PRECISIONS)}. "
            "Fix: name the precision class whose default budgets fit the variant"
        )
    _check_callable(op_name, f"variant {variant.name!r}", variant.fn, ("inputs", "params"),
                    origin)
    if variant.prepare is not None:
        # The one-time preparation is called like the variant; a mistake in it must fail
        # here, not once per seed in the middle of a run.
        _check_callable(op_name, f"variant {variant.name!r}: prepare", variant.prepare,
                        ("inputs", "params"), origin, default_name="prepare")


def _check_callable(
    op_name: str, what: str, fn: Any, args: tuple[str, ...], origin: str,
    *, default_name: str = "fn",
) -> None:
    """``fn`` must accept these positional arguments (checked, never called)."""
    fn_name = getattr(fn, "__name__", default_name)
    call = f"{fn_name}({', '.join(args)})"
    if not callable(fn):
        raise RegistrationError(
            f"numcheck: op {op_name!r} (from {origin}): {what} is {type(fn).__name__}, not a "
            f"function. Fix: pass a function called as {call}"
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and C extensions may have no signature; the run will tell
    try:
        sig.bind(*args)
    except TypeError as exc:
        bare = sig.replace(  # annotations would only clutter the message
            parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
            return_annotation=sig.empty,
        )
        raise RegistrationError(
            f"numcheck: op {op_name!r} (from {origin}): {what}: {fn_name}{bare} cannot be "
            f"called as {call} ({exc}). Fix: define it as def {call}: ..."
        ) from None


def get_op(name: str) -> OpSpec:
    """The op called ``name``; KeyError names the known ops."""
    registry = _ops()
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(sorted(registry)) or "none"
        raise KeyError(f"unknown op {name!r} (known ops: {known})") from None


def all_ops() -> dict[str, OpSpec]:
    """Every registered op, by name."""
    return dict(_ops())


class Registrar:
    """What a registration hook or entry point receives: register ops, add variants.

    The same calls as the module functions, with the origin (the hook, the entry point)
    filled in so that a clash names both sides.
    """

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def register(self, op: OpSpec) -> OpSpec:
        """Register a new op (see :func:`register`)."""
        return register(op, origin=self._caller())

    def add_variant(self, op_name: str, variant: Variant) -> OpSpec:
        """Add a variant to a registered op (see :func:`add_variant`)."""
        return add_variant(op_name, variant, origin=self._caller())

    def _caller(self) -> str:
        # The file and line that registered: with several conftests or packages, which one.
        frame = sys._getframe(2)
        where = Path(frame.f_code.co_filename)
        with contextlib.suppress(ValueError):
            where = where.relative_to(Path.cwd())
        return f"{self.origin} at {where}:{frame.f_lineno}"

    def get_op(self, name: str) -> OpSpec:
        """The op called ``name`` (see :func:`get_op`)."""
        return get_op(name)


def load_entry_points() -> list[str]:
    """Load every ``numcheck.ops`` entry point not loaded yet; returns their descriptions.

    An entry point names a module (importing it registers its ops) or a callable, which is
    called with a :class:`Registrar`. Any failure is a :class:`RegistrationError` naming the
    entry point, its distribution and the fix.
    """
    _ops()  # the built-ins first: entry points extend them
    loaded = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        key = f"{dist}:{ep.name} = {ep.value}"
        if key in _LOADED_ENTRY_POINTS:
            continue
        _LOADED_ENTRY_POINTS.add(key)
        origin = f"entry point '{ep.name} = {ep.value}' of {dist}"
        try:
            target = ep.load()
            if not isinstance(target, types.ModuleType):
                target(Registrar(origin))
        except RegistrationError:
            raise
        except Exception as exc:
            raise RegistrationError(
                f"numcheck: {origin} (group {ENTRY_POINT_GROUP}) failed: "
                f"{type(exc).__name__}: {exc}. Fix: repair or uninstall {dist}; the entry "
                "point must name a module that registers ops on import, or a callable "
                "taking one argument (the registrar)"
            ) from exc
        loaded.append(origin)
    return loaded


@contextmanager
def isolated() -> Iterator[None]:
    """Restore the registry on exit: for tests that register throwaway ops or variants."""
    registry = _ops()
    ops, origins, entry_points = dict(registry), dict(_ORIGINS), set(_LOADED_ENTRY_POINTS)
    try:
        yield
    finally:
        registry.clear()
        registry.update(ops)
        _ORIGINS.clear()
        _ORIGINS.update(origins)
        _LOADED_ENTRY_POINTS.clear()
        _LOADED_ENTRY_POINTS.update(entry_points)


def set_variant(op_name: str, variant: Variant, *, origin: str | None = None) -> OpSpec:
    """Add ``variant`` to a registered op, or replace the variant of that name: for tests.

    A test that swaps an implementation (a planted bug in place of the reference, say)
    calls it inside :func:`isolated`, which puts the original back. Plain registration
    keeps refusing a second variant of the same name (:func:`add_variant`).
    """
    origin = origin or _origin_of(variant.fn)
    op = get_op(op_name)
    _check_variant(op_name, variant, origin, op.outputs)
    _check_quant(op, variant, origin)
    updated = replace(op, variants={**op.variants, variant.name: variant})
    _ops()[op_name] = updated
    _ORIGINS[f"{op_name}::{variant.name}"] = origin
    return updated
