"""The second reference of a low-precision check (numcheck.check.against_sim): the op
recomputed on the variant's own operands, the GEMM bound, the operands against the scheme."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import numcheck
from numcheck.check.against_sim import simulate, take_rows
from numcheck.fp8 import DEEPSEEK_ACT, DEEPSEEK_WEIGHT, PROMOTED_128, AsStored, GemmQuant
from numcheck.ops.fp8_variants import INDEXER_FP8
from numcheck.ops.linear import QUANTS
from numcheck.ops.registry import get_op
from numcheck.precision.quant_record import RecordedGemm, recording
from numcheck.prepare import with_preparation

SMALL = {"tokens": 8, "in_features": 384, "out_features": 256}


def _linear(variant: str, seed: int = 0) -> tuple[dict, dict, list[RecordedGemm]]:
    op = get_op("linear")
    p = op.resolve_params(None, SMALL)
    inputs = op.make_inputs(p, seed)
    with recording() as rec:
        out = with_preparation(op.variants[variant])(inputs, p)
    return inputs, out, rec.calls


@pytest.mark.parametrize("variant", ["fp8_block", "fp8_row_fast", "nvfp4_emu"])
def test_an_honest_variant_stays_within_its_bound_and_near_its_simulated_reference(
        variant: str) -> None:
    op = get_op("linear")
    inputs, out, calls = _linear(variant)
    sim = simulate(op, QUANTS[variant], inputs, op.resolve_params(None, SMALL), calls, seed=0)
    assert (sim.operands, sim.calls, sim.recorded, sim.n_findings) == ("recorded", 1, 1, 0)
    assert sim.sim_ratio is not None and 0 < sim.sim_ratio <= 1 and sim.violations == []
    assert sim.sim_ratio_at.startswith("GEMM 0, element (")
    # The quantization error is gone: the variant sits far closer to the simulated
    # reference than to the golden.
    golden = op.variants["fp32"].fn(inputs, op.resolve_params(None, SMALL))["y"].double()
    y, s = out["y"].double(), sim.outputs["y"].double()
    assert (y - s).norm() < 0.1 * (y - golden).norm()


def test_a_kernel_that_reads_the_wrong_scales_lands_far_past_the_bound() -> None:
    op = get_op("linear")
    p = op.resolve_params(None, SMALL)
    inputs, _, calls = _linear("fp8_block")
    (call,) = calls
    qa, qb = call.a[0], call.b[0]
    shifted = replace(qb, scales=torch.cat([qb.scales[:, 1:], qb.scales[:, -1:]], 1))
    bad_y = numcheck.fp8.emulated_gemm(qa, shifted, PROMOTED_128, torch.bfloat16)
    sim = simulate(op, QUANTS["fp8_block"], inputs, p, [RecordedGemm((qa,), (qb,), bad_y)],
                   seed=3)
    (v,) = sim.violations
    assert (v.key, v.limit, v.seed) == ("quant.sim_ratio", 1.0, 3) and v.value > 50
    assert "past the bound an honest kernel of promoted128 sums" in v.detail


def test_operands_that_do_not_follow_the_scheme_are_findings() -> None:
    op = get_op("linear")
    p = op.resolve_params(None, SMALL)
    inputs, _, calls = _linear("fp8_block")
    (call,) = calls
    qb = call.b[0]
    stale = replace(qb, scales=qb.scales * 2)  # a scale made from another weight
    sim = simulate(op, QUANTS["fp8_block"], inputs, p,
                   [RecordedGemm(call.a, (stale,), call.y)])
    found = [v for v in sim.violations if v.key == "quant.operands"]
    assert len(found) == 1 and sim.n_findings >= 1
    assert "operand b (e4m3fn/128x128/fp32): scale_value" in sim.findings[0]


def test_without_a_recording_numchecks_quantization_stands_in_and_nothing_is_bounded() -> None:
    op = get_op("linear")
    p = op.resolve_params(None, SMALL)
    inputs = op.make_inputs(p, 0)
    sim = simulate(op, QUANTS["fp8_block"], inputs, p, [])
    assert (sim.operands, sim.recorded, sim.sim_ratio, sim.violations) == ("numcheck", 0, None,
                                                                          [])
    qa = numcheck.fp8.quantize(inputs["x"], DEEPSEEK_ACT)
    qb = numcheck.fp8.quantize(inputs["w"], DEEPSEEK_WEIGHT)
    exact = (numcheck.fp8.dequantize(qa) @ numcheck.fp8.dequantize(qb).T).float().to(torch.bfloat16)
    assert torch.equal(sim.outputs["y"], exact)


def test_a_recording_of_other_gemms_than_the_op_makes_is_a_violation() -> None:
    op = get_op("linear")
    p = op.resolve_params(None, SMALL)
    inputs, _, calls = _linear("fp8_block")
    sim = simulate(op, QUANTS["fp8_block"], inputs, p, calls * 2)
    assert "quant.recorded" in {v.key for v in sim.violations}


def test_a_stored_operand_must_be_the_ops_own() -> None:
    op = get_op("indexer")
    p = op.resolve_params("v4flash", {"batch": 2, "max_context": 256, "heads": 8})
    inputs = op.make_inputs(p, 0)
    with recording() as rec:
        op.variants["fp8"].fn(inputs, p)
    (call,) = rec.calls
    assert simulate(op, INDEXER_FP8, inputs, p, rec.calls).violations == []
    # Keys multiplied after a round trip through bf16 scaled by 3: not the stored elements.
    other = replace(call.b[0], values=(call.b[0].values * 3).bfloat16().float())
    sim = simulate(op, INDEXER_FP8, inputs, p,
                   [RecordedGemm(call.a, (other, *call.b[1:]), call.y)])
    assert any("differ from the op's own" in f for f in sim.findings)


def test_take_rows_keeps_every_elements_scale() -> None:
    q = numcheck.fp8.quantize(torch.randn(300, 256), DEEPSEEK_WEIGHT)
    rows = torch.tensor([0, 127, 128, 299])
    part = take_rows(q, rows)
    assert torch.equal(numcheck.fp8.dequantize(part), numcheck.fp8.dequantize(q)[rows])
    declared = GemmQuant(AsStored(), AsStored())
    assert declared.schemes[1].scale_shape((5, 7)) == (1, 1)
