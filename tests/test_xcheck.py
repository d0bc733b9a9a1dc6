"""The quantizers users really run, with their libraries' own code on the CPU: each passes
numcheck when its convention is declared (its preset), fails when it is not, and joins its
scheme's family on fresh seeds; numcheck's FP4 quantization matches theirs bit for bit on
small magnitudes (tests/library_quantizers.py; the ``numcheck[xcheck]`` extra installs
torchao and compressed-tensors; without them these tests skip with the reason).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import numcheck
from numcheck.precision.quant_scheme import QUANT_PRESETS
from tests import library_quantizers as lib
from tests.quant_kernels import nvfp4_style, operand

ROOT = Path(__file__).resolve().parent.parent
#: Data a quantizer meets: plain, outliers, zero and tiny blocks, magnitudes under 1e-4.
KINDS = ("normal", "outliers", "zeros_and_tiny", "small")


def _needs(name: str) -> None:
    package = lib.LIBRARIES[name][1]
    if package and lib.missing(package):
        pytest.skip(lib.missing(package))


def _data(kind: str, rows: int, k: int, seed: int) -> torch.Tensor:
    if kind == "small":
        return torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)) * 1e-6
    return operand(kind, rows, k, seed)


def _input(name: str, x: torch.Tensor) -> torch.Tensor:
    """torchao's Float8Tensor is the bf16 path; it has no amax floor, so its zero rows would be
    NaN (the operand check flags that, rightly): it gets bf16 data without them."""
    if name != "torchao_float8_row":
        return x
    x = x.clone()
    x[x.abs().amax(1) == 0] = 1.0
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("name", list(lib.LIBRARIES))
def test_each_library_quantizer_follows_its_preset(name: str) -> None:
    _needs(name)
    quantizer, _, _ = lib.LIBRARIES[name]
    scheme = lib.preset(name)
    for i, kind in enumerate(KINDS):
        for shape in ((3, 64), (130, 384)):
            x = _input(name, _data(kind, *shape, seed=10 + i))
            v = numcheck.fp8.validate(quantizer(x, scheme), scheme, x)
            assert v.ok, (kind, shape, v.describe())


# -- the three conventions: declared they pass, undeclared they fail, named -------------------


def test_torchao_float8_bf16_scales_fail_undeclared_and_pass_declared() -> None:
    _needs("torchao_float8_row")
    x = torch.randn(256, 512, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    declared = QUANT_PRESETS["torchao.float8_row_bf16"]
    assert numcheck.fp8.validate(lib.torchao_float8_row(x, declared), declared, x).ok
    row = numcheck.fp8.FP8_ROW
    v = numcheck.fp8.validate(lib.torchao_float8_row(x, row), row, x)
    (f,) = v.findings
    assert f.kind == "scale_value" and f.count > 128  # most rows: bf16 is 0.4% coarse
    assert "scales computed in bf16" in f.hint and "scale_dtype='bf16'" in f.hint
    # The convention is checked exactly: scales divided in fp16 are not bf16's.
    fp16 = replace(declared, scale_dtype="fp16")
    assert not numcheck.fp8.validate(lib.torchao_float8_row(x, fp16), fp16, x).ok


def _outlier_and_zero_blocks(seed: int) -> torch.Tensor:
    """An outlier of 3e4 (every other block far below the tensor's amax) and zero blocks."""
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(seed))
    x[0, 0] = 3e4
    x[5] = 0
    x[9, 32:64] = 0
    return x


@pytest.mark.parametrize("name", ["torchao_nvfp4", "compressed_tensors_nvfp4"])
def test_nvfp4_clamp_and_zero_substitute_fail_undeclared_and_pass_declared(name: str) -> None:
    _needs(name)
    quantizer = lib.LIBRARIES[name][0]
    x = _outlier_and_zero_blocks(2)
    declared = lib.preset(name)
    assert numcheck.fp8.validate(quantizer(x, declared), declared, x).ok
    v = numcheck.fp8.validate(quantizer(x, numcheck.fp8.NVFP4), numcheck.fp8.NVFP4, x)
    assert v.kinds() == ("scale_value",), v.describe()
    hint = v.findings[0].hint
    assert "scale pointer" not in hint
    if name == "torchao_nvfp4":  # blocks whose rule gives a scale, and less than 2^-6
        assert "clamped from below at 0.015625" in hint and "block_scale_min=0.015625" in hint
    else:  # only blocks whose rule gives 0 (zero, or under e4m3's smallest) hold 0.125
        assert "zero-block substitute (declare zero_scale=0.125" in hint
    # Declaring the other library's convention is not enough: each is checked exactly.
    other = QUANT_PRESETS["compressed_tensors.nvfp4" if name == "torchao_nvfp4"
                          else "torchao.nvfp4"]
    assert not numcheck.fp8.validate(quantizer(x, other), other, x).ok


def test_a_quantizer_without_a_floor_is_flagged_on_a_zero_block() -> None:
    """torchao's blockwise inference quantizers have no floor: an all-zero group gets scale 0
    and NaN elements. Written as they compute it (their kernels are Triton, CUDA only)."""
    x = operand("normal", 4, 256, seed=3)
    x[1, :128] = 0
    s = x.reshape(4, 2, 128).abs().amax(-1) / 448
    values = (x.reshape(4, 2, 128) / s[..., None]).reshape(4, 256).to(torch.float8_e4m3fn)
    v = numcheck.fp8.validate(numcheck.fp8.as_quantized(values, s, numcheck.fp8.DEEPSEEK_ACT),
                          numcheck.fp8.DEEPSEEK_ACT, x)
    assert {"nonfinite", "scale_format"} <= set(v.kinds())


# -- small magnitudes: bit for bit with torchao and TE's recipe -------------------------------


