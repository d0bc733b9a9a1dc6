"""Precision classes: unit roundoff, and a user's fp16 / fp8 variant gated by the default budgets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import numcheck
from numcheck.cases import load_case_file
from numcheck.check.against_golden import run_numerics
from numcheck.check.result import CheckResult
from numcheck.numerics.budgets import DEFAULT_BUDGETS
from numcheck.ops import mhc
from numcheck.ops.registry import PRECISIONS, Inputs, Outputs, Params, Variant, get_op
from numcheck.precision import (
    DTYPE_NAMES,
    PRECISION_CLASSES,
    UNIT_ROUNDOFF,
    coarser,
    rounding_unit,
    unit_roundoff,
)
from numcheck.selftest import fresh_golden

#: Classes without a torch dtype of their own: their values live in float32.
IN_FLOAT32 = ("tf32", "e2m1")


@pytest.mark.parametrize("precision", [p for p in PRECISION_CLASSES if p not in IN_FLOAT32])
def test_unit_roundoff_is_half_the_dtype_epsilon(precision: str) -> None:
    dtype = getattr(torch, DTYPE_NAMES[precision])
    assert UNIT_ROUNDOFF[precision] == torch.finfo(dtype).eps / 2


def test_fp4_is_one_class_coarser_than_fp8_held_in_float32() -> None:
    assert UNIT_ROUNDOFF["e2m1"] == 2.0**-2
    assert DTYPE_NAMES["e2m1"] == "float32" and PRECISION_CLASSES["e2m1"].tensor_core
    assert coarser("e2m1", "e5m2") == "e2m1" and coarser("e4m3", "e2m1") == "e2m1"


def test_tf32_rounds_like_fp16_and_every_class_has_defaults() -> None:
    assert UNIT_ROUNDOFF["tf32"] == UNIT_ROUNDOFF["fp16"] == 2.0**-11
    assert set(PRECISIONS) == set(PRECISION_CLASSES) == set(DEFAULT_BUDGETS)
    assert coarser("fp16", "bf16") == "bf16" and coarser("e5m2", "e4m3") == "e5m2"
    with pytest.raises(ValueError, match="unknown precision class 'fp8'.*e4m3, e5m2"):
        unit_roundoff("fp8")


def test_rounding_unit_takes_the_coarser_of_precision_and_output_dtype() -> None:
    assert rounding_unit("tf32", torch.float32) == 2.0**-11
    assert rounding_unit("fp32", torch.bfloat16) == 2.0**-8  # mHC's y is stored in bf16
    assert rounding_unit("e4m3", torch.float32) == 2.0**-4


# -- a user's fp16 and fp8 variants of mHC, registered through the public API ---------------


def mhc_fp16(inputs: Inputs, p: Params) -> Outputs:
    """The projection GEMM in fp16 (operands and output), RMS statistics in fp32."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    mm = x.to(torch.float16) @ inputs["hc_fn"].to(torch.float16).T
    return mhc._epilogue(mm.float() * mhc._rms_inv(xf, p["eps"]), xf, inputs, p)


def _e4m3_rows(w: torch.Tensor) -> torch.Tensor:
    """hc_fn quantized to e4m3 with one fp32 scale per row, dequantized (what an fp8 GEMM
    with per-row weight scales computes with)."""
    scale = w.abs().amax(dim=1, keepdim=True) / 448
    return (w / scale).to(torch.float8_e4m3fn).float() * scale


def mhc_e4m3(inputs: Inputs, p: Params) -> Outputs:
    """hc_fn in e4m3 with per-row scales, x exact, fp32 accumulation."""
    xf = inputs["x"].flatten(1).float()
    m = (xf @ _e4m3_rows(inputs["hc_fn"]).T) * mhc._rms_inv(xf, p["eps"])
    return mhc._epilogue(m, xf, inputs, p)


def mhc_e4m3_scale_dropped(inputs: Inputs, p: Params) -> Outputs:
    """A bug: the per-row weight scale of the e4m3 path is never applied."""
    xf = inputs["x"].flatten(1).float()
    w = inputs["hc_fn"]
    scale = w.abs().amax(dim=1, keepdim=True) / 448
    q = (w / scale).to(torch.float8_e4m3fn).float()
    return mhc._epilogue((xf @ q.T) * mhc._rms_inv(xf, p["eps"]), xf, inputs, p)


CASE = """
[tiny]
op = "mhc_pre"
preset = "v4flash"
shape = {{ tokens = 8, hidden = 512 }}
seeds = [0]
variants = [{variants}]
"""


