"""The shipped sweeps catch tile bugs the fixed shipped cases miss (issue 37).

Two planted indexer bugs (tests/planted_sweeps.py), each wrong only at shapes a fixed case
with random context lengths almost never draws: a request whose last 128-token tile holds one
token (L = 128 k + 1: the fused kernel's CUDA tile), and an MTP request whose last page holds
63 of 64 tokens. Held to bf16's budgets, both pass every fixed shipped indexer case on its
shipped golden and seeds, and fail the shipped sweeps exactly at the points where they sit.
The shipped variants pass every point on a fresh seed here; the honest families on ten
(benchmarks/numerics/heldout_families.py, docs/evidence/2026-12-04-cpu-sweeps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from numcheck.cases import Case
from numcheck.ops import registry
from numcheck.selftest import Planted, catch_table, fresh_seed_outcomes
from tests import planted_sweeps
from tests.shipped import shipped_cases
from tests.variant_tables import register_table

ROOT = Path(__file__).resolve().parent.parent
CASES = shipped_cases()
#: The indexer sweeps' points that run on the CPU.
SWEEP_POINTS = [c for c in CASES if c.op == "indexer" and c.sweep is not None
                and "cpu" in c.devices]
#: Today's fixed indexer cases: no sweep, the op's own inputs.
FIXED = [c for c in CASES if c.op == "indexer" and c.sweep is None and not c.perf_only
         and c.inputs.default]


def fires(bug: str, length: int, case: Case) -> bool:
    """Whether ``bug`` fires on a request of ``length`` tokens in ``case``."""
    if bug == "tile_count_off_by_one":
        return length % planted_sweeps.TILE == 1
    page = case.params["block_size"]
    return case.params["next_n"] > 1 and length % page == page - 1


def lengths(case: Case) -> list[int]:
    """Every request's context length in ``case``, over its seeds (drawn once per shipped
    case: each test asks for them again)."""
    key = (case.op, case.id)
    if key not in _LENGTHS:
        op = registry.get_op("indexer")
        _LENGTHS[key] = [int(n) for seed in case.seeds
                         for n in op.make_inputs(case.params, seed)["context_lens"]]
    return _LENGTHS[key]


_LENGTHS: dict[tuple[str, str], list[int]] = {}


def where_it_sits(bug: str, case: Case) -> bool:
    """Whether ``bug`` fires on some request of ``case``."""
    return any(fires(bug, n, case) for n in lengths(case))


@pytest.fixture(autouse=True)
def planted() -> object:
    with registry.isolated():
        register_table({"indexer": planted_sweeps.SWEEP_PLANTED_TABLE})
        yield


@pytest.mark.parametrize("bug", sorted(planted_sweeps.SWEEP_PLANTED))
def test_the_sweeps_catch_it_exactly_where_it_sits(bug: str) -> None:
    rows = catch_table(SWEEP_POINTS, [Planted("indexer", bug, "bf16")], ROOT / "goldens",
                       gates=())
    assert len(rows) == len(SWEEP_POINTS) >= 18
    caught = sorted(c.id for _, c, o in rows if not o.passed)
    assert caught, f"{bug}: no sweep point caught it"
    assert caught == sorted(c.id for c in SWEEP_POINTS if where_it_sits(bug, c))


@pytest.mark.parametrize("bug", sorted(planted_sweeps.SWEEP_PLANTED))
def test_the_fixed_shipped_cases_miss_it(bug: str) -> None:
    assert len(FIXED) >= 7
    rows = catch_table(FIXED, [Planted("indexer", bug, "bf16")], ROOT / "goldens", gates=())
    assert len(rows) == len(FIXED)
    assert [(c.id, o.reason) for _, c, o in rows if not o.passed] == []
    # Not because the bug is invisible there: none of their requests has its shape.
    assert sum(len(lengths(c)) for c in FIXED) >= 20
    assert not any(where_it_sits(bug, c) for c in FIXED)


def test_honest_variants_pass_every_cpu_sweep_point_on_a_fresh_seed() -> None:
    points = [c for c in CASES if c.sweep is not None and "cpu" in c.devices]
    op = {name: registry.get_op(name) for name in ("indexer", "mhc_pre")}
    failed = []
    for case in points:
        here = [v for v in case.variants if "cpu" in op[case.op].variants[v].devices]
        for o in fresh_seed_outcomes(case, here, [5000], gates=()):
            if not o.passed:
                failed.append(f"{case.id} {o.variant}: {o.reason}")
    assert failed == []
