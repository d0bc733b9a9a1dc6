"""Each input distribution and the decode-rows sweep reach the bug they name (issue 48).

Four planted bugs (tests/planted_coverage.py), each a twin of the shipped bf16 and held to
its budget: an RMS without its epsilon (mHC), an FTZ path for e4m3 subnormals, a top-k on
fp16 scores, and a row masked at the end of its last page rather than at its last token
(the indexer). Each is caught by the shipped case built to reach it, on every seed, while
its honest twin (the shipped bf16) passes there; and each passes where that case's
distribution or shape is absent (the fixed shipped cases, the one-request decode sweep).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests import planted_coverage
from tests.shipped import shipped_cases
from tests.variant_tables import register_table

from numcheck.cases import Case
from numcheck.check import run_check
from numcheck.check.make_golden import fresh_golden
from numcheck.ops import registry
from numcheck.selftest import Planted, catch_table, fresh_seed_outcomes, held_to

ROOT = Path(__file__).resolve().parent.parent
CASES = {c.id: c for c in shipped_cases()}
#: Seeds beyond each case's own: fresh references made here.
FRESH = [7001, 7002]

#: bug -> (op, the case that reaches it).
REACHES = {
    "mhc_rms_no_eps": ("mhc_pre", "mhc-zero-rows-t32"),
    "indexer_ftz": ("indexer", "indexer-subnormal-b2-l1k"),
    "indexer_fp16_topk": ("indexer", "indexer-near-max-b2-l2k"),
}


@pytest.fixture(autouse=True)
def planted() -> Iterator[None]:
    with registry.isolated():
        register_table(planted_coverage.COVERAGE_PLANTED)
        yield


def outcomes(case: Case, variant: str, seeds: list[int]) -> list[tuple[int | None, bool, str]]:
    """``variant`` held to the case's bf16 budget on each seed, against a fresh reference."""
    held = held_to(case, variant, "bf16")
    return [(o.seed, o.passed, o.reason)
            for o in fresh_seed_outcomes(held, [variant], seeds, gates=())]


@pytest.mark.parametrize("bug", sorted(REACHES))
def test_the_case_built_for_it_catches_it_on_every_seed(bug: str) -> None:
    _, case_id = REACHES[bug]
    case = CASES[case_id]
    seeds = [*case.seeds, *FRESH]
    caught = outcomes(case, bug, seeds)
    assert [passed for _, passed, _ in caught] == [False] * len(seeds), caught
    twin = outcomes(case, "bf16", seeds)
    assert [(s, r) for s, passed, r in twin if not passed] == []


def test_how_each_is_caught() -> None:
    """The failure is the bug's own: NaN where the padding tokens are, logits that lost
    their subnormal products, a selection among infinities (its logits are right)."""
    keys = {}
    for bug, (op_name, case_id) in REACHES.items():
        case = CASES[case_id]
        one = replace(held_to(case, bug, "bf16"), seeds=case.seeds[:1])
        op = registry.get_op(op_name)
        golden, inputs = fresh_golden(op, one)
        result = run_check(op, one, bug, "cpu", inputs, golden)
        keys[bug] = {v.key for v in result.violations}
    assert "mixes.nan" in keys["mhc_rms_no_eps"]
    assert {"logits.rel_fro", "topk.tie_recall_min"} <= keys["indexer_ftz"]
    assert keys["indexer_fp16_topk"] and all(k.startswith("topk.")
                                             for k in keys["indexer_fp16_topk"])


@pytest.mark.parametrize("bug", sorted(REACHES))
def test_the_fixed_shipped_cases_on_normal_inputs_miss_it(bug: str) -> None:
    """The distribution is what catches it: on the op's own draw every fixed shipped case
    passes it (on its golden and seeds)."""
    op, _ = REACHES[bug]
    fixed = [c for c in CASES.values() if c.op == op and c.sweep is None and c.inputs.default
             and not c.perf_only and "cpu" in c.devices and "bf16" in c.variants]
    assert len(fixed) >= 3
    rows = catch_table(fixed, [Planted(op, bug, "bf16")], ROOT / "goldens", gates=())
    assert [(c.id, o.reason) for _, c, o in rows if not o.passed] == []


# -- the decode sweep whose rows end before the width -------------------------------------------


def decode_points(case: str) -> list[Case]:
    return [c for c in CASES.values() if c.sweep is not None and c.sweep.case == case]


def test_a_row_masked_late_is_caught_where_a_row_ends_before_the_width() -> None:
    """``indexer-decode-rows`` ends its first request at each swept length, before the
    batch's width: the late mask shows wherever that length is not a whole number of pages.
    ``indexer-decode-l`` (one request, which spans the width) never sees it."""
    rows_sweep, one_request = decode_points("indexer-decode-rows"), decode_points(
        "indexer-decode-l")
    assert len(rows_sweep) >= 9 and len(one_request) >= 9
    bug = [Planted("indexer", "indexer_row_end_late", "bf16")]
    page = rows_sweep[0].params["block_size"]
    caught = sorted(c.id for _, c, o in catch_table(rows_sweep, bug, ROOT / "goldens", gates=())
                    if not o.passed)
    assert caught == sorted(c.id for c in rows_sweep if c.params["short_context"] % page)
    missed = catch_table(one_request, bug, ROOT / "goldens", gates=())
    assert [(c.id, o.reason) for _, c, o in missed if not o.passed] == []
    for case in rows_sweep:  # the honest twin passes every point on a fresh seed
        fresh = replace(case, seeds=(7001,))
        assert [o.reason for o in fresh_seed_outcomes(fresh, ["bf16"], [7001], gates=())
                if not o.passed] == []
