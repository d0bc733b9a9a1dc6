"""Measure before budgeting: the error of every variant over many seeds.

    python -m numcheck.calibrate [--device cpu|cuda] [--seeds 20] [--cases cases] [--json out.json]

For every case and variant it runs the reference on the CPU (where the shipped goldens are
made) and the variant on ``--device``, over the case's seeds plus ``--seeds`` fresh ones,
and prints the worst value of each metric, plus the smallest relative tie band that would
explain every top-k flip. docs/budgets.md says how budgets are set from these numbers.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from numcheck.budgets import ERROR_METRICS
from numcheck.cases import Case, load_cases
from numcheck.check import run_check
from numcheck.goldens import Golden
from numcheck.numerics import SeedResult, fresh_golden, seed_key
from numcheck.ops.registry import get_op
from numcheck.topk import topk_agreement


def measure(
    case: Case, device: str, extra_seeds: int, first_seed: int = 1000
) -> dict[str, dict[str, float]]:
    """Worst metric values over seeds, per ``variant/output``.

    Each seed is one check (:func:`numcheck.check.run_check`, numerics only) against a
    golden made on the spot on the CPU, exactly as the gate would measure it.
    """
    op = get_op(case.op)
    seeds = list(case.seeds) + [first_seed + i for i in range(extra_seeds)]
    worst: dict[str, dict[str, float]] = {}
    for seed in seeds:
        one = replace(case, seeds=(seed,))
        golden, inputs = fresh_golden(op, one, "cpu")
        for name in (op.reference, *case.variants):
            if device not in op.variants[name].devices:
                continue
            result = run_check(op, one, name, device, inputs, golden, max_flips=10**9,
                               keep_outputs=True)
            (measured,) = result.seeds
            for output in op.outputs:
                row = worst.setdefault(f"{name}/{output}", {})
                if op.topk is not None and output == op.topk.indices:
                    _topk_row(row, golden, measured, seed, op.topk.indices, op.topk.scores)
                    continue
                m = measured.metrics[output]
                for metric in ERROR_METRICS:
                    row[metric] = max(row.get(metric, 0.0), m.value(metric))
                nf = m.nonfinite
                row["nonfinite_mismatch"] = max(row.get("nonfinite_mismatch", 0),
                                                nf.mask_mismatch + nf.nan_mismatch)
    return worst


def _topk_row(
    row: dict[str, float], golden: Golden, measured: SeedResult, seed: int, idx: str,
    scores: str,
) -> None:
    rep = measured.topk
    assert rep is not None and measured.outputs is not None
    for metric in ("recall_min", "recall_mean", "tie_recall_min"):
        row[metric] = min(row.get(metric, 1.0), rep.value(metric))
    # Smallest relative band that explains every flip: max |margin| / row scale, the
    # row's largest finite |golden score| (what a "rel" tie band is relative to).
    golden_idx = golden.tensors[seed_key(seed, idx)]
    golden_scores = golden.tensors[seed_key(seed, scores)]
    scale = torch.where(torch.isfinite(golden_scores.double()), golden_scores.double().abs(),
                        0).amax(dim=1)
    zero = topk_agreement(golden_idx, measured.outputs[idx], golden_scores,
                          band=0.0, band_kind="rel", max_flips=10**9)
    need = max((abs(f.margin) / float(scale[f.row]) if math.isfinite(f.margin) else math.inf
                for f in zero.unexplained), default=0.0)
    row["band_rel_needed"] = max(row.get("band_rel_needed", 0.0), need)
    row["flips"] = row.get("flips", 0) + zero.n_flips


#: The headroom policy (docs/budgets.md): error budgets are twice the worst measurement,
#: recall floors allow twice the worst miss (and at least two flips per row), tie bands
#: are twice the widest band any flip needed. Floors keep a budget measured at exactly 0
#: on every device from demanding bit-exactness.
HEADROOM = 2.0
FLOORS = {"rel_fro": 1e-7, "calc_diff": 1e-14, "tie_band_rel": 1e-6}
GATED = ("rel_fro", "calc_diff", "frac_outside")


def _round_up(x: float) -> float:
    """Round up to two significant digits (0 stays 0)."""
    if x <= 0:
        return 0.0
    exp = math.floor(math.log10(x)) - 1
    return math.ceil(round(x / 10**exp, 6)) * 10**exp


def suggest(runs: Sequence[Mapping[str, Any]], cases: Sequence[Case]) -> str:
    """TOML budget tables for every case, from calibration runs on one or more devices."""
    lines: list[str] = []
    for case in cases:
        key = f"{case.op}::{case.id}"
        rows: dict[str, dict[str, float]] = {}
        for run in runs:
            for vo, row in run["cases"].get(key, {}).items():
                merged = rows.setdefault(vo, {})
                for metric, value in row.items():
                    worse = min if metric.startswith(("recall", "tie_recall")) else max
                    merged[metric] = worse(merged.get(metric, value), value)
        k = int(case.params.get("index_topk", 0) or 0)
        for vo, row in rows.items():
            variant, output = vo.split("/")
            cells: dict[str, float] = {}
            if "recall_min" in row:
                miss = 1.0 - row["recall_min"]
                floor = 1.0 - HEADROOM * miss
                if k:
                    floor = min(floor, 1.0 - 2.0 / k)
                cells["recall_min"] = math.floor(floor * 1e4) / 1e4
                cells["tie_recall_min"] = 1.0
                band = max(HEADROOM * row.get("band_rel_needed", 0.0), FLOORS["tie_band_rel"])
                cells["tie_band_rel"] = _round_up(band)
            else:
                for metric in GATED:
                    value = HEADROOM * row.get(metric, 0.0)
                    cells[metric] = _round_up(max(value, FLOORS.get(metric, 0.0)))
            lines.append(f"[{case.id}.budget.{variant}.{output}]")
            lines += [f"{m} = {v:.4g}" for m, v in cells.items()]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m numcheck.calibrate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=int, default=20, help="fresh seeds beyond the case's")
    parser.add_argument("--first-seed", type=int, default=1000,
                        help="the fresh seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--cases", type=Path, default=Path("cases"))
    parser.add_argument("-k", dest="select", default="", help="only cases whose id contains this")
    parser.add_argument("--json", type=Path, help="write every number here too")
    parser.add_argument("--suggest", type=Path, nargs="+", metavar="JSON",
                        help="measure nothing: print budget tables from these calibration files")
    args = parser.parse_args(argv)
    if args.suggest:
        runs = [json.loads(p.read_text()) for p in args.suggest]
        cases = [c for c in load_cases(args.cases) if args.select in c.id and not c.perf_only]
        print(suggest(runs, cases))
        return 0
    everything: dict[str, Any] = {}
    for case in load_cases(args.cases):
        # Perf-only cases (production shapes, no golden) carry no numerics budget.
        if args.select not in case.id or case.perf_only:
            continue
        worst = measure(case, args.device, args.seeds, args.first_seed)
        everything[f"{case.op}::{case.id}"] = worst
        for key, row in worst.items():
            cells = "  ".join(f"{k}={v:.3g}" for k, v in row.items() if v)
            print(f"{case.op}::{case.id}  {key:<24} {cells}", flush=True)
    if args.json:
        meta = {"device": args.device, "torch": torch.__version__, "extra_seeds": args.seeds,
                "first_seed": args.first_seed}
        if args.device == "cuda":
            meta["device_name"] = torch.cuda.get_device_name()
        args.json.write_text(json.dumps({"meta": meta, "cases": everything}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
