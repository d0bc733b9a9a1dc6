"""Regenerating a case's golden: refuse a reference that went non-finite, keep stable bytes.

``--numcheck-regen`` runs the FP32 reference and stores what it gives, with two guards:

- **Non-finite values.** A NaN or Inf the op does not declare (:attr:`OpSpec.nonfinite`;
  the indexer's -inf mask is declared) means the reference broke for this case (an eps of
  -1, an empty shape): nothing is written and :class:`GoldenRefused` names the case, seed,
  output and count.
- **Reproducibility.** The FP32 reference moves in its last bits with the thread count and
  the CPU's instruction set (:mod:`numcheck.goldens.reproducibility`). When the stored golden was
  made for the same case, op version, inputs, seeds and parameters, and every new value lies
  within the reference's own tolerance of the stored one, the stored bytes are kept and the
  outcome says ``unchanged (within reproducibility tolerance, max diff ...)``. Only a real
  change rewrites the file.

Nothing here imports pytest.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import Case
from numcheck.disk.locking import exclusive
from numcheck.goldens.files import Golden, GoldenError, GoldenStale, load_golden, save_golden
from numcheck.goldens.freshness import GoldenNote, require_fresh
from numcheck.goldens.packing import STATS_FIELDS, STATS_SUFFIX, nonfinite_of, seed_key
from numcheck.goldens.reproducibility import compare_by_dtype, describe_unchanged
from numcheck.ops.spec import OpSpec

#: How refusals name the non-finite kinds (packing.NONFINITE_KINDS, in its order).
_KIND_NAMES = ("nan", "+inf", "-inf")


class GoldenRefused(GoldenError):
    """The reference produced NaN or Inf that the op does not allow: nothing was written."""


@dataclass(frozen=True)
class RegenOutcome:
    """What a regeneration did: ``written`` is True when the file's bytes changed;
    ``note`` is the summary's wording (``rewritten``, ``unchanged``, ``unchanged (within
    reproducibility tolerance, max diff ...)``, ...)."""

    path: Path
    written: bool
    note: str


def nonfinite_counts(name: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """NaN, +Inf and -Inf counts of stored output ``name`` (whole, or from its statistics)."""
    if name in tensors:
        t = tensors[name]
        if not t.dtype.is_floating_point:
            return {}
        x = t.detach().cpu()
        return {"nan": int(torch.isnan(x).sum()), "+inf": int(torch.isposinf(x).sum()),
                "-inf": int(torch.isneginf(x).sum())}
    stats = tensors.get(name + STATS_SUFFIX)
    if stats is None or stats.numel() < len(STATS_FIELDS):
        return {}
    return dict(zip(_KIND_NAMES, nonfinite_of(stats), strict=True))


def refuse_nonfinite(
    op: OpSpec, case: Case, tensors: Mapping[str, torch.Tensor], path: Path | None = None
) -> None:
    """Raise :class:`GoldenRefused` if a stored output holds NaN/Inf its op does not allow."""
    found = []
    for seed in case.seeds:
        for output in op.outputs:
            allowed = op.nonfinite.get(output, ())
            counts = nonfinite_counts(seed_key(seed, output), tensors)
            bad = {k: n for k, n in counts.items() if n and k not in allowed}
            if bad:
                what = ", ".join(f"{n} {k.upper() if k == 'nan' else k}" for k, n in bad.items())
                found.append(f"seed {seed}, output {output!r}: {what}")
    if not found:
        return
    shown = "; ".join(found[:6]) + (f"; ... ({len(found)} in all)" if len(found) > 6 else "")
    declared = ", ".join(f"{o}: {'/'.join(k)}" for o, k in op.nonfinite.items()) or "none"
    first = found[0].split("output '", 1)[1].split("'", 1)[0]  # the output its line names
    raise GoldenRefused(
        f"numcheck: refusing to write the golden of case {case.id} ({case.source}): the "
        f"reference {op.reference!r} of op {op.name!r} produced values it does not allow "
        f"({shown}; allowed non-finite values: {declared}). The stored golden is left as it "
        "was.\nFix: check the case's shape parameters (an epsilon <= 0, an empty or "
        "degenerate shape) in the case file; if the op really produces them, declare them "
        f"in its OpSpec, e.g. nonfinite={{'{first}': ('nan',)}}",
        path=path,
        case=case.id,
    )


def store(
    path: Path,
    op: OpSpec,
    case: Case,
    tensors: Mapping[str, torch.Tensor],
    meta: Mapping[str, Any],
) -> RegenOutcome:
    """Write the reference outputs ``tensors`` (with ``meta``, as made by
    :func:`numcheck.check.make_golden.make_golden`) unless the stored golden is equal or within the
    reference's reproducibility tolerance. Raises :class:`GoldenRefused` (writing nothing)
    when an output holds NaN/Inf the op does not allow."""
    refuse_nonfinite(op, case, tensors, path)
    # Compare and write under the golden's lock: another process regenerating the same case
    # (pytest-xdist workers) waits, then finds the file equal and leaves it alone.
    with exclusive(path):
        try:
            old: Golden | None = load_golden(path, case=case.id, regen_hint="")
        except GoldenError:
            old = None
        if old is None:
            save_golden(path, tensors, meta)
            return RegenOutcome(path, True, "created")
        fresh, recorded = _same_pins(old, op, case, str(meta["fingerprint"]))
        cpu = {k: t.detach().cpu() for k, t in tensors.items()}
        by_dtype = compare_by_dtype(old.tensors, cpu, stats_suffix=STATS_SUFFIX)
        if by_dtype is None or not all(d.within for d in by_dtype.values()) or not fresh:
            save_golden(path, tensors, meta)
            return RegenOutcome(path, True, "rewritten")
        if not recorded:
            # Same outputs, but the old metadata lacks the parameter record: add it, keeping
            # the stored output bytes.
            save_golden(path, old.tensors, {**meta, "created": old.meta.get("created")})
            return RegenOutcome(path, True, "metadata updated (parameters recorded); "
                                f"outputs {describe_unchanged(by_dtype)}")
        return RegenOutcome(path, False, describe_unchanged(by_dtype))


def _same_pins(old: Golden, op: OpSpec, case: Case, fingerprint: str) -> tuple[bool, bool]:
    """(the stored golden is fresh for this case, it records its parameters)."""
    recorded = isinstance(old.meta.get("params"), Mapping)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GoldenNote)
            require_fresh(old, op_version=op.version, fingerprint=fingerprint,
                          seeds=case.seeds, regen_hint="", case=case.id, op=op.name,
                          params=case.params,
                          param_defaults={n: s.default for n, s in op.params.items()})
    except GoldenStale:
        return False, recorded
    if old.meta.get("reference") not in (None, op.reference):
        return False, recorded
    return True, recorded

