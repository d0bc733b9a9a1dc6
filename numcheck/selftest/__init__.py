"""The gate's self-test: does it catch planted bugs, and does it pass good variants?

Two questions, answered without pytest so that tests and
``benchmarks/reliability/reliability_report.py`` share the code:

- **caught**: a (known-bad) variant held to a shipped case's budget, against the shipped
  golden, must fail: a budget violation, or a :class:`~numcheck.ops.spec.VariantError`.
- **false failures**: a good variant must pass on fresh seeds. Each seed gets its own
  reference, computed on the spot (on the CPU by default, as the shipped goldens are) and
  packed exactly as a golden file would store it.

This package is the room of self-tests; this module is the gate's. Beside it,
:mod:`numcheck.selftest.localization` asks the same of localization: does a failure name the
place where the planted bug sits?
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from numcheck.cases import Case
from numcheck.check import run_check
from numcheck.check.make_golden import fresh_golden as make_fresh_golden
from numcheck.check.run import CaseInputs
from numcheck.gates import CASTS_GATE
from numcheck.goldens.case_golden import CaseGolden, load_for_case
from numcheck.goldens.files import GoldenError, golden_path
from numcheck.inputs import to_device
from numcheck.ops.registry import OpSpec, get_op
from numcheck.ops.spec import VariantError
from numcheck.prepare import with_preparation

__all__ = ["Outcome", "Planted", "catch_table", "error_to_family", "family_outcomes",
           "fresh_golden", "fresh_seed_outcomes", "held_to", "numeric_verdict",
           "shipped_golden", "verdict"]


@dataclass(frozen=True)
class Outcome:
    """One check's verdict: passed, or why not (the worst violation, or the error)."""

    variant: str
    seed: int | None
    passed: bool
    reason: str


def held_to(case: Case, variant: str, budget_of: str) -> Case:
    """``case`` running ``variant`` (only) under the budgets (numerics and overhead) the case
    gives ``budget_of``."""
    overhead = dict(case.overhead)
    if budget_of in case.overhead:  # the cast/copy limits too: an extra copy must show
        overhead[variant] = case.overhead[budget_of]
    return replace(
        case, variants=(variant,), budgets={**case.budgets, variant: case.budgets[budget_of]},
        overhead=overhead,
    )


#: The gates ``pytest --numcheck`` runs on every device besides the numerics (the device
#: defaults of numcheck.overhead.limits.default_gates; CUDA adds the kernel audit).
EVERY_DEVICE_GATES = (CASTS_GATE.name,)


def verdict(
    op: OpSpec, case: Case, variant: str, device: str, golden: CaseGolden, inputs: CaseInputs,
    *, gates: Collection[str] = EVERY_DEVICE_GATES,
) -> Outcome:
    """Run one check with the gates ``pytest --numcheck`` runs on every device (numerics and
    the cast ledger; ``gates=()``: the numerics alone), and fold every way of failing into an
    :class:`Outcome`."""
    seed = case.seeds[0] if len(case.seeds) == 1 else None
    try:
        result = run_check(op, case, variant, device, inputs, golden, gates=set(gates))
    except (VariantError, GoldenError) as exc:
        return Outcome(variant, seed, False, f"{type(exc).__name__}: {exc}".splitlines()[0])
    worst = result.worst()
    return Outcome(variant, seed, worst is None, "" if worst is None else worst.describe())


def fresh_golden(op: OpSpec, case: Case, device: str = "cpu") -> tuple[CaseGolden, CaseInputs]:
    """The case's golden made now, in memory, on ``device``; with the inputs it came from.

    The last few are kept: the self-test holds many variants to the same seed's golden."""
    # repr: a parameter may be a table (a case's inputs: numcheck/distributions).
    params = tuple(sorted((k, repr(v)) for k, v in case.params.items()))
    key = (op.name, op.version, case.id, params, case.seeds, device)
    if key not in _FRESH:
        while len(_FRESH) >= _FRESH_KEPT:
            _FRESH.pop(next(iter(_FRESH)))
        _FRESH[key] = make_fresh_golden(op, case, device)
    return _FRESH[key]


_FRESH: dict[tuple[Any, ...], tuple[CaseGolden, CaseInputs]] = {}
_FRESH_KEPT = 4


def fresh_seed_outcomes(
    case: Case, variants: Sequence[str], seeds: Sequence[int], *,
    device: str = "cpu", reference_device: str = "cpu",
    gates: Collection[str] = EVERY_DEVICE_GATES,
) -> list[Outcome]:
    """Every variant on every seed, each against that seed's fresh reference."""
    op = get_op(case.op)
    outcomes = []
    for seed in seeds:
        one = replace(case, seeds=(seed,))
        golden, inputs = fresh_golden(op, one, reference_device)
        outcomes += [verdict(op, one, v, device, golden, inputs, gates=gates) for v in variants]
    return outcomes


