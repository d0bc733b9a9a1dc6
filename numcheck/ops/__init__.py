"""Op families: one module per op, plus the registry."""

from numcheck.ops.registry import OpSpec, ParamSpec, TopkSpec, Variant, all_ops, get_op, register

__all__ = ["OpSpec", "ParamSpec", "TopkSpec", "Variant", "all_ops", "get_op", "register"]
