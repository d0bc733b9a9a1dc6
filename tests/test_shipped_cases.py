"""The shipped cases and goldens: present, fresh, small, and strict enough to catch bugs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from numcheck.cases import Case
from numcheck.check.against_golden import run_numerics
from numcheck.check.run import CaseInputs
from numcheck.goldens.case_golden import CaseGolden
from numcheck.goldens.files import golden_path
from numcheck.ops.registry import get_op
from numcheck.selftest import shipped_golden
from tests import planted  # tests/planted.py
from tests.shipped import shipped_cases

ROOT = Path(__file__).resolve().parent.parent
ALL_CASES = {f"{c.op}::{c.id}": c for c in shipped_cases()}
#: Cases with goldens; perf-only cases (cases/perf.toml) have none by design.
CASES = {k: c for k, c in ALL_CASES.items() if not c.perf_only}


#: Cases whose inputs alone are hundreds of MB (linear's CUDA case at o_proj's real weight,
#: 7168 x 16384): generating them costs seconds on a CPU, so their parameters of the per-case
#: tests below run in the slow tier.
LARGE_BYTES = 100e6


def _keys(cases: dict[str, Case]) -> list[object]:
    """Case keys as test parameters, the large ones in the slow tier."""
    def large(c: Case) -> bool:
        min_bytes = get_op(c.op).min_bytes
        return min_bytes is not None and min_bytes(c.params) > LARGE_BYTES

    return [pytest.param(k, marks=pytest.mark.slow) if large(c) else k
            for k, c in sorted(cases.items())]


def _golden(case: Case) -> tuple[CaseGolden, CaseInputs]:
    """The shipped golden, validated for ``case`` (fresh, every output as recorded)."""
    return shipped_golden(case, ROOT / "goldens")


def test_goldens_folder_stays_under_20_mb() -> None:
    total = sum(p.stat().st_size for p in (ROOT / "goldens").rglob("*") if p.is_file())
    assert total < 20 * 2**20


@pytest.mark.parametrize("key", _keys(CASES))
def test_every_case_has_a_fresh_golden(key: str) -> None:
    case = CASES[key]
    golden, inputs = _golden(case)  # validated: fresh for the case, every output as recorded
    assert golden.meta["op"] == case.op and golden.meta["case"] == case.id
    # The case's inputs (a CaseInputs of this case), each seed's made once.
    assert golden.meta["fingerprint"] == inputs.fingerprint()


def test_no_golden_without_a_case() -> None:
    expected = {golden_path(ROOT / "goldens", c.op, c.id) for c in CASES.values()}
    assert set((ROOT / "goldens").rglob("*.safetensors")) == expected


def test_near_tie_case_really_has_ties() -> None:
    # The adversarial case must exercise tie-awareness: bf16 flips tokens, all explained.
    case = CASES["indexer::v4flash-b4-l2k-ties"]
    op = get_op(case.op)
    result = run_numerics(op, case, "bf16", "cpu", *_golden(case))
    assert result.passed
    assert result.topk_value("recall_min") < 1.0
    assert result.topk_value("tie_recall_min") == 1.0


# Each planted bug, held to the loosest shipped budget of its op (bf16), must fail on the
# metric that points at it.
PLANTED_EXPECTATIONS = [
    ("indexer::v4flash-b4-l2k-ties", "no_kv_scale", {"logits.rel_fro", "topk.tie_recall_min"}),
    ("indexer::v4pro-b2-l4k-mtp2", "mask_off_by_one", {"logits.inf_mask"}),
    ("indexer::v4flash-b4-l2k", "far_flips", {"topk.tie_recall_min"}),
    ("mhc_pre::v4pro-t32", "y_scaled", {"y.rel_fro", "y.calc_diff"}),
]


@pytest.mark.parametrize(("key", "variant", "metrics"), PLANTED_EXPECTATIONS)
def test_planted_bug_fails_shipped_budget(key: str, variant: str, metrics: set[str]) -> None:
    planted.register_all()
    case = CASES[key]
    case = replace(case, budgets={**case.budgets, variant: case.budgets["bf16"]})
    op = get_op(case.op)
    result = run_numerics(op, case, variant, "cpu", *_golden(case))
    assert not result.passed
    found = {f"{v.output}.{v.metric}" for v in result.violations}
    assert metrics <= found, found


def test_perf_cases_are_cuda_only_and_catch_the_round_trip() -> None:
    perf = {k: c for k, c in ALL_CASES.items() if c.perf_only}
    assert len(perf) >= 4 and all(c.devices == ("cuda",) for c in perf.values())
    seed = perf["mhc_pre::perf-mhc-v4pro-t4k-prefill"]
    assert seed.params["tokens"] >= 1000 and seed.params["hidden"] * seed.params["hc_mult"] == 28672
    # Expected to fail the speed gate (a decided miss: noise never counts) and the casts.
    assert seed.expect["bf16_roundtrip"].gates == ("perf", "casts")
    assert seed.expect["bf16_roundtrip"].covers("perf.speedup_min")
    assert not seed.expect["bf16_roundtrip"].covers("perf.speedup_undecided")
    # The known-bad round trip is held to the very gate the fix passes.
    assert seed.perf["bf16_roundtrip"].threshold("H200", "cuda") == seed.perf["bf16"].threshold(
        "H200", "cuda")
    # Every mHC perf case runs the round trip as a known-bad variant the cast ledger catches.
    for case in perf.values():
        if case.op == "mhc_pre":
            assert case.expect["bf16_roundtrip"].covers("casts.round_trips"), case.id


def test_perf_cases_set_cast_limits_at_their_own_shapes() -> None:
    """No variant of a perf case is left at its class's wide default ceiling without saying
    so: each has a limit measured at the case's shape, or a declared expected failure (the
    prefill bf16 indexer's widened scores) with its reason."""
    from numcheck.overhead.limits import default_overhead

    op_variants = {name: set(get_op(name).variants) for name in ("indexer", "mhc_pre", "linear")}
    for case in (c for c in ALL_CASES.values() if c.perf_only):
        for variant in set(case.variants) & op_variants[case.op]:
            expected = case.expect.get(variant)
            if expected is not None and expected.fails == ("casts.cast_bytes_ratio",):
                assert expected.reason, (case.id, variant)
                continue
            limit = case.overhead[variant].max_cast_bytes_ratio
            ceiling = default_overhead(get_op(case.op).variants[variant].precision)
            assert limit is not None and limit < (ceiling.max_cast_bytes_ratio or 1e9), (
                case.id, variant)
    prefill = ALL_CASES["indexer::perf-indexer-v4flash-prefill-2k"]
    assert prefill.expect["bf16"].fails == ("casts.cast_bytes_ratio",)
    assert "bf16_fp32out" in prefill.expect["bf16"].reason
