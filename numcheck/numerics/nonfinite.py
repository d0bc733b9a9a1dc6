"""Say why an output's inf/NaN pattern differs from the golden's, when the pattern says it.

Two causes are common and recognisable from the numbers alone:

- **Overflow.** The output is inf or NaN where the golden is finite and large: close to the
  largest finite value of the dtype the variant computes or returns in (fp16's 65504, say).
  A bare ``nan = 3`` hides that; the violation now says ``overflow?`` and names the dtype.
- **A broken masking contract.** The golden holds -inf at masked positions (the indexer's
  positions past a row's context length) and the output holds 0.0 there: some serving
  fallbacks return 0 and mask again inside their top-k. The op's contract is -inf at masked
  positions, so such a kernel fails; the message says exactly that and how to adapt it
  (docs/extending.md, "Masked positions").

Nothing here imports pytest; :func:`explain` rewrites a violation's detail and is called by
the runner for the ``nan`` and ``inf_mask`` violations of each output.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from numcheck.numerics.verdict import Violation

#: A golden value counts as "near the range" of a dtype from this fraction of its largest
#: finite value (four binades): an intermediate (a sum, a product of two such values)
#: overflows there while the final value still fits.
NEAR_RANGE = 1.0 / 16

#: Dtypes whose range an overflow is blamed on, by precision class (the compute dtype).
PRECISION_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "tf32": torch.float32,
    "fp32": torch.float32,
}

_SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32",
          torch.float64: "fp64"}

#: Where users read the masking contract (named in the message).
MASK_DOC = "docs/extending.md, 'Masked positions'"


def masked_zero_message(count: int) -> str:
    """The masking-contract sentence, for ``count`` positions holding 0.0 instead of -inf."""
    return (
        f"{count} invalid positions hold 0.0 instead of -inf: the op's contract is -inf at "
        "masked positions; mask before returning, e.g. "
        f"logits.masked_fill(~valid, float('-inf')) (see {MASK_DOC})"
    )


def overflow_message(
    actual: torch.Tensor, expected: torch.Tensor, dtypes: tuple[torch.dtype, ...]
) -> str | None:
    """``overflow? ...`` when the output is inf/NaN where the golden is finite and near the
    range of one of ``dtypes`` (checked in order; the narrowest range first is best)."""
    a, e = actual.detach().cpu(), expected.detach().cpu().double()
    bad = ~torch.isfinite(a) & torch.isfinite(e)
    if not bool(bad.any()):
        return None
    largest = float(e[bad].abs().max())
    for dtype in sorted(set(dtypes), key=lambda d: torch.finfo(d).max):
        if not dtype.is_floating_point:
            continue
        top = torch.finfo(dtype).max
        if largest >= NEAR_RANGE * top:
            name = _SHORT.get(dtype, str(dtype).removeprefix("torch."))
            return (
                f"overflow? {int(bad.sum())} non-finite where the golden is finite, up to "
                f"|{largest:.4g}|: near {name}'s range ({name} max {top:.6g})"
            )
    return None


def explain(
    v: Violation, actual: torch.Tensor, expected: torch.Tensor, *, precision: str = ""
) -> Violation:
    """``v`` with a detail that names the cause, for ``nan`` and ``inf_mask`` violations.

    ``precision`` is the variant's precision class: its compute dtype is a candidate for an
    overflow, beside the output's own dtype.
    """
    if v.metric not in ("nan", "inf_mask"):
        return v
    if v.metric == "inf_mask":
        a, e = actual.detach().cpu(), expected.detach().cpu()
        zeros = int((torch.isneginf(e) & (a == 0)).sum())
        if zeros:
            return replace(v, detail=f"{masked_zero_message(zeros)}; {v.detail}")
    dtypes = [actual.dtype]
    if precision in PRECISION_DTYPES:
        dtypes.append(PRECISION_DTYPES[precision])
    hint = overflow_message(actual, expected, tuple(dtypes))
    if hint is None:
        return v
    return replace(v, detail=f"{hint}; {v.detail}")
