"""The overhead gate of one check: audit a variant's call and hold it to its case's limits.

The measures are :mod:`numcheck.overhead`'s (the cast ledger, the kernel audit, the limits
a case file sets, :func:`~numcheck.overhead.limits.overhead_violations`); this module runs
them for one (case, variant, device): the variant's one-time preparation made first
(:mod:`numcheck.prepare`), only the call audited and gated, and the op's reference measured
when its own passes over an input decide that input's limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from numcheck.gates import CASTS_GATE
from numcheck.inputs import to_device
from numcheck.numerics.verdict import Violation
from numcheck.overhead.limits import (
    OverheadBudget,
    OverheadReport,
    audit_variant,
    default_overhead,
    overhead_violations,
)
from numcheck.prepare import Preparer, prepare


def audit_overhead(
    op: Any, case: Any, variant: str, device: str, cpu_inputs: Mapping[str, torch.Tensor],
    *, gates: set[str] | frozenset[str], kernels: bool = False,
    preparer: Preparer | None = None,
) -> tuple[OverheadReport, list[Violation]]:
    """The overhead half of a check: audit one variant and hold it to the case's budget.

    ``case.overhead`` gives the budget; a variant the case file does not name (a planted
    one, say) gets its precision's default. Used by the pytest session and the self-test.
    A variant's one-time preparation comes from ``preparer`` (default: made now, under its
    own ledger); only the call is audited and gated.
    """
    preparer = preparer or prepare
    declared = op.min_bytes(case.params) if op.min_bytes is not None else None
    spec = op.variants[variant]
    budget = case.overhead.get(variant) or default_overhead(spec.precision)
    inputs = to_device(dict(cpu_inputs), device)
    prepared = preparer(spec, inputs, case.params, device)
    # A prepared tensor of a new name is an input of the call too (its ledger names it).
    _check_input_names(budget, inputs if prepared is None else prepared.call_inputs(inputs),
                       case, variant)
    report = audit_variant(spec.fn, inputs, case.params, kernels=kernels, min_bytes=declared,
                           prepared=prepared)
    if CASTS_GATE.name in gates and report.gated_input_copies(budget) is not None:
        # Over the static limit: the reference's own passes may allow it (an input the
        # op's reference gathers from a copy too). Measured only here, once per case.
        report.reference_passes = reference_passes(op, case, device, inputs, preparer)
    return report, overhead_violations(report, budget, gates)


#: (reference fn and preparation, op, case, device, seed, params) -> the reference's
#: passes over each input.
_REFERENCE_PASSES: dict[tuple[Any, ...], dict[str, float]] = {}


def reference_passes(
    op: Any, case: Any, device: str, inputs: Mapping[str, torch.Tensor], preparer: Preparer,
) -> dict[str, float]:
    """Passes the op's reference variant makes over each input: its per-call ledger on
    ``inputs``, after its one-time preparation (from ``preparer``) as for any variant.
    Remembered per reference, case, device and first seed; the bytes it moves are not
    needed, so no minimum bytes are asked for."""
    reference = op.variants[op.reference]
    # The reference's functions are in the key: a test or a plugin that registers another
    # reference under the op's name must not be answered with the first one's passes.
    key = (reference.fn, reference.prepare, op.name, case.id, device,
           case.seeds[0] if case.seeds else None,
           tuple(sorted((k, repr(v)) for k, v in case.params.items())))
    found = _REFERENCE_PASSES.get(key)
    if found is None:
        report = audit_variant(reference.fn, inputs, case.params,
                               prepared=preparer(reference, inputs, case.params, device))
        found = report.ledger.input_passes()
        if len(_REFERENCE_PASSES) > 256:  # a long session of many cases: keep it small
            _REFERENCE_PASSES.clear()
        _REFERENCE_PASSES[key] = found
    return found


def _check_input_names(
    budget: OverheadBudget, inputs: Mapping[str, Any], case: Any, variant: str
) -> None:
    """A per-input ``max_input_copies`` must name one of the call's inputs (the op's, and
    those its preparation adds): a misspelt name would otherwise leave that input at the
    default without a word. (Checked here, where the inputs are known; the message reads
    like a case-file error.)"""
    for name, _ in budget.max_input_copies_of:
        if name not in inputs:
            raise ValueError(
                f"{case.source}: case '{case.id}': key 'overhead.{variant}.max_input_copies."
                f"{name}': '{name}' is not an input of op '{case.op}'. Fix: use one of: "
                f"{', '.join(inputs)}"
            )
