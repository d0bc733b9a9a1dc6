"""How a GEMM operand is quantized, as data: element format, scale blocks, scale rule.

A low-precision GEMM ``y = a @ b^T`` reads each operand as narrow elements times scales. An
:class:`OperandScheme` says how, for one operand held as ``[rows, K]`` (K, the contraction
dimension, last: activations ``[tokens, K]``, weights ``[out_features, K]`` as
``nn.Linear`` stores them):

- ``element``: the format of the elements (numcheck.precision.quant_formats: ``e4m3fn``,
  ``e5m2``, ``e2m1``);
- ``granularity``: which elements share one scale (:class:`Granularity`: per tensor, per
  row (token or output channel), 1xG groups along K, GxG blocks);
- ``scale``: how a block's scale follows from its largest magnitude ``amax`` (one of
  :data:`SCALE_FORMATS`);
- ``saturate``: whether values past the format's largest are clamped to it;
- ``amax_floor``: the least ``amax`` a scale is computed from. ``None`` (the default) is the
  rule's own (:data:`RULE_FLOORS`): DeepGEMM's 1e-4 for the FP8 rules ``fp32`` and
  ``ue8m0``, none for ``mx`` and ``nvfp4``, whose specifications have none;

and what real quantizers legitimately do beside the rule, each declared, none by default
(:data:`CONVENTIONS`; :data:`QUANT_PRESETS` names the libraries' own):

- ``scale_dtype``: the dtype an ``fp32``-rule scale ``amax / fmax`` is computed in
  (``bf16``: torchao's ``Float8Tensor`` on a bf16 tensor divides in bf16);
- ``block_scale_min``: NVFP4's e4m3 block scales clamped from below (torchao: 2^-6);
- ``zero_scale``: the scale stored where the rule gives 0, a block of zeros (compressed-tensors:
  0.125 for NVFP4, float32's epsilon for FP8 with no floor).

Scale layout: always a 2-D grid ``[ceil(rows / block rows), ceil(K / block cols)]`` of float32
(per tensor ``[1, 1]``, per row ``[rows, 1]``, 1x128 groups ``[rows, ceil(K / 128)]``, 128x128
blocks ``[ceil(rows / 128), ceil(K / 128)]``), row-major like the operand. Ragged edges: where
a dimension is not a multiple of the block, the last block along it is shorter and its scale
comes from the elements it has (the same as padding with zeros, which change no ``amax``).
A dequantized element is ``element * scale`` (times the tensor's global scale for NVFP4).

Pure data and index arithmetic; nothing here rounds or multiplies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from numcheck.precision.quant_formats import ElementFormat, element_format

if TYPE_CHECKING:
    import torch

__all__ = ["CONVENTIONS", "DEEPSEEK_ACT", "DEEPSEEK_WEIGHT", "E5M2_TENSOR", "FP8_ROW",
           "FP8_TENSOR", "MXFP4", "MXFP8", "NVFP4", "PER_ROW", "PER_TENSOR", "QUANT_PRESETS",
           "RULE_FLOORS", "SCALE_DTYPES", "SCALE_FORMATS", "Granularity", "OperandScheme",
           "block_amax", "blocks", "expand_to_elements", "groups"]


@dataclass(frozen=True)
class Granularity:
    """The shape of the block of elements that share one scale: ``rows`` x ``cols`` (cols
    run along K). 0 means the whole dimension: ``(0, 0)`` per tensor, ``(1, 0)`` per row,
    ``(1, 128)`` 1x128 groups along K, ``(128, 128)`` 128x128 blocks."""

    rows: int
    cols: int

    def __post_init__(self) -> None:
        for name, v in (("rows", self.rows), ("cols", self.cols)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"Granularity: {name} must be an integer >= 0 (0: the whole "
                                 f"dimension), got {v!r}")

    @property
    def name(self) -> str:
        """``tensor``, ``row``, ``1x128``, ``128x128`` (``Rx0`` for a block of R rows
        spanning K)."""
        if self.rows == 0 and self.cols == 0:
            return "tensor"
        if self.rows == 1 and self.cols == 0:
            return "row"
        return f"{self.rows}x{self.cols}"

    def block_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        """The block of an operand of ``shape`` ``[rows, K]``: 0 resolved to the dimension."""
        r, k = shape
        return (self.rows or max(r, 1), self.cols or max(k, 1))

    def grid(self, shape: tuple[int, int]) -> tuple[int, int]:
        """The scale grid of an operand of ``shape``: blocks along rows and along K."""
        br, bk = self.block_shape(shape)
        return (max(1, math.ceil(shape[0] / br)), max(1, math.ceil(shape[1] / bk)))

    def varies_along_k(self, k: int) -> bool:
        """True when the scale changes along K for a K of ``k`` (more than one block)."""
        return self.cols != 0 and self.cols < k

    def k_boundaries(self, k: int) -> list[int]:
        """Where scale blocks start along K (0 included; ``k`` excluded)."""
        step = self.cols or max(k, 1)
        return list(range(0, k, step))


#: Per tensor, per row: the granularities without a size.
PER_TENSOR = Granularity(0, 0)
PER_ROW = Granularity(1, 0)


def groups(g: int) -> Granularity:
    """1 x ``g`` groups along K (one scale per row per ``g`` elements of K)."""
    return Granularity(1, g)


def blocks(g: int) -> Granularity:
    """``g`` x ``g`` blocks (one scale per ``g`` rows per ``g`` elements of K)."""
    return Granularity(g, g)


#: Scale rules by name, and what each means. ``fmax`` is the element format's largest value.
#: The sources: ``fp32``, DeepSeek-V3's technical report (section 3.3, fine-grained
#: quantization) and DeepGEMM's casts; ``ue8m0``, DeepGEMM's UE8M0 scales (DeepSeek V3.1 /
#: V4); ``mx``, the OCP Microscaling Formats (MX) specification v1.0, section 6.3; ``nvfp4``,
#: NVIDIA's NVFP4 recipe ("Pretraining Large Language Models with NVFP4", 2025, and
#: Transformer Engine's reference quantizer). numcheck.precision.quantize has the steps.
SCALE_FORMATS: dict[str, str] = {
    "fp32": "float32 scale amax / fmax (the block's largest magnitude lands on fmax)",
    "ue8m0": ("a power of two rounded up: the smallest 2^e >= amax / fmax, so no element "
              "passes fmax (DeepSeek V3.1/V4's UE8M0 scales)"),
    "mx": ("a power of two by the OCP MX rule: 2^(floor(log2 amax) - emax_elem), emax_elem the "
           "exponent of the format's largest power of two; amax / scale may reach "
           "2^(emax_elem + 1) > fmax, and elements past fmax saturate (MXFP4, MXFP8); a block "
           "of zeros takes the smallest E8M0 scale, 2^-127"),
    "nvfp4": ("an e4m3 scale per block times one float32 scale per tensor: NVIDIA's NVFP4 "
              "two-level recipe (numcheck.precision.quantize); a block whose e4m3 scale is 0 "
              "holds zeros, a tensor of zeros takes the encode scale 1"),
}
#: Each rule's own amax floor (what ``amax_floor=None`` means). DeepGEMM's FP8 casts (and
#: DeepSeek V3's ``act_quant``) clamp a block's amax at 1e-4, so a block of zeros gets the
#: scale 1e-4 / 448; the OCP MX rule and NVIDIA's NVFP4 recipe have no floor: a floor there
#: flushes a block of small values (amax under 1e-4) to zero.
RULE_FLOORS: dict[str, float] = {"fp32": 1e-4, "ue8m0": 1e-4, "mx": 0.0, "nvfp4": 0.0}
#: The dtypes an ``fp32``-rule scale may be computed in (``scale_dtype``), by torch name.
SCALE_DTYPES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: The conventions a scheme may declare beside its rule, and what each means.
CONVENTIONS: dict[str, str] = {
    "scale_dtype": ("the dtype the fp32 rule's amax / fmax is computed in: the quotient "
                    "rounded to it (torchao's Float8Tensor on bf16 input: bf16)"),
    "block_scale_min": ("NVFP4's e4m3 block scales clamped from below at this e4m3 value "
                        "before rounding (torchao's NVFP4: 2^-6, e4m3's smallest normal)"),
    "zero_scale": ("the scale stored where the rule gives 0 (a block of zeros; for nvfp4 any "
                   "block whose e4m3 scale rounds to 0): compressed-tensors writes 0.125 for "
                   "NVFP4 and float32's epsilon for FP8"),
}


def declared_element(name: str, where: str) -> ElementFormat:
    """The element format a declaration names (``where``: ``OperandScheme``), or a
    one-line ValueError saying the fix, such as for a precision class (``"e4m3"``) written
    where its element format (``"e4m3fn"``) belongs."""
    from numcheck.precision.quant_formats import ELEMENT_FORMATS

    try:
        return element_format(name)
    except ValueError:
        by_class: dict[str, str] = {}
        for f in ELEMENT_FORMATS.values():  # the first format of a class: OCP's, not FNUZ
            by_class.setdefault(f.precision, f.name)
        hint = (f" ('{name}' is a precision class; its element format is '{by_class[name]}')"
                if name in by_class else "")
        fix = by_class.get(name, next(iter(ELEMENT_FORMATS)))
        raise ValueError(
            f"{where}: unknown element format {name!r}{hint}; known: "
            f"{', '.join(ELEMENT_FORMATS)}. Fix: {where}(element={fix!r}, ...)") from None


@dataclass(frozen=True)
class OperandScheme:
    """How one GEMM operand ``[rows, K]`` is quantized (module docstring)."""

    element: str = "e4m3fn"
    granularity: Granularity = PER_TENSOR
    scale: str = "fp32"
    saturate: bool = True
    amax_floor: float | None = None
    scale_dtype: str = "fp32"
    block_scale_min: float | None = None
    zero_scale: float | None = None

    def __post_init__(self) -> None:
        fmt = declared_element(self.element, "OperandScheme")
        if not isinstance(self.granularity, Granularity):
            raise TypeError(f"OperandScheme: granularity must be a Granularity, got "
                             f"{self.granularity!r}")
        if self.scale not in SCALE_FORMATS:
            raise ValueError(f"OperandScheme: unknown scale format {self.scale!r}; known: "
                             f"{', '.join(SCALE_FORMATS)}")
        if not self.saturate and not (fmt.has_inf or fmt.has_nan):
            raise ValueError(f"OperandScheme: {fmt.name} has no infinity and no NaN to hold "
                             "an overflow: declare saturate=True")
        for name in ("amax_floor", "block_scale_min", "zero_scale"):
            v = getattr(self, name)
            ok = v is None or (isinstance(v, int | float) and not isinstance(v, bool)
                               and math.isfinite(v) and (v >= 0 if name == "amax_floor"
                                                         else v > 0))
            if not ok:
                least = "a finite number >= 0" if name == "amax_floor" else "positive and finite"
                raise ValueError(f"OperandScheme: {name} must be {least} (or None), got {v!r}")
        if self.scale_dtype not in SCALE_DTYPES:
            raise ValueError(f"OperandScheme: scale_dtype must be one of "
                             f"{', '.join(SCALE_DTYPES)}, got {self.scale_dtype!r}")
        if self.scale_dtype != "fp32" and self.scale != "fp32":
            raise ValueError(f"OperandScheme: scale_dtype {self.scale_dtype!r} declares how the "
                             f"fp32 rule's amax / fmax is computed; {self.scale} scales are "
                             "made otherwise")
        if self.block_scale_min is not None and self.scale != "nvfp4":
            raise ValueError("OperandScheme: block_scale_min clamps NVFP4's e4m3 block scales; "
                             f"for {self.scale} scales declare amax_floor instead")
        if self.scale == "fp32" and self.floor == 0 and self.zero_scale is None:
            raise ValueError("OperandScheme: fp32 scales with no amax floor make a "
                             "block of zeros scale 0 and its elements NaN (0 / 0): declare "
                             "amax_floor > 0, or the zero_scale your quantizer stores there")

    @property
    def floor(self) -> float:
        """The amax floor in force: the declared one, else the rule's (:data:`RULE_FLOORS`)."""
        return RULE_FLOORS[self.scale] if self.amax_floor is None else float(self.amax_floor)

    @property
    def format(self) -> ElementFormat:
        """The element format."""
        return element_format(self.element)

    @property
    def conventions(self) -> tuple[str, ...]:
        """The declared departures from the rule's defaults, as short tags (``floor=1e-12``,
        ``scale_dtype=bf16``, ``block_scale_min=0.015625``, ``zero_scale=0.125``)."""
        tags = []
        if self.amax_floor is not None and self.floor != RULE_FLOORS[self.scale]:
            tags.append(f"floor={self.floor:g}")
        if self.scale_dtype != "fp32":
            tags.append(f"scale_dtype={self.scale_dtype}")
        if self.block_scale_min is not None:
            tags.append(f"block_scale_min={self.block_scale_min:g}")
        if self.zero_scale is not None:
            tags.append(f"zero_scale={self.zero_scale:g}")
        return tuple(tags)

    @property
    def label(self) -> str:
        """A short name: ``e4m3fn/1x128/ue8m0`` (``/nosat`` when it does not saturate, and
        each declared convention: ``e2m1/1x16/nvfp4/zero_scale=0.125``)."""
        sat = "" if self.saturate else "/nosat"
        tail = "".join(f"/{t}" for t in self.conventions)
        return f"{self.element}/{self.granularity.name}/{self.scale}{sat}{tail}"

    def scale_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        """The scale grid of an operand of ``shape`` ``[rows, K]``."""
        return self.granularity.grid(shape)