def _run(tmp_path: Path, variant: str) -> CheckResult:
    path = tmp_path / "mhc.toml"
    path.write_text(CASE.format(variants=f'"{variant}"'))
    (case,) = load_case_file(path)
    op = get_op("mhc_pre")
    golden, inputs = fresh_golden(op, case)
    return run_numerics(op, case, variant, "cpu", golden, inputs)


@pytest.mark.parametrize(("name", "fn", "precision"), [
    ("mine_fp16", mhc_fp16, "fp16"), ("mine_e4m3", mhc_e4m3, "e4m3"),
])
def test_a_users_fp16_or_fp8_variant_passes_on_its_class_defaults(
    tmp_path: Path, name: str, fn: object, precision: str
) -> None:
    numcheck.add_variant("mhc_pre", Variant(name, fn, precision))  # type: ignore[arg-type]
    result = _run(tmp_path, name)
    assert result.passed, [v.describe() for v in result.violations]
    budget = result.case.budgets[name].outputs["mixes"]
    assert budget.limits["rel_fro"] == DEFAULT_BUDGETS[precision]["rel_fro"]
    mixes = result.seeds[0].metrics["mixes"]
    if precision == "fp16":
        # The op declares its GEMM site, so fp16 has a rounding envelope without any fp16
        # variant of the op: the fp16 GEMMs of numcheck.honest.gemm_impls on the same inputs. The
        # user's fp16 GEMM writes fp16 like the envelope's one-pass member.
        assert mixes.measured("max_err_ratio") and 0 < mixes.max_err_ratio <= 1.0
    else:  # the scaled fp8 classes have no honest GEMMs to derive (they need the scales)
        assert not mixes.measured("max_err_ratio")


def test_an_fp8_variant_that_drops_its_scale_fails_the_e4m3_defaults(tmp_path: Path) -> None:
    numcheck.add_variant("mhc_pre", Variant("mine_bad", mhc_e4m3_scale_dropped, "e4m3"))
    result = _run(tmp_path, "mine_bad")
    assert not result.passed
    assert any(v.key == "mixes.rel_fro" for v in result.violations)


def test_fp16_defaults_are_tighter_than_what_bf16_rounding_does(tmp_path: Path) -> None:
    """The fp16 row is not bf16's: a bf16 GEMM registered as fp16 fails it."""
    numcheck.add_variant("mhc_pre", Variant("bf16_as_fp16", mhc.bf16, "fp16"))
    result = _run(tmp_path, "bf16_as_fp16")
    assert not result.passed


def mhc_tf32_y_one_step_off(inputs: Inputs, p: Params) -> Outputs:
    """The TF32 path with the largest |y| one bf16 step off: what a kernel that rounds y on
    the other side of a rounding boundary gives (on the CPU, TF32 is IEEE fp32)."""
    out = mhc.tf32(inputs, p)
    y = out["y"].clone()
    i = int(y.float().abs().argmax())
    flat = y.view(-1)
    flat[i] = (flat[i].view(torch.int16) + 1).view(torch.bfloat16)  # one bf16 step further from 0
    return {**out, "y": y}


def test_a_coarse_output_is_measured_against_the_coarse_class_envelope(tmp_path: Path) -> None:
    """y is bf16 for every variant. A TF32 variant's y one bf16 step off the golden is
    ordinary storage rounding; against its own class's reference (exact on the CPU) its
    ratio would be tens, against the bf16 envelope it is about 1."""
    numcheck.add_variant("mhc_pre", Variant("mine_tf32", mhc_tf32_y_one_step_off, "tf32"))
    result = _run(tmp_path, "mine_tf32")
    assert result.passed, [v.describe() for v in result.violations]
    y, mixes = result.seeds[0].metrics["y"], result.seeds[0].metrics["mixes"]
    assert y.honest_max_abs > 0  # the bf16 envelope's worst y error, not the exact tf32 ref's
    assert 0 < y.max_err_ratio <= 2.0
    # mixes: against the TF32 envelope, TF32 emulated on the CPU (the shipped tf32 variant
    # computes IEEE fp32 there; the rounded and truncated members do not).
    assert mixes.honest_max_abs > 0
    # Measured against its own class's reference alone (exact on the CPU: no GEMM site to
    # derive the emulated members from), the same one step fails.
    op = replace(get_op("mhc_pre"), output_precision={}, gemm_site=None)
    golden, inputs = fresh_golden(op, result.case)
    alone = run_numerics(op, result.case, "mine_tf32", "cpu", golden, inputs)
    assert alone.seeds[0].metrics["y"].max_err_ratio > 5
    assert "y.max_err_ratio" in {v.key for v in alone.violations}
