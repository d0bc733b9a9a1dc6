"""The honest family a failed check's budget should be calibrated on, as a command.

A budget miss of a correct variant means the budget is too tight for its precision class;
the fix is to measure the class's honest implementations (the op's reference implementation
of the class and its honest GEMM members, numcheck.honest.gemm_family), never the failing
variant alone: a calibration of the variant alone budgets whatever it computes, a bug
included. :func:`honest_family` says which pool to measure and which checks to run (the
failing variant is left out where the case runs the class's reference implementation: it
keeps its tables, or takes the family's with ``budget_like``, as the budget's origin record
says); numcheck.report.limit_text words the command.
"""

from __future__ import annotations

from dataclasses import dataclass

from numcheck.cases import Case
from numcheck.ops.spec import OpSpec

#: The pytest option that pools variants into one budget (numcheck.plugin.options).
POOL_OPTION = "--numcheck-calibrate-pool"


@dataclass(frozen=True)
class Family:
    """The honest family of one check's class: ``name`` is the variant whose tables it
    sets (the pool's name), ``members`` the GEMM members pooled with it, ``select`` the
    variants whose checks the calibration runs (the family's, and a borrower to see that
    it fits its lender's tables)."""

    precision: str
    name: str
    members: tuple[str, ...]
    select: tuple[str, ...]
    #: Members the op does not have as variants yet (``numcheck.add_gemm_members`` not
    #: called for the class): the pool names them only once they are registered.
    unregistered: tuple[str, ...] = ()
    op: str = ""

    def register_hint(self) -> str:
        """What to call first where members are missing (else "")."""
        if not self.unregistered:
            return ""
        return (f"after numcheck.add_gemm_members('{self.op}', ['{self.precision}']) in your "
                "hook: ")

    def pool_option(self) -> str:
        """``--numcheck-calibrate-pool bf16=bf16,gemm_bf16_out,...`` ("" without members)."""
        if not self.members:
            return ""
        return f"{POOL_OPTION} {self.name}={','.join((self.name, *self.members))}"


def honest_family(op: OpSpec, case: Case, variant: str, device: str) -> Family:
    """The family of ``variant``'s class in ``case``, with the op's honest GEMM members of
    the class that run on ``device`` (registered by ``numcheck.add_gemm_members``):

    - a variant that borrows its tables (``budget_like``): its lender's family, and the
      variant itself measured to see that it fits;
    - else the op's rounding reference of the class, when the case runs it: the failing
      variant is left out (it keeps its tables, or takes the family's with ``budget_like``);
    - else the variant pooled with the members (never alone where the op has members).
    """
    from numcheck.honest.gemm_family import member_name, members
    from numcheck.numerics.budget_origin import lender_of

    precision = op.variants[variant].precision
    budget = case.budgets.get(variant)
    lender = lender_of(budget.origins) if budget is not None else None  # as loaded
    reference = op.rounding_reference.get(precision)
    # A low-precision variant's family is its declared scheme's (its budget is the scheme's).
    quant = op.variants[lender or variant].quant
    gemms = tuple(member_name(g) for g in members(op, precision, quant)
                  if device in g.devices and not g.unavailable)
    missing = tuple(g for g in gemms if g not in op.variants)
    if lender is not None:
        return Family(precision, lender, gemms, (lender, variant), missing, op.name)
    if reference is not None and reference != variant and reference in case.variants:
        return Family(precision, reference, gemms, (reference,), missing, op.name)
    return Family(precision, variant, gemms, (variant,), missing, op.name)