#: Common schemes. DeepSeek V3's FP8 recipe: activations per token in 1x128 groups, weights in
#: 128x128 blocks, float32 scales (V3.1/V4: ``replace(..., scale="ue8m0")``).
DEEPSEEK_ACT = OperandScheme("e4m3fn", groups(128), "fp32")
DEEPSEEK_WEIGHT = OperandScheme("e4m3fn", blocks(128), "fp32")
#: ``torch._scaled_mm``'s two scalings: one float32 scale per tensor, or per row.
FP8_TENSOR = OperandScheme("e4m3fn", PER_TENSOR, "fp32")
FP8_ROW = OperandScheme("e4m3fn", PER_ROW, "fp32")
E5M2_TENSOR = OperandScheme("e5m2", PER_TENSOR, "fp32")
#: NVFP4: e2m1 elements, an e4m3 scale per 16 elements along K, a float32 scale per tensor.
NVFP4 = OperandScheme("e2m1", groups(16), "nvfp4")
#: MXFP4 (OCP MX v1.0): e2m1 elements, a power-of-two (E8M0) scale per 32 elements along K.
MXFP4 = OperandScheme("e2m1", groups(32), "mx")
#: MXFP8 (OCP MX v1.0): e4m3fn elements, an E8M0 scale per 32 elements along K.
MXFP8 = OperandScheme("e4m3fn", groups(32), "mx")

