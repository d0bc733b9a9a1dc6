"""A case's inputs are made once per (make_inputs, parameters, seed) in a process, and each
case still gets inputs of its own: what one variant writes into them no other case sees."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from numcheck.check import run
from numcheck.check.run import CaseInputs
from numcheck.goldens.files import input_fingerprint
from numcheck.ops.registry import get_op
from numcheck.ops.spec import Inputs, OpSpec, Params
from tests.shipped import shipped_cases

CASE = next(c for c in shipped_cases() if c.op == "mhc_pre" and c.inputs.file is None)


def counted(make: Callable[[Params, int], Inputs]) -> tuple[OpSpec, list[int]]:
    """The case's op with a ``make_inputs`` that counts its calls (a function of its own, so
    nothing made by another test is found for it)."""
    calls: list[int] = []

    def make_inputs(params: Params, seed: int) -> Inputs:
        calls.append(seed)
        return make(params, seed)

    return replace(get_op(CASE.op), make_inputs=make_inputs), calls


def test_a_seed_is_made_once_and_every_case_gets_a_copy_of_its_own() -> None:
    op, calls = counted(get_op(CASE.op).make_inputs)
    seed = CASE.seeds[0]
    first, fingerprint = CaseInputs(op, CASE).get(seed)
    second, again = CaseInputs(op, CASE).get(seed)
    assert calls == [seed]
    assert again == fingerprint == input_fingerprint(get_op(CASE.op).make_inputs(CASE.params, seed))
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name])
        assert tensor.data_ptr() != second[name].data_ptr()
        assert tensor.stride() == second[name].stride()
    # A variant that writes into its inputs spoils neither the next case's nor a fingerprint.
    for made in (first, second):
        for tensor in made.values():
            tensor.zero_()
    third, still = CaseInputs(op, CASE).get(seed)
    assert calls == [seed] and still == fingerprint
    assert input_fingerprint(third) == fingerprint


def test_another_seed_or_parameter_is_made_anew() -> None:
    op, calls = counted(get_op(CASE.op).make_inputs)
    CaseInputs(op, CASE).get(CASE.seeds[0])
    CaseInputs(op, CASE).get(CASE.seeds[0] + 1)
    other = replace(CASE, params={**CASE.params, "eps": CASE.params["eps"] * 2})
    CaseInputs(op, other).get(CASE.seeds[0])
    assert len(calls) == 3


@pytest.mark.parametrize("odd", [
    lambda t: t.t(),                             # a view: a copy would be contiguous
    lambda t: t[:, :-1],                         # a view of a larger storage
    lambda t: t[:1].expand_as(t),                # one row seen many times
    lambda t: t.clone().requires_grad_(),        # a copy would carry a graph
])
def test_inputs_a_copy_would_not_reproduce_are_made_every_time(
        odd: Callable[[torch.Tensor], torch.Tensor]) -> None:
    def make(params: Params, seed: int) -> Inputs:
        inputs = get_op(CASE.op).make_inputs(params, seed)
        name = next(n for n, t in inputs.items() if t.dim() == 2)
        return {**inputs, name: odd(inputs[name])}

    op, calls = counted(make)
    for _ in range(2):
        CaseInputs(op, CASE).get(CASE.seeds[0])
    assert len(calls) == 2


def test_two_inputs_on_one_storage_are_made_every_time() -> None:
    def make(params: Params, seed: int) -> Inputs:
        inputs = get_op(CASE.op).make_inputs(params, seed)
        name = next(iter(inputs))
        return {**inputs, "alias": inputs[name]}

    op, calls = counted(make)
    for _ in range(2):
        CaseInputs(op, CASE).get(CASE.seeds[0])
    assert len(calls) == 2


def test_what_is_kept_stays_under_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    op, calls = counted(get_op(CASE.op).make_inputs)
    size = sum(t.nbytes for t in op.make_inputs(CASE.params, 0).values())
    calls.clear()
    monkeypatch.setattr(run, "_RECENT", {})
    monkeypatch.setattr(run, "_RECENT_BYTES", 2 * size)
    for seed in (0, 1, 2, 0):  # seed 0 was the oldest of three: gone when seed 2 came
        CaseInputs(op, CASE).get(seed)
    assert calls == [0, 1, 2, 0]
    assert sum(kept[2] for kept in run._RECENT.values()) <= 2 * size
    CaseInputs(op, CASE).get(2)  # the most recent two are kept
    assert calls == [0, 1, 2, 0]
    monkeypatch.setattr(run, "_RECENT_BYTES", size - 1)  # too large to keep at all
    CaseInputs(op, CASE).get(5)
    CaseInputs(op, CASE).get(5)
    assert calls == [0, 1, 2, 0, 5, 5]
