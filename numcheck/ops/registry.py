"""The op registry: op name -> reference, variants, input maker, named outputs.

An op is a plain description (:class:`OpSpec`); the registry is a dict keyed by name.
Nothing here imports pytest, so cases, goldens and reports can be built without it.

Ops arrive lazily, on the first lookup: the built-in op modules, then the ``numcheck.ops``
entry points of installed packages (:func:`load_entry_points`); under ``pytest --numcheck``
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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

#: Inputs of one case instance, by name, on one device.
Inputs = dict[str, torch.Tensor]
#: Outputs of one op call, by name.
Outputs = dict[str, torch.Tensor]
#: Resolved shape parameters of a case (preset merged with explicit values).
Params = Mapping[str, Any]

#: Precision classes: each variant belongs to one; default budgets are keyed by it.
PRECISIONS = ("fp32", "tf32", "bf16")
DEVICES = ("cpu", "cuda")

VariantFn = Callable[[Inputs, Params], Outputs]
InputMaker = Callable[[Params, int], Inputs]


@dataclass(frozen=True)
class Variant:
    """One implementation of an op.

    ``fn(inputs, params)`` returns every output named by the op. ``precision`` picks the
    default budget row; ``devices`` lists where the variant can run at all, and
    ``unavailable`` says why not on the others when that depends on the install (an
    optional dependency missing...): it becomes the skip reason.
    """

    name: str
    fn: VariantFn
    precision: str
    devices: tuple[str, ...] = DEVICES
    doc: str = ""
    unavailable: str = ""


@dataclass(frozen=True)
class ParamSpec:
    """A shape parameter a case may set: its type, default and a one-line meaning."""

    type: type
    default: Any
    doc: str = ""


@dataclass(frozen=True)
class TopkSpec:
    """Which outputs carry a top-k selection: indices (-1 padded) and the scores they rank."""

    indices: str
    scores: str


@dataclass(frozen=True)
class OpSpec:
    """An op: one FP32 reference, named variants, an input maker and named outputs.

    ``version`` is bumped whenever the reference math or the input maker changes; goldens
    record it, and a golden of another version is stale.
    """

    name: str
    version: int
    reference: str
    variants: Mapping[str, Variant]
    make_inputs: InputMaker
    outputs: tuple[str, ...]
    params: Mapping[str, ParamSpec]
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    topk: TopkSpec | None = None
    #: Outputs whose dtype is coarser than some variants compute in (name -> precision
    #: class): their default budgets use the coarser row.
    output_precision: Mapping[str, str] = field(default_factory=dict)
    doc: str = ""
    #: Roofline (issue 3): FLOPs of one call and the fewest bytes one call must move
    #: (each input read once, each output written once), from the case's params.
    flops: Callable[[Params], float] | None = None
    min_bytes: Callable[[Params], float] | None = None
    #: Parameters that take another's value unless given themselves (name -> the one it
    #: follows): an umbrella parameter split in two keeps its meaning (mHC's ``eps``).
    follows: Mapping[str, str] = field(default_factory=dict)

    def resolve_params(self, preset: str | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults, then the preset, then explicit values, then :attr:`follows` for the
        parameters neither gave. Unknown names raise KeyError."""
        params = {name: spec.default for name, spec in self.params.items()}
        given: set[str] = set()
        if preset is not None:
            params.update(self.presets[preset])
            given.update(self.presets[preset])
        for key, value in overrides.items():
            if key not in self.params:
                raise KeyError(key)
            params[key] = value
            given.add(key)
        for name, source in self.follows.items():
            if name not in given:
                params[name] = params[source]
        return params


#: Group of the entry points through which installed packages register ops and variants.
ENTRY_POINT_GROUP = "numcheck.ops"
#: Op and variant names become test ids, TOML keys and golden folder names.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

_REGISTRY: dict[str, OpSpec] = {}
#: Who registered each op (``op``) and added each variant (``op::variant``), for messages.
_ORIGINS: dict[str, str] = {}
#: Entry points already loaded (``dist:name = value``); loading is idempotent per entry point.
_LOADED_ENTRY_POINTS: set[str] = set()
_ENTRY_POINTS_SCANNED = False


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
    if not getattr(op.make_inputs, "__module__", "").startswith("numcheck.ops."):
        _load_builtin_ops()  # a user's op: the built-in names must be taken first
    origin = origin or _origin_of(op.make_inputs)
    _check_name("op", op.name, origin)
    if op.name in _REGISTRY:
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
    _check_callable(op.name, "make_inputs", op.make_inputs, ("params", "seed"), origin)
    for key, variant in op.variants.items():
        if key != variant.name:
            raise RegistrationError(
                f"numcheck: op {op.name!r} (from {origin}): variants[{key!r}] is a variant "
                f"named {variant.name!r}. Fix: key each variant by its own name"
            )
        _check_variant(op.name, variant, origin)
    _REGISTRY[op.name] = op
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
    _check_variant(op_name, variant, origin)
    updated = replace(op, variants={**op.variants, variant.name: variant})
    _REGISTRY[op_name] = updated
    _ORIGINS[f"{op_name}::{variant.name}"] = origin
    return updated


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
    for name, precision in op.output_precision.items():
        if name not in op.outputs or precision not in PRECISIONS:
            raise RegistrationError(
                f"{where}: output_precision {{{name!r}: {precision!r}}} needs an output of the op "
                f"and one of {', '.join(PRECISIONS)}. Fix: correct the entry or drop it"
            )


def _check_variant(op_name: str, variant: Variant, origin: str) -> None:
    where = f"numcheck: variant {variant.name!r} of op {op_name!r} (from {origin})"
    _check_name("variant", variant.name, origin)
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


def _check_callable(
    op_name: str, what: str, fn: Any, args: tuple[str, ...], origin: str
) -> None:
    """``fn`` must accept these positional arguments (checked, never called)."""
    fn_name = getattr(fn, "__name__", "fn")
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
    _load_all_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise KeyError(f"unknown op {name!r} (known ops: {known})") from None


def all_ops() -> dict[str, OpSpec]:
    """Every registered op, by name."""
    _load_all_ops()
    return dict(_REGISTRY)


_BUILTINS_LOADED = False


def _load_builtin_ops() -> None:
    # Importing the op modules registers them; done lazily so `import numcheck` stays light.
    # Once per process, ops before the variants that extend them (fused adds to both ops);
    # the flag also stops the re-entry that add_variant's get_op would make from there.
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from numcheck.ops import (  # noqa: F401
        fused,
        indexer,
        mhc,
    )


def _load_all_ops() -> None:
    # Built-in ops first, then installed packages' entry points, once per process (the
    # plugin calls load_entry_points() again at configure time, which picks up new ones).
    global _ENTRY_POINTS_SCANNED
    _load_builtin_ops()
    if not _ENTRY_POINTS_SCANNED:
        _ENTRY_POINTS_SCANNED = True  # first: entry points call get_op(), which comes back here
        load_entry_points()


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
    global _ENTRY_POINTS_SCANNED
    _ENTRY_POINTS_SCANNED = True
    _load_builtin_ops()
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
    _load_all_ops()
    ops, origins, entry_points = dict(_REGISTRY), dict(_ORIGINS), set(_LOADED_ENTRY_POINTS)
    try:
        yield
    finally:
        _REGISTRY.clear()
        _REGISTRY.update(ops)
        _ORIGINS.clear()
        _ORIGINS.update(origins)
        _LOADED_ENTRY_POINTS.clear()
        _LOADED_ENTRY_POINTS.update(entry_points)