#: What widely used quantizers do, as schemes: each library's convention declared
#: (docs/fp8.md, "Conventions of the libraries"). A variant whose quantizer is one of these
#: declares the preset (``QUANT_PRESETS["torchao.nvfp4"]``, or ``replace`` of it for another
#: granularity); a quantizer that departs from its declared scheme without saying so fails
#: the operand check.
QUANT_PRESETS: dict[str, OperandScheme] = {
    # DeepGEMM's per-token and per-block casts; DeepSeek V3's act_quant: the rules' own floor.
    "deepgemm.act": DEEPSEEK_ACT,
    "deepgemm.weight": DEEPSEEK_WEIGHT,
    "deepgemm.act_ue8m0": OperandScheme("e4m3fn", groups(128), "ue8m0"),
    "deepgemm.weight_ue8m0": OperandScheme("e4m3fn", blocks(128), "ue8m0"),
    # torchao's Float8Tensor (Float8DynamicActivationFloat8WeightConfig) on bf16 tensors: the
    # scale amax / 448 divided in bf16, amax floored at 1e-12.
    "torchao.float8_row_bf16": OperandScheme("e4m3fn", PER_ROW, "fp32", amax_floor=1e-12,
                                             scale_dtype="bf16"),
    "torchao.float8_tensor_bf16": OperandScheme("e4m3fn", PER_TENSOR, "fp32",
                                                amax_floor=1e-12, scale_dtype="bf16"),
    # torchao's MX formats (ScaleCalculationMode.FLOOR): the OCP rule.
    "torchao.mxfp4": MXFP4,
    "torchao.mxfp8": MXFP8,
    # torchao's NVFP4Tensor with a per-tensor scale: block scales clamped at 2^-6.
    "torchao.nvfp4": OperandScheme("e2m1", groups(16), "nvfp4", block_scale_min=2.0**-6),
    # compressed-tensors' NVFP4 (tensor_group, scales e4m3): 0.125 where a scale rounds to 0;
    # its FP8 per channel on a float32 weight: no floor, float32's epsilon for a zero row.
    "compressed_tensors.nvfp4": OperandScheme("e2m1", groups(16), "nvfp4", zero_scale=0.125),
    "compressed_tensors.fp8_channel": OperandScheme("e4m3fn", PER_ROW, "fp32", amax_floor=0.0,
                                                    zero_scale=2.0**-23),
    # The specifications themselves: OCP MX v1.0 and NVIDIA's NVFP4 recipe (Transformer
    # Engine's reference quantizer).
    "ocp.mxfp4": MXFP4,
    "ocp.mxfp8": MXFP8,
    "nvidia.nvfp4": NVFP4,
}


