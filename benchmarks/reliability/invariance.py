"""Which shipped variants are deterministic and batch-invariant on a device, measured.

    python -m benchmarks.reliability.invariance [--device cuda] [--runs 10] \
        [--requests first-middle-last]
        [-k SUBSTRING] [--json out.json]

For every shipped case with numerics (every point of a sweep) and every variant that runs on
``--device``, the reference included, on the case's first seed: the variant called ``--runs``
times on the same inputs, each later call's outputs compared bit for bit with the first's
(determinism), and requests of the batch computed alone, their outputs compared bit for bit
with their rows of the whole batch's (batch invariance; the first, middle and last request,
or ``--requests all``, up to 64 evenly spaced). The same code as the gates
(numcheck.check.invariance), whatever the case files' keys say.

Prints one row per (case, variant): runs that differed, requests that differed, the first
difference of each, and what the case's ``deterministic`` / ``batch_invariant`` keys say
for this device (``on``: the gate holds it here; ``off``). Last, per case, the keys the
measurement supports on this device, to paste. Exits 1 when a key that is on fails here
(the gate would fail), 0 otherwise; ``--json`` keeps every row and the environment.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import Case, load_cases
from numcheck.check.invariance import measure_invariance
from numcheck.check.run import CaseInputs
from numcheck.invariance.limits import InvarianceSpec
from numcheck.ops.batch import batch_size
from numcheck.ops.registry import get_op
from numcheck.ops.spec import VariantError

ROOT = Path(__file__).resolve().parents[2]

#: ``--requests all`` computes at most this many requests of one batch alone.
MAX_REQUESTS = 64


def _requests(size: int, how: str) -> tuple[int, ...] | None:
    if how != "all":
        return None  # the gate's default: first, middle, last
    if size <= MAX_REQUESTS:
        return tuple(range(size))
    return tuple(sorted({round(i * (size - 1) / (MAX_REQUESTS - 1)) for i in range(MAX_REQUESTS)}))


def _first(diffs: list[dict[str, Any]]) -> str:
    if not diffs:
        return ""
    outputs = diffs[0].get("outputs") or [{}]
    return str(outputs[0].get("text", ""))


def measure(case: Case, variant: str, device: str, runs: int, requests: str) -> dict[str, Any]:
    """One (case, variant) on ``device``: both properties, as the gates measure them."""
    op = get_op(case.op)
    cpu_inputs, _ = CaseInputs(op, case).get(case.seeds[0])
    names = (op.reference, *case.variants)
    batch = op.batch is not None
    chosen = None
    if batch:
        assert op.batch is not None
        chosen = _requests(batch_size(op.batch, cpu_inputs, case.params), requests)
    probe = replace(
        case,
        deterministic=InvarianceSpec(names, (device,), runs=runs),
        batch_invariant=InvarianceSpec(names, (device,), requests=chosen) if batch else None)
    t0 = time.monotonic()
    try:
        report = measure_invariance(op, probe, variant, device, cpu_inputs, determinism=True,
                                    batch=batch).as_dict()
    except (VariantError, ValueError) as exc:
        return {"error": str(exc).splitlines()[0]}
    det, bat = report.get("determinism") or {}, report.get("batch_invariance") or {}
    return {
        "compared": report["compared"],
        "runs": det.get("runs"), "runs_differing": det.get("runs_differing"),
        "determinism_first": _first(det.get("differences", [])),
        "batch": bat.get("batch"), "requests": bat.get("requests"),
        "requests_differing": bat.get("requests_differing"),
        "batch_first": _first(bat.get("differences", [])),
        "seconds": round(time.monotonic() - t0, 3),
    }


def _key_state(spec: InvarianceSpec | None, variant: str, device: str) -> str:
    return "on" if spec is not None and spec.holds(variant, device) else "off"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--requests", choices=("first-middle-last", "all"),
                    default="first-middle-last")
    ap.add_argument("-k", dest="select", default="", help="only cases whose op::id contains it")
    ap.add_argument("--cases", type=Path, default=ROOT / "cases")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    for case in load_cases(args.cases):
        key = f"{case.op}::{case.id}"
        if case.perf_only or args.device not in case.devices or args.select not in key:
            continue
        op = get_op(case.op)
        for name in (op.reference, *case.variants):
            if args.device not in op.variants[name].devices:
                continue
            row = {"case": key, "variant": name, "device": args.device,
                   "deterministic_key": _key_state(case.deterministic, name, args.device),
                   "batch_invariant_key": _key_state(case.batch_invariant, name, args.device),
                   **measure(case, name, args.device, args.runs, args.requests)}
            rows.append(row)
            print(_line(row), flush=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
           "threads": torch.get_num_threads(), "runs": args.runs, "requests": args.requests,
           "seconds": round(time.monotonic() - start, 1)}
    for r in rows:
        r["broken"] = _broken(r)
    broken = [r for r in rows if r["broken"]]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"env": env, "rows": rows}, indent=1) + "\n")
    print()
    print(f"torch {env['torch']} cuda {env['cuda']} on {env['gpu']}, {args.runs} runs, "
          f"requests {args.requests}, {env['seconds']} s")
    print(f"{'case':44} {'variant':15} {'deterministic':28} {'batch-invariant':28} keys")
    for r in rows:
        print(_line(r))
    print()
    for line in suggestions(rows):
        print(line)
    if broken:
        print(f"\n{len(broken)} check(s) whose case key is on fail here: "
              + ", ".join(f"{r['case']}::{r['variant']}" for r in broken))
    return 1 if broken else 0


def _cell(differing: int | None, total: int | None, first: str) -> str:
    if differing is None:
        return "-"
    return "yes" if not differing else f"NO {differing}/{total}: {first}"[:60]


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['case']:44} {r['variant']:15} ERROR {r['error']}"
    det = _cell(r["runs_differing"], (r["runs"] or 1) - 1, r["determinism_first"])
    bat = _cell(r["requests_differing"], len(r["requests"] or ()), r["batch_first"])
    keys = f"det {r['deterministic_key']}, batch {r['batch_invariant_key']}"
    return f"{r['case']:44} {r['variant']:15} {det:28} {bat:28} {keys}"


def _broken(r: dict[str, Any]) -> bool:
    """A check the case files hold to a property it does not have here."""
    if "error" in r:
        return r["deterministic_key"] == "on" or r["batch_invariant_key"] == "on"
    return bool((r["deterministic_key"] == "on" and r["runs_differing"])
                or (r["batch_invariant_key"] == "on" and r["requests_differing"]))


def suggestions(rows: list[dict[str, Any]]) -> list[str]:
    """Per case, the variants that held each property here, as the keys to paste."""
    lines = ["keys the measurement supports on this device (variants that held):"]
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_case.setdefault(r["case"], []).append(r)
    for case, found in by_case.items():
        det = [r["variant"] for r in found if "error" not in r and not r["runs_differing"]]
        bat = [r["variant"] for r in found if "error" not in r and r["requests_differing"] == 0]
        device = found[0]["device"]
        lines.append(f"  {case}: deterministic = {_toml(det, device)}; "
                     f"batch_invariant = {_toml(bat, device)}")
    return lines


def _toml(names: list[str], device: str) -> str:
    if not names:
        return "(none)"
    return "{ variants = [" + ", ".join(f'"{n}"' for n in names) + f'], devices = ["{device}"] }}'


if __name__ == "__main__":
    raise SystemExit(main())
