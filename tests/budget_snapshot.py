"""What the gate checks for every shipped case, as plain data: the snapshot of loaded budgets.

Every (case, variant, output) budget after loading (a sweep's once: its points share them) (defaults filled in, coarse outputs
completed, borrowed budgets resolved), every overhead limit, perf option and expectation,
flattened to ``{"<op>::<case> <variant> <output>": {key: value}}``. tests/test_budget_snapshot.py
compares the shipped case files with tests/data/shipped-budgets.json, so that a change to a
case file's layout (comments, ``budget_like`` instead of copies) provably changes nothing the
gate checks, and a budget change on purpose shows as a diff of that file in review.

    python -m tests.budget_snapshot            # compare; exit 1 and list what differs
    python -m tests.budget_snapshot --write    # after changing budgets on purpose

(from the repository root: this tree's numcheck, whatever else is installed)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "data" / "shipped-budgets.json"


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def snapshot(cases_dir: Path = ROOT / "cases") -> dict[str, dict[str, Any]]:
    """Every loaded value the gate checks, keyed ``"<op>::<case> <variant> <part>"``."""
    from numcheck.cases import load_cases

    out: dict[str, dict[str, Any]] = {}
    for case in load_cases(cases_dir):
        name = f"{case.op}::{case.table}"
        if case.sweep is not None and case.sweep.index > 0:
            # A sweep's points share its budgets and limits: its first point stands for
            # them, and every point's swept values are listed with the case.
            out[f"{name} - case"]["points"][case.sweep.label] = _plain(dict(case.sweep.values))
            continue
        for variant, budget in case.budgets.items():
            for output, ob in budget.outputs.items():
                out[f"{name} {variant} {output}"] = _plain(ob)
            if budget.topk is not None:
                out[f"{name} {variant} topk"] = _plain(budget.topk)
        for variant, limits in case.overhead.items():
            out[f"{name} {variant} overhead"] = _plain(limits)
        for variant, spec in case.perf.items():
            out[f"{name} {variant} perf"] = _plain(spec)
        for variant, expect in case.expect.items():
            out[f"{name} {variant} expect"] = _plain(expect)
        out[f"{name} - case"] = {"seeds": list(case.seeds), "devices": list(case.devices),
                                 "variants": list(case.variants), "perf_only": case.perf_only,
                                 "params": _plain(dict(case.params))}
        if case.sweep is not None:
            out[f"{name} - case"]["points"] = {
                case.sweep.label: _plain(dict(case.sweep.values))}
    return out


def limits(case: Any) -> Iterator[tuple[str, str, str, str]]:
    """Every limit of a loaded case as a failure names it: ``(variant, output or gate,
    metric, device class)``: each budget key, each class of each ``speedup_min``, each
    overhead key, and each invariance key for the variants and classes it holds."""
    from numcheck.gates import CASTS_GATE, GATES, KERNELS_GATE, INVARIANCE_GATES

    for variant, budget in case.budgets.items():
        for output, keys in budget.origins.items():
            yield from ((variant, output, key, "cpu") for key in keys)
    for variant, spec in case.perf.items():
        yield from ((variant, "perf", "speedup_min", cls) for cls in spec.speedup_min)
    for variant in case.overhead:
        yield from ((variant, gate.name, metric, "cpu")
                    for gate in (CASTS_GATE, KERNELS_GATE) for metric in gate.metrics)
    for name in INVARIANCE_GATES:
        spec = getattr(case, GATES[name].case_key)
        if spec is not None:
            yield from ((variant, name, GATES[name].metrics[0], cls)
                        for variant in spec.variants for cls in spec.devices)


@functools.cache
def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def misplaced(case: Any, variant: str, output: str, metric: str, cls: str) -> str | None:
    """What is wrong with where :func:`numcheck.cases.limits.limit_origin` says a limit of a
    shipped case is set, read against the file's text; None when it is right: a key given at
    a line is on that line with the loaded value, and a default is set by no key of the
    variant's tables."""
    from numcheck.cases.limits import limit_origin
    from numcheck.numerics.budget_origin import (
        Default,
        GateDefault,
        Given,
        NotMeasured,
        lender_of,
        root,
    )

    limit = limit_origin(case, variant, output, metric, cls=cls)
    if limit is None:
        return "no origin"
    origin = root(limit.origin)
    if isinstance(origin, NotMeasured):
        return None if limit.value is None else f"not measured, but a limit of {limit.value}"
    if isinstance(origin, Given):
        if origin.line is None:
            return f"{origin.table}: no line"
        text = _lines(case.source)[origin.line - 1]
        name = limit.key.rpartition(".")[2]
        found = re.search(rf"(?:^|[\s{{,.]){re.escape(name)}\s*=\s*([^,}}#\s]+)", text)
        if found is None:
            return f"line {origin.line} sets no {name}: {text!r}"
        if isinstance(limit.value, float) and float(found[1]) != limit.value:
            return f"line {origin.line} sets {name} = {found[1]}, loaded {limit.value!r}"
        return None
    if isinstance(origin, Default | GateDefault):
        owner = lender_of(case.budgets[variant].origins) or variant
        path = (("budget", owner, output, limit.key) if isinstance(origin, Default)
                else ("overhead", variant, limit.key))
        line = case.lines.get(path)
        return None if line is None else f"a default, but line {line} sets it"
    return f"unexpected origin {origin!r}"


def _flat(entry: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"limits": {"rel_fro": 1e-3}}`` -> ``{"limits.rel_fro": 1e-3}``."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(now: dict[str, dict[str, Any]], stored: dict[str, dict[str, Any]]) -> list[str]:
    """Every (entry, key) whose value differs, one line each (nested keys dotted)."""
    lines = []
    for entry in sorted(set(now) | set(stored)):
        if entry not in now or entry not in stored:
            lines.append(f"{entry}: {'only in the snapshot' if entry in stored else 'new'}")
            continue
        a, b = _flat(now[entry]), _flat(stored[entry])
        for key in sorted(set(a) | set(b)):
            if a.get(key, "(absent)") != b.get(key, "(absent)"):
                lines.append(f"{entry} {key}: snapshot {b.get(key, '(absent)')!r}, "
                             f"now {a.get(key, '(absent)')!r}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the snapshot from cases/")
    args = ap.parse_args(argv)
    now = snapshot()
    if args.write:
        SNAPSHOT.parent.mkdir(exist_ok=True)
        # One entry a line: a budget changed on purpose is a one-line diff in review.
        body = ",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                          for k, v in sorted(now.items()))
        SNAPSHOT.write_text("{\n" + body + "\n}\n")
        print(f"wrote {SNAPSHOT.relative_to(ROOT)}: {len(now)} entries")
        return 0
    diff = differences(now, json.loads(SNAPSHOT.read_text()))
    print("\n".join(diff) or f"identical: {len(now)} entries")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
