"""The localization figures of docs/reliability.md: does a failure name the right place first?

    python -m benchmarks.reliability.localize_report [--seeds 5] [--device cpu] [--json out.json]

1. **shipped**: every planted bug with a known place (tests/planted_located.py ``EXPECTED``,
   which also covers the bugs of tests/planted.py that sit somewhere) against every shipped
   case of its op, on the shipped golden and seeds, held to the budget of the variant it
   imitates.
2. **fresh seeds**: the same on ``--seeds`` fresh seeds (3100, 3101, ...) of the cheapest
   case of each op.
3. **cost**: the same failing checks timed with localization on and off (``NUMCHECK_LOCALIZE``).

Counted: checks the gate catches (a passing check has no message to localize); a hit is a
first localization line that matches the bug's expected place.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import load_cases
from numcheck.localize.failure import ENV
from numcheck.localize.spread import MIN_EXCESS, MIN_LIFT
from numcheck.selftest.localization import (
    Honest,
    Located,
    honest_table,
    located_fresh,
    located_table,
    named_first_fraction,
)

ROOT = Path(__file__).resolve().parents[2]

#: Cheap cases for the fresh seeds; the MTP case is the only one where MTP row 1 exists.
FRESH_CASES = ("indexer::v4pro-b2-l4k-mtp2", "indexer::v4flash-b2-l1k-contiguous",
               "mhc_pre::v4pro-t32")
FIRST_SEED = 3100


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=FIRST_SEED)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-cost", action="store_true", help="skip the on/off timing")
    args = ap.parse_args(argv)

    from tests import planted, planted_located

    planted.register_all()
    planted_located.register_all()
    expected = planted_located.EXPECTED
    cases = {f"{c.op}::{c.id}": c for c in load_cases(ROOT / "cases") if not c.perf_only}
    report: dict[str, Any] = {"torch": torch.__version__, "device": args.device,
                              "threads": torch.get_num_threads()}

    shipped = located_table(cases.values(), expected, ROOT / "goldens", device=args.device)
    report["shipped"] = [asdict(r) for r in shipped]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    fresh: list[Located] = []
    for key in FRESH_CASES:
        fresh += located_fresh(cases[key], expected, seeds, device=args.device)
    report["fresh"] = [asdict(r) for r in fresh]
    report["seeds"] = seeds

    print_tables(shipped, fresh)
    honest = honest_rows(cases, seeds, args.device)
    report["honest"] = [asdict(r) for r in honest]
    print_honest(honest)
    if not args.no_cost:
        report["cost"] = cost(cases, expected, args.device)
        c = report["cost"]
        print(f"\ncost: {c['checks']} failing checks on shipped cases: "
              f"{c['on_s']:.2f} s with localization, {c['off_s']:.2f} s without "
              f"(+{100 * (c['on_s'] / c['off_s'] - 1):.1f}%)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 0


#: Good variants whose honest rounding is localized (the Triton ones run slowly under the
#: interpreter and round like bf16 / fp32).
HONEST_VARIANTS = ("bf16", "tf32")


def honest_rows(cases: dict[str, Any], seeds: list[int], device: str) -> list[Honest]:
    """Localization forced on good variants: shipped cases on their golden, and the fresh
    seeds of the fresh cases on a reference made on the spot."""
    from dataclasses import replace

    from numcheck.check.make_golden import fresh_golden
    from numcheck.check.run import CaseInputs
    from numcheck.ops.registry import get_op
    from numcheck.selftest import shipped_golden

    rows: list[Honest] = []
    for key, case in cases.items():
        good = [v for v in HONEST_VARIANTS if v in case.variants]
        golden = shipped_golden(case, ROOT / "goldens")
        rows += honest_table(case, good, golden, CaseInputs(get_op(case.op), case),
                             device=device)
        if key in FRESH_CASES:
            for seed in seeds:
                one = replace(case, seeds=(seed,))
                golden, inputs = fresh_golden(get_op(case.op), one, "cpu")
                rows += honest_table(one, good, golden, inputs, device=device)
    return rows


def print_honest(rows: list[Honest]) -> None:
    worst = max(rows, key=lambda r: r.max_lift)
    called = [r for r in rows if r.named_place]
    excess = max(rows, key=lambda r: r.max_excess)
    print(f"\nhonest rounding: {len(rows)} (case, variant, seed, output) localized; largest "
          f"lift {worst.max_lift:.3g} ({worst.case} {worst.variant} seed {worst.seed} "
          f"{worst.output}, along {worst.grouping or '-'}; threshold {MIN_LIFT:g}); largest "
          f"excess over the shuffled gap where the lift passes {excess.max_excess:.3g} "
          f"({excess.case} {excess.variant} seed {excess.seed} {excess.output}; threshold "
          f"{MIN_EXCESS:g}); {len(called)} would name a place")
    for r in called[:10]:
        print(f"  false place: {r.case} {r.variant} seed {r.seed}: {r.line}")


def cost(cases: dict[str, Any], expected: dict[Any, str], device: str) -> dict[str, Any]:
    """The failing checks of the shipped table, timed with localization on, then off, then
    on again (the best of the two "on" runs; the first one also warms caches)."""
    times = {}
    rows: list[Located] = []
    for label in ("on", "off", "on2"):
        os.environ[ENV] = "0" if label == "off" else "1"
        t0 = time.perf_counter()
        rows = located_table(cases.values(), expected, ROOT / "goldens", device=device)
        times[label] = time.perf_counter() - t0
    os.environ.pop(ENV, None)
    return {"checks": sum(r.caught for r in rows), "on_s": min(times["on"], times["on2"]),
            "off_s": times["off"], "runs_s": times}


def print_tables(shipped: list[Located], fresh: list[Located]) -> None:
    by_bug: dict[str, list[Located]] = defaultdict(list)
    for r in shipped:
        by_bug[r.bug].append(r)
    fresh_by: dict[str, list[Located]] = defaultdict(list)
    for r in fresh:
        fresh_by[r.bug].append(r)
    print("| planted bug | expected place (regex) | named first: shipped cases | fresh seeds | "
          "first line (first shipped case that caught it) |")
    print("|---|---|---|---|---|")
    for bug, rows in by_bug.items():
        n, d = named_first_fraction(rows)
        fn, fd = named_first_fraction(fresh_by.get(bug, []))
        line = next((r.lines[0] for r in rows if r.caught and r.lines), "-")
        print(f"| {bug} | `{rows[0].expected}` | {n}/{d} | {fn}/{fd} | {line} |")
    caught = [r for r in [*shipped, *fresh] if r.caught]
    total, spent = sum(r.seconds for r in caught), sum(r.localize_seconds for r in caught)
    print(f"\ntime in localization: {spent:.2f} s of {total:.2f} s spent in the {len(caught)} "
          f"failing checks ({100 * spent / max(total, 1e-9):.1f}%)")
    n, d = named_first_fraction(shipped)
    fn, fd = named_first_fraction(fresh)
    print(f"\nnamed first: shipped cases {n}/{d} ({100 * n / max(d, 1):.0f}%), "
          f"fresh seeds {fn}/{fd} ({100 * fn / max(fd, 1):.0f}%)")
    misses = [r for r in [*shipped, *fresh] if r.caught and not r.named_first]
    for r in misses[:20]:
        print(f"  miss: {r.bug} on {r.case} seed {r.seed}: {r.lines[0] if r.lines else '-'}")


if __name__ == "__main__":
    raise SystemExit(main())
