"""Two runs' outputs compared bit for bit.

Bitwise, not by value: ``-0.0`` against ``0.0`` and two NaN payloads differ, as they would
in a serving engine's logs. A top-k selection whose bytes differ is told apart further: the
same tokens in another order, or other tokens (a change of what attention reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

#: Integer dtypes of each element size, to compare any tensor's elements by their bytes.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class Difference:
    """How one output of two runs differs.

    ``kind``: ``"values"`` (elements whose bytes differ), ``"shape"`` (shape or dtype),
    ``"order"`` (a top-k selection: the same tokens in every row, in another order),
    ``"tokens"`` (a top-k selection: other tokens in ``rows`` rows). ``first`` is the index
    of the first differing element, ``max_abs`` the largest |a - b| over elements finite in
    both (None where none is).
    """

    output: str
    kind: str
    differing: int
    total: int
    first: tuple[int, ...] | None = None
    max_abs: float | None = None
    rows: int = 0
    shapes: str = ""

    def describe(self) -> str:
        """``logits: 37 of 8192 elements differ (max |diff| 1.19e-07, first at (0, 5))``."""
        if self.kind == "shape":
            return f"{self.output}: {self.shapes}"
        where = f"first at {self.first}" if self.first is not None else ""
        if self.kind == "tokens":
            return (f"{self.output}: {self.rows} of {self.total} rows select other tokens"
                    + (f" ({where})" if where else ""))
        if self.kind == "order":
            return (f"{self.output}: the same tokens in another order in {self.rows} of "
                    f"{self.total} rows")
        detail = [f"max |diff| {self.max_abs:.3g}"] if self.max_abs is not None else []
        detail += [where] if where else []
        return (f"{self.output}: {self.differing} of {self.total} elements differ"
                + (f" ({', '.join(detail)})" if detail else ""))

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the report (docs/report.md, ``invariance``)."""
        out: dict[str, Any] = {"output": self.output, "kind": self.kind,
                               "differing": self.differing, "total": self.total,
                               "text": self.describe()}
        if self.first is not None:
            out["first"] = list(self.first)
        if self.max_abs is not None:
            out["max_abs"] = self.max_abs
        if self.kind in ("order", "tokens"):
            out["rows"] = self.rows
        return out


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of the same size: equal exactly when the bytes are."""
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    return t.view(_BITS[t.element_size()])


def difference(name: str, a: torch.Tensor, b: torch.Tensor, *,
               selection: bool = False) -> Difference | None:
    """How ``b`` differs from ``a`` bit for bit (None: identical). ``selection``: the
    output is a top-k selection (rows of token indices)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return Difference(name, "shape", a.numel(), a.numel(), shapes=(
            f"{str(a.dtype).removeprefix('torch.')} {list(a.shape)} against "
            f"{str(b.dtype).removeprefix('torch.')} {list(b.shape)}"))
    differs = bits(a) != bits(b)
    count = int(differs.sum())
    if count == 0:
        return None
    first = tuple(int(i) for i in torch.nonzero(differs)[0].tolist())
    if selection and a.dim() >= 1:
        rows_a, rows_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        row_differs = differs.reshape(-1, a.shape[-1]).any(dim=1)
        other = (rows_a.sort(dim=1).values != rows_b.sort(dim=1).values).any(dim=1)
        if bool(other.any()):
            return Difference(name, "tokens", count, rows_a.shape[0], first=first,
                              rows=int(other.sum()))
        return Difference(name, "order", count, rows_a.shape[0], first=first,
                          rows=int(row_differs.sum()))
    max_abs = None
    if a.is_floating_point():
        da, db = a[differs].double(), b[differs].double()
        finite = torch.isfinite(da) & torch.isfinite(db)
        if bool(finite.any()):
            max_abs = float((da[finite] - db[finite]).abs().max())
    return Difference(name, "values", count, a.numel(), first=first, max_abs=max_abs)


def differences(first: Mapping[str, torch.Tensor], other: Mapping[str, torch.Tensor], *,
                selection: str | None = None) -> list[Difference]:
    """Every output of ``first`` that ``other`` does not reproduce bit for bit (an output
    missing from ``other`` counts as a shape difference); ``selection`` names the top-k
    output, if any."""
    found = []
    for name, t in first.items():
        if name not in other:
            found.append(Difference(name, "shape", t.numel(), t.numel(),
                                    shapes="missing from the other run"))
            continue
        d = difference(name, t, other[name], selection=name == selection)
        if d is not None:
            found.append(d)
    return found