def test_roundtrip_variant_is_a_strict_xfail_on_casts_in_every_mhc_case() -> None:
    for case in CASES.values():
        if case.op == "mhc_pre" and "bf16_roundtrip" in case.variants:
            expected = case.expect["bf16_roundtrip"]
            assert (expected.gates, expected.outputs, expected.metrics) == (("casts",), (), ()), (
                case.id)
            assert case.overhead["bf16_roundtrip"].round_trips is False


def test_shipped_variants_pass_the_casts_gate_except_the_known_bad_one() -> None:
    from numcheck.overhead.limits import audit_variant, overhead_violations

    for key in ("mhc_pre::v4flash-t64", "indexer::v4flash-b2-l1k-contiguous"):
        case = CASES[key]
        op = get_op(case.op)
        inputs, _ = CaseInputs(op, case).get(case.seeds[0])
        for variant in (op.reference, *case.variants):
            if "cpu" not in op.variants[variant].devices:
                continue
            report = audit_variant(op.variants[variant].fn, inputs, case.params,
                                   min_bytes=op.min_bytes(case.params))
            found = {v.key for v in overhead_violations(report, case.overhead[variant], {"casts"})}
            bad = {"casts.round_trips", "casts.cast_bytes_ratio"}
            assert found == (bad if variant == "bf16_roundtrip" else set()), (key, variant)
