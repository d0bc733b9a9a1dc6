"""Every variant keeps to its inputs' device: a tensor made on the CPU inside a variant breaks
it on CUDA only. The meta device shows it on a CPU-only machine: meta inputs mixed with a CPU
tensor raise, as CUDA inputs would."""

from __future__ import annotations

import functools

from pathlib import Path

import honest
import planted
import pytest

from numcheck.cases import load_cases
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op

ROOT = Path(__file__).resolve().parent.parent
#: Variants the meta device cannot run at all (they read values: data-dependent shapes,
#: .item(), a compiled kernel); the CUDA runs cover them (benchmarks/h200_run_d.sh).
NEEDS_DATA = {"fused", "far_flips", "near_flips", "nan_one_row", "inf_one_row",
              "one_element_8x", "raises"}


#: The cheapest shipped case of each op (its inputs are made once per session).
SMALL = {"indexer": "v4flash-b2-l1k-contiguous", "mhc_pre": "v4pro-t32"}


@functools.cache
def _inputs(op_name: str) -> tuple[dict, dict]:
    case = next(c for c in load_cases(ROOT / "cases") if c.op == op_name and c.id == SMALL[op_name])
    return dict(case.params), dict(get_op(op_name).make_inputs(case.params, 0))


def _variants() -> list[tuple[str, str]]:
    """Shipped, planted and honest variants by name (registered inside each test, in the
    isolated registry: collection must not add them for other tests)."""
    names = {op: [*get_op(op).variants, *planted.PLANTED.get(op, {}), *honest.HONEST.get(op, {})]
             for op in ("indexer", "mhc_pre")}
    return [(op, name) for op, found in names.items() for name in dict.fromkeys(found)
            if name not in NEEDS_DATA]


@pytest.mark.parametrize(("op_name", "variant"), _variants())
def test_variant_keeps_to_its_inputs_device(op_name: str, variant: str) -> None:
    planted.register_all()
    honest.register_all()
    op = get_op(op_name)
    params, cpu_inputs = _inputs(op_name)
    inputs = to_device(dict(cpu_inputs), "meta")
    outputs = op.variants[variant].fn(inputs, params)
    assert {str(t.device) for t in outputs.values()} == {"meta"}, variant


def _alternatives() -> list[tuple[str, str, str]]:
    return [(op.name, precision, label) for op in (get_op("indexer"), get_op("mhc_pre"))
            for precision, alternatives in op.rounding_alternatives.items()
            for label in alternatives]


@pytest.mark.parametrize(("op_name", "precision", "label"), _alternatives())
def test_rounding_alternative_keeps_to_its_inputs_device(
    op_name: str, precision: str, label: str
) -> None:
    """The rounding envelope runs in every bf16 check, on the check's device."""
    op = get_op(op_name)
    params, cpu_inputs = _inputs(op_name)
    outputs = op.rounding_alternatives[precision][label](to_device(dict(cpu_inputs), "meta"),
                                                        params)
    assert set(outputs) == set(op.outputs)
    assert {str(t.device) for t in outputs.values()} == {"meta"}, label
