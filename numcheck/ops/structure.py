"""How an op's outputs are organised: the axes and groupings a kernel engineer thinks in.

An op may declare, per output, names for its axes and extra **groupings**: ways to split the
output's elements into groups (requests, KV pages, MTP rows, the pre/post/comb parts of a
projection). When a check fails, :mod:`numcheck.localize` measures how the error is spread
over each grouping and names the groups that carry it ("91% of the error is in 4 of 80
pages: the last, partial page of each request").

A grouping is a function, not a table, because groups often depend on the inputs: a KV page
is found through the block table, a request's last page through its context length::

    def page(inputs, params, shape):              # logits [B * next_n, L]
        t = torch.arange(shape[1])
        rows = torch.arange(shape[0]) // params["next_n"]
        return inputs["block_table"][rows][:, t // params["block_size"]]

    Grouping("page", page)

The labels are integers, one per element, in any tensor that broadcasts to the output's shape
(a ``[R, 1]`` tensor labels whole rows); ``-1`` puts an element in no group. An op that
declares nothing still gets its plain axes (rows, columns, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: ``labels(inputs, params, shape)``: integer labels broadcastable to ``shape`` (-1: no group).
Labeler = Callable[[Mapping[str, torch.Tensor], Mapping[str, Any], tuple[int, ...]], torch.Tensor]
#: ``describe(inputs, params, label)``: a phrase naming one group ("page 17 (request 2, block 3)").
Describer = Callable[[Mapping[str, torch.Tensor], Mapping[str, Any], int], str]


@dataclass(frozen=True)
class Grouping:
    """One way to split an output's elements into groups.

    ``name`` is the singular noun of one group ("page"), ``plural`` its plural (default:
    ``name + "s"``). ``describe`` names a group in messages (default: ``"<name> <label>"``);
    a grouping whose groups are kinds rather than instances ("the last, partial page of each
    request") is also used to *explain* a heavy set found along a finer grouping.
    """

    name: str
    labels: Labeler
    plural: str = ""
    describe: Describer | None = None

    @property
    def names(self) -> str:
        """The plural noun."""
        return self.plural or f"{self.name}s"

    def label_name(self, inputs: Mapping[str, torch.Tensor], params: Mapping[str, Any],
                   label: int) -> str:
        """The phrase of one group, for messages."""
        if self.describe is not None:
            return self.describe(inputs, params, label)
        return f"{self.name} {label}"


@dataclass(frozen=True)
class Structure:
    """The structure of one output: names of its axes, and groupings beyond the plain axes.

    ``axes`` names each axis by the singular noun of one index along it ("row", "token");
    unnamed axes get :func:`default_axis_names`.
    """

    axes: tuple[str, ...] = ()
    groupings: tuple[Grouping, ...] = ()


def default_axis_names(ndim: int) -> tuple[str, ...]:
    """What an undeclared axis is called: ``element``; ``row``, ``column``; ``dim 0``..."""
    if ndim == 1:
        return ("element",)
    if ndim == 2:
        return ("row", "column")
    return tuple(f"dim {d}" for d in range(ndim))


def axis_grouping(axis: int, ndim: int, name: str) -> Grouping:
    """The plain grouping along one axis: the index along ``axis`` labels each element."""

    def labels(inputs: Mapping[str, torch.Tensor], params: Mapping[str, Any],
               shape: tuple[int, ...]) -> torch.Tensor:
        view = [1] * ndim
        view[axis] = shape[axis]
        return torch.arange(shape[axis]).view(view)

    return Grouping(name, labels, plural=_plural(name))


def _plural(name: str) -> str:
    if name.startswith("dim "):
        return f"indices along {name}"
    if name.endswith(("s", "x", "ch", "sh")):
        return f"{name}es"
    return f"{name}s"


def axis_names(structure: Structure | None, ndim: int) -> list[str]:
    """The name of each axis: declared, else :func:`default_axis_names`."""
    declared = structure.axes if structure is not None else ()
    if len(declared) == ndim:
        return list(declared)
    return list(default_axis_names(ndim))


def groupings_of(structure: Structure | None, shape: Sequence[int]) -> list[Grouping]:
    """Every grouping of an output: its plain axes (named), then the declared ones.

    Axes of size 1 are left out: they split nothing.
    """
    ndim = len(shape)
    names = axis_names(structure, ndim)
    found = [axis_grouping(d, ndim, names[d]) for d in range(ndim) if shape[d] > 1]
    if structure is not None:
        found += list(structure.groupings)
    return found
