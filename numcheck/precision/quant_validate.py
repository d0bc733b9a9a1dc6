"""Checking a quantized operand, made by any quantizer, against the scheme it declares.

A low-precision variant hands numcheck its quantized operands (its elements and scales, as
numcheck.precision.quantize.as_quantized wraps them) with the tensor they were made from.
:func:`validate` checks, against the declared numcheck.precision.quant_scheme.OperandScheme:

- ``layout``: the elements have the tensor's shape, the scales the scheme's grid (a
  transposed grid, one scale where blocks are declared, a missing NVFP4 global scale);
- ``nonfinite``: no NaN or infinity among elements and scales (an e4m3fn cast of an
  unclamped overflow makes NaN);
- ``overflow`` and ``element_format``: every element is a value of the declared format, none
  past its largest (448s and 57344s of e5m2 where e4m3fn is declared);
- ``scale_format``: scales are positive, powers of two for ``ue8m0`` and ``mx``, e4m3 values
  for ``nvfp4``;
- ``scale_value``: each block's scale follows the declared rule from that block's largest
  magnitude in the tensor (a per-tensor scale where blocks are declared, transposed or
  shifted block scales, ue8m0 rounded down, a scale stale after the tensor changed);
  ``global_scale`` the same for NVFP4's per-tensor scale;
- ``rounding``: each element is the declared format's rounding (to nearest, saturating if
  declared) of the tensor's element divided by its scale (e5m2 rounding where e4m3fn is
  declared, elements stale after the tensor changed, elements quantized with another scale
  than the one stored).

Tolerances: a quantizer may compute ``x * (1 / s)`` where numcheck divides, or its scale as
``fmax / amax`` inverted, each a few float32 roundings apart; every comparison allows a
relative ``rel_tol`` (2^-20, about 8 float32 ulps) around the exact value, and an element
passes when it is the rounding of any value in that band. The amax floor is the declared
one (the rule's own unless declared: none for ``mx`` and ``nvfp4``): a quantizer whose floor
is lower passes (its scales are smaller, its elements the same). The conventions a scheme
declares (``scale_dtype``, ``block_scale_min``, ``zero_scale``) are checked exactly, as the
rule is; an undeclared one is a ``scale_value`` finding whose hint names it.

Each failed check is a :class:`Finding` with counts, the first offender and, where a simple
hypothesis explains every offending block, the likely cause (``hint``). Pure torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from numcheck.errors import reduce_whole
from numcheck.precision import PureCache, one_thread, tensor_digest
from numcheck.precision.quant_formats import (
    ELEMENT_FORMATS,
    element_format,
    is_representable,
    round_to_element,
)
from numcheck.precision.quant_scheme import (
    SCALE_DTYPES,
    OperandScheme,
    block_amax,
    expand_to_elements,
)
from numcheck.precision.quantize import E4M3_MAX, E8M0_EXPONENTS, Quantized

if TYPE_CHECKING:
    import torch

__all__ = ["FINDING_KINDS", "REL_TOL", "Finding", "QuantizationError", "Validation",
           "validate"]

#: Every kind of finding, in the order they are checked.
FINDING_KINDS = ("scheme", "layout", "nonfinite", "overflow", "element_format",
                 "scale_format", "global_scale", "scale_value", "rounding")
#: The relative band around exact values that float32 arithmetic of honest quantizers needs.
REL_TOL = 2.0**-20


@dataclass(frozen=True)
class Finding:
    """One way a quantized operand departs from its declared scheme."""

    kind: str
    #: What is wrong, with counts and the first place.
    message: str
    #: Offending elements or scale blocks, of ``total``.
    count: int = 1
    total: int = 1
    #: Index of the first offender: ``(row, k)`` of an element, ``(i, j)`` of a scale block.
    first: tuple[int, ...] | None = None
    #: The likely cause, where a hypothesis explains every offender ("" otherwise).
    hint: str = ""

    def describe(self) -> str:
        """One line: ``kind: message (likely: hint)``."""
        tail = f" Likely: {self.hint}." if self.hint else ""
        return f"{self.kind}: {self.message}.{tail}"


class QuantizationError(ValueError):
    """A quantized operand that does not follow its declared scheme (the findings)."""

    __reduce__ = reduce_whole

    def __init__(self, validation: Validation, where: str = "") -> None:
        head = f"{where}: " if where else ""
        super().__init__(head + validation.describe())
        self.validation = validation


@dataclass(frozen=True)
class Validation:
    """The findings of :func:`validate` (none: the operand follows the scheme)."""

    scheme: OperandScheme
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        """True when nothing was found."""
        return not self.findings

    def kinds(self) -> tuple[str, ...]:
        """The kinds found, in checking order."""
        return tuple(f.kind for f in self.findings)

    def describe(self) -> str:
        """Every finding, one per line, under the scheme's label."""
        if self.ok:
            return f"quantized operand follows {self.scheme.label}"
        lines = [f"quantized operand does not follow {self.scheme.label}:"]
        lines += [f"  {f.describe()}" for f in self.findings]
        return "\n".join(lines)

    def raise_if_bad(self, where: str = "") -> None:
        """Raise :class:`QuantizationError` with every finding unless the operand is ok."""
        if not self.ok:
            raise QuantizationError(self, where)


