"""The gate's self-test: does it catch planted bugs, and does it pass good variants?

Two questions, answered without pytest so tests and ``benchmarks/reliability_report.py`` share
the code:

- **caught**: a (known-bad) variant held to a shipped case's budget, against the shipped
  golden, must fail: a budget violation, or a :class:`~numcheck.numerics.VariantError`.
- **false failures**: a good variant must pass on fresh seeds. Each seed gets its own
  reference, computed on the spot (on the CPU by default, as the shipped goldens are) and
  packed exactly as a golden file would store it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from numcheck.cases import Case
from numcheck.check import run_check
from numcheck.goldens import Golden, GoldenError
from numcheck.numerics import CaseInputs, VariantError, fresh_golden
from numcheck.ops.registry import OpSpec, get_op

__all__ = ["Outcome", "Planted", "catch_table", "fresh_golden", "fresh_seed_outcomes",
           "held_to", "shipped_golden", "verdict"]


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


def verdict(
    op: OpSpec, case: Case, variant: str, device: str, golden: Golden, inputs: CaseInputs
) -> Outcome:
    """Run one check with the gates ``pytest --numcheck`` runs on every device (numerics and
    the cast ledger), and fold every way of failing into an :class:`Outcome`."""
    seed = case.seeds[0] if len(case.seeds) == 1 else None
    try:
        result = run_check(op, case, variant, device, inputs, golden, gates={"casts"})
    except (VariantError, GoldenError) as exc:
        return Outcome(variant, seed, False, f"{type(exc).__name__}: {exc}".splitlines()[0])
    worst = result.worst()
    return Outcome(variant, seed, worst is None, "" if worst is None else worst.describe())


def fresh_seed_outcomes(
    case: Case, variants: Sequence[str], seeds: Sequence[int], *,
    device: str = "cpu", reference_device: str = "cpu",
) -> list[Outcome]:
    """Every variant on every seed, each against that seed's fresh reference."""
    op = get_op(case.op)
    outcomes = []
    for seed in seeds:
        one = replace(case, seeds=(seed,))
        golden, inputs = fresh_golden(op, one, reference_device)
        outcomes += [verdict(op, one, v, device, golden, inputs) for v in variants]
    return outcomes


@dataclass(frozen=True)
class Planted:
    """A known-bad variant of the self-test and the shipped variant whose budget it is held to."""

    op: str
    variant: str
    held_to: str


def shipped_golden(case: Case, goldens_dir: Path) -> Golden:
    """The committed golden of ``case``."""
    from numcheck.goldens import golden_path, load_golden

    path = golden_path(goldens_dir, case.op, case.id)
    return load_golden(path, case=case.id, regen_hint="")


def catch_table(
    cases: Sequence[Case], bugs: Sequence[Planted], goldens_dir: Path, *, device: str = "cpu"
) -> list[tuple[Planted, Case, Outcome]]:
    """Each planted bug against every shipped case of its op, on the shipped golden and seeds."""
    rows = []
    for case in cases:
        op = get_op(case.op)
        mine = [b for b in bugs if b.op == case.op]
        if not mine:
            continue
        golden, inputs = shipped_golden(case, goldens_dir), CaseInputs(op, case)
        for bug in mine:
            held = held_to(case, bug.variant, bug.held_to)
            rows.append((bug, case, verdict(op, held, bug.variant, device, golden, inputs)))
    return rows
