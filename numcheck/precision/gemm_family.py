"""An op's honest family per precision class, derived from where its GEMM sits.

An op that declares ``OpSpec.gemm_site`` (``site(inputs, params, gemm)``: the op with its
matrix product left open) gets one **member** per row of numcheck.precision.gemm_impls for each
precision class: the op computed with that GEMM. Members serve two purposes:

- calibration and the self-test: :func:`member_variants` / :func:`add_gemm_members` make
  them variants (``gemm_<label>``), so a budget is measured on every way users implement
  the class (``--numcheck-calibrate-pool``, numcheck.calibrate.honest.measure_family);
- the rounding envelope behind ``max_err_ratio``: a check divides its worst element error by
  the worst of the class's envelope members (and the op's ``rounding_reference`` and
  ``rounding_alternatives``) on the same inputs (numcheck.numerics.run).

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
from typing import Any

import torch

from numcheck.ops.spec import Inputs, OpSpec, Outputs, Params, Variant, VariantFn
from numcheck.precision.gemm_impls import (
    EmulatedGemm,
    GemmImpl,
    canonical_operand,
    gemms_for,
    honest_gemms,
)
from numcheck.precision.operand_rounding import holds_exactly, to_format

__all__ = ["MEMBER_PREFIX", "MemberRuns", "add_gemm_members", "envelope_members",
           "member_fn", "member_name", "member_variants", "members"]

#: Variant names of derived members: ``gemm_<label>`` (``gemm_tf32_trunc``).
MEMBER_PREFIX = "gemm_"


def member_name(impl: GemmImpl) -> str:
    """The variant name of the member made with ``impl``."""
    return MEMBER_PREFIX + impl.label


def members(op: OpSpec, precision: str) -> list[GemmImpl]:
    """The GEMM implementations that make the op's members of ``precision`` (none when the
    op declares no ``gemm_site``)."""
    return gemms_for(precision) if op.gemm_site is not None else []


def envelope_members(op: OpSpec, precision: str, device: str) -> list[GemmImpl]:
    """The members of the class's rounding envelope that can run on ``device``."""
    return [g for g in members(op, precision)
            if g.envelope and device in g.devices and not g.unavailable]


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
    ``precisions`` (default: every class with honest GEMMs); none without a ``gemm_site``."""
    if op.gemm_site is None:
        return []
    return [Variant(member_name(impl), member_fn(op, impl), impl.precision,
                    devices=impl.devices, doc=f"honest {impl.precision} member: {impl.doc}",
                    unavailable=impl.unavailable)
            for impl in honest_gemms()
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
            add_variant(op_name, variant, origin="numcheck.precision.gemm_family")
        names.append(variant.name)
    return names


class _SameAs(BaseException):
    """Raised inside a member's run once its GEMM calls match an earlier member's in full.

    A BaseException so that a site that catches ``Exception`` lets it through."""

    def __init__(self, key: tuple[Any, ...]) -> None:
        super().__init__()
        self.key = key


@dataclass
class MemberRuns:
    """Members of one op run on one set of inputs, each result made once (module docstring).

    ``run(member)`` (optional, for :meth:`outputs`) runs a member's function on the inputs:
    numcheck passes its own :func:`numcheck.numerics.run.run_variant`, so a member's outputs are
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
                self.operands[(prefix, position, fmt)] = (
                    (canonical[0], "exact") if _same_bits(rounded, canonical[0])
                    else (rounded, fmt))
        return self.operands[(prefix, position, fmt)]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN payloads included)."""
    return torch.equal(a.view(torch.int32), b.view(torch.int32))
