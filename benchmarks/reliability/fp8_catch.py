"""The FP8 planted bugs' catch table, and the honest alternatives' false failures, on fresh seeds.

    python -m benchmarks.reliability.fp8_catch [--seeds 50] [--first-seed 5000] [--device cpu]
        [--json out.json]
    python -m benchmarks.reliability.fp8_catch --table A.json [B.json ...]
    python -m benchmarks.reliability.fp8_catch --recheck A.json [B.json ...]

Every bug of tests/quant_planted.py (issue 35's kinds, planted through numcheck's public
API) runs on ``--seeds`` fresh seeds of its shipped case, held to the budget of the shipped
variant of its declared scheme, against a reference made on the spot; beside it, on the same
seeds and inputs, that scheme's honest family (the shipped variant and its members,
numcheck.honest.quant_impls) and the honest alternatives of tests/quant_planted.py (other
kernels of the declared model, other projects' quantizers). Each row records, per seed:

- the bug's **own error** against each reference, as a multiple of the honest family's
  worst on the same inputs: ``rel_fro`` against the golden, ``sim_rel_fro`` against the
  simulated reference (its own operands);
- its GEMM bound ratio (``quant.sim_ratio``: an honest kernel stays at or under 1) and its
  operands' findings against the declared scheme;
- whether the gate caught it (any violation of the numerics or the quant gate), and how.

A bug is required to be caught wherever its own error is at least 2x the family's worst
(numcheck.calibrate.headroom.BUG_FACTOR); the table shows the others too. Honest rows count
every failure (there must be none). The numerics and the quant gate run; the cast ledger
judges how a variant moves data, and the test kernels emulate hardware in torch.

``--recheck`` holds recorded catches to the limits the case files ship now: a limit raised
since (new seeds, another device) must not let a recorded bug pass. It lists every catch
that no longer holds and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from numcheck.calibrate.headroom import BUG_FACTOR
from numcheck.cases import load_cases
from numcheck.check import run_check
from numcheck.check.make_golden import fresh_golden
from numcheck.honest.gemm_family import member_name, member_variants, members
from numcheck.ops import registry
from numcheck.ops.registry import add_variant, get_op
from numcheck.ops.spec import VariantError
from numcheck.selftest import held_to
from tests import quant_planted

ROOT = Path(__file__).resolve().parents[2]

#: Each bug's case and the shipped variant whose budget it is held to (its scheme's).
PLAN = {
    "bug_per_tensor_kernel": ("tiny-k384", "fp8_block"),
    "bug_per_tensor_quantizer": ("tiny-k384", "fp8_block"),
    "bug_transposed_scales": ("tiny-k384", "fp8_block"),
    "bug_shifted_scales": ("tiny-k384", "fp8_block"),
    "bug_ue8m0_round_down": ("tiny-k384", "fp8_block_ue8m0"),
    "bug_no_clamp": ("tiny-k384", "fp8_block"),
    "bug_no_promotion": ("v3-o-decode-t8", "fp8_row"),
    "bug_no_promotion_block": ("v3-o-decode-t8", "fp8_block"),
    "bug_e5m2_for_e4m3": ("tiny-k384", "fp8_block"),
    "bug_stale_scale": ("tiny-k384", "fp8_block"),
}


def _one(op: Any, case: Any, name: str, head: str, device: str, inputs: Any,
         golden: Any) -> dict[str, Any]:
    """One check of ``name`` held to ``head``'s budget: its figures and its violations."""
    try:
        result = run_check(op, held_to(case, name, head), name, device, inputs, golden)
    except VariantError as exc:
        return {"error": str(exc).splitlines()[0], "violations": ["error"]}
    (sr,) = result.seeds
    m = sr.metrics["y"]
    q = sr.quant
    return {"rel_fro": m.rel_fro, "sim_rel_fro": m.sim_rel_fro,
            "sim_ratio": None if q is None else q.sim_ratio,
            "findings": 0 if q is None else q.n_findings,
            "violations": sorted({v.key for v in result.violations})}


def _runnable(op: Any, names: list[str], device: str, out: dict[str, Any]) -> list[str]:
    """The variants of ``names`` that run on ``device`` in this install; the others are
    recorded in ``out["skipped"]`` with why (an optional library missing, with its install
    command): skipped, never an error."""
    kept = []
    for name in names:
        why = op.variants[name].why_not(device)
        if why:
            out.setdefault("skipped", {})[name] = why
        else:
            kept.append(name)
    return kept


