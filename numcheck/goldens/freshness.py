"""Is a golden still the reference of its case? Freshness: case, op, inputs, seeds, parameters.

A golden pins how it was made in its metadata (:data:`numcheck.goldens.files.REQUIRED_META`,
and the parameters it was made with); :func:`require_fresh` compares that record with the case
as it is now and names every difference, with the command that regenerates the golden.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from numcheck.goldens.files import SHORT, Golden, GoldenStale, golden_at, regen_text

__all__ = ["GoldenNote", "require_fresh"]


def _fmt_seeds(seeds: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in seeds[:8])
    more = f", ... ({len(seeds)} seeds)" if len(seeds) > 8 else ""
    return f"[{shown}{more}]"


class GoldenNote(UserWarning):
    """Something the user should know about a golden that still passes (e.g. an old golden
    without a parameter record, checked on its inputs alone: regenerate to pin parameters)."""


def require_fresh(
    golden: Golden,
    *,
    op_version: int,
    fingerprint: str,
    seeds: Sequence[int],
    regen_hint: str,
    case: str | None = None,
    op: str | None = None,
    params: Mapping[str, Any] | None = None,
    param_defaults: Mapping[str, Any] | None = None,
) -> None:
    """Raise :class:`GoldenStale` unless ``golden`` was made for this case and op, from these
    inputs, op version, seeds and parameters.

    The message lists each difference, old -> new (hashes shortened), and the regen command.
    A golden whose metadata names another case or op was copied or renamed: the message
    says which case it came from. Seeds are compared as a sorted list: their order does not
    change what is stored. ``params`` are the case's resolved parameters: every one the op
    declares must equal the golden's record, except one the record lacks that is at its
    ``param_defaults`` value (a parameter added to the op later, keeping the old behaviour).
    A golden with no parameter record at all is checked on the rest and a :class:`GoldenNote`
    warning suggests regenerating it.
    """
    meta = golden.meta
    stored_case = str(meta.get("case", ""))
    stored_op = str(meta.get("op", ""))
    diffs: list[str] = []
    want_case = stored_case if case is None else case
    want_op = stored_op if op is None else op
    if (want_case, want_op) != (stored_case, stored_op):
        diffs.append(
            f"it was made for case {stored_case!r} of op {stored_op!r}, not for case "
            f"{want_case!r} of op {want_op!r} (copied or renamed from "
            f"{stored_op}/{stored_case}.safetensors)"
        )
    old_version = meta.get("op_version")
    if old_version != op_version:
        diffs.append(f"op_version {old_version} -> {op_version}")
    if params is not None:
        diffs += _param_diffs(golden, params, param_defaults or {}, regen_hint)
    old_fp = str(meta.get("fingerprint", ""))
    if old_fp != fingerprint:
        diffs.append(
            f"input fingerprint {old_fp[:SHORT] or '(none)'} -> {fingerprint[:SHORT]} "
            "(the generated inputs changed)"
        )
    old_seeds = meta.get("seeds")
    new_seeds = sorted(int(s) for s in seeds)
    if not isinstance(old_seeds, list) or sorted(old_seeds) != new_seeds:
        old_shown = (
            _fmt_seeds(sorted(old_seeds)) if isinstance(old_seeds, list) else repr(old_seeds)
        )
        diffs.append(f"seeds {old_shown} -> {_fmt_seeds(new_seeds)}")
    if diffs:
        raise GoldenStale(
            f"{golden_at(golden.path, want_case)} is stale: {'; '.join(diffs)}\n"
            f"Fix: if the change is intended, {regen_text(regen_hint)}",
            path=golden.path,
            case=want_case,
        )


def _same_param(old: Any, new: Any) -> bool:
    # JSON keeps int and float apart (20 vs 20.0 decode differently) and bool apart from int.
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new
    if isinstance(old, int | float) and isinstance(new, int | float):
        return float(old) == float(new)
    return bool(old == new)


def _param_diffs(
    golden: Golden, params: Mapping[str, Any], defaults: Mapping[str, Any], regen_hint: str
) -> list[str]:
    record = golden.meta.get("params")
    if not isinstance(record, Mapping):
        import warnings

        warnings.warn(GoldenNote(
            f"{golden_at(golden.path, str(golden.meta.get('case', '')))} has no record of the "
            "parameters it was made with; it is checked on its input fingerprint alone, so a "
            "parameter that does not change the inputs (an iteration count, an epsilon) "
            f"goes unnoticed. Fix: {regen_text(regen_hint)} (the new golden records them)"
        ), stacklevel=3)
        return []
    diffs = []
    for key in sorted(params):
        new = params[key]
        if key in record:
            if not _same_param(record[key], new):
                diffs.append(f"parameter {key} {record[key]!r} -> {new!r}")
        elif key not in defaults or not _same_param(defaults[key], new):
            diffs.append(f"parameter {key} (not recorded) -> {new!r}")
    return diffs
