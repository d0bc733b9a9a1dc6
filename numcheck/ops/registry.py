"""The op registry: op name -> reference, variants, input maker, named outputs.

An op is a plain description (:class:`OpSpec`); the registry is a dict keyed by name.
Nothing here imports pytest, so cases, goldens and reports can be built without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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

    def resolve_params(self, preset: str | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults, then the preset, then explicit values. Unknown names raise KeyError."""
        params = {name: spec.default for name, spec in self.params.items()}
        if preset is not None:
            params.update(self.presets[preset])
        for key, value in overrides.items():
            if key not in self.params:
                raise KeyError(key)
            params[key] = value
        return params


_REGISTRY: dict[str, OpSpec] = {}


def register(op: OpSpec) -> OpSpec:
    """Add an op to the registry; a second op of the same name is an error."""
    if op.name in _REGISTRY:
        raise ValueError(f"numcheck: an op named {op.name!r} is already registered")
    if op.reference not in op.variants:
        raise ValueError(f"numcheck: op {op.name!r}: reference {op.reference!r} is not a variant")
    _REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpSpec:
    """The op called ``name``; KeyError names the known ops."""
    _load_builtin_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise KeyError(f"unknown op {name!r} (known ops: {known})") from None


def all_ops() -> dict[str, OpSpec]:
    """Every registered op, by name."""
    _load_builtin_ops()
    return dict(_REGISTRY)


def _load_builtin_ops() -> None:
    # Importing the op modules registers them; done lazily so `import numcheck` stays light.
    from numcheck.ops import fused, indexer, mhc  # noqa: F401


def add_variant(op_name: str, variant: Variant) -> OpSpec:
    """Add a variant to a registered op (a new name only); returns the updated op."""
    op = get_op(op_name)
    if variant.name in op.variants:
        raise ValueError(f"numcheck: op {op_name!r} already has a variant {variant.name!r}")
    unknown = set(variant.devices) - set(DEVICES)
    if unknown:
        raise ValueError(f"numcheck: variant {variant.name!r}: unknown devices {sorted(unknown)}")
    if variant.precision not in PRECISIONS:
        raise ValueError(
            f"numcheck: variant {variant.name!r}: precision {variant.precision!r} is not one of "
            f"{', '.join(PRECISIONS)}"
        )
    updated = replace(op, variants={**op.variants, variant.name: variant})
    _REGISTRY[op_name] = updated
    return updated


@contextmanager
def isolated() -> Iterator[None]:
    """Restore the registry on exit: for tests that register throwaway ops or variants."""
    _load_builtin_ops()
    saved = dict(_REGISTRY)
    try:
        yield
    finally:
        _REGISTRY.clear()
        _REGISTRY.update(saved)
