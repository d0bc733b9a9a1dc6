"""Stored goldens (temporary facade)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Name -> the module that defines it (loaded on first use).
_EXPORTS = {
    "FORMAT_VERSION": "numcheck.goldens.files",
    "FULL_LIMIT": "numcheck.goldens.files",
    "REQUIRED_META": "numcheck.goldens.files",
    "SAMPLE_SIZE": "numcheck.goldens.files",
    "Golden": "numcheck.goldens.files",
    "GoldenCorrupt": "numcheck.goldens.files",
    "GoldenError": "numcheck.goldens.files",
    "GoldenFormatError": "numcheck.goldens.files",
    "GoldenMissing": "numcheck.goldens.files",
    "GoldenNote": "numcheck.goldens.files",
    "GoldenStale": "numcheck.goldens.files",
    "StoredPair": "numcheck.goldens.files",
    "check_fresh": "numcheck.goldens.files",
    "content_hash": "numcheck.goldens.files",
    "golden_path": "numcheck.goldens.files",
    "input_fingerprint": "numcheck.goldens.files",
    "load_golden": "numcheck.goldens.files",
    "output_keys": "numcheck.goldens.files",
    "pack_output": "numcheck.goldens.files",
    "save_golden": "numcheck.goldens.files",
    "summary_stats": "numcheck.goldens.files",
    "unpack_pair": "numcheck.goldens.files",
    "write_if_changed": "numcheck.goldens.files",
}

__all__ = [
    "FORMAT_VERSION",
    "FULL_LIMIT",
    "Golden",
    "GoldenCorrupt",
    "GoldenError",
    "GoldenFormatError",
    "GoldenMissing",
    "GoldenNote",
    "GoldenStale",
    "REQUIRED_META",
    "SAMPLE_SIZE",
    "StoredPair",
    "check_fresh",
    "content_hash",
    "golden_path",
    "input_fingerprint",
    "load_golden",
    "output_keys",
    "pack_output",
    "save_golden",
    "summary_stats",
    "unpack_pair",
    "write_if_changed",
]  # the names of _EXPORTS (tests/test_imports.py keeps them in step)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads lazily
    from numcheck.goldens.files import (
        FORMAT_VERSION,
        FULL_LIMIT,
        REQUIRED_META,
        SAMPLE_SIZE,
        Golden,
        GoldenCorrupt,
        GoldenError,
        GoldenFormatError,
        GoldenMissing,
        GoldenNote,
        GoldenStale,
        StoredPair,
        check_fresh,
        content_hash,
        golden_path,
        input_fingerprint,
        load_golden,
        output_keys,
        pack_output,
        save_golden,
        summary_stats,
        unpack_pair,
        write_if_changed,
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
