"""CPU time of the plot data (numcheck/check/plotdata.py) of every CPU check of the shipped
cases, with no variant run: each check's outputs are its case's stored golden outputs
scaled by 1.0001, so only the histograms and |golden|'s percentiles are timed.

    python -m benchmarks.cost.plot_cost

Run from the repository root (the shipped cases/ and goldens/). Every variant of a case is
judged against the same stored outputs, which is what the percentiles' cache relies on
(docs/testing.md, "Where the CPU gate's time goes"), so one pass is timed, as in one
gate run: run the command again for another figure. Sampled outputs are left out (their
checks compare at the stored positions of a full-size output that is not stored).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import load_cases
from numcheck.check.plotdata import check_plots
from numcheck.check.result import SeedResult
from numcheck.execute.case_cache import CaseCache
from numcheck.goldens.files import GoldenError
from numcheck.ops.registry import get_op


def checks(root: Path) -> list[tuple[Any, str, list[SeedResult], Any]]:
    """(op, precision, seeds with outputs, golden) of every CPU check of the shipped cases."""
    cache = CaseCache(root / "goldens", "cpu")
    found = []
    for case in load_cases(root / "cases"):
        if case.perf_only or "cpu" not in case.devices:
            continue
        op = get_op(case.op)
        try:
            golden = cache.golden(op, case, regen_hint="")
        except GoldenError:
            continue
        for variant in case.budgets:
            seeds = []
            for seed in case.seeds:
                result = SeedResult(seed)
                stored = {name: golden.output(seed, name) for name in op.outputs}
                result.outputs = {name: s.values * 1.0001 if s.values.is_floating_point()
                                  else s.values for name, s in stored.items()
                                  if s.positions is None}
                seeds.append(result)
            found.append((op, op.variants[variant].precision, seeds, golden))
    return found


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    torch.set_num_threads(1)  # as the gate's measures run (numcheck.precision.one_thread)
    work = checks(Path.cwd())
    start = time.process_time()
    for op, precision, seeds, golden in work:
        check_plots(op, precision, seeds, golden)
    print(f"plot data of {len(work)} checks: {time.process_time() - start:.2f} CPU s")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
