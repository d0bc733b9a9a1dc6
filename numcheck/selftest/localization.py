"""Self-test of localization: does a failure name the place where the planted bug sits?

Each planted bug with a known place (``tests/planted_located.py``: ``EXPECTED`` pairs a bug
with a regular expression its first localization line must match) runs against shipped cases
(shipped golden and seeds) or fresh seeds (a reference computed on the spot), held to the
budget of the variant it imitates, exactly as the gate runs it. Only bugs the gate catches
count: a passing check is never localized. ``benchmarks/reliability/localize_report.py`` prints the
figures of docs/reliability.md ("Localization"); the tests run a cheap subset.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from numcheck.cases import Case
from numcheck.check.against_golden import run_numerics
from numcheck.check.make_golden import fresh_golden
from numcheck.check.run import CaseInputs, run_variant
from numcheck.goldens.case_golden import CaseGolden
from numcheck.inputs import to_device
from numcheck.localize import failure as localize
from numcheck.localize import spread
from numcheck.ops.registry import get_op
from numcheck.ops.spec import VariantError
from numcheck.selftest import held_to, shipped_golden


@dataclass(frozen=True)
class Located:
    """One planted bug on one case (and seed): caught or not, and what the message said."""

    bug: str
    case: str
    seed: int | None
    caught: bool
    #: The localization lines of the failure message ("" when none).
    lines: tuple[str, ...]
    expected: str
    #: The first line matches ``expected``.
    named_first: bool
    #: Some localization line (of any failing output) matches ``expected``.
    named_anywhere: bool
    #: Wall time of the whole check, and of its localization within it.
    seconds: float = 0.0
    localize_seconds: float = 0.0


def locate(
    case: Case, bug: tuple[str, str, str], expected: str, golden: CaseGolden, inputs: CaseInputs,
    *, device: str = "cpu",
) -> Located:
    """Run one planted bug as the gate does and hold its localization to ``expected``."""
    op_name, variant, budget_of = bug
    op = get_op(op_name)
    held = held_to(case, variant, budget_of)
    seed = case.seeds[0] if len(case.seeds) == 1 else None
    spent: list[float] = []
    real = localize.localize_failure

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    t0 = time.perf_counter()
    localize.localize_failure = timed  # the numerics call it through its module
    try:
        result = run_numerics(op, held, variant, device, golden, inputs)
    except VariantError:
        return Located(f"{op_name}::{variant}", case.id, seed, True, (), expected, False, False)
    finally:
        localize.localize_failure = real
    seconds = time.perf_counter() - t0
    if result.passed:
        return Located(f"{op_name}::{variant}", case.id, seed, False, (), expected, False,
                       False, seconds)
    shown = [line for loc in result.localization for line in loc.lines]
    pattern = re.compile(expected)
    first = bool(shown) and pattern.search(shown[0]) is not None
    anywhere = any(pattern.search(line) for line in shown)
    return Located(f"{op_name}::{variant}", case.id, seed, True, tuple(shown), expected,
                   first, anywhere, seconds, sum(spent))


def located_table(
    cases: Iterable[Case], expected: Mapping[tuple[str, str, str], str], goldens_dir: Path,
    *, device: str = "cpu",
) -> list[Located]:
    """Every bug of ``expected`` on every shipped case of its op, on the shipped golden."""
    rows = []
    for case in cases:
        mine = [(bug, rx) for bug, rx in expected.items() if bug[0] == case.op]
        if not mine:
            continue
        golden, inputs = shipped_golden(case, goldens_dir)
        rows += [locate(case, bug, rx, golden, inputs, device=device) for bug, rx in mine]
    return rows


def located_fresh(
    case: Case, expected: Mapping[tuple[str, str, str], str], seeds: Sequence[int],
    *, device: str = "cpu",
) -> list[Located]:
    """Every bug of ``expected`` for the case's op on fresh seeds (a reference per seed)."""
    rows = []
    op = get_op(case.op)
    for seed in seeds:
        one = replace(case, seeds=(seed,))
        golden, inputs = fresh_golden(op, one, "cpu")
        rows += [locate(one, bug, rx, golden, inputs, device=device)
                 for bug, rx in expected.items() if bug[0] == case.op]
    return rows


@dataclass(frozen=True)
class Honest:
    """Localization forced on a good variant's output: what honest rounding looks like."""

    case: str
    variant: str
    seed: int
    output: str
    #: The largest lift of any grouping whose heavy groups carry >= MIN_SHARE of the error
    #: on <= MAX_ELEMENT_SHARE of the elements (0 when none does)...
    max_lift: float
    grouping: str
    #: ...and the largest excess of the gap over its shuffled gap, among those with lift >=
    #: MIN_LIFT (-1 when none gets that far).
    max_excess: float
    #: What the localization would say, and whether it names a place (a concentrated
    #: grouping or a transform; "a few elements carry the error" describes, it does not).
    line: str
    named_place: bool


def honest_table(case: Case, variants: Sequence[str], golden: CaseGolden, inputs: CaseInputs,
                 *, device: str = "cpu") -> list[Honest]:
    """Localize every output of every good variant, pass or fail, against ``golden``."""
    op = get_op(case.op)
    rows = []
    for seed in case.seeds:
        cpu_inputs, _ = inputs.get(seed)
        for variant in variants:
            out = run_variant(op.variants[variant], op, to_device(cpu_inputs, device), case,
                              device)
            budget = case.budgets[variant]
            for name in budget.outputs:
                stored = golden.output(seed, name)
                expected, positions = stored.values, stored.positions
                ob = budget.outputs[name]
                loc = localize.localize_output(
                    name, out[name], expected, positions, op.structure.get(name), cpu_inputs,
                    case.params, atol=ob.atol, rtol=ob.rtol, seed=seed)
                eligible = [c for c in loc.groupings if c.error_share >= spread.MIN_SHARE
                            and c.element_share <= spread.MAX_ELEMENT_SHARE]
                top = max(eligible, key=lambda c: c.lift, default=None)
                tested = [c.excess for c in eligible
                          if c.lift >= spread.MIN_LIFT]
                rows.append(Honest(case.id, variant, seed, name,
                                   0.0 if top is None else top.lift,
                                   "" if top is None else top.grouping,
                                   max(tested, default=-1.0),
                                   loc.lines[0] if loc.lines else "",
                                   loc.concentrated or loc.transform is not None))
    return rows


def named_first_fraction(rows: Sequence[Located]) -> tuple[int, int]:
    """(named first, caught): over the caught ones only: a pass has no message."""
    caught = [r for r in rows if r.caught]
    return sum(r.named_first for r in caught), len(caught)
