"""Stored goldens: the FP32 reference outputs of each case, how they are read, checked and made.

- :mod:`~numcheck.goldens.files`: the file (path, content hash, metadata, save and load) and
  the :class:`GoldenError` family;
- :mod:`~numcheck.goldens.packing`: how an output is stored (whole, or sampled when large)
  and aligned with a variant's output (:func:`unpack_pair`);
- :mod:`~numcheck.goldens.freshness`: whether a golden still fits its case (inputs, op
  version, seeds, parameters);
- :mod:`~numcheck.goldens.case_golden`: a golden read and validated once for its case, the
  object the numerics of a check read;
- :mod:`~numcheck.goldens.regen`: storing a regenerated golden (NaN/Inf refused, stable bytes
  within the reference's :mod:`~numcheck.goldens.reproducibility`);
- :mod:`~numcheck.goldens.stale`: golden files no case uses; :mod:`~numcheck.goldens.obtained`:
  a failed variant's outputs, kept beside the golden.

The names below are the golden API (``from numcheck.goldens import unpack_pair``), loaded on
first use so that importing this package never imports torch. Writes go through
:mod:`numcheck.disk` (atomic files, the golden's lock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from numcheck._lazy import lazy_exports as _lazy_exports

#: Name -> the module that defines it (loaded on first use).
_EXPORTS = {
    "FORMAT_VERSION": "numcheck.goldens.files",
    "REQUIRED_META": "numcheck.goldens.files",
    "Golden": "numcheck.goldens.files",
    "GoldenCorrupt": "numcheck.goldens.files",
    "GoldenError": "numcheck.goldens.files",
    "GoldenFormatError": "numcheck.goldens.files",
    "GoldenMissing": "numcheck.goldens.files",
    "GoldenStale": "numcheck.goldens.files",
    "content_hash": "numcheck.goldens.files",
    "dtype_name": "numcheck.goldens.files",
    "golden_path": "numcheck.goldens.files",
    "input_fingerprint": "numcheck.goldens.files",
    "load_golden": "numcheck.goldens.files",
    "save_golden": "numcheck.goldens.files",
    "write_if_changed": "numcheck.goldens.files",
    "FULL_LIMIT": "numcheck.goldens.packing",
    "SAMPLE_SIZE": "numcheck.goldens.packing",
    "IDX_SUFFIX": "numcheck.goldens.packing",
    "VAL_SUFFIX": "numcheck.goldens.packing",
    "STATS_SUFFIX": "numcheck.goldens.packing",
    "SHAPE_SUFFIX": "numcheck.goldens.packing",
    "STATS_FIELDS": "numcheck.goldens.packing",
    "StoredPair": "numcheck.goldens.packing",
    "output_keys": "numcheck.goldens.packing",
    "pack_output": "numcheck.goldens.packing",
    "summary_stats": "numcheck.goldens.packing",
    "unpack_pair": "numcheck.goldens.packing",
    "GoldenNote": "numcheck.goldens.freshness",
    "check_fresh": "numcheck.goldens.freshness",
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
    "IDX_SUFFIX",
    "REQUIRED_META",
    "SAMPLE_SIZE",
    "SHAPE_SUFFIX",
    "STATS_FIELDS",
    "STATS_SUFFIX",
    "StoredPair",
    "VAL_SUFFIX",
    "check_fresh",
    "content_hash",
    "dtype_name",
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
        REQUIRED_META,
        Golden,
        GoldenCorrupt,
        GoldenError,
        GoldenFormatError,
        GoldenMissing,
        GoldenStale,
        content_hash,
        dtype_name,
        golden_path,
        input_fingerprint,
        load_golden,
        save_golden,
        write_if_changed,
    )
    from numcheck.goldens.freshness import GoldenNote, check_fresh
    from numcheck.goldens.packing import (
        FULL_LIMIT,
        IDX_SUFFIX,
        SAMPLE_SIZE,
        SHAPE_SUFFIX,
        STATS_FIELDS,
        STATS_SUFFIX,
        VAL_SUFFIX,
        StoredPair,
        output_keys,
        pack_output,
        summary_stats,
        unpack_pair,
    )


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _EXPORTS)
