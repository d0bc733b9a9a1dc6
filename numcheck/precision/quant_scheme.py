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
- ``amax_floor``: the least ``amax`` a scale is computed from, so an all-zero block gets a
  finite, nonzero scale (DeepGEMM's quantizers clamp at 1e-4).

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

__all__ = ["DEEPSEEK_ACT", "DEEPSEEK_WEIGHT", "E5M2_TENSOR", "FP8_ROW", "FP8_TENSOR", "MXFP4",
           "NVFP4", "PER_ROW", "PER_TENSOR", "SCALE_FORMATS", "Granularity", "OperandScheme",
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
SCALE_FORMATS: dict[str, str] = {
    "fp32": "float32 scale amax / fmax (the block's largest magnitude lands on fmax)",
    "ue8m0": ("a power of two rounded up: the smallest 2^e >= amax / fmax, so no element "
              "passes fmax (DeepSeek V3.1/V4's UE8M0 scales)"),
    "mx": ("a power of two by the OCP MX rule: 2^(floor(log2 amax) - emax_elem), emax_elem the "
           "exponent of the format's largest power of two; amax / scale may reach "
           "2^(emax_elem + 1) > fmax, and elements past fmax saturate (MXFP4, MXFP8)"),
    "nvfp4": ("an e4m3 scale per block times one float32 scale per tensor: NVIDIA's NVFP4 "
              "two-level recipe (numcheck.precision.quantize)"),
}


def declared_element(name: str, where: str) -> ElementFormat:
    """The element format a declaration names (``where``: ``OperandScheme``), or a
    one-line ValueError saying the fix, such as for a precision class (``"e4m3"``) written
    where its element format (``"e4m3fn"``) belongs."""
    from numcheck.precision.quant_formats import ELEMENT_FORMATS

    try:
        return element_format(name)
    except ValueError:
        by_class = {f.precision: f.name for f in ELEMENT_FORMATS.values()}
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
    amax_floor: float = 1e-4

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
        if not (math.isfinite(self.amax_floor) and self.amax_floor > 0):
            raise ValueError(f"OperandScheme: amax_floor must be a positive finite number, "
                             f"got {self.amax_floor!r}")

    @property
    def format(self) -> ElementFormat:
        """The element format."""
        return element_format(self.element)

    @property
    def label(self) -> str:
        """A short name: ``e4m3fn/1x128/ue8m0`` (``/nosat`` when it does not saturate)."""
        sat = "" if self.saturate else "/nosat"
        return f"{self.element}/{self.granularity.name}/{self.scale}{sat}"

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
