"""The numerics of one (case, variant, device) check, without pytest.

    inputs (CPU, seeded) --fingerprint--> golden freshness
    variant(inputs on device) --> outputs --metrics / top-k vs golden--> violations

:func:`numcheck.check.run_check` calls :func:`check` first, then the other gates; the
session calls :func:`write_golden` under the regen flag. Everything here is plain Python
so it can be tested and scripted directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from numcheck.cases import Case
from numcheck.devices import device_label
from numcheck.goldens.files import (
    STATS_FIELDS,
    VAL_SUFFIX,
    Golden,
    GoldenFormatError,
    check_fresh,
    dtype_name,
    input_fingerprint,
    pack_output,
    unpack_pair,
)
from numcheck.goldens.regen import RegenOutcome, store
from numcheck.inputs import to_device
from numcheck.localize import failure as localize
from numcheck.localize.failure import Localization
from numcheck.numerics.metric_names import MAX_FLIPS
from numcheck.numerics.metrics import ErrorMetrics, compare
from numcheck.numerics.nonfinite import explain as explain_nonfinite
from numcheck.numerics.topk import TopkReport, topk_agreement
from numcheck.numerics.verdict import Violation, check_output, check_topk, worst
from numcheck.ops.registry import Inputs, OpSpec, Outputs, Variant
from numcheck.ops.spec import (
    VariantError,  # defined beside Variant; raised here and by callers
    VariantFn,
)
from numcheck.precision import coarser, rounding_unit, ulp_dtype
from numcheck.precision.gemm_family import MemberRuns, envelope_members, member_name
from numcheck.prepare import Preparations, Prepared, Preparer, prepare

if TYPE_CHECKING:
    from numcheck.check import Settled
    from numcheck.numerics.budgets import OutputBudget
    from numcheck.numerics.firstcall import FirstCallWatch
    from numcheck.overhead.gate import OverheadReport
    from numcheck.perf.measure import PerfResult


def seed_key(seed: int, output: str) -> str:
    """The golden tensor name of one output of one seed."""
    return f"s{seed}/{output}"


def display_id(case: Case, variant: str, device: str) -> str:
    """``indexer::v4flash-b4-l2k::bf16[cpu]``: how a check is named in messages and tables."""
    return f"{case.op}::{case.id}::{variant}[{device}]"


class CaseInputs:
    """The CPU inputs of one case, made once per seed and fingerprinted."""

    def __init__(self, op: OpSpec, case: Case) -> None:
        self.op = op
        self.case = case
        self._made: dict[int, tuple[Inputs, str]] = {}
        self._envelopes: dict[tuple[Any, ...], list[Outputs]] = {}
        self._members: dict[tuple[int, str], MemberRuns] = {}

    def get(self, seed: int) -> tuple[Inputs, str]:
        if seed not in self._made:
            inputs = self.op.make_inputs(self.case.params, seed)
            self._made[seed] = (inputs, input_fingerprint(inputs))
        return self._made[seed]

    def envelope(self, key: tuple[Any, ...], make: Callable[[], list[Outputs]]) -> list[Outputs]:
        """The rounding envelope's outputs for ``key`` (seed, device, the envelope's members),
        made once: every variant of a precision class is measured against the same ones."""
        if key not in self._envelopes:
            self._envelopes[key] = make()
        return self._envelopes[key]

    def member_runs(self, seed: int, device: str, dev_inputs: Inputs) -> MemberRuns:
        """The op's GEMM members on this seed's inputs on ``device``, each run once for
        every precision class and variant that measures against them."""
        if (seed, device) not in self._members:
            self._members[(seed, device)] = MemberRuns(self.op, dev_inputs, self.case.params)
        return self._members[(seed, device)]

    def fingerprint(self) -> str:
        """One hash over every seed's input fingerprint, in seed order."""
        joined = "|".join(f"{s}:{self.get(s)[1]}" for s in self.case.seeds)
        return hashlib.sha256(joined.encode()).hexdigest()


