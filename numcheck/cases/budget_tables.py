"""A case's budget tables: read, borrowed, completed, each key's origin decided once.

``[<case>.budget.<variant>.<output>]`` tables give the keys a case cares about; ``budget_like
= "<lender>"`` reads another variant's tables as the variant's own; a coarse output takes the
storage class's keys (:func:`numcheck.numerics.budgets.coarse_inheritance`); the rest comes
from the defaults row (:func:`numcheck.numerics.budgets.complete_budget`). Each key's origin
(:mod:`numcheck.numerics.budget_origin`) is decided here, with its value, and kept in the
budget. A mistake is a :class:`~numcheck.numerics.budgets.BudgetError` keyed from the case
(``budget.bf16.y.rel_fro``); the loader (:mod:`numcheck.cases`) adds the file and the case.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from numcheck.honest.gemm_family import member_name, members, missing_envelope, yardstick
from numcheck.numerics.budget_origin import Given, Inherited, Lent, NotMeasured, Origin
from numcheck.numerics.budgets import (
    BUDGET_LIKE,
    BudgetError,
    Unmeasured,
    VariantBudget,
    coarse_inheritance,
    complete_budget,
    describe,
    sim_default_row,
)
from numcheck.numerics.metric_names import SIM_METRICS
from numcheck.ops.registry import OpSpec

#: Where each key of a case is set: its path below the case's table -> 1-based line.
Lines = Mapping[tuple[str, ...], int]


def parse_budgets(
    case: str, path: Path, lines: Lines, body: Mapping[str, Any], op: OpSpec,
    variants: tuple[str, ...], runs_on: Mapping[str, tuple[str, ...]], *,
    measuring: bool = False,
) -> dict[str, VariantBudget]:
    """Every running variant's complete budget, with the origin of every key.

    ``case``, ``path`` and ``lines``: the case's table, its file and where each of its keys
    is set. A key for a metric the variant's checks cannot measure on the case's devices is
    an error naming the fix; a default of one that is measured nowhere is left out. A variant
    with a declared quantization always has its ``sim_*`` limits: the case's, or the
    simulated reference's default row of its sums; where its sums have no measured row and
    the case sets none, the case does not load (unless ``measuring``: calibration sets them)."""
    given = body.get("budget", {})
    if not isinstance(given, dict):
        raise BudgetError("budget", f"expected a table, got {describe(given)}",
                          f"write budgets as tables: [{case}.budget.<variant>.<output>]")
    running = {op.reference, *variants}
    for name, outputs in given.items():
        key = f"budget.{name}"
        if name not in op.variants:
            raise BudgetError(key, f"unknown variant '{name}' for op '{op.name}'",
                              f"use one of: {', '.join(op.variants)}")
        if name not in running:
            raise BudgetError(key, f"a budget for variant '{name}', which the case does not "
                              f"run (variants = {list(variants)})",
                              f"add '{name}' to variants, or remove this budget")
        if not isinstance(outputs, dict):
            raise BudgetError(key, f"expected a table of outputs, got {describe(outputs)}",
                              f"write [{case}.budget.{name}.<output>] tables, outputs among: "
                              f"{', '.join(op.outputs)}")
    lenders = _budget_lenders(case, given, op, running)
    for name, outputs in given.items():
        for output in outputs:
            if output != BUDGET_LIKE and output in op.outputs:
                require_checked(f"budget.{name}.{output}", op, name, output)
    # A borrower reads its lender's tables as its own: the same as copies kept in step, so
    # the missing keys still come from the borrower's own precision row (a variant that
    # computes part of the op reads those of the outputs it produces).
    tables = {name: given.get(lenders.get(name, name), {}) for name in running}
    topk_output = op.topk.indices if op.topk is not None else None
    budgets: dict[str, VariantBudget] = {}
    for name in (v for v in op.variants if v in running):
        checked, quant, lender = op.checked(name), op.variants[name].quant, lenders.get(name)
        sims = sim_default_row(quant.accumulation) if quant is not None else None
        try:
            precision = op.variants[name].precision
            own, origins = _own_tables(case, lines, op, name, precision, tables, lenders)
            budget = complete_budget(
                precision, {output: t for output, t in own.items()
                            if output in checked or output not in op.outputs},
                outputs=checked, topk_output=topk_output if topk_output in checked else None,
                output_precision=op.output_precision, given_origins=origins, sims=sims,
                unmeasured=_unmeasured(op, name, runs_on[name], lender))
        except BudgetError as exc:
            raise BudgetError(f"budget.{lender or name}.{exc.key}", exc.problem,
                              exc.fix) from None
        if quant is not None and sims is None and not measuring:
            _require_sim_limits(case, path, op, name, budget, lender or name, runs_on[name])
        if lender is not None:
            tie = lines.get(("budget", name, BUDGET_LIKE))
            budget = replace(budget, origins={
                output: {key: o if isinstance(o, NotMeasured) else Lent(name, lender, tie, o)
                         for key, o in keys.items()}
                for output, keys in budget.origins.items()})
        budgets[name] = budget
    return budgets


def require_checked(key: str, op: OpSpec, variant: str, output: str) -> None:
    """``output`` is one the checks of ``variant`` hold to the golden: a budget or an
    expectation (``key``) of an output it does not produce would gate nothing."""
    if output in op.checked(variant):
        return
    produced = ", ".join(op.produced(variant))
    raise BudgetError(
        key, f"variant '{variant}' does not produce output '{output}' (it computes part of "
        f"op '{op.name}': produces {produced}), so this would gate nothing",
        f"remove it, or name outputs it produces: {produced}")


def _unmeasured(op: OpSpec, name: str, devices: tuple[str, ...],
                lender: str | None) -> dict[str, dict[str, Unmeasured]]:
    """Per output, the metrics no check of variant ``name`` can measure on ``devices``:
    ``max_err_ratio`` where the op has no rounding envelope for the output's class (its
    rounding reference or ``gemm_site`` members; numcheck.honest.gemm_family), and the
    simulated reference's metrics for a variant that declares no quantization."""
    variant = op.variants[name]
    precision = variant.precision
    whose = f"variant '{name}'" + (f" (held to {lender}'s budgets)" if lender else "")
    out: dict[str, dict[str, Unmeasured]] = {}
    for output in op.outputs:
        if op.topk is not None and output == op.topk.indices:
            continue
        cls = yardstick(op, precision, output)
        missing = missing_envelope(op, cls, devices, installed=False,
                                   quant=variant.quant if cls == precision else None)
        if missing is not None:
            problem = (f"max_err_ratio (the worst element against honest rounding on the "
                       f"same inputs) cannot be measured for {whose} on output '{output}', "
                       f"so this limit would gate nothing: {missing.problem}")
            out[output] = {"max_err_ratio": Unmeasured(problem, missing.fix, missing.nowhere)}
        if variant.quant is None:
            for metric in SIM_METRICS:
                out.setdefault(output, {})[metric] = Unmeasured(
                    f"{metric} (against the simulated reference: the op recomputed on the "
                    f"variant's own quantized operands) cannot be measured for {whose}, which "
                    "declares no quantization, so this limit would gate nothing",
                    "declare the variant's quantization (Variant(quant=GemmQuant(...)), "
                    "docs/fp8.md), or remove the key")
    return out


