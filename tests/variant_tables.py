"""Registering the test-only variant tables (planted bugs, honest families, located bugs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from numcheck.ops.registry import Variant, add_variant, get_op

#: op -> variant name -> (function, precision class).
Table = Mapping[str, Mapping[str, tuple[Callable[..., object], str]]]


def register_table(table: Table) -> None:
    """Add every variant of ``table`` to its op (inside ``registry.isolated()`` in tests); a
    name the op already has is left alone (a module imported twice in one process)."""
    for op, variants in table.items():
        for name, (fn, precision) in variants.items():
            if name not in get_op(op).variants:
                add_variant(op, Variant(name, fn, precision, doc=fn.__doc__ or ""))
