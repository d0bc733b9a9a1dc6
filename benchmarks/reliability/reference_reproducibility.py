"""How far does the FP32 reference move between machines? (the regen tolerance's evidence)

    python -m benchmarks.reliability.reference_reproducibility --json OUT.json   # one setting
    benchmarks/reliability/reference_reproducibility.sh                          # every setting

Runs the reference of every shipped case (every seed) in this process's setting (thread
count, ``ATEN_CPU_CAPABILITY``) and compares its outputs with the stored goldens at the
stored positions. For each output it prints the number of values that differ, the largest
absolute difference and that difference relative to the output's largest finite magnitude
(what :mod:`numcheck.goldens.reproducibility` bounds). Non-finite positions and integer outputs are
counted when they differ at all. The last line is a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import load_cases
from numcheck.goldens.files import golden_path, load_golden
from numcheck.goldens.packing import seed_key, unpack_pair
from numcheck.goldens.reproducibility import difference
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    setting = (f"{args.device} threads={torch.get_num_threads()} "
               f"isa={torch.backends.cpu.get_cpu_capability()}")
    rows: list[dict[str, Any]] = []
    for case in load_cases(ROOT / "cases"):
        if case.perf_only:
            continue
        op = get_op(case.op)
        golden = load_golden(golden_path(ROOT / "goldens", op.name, case.id), case=case.id,
                             regen_hint="")
        ref = op.variants[op.reference]
        for seed in case.seeds:
            inputs = to_device(op.make_inputs(case.params, seed), args.device)
            with torch.no_grad():
                out = ref.fn(inputs, case.params)
            for name, t in out.items():
                pair = unpack_pair(seed_key(seed, name), t, golden.tensors)
                d = difference(pair.expected, pair.actual)
                rows.append({"case": f"{op.name}::{case.id}", "seed": seed, "output": name,
                             "dtype": str(t.dtype).removeprefix("torch."),
                             "n": pair.expected.numel(), **d.as_dict()})
    print(f"setting: {setting}")
    header = (f"{'case':<40} {'seed':>4} {'output':<8} {'dtype':<9} {'n':>7} {'differ':>7} "
              f"{'max abs':>9} {'eps x max|x|':>12} {'steps':>5} {'exact':>5} {'outside':>7}")
    print(header)
    for r in rows:
        print(f"{r['case']:<40} {r['seed']:>4} {r['output']:<8} {r['dtype']:<9} {r['n']:>7} "
              f"{r['n_differ']:>7} {r['max_abs']:>9.3g} {r['eps_units']:>12.3g} "
              f"{r['max_ulps']:>5.2g} {r['n_exact_differ']:>5} {r['n_outside']:>7}")
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    coarse = [r for r in rows if r["dtype"] != "float32"]
    print(f"WORST {setting}: {sum(r['n_differ'] for r in rows)} values differ from the stored "
          f"goldens; float32 max {max(r['eps_units'] for r in fp32):.3g} eps x max|x|; other "
          f"dtypes max {max((r['max_ulps'] for r in coarse), default=0):.3g} rounding steps; "
          f"exact-only diffs {sum(r['n_exact_differ'] for r in rows)}; outside the tolerance "
          f"{sum(r['n_outside'] for r in rows)}")
    if args.json is not None:
        args.json.write_text(json.dumps({"setting": setting, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