def _check_2d(x: torch.Tensor, what: str) -> tuple[int, int]:
    if x.dim() != 2:
        raise ValueError(f"{what}: needs a 2-D operand [rows, K] (reshape leading dimensions "
                         f"into rows, or quantize each matrix of a batch), got shape "
                         f"{list(x.shape)}")
    return (int(x.shape[0]), int(x.shape[1]))


def block_amax(x: torch.Tensor, granularity: Granularity) -> torch.Tensor:
    """The largest magnitude of each scale block of the 2-D ``x``, as a float32 grid
    (ragged edge blocks over the elements they have). Exact: a maximum has no rounding."""
    import torch

    shape = _check_2d(x, "block_amax")
    br, bk = granularity.block_shape(shape)
    gr, gk = granularity.grid(shape)
    a = x.to(torch.float32).abs()
    padded = torch.zeros((gr * br, gk * bk), dtype=torch.float32, device=x.device)
    padded[: shape[0], : shape[1]] = a
    return padded.view(gr, br, gk, bk).amax(dim=(1, 3))


def expand_to_elements(grid: torch.Tensor, shape: tuple[int, int],
                       granularity: Granularity) -> torch.Tensor:
    """A per-block grid (scales, amax...) repeated onto every element of an operand of
    ``shape``: ``[rows, K]``. ValueError when the grid is not the granularity's shape."""
    expected = granularity.grid(shape)
    if tuple(grid.shape) != expected:
        raise ValueError(f"scale grid of shape {list(grid.shape)} for an operand "
                         f"{list(shape)} with {granularity.name} blocks: expected "
                         f"{list(expected)}")
    br, bk = granularity.block_shape(shape)
    full = grid.repeat_interleave(br, dim=0).repeat_interleave(bk, dim=1)
    return full[: shape[0], : shape[1]]