def run_variant(
    variant: Variant, op: OpSpec, inputs: Inputs, case: Case, device: str,
    *, prepared: Prepared | None = None,
) -> Outputs:
    """Call a variant and check what it returned has the op's output names on ``device``.

    ``inputs`` are the op's inputs on ``device``. A variant with a one-time preparation is
    called on them with ``prepared``'s tensors on top; without ``prepared`` its preparation
    is made here first (:func:`numcheck.prepare.prepare`).
    """
    if variant.prepare is not None:
        if prepared is None:
            prepared = prepare(variant, inputs, case.params, device)
        assert prepared is not None
        inputs = prepared.call_inputs(inputs)
    try:
        out = variant.fn(inputs, case.params)
    except Exception as exc:  # the variant's own failure is a verdict, not a crash
        raise VariantError(f"variant {variant.name!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, Mapping):
        raise VariantError(
            f"variant {variant.name!r} returned {type(out).__name__}; "
            f"expected a dict of outputs {list(op.outputs)}"
        )
    if set(out) != set(op.outputs):
        raise VariantError(
            f"variant {variant.name!r} returned outputs {sorted(out)}; "
            f"op {op.name!r} names {list(op.outputs)}"
        )
    for name, t in out.items():
        if not isinstance(t, torch.Tensor):
            raise VariantError(f"variant {variant.name!r}: output {name!r} is not a tensor")
        if t.device.type != device:
            raise VariantError(
                f"variant {variant.name!r}: output {name!r} is on {t.device.type}, "
                f"expected {device}"
            )
    return dict(out)


def rounding_envelope_outputs(
    op: OpSpec, precision: str, inputs: Inputs, case: Case, device: str,
    own: tuple[str, Outputs], runs: MemberRuns | None = None,
) -> list[Outputs]:
    """The op's honest implementations at ``precision``, on the same inputs: its rounding
    reference and rounding alternatives (when it names a reference that can run on
    ``device``), and the envelope members derived from its ``gemm_site``
    (numcheck.precision.gemm_family; ``runs`` keeps them across classes and checks). ``own`` is the
    checked variant's name and outputs, used as they are when that variant is the reference.
    Empty when the op has neither for ``precision``."""
    envelope: list[Outputs] = []
    name = op.rounding_reference.get(precision)
    reference = op.variants.get(name) if name is not None else None
    if reference is not None and device in reference.devices and not reference.unavailable:
        envelope.append(own[1] if name == own[0]
                        else run_variant(reference, op, inputs, case, device))
        for label, fn in op.rounding_alternatives.get(precision, {}).items():
            alternative = Variant(f"{label} (rounding alternative of {name!r})", fn, precision)
            envelope.append(run_variant(alternative, op, inputs, case, device))
    derived = envelope_members(op, precision, device)
    if derived:
        runs = runs if runs is not None else MemberRuns(op, inputs, case.params)
        for impl in derived:
            label = f"{member_name(impl)} (rounding envelope of {precision})"
            envelope.append(runs.outputs(impl, run=partial(_run_member, label, precision, op,
                                                           inputs, case, device)))
        runs.release()
    return envelope


def _run_member(label: str, precision: str, op: OpSpec, inputs: Inputs, case: Case,
                device: str, fn: VariantFn) -> Outputs:
    """Run a derived member's function as a variant (its outputs checked like one's)."""
    return run_variant(Variant(label, fn, precision), op, inputs, case, device)


def _yardstick(op: OpSpec, precision: str, output: str) -> str:
    """The precision class whose rounding envelope ``output`` of a ``precision`` variant is
    measured against: the coarser of the variant's class and the output's storage class (a
    TF32 variant's bf16-stored mHC ``y`` differs from the golden by whole bf16 steps, which
    only bf16 rounding explains)."""
    return coarser(precision, op.output_precision.get(output, precision))


def _envelope_key(op: OpSpec, precision: str, seed: int, device: str) -> tuple[Any, ...]:
    alternatives = op.rounding_alternatives.get(precision, {})
    derived = tuple(g.label for g in envelope_members(op, precision, device))
    return (seed, device, precision, op.rounding_reference.get(precision),
            tuple(alternatives.items()), op.gemm_site, derived)


def make_golden(
    op: OpSpec, case: Case, device: str, inputs: CaseInputs
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Run the reference for every seed: the tensors and metadata of the case's golden."""
    reference = op.variants[op.reference]
    tensors: dict[str, torch.Tensor] = {}
    outputs_meta: dict[str, Any] = {}
    for seed in case.seeds:
        cpu_inputs, _ = inputs.get(seed)
        out = run_variant(reference, op, to_device(cpu_inputs, device), case, device)
        for name, t in out.items():
            key = seed_key(seed, name)
            # Top-k checks need the golden score of any token a variant may pick.
            full = True if op.topk is not None and name == op.topk.scores else None
            tensors.update(pack_output(key, t, full=full))
            outputs_meta[key] = {"shape": list(t.shape), "dtype": dtype_name(t.dtype)}
    meta: dict[str, Any] = {
        "op": op.name,
        "case": case.id,
        "op_version": op.version,
        "fingerprint": inputs.fingerprint(),
        "device": device_label(device),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seeds": list(case.seeds),
        "outputs": outputs_meta,
        "params": dict(case.params),
        "reference": op.reference,
    }
    return tensors, meta


def fresh_golden(op: OpSpec, case: Case, device: str = "cpu") -> tuple[Golden, CaseInputs]:
    """The case's golden made now, in memory, on ``device``; with the inputs it came from."""
    inputs = CaseInputs(op, case)
    tensors, meta = make_golden(op, case, device, inputs)
    return Golden(Path(f"<fresh {case.op}/{case.id}>"), tensors, meta), inputs


def write_golden(path: Path, op: OpSpec, case: Case, device: str, inputs: CaseInputs) -> bool:
    """Regenerate a golden; returns False (and writes nothing) when the stored one is equal,
    or within the reference's reproducibility tolerance (see :func:`regenerate`)."""
    return regenerate(path, op, case, device, inputs).written


def regenerate(
    path: Path, op: OpSpec, case: Case, device: str, inputs: CaseInputs
) -> RegenOutcome:
    """Run the reference and store it (:func:`numcheck.goldens.regen.store`): the outcome says whether
    the file changed and how (``created``, ``rewritten``, ``unchanged (within reproducibility
    tolerance, ...)``); a reference output with NaN/Inf the op does not allow raises
    :class:`numcheck.goldens.regen.GoldenRefused` and writes nothing."""
    tensors, meta = make_golden(op, case, device, inputs)
    return store(path, op, case, tensors, meta)


@dataclass
class SeedResult:
    """What one seed measured: metrics per output, the top-k report, and violations."""

    seed: int
    metrics: dict[str, ErrorMetrics] = field(default_factory=dict)
    topk: TopkReport | None = None
    violations: list[Violation] = field(default_factory=list)
    #: The variant's outputs on the CPU, when the caller asked to keep them (calibration,
    #: the report's plot data, a failure's obtained file).
    outputs: Outputs | None = None
    #: Where the error sits, per failing output (only on a check's first failing seed).
    localization: list[Localization] = field(default_factory=list)


@dataclass
class CheckResult:
    """The verdict of one (case, variant, device)."""

    case: Case
    variant: str
    device: str
    seeds: list[SeedResult]
    violations: list[Violation]
    #: Filled by the perf gate (speedup with its interval) and the cast ledger, when run:
    #: the record's sections, and the measurements they come from.
    timing: dict[str, Any] | None = None
    casts: dict[str, Any] | None = None
    perf: PerfResult | None = None
    overhead: OverheadReport | None = None
    #: A known-bad variant's expected failures, settled (None for an ordinary check).
    settled: Settled | None = None
    #: The record's compact plot data (numcheck.numerics.plotdata) and a note shown in its row.
    plots: dict[str, Any] | None = None
    note: str | None = None
    #: Seconds of the check's first call of its variant (compile, warm-up), timed apart
    #: (numcheck.numerics.firstcall); None when the check made no call of its own.
    first_call_s: float | None = None
    #: The variant's one-time preparation on the case's first seed, as the record's
    #: ``prepared`` section (:meth:`numcheck.prepare.Prepared.as_dict`); None without one.
    prepared: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return not self.violations

    @property
    def id(self) -> str:
        return display_id(self.case, self.variant, self.device)

    def worst(self) -> Violation | None:
        return worst(self.violations)

    def metric(self, output: str, name: str) -> float | None:
        """Worst value of an error metric over seeds (None when not measured: no seed, or
        ``max_err_ratio`` without a rounding reference)."""
        values = [s.metrics[output].value(name) for s in self.seeds
                  if output in s.metrics and s.metrics[output].measured(name)]
        if any(math.isnan(v) for v in values):  # undefined on some seed: say so
            return math.nan
        return max(values) if values else None

    def topk_value(self, name: str) -> float | None:
        """Worst (lowest) value of a top-k statistic over seeds."""
        values = [s.topk.value(name) for s in self.seeds if s.topk is not None]
        return min(values) if values else None

    @property
    def localization(self) -> list[Localization]:
        """Where the error of each failing output sits (empty for a pass)."""
        return next((s.localization for s in self.seeds if s.localization), [])

    def worst_topk(self) -> TopkReport | None:
        """The seed's top-k report with the most unexplained flips."""
        reports = [s.topk for s in self.seeds if s.topk is not None]
        return max(reports, key=lambda r: (r.n_unexplained, -r.recall_min), default=None)


def check(
    op: OpSpec,
    case: Case,
    variant_name: str,
    device: str,
    golden: Golden,
    inputs: CaseInputs,
    *,
    regen_hint: str,
    max_flips: int = MAX_FLIPS,
    keep_outputs: bool = False,
    preparations: Preparations | None = None,
    first_call: FirstCallWatch | None = None,
) -> CheckResult:
    """Compare one variant with the golden for every seed of the case.

    A variant with a one-time preparation is prepared once per seed (``preparations``
    keeps them for the rest of the check: :func:`numcheck.check.run_check` times and
    audits on the same ones) and its calls on the prepared inputs are what is compared.

    Raises :class:`~numcheck.goldens.files.GoldenStale` before running anything when the golden
    was made from other inputs, and :class:`VariantError` when the variant misbehaves.
    ``first_call`` times the variant's first call (the first seed's), apart from the rest.
    """
    preparations = preparations if preparations is not None else Preparations()
    check_fresh(
        golden,
        op_version=op.version,
        fingerprint=inputs.fingerprint(),
        seeds=case.seeds,
        regen_hint=regen_hint,
        case=case.id,
        op=op.name,
        params=case.params,
        param_defaults={name: spec.default for name, spec in op.params.items()},
    )
    results: list[SeedResult] = []
    for seed in case.seeds:
        # Localize the first failing seed only: one place per check is what a reader needs.
        results.append(_check_seed(
            op, case, variant_name, device, golden, inputs, seed, regen_hint=regen_hint,
            max_flips=max_flips, keep_outputs=keep_outputs,
            localize_failure=not any(r.localization for r in results),
            preparer=preparations.at(seed),
            first_call=None if results else first_call,
        ))
    result = CheckResult(
        case, variant_name, device, results, [v for r in results for v in r.violations],
        first_call_s=None if first_call is None else first_call.seconds,
    )
    first = preparations.first(variant_name)
    result.prepared = None if first is None else first.as_dict()
    return result


def _check_seed(
    op: OpSpec,
    case: Case,
    variant_name: str,
    device: str,
    golden: Golden,
    inputs: CaseInputs,
    seed: int,
    *,
    regen_hint: str,
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
    prepared = preparer(variant, dev_inputs, case.params, device)
    with first_call if first_call is not None else contextlib.nullcontext():
        out = run_variant(variant, op, dev_inputs, case, device, prepared=prepared)

    def envelope(precision: str) -> list[Outputs]:
        return inputs.envelope(
            _envelope_key(op, precision, seed, device),
            partial(rounding_envelope_outputs, op, precision, dev_inputs, case, device,
                    (variant_name, out), inputs.member_runs(seed, device, dev_inputs)),
        )

    result = SeedResult(seed)
    if keep_outputs:
        result.outputs = {name: t.detach().cpu() for name, t in out.items()}
    for name in op.outputs:
        _check_dtype(
            golden, seed_key(seed, name), out[name], variant_name,
            reference=variant_name == op.reference, regen_hint=regen_hint,
        )
        if op.topk is not None and name == op.topk.indices:
            continue
        _check_output(result, name, out[name], golden, case, variant.precision,
                      budget.outputs[name], regen_hint=regen_hint,
                      honest=[h[name] for h in envelope(_yardstick(op, variant.precision, name))])
    if op.topk is not None and budget.topk is not None:
        spec, tb = op.topk, budget.topk
        report = topk_agreement(
            golden.tensors[seed_key(seed, spec.indices)],
            out[spec.indices].cpu(),
            golden.tensors[seed_key(seed, spec.scores)],
            band=tb.tie_band, band_kind=tb.tie_band_kind, max_flips=max_flips,
        )
        result.topk = report
        result.violations += check_topk(spec.indices, report, tb, seed=seed)
    if localize_failure and result.violations and localize.enabled():
        try:
            result.localization = localize.localize_failure(
                op, case.params, cpu_inputs, out, golden.tensors, partial(seed_key, seed),
                result.violations, budget, seed=seed,
            )
        except Exception as exc:  # noqa: BLE001 - a diagnostic never replaces the verdict
            result.localization = [localize.failed(result.violations[0].output, seed, exc)]
    return result


def _check_output(
    result: SeedResult,
    name: str,
    actual: torch.Tensor,
    golden: Golden,
    case: Case,
    precision: str,
    ob: OutputBudget,
    *,
    regen_hint: str,
    honest: Sequence[torch.Tensor] = (),
) -> None:
    """One ordinary output of one seed: its metrics and violations, added to ``result``.
    ``honest`` holds this output from each member of the op's rounding envelope at this
    precision on the same inputs (the yardstick of ``max_err_ratio``); empty when the op
    names none."""
    seed = result.seed
    pair = unpack_pair(
        seed_key(seed, name), actual, golden.tensors,
        path=golden.path, case=case.id, regen_hint=regen_hint,
    )
    honest_actual = [
        unpack_pair(seed_key(seed, name), h, golden.tensors, path=golden.path, case=case.id,
                    regen_hint=regen_hint).actual
        for h in honest
    ]
    m = compare(
        pair.actual, pair.expected,
        ulp_dtype=ulp_dtype(precision, actual.dtype),
        atol=ob.atol, rtol=ob.rtol,
        unit_roundoff=rounding_unit(precision, actual.dtype),
        rounding_ref=honest_actual or None,
    )
    result.metrics[name] = m
    found = check_output(name, m, ob, seed=seed)
    if m.nonfinite.mask_mismatch:
        found = [_locate_mask(v, pair.actual, pair.expected) for v in found]
    found = [explain_nonfinite(v, pair.actual, pair.expected, precision=precision) for v in found]
    result.violations += found
    if pair.sampled:
        result.violations += _check_stats(name, pair, seed)


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


def _check_dtype(
    golden: Golden, key: str, actual: torch.Tensor, variant: str, *, reference: bool,
    regen_hint: str,
) -> None:
    stored = golden.meta.get("outputs", {}).get(key)
    if stored is None:
        return  # unpack_pair reports a missing output with the golden's own wording
    output = key.split("/", 1)[1]
    held = golden.tensors.get(key, golden.tensors.get(key + VAL_SUFFIX))
    if held is not None and dtype_name(held.dtype) != stored["dtype"]:
        # A golden whose tensor disagrees with its own metadata was edited by hand or by a
        # broken tool: its numbers cannot be trusted as the reference.
        raise _golden_error(
            golden, f"output {output!r} is stored as {dtype_name(held.dtype)} but its metadata "
            f"says {stored['dtype']} (goldens hold the reference's own dtype)",
            f"regenerate it with: {regen_hint}",
        )
    dtype = dtype_name(actual.dtype)
    if list(actual.shape) != stored["shape"] or dtype != stored["dtype"]:
        if reference:
            # The reference defines the golden: a mismatch means the golden is the odd one out.
            raise _golden_error(
                golden, f"output {output!r} is stored as {stored['dtype']} {stored['shape']}, "
                f"but the reference {variant!r} now gives {dtype} {list(actual.shape)}",
                f"if the reference changed on purpose, regenerate it with: {regen_hint}",
            )
        raise VariantError(
            f"op {golden.meta.get('op', '')!r} variant {variant!r}: output {output!r} is {dtype} "
            f"{list(actual.shape)}; the reference gives {stored['dtype']} {stored['shape']}. "
            "Fix: return every output in the reference's shape and dtype (a cast belongs "
            "inside the variant: it is part of its cost)"
        )


def _golden_error(golden: Golden, problem: str, fix: str) -> GoldenFormatError:
    case = str(golden.meta.get("case", ""))
    return GoldenFormatError(f"golden {golden.path} for case {case}: {problem}\nFix: {fix}",
                             path=golden.path, case=case)


def _check_stats(name: str, pair: Any, seed: int) -> list[Violation]:
    """For sampled goldens: the non-finite counts of the whole output must still match."""
    exp, act = pair.stats_expected, pair.stats_actual
    found = []
    # NaN too: a NaN outside the sampled positions is invisible to the elementwise metrics.
    for label in ("nan", "posinf", "neginf"):
        i = STATS_FIELDS.index(f"n_{label}")
        if exp is not None and act is not None and int(exp[i]) != int(act[i]):
            found.append(
                Violation(
                    name, f"{label}_count", abs(int(act[i]) - int(exp[i])), 0, seed=seed,
                    detail=f"output has {int(act[i])}, golden has {int(exp[i])} (must match)",
                )
            )
    return found

