"""The numerics of a check (temporary facade)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Name -> the module that defines it (loaded on first use).
_EXPORTS = {
    "CaseInputs": "numcheck.numerics.against_golden",
    "check": "numcheck.numerics.against_golden",
    "fresh_golden": "numcheck.numerics.against_golden",
    "seed_key": "numcheck.numerics.against_golden",
    "run_variant": "numcheck.numerics.against_golden",
}

__all__ = [
    "CaseInputs",
    "check",
    "fresh_golden",
    "run_variant",
    "seed_key",
]  # the names of _EXPORTS (tests/test_imports.py keeps them in step)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads lazily
    from numcheck.numerics.against_golden import (
        CaseInputs,
        check,
        fresh_golden,
        run_variant,
        seed_key,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
