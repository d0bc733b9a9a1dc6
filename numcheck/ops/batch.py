"""What a request is in an op's batch: the batch axis of each input and output.

Batch invariance (a case's ``batch_invariant`` key; numcheck.invariance) holds a request's
outputs computed alone to its rows of the whole batch's outputs, bit for bit. What a request
is depends on the op, so the op says it (``OpSpec(batch=Batch(...))``): the indexer's
requests are its batch index ``b`` (``next_n`` query rows each), mHC's are its token rows.

A :class:`Batch` names, for each input and output that holds the requests, the axis they
lie along and how many consecutive entries along it belong to one request (a number, or the
shape parameter holding it). Inputs it does not name are shared by every request (a KV
cache, a weight) and are passed whole. The inputs of a batch of some requests are the
batched inputs' entries of those requests, made contiguous, with the shape parameter that
holds the batch size (``size_param``) set to their count; every other parameter is kept,
so the outputs keep their other dimensions (the indexer's logits keep ``max_context``
columns). An op whose inputs need more than that (packed sequences with offsets) gives its
own ``select``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Inputs = dict[str, torch.Tensor]
Outputs = dict[str, torch.Tensor]
Params = Mapping[str, Any]

#: ``select(inputs, params, requests)``: the inputs of a batch made of ``requests`` alone
#: (indices into the case's batch, in that order), for an op whose inputs are more than
#: entries along an axis. Its params are those numcheck makes (``size_param`` set).
SelectFn = Callable[[Inputs, Params, Sequence[int]], Inputs]


@dataclass(frozen=True)
class BatchAxis:
    """Where the requests lie in one tensor: along ``dim``, ``per_request`` consecutive
    entries each (a number, or the name of the shape parameter holding it: the indexer's
    ``weights`` and logits have ``next_n`` rows per request)."""

    dim: int = 0
    per_request: int | str = 1


@dataclass(frozen=True)
class Batch:
    """The requests of an op's batch: the axis of each batched input and output.

    ``inputs`` and ``outputs`` map names to a :class:`BatchAxis` (or a bare dim, one entry
    per request). Every output the op names must be listed: an output not split by request
    cannot be compared request by request. Inputs left out are shared by every request.
    ``size_param``: the shape parameter holding the batch size (set to the number of
    requests of a smaller batch), or None. ``select``: inputs of a batch of some requests,
    when slicing along the axes is not enough.
    """

    inputs: Mapping[str, BatchAxis | int]
    outputs: Mapping[str, BatchAxis | int]
    size_param: str | None = None
    select: SelectFn | None = field(default=None, compare=False)


def axis_of(spec: BatchAxis | int) -> BatchAxis:
    """A bare dim as a :class:`BatchAxis` of one entry per request."""
    return spec if isinstance(spec, BatchAxis) else BatchAxis(dim=int(spec))


def entries_per_request(spec: BatchAxis | int, params: Params) -> int:
    """How many consecutive entries along the axis belong to one request."""
    per = axis_of(spec).per_request
    return int(params[per]) if isinstance(per, str) else int(per)


def batch_size(batch: Batch, inputs: Inputs, params: Params) -> int:
    """The number of requests in ``inputs``: read from the batched inputs, which must agree.

    Raises ValueError naming the input when one is missing, too short along its axis, or
    disagrees with another."""
    sizes: dict[str, int] = {}
    for name, spec in batch.inputs.items():
        if name not in inputs:
            raise ValueError(f"the op's batch names input {name!r}, which its inputs do not "
                             f"have (inputs: {', '.join(inputs)})")
        ax, per = axis_of(spec), entries_per_request(spec, params)
        t = inputs[name]
        if not -t.dim() <= ax.dim < t.dim() or per < 1 or t.shape[ax.dim] % per:
            raise ValueError(f"input {name!r} {list(t.shape)} has no batch axis {ax.dim} of "
                             f"{per} entries per request")
        sizes[name] = t.shape[ax.dim] // per
    if not sizes:
        raise ValueError("the op's batch names no input: the batch size cannot be read")
    if len(set(sizes.values())) > 1:
        found = ", ".join(f"{n} {s}" for n, s in sizes.items())
        raise ValueError(f"the batched inputs disagree on the number of requests ({found})")
    return next(iter(sizes.values()))


def take(t: torch.Tensor, spec: BatchAxis | int, params: Params,
         requests: Sequence[int]) -> torch.Tensor:
    """The entries of ``requests`` along the tensor's batch axis, contiguous."""
    dim = axis_of(spec).dim
    per = entries_per_request(spec, params)
    rows = torch.tensor([r * per + j for r in requests for j in range(per)], dtype=torch.long,
                        device=t.device)
    return t.index_select(dim, rows).contiguous()


def request_inputs(batch: Batch, inputs: Inputs, params: Params,
                   requests: Sequence[int]) -> tuple[Inputs, dict[str, Any]]:
    """The inputs and params of a batch made of ``requests`` alone (indices into the batch of
    ``inputs``, in that order): the batched inputs' entries of those requests, the shared
    inputs whole."""
    sub = dict(params)
    if batch.size_param is not None:
        sub[batch.size_param] = len(requests)
    if batch.select is not None:
        return dict(batch.select(inputs, sub, requests)), sub
    out = {name: take(t, batch.inputs[name], params, requests) if name in batch.inputs else t
           for name, t in inputs.items()}
    return out, sub


def request_outputs(batch: Batch, outputs: Outputs, params: Params,
                    requests: Sequence[int]) -> Outputs:
    """The rows of ``requests`` in the outputs of the whole batch (``params``: the batch's)."""
    return {name: take(t, batch.outputs[name], params, requests)
            for name, t in outputs.items() if name in batch.outputs}


def declaration_problems(batch: Batch, outputs: Sequence[str],
                         params: Mapping[str, Any]) -> list[str]:
    """What is wrong with an op's :class:`Batch` (checked at registration): outputs it
    misses or does not have, axes that are not dims, parameters the op does not have."""
    problems = []
    missing = [o for o in outputs if o not in batch.outputs]
    if missing:
        problems.append(f"batch.outputs misses {missing}: every output needs its batch axis")
    unknown = [o for o in batch.outputs if o not in outputs]
    if unknown:
        problems.append(f"batch.outputs names {unknown}, not outputs of the op {list(outputs)}")
    for where, table in (("inputs", batch.inputs), ("outputs", batch.outputs)):
        for name, spec in table.items():
            if isinstance(spec, bool) or not isinstance(spec, BatchAxis | int):
                problems.append(f"batch.{where}[{name!r}] is {type(spec).__name__}: give a "
                                "dim or a numcheck.BatchAxis")
                continue
            per = axis_of(spec).per_request
            if isinstance(per, str) and per not in params:
                problems.append(f"batch.{where}[{name!r}]: per_request {per!r} is not a shape "
                                f"parameter of the op ({', '.join(params)})")
            elif not isinstance(per, str) and (isinstance(per, bool) or int(per) < 1):
                problems.append(f"batch.{where}[{name!r}]: per_request must be >= 1 or the "
                                f"name of a shape parameter, got {per!r}")
    if not batch.inputs:
        problems.append("batch.inputs is empty: name the inputs that hold the requests (the "
                        "batch size is read from them)")
    if batch.size_param is not None and batch.size_param not in params:
        problems.append(f"batch.size_param {batch.size_param!r} is not a shape parameter of "
                        f"the op ({', '.join(params)})")
    return problems
