"""bf16_folded (the folded-scale indexer scheme) measured on its own: its worst error per
indexer case over fresh seeds, against a fresh CPU reference, held to its own budget (the way
numcheck.calibrate.honest measures a family, with the scheme as a family of one).

    python -m benchmarks.numerics.folded_calibration FIRST_SEED N OUT.json [cpu|cuda]
    python -m benchmarks.numerics.folded_calibration 4000 100 \
        docs/evidence/2026-12-01-cpu-honest-families/bf16-folded-calibration-cpu.json  # calibration
    python -m benchmarks.numerics.folded_calibration 8000 50 \
        docs/evidence/2026-12-01-cpu-honest-families/bf16-folded-heldout-cpu.json      # held out
    python -m numcheck.heldout docs/evidence/2026-12-01-cpu-honest-families/bf16-folded-heldout-cpu.json

docs/budgets.md ("Not in the bf16 family: the folded-scale indexer") has the policy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from numcheck.calibrate.honest import measure_family
from numcheck.cases import load_cases

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    first, n, out = int(argv[0]), int(argv[1]), Path(argv[2])
    device = argv[3] if len(argv) > 3 else "cpu"  # where bf16_folded runs (reference: CPU)
    cases = [c for c in load_cases(ROOT / "cases")
             if c.op == "indexer" and not c.perf_only and "bf16_folded" in c.variants]
    results = {}
    for case in cases:
        r = measure_family(case, "bf16_folded", ["bf16_folded"], range(first, first + n),
                           device=device)
        results[f"indexer::{case.id}"] = {"bf16_folded": r}
        w = r["worst"]["logits"]
        print(case.id, " ".join(f"{k}={w[k]:.4g}" for k in
                                ("max_err_ratio", "frac_outside", "rel_fro", "calc_diff")),
              flush=True)
    meta = {"device": device, "seeds": [first, first + n - 1], "members": ["bf16_folded"]}
    out.write_text(json.dumps({"meta": meta, "cases": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
