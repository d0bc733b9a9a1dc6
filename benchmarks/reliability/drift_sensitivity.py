"""What the drift rules catch: calc_diff growth of the bf16 indexer under a small weight scale.

    python -m benchmarks.reliability.drift_sensitivity

Scales the bf16 indexer's head weights by 1 + e (a plausible bug: a folded constant off by
a rounding) on the shipped case v4flash-b4-l2k (CPU, seeds 0 and 1), and prints the worst
seed's logits calc_diff against the FP32 reference, its ratio to the unscaled variant's,
and which default drift rule fires (same device: > 1.25x; across device names: > 2x).
"""

from __future__ import annotations

import sys
from pathlib import Path

from numcheck.cases import load_cases
from numcheck.numerics.metrics import calc_diff
from numcheck.ops.registry import get_op
from numcheck.report.drift_result import Rules

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    case = next(c for c in load_cases(ROOT / "cases") if c.id == "v4flash-b4-l2k")
    op = get_op(case.op)
    rules = Rules()
    base = None
    print(f"{'weights x':>10} {'calc_diff':>10} {'ratio':>6} {'same device':>12} {'other device':>13}")
    for e in (0.0, 0.0005, 0.001, 0.0015, 0.002, 0.003):
        worst = 0.0
        for seed in case.seeds:
            inputs = op.make_inputs(case.params, seed)
            ref = op.variants["fp32"].fn(inputs, case.params)["logits"]
            scaled = dict(inputs, weights=inputs["weights"] * (1 + e))
            out = op.variants["bf16"].fn(scaled, case.params)["logits"]
            worst = max(worst, float(calc_diff(out, ref)))
        base = base or worst
        ratio = worst / base
        same = "regression" if ratio > rules.same_device_factor else "changed" if e else "same"
        other = "regression" if ratio > rules.calc_diff_factor else "same"
        print(f"{1 + e:>10.4f} {worst:>10.3g} {ratio:>6.2f} {same:>12} {other:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
