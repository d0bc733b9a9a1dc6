"""One-time preparation: what a variant does once, at load time, before it is ever called.

A serving engine puts a weight in the layout, dtype or quantization its kernel wants once,
when it loads the model. A variant whose glue does that on every call
(``hc_fn.t().contiguous().to(bf16)``) pays for it in every timing and every cast ledger,
and a kernel library that takes its weights pre-transposed then fails ``input_copies``
for work nobody does per call. A :class:`~numcheck.ops.spec.Variant` may therefore declare
``prepare(inputs, params) -> tensors by name``::

    prepared = prepare(variant, inputs, params, device)   # once per (case, seed, device)
    variant.fn(prepared.call_inputs(inputs), params)      # every call: inputs + prepared

What numcheck does with it (docs/extending.md, "One-time preparation"):

- **numerics**: the outputs of the call on the prepared inputs are checked against the
  golden, so the preparation's rounding (a bf16 or fp8 weight) is part of what is checked;
- **timing**: the preparation is made before anything is timed; only the call is timed;
- **casts**: the preparation runs under a ledger of its own (:class:`Prepared.ledger`),
  shown as "prepared once: ..." beside the per-call ledger and never gated; the per-call
  ledger names prepared tensors as inputs, so a per-call copy of a prepared weight is still
  a copy of that input;
- **errors**: a preparation that raises, returns something other than tensors by name on
  the run's device, or writes into an input in place is a
  :class:`~numcheck.ops.spec.VariantError` naming the preparation.

:class:`Preparations` keeps one check's preparations, so each is made once per seed
whatever gates the check runs. No pytest here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from numcheck.ops.spec import Inputs, Outputs, Params, Variant, VariantError, VariantFn
from numcheck.overhead.casts import CastLedger, ledger_table
from numcheck.overhead.units import megabytes
from numcheck.precision import short_dtype

#: The column of the casts table that shows a check's preparation ("-" without one).
PREPARED_COLUMN = "prepared once"
#: Ledger entries of a preparation named in its one-line summary (largest first).
SUMMARY_ENTRIES = 3

#: How a caller gets a variant's preparation for the device inputs at hand:
#: ``preparer(variant, inputs, params, device)`` -> :class:`Prepared`, or None for a variant
#: without one. :func:`prepare` makes it anew; :meth:`Preparations.at` reuses one check's.
Preparer = Callable[[Variant, Inputs, Params, str], "Prepared | None"]


@dataclass
class Prepared:
    """What one variant's preparation made from one seed's inputs on one device.

    ``tensors``: what ``prepare`` returned, by name. ``replaced``: for each name that is
    one of the op's inputs, that input's dtype and shape (what the call no longer sees).
    ``ledger``: the casts and copies the preparation made, recorded apart from the
    per-call ledger.
    """

    variant: str
    tensors: dict[str, torch.Tensor]
    ledger: CastLedger
    replaced: dict[str, tuple[torch.dtype, tuple[int, ...]]] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        """What it made without the data (shapes and dtypes kept): it travels from a worker."""
        return {**self.__dict__, "tensors": {n: t.detach().to("meta")
                                             for n, t in self.tensors.items()}}

    def call_inputs(self, inputs: Inputs) -> Inputs:
        """The inputs a call receives: the op's inputs with the prepared tensors on top."""
        return {**inputs, **self.tensors}

    @property
    def bytes_held(self) -> int:
        """Bytes of the prepared tensors (what an engine keeps resident after loading)."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def tensors_text(self) -> str:
        """``hc_fn bf16 [16384, 24] (was fp32 [24, 16384])``, one per prepared tensor."""
        parts = []
        for name, t in self.tensors.items():
            text = f"{name} {short_dtype(t.dtype)} {list(t.shape)}"
            if name in self.replaced:
                dtype, shape = self.replaced[name]
                text += f" (was {short_dtype(dtype)} {list(shape)})"
            else:
                text += " (new)"
            parts.append(text)
        return ", ".join(parts) or "nothing"

    def ledger_text(self) -> str:
        """``1 cast, 1 copy, 5.51 MB moved (...)``: the preparation's own ledger."""
        led = self.ledger
        text = (f"{_count(len(led.casts), 'cast')}, {_count(len(led.copies), 'copy')}, "
                f"{megabytes(led.bytes_moved)} moved")
        top = sorted(led.entries, key=lambda e: -e.bytes_moved)[:SUMMARY_ENTRIES]
        if top:
            text += " (" + "; ".join(e.describe() for e in top)
            more = len(led.entries) - len(top)
            text += f"; {more} more)" if more else ")"
        return text

    def summary(self) -> str:
        """The one line shown beside the per-call ledger, in failures and explain output."""
        return (f"prepared once: {self.tensors_text()}, {megabytes(self.bytes_held)} held; "
                f"{self.ledger_text()}; not in the per-call ledger, not timed")

    def cell(self) -> str:
        """The casts table's ``prepared once`` cell: ``hc_fn: 1 cast, 1 copy, 5.51 MB``."""
        led = self.ledger
        return (f"{', '.join(self.tensors) or '-'}: {_count(len(led.casts), 'cast')}, "
                f"{_count(len(led.copies), 'copy')}, {megabytes(led.bytes_moved)}")

    def lines(self, limit: int = 12) -> list[str]:
        """The summary and the preparation's ledger as a table (explain mode, failures)."""
        out = [f"  {self.summary()}"]
        if self.ledger.entries:
            out += list(ledger_table(self.ledger, limit))
        return out

    def as_dict(self) -> dict[str, Any]:
        """The report record's ``prepared`` section (docs/report.md)."""
        led = self.ledger
        return {
            "tensors": {
                name: {"dtype": short_dtype(t.dtype), "shape": list(t.shape),
                       "bytes": t.numel() * t.element_size(),
                       "replaces": (None if name not in self.replaced else {
                           "dtype": short_dtype(self.replaced[name][0]),
                           "shape": list(self.replaced[name][1])})}
                for name, t in self.tensors.items()
            },
            "bytes": self.bytes_held,
            "casts": len(led.casts),
            "copies": len(led.copies),
            "cast_bytes": led.bytes_moved,
            "input_passes": led.input_passes(),
            "entries": [e.as_dict() for e in led.entries],
            "text": self.summary(),
        }


