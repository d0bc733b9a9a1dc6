"""Copy and cast budgets: every shipped variant has a measured limit, one extra full copy of
the largest input fails it, and a user's variant gets its precision's default."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

import pytest

from numcheck.ops.registry import get_op
from numcheck.overhead.limits import (
    DEFAULT_CAST_BYTES_RATIO,
    DEFAULT_COPY_SHARE,
    audit_variant,
    default_overhead,
    overhead_violations,
)
from tests import planted
from tests.shipped import shipped_cases

CASES = [c for c in shipped_cases() if not c.perf_only]
#: One extra full copy of each op's largest input, or of its largest operand, as planted,
#: and the limit that catches it: a second pass over an input (whatever the case's shape or
#: seed), or the bytes of a copy of a derived operand (K^T) against the case's ceiling.
COPY_BUGS = {
    "indexer": (("kv_cache_copy", "casts.input_copies"), ("kt_contiguous", "casts.cast_bytes_ratio")),
    "mhc_pre": (("x_copy", "casts.input_copies"),),
}


def _raw_overhead(source: Path, table: str) -> dict[str, dict[str, float]]:
    return _raw(source)[table].get("overhead", {})


@functools.cache
def _raw(source: Path) -> dict[str, Any]:
    """A case file as TOML, read once for its ~30 tables' tests (read-only here)."""
    with source.open("rb") as handle:
        return tomllib.load(handle)


#: One case per case table: a sweep's points share theirs.
TABLES = list({(c.source, c.table): c for c in CASES}.values())


@pytest.mark.parametrize("case", TABLES, ids=lambda c: f"{c.op}::{c.table}")
def test_every_shipped_variant_has_a_measured_cast_limit(case: object) -> None:
    op = get_op(case.op)  # type: ignore[attr-defined]
    raw = _raw_overhead(case.source, case.table)  # type: ignore[attr-defined]
    for variant in (op.reference, *case.variants):  # type: ignore[attr-defined]
        assert "max_cast_bytes_ratio" in raw.get(variant, {}), (case.id, variant)  # type: ignore[attr-defined]


def test_input_copies_counts_copies_of_an_input_as_reads_of_it() -> None:
    planted.register_all()
    op = get_op("mhc_pre")
    p = op.resolve_params(None, {"tokens": 8, "hidden": 256})
    inputs = op.make_inputs(p, 0)
    good = audit_variant(op.variants["bf16"].fn, inputs, p)
    bad = audit_variant(op.variants["x_copy"].fn, inputs, p)
    assert good.ledger.input_passes() == {"x": 1.0, "hc_fn": 1.0}
    top = bad.input_reads()[0]  # the input read most
    assert (top.name, top.passes) == ("x", 2.0)  # x.clone(), then .float() of the clone
    (v,) = overhead_violations(bad, default_overhead("bf16"), {"casts"})
    assert v.key == "casts.input_copies" and v.limit == 1.0
    assert v.detail.startswith("input 'x' was read 2.00 times over by casts/copies (bf16 copy of "
                               "[8, 4, 256] at tests/planted.py:")
    assert v.detail.endswith(": convert or copy it once and reuse that (or a view of it)")


def test_defaults_per_precision_class() -> None:
    for precision in ("fp32", "tf32", "bf16"):
        budget = default_overhead(precision)
        assert budget.max_cast_bytes_ratio == DEFAULT_CAST_BYTES_RATIO[precision]
        assert budget.max_copy_share == DEFAULT_COPY_SHARE[precision]  # CUDA only: kernels gate
    # A class without measurements keeps no limit rather than a made-up one.
    assert default_overhead("int4").max_cast_bytes_ratio is None


#: Per op: inputs an extra ``.clone()`` of which must fail the bf16 path's budget (it
#: already converts or copies each once; the largest input's clone is planted above), and
#: the metadata-sized ones whose extra copy is listed, never failed (block tables, context
#: lengths, mHC's scale and base; the indexer's head weights, which the bf16 path reads
#: without copying: one copy is allowed).
CLONED = {
    "indexer": ({"q"}, {"block_table", "context_lens", "weights"}),
    "mhc_pre": ({"hc_fn"}, {"hc_scale", "hc_base"}),
}


def _with_clone_of(fn: Any, name: str) -> Any:
    def variant(inputs: dict[str, Any], p: dict[str, Any]) -> Any:
        return fn(dict(inputs, **{name: inputs[name].clone()}), p)  # the extra copy
    return variant


#: The fixed shipped cases of the ops with planted copy bugs that run their bf16 variant: at
#: a sweep's smallest points another input is the largest (q of a 1-token context, mHC's
#: hc_fn beside one token's x), so these bugs are about the others.
COPY_CASES = [c for c in CASES
              if c.sweep is None and c.op in COPY_BUGS and "bf16" in c.variants]


@pytest.mark.parametrize("case", COPY_CASES, ids=lambda c: f"{c.op}::{c.id}")
def test_one_extra_full_copy_of_the_largest_input_fails(case: object) -> None:
    planted.register_all()
    op = get_op(case.op)  # type: ignore[attr-defined]
    p = case.params  # type: ignore[attr-defined]
    inputs = op.make_inputs(p, case.seeds[0])  # type: ignore[attr-defined]
    declared = op.min_bytes(p) if op.min_bytes is not None else None
    budget = case.overhead["bf16"]  # type: ignore[attr-defined]
    good = audit_variant(op.variants["bf16"].fn, inputs, p, min_bytes=declared)
    assert overhead_violations(good, budget, {"casts"}) == []
    for bug, key in COPY_BUGS[case.op]:  # type: ignore[attr-defined]
        bad = audit_variant(op.variants[bug].fn, inputs, p, min_bytes=declared)
        found = [v.key for v in overhead_violations(bad, budget, {"casts"})]
        assert key in found, (bug, bad.cast_bytes_ratio, bad.input_reads())
    # Copies made by data-movement ops (torch.cat, index_select, flip, where, pad, repeat):
    # each fails input_copies, naming the input, the op and the planted line.
    for bug, name in planted.DATA_MOVEMENT_COPIES[case.op].items():  # type: ignore[attr-defined]
        bad = audit_variant(op.variants[bug].fn, inputs, p, min_bytes=declared)
        found = {v.key: v for v in overhead_violations(bad, budget, {"casts"})}
        assert "casts.input_copies" in found, (bug, bad.input_reads())
        detail = found["casts.input_copies"].detail
        assert detail.startswith(f"input '{name}' was read "), (bug, detail)
        line = planted_line(bug)
        assert f" at tests/planted.py:{line} (" in detail, (bug, line, detail)
    # Every meaningful input copied once more fails; a metadata-sized one is only listed.
    meaningful, metadata = CLONED[case.op]  # type: ignore[attr-defined]
    for name in meaningful | metadata:
        bad = audit_variant(_with_clone_of(op.variants["bf16"].fn, name), inputs, p,
                            min_bytes=declared)
        found = [v for v in overhead_violations(bad, budget, {"casts"})
                 if v.key == "casts.input_copies"]
        if name in meaningful:
            assert found and found[0].detail.startswith(f"input '{name}' was read"), name
        else:
            assert not found, (name, found)
            assert any(e.input == name for e in bad.ledger.entries)  # listed all the same


def planted_line(bug: str) -> int:
    """The line of the data-movement op in the planted variant ``bug`` (tests/planted.py)."""
    import inspect

    fn = {name: f for table in planted.PLANTED.values() for name, (f, _) in table.items()}[bug]
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if text.endswith("# the copy\n"))
