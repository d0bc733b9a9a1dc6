"""Running variants on a case's inputs: the inputs made once per seed, a variant's call
checked for what it returns, and the rounding envelope a precision class is measured against.

The numerics of a check (:mod:`numcheck.check.against_golden`), the speed gate, golden
making (:mod:`numcheck.check.make_golden`) and the self-tests all run variants through
:func:`run_variant`, so a variant that raises or returns the wrong outputs is the same
:class:`~numcheck.ops.spec.VariantError` everywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch

from numcheck.caseparts.inputs import recorded_call
from numcheck.cases import Case
from numcheck.goldens.files import input_fingerprint
from numcheck.honest.gemm_family import (
    MemberRuns,
    envelope_members,
    envelope_reference,
    member_name,
    yardstick,
)
from numcheck.ops.spec import Inputs, OpSpec, Outputs, Params, Variant, VariantError, VariantFn
from numcheck.precision import one_thread
from numcheck.precision.quant_declare import GemmQuant
from numcheck.prepare import Prepared, prepare

__all__ = ["CaseInputs", "envelope_key", "rounding_envelope_outputs", "run_variant", "yardstick"]


class CaseInputs:
    """The CPU inputs of one case, made once per seed and fingerprinted."""

    def __init__(self, op: OpSpec, case: Case) -> None:
        self.op = op
        self.case = case
        self._made: dict[int, tuple[Inputs, str]] = {}
        self._envelopes: dict[tuple[Any, ...], list[Outputs]] = {}

    def get(self, seed: int) -> tuple[Inputs, str]:
        if seed not in self._made:
            if self.case.inputs.file is not None:  # recorded inputs: call `seed` of the file
                inputs = recorded_call(self.case.inputs, seed)
                self._made[seed] = (inputs, input_fingerprint(inputs))
            else:
                self._made[seed] = _made_inputs(self.op, self.case.params, seed)
        return self._made[seed]

    def envelope(self, key: tuple[Any, ...], make: Callable[[], list[Outputs]]) -> list[Outputs]:
        """The rounding envelope's outputs for ``key`` (seed, device, the envelope's members),
        made once: every variant of a precision class is measured against the same ones."""
        if key not in self._envelopes:
            self._envelopes[key] = make()
        return self._envelopes[key]

    def fingerprint(self) -> str:
        """One hash over every seed's input fingerprint, in seed order."""
        joined = "|".join(f"{s}:{self.get(s)[1]}" for s in self.case.seeds)
        return hashlib.sha256(joined.encode()).hexdigest()


#: Inputs made lately, kept across cases up to this many bytes: made once per seed.
_RECENT_BYTES = 128 << 20
_RECENT: dict[tuple[Any, ...], tuple[Inputs, str, int]] = {}


def _made_inputs(op: OpSpec, params: Params, seed: int) -> tuple[Inputs, str]:
    """``op.make_inputs(params, seed)`` with its fingerprint. A call gets its own copy (a
    variant that writes into its inputs spoils no other case's); inputs a copy would not
    reproduce (views, shared storage, autograd, subclasses, not on the CPU) are not kept."""
    key = (op.make_inputs, repr(sorted(params.items())), seed)
    if key in _RECENT:
        _RECENT[key] = kept = _RECENT.pop(key)  # the most recent last
        return {n: t.clone() for n, t in kept[0].items()}, kept[1]
    inputs = op.make_inputs(params, seed)
    made, size = (inputs, input_fingerprint(inputs)), sum(t.nbytes for t in inputs.values())
    if size <= _RECENT_BYTES and all(
            type(t) is torch.Tensor and t.device.type == "cpu" and not t.requires_grad
            and t.is_contiguous() and t.untyped_storage().nbytes() == t.nbytes
            for t in inputs.values()) and len(
            {t.untyped_storage().data_ptr() for t in inputs.values()}) == len(inputs):
        _RECENT[key] = ({n: t.clone() for n, t in inputs.items()}, made[1], size)
        while sum(kept[2] for kept in _RECENT.values()) > _RECENT_BYTES:
            _RECENT.pop(next(iter(_RECENT)))
    return made


