"""Where a limit comes from, and what to do when a check misses it.

A budget miss has three usual causes, each with its own next step: the change under test is
wrong (fix the variant), the budget is too tight for a correct variant (calibrate the honest
family of its class, never the variant alone), or the reference itself changed (regenerate
the golden). When it is not clear which, the variant is the suspect. The failure message
names where the limit is set so the reader can tell which: the case file and line of the key
(``cases/indexer.toml:24``), or the default it comes from, and why that is the place (a
``budget_like`` lender and its line, a coarse output's storage class). None of that is
worked out here: :func:`numcheck.cases.limits.limit_origin` gives each limit's origin, as
recorded when the case was loaded, and :func:`origin_text` only words it. Nothing here
imports torch or pytest.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from numcheck.numerics.budget_origin import (
    DEFAULTS_SOURCE,
    FixtureArg,
    GateDefault,
    Given,
    Inherited,
    Lent,
    NotMeasured,
    Origin,
)
from numcheck.numerics.budgets import BUDGET_LIKE


def origin_text(
    origin: Origin,
    *,
    case: str,
    variant: str,
    output: str,
    key: str,
    value: float | bool | str | None,
    source: str,
    case_line: int | None = None,
    override: str = "",
) -> str:
    """Where the limit ``key = value`` of ``output`` of ``variant`` is set, for a message:
    ``cases/indexer.toml:24 ([tiny.budget.bf16.logits] calc_diff = 3.8e-06)``, then why that
    table holds the variant (``; bf16_folded takes bf16's budgets: budget_like at
    cases/indexer.toml:10``, ``; y is stored in bf16, so tf32 takes bf16's budget on it``);
    or ``calc_diff = 0.0001: default for bf16 from numcheck/numerics/budgets.py (no key in
    cases/indexer.toml:12 [tiny]; set [tiny.budget.bf16.logits] calc_diff to override)``.
    ``source``: the case file as the message shows it; ``case_line``: the line of the
    case's table (``Case.lines[()]``); ``value``: a number, a flag, a rule in words
    (``holds 'x' on cpu: ...``) or None (the key alone: :func:`numcheck.cases.limits.
    limit_origin` gives the key and value of every kind of limit); ``override``: how to
    override a default, where it is not a key of the case (the ``numcheck_golden``
    fixture's ``budget=``)."""
    steps: list[str] = []
    table = variant  # the table a key set for this variant goes in: its own, or its lender's
    while isinstance(origin, Lent | Inherited):
        if isinstance(origin, Lent):
            steps.append(f"{origin.borrower} takes {origin.lender}'s budgets: {BUDGET_LIKE} at "
                         f"{_at(source, origin.line)}")
            if origin.borrower == variant:
                table = origin.lender
        else:
            steps.append(f"{origin.output} is stored in {origin.storage}, so {variant} takes "
                         f"{origin.variant}'s budget on it (a key in [{case}.budget.{table}."
                         f"{origin.output}] overrides it)")
        origin = origin.source
    why = "".join(f"; {step}" for step in steps)
    setting = (key if value is None else f"{key} {value}" if isinstance(value, str) else
               f"{key} = {str(value).lower()}" if isinstance(value, bool) else
               f"{key} = {value:g}")
    if isinstance(origin, Given):
        return f"{_at(source, origin.line)} ([{origin.table}] {setting}{why})"
    if isinstance(origin, FixtureArg):
        return f"{origin.where} (budget= of this check: {setting}{why})"
    if isinstance(origin, NotMeasured):
        return f"{key}: no limit, not measured ({origin.why})"
    if isinstance(origin, GateDefault):
        return (f"{key}: default of the {origin.gate} gate (set [{origin.table}] {key} in "
                f"{source} to override)")
    if origin.storage is not None:  # a Default, the one kind left
        steps.append(f"{output} is stored in {origin.storage}, coarser than {variant}'s class")
    row = (f"the simulated reference's default for {origin.sums} ({origin.precision})"
           if origin.sums else f"default for {origin.precision}")
    override = override or (f"no key in {_at(source, case_line)} [{case}]; set "
                            f"[{case}.budget.{table}.{output}] {key} to override")
    return f"{setting}: {row} from {DEFAULTS_SOURCE} ({''.join(f'{s}; ' for s in steps)}{override})"


def _at(source: str, line: int | None) -> str:
    return source if line is None else f"{source}:{line}"


def calibrate_command(case_nodeid: str, device: str, *, pool: str = "",
                      checks: Sequence[str] = ()) -> str:
    """The command that measures a case's variants over fresh seeds and suggests budgets;
    ``pool``: a ``--numcheck-calibrate-pool`` option naming the honest family to measure;
    ``checks``: the node ids to run instead of the whole case (the family's checks)."""
    targets = " ".join(shlex.quote(c) for c in checks) or shlex.quote(case_nodeid)
    command = f"pytest --numcheck --numcheck-calibrate --numcheck-device {device} {targets}"
    return f"{command} {pool}" if pool else command


def next_steps(calibrate: str, regenerate: str, *, family: str = "") -> list[str]:
    """The causes of a budget miss and the step for each. ``calibrate`` measures the
    honest family of the variant's class (``family``: the class, for the wording), never
    the failing variant alone: a calibration of a wrong variant budgets the bug in."""
    who = f"the honest {family} family" if family else "the honest family of its class"
    return [
        "  next step:   my change is wrong -> fix the variant, then run 'reproduce'",
        (f"               my budget is too tight (a correct variant) -> calibrate {who}, not "
         f"this variant alone: {calibrate}"),
        ("               (the family: the op's reference implementation of the class, your "
         "other honest ones, the GEMMs numcheck.add_gemm_members registers; "
         "--numcheck-calibrate-write sets its tables, a variant outside it takes them with "
         "budget_like; docs/budgets.md, \"A budget for a new kernel\")"),
        ("               not sure it is correct -> this variant is the suspect: change no "
         "budget; 'reproduce' with --numcheck-explain shows where it strays, and a calibration "
         "that pools it refuses to write past its class's honest limits"),
        f"               the reference changed -> {regenerate}",
    ]