def _require_sim_limits(case: str, path: Path, op: OpSpec, name: str, budget: VariantBudget,
                        table: str, devices: tuple[str, ...]) -> None:
    """A variant whose declared sums have no measured default of the simulated reference
    (numcheck.numerics.budgets.sim_default_row) must have the case's ``sim_*`` limits on
    every ordinary output it produces: never an unbudgeted second reference."""
    variant = op.variants[name]
    assert variant.quant is not None
    for output, ob in budget.outputs.items():
        missing = [k for k in SIM_METRICS if k not in ob.limits]
        if not missing:
            continue
        device = devices[0] if devices else "cpu"
        family = [member_name(g) for g in members(op, variant.precision, variant.quant)
                  if device in g.devices and not g.unavailable]
        pool = f" --numcheck-calibrate-pool {table}={','.join([table, *family])}"
        node = f"{_shown(path)}::{case}::{table}[{device}]"
        raise BudgetError(
            f"budget.{table}.{output}.{missing[0]}",
            f"variant '{name}' declares {variant.quant.accumulation.label} sums, for which "
            f"numcheck measured no default of the simulated reference, and the case sets no "
            f"{', '.join(missing)} on '{output}': its second reference would go unbudgeted",
            f"calibrate its scheme's honest family and write the tables (numcheck."
            f"add_gemm_members('{op.name}', ['{variant.precision}']) registers it): pytest "
            f"--numcheck --numcheck-calibrate --numcheck-device {device} '{node}'{pool} "
            "--numcheck-calibrate-write")


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when under it (as a node id names it)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _own_tables(case: str, lines: Lines, op: OpSpec, name: str, precision: str,
                tables: Mapping[str, Any], lenders: Mapping[str, str],
                ) -> tuple[dict[str, Any], dict[str, dict[str, Origin]]]:
    """Variant ``name``'s budget tables as it reads them, and where each of their keys is
    written, decided together: its own tables (or those it borrows, which
    :func:`parse_budgets` wraps as lent) at their lines, and, on a coarse output, the keys
    it inherits from the storage class's table (numcheck.numerics.budgets.
    coarse_inheritance), themselves given or lent. A key the variant gives itself wins."""

    def given_at(variant: str, output: str, key: str) -> Origin:
        """The key as written in the tables ``variant`` reads: its own, or lent to it."""
        owner = lenders.get(variant, variant)
        at: Origin = Given(f"{case}.budget.{owner}.{output}",
                           lines.get(("budget", owner, output, key)))
        if owner != variant and variant != name:  # name's own lending is wrapped later
            at = Lent(variant, owner, lines.get(("budget", variant, BUDGET_LIKE)), at)
        return at

    own = tables[name]
    values = dict(own)
    origins: dict[str, dict[str, Origin]] = {
        output: {key: given_at(name, output, key) for key in keys}
        for output, keys in own.items() if isinstance(keys, Mapping)}
    for output, (variant, storage, keys) in coarse_inheritance(
            precision, own, tables, op.output_precision, op.rounding_reference).items():
        source = tables[variant][output]
        values[output] = {**{k: source[k] for k in keys}, **own.get(output, {})}
        origins.setdefault(output, {}).update(
            {key: Inherited(variant, output, storage, given_at(variant, output, key))
             for key in keys})
    return values, origins