def run_variant(
    variant: Variant, op: OpSpec, inputs: Inputs, case: Case, device: str,
    *, prepared: Prepared | None = None, params: Params | None = None,
) -> Outputs:
    """Call a variant and check what it returned has the output names it produces (every
    output of the op, unless it declares ``produces``) on ``device``.

    ``inputs`` are the op's inputs on ``device``; ``params`` the parameters of the call
    (default: the case's). A variant with a one-time preparation is called on them with
    ``prepared``'s tensors on top; without ``prepared`` its preparation is made here first
    (:func:`numcheck.prepare.prepare`).
    """
    params = case.params if params is None else params
    if variant.prepare is not None:
        if prepared is None:
            prepared = prepare(variant, inputs, params, device)
        assert prepared is not None
        inputs = prepared.call_inputs(inputs)
    try:
        out = variant.fn(inputs, params)
    except Exception as exc:  # the variant's own failure is a verdict, not a crash
        raise VariantError.raised(f"variant {variant.name!r}", exc) from exc
    if not isinstance(out, Mapping):
        raise VariantError(
            f"variant {variant.name!r} returned {type(out).__name__}; "
            f"expected a dict of outputs {list(op.outputs)}"
        )
    _check_names(variant, op, out)
    for name, t in out.items():
        if not isinstance(t, torch.Tensor):
            raise VariantError(f"variant {variant.name!r}: output {name!r} is not a tensor")
        if t.device.type != device:
            raise VariantError(
                f"variant {variant.name!r}: output {name!r} is on {t.device.type}, "
                f"expected {device}"
            )
    return dict(out)


def _check_names(variant: Variant, op: OpSpec, out: Mapping[str, object]) -> None:
    """The outputs returned are exactly those the variant produces: every output of the op,
    or those its ``produces`` declares (a kernel that computes part of the op)."""
    if variant.produces is None:
        if set(out) != set(op.outputs):
            missing = [o for o in op.outputs if o not in out]
            hint = (f". Fix: return every output the op names, or, for a kernel that computes "
                    f"part of the op, declare what it returns: Variant(..., produces="
                    f"{tuple(o for o in op.outputs if o in out)!r}) (docs/extending.md)"
                    if missing and set(out) <= set(op.outputs) and out else "")
            raise VariantError(
                f"variant {variant.name!r} returned outputs {sorted(out)}; "
                f"op {op.name!r} names {list(op.outputs)}{hint}"
            )
        return
    if set(out) != set(variant.produces):
        raise VariantError(
            f"variant {variant.name!r} returned outputs {sorted(out)}; it declares "
            f"produces={tuple(variant.produces)!r} (of op {op.name!r}'s {list(op.outputs)}). "
            "Fix: return exactly the outputs it declares, or correct produces"
        )


@one_thread()  # numcheck's honest members, not the variant (numcheck.precision.one_thread)
def rounding_envelope_outputs(
    op: OpSpec, precision: str, inputs: Inputs, case: Case, device: str,
    own: tuple[str, Outputs], quant: GemmQuant | None = None,
) -> list[Outputs]:
    """The op's honest implementations at ``precision``, on the same inputs: its rounding
    reference and rounding alternatives (when it names a reference that can run on
    ``device``), and the envelope members derived from its ``gemm_site``
    (numcheck.honest.gemm_family; members that provably compute the same are run once,
    :class:`~numcheck.honest.gemm_family.MemberRuns`). ``own`` is the checked variant's
    name and outputs, used as they are when that variant is the reference. Empty when the op
    has neither for ``precision``. :meth:`CaseInputs.envelope` keeps the result for every
    other variant of the class on these inputs. ``quant``: the checked variant's declared
    FP8 or FP4 scheme, whose members make the envelope (not the class's)."""
    envelope: list[Outputs] = []
    reference = envelope_reference(op, precision, device)
    if reference is not None:
        name = reference.name
        envelope.append(own[1] if name == own[0]
                        else run_variant(reference, op, inputs, case, device))
        for label, fn in op.rounding_alternatives.get(precision, {}).items():
            alternative = Variant(f"{label} (rounding alternative of {name!r})", fn, precision)
            envelope.append(run_variant(alternative, op, inputs, case, device))
    derived = envelope_members(op, precision, device, quant)
    if derived:
        # A member of one class never computes what a member of another does (each writes
        # its result or its partials in its own class's format): the runs serve this call
        # only, and CaseInputs.envelope keeps their outputs for every variant of the class.
        runs = MemberRuns(op, inputs, case.params)
        for impl in derived:
            label = f"{member_name(impl)} (rounding envelope of {precision})"
            envelope.append(runs.outputs(impl, run=partial(_run_member, label, precision, op,
                                                           inputs, case, device)))
    return envelope


def _run_member(label: str, precision: str, op: OpSpec, inputs: Inputs, case: Case,
                device: str, fn: VariantFn) -> Outputs:
    """Run a derived member's function as a variant (its outputs checked like one's)."""
    return run_variant(Variant(label, fn, precision), op, inputs, case, device)


def envelope_key(op: OpSpec, precision: str, seed: int, device: str,
                 quant: GemmQuant | None = None) -> tuple[Any, ...]:
    """What makes a rounding envelope the same one: the seed, device and class (or scheme),
    and every member it is made of (:meth:`CaseInputs.envelope` keeps one per key)."""
    alternatives = op.rounding_alternatives.get(precision, {})
    derived = tuple(g.label for g in envelope_members(op, precision, device, quant))
    return (seed, device, precision, op.rounding_reference.get(precision),
            tuple(alternatives.items()), op.gemm_site, derived,
            None if quant is None else quant.schemes)