def _first(mask: torch.Tensor) -> tuple[int, ...] | None:
    idx = mask.nonzero()
    return tuple(int(i) for i in idx[0]) if len(idx) else None


def _is_pow2(s: torch.Tensor) -> torch.Tensor:
    import torch

    mant, e = torch.frexp(s)
    lo, hi = E8M0_EXPONENTS
    exp = e.to(torch.int64) - 1
    return (s > 0) & torch.isfinite(s) & (mant == 0.5) & (exp >= lo) & (exp <= hi)


def _pow2_floor(a: torch.Tensor) -> torch.Tensor:
    """``2^floor(log2 a)`` for positive float64 ``a`` (0 where ``a`` is 0)."""
    import torch

    _, e = torch.frexp(a)
    return torch.where(a > 0, torch.ldexp(torch.ones_like(a), e - 1), torch.zeros_like(a))


#: The smallest E8M0 scale: what ``ue8m0`` and ``mx`` give a block of zeros.
_E8M0_MIN = 2.0 ** E8M0_EXPONENTS[0]


def _rule(scheme: OperandScheme, g: torch.Tensor | None, tol: float
          ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``ok(scales, amax)``: which scales (float64 grid) follow the scheme's rule, and the
    conventions it declares, from the blocks' amax (float64 grid), elementwise. A floor lower
    than the declared one passes (its scales are smaller, its elements the same)."""
    import torch

    fmt = scheme.format
    fmax = fmt.max_value
    floor = scheme.floor
    lo_f, hi_f = 1 - tol, 1 + tol

    def substituted(s: torch.Tensor, rule_zero: torch.Tensor, follows: torch.Tensor,
                    maybe_zero: torch.Tensor | None = None) -> torch.Tensor:
        """Where the rule gives 0, the declared zero scale (if any) stands in; where the band
        straddles 0 (``maybe_zero``), either does."""
        if scheme.zero_scale is None:
            return follows
        z = float(scheme.zero_scale)
        is_z = (s - z).abs() <= z * tol
        if maybe_zero is not None:
            follows = follows | (maybe_zero & is_z)
        return torch.where(rule_zero, is_z, follows)

    def in_dtype(v: torch.Tensor) -> torch.Tensor:
        if scheme.scale_dtype == "fp32":
            return v
        dt = getattr(torch, SCALE_DTYPES[scheme.scale_dtype])
        return v.to(torch.float32).to(dt).double()

    def fp32(s: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
        top = amax.clamp(min=floor)
        if scheme.scale_dtype == "fp32":
            follows = (s > 0) & (s * fmax >= amax * lo_f) & (s * fmax <= top * hi_f)
        else:  # the quotient rounded to the declared dtype: a value of it, in the band
            lower, upper = in_dtype(amax / fmax * lo_f), in_dtype(top / fmax * hi_f)
            follows = (s > 0) & (in_dtype(s) == s) & (s >= lower) & (s <= upper)
        return substituted(s, top == 0, follows)

    def ue8m0(s: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
        top = amax.clamp(min=floor)
        return _is_pow2(s) & (s * fmax >= amax * lo_f) & (
            (s / 2 * fmax < top * hi_f) | ((top == 0) & (s == _E8M0_MIN)))

    def mx(s: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
        emax = 2.0**fmt.max_exponent
        lower = (_pow2_floor(amax * lo_f) / emax).clamp(min=_E8M0_MIN)
        upper = (_pow2_floor(amax.clamp(min=floor) * hi_f) / emax).clamp(min=_E8M0_MIN)
        return _is_pow2(s) & (s >= lower) & (s <= upper)

    def nvfp4(s: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
        assert g is not None
        gd = float(g)
        if not gd > 0:
            return torch.zeros_like(s, dtype=torch.bool)

        def e4m3(v: torch.Tensor) -> torch.Tensor:
            if scheme.block_scale_min is not None:
                v = v.clamp(min=scheme.block_scale_min)
            return round_to_element(v.to(torch.float32), "e4m3fn", saturate=True).double()

        lower = e4m3(amax / (fmax * gd) * lo_f)
        upper = e4m3(amax.clamp(min=floor) / (fmax * gd) * hi_f)
        follows = (s >= 0) & (s >= lower) & (s <= upper)
        return substituted(s, upper == 0, follows, lower == 0)

    return {"fp32": fp32, "ue8m0": ue8m0, "mx": mx, "nvfp4": nvfp4}[scheme.scale]


def _convention_hint(s: torch.Tensor, amax: torch.Tensor, scheme: OperandScheme,
                     g: torch.Tensor | None, tol: float) -> str:
    """The convention, undeclared, that explains every offending scale (``s`` and ``amax``:
    the offending blocks' only), or "": what real quantizers do beside the rule."""
    import torch

    def explains(**convention: object) -> bool:
        try:
            candidate = replace(scheme, **convention)
        except ValueError:
            return False
        return bool(_rule(candidate, g, tol)(s, amax).all())

    if scheme.scale == "fp32":
        for dt in ("bf16", "fp16"):
            if dt != scheme.scale_dtype and explains(scale_dtype=dt):
                return (f"scales computed in {dt} (amax / {scheme.format.max_value:g} rounded "
                        f"to {dt}: torchao's Float8Tensor on a {dt} tensor does this): if your "
                        f"quantizer means it, declare scale_dtype='{dt}'")
    if scheme.scale in ("mx", "nvfp4") and scheme.floor == 0 and explains(amax_floor=1e-4):
        return ("scales made from an amax floored at 1e-4 (DeepGEMM's FP8 convention), which "
                f"the {scheme.scale} rule does not have: blocks of small values lose their "
                "elements to zero")
    c = float(s.reshape(-1)[0])
    if not bool((s == c).all()) or not c > 0:
        return ""
    n = int(s.numel())
    zero_blocks = int((amax == 0).sum())
    rule = _rule(replace(scheme, zero_scale=None, block_scale_min=None), g, tol)
    if scheme.scale == "nvfp4" and bool(rule(torch.zeros_like(s), amax).all()):
        where = (f"{zero_blocks} of them all zero" if zero_blocks < n else "all of them zero")
        return (f"the {n} offending blocks, whose scale by the rule is 0 ({where}), all hold "
                f"{c:g}: a zero-block substitute (declare zero_scale={c:g}: compressed-tensors "
                f"writes 0.125) or a clamp of the block scales (declare block_scale_min={c:g}: "
                "torchao clamps at 2^-6)")
    if scheme.scale == "nvfp4" and explains(block_scale_min=c):
        return (f"the {n} offending block scales all hold {c:g} where the rule gives less (the "
                "smallest blocks, far below the tensor's amax): block scales clamped from below "
                f"at {c:g} (torchao's NVFP4 clamps at 2^-6): if your quantizer means it, "
                f"declare block_scale_min={c:g}")
    if zero_blocks == n and scheme.scale in ("ue8m0", "mx"):
        return (f"the {n} offending blocks are all zero and hold {c:g} where the {scheme.scale} "
                f"rule gives the smallest E8M0 scale, 2^-127: an amax floor the rule does "
                "not have")
    if zero_blocks == n:
        return (f"the {n} offending blocks are all zero and hold {c:g}: a zero-block "
                f"substitute (declare zero_scale={c:g}) or an amax floor (declare amax_floor)")
    return ""


def _scale_hint(ok: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], s: torch.Tensor,
                amax: torch.Tensor, scheme: OperandScheme, g: torch.Tensor | None = None,
                tol: float = REL_TOL) -> str:
    """The simple hypothesis that explains every offending scale, or "". An undeclared
    convention of a real quantizer first (it accounts for the offending blocks exactly),
    then hypotheses that account for every block; a shift can only be checked on all blocks
    but one."""
    bad = ~ok(s, amax)
    convention = _convention_hint(s[bad], amax[bad], scheme, g, tol)
    if convention:
        return convention
    gr, gk = s.shape
    if s.numel() > 1 and bool((s == s.reshape(-1)[0]).all()):
        if bool(ok(s[:1, :1], amax.max().reshape(1, 1)).all()):
            return ("one per-tensor scale stored in every block, where "
                    f"{scheme.granularity.name} blocks are declared")
        return "one scale stored in every block, where each block needs its own"
    if gr == gk and gr > 1 and bool(ok(s.T, amax).all()):
        return "the scale grid is transposed (block (i, j) holds block (j, i)'s scale)"
    if scheme.scale == "ue8m0" and bool(ok(s * 2, amax).all()):
        return "the power-of-two scales are rounded down where the scheme rounds up"
    if gk > 1 and bool((s == s[:, :1]).all()):
        return ("every block along K holds the first one's scale (a scale pointer that "
                "never advances along K)")
    if gk > 1 and bool(ok(s[:, 1:], amax[:, :-1]).all()):
        return "the scales are shifted by one block along K (block j holds block j-1's)"
    if gk > 1 and bool(ok(s[:, :-1], amax[:, 1:]).all()):
        return "the scales are shifted by one block along K (block j holds block j+1's)"
    if gr > 1 and bool(ok(s[1:], amax[:-1]).all()) or gr > 1 and bool(ok(s[:-1], amax[1:]).all()):
        return "the scales are shifted by one block along the rows"
    ratio = (amax / s)[amax > 0]
    if scheme.scale == "fp32" and ratio.numel() and bool(
            ((ratio / ratio[0] - 1).abs() < 1e-5).all()):
        c = float(ratio[0])
        for name in ELEMENT_FORMATS:  # scales made for another format (e4m3fn for fnuz)
            if abs(c / element_format(name).max_value - 1) < 1e-5:
                return (f"amax / scale is {c:g} in every block: scales made for {name} "
                        f"(largest value {c:g}) where {scheme.element} is declared")
        if ratio.numel() > 1:
            return (f"amax / scale is {c:g} in every block, where the scheme divides by "
                    f"{scheme.element}'s largest value {scheme.format.max_value:g}")
    return ("the scales do not follow this tensor's blocks: made from another tensor (a scale "
            "stale after the tensor changed?) or by another rule")


#: Validations of the same operands (a family's members quantize a seed's tensors alike).
_VALIDATED = PureCache(64)


def validate(q: Quantized, scheme: OperandScheme, original: torch.Tensor, *,
             rel_tol: float = REL_TOL) -> Validation:
    """Check ``q`` against the declared ``scheme`` and the tensor it was made from
    (``original``, 2-D ``[rows, K]``, finite): module docstring. Returns every finding; a
    layout finding stops the checks that need the layout. Pure: the same operands checked
    again give the result held (numcheck.precision.PureCache)."""
    key = tensor_digest(q.values, q.scales, q.global_scale, q.scheme, scheme, original,
                        rel_tol)
    held = _VALIDATED.get(key)
    if isinstance(held, Validation):
        return held
    found = _validate(q, scheme, original, rel_tol)
    _VALIDATED.put(key, found)
    return found


@one_thread()
def _validate(q: Quantized, scheme: OperandScheme, original: torch.Tensor,
              rel_tol: float) -> Validation:
    import torch

    findings: list[Finding] = []
    if original.dim() != 2:
        raise ValueError(f"validate: the original must be 2-D [rows, K], got shape "
                         f"{list(original.shape)}")
    x = original.to(torch.float32)
    if not bool(torch.isfinite(x).all()):
        raise ValueError("validate: the original holds NaN or infinity: no scale can follow it")
    if q.scheme != scheme:
        findings.append(Finding("scheme", f"the operand says it follows {q.scheme.label}, "
                                f"the variant declares {scheme.label}"))
    shape = (int(x.shape[0]), int(x.shape[1]))
    values = q.values.to(torch.float32)
    if tuple(values.shape) != shape:
        findings.append(Finding("layout", f"elements of shape {list(values.shape)} for a "
                                f"tensor {list(shape)}"))
        return Validation(scheme, tuple(findings))
    expected = scheme.scale_shape(shape)
    s = q.scales.to(torch.float64)
    if tuple(s.shape) != expected:
        hint = ""
        if tuple(s.shape) == expected[::-1]:
            hint = "the scale grid is transposed"
        elif s.numel() == 1:
            hint = f"one per-tensor scale where {scheme.granularity.name} blocks are declared"
        findings.append(Finding("layout", f"scales of shape {list(s.shape)} where "
                                f"{scheme.granularity.name} blocks of a {list(shape)} operand "
                                f"need {list(expected)}", hint=hint))
        return Validation(scheme, tuple(findings))
    g = None
    if scheme.scale == "nvfp4":
        if q.global_scale is None or q.global_scale.numel() != 1:
            findings.append(Finding("layout", "NVFP4 needs one float32 global scale per "
                                    "tensor; the operand has none"))
            return Validation(scheme, tuple(findings))
        g = q.global_scale.to(torch.float64).reshape(())
    elif q.global_scale is not None:
        findings.append(Finding("layout", f"a global scale, which {scheme.scale} scales do "
                                "not have (only nvfp4 does)"))
        return Validation(scheme, tuple(findings))

    fmt = scheme.format
    n = values.numel()
    bad_v = ~torch.isfinite(values)
    bad_s = ~torch.isfinite(s)
    if bool(bad_v.any()) or bool(bad_s.any()) or (g is not None and not bool(torch.isfinite(g))):
        parts = []
        if bool(bad_v.any()):
            parts.append(f"{int(bad_v.sum())} of {n} elements are NaN or infinite, first at "
                         f"{_first(bad_v)}")
        if bool(bad_s.any()):
            parts.append(f"{int(bad_s.sum())} of {s.numel()} scales are NaN or infinite, "
                         f"first block {_first(bad_s)}")
        if g is not None and not bool(torch.isfinite(g)):
            parts.append("the global scale is not finite")
        hint = ("an e4m3fn cast of values past 448 without clamping makes NaN"
                if bool(bad_v.any()) and fmt.name == "e4m3fn" else "")
        findings.append(Finding("nonfinite", "; ".join(parts), int(bad_v.sum()), n,
                                _first(bad_v), hint))
    finite_v = torch.where(bad_v, torch.zeros_like(values), values)
    over = finite_v.abs() > fmt.max_value
    if bool(over.any()):
        findings.append(Finding(
            "overflow", f"{int(over.sum())} of {n} elements pass {fmt.name}'s largest value "
            f"{fmt.max_value:g} (first at {_first(over)}: {float(values[over][0]):g})",
            int(over.sum()), n, _first(over),
            "elements of a wider format (e5m2?) or not clamped" if fmt.name == "e4m3fn" else ""))
    unrepresentable = ~is_representable(finite_v, fmt) & ~over
    if bool(unrepresentable.any()):
        hint = ""
        if fmt.name == "e4m3fn" and bool(is_representable(finite_v[unrepresentable],
                                                          "e5m2").all()):
            hint = "e5m2 elements where e4m3fn is declared"
        findings.append(Finding(
            "element_format", f"{int(unrepresentable.sum())} of {n} elements are not "
            f"{fmt.name} values (first at {_first(unrepresentable)}: "
            f"{float(values[unrepresentable][0])!r})",
            int(unrepresentable.sum()), n, _first(unrepresentable), hint))

    fmt_ok = {"fp32": lambda v: v > 0, "ue8m0": _is_pow2, "mx": _is_pow2,
              "nvfp4": lambda v: (v >= 0) & is_representable(v, "e4m3fn")}[scheme.scale](s)
    fmt_ok &= ~bad_s
    if not bool(fmt_ok.all()):
        what = {"fp32": "positive", "ue8m0": "powers of two within E8M0",
                "mx": "powers of two within E8M0",
                "nvfp4": "non-negative e4m3 values"}[scheme.scale]
        bad = ~fmt_ok
        findings.append(Finding(
            "scale_format", f"{int(bad.sum())} of {s.numel()} scales are not {what} "
            f"(first block {_first(bad)}: {float(s[bad][0])!r})", int(bad.sum()), s.numel(),
            _first(bad)))

    amax = block_amax(x, scheme.granularity).to(torch.float64)
    if g is not None:
        top = E4M3_MAX * fmt.max_value
        amax_t = float(x.abs().max())
        gv = float(g)
        # A tensor of zeros holds zeros whatever its global scale (Transformer Engine's
        # kernels store 1, its reference 1 / float32's largest): any positive one passes.
        zeros_ok = amax_t == 0 and gv > 0
        if not zeros_ok and not (gv * top >= amax_t * (1 - rel_tol)
                                 and gv * top <= max(amax_t, scheme.floor) * (1 + rel_tol)):
            findings.append(Finding(
                "global_scale", f"global scale {gv!r} where the tensor's amax {amax_t!r} "
                f"gives amax / (448 * {fmt.max_value:g}) = {amax_t / top!r}",
                hint="a global scale stale after the tensor changed, or from another tensor"))
    ok = _rule(scheme, g, rel_tol)
    rule_ok = ok(s, amax) | ~fmt_ok
    if not bool(rule_ok.all()):
        bad = ~rule_ok
        ratio = (amax / s.where(s > 0, torch.ones_like(s)))[bad]
        i = _first(bad)
        assert i is not None
        findings.append(Finding(
            "scale_value", f"{int(bad.sum())} of {s.numel()} scales do not follow the "
            f"{scheme.scale} rule from their block's amax (first block {i}: scale "
            f"{float(s[i])!r} for amax {float(amax[i])!r}, amax / scale = "
            f"{float(ratio[0]):.6g} against {fmt.name}'s largest {fmt.max_value:g})",
            int(bad.sum()), s.numel(), i, _scale_hint(ok, s, amax, scheme, g, rel_tol)))

    factor = expand_to_elements(s, shape, scheme.granularity)  # the declared layout
    if g is not None:
        factor = factor * g
    checkable = (factor > 0) & torch.isfinite(factor) & ~bad_v
    t = x.to(torch.float64) / torch.where(checkable, factor, torch.ones_like(factor))
    band = (t * (1 - rel_tol), t * (1 + rel_tol))
    lo_t, hi_t = torch.minimum(*band), torch.maximum(*band)

    def rounded(v: torch.Tensor) -> torch.Tensor:
        return round_to_element(v.to(torch.float32), fmt, saturate=scheme.saturate)

    lo, hi = rounded(lo_t), rounded(hi_t)
    wrong = checkable & ~((values >= lo) & (values <= hi))
    if bool(wrong.any()):
        i = _first(wrong)
        assert i is not None
        hint = ""
        if fmt.name == "e4m3fn":
            as_e5m2 = round_to_element(t.to(torch.float32), "e5m2", saturate=True)
            if bool((values[wrong] == as_e5m2[wrong]).all()):
                hint = "elements rounded to e5m2 where e4m3fn is declared"
        if not hint and any(f.kind in ("scale_value", "global_scale") for f in findings):
            hint = ("elements and scales were not made from this tensor (stale after it "
                    "changed?), or elements quantized with other scales than those stored")
        elif not hint:
            hint = ("elements not made from this tensor with these scales (stale after the "
                    "tensor changed, or quantized with other scales than those stored)")
        expect = rounded(t[i[0]:i[0] + 1, i[1]:i[1] + 1])
        findings.append(Finding(
            "rounding", f"{int(wrong.sum())} of {n} elements are not the {fmt.name} rounding "
            f"of the tensor's element over its scale (first at {i}: element "
            f"{float(values[i])!r}, tensor {float(x[i])!r} / scale {float(factor[i])!r} = "
            f"{float(t[i]):.6g}, which rounds to {float(expect):g})",
            int(wrong.sum()), n, i, hint))
    return Validation(scheme, tuple(findings))
