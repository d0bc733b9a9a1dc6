"""The ops numcheck ships, in one list: the registry loads them on its first lookup.

Op modules only describe their op (an :class:`~numcheck.ops.spec.OpSpec` named ``OP``);
nothing registers itself on import. Ops come before the variants that extend them.
"""

from __future__ import annotations

from numcheck.ops import fp8_variants, fused, indexer, linear, mhc
from numcheck.ops.spec import OpSpec, Variant


def ops() -> list[OpSpec]:
    """The built-in ops."""
    return [indexer.OP, mhc.OP, linear.OP]


def added_variants() -> list[tuple[str, Variant]]:
    """``(op name, variant)`` of the built-in variants that live outside their op's module."""
    return [*fused.variants(), *fp8_variants.variants()]
