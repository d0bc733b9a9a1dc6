"""A golden read and validated once for the case it serves: what the numerics of a check read.

A check compares a variant with its case's golden on every seed. Everything about the golden
itself is checked here, once, before any variant runs:

- the file: readable safetensors, its content hash, its format and required metadata
  (:func:`numcheck.goldens.files.load_golden`);
- freshness: made for this case and op, from these inputs, op version, seeds and parameters
  (:func:`numcheck.goldens.freshness.require_fresh`);
- every output of every seed: present (whole, or a sample's positions and values), and, where
  the metadata records the reference's shape and dtype, stored in that shape and dtype, with
  sample positions inside that shape.

What comes out, a :class:`CaseGolden`, hands each (seed, output) on as a
:class:`~numcheck.goldens.packing.StoredOutput`; the numerics read those and never call back
here. A problem raises the :class:`~numcheck.goldens.files.GoldenError` that names it, with
the command that regenerates the golden.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from math import prod
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from numcheck.goldens.files import Golden, GoldenFormatError, load_golden
from numcheck.goldens.freshness import require_fresh
from numcheck.goldens.packing import StoredOutput, seed_key, stored_output, valid_positions
from numcheck.precision import dtype_name

if TYPE_CHECKING:
    from numcheck.cases import Case
    from numcheck.ops.spec import OpSpec

__all__ = ["CaseGolden", "load_for_case", "validate_for_case"]


@dataclass(frozen=True)
class CaseGolden:
    """A golden validated for one case: its stored outputs per (seed, output), ready to read.

    ``case`` is the id of the case it was validated for and ``seeds`` that case's seeds;
    ``regen_hint`` the command that regenerates it (for messages). ``golden`` is the file as
    read (tensors and decoded metadata).
    """

    golden: Golden
    case: str
    seeds: tuple[int, ...]
    outputs: Mapping[tuple[int, str], StoredOutput]
    regen_hint: str = ""

    @property
    def path(self) -> Path:
        return self.golden.path

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.golden.meta

    def output(self, seed: int, name: str) -> StoredOutput:
        """The stored reference of output ``name`` on ``seed``."""
        try:
            return self.outputs[seed, name]
        except KeyError:
            raise ValueError(
                f"{self.path}: output {name!r} of seed {seed} was not validated for case "
                f"{self.case!r} (seeds {list(self.seeds)}): a golden serves the case it was "
                "validated for"
            ) from None

    def require(self, case: Case) -> None:
        """Raise ValueError unless this golden was validated for ``case``'s id and seeds: a
        golden validated for one case never stands in for another."""
        if case.id != self.case or not set(case.seeds) <= set(self.seeds):
            raise ValueError(
                f"{self.path} was validated for case {self.case!r} (seeds {list(self.seeds)}), "
                f"not for case {case.id!r} (seeds {list(case.seeds)})"
            )

    def format_error(self, problem: str, fix: str) -> GoldenFormatError:
        """A :class:`GoldenFormatError` about this golden: ``golden <path> for case <case>:
        <problem>`` and the fix."""
        case = str(self.meta.get("case", ""))
        return GoldenFormatError(f"golden {self.path} for case {case}: {problem}\nFix: {fix}",
                                 path=self.path, case=case)


def load_for_case(
    path: Path, op: OpSpec, case: Case, *, fingerprint: Callable[[], str], regen_hint: str
) -> CaseGolden:
    """Read the golden at ``path`` and validate it for ``case`` (:func:`validate_for_case`).

    ``fingerprint`` gives the case's input fingerprint; it is called only once the file has
    been read, so a missing or corrupt golden is reported before any input is generated.
    """
    golden = load_golden(path, case=case.id, regen_hint=regen_hint)
    return validate_for_case(golden, op, case, fingerprint=fingerprint(), regen_hint=regen_hint)


def validate_for_case(
    golden: Golden, op: OpSpec, case: Case, *, fingerprint: str, regen_hint: str
) -> CaseGolden:
    """Check that ``golden`` (read and verified by :func:`~numcheck.goldens.files.load_golden`,
    or made in memory) is fresh for ``case`` and holds every output of ``op`` for every seed,
    as its metadata records them. Raises :class:`~numcheck.goldens.files.GoldenStale` or
    :class:`~numcheck.goldens.files.GoldenFormatError`; returns the :class:`CaseGolden`."""
    require_fresh(
        golden,
        op_version=op.version,
        fingerprint=fingerprint,
        seeds=case.seeds,
        regen_hint=regen_hint,
        case=case.id,
        op=op.name,
        params=case.params,
        param_defaults={name: spec.default for name, spec in op.params.items()},
    )
    checked = CaseGolden(golden, case.id, tuple(case.seeds), {}, regen_hint)
    records = _records(checked)
    outputs: dict[tuple[int, str], StoredOutput] = {}
    for seed in case.seeds:
        for name in op.outputs:
            key = seed_key(seed, name)
            stored = stored_output(key, golden.tensors, path=golden.path, case=case.id,
                                   regen_hint=regen_hint)
            outputs[seed, name] = _as_recorded(checked, stored, name, records.get(key))
    return replace(checked, outputs=MappingProxyType(outputs))


def _records(golden: CaseGolden) -> Mapping[str, Any]:
    """The metadata's record of each output's shape and dtype (``outputs``; empty in a
    golden written before it was kept)."""
    records = golden.meta.get("outputs", {})
    if not isinstance(records, Mapping):
        raise golden.format_error(
            f"its metadata's outputs record is {type(records).__name__}, not a table",
            f"regenerate it with: {golden.regen_hint}")
    return records


def _as_recorded(golden: CaseGolden, stored: StoredOutput, output: str,
                 record: Any) -> StoredOutput:
    """``stored`` with the reference's recorded shape and dtype, after checking that the
    golden holds it in them (a golden whose tensor disagrees with its own metadata was edited
    by hand or by a broken tool: its numbers cannot be trusted as the reference)."""
    if record is None:
        return stored
    fix = f"regenerate it with: {golden.regen_hint}"
    if (not isinstance(record, Mapping) or not isinstance(record.get("dtype"), str)
            or not isinstance(record.get("shape"), list)
            or not all(isinstance(s, int) and s >= 0 for s in record["shape"])):
        raise golden.format_error(f"output {output!r} has a malformed metadata record "
                                  f"{record!r} (expected shape and dtype)", fix)
    shape, dtype = tuple(record["shape"]), record["dtype"]
    held = dtype_name(stored.values.dtype)
    if held != dtype:
        raise golden.format_error(
            f"output {output!r} is stored as {held} but its metadata says {dtype} (goldens "
            "hold the reference's own dtype)", fix)
    if stored.stored_shape is not None and stored.stored_shape != shape:
        raise golden.format_error(
            f"output {output!r} is stored in shape {list(stored.stored_shape)} but its "
            f"metadata says {list(shape)}", fix)
    if stored.positions is not None and not valid_positions(stored.positions, stored.values,
                                                            prod(shape)):
        raise golden.format_error(
            f"output {output!r}: its stored sample positions do not fit its shape "
            f"{list(shape)}", fix)
    return replace(stored, recorded_shape=shape, recorded_dtype=dtype)
