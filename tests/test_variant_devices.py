"""Every variant keeps to its inputs' device: a tensor made on the CPU inside a variant breaks
it on CUDA only. The meta device shows it on a CPU-only machine: meta inputs mixed with a CPU
tensor raise, as CUDA inputs would."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import torch

from numcheck.inputs import to_device
from numcheck.ops.registry import Variant, get_op
from numcheck.prepare import with_preparation
from tests import honest, planted
from tests.shipped import shipped_cases

#: Variants the meta device cannot run at all (they read values: data-dependent shapes,
#: .item(), a compiled kernel); the CUDA runs cover them (benchmarks/gpu_regression.py: the
#: gate, false-fail and catch steps).
NEEDS_DATA = {"fused", "far_flips", "near_flips", "nan_one_row", "inf_one_row",
              "one_element_8x", "raises", "gemm_triton_tf32", "gemm_triton_bf16",
              "gemm_triton_fp32", "y_seed_dependent",
              # FP8 / FP4 variants: numcheck's quantizer reads values (the exponents of its
              # scales are checked), so they run on CPU and CUDA only (the gate step).
              "fp8", "nvfp4_emu", "mxfp4_emu", "fp8_block", "fp8_block_ue8m0"}


#: The cheapest shipped case of each op (its inputs are made once per session).
SMALL = {"indexer": "v4flash-b2-l1k-contiguous", "mhc_pre": "v4pro-t32"}


@functools.cache
def _inputs(op_name: str) -> tuple[dict, dict]:
    case = next(c for c in shipped_cases() if c.op == op_name and c.id == SMALL[op_name])
    return dict(case.params), dict(get_op(op_name).make_inputs(case.params, 0))


def _variants() -> list[tuple[str, str]]:
    """Shipped, planted and honest variants by name (registered inside the test, in the
    isolated registry: collection must not add them for other tests)."""
    names = {op: [*get_op(op).variants, *planted.PLANTED.get(op, {}), *honest.HONEST.get(op, {})]
             for op in ("indexer", "mhc_pre")}
    return [(op, name) for op, found in names.items() for name in dict.fromkeys(found)
            if name not in NEEDS_DATA]


def _stray(fn: Callable[..., Mapping[str, torch.Tensor]], op_name: str) -> str | None:
    """How ``fn`` (a variant or a rounding alternative) leaves the meta device on the op's
    small case, or returns other outputs than the op's; None where it returns the op's
    outputs, every one on the meta device."""
    params, cpu_inputs = _inputs(op_name)
    try:
        outputs = fn(to_device(dict(cpu_inputs), "meta"), params)
    except (RuntimeError, NotImplementedError) as exc:  # a CPU tensor met a meta one
        return str(exc).splitlines()[0]
    if set(outputs) != set(get_op(op_name).outputs):
        return f"outputs {sorted(outputs)}, not the op's {sorted(get_op(op_name).outputs)}"
    devices = {str(t.device) for t in outputs.values()}
    return None if devices == {"meta"} else f"outputs on {sorted(devices)}"


def _makes_a_cpu_tensor(inputs: Mapping[str, torch.Tensor], params: Mapping[str, object]) -> dict:
    """A bad variant: the bf16 indexer plus a tensor made on the default device (the CPU)."""
    out = dict(get_op("indexer").variants["bf16"].fn(inputs, params))
    out["logits"] = out["logits"] + torch.zeros(out["logits"].shape[-1])
    return out


# One test, not one per variant: the meta device's first use imports torch._dynamo, sympy and
# triton (3 s of CPU), which one pytest-xdist worker then pays instead of every worker.
def test_every_variant_and_rounding_alternative_keeps_to_its_inputs_device() -> None:
    planted.register_all()
    honest.register_all()
    # A variant with a one-time preparation runs as the gate runs it: prepare, then call.
    checked = [(f"{op_name}::{name}", op_name, with_preparation(get_op(op_name).variants[name]))
               for op_name, name in _variants()]
    checked += [(f"{op.name}::{precision} alternative {label}", op.name, fn)
                for op in (get_op("indexer"), get_op("mhc_pre"))
                for precision, alternatives in op.rounding_alternatives.items()
                for label, fn in alternatives.items()]
    assert len(checked) > 40
    assert _stray(_makes_a_cpu_tensor, "indexer") is not None  # the check can fail
    assert "not the op's" in (_stray(lambda i, p: {"logits": torch.zeros(1, device="meta")},
                                    "indexer") or "")  # a missing output is one too
    # A preparation that makes its tensor on the default device is caught like a call.
    cpu_prepare = Variant("cpu_prepare", get_op("mhc_pre").variants["bf16"].fn, "bf16",
                          prepare=lambda i, p: {"hc_base": torch.zeros(i["hc_base"].shape)})
    assert _stray(with_preparation(cpu_prepare), "mhc_pre") is not None
    strays = [f"{who}: {why}" for who, op_name, fn in checked
              if (why := _stray(fn, op_name)) is not None]
    assert not strays, "\n".join(strays)

