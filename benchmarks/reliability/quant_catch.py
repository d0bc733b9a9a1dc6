"""The FP8/FP4 catch table: honest kernels and quantizers against planted bugs of each kind.

    python -m benchmarks.reliability.quant_catch [--seeds 50] [--out DIR]

Two tables, over ``--seeds`` seeds (CPU; tests/quant_kernels.py holds every kernel and
quantizer, honest and buggy):

1. **the simulated reference** (numcheck.precision.quant_bound): for each member of
   numcheck.precision.quant_members and each honest kernel of its declared accumulation, the
   worst ``|y - y_sim| / bound`` over shapes from K = 5 to K = 2048 and every data kind; then,
   on DeepSeek's block-scaled operands (fp32 and ue8m0 scales, bf16 and fp32 out), each
   planted kernel bug's smallest ratio over the seeds where it changed the result, and a
   skipped promotion's on a long positive K;
2. **the quantizer check** (numcheck.precision.quant_validate): how many seeds each planted
   quantizer bug was caught on, with the finding kinds seen, and the honest quantizers'
   findings (none expected).

Writes ``quant_catch.json`` under ``--out`` and prints both tables.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from numcheck.precision.quant_accumulate import PROMOTED_128
from numcheck.precision.quant_bound import compare_to_simulated
from numcheck.precision.quant_members import quant_members
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FP8_ROW,
    FP8_TENSOR,
    MXFP4,
    NVFP4,
)
from numcheck.precision.quant_validate import validate
from numcheck.precision.quantize import quantize
from tests.quant_kernels import (
    DATA,
    HONEST_KERNELS,
    HONEST_QUANTIZERS,
    KERNEL_BUGS,
    QUANTIZER_BUG_ELEMENTS,
    QUANTIZER_BUGS,
    model,
    no_promotion,
    operand,
)

SHAPES = ((1, 7, 5), (3, 40, 128), (17, 33, 300), (8, 24, 1000), (4, 16, 2048))


def honest_table(seeds: int) -> list[dict[str, Any]]:
    """Worst ratio of every (member, honest kernel) over shapes, data kinds and seeds."""
    rows = []
    for member in quant_members():
        r = member.recipe
        for name, (kernel, kinds) in HONEST_KERNELS.items():
            if r.accumulation.kind not in kinds:
                continue
            worst, where = 0.0, ""
            for seed in range(seeds):
                kind = DATA[seed % len(DATA)]
                for m, n, k in SHAPES:
                    qa = quantize(operand(kind, m, k, 1000 * seed + k), r.a)
                    qb = quantize(operand(kind, n, k, 1000 * seed + k + 1), r.b)
                    w = compare_to_simulated(kernel(qa, qb, r.accumulation, r.out_dtype), qa,
                                             qb, r.accumulation, r.out_dtype).worst
                    if w > worst:
                        worst, where = w, f"{m}x{n}x{k} {kind} seed {seed}"
            rows.append({"member": member.label, "kernel": name, "worst": worst,
                         "where": where})
    return rows


def bug_table(seeds: int) -> list[dict[str, Any]]:
    """Each kernel bug's smallest ratio where it changed the result, and the honest worst."""
    rows = []
    for scale in ("fp32", "ue8m0"):
        act, weight = replace(DEEPSEEK_ACT, scale=scale), replace(DEEPSEEK_WEIGHT, scale=scale)
        for out in (torch.bfloat16, torch.float32):
            low = {bug: (float("inf"), 0) for bug in KERNEL_BUGS if bug != "no_promotion"}
            honest = 0.0
            for seed in range(seeds):
                k = (384, 320)[seed % 2]  # a square grid of 128x128 blocks, or a ragged K
                old = operand("blocky", 384, k, seed + 1)
                w = old * (1 + 0.25 * operand("normal", 384, k, seed + 2))
                qa, qb = quantize(operand("blocky", 8, k, seed), act), quantize(w, weight)
                qold = quantize(old, weight)
                y0 = model(qa, qb, PROMOTED_128, out)
                honest = max(honest, compare_to_simulated(y0, qa, qb, PROMOTED_128, out).worst)
                for bug in low:
                    y = KERNEL_BUGS[bug](qold)(qa, qb, PROMOTED_128, out)
                    if torch.equal(y, y0):
                        continue
                    ratio = compare_to_simulated(y, qa, qb, PROMOTED_128, out).worst
                    low[bug] = (min(low[bug][0], ratio), low[bug][1] + 1)
            for bug, (ratio, n) in low.items():
                rows.append({"bug": bug, "scale": scale, "out": str(out)[6:], "min_ratio": ratio,
                             "seeds_with_effect": n, "honest_worst": honest})
    for data in ("normal", "positive"):
        for k in (1024, 4096):
            lowest, honest = float("inf"), 0.0
            for seed in range(max(1, seeds // 5)):
                qa = quantize(operand(data, 4, k, seed), FP8_TENSOR)
                qb = quantize(operand(data, 16, k, seed + 1), FP8_TENSOR)
                y = no_promotion(qa, qb, PROMOTED_128, torch.float32)
                lowest = min(lowest, compare_to_simulated(y, qa, qb, PROMOTED_128).worst)
                honest = max(honest, compare_to_simulated(
                    model(qa, qb, PROMOTED_128, torch.float32), qa, qb, PROMOTED_128).worst)
            rows.append({"bug": f"no_promotion ({data}, K={k})", "scale": "fp32", "out": "float32",
                         "min_ratio": lowest, "seeds_with_effect": max(1, seeds // 5),
                         "honest_worst": honest})
    return rows


def validate_table(seeds: int) -> list[dict[str, Any]]:
    """Seeds on which each planted quantizer bug was found, and the honest quantizers'."""
    schemes = {"1x128 fp32": DEEPSEEK_ACT, "128x128 ue8m0": replace(DEEPSEEK_WEIGHT,
                                                                     scale="ue8m0"),
               "tensor": FP8_TENSOR, "row": FP8_ROW, "nvfp4": NVFP4, "mxfp4": MXFP4}
    rows = []
    for label, scheme in schemes.items():
        for bug, quantizer in QUANTIZER_BUGS.items():
            if scheme.element not in QUANTIZER_BUG_ELEMENTS.get(bug, (scheme.element,)):
                continue
            caught, effect, kinds = 0, 0, set()
            for seed in range(seeds):
                old = operand("blocky", 384, 384, 100 + seed)
                x = old * (1 + 0.25 * operand("normal", 384, 384, 200 + seed))
                q = quantizer(x, scheme, old)
                same = quantize(x, scheme)
                if torch.equal(q.values, same.values) and torch.equal(q.scales, same.scales):
                    continue  # the bug changed nothing here (a per-tensor scheme's 'blocks')
                v = validate(q, scheme, x)
                effect += 1
                caught += not v.ok
                kinds |= set(v.kinds())
            rows.append({"scheme": label, "bug": bug, "caught": caught, "seeds": effect,
                         "kinds": sorted(kinds)})
        for who, (quantizer, formats) in HONEST_QUANTIZERS.items():
            if scheme.scale not in formats or (who in ("deepgemm", "torchao")
                                               and scheme.element != "e4m3fn"):
                continue
            found = 0
            for seed in range(seeds):
                x = operand(DATA[seed % len(DATA)], 130, 300, seed)
                found += not validate(quantizer(x, scheme, x), scheme, x).ok
            rows.append({"scheme": label, "bug": f"honest: {who}", "caught": found,
                         "seeds": seeds, "kinds": []})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    args = parser.parse_args(argv)
    start = time.monotonic()
    result: dict[str, Any] = {"honest": honest_table(args.seeds), "bugs": bug_table(args.seeds),
                              "validate": validate_table(args.seeds)}
    result["meta"] = {"seeds": args.seeds, "torch": torch.__version__,
                      "seconds": round(time.monotonic() - start, 1)}
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "quant_catch.json").write_text(json.dumps(result, indent=1))
    worst = max(result["honest"], key=lambda r: r["worst"])
    print(f"honest kernels: worst ratio {worst['worst']:.3f} ({worst['member']}, "
          f"{worst['kernel']}, {worst['where']})")
    for r in result["honest"]:
        print(f"  {r['member']:32s} {r['kernel']:18s} {r['worst']:.3f}")
    print("kernel bugs (smallest ratio over the seeds where the bug changed the result):")
    for r in result["bugs"]:
        low = (f"{r['min_ratio']:10.3g}" if r["seeds_with_effect"] else
               f"{'no effect':>10s}")
        print(f"  {r['bug']:32s} {r['scale']:6s} {r['out']:9s} {low} "
              f"(honest worst {r['honest_worst']:.3f}, {r['seeds_with_effect']} seeds)")
    print("quantizer check (seeds found / seeds with an effect):")
    for r in result["validate"]:
        print(f"  {r['scheme']:14s} {r['bug']:22s} {r['caught']}/{r['seeds']} "
              f"{' '.join(r['kinds'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
