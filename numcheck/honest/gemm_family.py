"""An op's honest family per precision class, derived from where its GEMM sits.

An op that declares ``OpSpec.gemm_site`` (``site(inputs, params, gemm)``: the op with its
matrix product left open) gets one **member** per row of numcheck.honest.gemm_impls for each
precision class: the op computed with that GEMM. Members serve two purposes:

- calibration and the self-test: :func:`member_variants` / :func:`add_gemm_members` make
  them variants (``gemm_<label>``), so a budget is measured on every way users implement
  the class (``--numcheck-calibrate-pool``, numcheck.calibrate.honest.measure_family);
- the rounding envelope behind ``max_err_ratio``: a check divides its worst element error by
  the worst of the class's envelope members (and the op's ``rounding_reference`` and
  ``rounding_alternatives``) on the same inputs (numcheck.check.run).

Whether an op has such an envelope for a class, on a device, is decided here once
(:func:`missing_envelope`): a case file's ``max_err_ratio`` for an output no envelope can
measure is a case-file error (numcheck.cases), and the check never claims a limit it could
not measure.

:class:`MemberRuns` runs members on one set of inputs and runs a member only when its result
can differ from one already run: each GEMM call is recorded by what decides its bits (which
operands its rounding changed, the recipe); a member whose every call matches an earlier
member's is that member (same code, same operand values, same layout, the same fp32 GEMM),
so the earlier outputs are taken. The indexer's operands are e4m3, exact in TF32 and bf16:
its TF32 members with operands rounded to nearest and truncated are one run, and its bf16
member with an fp32 result is the same run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from numcheck.honest import MEMBER_PREFIX
from numcheck.honest.gemm_impls import (
    EmulatedGemm,
    GemmImpl,
    canonical_operand,
    gemms_for,
    honest_gemms,
)
from numcheck.ops.spec import Inputs, OpSpec, Outputs, Params, Variant, VariantFn
from numcheck.precision import coarser
from numcheck.precision.operand_rounding import holds_exactly, to_format

if TYPE_CHECKING:
    from numcheck.precision.quant_declare import GemmQuant

__all__ = ["MEMBER_PREFIX", "MemberRuns", "NoEnvelope", "add_gemm_members", "complete_members",
           "envelope_members", "envelope_reference", "member_fn", "member_name",
           "member_variants", "members", "missing_envelope", "yardstick"]

#: Who registered a member (the registry's origin of each variant :func:`add_gemm_members`
#: adds).
MEMBERS_ORIGIN = "numcheck.honest.gemm_family"


def member_name(impl: GemmImpl) -> str:
    """The variant name of the member made with ``impl``."""
    return MEMBER_PREFIX + impl.label


def members(op: OpSpec, precision: str, quant: GemmQuant | None = None) -> list[GemmImpl]:
    """The GEMM implementations that make the op's members of ``precision`` (none when the
    op declares no ``gemm_site``); with ``quant`` (a variant's declared FP8 or FP4 scheme),
    the members of that scheme (numcheck.honest.quant_impls): a budget belongs to a scheme."""
    if op.gemm_site is None:
        return []
    if quant is not None:
        from numcheck.honest.quant_impls import scheme_gemms

        return scheme_gemms(quant)
    return gemms_for(precision)


def envelope_members(op: OpSpec, precision: str, device: str,
                     quant: GemmQuant | None = None) -> list[GemmImpl]:
    """The members of the class's (or, with ``quant``, the scheme's) rounding envelope that
    can run on ``device``."""
    return _envelope_members(op, precision, device, installed=True, quant=quant)


def envelope_reference(op: OpSpec, precision: str, device: str, *,
                       installed: bool = True) -> Variant | None:
    """The op's rounding reference of ``precision`` (``OpSpec.rounding_reference``) when it
    can run on ``device``: None when the op names none, or it runs elsewhere only. With
    ``installed`` (the run's question), a reference this install cannot run there (its
    ``unavailable`` says why) is None too; without it, such a reference counts as one that
    may run there in another install (a Triton variant runs on the CPU or on CUDA depending
    on the process)."""
    name = op.rounding_reference.get(precision)
    reference = op.variants.get(name) if name is not None else None
    if reference is None or not _may_run(reference.devices, reference.unavailable, device,
                                         installed=installed):
        return None
    return reference


def _may_run(devices: Sequence[str], unavailable: str, device: str, *, installed: bool) -> bool:
    """Whether something declared to run on ``devices`` (``unavailable``: why not on the
    others here) runs on ``device``: here (``installed``), or in some install."""
    if installed:
        return device in devices and not unavailable
    return device in devices or bool(unavailable)


def yardstick(op: OpSpec, precision: str, output: str) -> str:
    """The precision class whose rounding envelope ``output`` of a ``precision`` variant is
    measured against: the coarser of the variant's class and the output's storage class (a
    TF32 variant's bf16-stored mHC ``y`` differs from the golden by whole bf16 steps, which
    only bf16 rounding explains)."""
    return coarser(precision, op.output_precision.get(output, precision))


@dataclass(frozen=True)
class NoEnvelope:
    """Why ``max_err_ratio`` cannot be measured for a class of an op: ``problem`` says what is
    missing, ``fix`` what the op (or the case) can do. ``nowhere``: on none of the devices
    asked about (else on ``lacking`` only)."""

    problem: str
    fix: str
    lacking: tuple[str, ...]
    nowhere: bool


#: Where docs/extending.md teaches an op to declare its GEMM.
GEMM_SITE_DOC = 'docs/extending.md, "Where the GEMM sits"'


def missing_envelope(op: OpSpec, precision: str, devices: Sequence[str], *,
                     installed: bool = True,
                     quant: GemmQuant | None = None) -> NoEnvelope | None:
    """None when the op has a rounding envelope of ``precision`` (its rounding reference, or
    ``gemm_site`` members) on every one of ``devices``; else what is missing and the fix.

    ``installed=False`` asks about the op as declared (the devices its variants name),
    whatever this install lacks: what a case file may rely on. The run asks with
    ``installed=True``: a rounding reference whose library is missing measures nothing here.
    """
    has = {d: envelope_reference(op, precision, d, installed=installed) is not None
           or bool(_envelope_members(op, precision, d, installed=installed, quant=quant))
           for d in devices}
    lacking = tuple(d for d in devices if not has[d])
    if not lacking:
        return None
    name = op.rounding_reference.get(precision)
    reference = op.variants.get(name) if name is not None else None
    # gemm_site helps only where the class has honest GEMMs numcheck can build envelope
    # members from (not the scaled fp8 classes, not fp32).
    site_helps = op.gemm_site is None and any(g.envelope for g in gemms_for(precision))
    keep = [d for d in devices if has[d]]
    if reference is None:
        site = ("it declares no gemm_site (where its GEMM sits)" if op.gemm_site is None
                else f"its gemm_site gives no {precision} envelope members (numcheck has no "
                f"honest {precision} GEMM to build them from)")
        problem = (f"op '{op.name}' has no rounding envelope for {precision}: {site} and "
                   f"names no rounding_reference for {precision}")
    else:
        where = (f"is unavailable here ({reference.unavailable})" if reference.unavailable
                 else f"runs on {', '.join(reference.devices)} only")
        problem = (f"op '{op.name}' has no rounding envelope for {precision} on "
                   f"{', '.join(lacking)}: its rounding reference '{reference.name}' {where}"
                   + ("" if op.gemm_site is not None else " and it declares no gemm_site"))
    fixes = []
    if site_helps and reference is None:
        fixes += [f"declare gemm_site on op '{op.name}' (where its GEMM sits)",
                  (f"name an honest {precision} variant as its rounding_reference "
                   f"({GEMM_SITE_DOC})")]
    elif site_helps:
        fixes.append(f"declare gemm_site on op '{op.name}' ({GEMM_SITE_DOC})")
    elif reference is None:
        fixes.append(f"name an honest {precision} variant as the rounding_reference of op "
                     f"'{op.name}' ({GEMM_SITE_DOC})")
        if precision in ("e4m3", "e5m2", "e2m1") and op.gemm_site is not None:
            fixes.append("declare the variant's quantization (Variant(quant=GemmQuant(...)): "
                         "its scheme's members make the envelope; docs/fp8.md)")
    if keep:
        listed = ", ".join(f'"{d}"' for d in keep)
        fixes.append(f"run the case on {', '.join(keep)} only (devices = [{listed}])")
    fixes.append("remove the key")
    fix = ", ".join(fixes[:-1]) + f", or {fixes[-1]}" if len(fixes) > 1 else fixes[0]
    return NoEnvelope(problem, fix, lacking, nowhere=not keep)


def _envelope_members(op: OpSpec, precision: str, device: str, *,
                      installed: bool, quant: GemmQuant | None = None) -> list[GemmImpl]:
    return [g for g in members(op, precision, quant) if g.envelope
            and _may_run(g.devices, g.unavailable, device, installed=installed)]


def member_fn(op: OpSpec, impl: GemmImpl) -> VariantFn:
    """The op computed with ``impl`` for its GEMM, as a variant function."""
    site = op.gemm_site
    if site is None:
        raise ValueError(f"op {op.name!r} declares no gemm_site: it has no GEMM members. "
                         "Fix: give OpSpec(gemm_site=...) a function site(inputs, params, "
                         "gemm) that runs the op with gemm for its matrix product")

    def run(inputs: Inputs, params: Params) -> Outputs:
        return site(inputs, params, impl.fn)

    run.__name__ = run.__qualname__ = f"{op.name}.{member_name(impl)}"
    return run


def member_variants(op: OpSpec, precisions: Sequence[str] | None = None) -> list[Variant]:
    """The op's members as variants (``gemm_<label>``, the class of their GEMM), for
    ``precisions`` (default: every class with honest GEMMs); none without a ``gemm_site``.
    The FP8 and FP4 classes' members are those of every scheme numcheck ships
    (numcheck.honest.quant_impls.quant_gemms) and of every scheme the op's variants
    declare (their family, :func:`members`: what a failure's calibrate command pools),
    each declaring its quantization."""
    if op.gemm_site is None:
        return []
    from numcheck.honest.quant_impls import quant_gemms, scheme_gemms

    declared = [impl for v in op.variants.values()
                if v.quant is not None and not v.name.startswith(MEMBER_PREFIX)
                for impl in scheme_gemms(v.quant)]
    impls: dict[str, GemmImpl] = {}
    for impl in (*honest_gemms(), *quant_gemms(), *declared):
        impls.setdefault(impl.label, impl)
    return [Variant(member_name(impl), member_fn(op, impl), impl.precision,
                    devices=impl.devices, doc=f"honest {impl.precision} member: {impl.doc}",
                    unavailable=impl.unavailable, quant=impl.quant)
            for impl in impls.values()
            if precisions is None or impl.precision in precisions]



def add_gemm_members(op_name: str, precisions: Sequence[str] | None = None) -> list[str]:
    """Register the op's members as variants (for calibration: ``pytest --numcheck
    --numcheck-calibrate --numcheck-calibrate-pool mine=mine,gemm_tf32_rn,gemm_tf32_trunc``)
    and return their names; members already registered are left alone."""
    from numcheck.ops.registry import add_variant, get_op

    op = get_op(op_name)
    names = []
    for variant in member_variants(op, precisions):
        if variant.name not in get_op(op_name).variants:
            add_variant(op_name, variant, origin=MEMBERS_ORIGIN)
        names.append(variant.name)
    return names


def complete_members() -> None:
    """Register the members of every scheme a variant declared after its op's
    :func:`add_gemm_members` call (a hook that registers the members first, its FP8 variant
    next): every member a family names is then a variant, so the calibrate command a
    failure prints runs as printed. Called once registration is over (the plugin at
    collection, a worker after the hooks): the classes of an op's members registered so far
    are the classes asked for."""
    from numcheck.ops.registry import all_ops, variant_origin

    for op in all_ops().values():
        asked = {v.precision for v in op.variants.values()
                 if variant_origin(op.name, v.name) == MEMBERS_ORIGIN}
        if asked:
            add_gemm_members(op.name, sorted(asked))


class _SameAs(BaseException):
    """Raised inside a member's run once its GEMM calls match an earlier member's in full.

    A BaseException so that a site that catches ``Exception`` lets it through."""

    def __init__(self, key: tuple[Any, ...]) -> None:
        super().__init__(key)
        self.key = key


@dataclass
class MemberRuns:
    """Members of one op run on one set of inputs, each result made once (module docstring).

    ``run(member)`` (optional, for :meth:`outputs`) runs a member's function on the inputs:
    numcheck passes its own :func:`numcheck.check.run.run_variant`, so a member's outputs are
    checked like a variant's. The operands of a GEMM call, as each format reads them, are
    made once for every member that reaches that call the same way, and kept as long as this
    object is (numcheck makes one per envelope).
    """

    op: OpSpec
    inputs: Inputs
    params: Params
    done: dict[tuple[Any, ...], Outputs] = field(default_factory=dict)
    #: Member label -> the key of its calls (several labels may share one key).
    keys: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: (calls so far, operand position, format) -> (operand as read, "exact" or the format).
    operands: dict[tuple[Any, ...], tuple[torch.Tensor, str]] = field(default_factory=dict)

    def outputs(self, impl: GemmImpl, run: Any = None) -> Outputs:
        """The op's outputs with ``impl`` for its GEMM on these inputs."""
        if impl.label in self.keys:
            return self.done[self.keys[impl.label]]
        site = self.op.gemm_site
        assert site is not None
        calls: list[tuple[Any, ...]] = []

        def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            fn = impl.fn
            if impl.recipe is None or not isinstance(fn, EmulatedGemm):
                calls.append(("opaque", impl.label, len(calls)))
                return fn(a, b)
            r = impl.recipe
            (ra, ea), (rb, eb) = (self._operand(tuple(calls), i, x, r.operands)
                                  for i, x in enumerate((a, b)))
            calls.append((ea, eb, r.accumulation,
                          r.width if r.accumulation == "k_blocks" else 0,
                          (r.parts, r.tree, r.partial) if r.accumulation == "split_k" else (),
                          r.output, tuple(ra.shape), tuple(rb.shape), str(ra.device)))
            key = tuple(calls)
            if key in self.done:
                raise _SameAs(key)
            return fn.product(ra, rb)

        def member(inputs: Inputs, params: Params) -> Outputs:
            return site(inputs, params, gemm)

        try:
            out = run(member) if run is not None else member(self.inputs, self.params)
        except _SameAs as same:
            self.keys[impl.label] = same.key
            return self.done[same.key]
        key = tuple(calls)
        self.done.setdefault(key, out)
        self.keys[impl.label] = key
        return self.done[key]

    def _operand(self, prefix: tuple[Any, ...], position: int, x: torch.Tensor,
                 fmt: str) -> tuple[torch.Tensor, str]:
        """Operand ``position`` of the GEMM call that follows the calls ``prefix``, as
        ``fmt`` reads it, and whether reading changed it. Members that made the same calls
        before reach this call with the same operand (the site is deterministic), so one
        copy serves them all; an operand the format holds exactly is the canonical copy
        itself for every format, so such members hand the GEMM the very same tensor."""
        if (prefix, position, fmt) not in self.operands:
            canonical = self.operands.get((prefix, position, "fp32"))
            if canonical is None:
                canonical = (canonical_operand(x), "exact")
                self.operands[(prefix, position, "fp32")] = canonical
            if holds_exactly(fmt, x.dtype):
                self.operands[(prefix, position, fmt)] = canonical
            else:
                rounded = to_format(canonical[0], fmt)
                same = torch.equal(rounded.view(torch.int32), canonical[0].view(torch.int32))
                self.operands[(prefix, position, fmt)] = (
                    (canonical[0], "exact") if same else (rounded, fmt))  # bit for bit, NaNs too
        return self.operands[(prefix, position, fmt)]
