"""Names loaded on first use (PEP 562), for numcheck's public facade.

``import numcheck`` (and so ``pytest --help``) must not import torch. ``numcheck/__init__.py``
keeps a table ``name -> module that defines it`` and hands it here::

    __getattr__, __dir__ = _lazy_exports(__name__, globals(), _EXPORTS)

tests/test_imports.py keeps the table in step with its ``__all__`` and its
``TYPE_CHECKING`` imports (what type checkers see).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str],
    also: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` that imports ``exports[name]`` (or ``also[name]``: names found
    but not listed, a moved name's old spelling) on first use and keeps the value in
    ``namespace`` (later lookups skip it), and the ``__dir__`` that lists ``exports``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name) or (also or {}).get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
