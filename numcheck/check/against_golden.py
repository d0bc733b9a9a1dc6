"""The numerics of one (case, variant, device) check: the variant against the golden, per seed.

    golden, validated for the case once (numcheck.goldens.case_golden.CaseGolden)
    variant(inputs on device) --> outputs --metrics / top-k vs the stored outputs--> violations

:func:`numcheck.check.run_check` calls :func:`check` first, then the other gates. The golden
arrives read and validated (format, freshness, every output's presence, shape and dtype);
this module reads its stored outputs and never goes back to the file. Everything here is
plain Python so it can be tested and scripted directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import torch

from numcheck.cases import Case
from numcheck import phase
from numcheck.check.against_sim import simulate
from numcheck.check.result import CheckResult, SeedResult
from numcheck.check.run import (
    CaseInputs,
    envelope_key,
    rounding_envelope_outputs,
    run_variant,
    yardstick,
)
from numcheck.goldens.case_golden import CaseGolden
from numcheck.goldens.packing import NONFINITE_KINDS, StoredOutput, StoredPair, nonfinite_of
from numcheck.honest.gemm_family import missing_envelope
from numcheck.inputs import to_device
from numcheck.localize import failure as localize
from numcheck.numerics.metric_names import MAX_FLIPS
from numcheck.numerics.metrics import ErrorMetrics, compare, with_sim
from numcheck.numerics.nonfinite import explain as explain_nonfinite
from numcheck.numerics.topk import select_topk, topk_agreement
from numcheck.numerics.verdict import Violation, output_violations, topk_violations
from numcheck.ops.spec import OpSpec, Outputs, VariantError
from numcheck.precision import dtype_name, one_thread, rounding_unit, ulp_dtype
from numcheck.precision.quant_record import recording
from numcheck.prepare import Preparations, Preparer, prepare

if TYPE_CHECKING:
    from numcheck.check.firstcall import FirstCallWatch
    from numcheck.numerics.budgets import OutputBudget

__all__ = ["judge_output", "run_numerics"]


def run_numerics(
    op: OpSpec,
    case: Case,
    variant_name: str,
    device: str,
    golden: CaseGolden,
    inputs: CaseInputs,
    *,
    max_flips: int = MAX_FLIPS,
    keep_outputs: bool = False,
    preparations: Preparations | None = None,
    first_call: FirstCallWatch | None = None,
) -> CheckResult:
    """Compare one variant with the golden for every seed of the case.

    ``golden`` is the case's golden as :mod:`numcheck.goldens.case_golden` validated it for
    this case (its id and seeds; ValueError otherwise): a stale or malformed golden was
    refused there, before anything ran. A variant with a one-time preparation is prepared once
    per seed (``preparations`` keeps them for the rest of the check:
    :func:`numcheck.check.run_check` times and audits on the same ones) and its calls on the
    prepared inputs are what is compared.

    Raises :class:`~numcheck.ops.spec.VariantError` when the variant misbehaves (and
    :class:`~numcheck.goldens.files.GoldenFormatError` when the reference itself no longer
    gives what the golden holds). ``first_call`` times the variant's first call (the first
    seed's), apart from the rest.
    """
    golden.require(case)
    preparations = preparations if preparations is not None else Preparations()
    results: list[SeedResult] = []
    for seed in case.seeds:
        # Localize the first failing seed only: one place per check is what a reader needs.
        with phase.span(f"numerics seed {seed}"):
            results.append(_check_seed(
                op, case, variant_name, device, golden, inputs, seed,
                max_flips=max_flips, keep_outputs=keep_outputs,
                localize_failure=not any(r.localization for r in results),
                preparer=preparations.at(seed),
                first_call=None if results else first_call,
            ))
    return CheckResult(
        case, variant_name, device, results, [v for r in results for v in r.violations],
        first_call_s=None if first_call is None else first_call.seconds,
        prepared=preparations.first(variant_name))


def _check_seed(
    op: OpSpec,
    case: Case,
    variant_name: str,
    device: str,
    golden: CaseGolden,
    inputs: CaseInputs,
    seed: int,
    *,
    max_flips: int,
    keep_outputs: bool,
    localize_failure: bool = False,
    preparer: Preparer = prepare,
    first_call: FirstCallWatch | None = None,
) -> SeedResult:
    """Run the variant on one seed's inputs (prepared by ``preparer`` when it has a one-time
    preparation); every output and the selection against the golden (and, with
    ``localize_failure``, where a failure's error sits)."""
    variant = op.variants[variant_name]
    budget = case.budgets[variant_name]
    cpu_inputs, _ = inputs.get(seed)
    dev_inputs = to_device(cpu_inputs, device)
    with phase.span("prepare"):
        prepared = preparer(variant, dev_inputs, case.params, device)
    # A low-precision variant hands over the operands it multiplied (numcheck.fp8.record_gemm).
    records = recording() if variant.quant is not None else contextlib.nullcontext()
    with first_call if first_call is not None else contextlib.nullcontext(), records as rec:
        out = run_variant(variant, op, dev_inputs, case, device, prepared=prepared)
    sim = None
    if variant.quant is not None:
        sim = simulate(op, variant.quant, dev_inputs, case.params, rec.calls, seed=seed)

    def envelope(precision: str) -> list[Outputs]:
        # The envelope of a declared FP8 / FP4 scheme is its own members' (not the class's).
        quant = variant.quant if precision == variant.precision else None
        return inputs.envelope(
            envelope_key(op, precision, seed, device, quant),
            partial(rounding_envelope_outputs, op, precision, dev_inputs, case, device,
                    (variant_name, out), quant),
        )

    result = SeedResult(seed)
    checked = op.checked(variant_name)
    stored = {name: golden.output(seed, name) for name in op.outputs}
    if op.topk is not None and op.topk.indices in checked and op.topk.indices not in out:
        # The variant produces the scores but not the selection: numcheck selects from
        # them as the op does, so the top-k is checked wherever the scores are produced.
        out = {**out, op.topk.indices: derived_selection(op, out[op.topk.scores],
                                                         stored[op.topk.indices])}
    if keep_outputs:
        result.outputs = {name: t.detach().cpu() for name, t in out.items()}
    for name in checked:
        _fits_reference(golden, stored[name], name, out[name], variant_name,
                        reference=variant_name == op.reference)
        if op.topk is not None and name == op.topk.indices:
            continue
        cls = yardstick(op, variant.precision, name)
        honest = [h[name] for h in envelope(cls)]
        m, found = judge_output(
            name, out[name], stored[name], variant.precision, budget.outputs[name], seed=seed,
            honest=honest, simulated=None if sim is None else sim.outputs[name])
        result.metrics[name] = m
        result.violations += found
        if not honest and "max_err_ratio" in budget.outputs[name].limits:
            # A limit the case holds (a default, measured on another device or install)
            # that nothing measured here: said, never passed as if it had been.
            missing = missing_envelope(
                op, cls, [device], quant=variant.quant if cls == variant.precision else None)
            result.ungated[f"{name}.max_err_ratio"] = (
                missing.problem if missing is not None else f"no {cls} rounding envelope")
    if sim is not None:
        result.quant = replace(sim, outputs={})  # the simulated outputs stay here
        result.violations += sim.violations
    if op.topk is not None and budget.topk is not None and op.topk.indices in checked:
        spec, tb = op.topk, budget.topk
        report = topk_agreement(
            stored[spec.indices].values,
            out[spec.indices].cpu(),
            stored[spec.scores].values,
            band=tb.tie_band, band_kind=tb.tie_band_kind, max_flips=max_flips,
        )
        result.topk = report
        result.violations += topk_violations(spec.indices, report, tb, seed=seed)
    if localize_failure and result.violations and localize.enabled():
        try:
            result.localization = localize.localize_failure(
                op, case.params, cpu_inputs, out, stored, result.violations, budget, seed=seed,
                simulated=None if sim is None else sim.outputs,
            )
        except Exception as exc:  # noqa: BLE001 - a diagnostic never replaces the verdict
            result.localization = [localize.failed(result.violations[0].output, seed, exc)]
    return result


def derived_selection(op: OpSpec, scores: torch.Tensor, stored: StoredOutput) -> torch.Tensor:
    """The top-k selection of a variant that produces the scores but not the selection, made
    the way the op selects (``TopkSpec.select``, default :func:`select_topk`), with as many
    tokens per row as the golden's selection holds."""
    assert op.topk is not None
    shape = stored.recorded_shape or stored.stored_shape or tuple(stored.values.shape)
    select = op.topk.select or select_topk
    return select(scores, int(shape[-1]))


@one_thread()  # numcheck's own measures: many small steps (numcheck.precision.one_thread)
def judge_output(
    name: str,
    actual: torch.Tensor,
    stored: StoredOutput,
    precision: str,
    ob: OutputBudget,
    *,
    seed: int | None = None,
    honest: Sequence[torch.Tensor] = (),
    simulated: torch.Tensor | None = None,
) -> tuple[ErrorMetrics, list[Violation]]:
    """One output against its stored reference: its metrics, and its violations of ``ob``
    (an ``inf_mask`` one pointed at its first position, a NaN or Inf one explained, and, where
    the golden holds a sample, the whole output's non-finite counts against the stored ones).
    ``honest`` holds this output from each member of the op's rounding envelope at this
    precision on the same inputs (the yardstick of ``max_err_ratio``); empty when the op
    names none. ``simulated``: the output of the op recomputed on the variant's own
    quantized operands (numcheck.check.against_sim), against which the ``sim_*`` metrics
    are measured. The numerics of a check and the ``numcheck_golden`` fixture
    (:mod:`numcheck.plugin.golden_fixture`) both judge an output here."""
    pair = stored.pair(actual)
    honest_actual = [stored.pair(h).actual for h in honest]
    m = compare(
        pair.actual, pair.expected,
        ulp_dtype=ulp_dtype(precision, actual.dtype),
        atol=ob.atol, rtol=ob.rtol,
        unit_roundoff=rounding_unit(precision, actual.dtype),
        rounding_ref=honest_actual or None,
    )
    if simulated is not None:
        m = with_sim(m, actual, simulated)
    found = output_violations(name, m, ob, seed=seed)
    if m.nonfinite.mask_mismatch:
        found = [_locate_mask(v, pair.actual, pair.expected) for v in found]
    found = [explain_nonfinite(v, pair.actual, pair.expected, precision=precision) for v in found]
    if pair.sampled:
        found += _check_stats(name, pair, seed)
    return m, found


def _locate_mask(v: Violation, actual: torch.Tensor, expected: torch.Tensor) -> Violation:
    """Point an ``inf_mask`` violation at its first position: the usual cause is a mask
    (context length) off by one, and the index shows which row and token."""
    if v.metric != "inf_mask":
        return v
    a, e = actual.detach().cpu(), expected.detach().cpu()
    differs = (torch.isposinf(a) != torch.isposinf(e)) | (torch.isneginf(a) != torch.isneginf(e))
    first = tuple(int(i) for i in torch.nonzero(differs)[0].tolist())
    detail = (
        f"{v.detail}; first at index {first}: output {float(a[first]):.6g}, "
        f"golden {float(e[first]):.6g}"
    )
    return replace(v, detail=detail, index=first)


def _fits_reference(
    golden: CaseGolden, stored: StoredOutput, output: str, actual: torch.Tensor, variant: str,
    *, reference: bool,
) -> None:
    """The variant's output has the reference's shape and dtype, as the golden records them
    (a golden without that record is held to its stored tensors by
    :meth:`~numcheck.goldens.packing.StoredOutput.pair`)."""
    if stored.recorded_shape is None or stored.recorded_dtype is None:
        return
    want_shape, want_dtype = list(stored.recorded_shape), stored.recorded_dtype
    dtype = dtype_name(actual.dtype)
    if list(actual.shape) == want_shape and dtype == want_dtype:
        return
    if reference:
        # The reference defines the golden: a mismatch means the golden is the odd one out.
        raise golden.format_error(
            f"output {output!r} is stored as {want_dtype} {want_shape}, "
            f"but the reference {variant!r} now gives {dtype} {list(actual.shape)}",
            f"if the reference changed on purpose, regenerate it with: {golden.regen_hint}",
        )
    raise VariantError(
        f"op {golden.meta.get('op', '')!r} variant {variant!r}: output {output!r} is {dtype} "
        f"{list(actual.shape)}; the reference gives {want_dtype} {want_shape}. "
        "Fix: return every output in the reference's shape and dtype (a cast belongs "
        "inside the variant: it is part of its cost)"
    )


def _check_stats(name: str, pair: StoredPair, seed: int | None) -> list[Violation]:
    """For sampled goldens: the non-finite counts of the whole output must still match."""
    exp, act = pair.stats_expected, pair.stats_actual
    if exp is None or act is None:
        return []
    # NaN too: a NaN outside the sampled positions is invisible to the elementwise metrics.
    return [
        Violation(name, f"{label}_count", abs(a - e), 0, seed=seed,
                  detail=f"output has {a}, golden has {e} (must match)")
        for label, e, a in zip(NONFINITE_KINDS, nonfinite_of(exp), nonfinite_of(act), strict=True)
        if e != a
    ]