def run(seeds: list[int], device: str, only: tuple[str, ...] = (),
        done: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every bug of :data:`PLAN` (``only``: of these cases) and the honest rows beside it;
    ``done`` gets the rows so far after each seed (a run stopped at a limit keeps them)."""
    cases = {c.id: c for c in load_cases(ROOT / "cases") if c.op == "linear"}
    op_name = "linear"
    out: dict[str, Any] = {"bugs": [], "honest": []}
    with registry.isolated():
        bugs = quant_planted.planted_bugs()
        alternatives = quant_planted.honest_alternatives()
        for v in [*bugs.values(), *(v for v, _ in alternatives.values())]:
            add_variant(op_name, v)
        for v in member_variants(get_op(op_name), ("e4m3", "e5m2", "e2m1")):
            if v.name not in get_op(op_name).variants:
                add_variant(op_name, v)
        op = get_op(op_name)
        for case_id in dict.fromkeys(c for c, _ in PLAN.values() if not only or c in only):
            heads = sorted({h for c, h in PLAN.values() if c == case_id})
            for seed in seeds:
                one = replace(cases[case_id], seeds=(seed,))
                golden, inputs = fresh_golden(op, one, "cpu")
                dev_inputs = None
                family: dict[str, dict[str, float]] = {}
                for head in heads:
                    quant = op.variants[head].quant
                    names = [head, *(member_name(g) for g in members(op, op.variants[head]
                                                                     .precision, quant)
                                     if device in g.devices and not g.unavailable)]
                    names += [n for n, (_, h) in alternatives.items() if h == head]
                    worst = {"rel_fro": 0.0, "sim_rel_fro": 0.0}
                    for name in _runnable(op, names, device, out):
                        row = _one(op, one, name, head, device, inputs, golden)
                        honest_alt = name in alternatives
                        out["honest"].append({"case": case_id, "head": head, "member": name,
                                              "alternative": honest_alt, "seed": seed,
                                              **row})
                        for k in worst:
                            if isinstance(row.get(k), float) and math.isfinite(row[k]):
                                worst[k] = max(worst[k], row[k])
                    family[head] = worst
                for bug, (c, head) in PLAN.items():
                    if c != case_id or len(_runnable(op, [bug, head], device, out)) < 2:
                        continue
                    variant = bugs[bug]
                    if bug == "bug_stale_scale":
                        # The weight it cached scales for: the previous seed's.
                        if dev_inputs is None:
                            from numcheck.inputs import to_device

                            dev_inputs = to_device(op.make_inputs(one.params, seed - 1), device)
                        assert variant.prepare is not None
                        variant.prepare(dev_inputs, one.params)
                    row = _one(op, one, bug, head, device, inputs, golden)
                    fam = family[head]
                    own = {k: (row[k] / fam[k] if fam[k] > 0 and isinstance(row.get(k), float)
                               else math.inf) for k in ("rel_fro", "sim_rel_fro")}
                    own = {k: (math.inf if math.isnan(v) else v) for k, v in own.items()}
                    out["bugs"].append({
                        "bug": bug, "case": case_id, "head": head, "seed": seed, **row,
                        "family_rel_fro": fam["rel_fro"],
                        "family_sim_rel_fro": fam["sim_rel_fro"],
                        "own_golden": own["rel_fro"], "own_sim": own["sim_rel_fro"],
                        "own_error": max(own.values()), "caught": bool(row["violations"])})
                # A fresh stale variant per seed: its cache holds one previous weight.
                bugs["bug_stale_scale"] = quant_planted.planted_bugs()["bug_stale_scale"]
                registry.set_variant(op_name, bugs["bug_stale_scale"])
                op = get_op(op_name)
                if done is not None:
                    done(out)
    return out


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def table(data: dict[str, Any]) -> str:
    """The catch table (one row per bug, over its seeds) and the honest rows' failures."""
    lines = ["| bug | case (held to) | seeds caught | own error vs the family's worst: golden "
             "(min..max) | simulated (min..max) | GEMM bound ratio (min) | operand findings "
             "(seeds) | caught by | own error >= 2x, missed |",
             "|---|---|---|---|---|---|---|---|---|"]
    by_bug: dict[str, list[dict[str, Any]]] = {}
    for r in data["bugs"]:
        by_bug.setdefault(r["bug"], []).append(r)
    for bug, rows in by_bug.items():
        caught = sum(r["caught"] for r in rows)
        og = [r["own_golden"] for r in rows]
        osim = [r["own_sim"] for r in rows]
        ratios = [r["sim_ratio"] for r in rows if r.get("sim_ratio") is not None]
        keys = sorted({k for r in rows for k in r["violations"]
                       if k.startswith("quant.") or k in ("y.rel_fro", "y.nan")})
        missed = sum(1 for r in rows if r["own_error"] >= BUG_FACTOR and not r["caught"])
        lines.append(
            f"| {bug} | {rows[0]['case']} ({rows[0]['head']}) | {caught}/{len(rows)} | "
            f"{_fmt(min(og))}..{_fmt(max(og))} | {_fmt(min(osim))}..{_fmt(max(osim))} | "
            f"{_fmt(min(ratios)) if ratios else '-'} | "
            f"{sum(r.get('findings', 0) > 0 for r in rows)} | {', '.join(keys) or '-'} | {missed} |")
    honest = data["honest"]
    failed = [r for r in honest if r["violations"]]
    worst_ratio = max((r["sim_ratio"] for r in honest if r.get("sim_ratio") is not None),
                      default=0.0)
    lines += ["", f"honest checks: {len(honest)} ({len({r['member'] for r in honest})} "
                  f"members and alternatives), failed: {len(failed)}; worst GEMM bound ratio "
                  f"{worst_ratio:.3g}"]
    lines += [f"  FAILED {r['member']} seed {r['seed']}: {r['violations']}" for r in failed[:10]]
    return "\n".join(lines)


def _limit_free(violation: str) -> bool:
    """A violation the case file's limits do not set: the quant gate's rules (the GEMM
    bound, the operand checks), an exception, a non-finite output."""
    return violation.startswith("quant.") or violation == "error" or violation.endswith(".nan")


#: The error metrics a catch record holds the value of (the others are named, not kept).
RECORDED = ("rel_fro", "sim_rel_fro")


def _past(value: float | None, limit: float | None) -> bool:
    """Past its limit as numcheck.numerics.verdict.output_violations judges (NaN is past any)."""
    return value is not None and limit is not None and (math.isnan(value) or value > limit)


def recheck(data: dict[str, Any], cases: dict[str, Any]) -> list[str]:
    """The recorded catches the shipped limits no longer hold, one line each. A catch holds
    if a violation of it is limit-free (:func:`_limit_free`) or a recorded error metric
    (:data:`RECORDED`) is past the limit its case now ships for an output it was caught on
    (any output where its violations name none); a catch that rested on other keys alone
    cannot be re-judged from its record and is listed too."""
    lost = []
    for r in data["bugs"]:
        if not r["caught"] or any(_limit_free(v) for v in r["violations"]):
            continue
        budget = cases[r["case"]].budgets[r["head"]].outputs
        named = {v.split(".", 1)[0] for v in r["violations"]} & budget.keys()
        if not any(_past(r.get(metric), budget[output].limits.get(metric))
                   for output in named or budget for metric in RECORDED):
            recorded = ", ".join(f"{m} {r[m]:.3g}" for m in RECORDED if r.get(m) is not None)
            lost.append(f"{r['bug']} on {r['case']} ({r['head']}) seed {r['seed']}: caught by "
                        f"{', '.join(r['violations'])}; {recorded} now within the shipped "
                        "limits")
    return lost


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--first-seed", type=int, default=5000)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--table", type=Path, nargs="+", metavar="JSON")
    ap.add_argument("--cases", nargs="+", default=(), metavar="CASE",
                    help="only the bugs planted in these cases of cases/linear.toml")
    ap.add_argument("--recheck", type=Path, nargs="+", metavar="JSON",
                    help="the recorded catches the shipped limits no longer hold")
    args = ap.parse_args(argv)
    if args.recheck:
        cases = {c.id: c for c in load_cases(ROOT / "cases")}
        lost, n = [], 0
        for path in args.recheck:
            data = json.loads(path.read_text())
            n += sum(r["caught"] for r in data["bugs"])
            lost += [f"{path}: {line}" for line in recheck(data, cases)]
        print("\n".join([*lost, f"{n} recorded catches, {len(lost)} no longer held"]))
        return 1 if lost else 0
    if args.table:
        merged: dict[str, Any] = {"bugs": [], "honest": []}
        for path in args.table:
            data = json.loads(path.read_text())
            merged["bugs"] += data["bugs"]
            merged["honest"] += data["honest"]
        print(table(merged))
        return 0
    t0 = time.monotonic()
    seeds = [args.first_seed + i for i in range(args.seeds)]

    def write(data: dict[str, Any], finished: bool = False) -> None:
        data["meta"] = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device": args.device, "torch": torch.__version__, "machine": platform.machine(),
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "seeds": seeds, "finished": finished, "seconds": round(time.monotonic() - t0, 1),
            "command": " ".join(["python", "-m", "benchmarks.reliability.fp8_catch",
                                 *sys.argv[1:]])}
        if args.json:
            args.json.write_text(json.dumps(data, indent=1, default=float) + "\n")

    data = run(seeds, args.device, tuple(args.cases), write)
    write(data, finished=True)
    print(table(data))
    for name, why in sorted(data.get("skipped", {}).items()):
        print(f"skipped {name}: {why}")
    missed = [r for r in data["bugs"] if r["own_error"] >= BUG_FACTOR and not r["caught"]]
    failed = [r for r in data["honest"] if r["violations"]]
    return 1 if missed or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