def _e2m1_tie(t: torch.Tensor) -> torch.Tensor:
    """Scaled values within 2^-20 (relative) of a midpoint between two e2m1 values: where two
    honest float32 orders of the same recipe may round apart."""
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    a = t.abs().unsqueeze(-1)
    return ((a - mids).abs() <= mids * 2.0**-20).any(-1)


@pytest.mark.parametrize("sd", [1e-6, 1e-5])
def test_fp4_on_small_magnitudes_matches_torchao_and_te_bit_for_bit(sd: float) -> None:
    if lib.missing("torchao"):
        pytest.skip(lib.missing("torchao"))
    for seed in range(3):
        x = torch.randn(128, 1024, generator=torch.Generator().manual_seed(seed)) * sd
        ours = numcheck.fp8.quantize(x, numcheck.fp8.MXFP4)
        theirs = lib.torchao_mx(x, numcheck.fp8.MXFP4)
        assert torch.equal(ours.values, theirs.values) and torch.equal(ours.scales,
                                                                      theirs.scales)
        err = float((numcheck.fp8.dequantize(ours) - x.double()).norm() / x.double().norm())
        assert 0.08 < err < 0.13  # FP4's own error; a floor of 1e-4 would flush to ~1.0
        for scheme in (numcheck.fp8.NVFP4, QUANT_PRESETS["torchao.nvfp4"]):
            ours = numcheck.fp8.quantize(x, scheme)
            theirs = lib.torchao_nvfp4(x, scheme)
            assert torch.equal(ours.values, theirs.values)
            assert torch.equal(ours.scales, theirs.scales)
            assert ours.global_scale == theirs.global_scale
        # TE's recipe: the same scales; its elements x * (1 / (d * g)) against numcheck's
        # x * (s_enc / d) part only at ties of e2m1 rounding.
        ours = numcheck.fp8.quantize(x, numcheck.fp8.NVFP4)
        te = nvfp4_style(x, numcheck.fp8.NVFP4, x)
        assert torch.equal(ours.scales, te.scales)
        apart = ours.values != te.values
        t = (x.double() / ours.element_scales()).float()  # each element over its scale
        assert bool(_e2m1_tie(t[apart]).all()), int(apart.sum())
        assert int(apart.sum()) <= 4  # of 131,072: ties are rare


# -- in the family: library quantizers as honest variants on fresh seeds -----------------------


def _library_variant(name: str, quant: numcheck.fp8.GemmQuant) -> numcheck.Variant:
    """A linear variant quantizing W once and x per call with library quantizer ``name``,
    multiplying by numcheck's emulation of the declared sums, recording what it multiplied."""
    library = lib.LIBRARIES[name][0]

    def quantizer(x: torch.Tensor, scheme: numcheck.fp8.OperandScheme) -> numcheck.fp8.Quantized:
        # The op's x and W are bf16. compressed-tensors computes its scales in the tensor's
        # dtype (on bf16, in bf16: a convention no preset declares), so it is handed a float32
        # copy, as a user's glue may; torchao's Float8Tensor takes the bf16 tensor (its preset).
        return library(x.float() if name.startswith("compressed") else x, scheme)

    def prepare(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
        q = quantizer(inputs["w"], quant.b)
        g = q.global_scale if q.global_scale is not None else torch.tensor(float("nan"))
        return {"w_q": q.values, "w_s": q.scales, "w_g": g}

    def fn(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
        qa = quantizer(inputs["x"], quant.a)
        g = inputs["w_g"]
        qb = numcheck.fp8.Quantized(inputs["w_q"], inputs["w_s"], quant.b,
                                None if bool(torch.isnan(g)) else g)
        y = numcheck.fp8.emulated_gemm(qa, qb, quant.accumulation, quant.out)
        numcheck.fp8.record_gemm(qa, qb, y)
        return {"y": y.to(torch.bfloat16)}

    return numcheck.Variant(f"lib_{name}", fn, quant.precision, doc=name, prepare=prepare,
                            quant=quant)


#: Each library quantizer in the family of a shipped variant of tiny-k384 (the budget it is
#: held to).
FAMILY = {"torchao_float8_row": "fp8_row", "torchao_mxfp4": "mxfp4_emu",
          "torchao_nvfp4": "nvfp4_emu", "compressed_tensors_nvfp4": "nvfp4_emu", "te_nvfp4": "nvfp4_emu",
          "compressed_tensors_fp8_channel": "fp8_row"}


@pytest.mark.parametrize("name", list(FAMILY))
def test_library_quantizers_pass_the_gate_in_their_family_on_fresh_seeds(name: str) -> None:
    _needs(name)
    from numcheck.check import run_check
    from numcheck.check.make_golden import fresh_golden
    from numcheck.ops import registry
    from numcheck.selftest import held_to
    from tests.shipped import shipped_cases

    head = FAMILY[name]
    case = next(c for c in shipped_cases() if c.id == "tiny-k384")
    with registry.isolated():
        op = registry.get_op("linear")
        shipped = op.variants[head].quant
        scheme = lib.preset(name)
        quant = replace(shipped, a=scheme, b=scheme)
        registry.add_variant("linear", _library_variant(name, quant))
        op = registry.get_op("linear")
        for seed in (9101, 9102):
            one = replace(case, seeds=(seed,))
            golden, inputs = fresh_golden(op, one, "cpu")
            result = run_check(op, held_to(one, f"lib_{name}", head), f"lib_{name}", "cpu",
                               inputs, golden)
            assert result.violations == [], [v.describe() for v in result.violations]
            (sr,) = result.seeds
            assert sr.quant is not None and sr.quant.operands == "recorded"
            assert sr.quant.n_findings == 0
