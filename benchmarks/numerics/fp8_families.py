"""The honest FP8 and FP4 families of the shipped low-precision variants, and budgets from them.

    python -m benchmarks.numerics.fp8_families [--seeds 20] [--first-seed 4000] [--device cpu]
        [-k CASE_SUBSTRING] [--json out.json]
    python -m benchmarks.numerics.fp8_families --suggest A.json [B.json ...]
    python -m benchmarks.numerics.fp8_families --table A.json [B.json ...]
    python -m benchmarks.numerics.fp8_families --tails A.json [B.json ...] [--proxy CASE=PROXY ...]
    python -m benchmarks.numerics.fp8_families --margins A.json [B.json ...]

A budget of a low-precision variant belongs to its scheme (how each operand is quantized),
so its family is its scheme's: for every variant that declares its quantization
(``Variant.quant``) in a case of cases/*.toml, the variant itself and every honest GEMM of its
operand schemes made into the op (numcheck.honest.quant_impls: the emulated members, bit for
bit on any device; the operands dequantized and multiplied in float32; on CUDA
``torch._scaled_mm`` with fast accumulation on and off, Triton's ``tl.dot`` on e4m3, the
block-scaled Triton kernel, torchao's block-scaled GEMM where installed). Each member is
checked on every seed against a fresh CPU reference the way the gate checks its numerics
(the golden, the simulated reference, the operand checks), held to the case's budget of
the variant it belongs to. The file records, per case and variant, the family's worst of
every metric against both references (and the member behind it), each member's worst GEMM
bound ratio (``quant.sim_ratio``, at most 1 for an honest kernel) and every check that
failed (``failures``: with the shipped budgets, the honest family's false failures; for a
known-bad variant, ``expected``, its family fails its budget as it does).

``--suggest`` prints the budget tables by the headroom rule (numcheck.calibrate.headroom:
2x the family's worst, 1.25x for ``max_err_ratio``; the top-k floors of
numcheck.calibrate.suggest_values); no ``sim_*`` limit for a variant that declares float32
sums (their distance to the simulated reference is a rare output rounding flip, which the
GEMM bound judges element by element); ``--table`` prints docs/budgets.md's table;
``--tails`` prints the tail keys (``frac_outside``, ``max_band_ratio``) to ship from many
seeds: 2x their worst over the files given (the shipped variants alone, ``--heads-only``, or
whole families, on any device), never lower than the case file's; ``--margins`` prints each
budgeted key's worst over its shipped limit (how much of its budget an honest member used).
Variants that take another's budgets (``budget_like``) are measured, not budgeted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from numcheck.calibrate import suggest_values, topk_row
from numcheck.calibrate.headroom import budget_value
from numcheck.calibrate.honest import merge_worst
from numcheck.cases import Case, load_cases
from numcheck.check import run_check
from numcheck.check.make_golden import fresh_golden
from numcheck.honest.gemm_family import member_name, member_variants, members
from numcheck.numerics.budget_origin import lender_of
from numcheck.numerics.metric_names import ERROR_METRICS, SIM_METRICS
from numcheck.ops import registry
from numcheck.ops.registry import add_variant, get_op
from numcheck.ops.spec import VariantError
from numcheck.selftest import held_to

ROOT = Path(__file__).resolve().parents[2]

#: Error metrics the suggested tables hold (both references).
SUGGESTED = ("rel_fro", "calc_diff", "frac_outside", "max_err_ratio", "max_band_ratio",
             *SIM_METRICS)


def families(case: Case, device: str, heads_only: bool = False) -> dict[str, list[str]]:
    """Per low-precision variant of the case that runs on ``device`` in this install: itself
    and the members of its scheme that run there (registered into the op by
    :func:`register_members`); ``heads_only``: the variant alone (many seeds of the tail
    keys, at a fraction of the family's cost). A variant that cannot run here (an optional
    library missing: :func:`skipped` says why) has no family here."""
    op = get_op(case.op)
    out: dict[str, list[str]] = {}
    for name in case.variants:
        quant = op.variants[name].quant
        if quant is None or op.variants[name].why_not(device):
            continue
        names = [member_name(g) for g in members(op, op.variants[name].precision, quant)
                 if device in g.devices and not g.unavailable]
        out[name] = [name] if heads_only else [name, *names]
    return out


def skipped(case: Case, device: str) -> dict[str, str]:
    """The case's low-precision variants that cannot run on ``device`` in this install, and
    why (the install command of a missing library): skipped, never an error."""
    op = get_op(case.op)
    return {name: why for name in case.variants
            if op.variants[name].quant is not None and (why := op.variants[name].why_not(device))}


def register_members(op_name: str) -> None:
    """Register every low-precision member of the op not registered yet."""
    op = get_op(op_name)
    for v in member_variants(op, ("e4m3", "e5m2", "e2m1")):
        if v.name not in get_op(op_name).variants:
            add_variant(op_name, v, origin="benchmarks/numerics/fp8_families.py")


def _row(op: Any, golden: Any, seed_result: Any) -> dict[str, dict[str, float]]:
    rows = {}
    for output, m in seed_result.metrics.items():
        rows[output] = {k: m.value(k) for k in (*ERROR_METRICS, *SIM_METRICS) if m.measured(k)}
    if seed_result.topk is not None and op.topk is not None:
        # The agreement, and the tie band its flips needed (numcheck.calibrate's measure).
        rows[op.topk.indices] = topk_row(golden, seed_result, op.topk.indices, op.topk.scores)
    return rows


def measure_case(case: Case, seeds: list[int], device: str,
                 heads_only: bool = False) -> dict[str, Any]:
    """Every family of one case over ``seeds`` (module docstring)."""
    op = get_op(case.op)
    fams = families(case, device, heads_only)
    # A known-bad head (its case's expect) is measured; its members fail its budget as it does.
    results: dict[str, Any] = {head: {"members": names, "worst": {}, "by_variant": {},
                                      "worst_by": {}, "quant": {}, "failures": [],
                                      "errors": [], "checks": 0,
                                      "expected": head in case.expect}
                               for head, names in fams.items()}
    for seed in seeds:
        one = replace(case, seeds=(seed,))
        golden, inputs = fresh_golden(op, one, "cpu")
        for head, names in fams.items():
            res = results[head]
            for name in names:
                held = held_to(one, name, head)
                try:
                    # The numerics and the quant gate, as the honest families are judged
                    # (numcheck.calibrate.honest): members are about where rounding happens.
                    result = run_check(op, held, name, device, inputs, golden,
                                       max_flips=10**9, keep_outputs=True)
                except VariantError as exc:
                    res["errors"].append(f"{name} seed {seed}: {exc}")
                    continue
                res["checks"] += 1
                (sr,) = result.seeds
                for output, row in _row(op, golden, sr).items():
                    merge_worst(res["worst"].setdefault(output, {}), row)
                    merge_worst(res["by_variant"].setdefault(name, {}).setdefault(output, {}),
                                row)
                    for metric, value in row.items():
                        best = res["worst_by"].setdefault(output, {}).get(metric)
                        low = metric.startswith(("recall", "tie_"))
                        if best is None or (value < best[0] if low else value > best[0]):
                            res["worst_by"][output][metric] = (value, name, seed)
                q = sr.quant
                mine = res["quant"].setdefault(name, {"sim_ratio": 0.0, "n_findings": 0})
                if q is not None and q.sim_ratio is not None:
                    mine["sim_ratio"] = max(mine["sim_ratio"], q.sim_ratio)
                mine["n_findings"] += 0 if q is None else q.n_findings
                if result.violations:
                    res["failures"].append({"member": name, "seed": seed, "violations": [
                        v.describe() for v in result.violations[:4]]})
    return results


def selected(case_id: str, select: str) -> bool:
    """``-k``: the case id contains the substring, or one of several separated by commas."""
    return any(part in case_id for part in select.split(","))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=4000)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("-k", dest="select", default="",
                    help="only cases whose id contains this (comma-separated: any of these)")
    ap.add_argument("--heads-only", action="store_true",
                    help="the shipped variants alone, not their schemes' members")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--suggest", type=Path, nargs="+", metavar="JSON")
    ap.add_argument("--table", type=Path, nargs="+", metavar="JSON")
    ap.add_argument("--tails", type=Path, nargs="+", metavar="JSON",
                    help="the tail keys' values to ship from many-seed runs (--heads-only "
                         "or whole families)")
    ap.add_argument("--margins", type=Path, nargs="+", metavar="JSON",
                    help="each budgeted key's worst over its shipped limit")
    ap.add_argument("--proxy", action="append", default=[], metavar="CASE=PROXY",
                    help="--tails: a case that takes another's measurements")
    args = ap.parse_args(argv)
    cases = [c for c in load_cases(ROOT / "cases") if not c.perf_only
             and selected(c.id, args.select)
             # these read measurements, from whichever device made them
             and (args.device in c.devices or args.tails or args.suggest or args.margins)
             and any(get_op(c.op).variants[v].quant is not None for v in c.variants)]
    if args.tails:
        print(tails(merge(args.tails), cases, dict(p.split("=", 1) for p in args.proxy)))
        return 0
    if args.suggest:
        print(suggest(merge(args.suggest), cases))
        return 0
    if args.margins:
        print(margins(merge(args.margins), cases))
        return 0
    if args.table:
        print(table(merge(args.table)))
        return 0
    seeds = [args.first_seed + i for i in range(args.seeds)]
    out: dict[str, Any] = {"meta": {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": args.device, "torch": torch.__version__, "machine": platform.machine(),
        "processor": platform.processor(), "cpus": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "seeds": seeds, "command": " ".join(["python", "-m", "benchmarks.numerics.fp8_families",
                                             *sys.argv[1:]])}, "cases": {}}
    with registry.isolated():
        for op_name in {c.op for c in cases}:
            register_members(op_name)
        for case in cases:
            t0 = time.monotonic()
            key = f"{case.op}::{case.id}"
            out["cases"][key] = measure_case(case, seeds, args.device, args.heads_only)
            fails = sum(len(r["failures"]) for r in out["cases"][key].values()
                        if not r["expected"])
            checks = sum(r["checks"] for r in out["cases"][key].values())
            left = skipped(case, args.device)
            if left:
                out.setdefault("skipped", {})[key] = left
            print(f"{key}: {checks} checks, {fails} failed, {time.monotonic() - t0:.0f} s"
                  + "".join(f"; {name} skipped: {why}" for name, why in left.items()),
                  flush=True)
            if args.json:
                args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(table(out))
    return 0


def merge(paths: list[Path]) -> dict[str, Any]:
    """Several calibration files as one: the worst of each metric over them."""
    merged: dict[str, Any] = {"cases": {}}
    for path in paths:
        data = json.loads(path.read_text())
        for key, heads in data["cases"].items():
            for head, res in heads.items():
                into = merged["cases"].setdefault(key, {}).setdefault(head, {
                    "members": [], "worst": {}, "by_variant": {}, "worst_by": {}, "quant": {},
                    "failures": [], "errors": [], "checks": 0, "expected": False})
                into["members"] = list(dict.fromkeys([*into["members"], *res["members"]]))
                for output, row in res["worst"].items():
                    merge_worst(into["worst"].setdefault(output, {}), row)
                for output, row in res.get("worst_by", {}).items():
                    for metric, cell in row.items():
                        old = into["worst_by"].setdefault(output, {}).get(metric)
                        low = metric.startswith(("recall", "tie_"))
                        if old is None or (cell[0] < old[0] if low else cell[0] > old[0]):
                            into["worst_by"][output][metric] = cell
                for member, q in res["quant"].items():
                    mine = into["quant"].setdefault(member, {"sim_ratio": 0.0, "n_findings": 0})
                    mine["sim_ratio"] = max(mine["sim_ratio"], q["sim_ratio"])
                    mine["n_findings"] += q["n_findings"]
                into["expected"] = res.get("expected", False)
                into["failures"] += res["failures"]
                into["errors"] += res["errors"]
                into["checks"] += res["checks"]
    return merged


def suggest(merged: dict[str, Any], cases: list[Case]) -> str:
    """TOML budget tables for each low-precision variant (a borrower's: none)."""
    lines: list[str] = []
    for case in cases:
        heads = merged["cases"].get(f"{case.op}::{case.id}", {})
        k = int(case.params.get("index_topk", 0) or 0)
        for head, res in heads.items():
            lender = lender_of(case.budgets[head].origins)
            if lender is not None:
                lines.append(f"# {case.id}: {head} takes {lender}'s budgets")
                continue
            quant = get_op(case.op).variants[head].quant
            for output, worst in res["worst"].items():
                topk = "recall_min" in worst
                if quant is not None and quant.accumulation.kind == "fp32":
                    # Float32 sums sit closer to the exact product than the output's own
                    # rounding: an output differs from its simulated reference only where a
                    # rare sum rounds across a rounding boundary (none on most seeds, a few
                    # elements on some). No average of that is a budget; the GEMM bound
                    # (quant.sim_ratio) judges every element, that rounding included.
                    worst = {m: v for m, v in worst.items() if m not in SIM_METRICS}
                cells = suggest_values(worst, topk=topk, k=k, gated=SUGGESTED)
                lines.append(f"[{case.id}.budget.{head}.{output}]")
                lines += [f"{m} = {v:.4g}" for m, v in cells.items()]
        lines.append("")
    return "\n".join(lines)


#: Tails of an output of a thousand elements: a count past the band and the worst element in
#: band units. 20 calibration seeds under-sample them; they are set from many seeds
#: (``--heads-only`` runs, and the families' held-out runs), never lowered (docs/budgets.md).
TAIL_KEYS = ("frac_outside", "max_band_ratio")


def _budgeted(merged: dict[str, Any], cases: list[Case],
              proxies: dict[str, str] | None = None
              ) -> Iterator[tuple[Case, str, dict[str, Any], str, dict[str, float],
                                  dict[str, float]]]:
    """Per case, budgeted low-precision variant and output measured in ``merged``: the
    family's result, its worst row and the output's loaded limits (the case file's, else
    the class defaults it inherits). Known-bad variants and borrowers are left out;
    ``proxies`` maps a case that cannot run here to the case whose measurements it takes."""
    proxies = proxies or {}
    for case in cases:
        source = proxies.get(case.id, case.id)
        for head, res in merged["cases"].get(f"{case.op}::{source}", {}).items():
            if (res.get("expected") or head not in case.budgets
                    or lender_of(case.budgets[head].origins) is not None):
                continue
            for output, worst in res["worst"].items():
                budget = case.budgets[head].outputs.get(output)
                if budget is not None:
                    yield case, head, res, output, worst, budget.limits


def tails(merged: dict[str, Any], cases: list[Case],
          proxies: dict[str, str] | None = None) -> str:
    """Per case, variant and output: each tail key's shipped limit, the worst over the
    measured seeds and the value to ship, max(shipped, the headroom rule's value: 2x the
    worst rounded up); ``proxies`` as :func:`_budgeted`'s. Lines that would raise a limit
    are marked."""
    lines = ["| case | variant | output | key | shipped | worst | checks | 2x worst | ship |",
             "|---|---|---|---|---|---|---|---|---|"]
    for case, head, res, output, worst, limits in _budgeted(merged, cases, proxies):
        for key in TAIL_KEYS:
            shipped = limits.get(key)
            if key not in worst or shipped is None:
                continue
            two = budget_value(key, worst[key])
            higher = two > shipped * (1 + 1e-9)  # round_up's last bit is no raise
            ship = two if higher else shipped
            mark = " (raise)" if higher else ""
            lines.append(f"| {case.id} | {head} | {output} | {key} | {shipped:g} | "
                         f"{worst[key]:.3g} | {res['checks']} | {two:g} | {ship:g}{mark} |")
    return "\n".join(lines)


def margins(merged: dict[str, Any], cases: list[Case]) -> str:
    """Per case, budgeted variant and output: the family's worst over the shipped limit for
    each key of :data:`SUGGESTED` (the share of its budget an honest member used: past 1 it
    fails; the headroom rule ships 2x the worst, so about 0.5 where the budget was set from
    these measurements; ``max_err_ratio`` takes 1.25x)."""
    lines = ["| case | variant | output | " + " | ".join(SUGGESTED) + " |",
             "|---|---|---|" + "---|" * len(SUGGESTED)]
    for case, head, _, output, worst, limits in _budgeted(merged, cases):
        cells = [f"{worst[key] / limits[key]:.2f}" if key in worst and limits.get(key)
                 else "-" for key in SUGGESTED]
        lines.append(f"| {case.id} | {head} | {output} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(merged: dict[str, Any]) -> str:
    """Per case and low-precision variant: its family's size, the worst error against the
    golden and against the simulated reference (with the member behind each), the worst
    GEMM bound ratio, operand findings, and the failed checks."""
    lines = ["| case | variant (family size) | worst rel_fro vs golden (member) | worst "
             "sim_rel_fro (member) | worst bound ratio | operand findings | failed checks |",
             "|---|---|---|---|---|---|---|"]
    for key, heads in merged["cases"].items():
        for head, res in heads.items():
            first = next(iter(res["worst_by"]), None)
            by = res["worst_by"].get(first, {}) if first else {}

            def cell(metric: str) -> str:
                if metric not in by:
                    return "-"
                value, member, _ = by[metric]
                return f"{value:.3g} ({member.removeprefix('gemm_')})"

            ratio = max((q["sim_ratio"] for q in res["quant"].values()), default=0.0)
            findings = sum(q["n_findings"] for q in res["quant"].values())
            failed = (f"{len(res['failures'])} of {res['checks']}" if not res.get("expected")
                      else f"known-bad ({len(res['failures'])} of {res['checks']} fail, "
                      "as expected)")
            lines.append(f"| {key} | {head} ({len(res['members'])}) | {cell('rel_fro')} | "
                         f"{cell('sim_rel_fro')} | {ratio:.3g} | {findings} | {failed} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