def _count(n: int, word: str) -> str:
    plural = {"copy": "copies"}.get(word, word + "s")
    return f"{n} {word if n == 1 else plural}"


def prepare(variant: Variant, inputs: Inputs, params: Params, device: str) -> Prepared | None:
    """Run ``variant.prepare`` on ``inputs`` (already on ``device``) under a cast ledger of
    its own; None for a variant without a preparation.

    Raises :class:`~numcheck.ops.spec.VariantError` when the preparation raises, returns
    anything but tensors by name on ``device``, or writes into one of the op's inputs (they
    are shared by every variant of the case).
    """
    if variant.prepare is None:
        return None
    where = f"variant {variant.name!r}: its preparation ({_name(variant.prepare)})"
    versions = {name: t._version for name, t in inputs.items() if isinstance(t, torch.Tensor)}
    try:
        with torch.no_grad(), CastLedger(skip=(__file__,), by_value=False,
                                         inputs=dict(inputs)) as ledger:
            made = variant.prepare(dict(inputs), params)
    except Exception as exc:  # the preparation's own failure is a verdict, not a crash
        raise VariantError.raised(where, exc) from exc
    if not isinstance(made, Mapping):
        raise VariantError(
            f"{where} returned {type(made).__name__}; expected a dict of tensors by name "
            "(a new name is added to the inputs, an input's own name replaces that input)"
        )
    for name, t in made.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise VariantError(
                f"{where} returned {name!r}: {type(t).__name__}; expected a dict of tensors "
                "by name (str)"
            )
        if t.device.type != device:
            raise VariantError(f"{where}: {name!r} is on {t.device.type}, expected {device} "
                               "(prepare on the device of the inputs it is given)")
    for name, t in inputs.items():
        if isinstance(t, torch.Tensor) and t._version != versions[name]:
            raise VariantError(
                f"{where} wrote into input {name!r} in place; the op's inputs are shared by "
                "every variant of the case. Fix: return a new tensor under that name instead"
            )
    replaced = {name: (inputs[name].dtype, tuple(inputs[name].shape)) for name in made
                if isinstance(inputs.get(name), torch.Tensor)}
    return Prepared(variant.name, dict(made), ledger, replaced)


def _name(fn: Any) -> str:
    return str(getattr(fn, "__name__", "prepare"))


class Preparations:
    """One check's preparations, made on first use: once per (variant, seed, device).

    The numerics of every seed, the speed gate and the cast ledger of one check share
    them, so a preparation runs once per seed whatever gates are on. Dropped with the
    check (prepared weights may be large; the next check makes its own).
    """

    def __init__(self) -> None:
        # (variant, its preparation, seed, device) -> what it made, in the order made.
        self._made: dict[tuple[str, Any, int, str], Prepared | None] = {}

    def at(self, seed: int) -> Preparer:
        """A :data:`Preparer` for the inputs of ``seed``."""

        def preparer(variant: Variant, inputs: Inputs, params: Params,
                     device: str) -> Prepared | None:
            if variant.prepare is None:
                return None
            key = (variant.name, variant.prepare, seed, device)
            if key not in self._made:
                self._made[key] = prepare(variant, inputs, params, device)
            return self._made[key]

        return preparer

    def first(self, variant: str) -> Prepared | None:
        """The first preparation made for ``variant`` (the record shows one seed's, like
        the per-call ledger, which audits the case's first seed)."""
        return next((made for (name, *_), made in self._made.items()
                     if name == variant and made is not None), None)


def with_preparation(variant: Variant) -> VariantFn:
    """The variant as one function of the op's inputs: its preparation (if any), then the
    call. For scripts and tests that call variants directly; the gate itself keeps the two
    apart (only the call is timed and audited per call)."""
    if variant.prepare is None:
        return variant.fn
    prep, fn = variant.prepare, variant.fn

    def prepared_call(inputs: Inputs, params: Params) -> Outputs:
        return fn({**inputs, **prep(dict(inputs), params)}, params)

    prepared_call.__name__ = prepared_call.__qualname__ = f"{variant.name} (prepared)"
    return prepared_call
