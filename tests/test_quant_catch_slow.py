"""The FP8 gate on fresh seeds (slow tier): every planted bug whose own error is at least
twice its honest family's worst is caught, and no honest member or alternative fails
(benchmarks/reliability/fp8_catch.py; its 50-seed tables are in
docs/evidence/2026-12-04-cpu-fp8-families/).
"""

from __future__ import annotations

import pytest

from benchmarks.reliability import fp8_catch
from numcheck.calibrate.headroom import BUG_FACTOR

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("cases", "seeds"), [(("tiny-k384",), 50), (("v3-o-decode-t8",), 5)])
def test_fresh_seeds_catch_every_big_bug_and_pass_every_honest_kernel(
        cases: tuple[str, ...], seeds: int) -> None:
    data = fp8_catch.run(list(range(5000, 5000 + seeds)), "cpu", cases)
    failed = [(r["member"], r["seed"], r["violations"]) for r in data["honest"]
              if r["violations"]]
    assert failed == []
    assert len({r["member"] for r in data["honest"]}) >= 10
    bugs = data["bugs"]
    missed = [(r["bug"], r["seed"]) for r in bugs if r["own_error"] >= BUG_FACTOR
              and not r["caught"]]
    assert missed == []
    # The kernel bugs are each caught on every seed, by the second reference at least.
    for r in bugs:
        if r["bug"] in ("bug_transposed_scales", "bug_shifted_scales", "bug_per_tensor_kernel"):
            assert "quant.sim_ratio" in r["violations"], r
    # The quantizer bugs are caught by the operand checks on every seed the bug changes
    # anything (a stale scale: every seed, the weight changed since the last one).
    for r in bugs:
        if r["bug"] in ("bug_per_tensor_quantizer", "bug_e5m2_for_e4m3", "bug_stale_scale",
                        "bug_no_clamp"):
            assert "quant.operands" in r["violations"], r