def _budget_lenders(
    case: str, given: Mapping[str, Mapping[str, Any]], op: OpSpec, running: set[str]
) -> dict[str, str]:
    """``[<case>.budget.<variant>] budget_like = "<lender>"`` tables: borrower -> lender.

    The borrower takes every budget table of the lender, a variant the case runs that does not
    borrow in turn: a key beside ``budget_like``, a lender that borrows (a chain or a cycle),
    the variant itself, or a variant the case does not run is an error.
    """
    ordered = [v for v in op.variants if v in running]
    lenders: dict[str, str] = {}
    for name, table in given.items():
        if BUDGET_LIKE not in table:
            continue
        key = f"budget.{name}.{BUDGET_LIKE}"
        lender = table[BUDGET_LIKE]
        others = [v for v in ordered if v != name]
        if not isinstance(lender, str):
            raise BudgetError(key, f"expected a variant name, got {describe(lender)}",
                              f'write {BUDGET_LIKE} = "<variant>" with one of: '
                              f"{', '.join(others)}")
        beside = [k for k in table if k != BUDGET_LIKE]
        if beside:
            raise BudgetError(
                f"budget.{name}.{beside[0]}",
                f"'{name}' takes {lender}'s budgets ({BUDGET_LIKE} = \"{lender}\"), so its "
                f"table cannot also set {', '.join(repr(k) for k in beside)}",
                f"set it in [{case}.budget.{lender}.{beside[0]}] (it then holds for "
                f"both), or remove {BUDGET_LIKE} and give '{name}' budget tables of its own")
        if lender == name:
            raise BudgetError(key, f"'{name}' names itself",
                              f"name the variant whose budgets it takes, one of: "
                              f"{', '.join(others)}")
        if lender not in op.variants:
            raise BudgetError(key, f"unknown variant '{lender}' for op '{op.name}'",
                              f"use one of: {', '.join(others)}")
        if lender not in running:
            raise BudgetError(key, f"'{lender}' is not a variant this case runs",
                              f"add '{lender}' to variants, or give '{name}' budget tables "
                              "of its own")
        lenders[name] = lender
    for name, lender in lenders.items():
        if lender not in lenders:
            continue
        chain = [name, lender]
        while chain[-1] in lenders and chain[-1] not in chain[:-1]:
            chain.append(lenders[chain[-1]])
        path = " -> ".join(chain)
        if chain[-1] in chain[:-1]:
            raise BudgetError(f"budget.{name}.{BUDGET_LIKE}",
                              f"{BUDGET_LIKE} goes round in a cycle: {path}",
                              "give one of them budget tables of its own")
        raise BudgetError(f"budget.{name}.{BUDGET_LIKE}",
                          f"'{lender}' takes its budgets from another variant in turn: {path}",
                          f'write {BUDGET_LIKE} = "{chain[-1]}": borrow from the variant that '
                          "sets the tables")
    return lenders