def numeric_verdict(
    op: OpSpec, case: Case, variant: str, device: str, golden: CaseGolden, inputs: CaseInputs
) -> Outcome:
    """The numerics check alone (no cast gate): how the honest family is judged, since
    its members are about where rounding happens, not about copies."""
    return verdict(op, case, variant, device, golden, inputs, gates=())


def family_outcomes(
    case: Case, precision: str, members: Sequence[str], seeds: Sequence[int], *,
    device: str = "cpu", reference_device: str = "cpu",
) -> list[Outcome]:
    """Every honest ``members`` of ``precision`` on every seed, each held to the case's
    budget of the shipped ``precision`` variant, against that seed's fresh reference."""
    op = get_op(case.op)
    outcomes = []
    for seed in seeds:
        one = replace(case, seeds=(seed,))
        golden, inputs = fresh_golden(op, one, reference_device)
        for name in members:
            if device not in op.variants[name].devices:
                continue
            held = held_to(one, name, precision)
            outcomes.append(numeric_verdict(op, held, name, device, golden, inputs))
    return outcomes


def error_to_family(
    case: Case, variant: str, members: Sequence[str], seed: int, *, device: str = "cpu"
) -> float:
    """A variant's own error against honest rounding on the same inputs: the largest, over
    outputs, of its worst element error divided by the honest family's worst element error
    (members that cannot run on ``device`` are skipped; inf where the family is exact and
    the variant is not, or where the variant raises or gives a non-finite for a finite)."""
    op = get_op(case.op)
    key = (case.op, case.id, seed, device, tuple(members))
    if key not in _FAMILY_WORST:
        inputs = op.make_inputs(case.params, seed)
        ref = with_preparation(op.variants[op.reference])(inputs, case.params)
        dev = to_device(inputs, device)
        honest: dict[str, float] = {}
        for name in members:
            if device in op.variants[name].devices:
                out = with_preparation(op.variants[name])(dev, case.params)
                for output, err in _worst_errors(op, out, ref).items():
                    honest[output] = max(honest.get(output, 0.0), err)
        while len(_FAMILY_WORST) >= _FAMILY_KEPT:  # a few (seed, family) at a time
            _FAMILY_WORST.pop(next(iter(_FAMILY_WORST)))
        _FAMILY_WORST[key] = (ref, dev, honest)
    ref, dev, honest = _FAMILY_WORST[key]
    try:
        mine = _worst_errors(op, with_preparation(op.variants[variant])(dev, case.params), ref)
    except Exception:
        return math.inf
    ratios = [
        (mine[o] / honest[o]) if honest.get(o, 0.0) > 0 else (math.inf if mine[o] else 0.0)
        for o in mine
    ]
    return max(ratios, default=0.0)


_FAMILY_WORST: dict[tuple[Any, ...], tuple[Any, Any, dict[str, float]]] = {}
#: Families kept: callers loop bugs inside seeds or seeds inside bugs, and a seed's bugs are
#: measured against the family of the class each is held to (bf16, tf32).
_FAMILY_KEPT = 4


def _worst_errors(op: OpSpec, out: Any, ref: Any) -> dict[str, float]:
    """Worst |out - ref| of every non-top-k output (inf for a non-finite where ref is finite)."""
    import torch

    errs = {}
    for name in op.outputs:
        if op.topk is not None and name == op.topk.indices:
            continue
        a, e = out[name].detach().cpu().double(), ref[name].double()
        if a.shape != e.shape or bool((torch.isfinite(e) & ~torch.isfinite(a)).any()):
            errs[name] = math.inf
            continue
        both = torch.isfinite(a) & torch.isfinite(e)
        errs[name] = float((a - e).abs()[both].max()) if bool(both.any()) else 0.0
    return errs


@dataclass(frozen=True)
class Planted:
    """A known-bad variant of the self-test and the shipped variant whose budget it is held to."""

    op: str
    variant: str
    held_to: str


def shipped_golden(case: Case, goldens_dir: Path) -> tuple[CaseGolden, CaseInputs]:
    """The committed golden of ``case``, validated for it; with the case's inputs."""
    inputs = CaseInputs(get_op(case.op), case)
    path = golden_path(goldens_dir, case.op, case.id)
    golden = load_for_case(path, inputs.op, case, fingerprint=inputs.fingerprint, regen_hint="")
    return golden, inputs


def catch_table(
    cases: Sequence[Case], bugs: Sequence[Planted], goldens_dir: Path, *, device: str = "cpu",
    gates: Collection[str] = EVERY_DEVICE_GATES,
) -> list[tuple[Planted, Case, Outcome]]:
    """Each planted bug against every shipped case of its op that runs the variant it
    imitates (whose budget it is held to), on the shipped golden and seeds."""
    rows = []
    for case in cases:
        op = get_op(case.op)
        mine = [b for b in bugs if b.op == case.op and b.held_to in case.budgets]
        if not mine:
            continue
        golden, inputs = shipped_golden(case, goldens_dir)
        for bug in mine:
            held = held_to(case, bug.variant, bug.held_to)
            rows.append((bug, case, verdict(op, held, bug.variant, device, golden, inputs,
                                            gates=gates)))
    return rows
