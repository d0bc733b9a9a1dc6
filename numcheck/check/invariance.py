"""The determinism and batch-invariance gates of one check: run the variant, compare bits.

    determinism:      the variant called ``runs`` times on one seed's inputs; each later
                      call's outputs against the first's, bit for bit
    batch invariance: each chosen request's inputs alone (numcheck.ops.batch), the variant
                      called on them; its outputs against that request's rows of the whole
                      batch's outputs, bit for bit

Both run on the case's first seed, after the numerics (the variant is warm: a first call
that compiles or autotunes is behind it), with the variant's one-time preparation of that
seed. Only the outputs the variant produces are compared; a top-k selection is compared as
it is returned (the same tokens in another order is a difference, said as such).
:mod:`numcheck.invariance` holds the measures and the case-file keys.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from numcheck.cases import Case
from numcheck.check.run import run_variant
from numcheck.inputs import to_device
from numcheck.invariance.bitwise import differences
from numcheck.invariance.limits import InvarianceReport, default_requests
from numcheck.ops.batch import batch_size, request_inputs, request_outputs
from numcheck.ops.spec import OpSpec, Outputs, VariantError
from numcheck.prepare import Preparer, prepare


def _kept(out: Outputs) -> Outputs:
    """A call's outputs copied to the CPU at once: a kernel that returns a buffer it reuses
    must not make two calls look alike."""
    return {name: t.detach().to("cpu", copy=True) for name, t in out.items()}


def measure_invariance(
    op: OpSpec, case: Case, variant: str, device: str, cpu_inputs: Mapping[str, torch.Tensor],
    *, determinism: bool, batch: bool, preparer: Preparer | None = None,
) -> InvarianceReport:
    """Measure the gates asked for (``determinism``, ``batch``) on the inputs of the case's
    first seed; :meth:`InvarianceReport.violations` gives their verdicts.

    Raises :class:`~numcheck.ops.spec.VariantError` when the variant misbehaves (raises, or
    returns other outputs) on a call of its own here, and ValueError naming the case file
    when a request the case names is not in its batch."""
    spec = op.variants[variant]
    preparer = preparer or prepare
    seed = case.seeds[0]
    inputs = to_device(dict(cpu_inputs), device)
    prepared = preparer(spec, inputs, case.params, device)
    selection = op.topk.indices if op.topk is not None else None
    first = _kept(run_variant(spec, op, inputs, case, device, prepared=prepared))
    report = InvarianceReport(seed, tuple(first))
    if determinism:
        held = case.deterministic
        assert held is not None
        report.runs = held.runs
        for run in range(2, held.runs + 1):
            again = _kept(run_variant(spec, op, inputs, case, device, prepared=prepared))
            found = differences(first, again, selection=selection)
            if found:
                report.run_differences.append((run, found))
    if batch:
        held, layout = case.batch_invariant, op.batch
        assert held is not None and layout is not None
        try:
            size = batch_size(layout, inputs, case.params)
        except ValueError as exc:
            raise ValueError(f"op {op.name!r}: {exc}. Fix: correct the op's batch "
                             "declaration (OpSpec(batch=...), docs/extending.md)") from None
        requests = held.requests or default_requests(size)
        past = [r for r in requests if r >= size]
        if past:
            raise ValueError(
                f"{case.source}: case '{case.id}': key 'batch_invariant.requests': request "
                f"{past[0]} is not in the case's batch of {size}. Fix: name requests from 0 "
                f"to {size - 1}")
        report.batch, report.requests = size, tuple(requests)
        for r in requests:
            alone_inputs, alone_params = request_inputs(layout, inputs, case.params, [r])
            try:
                alone = _kept(run_variant(spec, op, alone_inputs, case, device,
                                          params=alone_params))
            except VariantError as exc:
                raise VariantError(f"{exc} (called on request {r} of the batch alone, for "
                                   "the batch-invariance gate)") from exc
            rows = request_outputs(layout, first, case.params, [r])
            found = differences(rows, alone, selection=selection)
            if found:
                report.request_differences.append((r, found))
    return report
