"""numcheck.ops.fp8_gemm.torchao_block on the CPU, with a stand-in for torchao's
``blockwise_quantization`` (its kernels are Triton, CUDA only): what the wrapper hands torchao
(the operands in their own dtype, K and N padded to whole blocks) and what it records."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from numcheck.ops.fp8_gemm import torchao_block
from numcheck.precision.quant_scheme import DEEPSEEK_ACT, DEEPSEEK_WEIGHT
from numcheck.precision.quant_validate import validate
from numcheck.precision.quantize import quantize


@pytest.fixture
def fake_torchao(monkeypatch: pytest.MonkeyPatch) -> list[torch.dtype]:
    """torchao's three entry points as torchao computes them (fp32 scales amax / 448 of the
    float32 reading of each block), on the CPU; returns the dtypes its quantizers were given."""
    seen: list[torch.dtype] = []

    def act_quant(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert x.is_contiguous() and x.shape[-1] % block == 0  # torchao's own assertions
        seen.append(x.dtype)
        q = quantize(x.to(torch.float32), DEEPSEEK_ACT)
        return q.values.to(torch.float8_e4m3fn), q.scales.to(torch.float32)

    def weight_quant(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert w.is_contiguous() and w.shape[0] % block == 0 and w.shape[1] % block == 0
        seen.append(w.dtype)
        q = quantize(w.to(torch.float32), DEEPSEEK_WEIGHT)
        return q.values.to(torch.float8_e4m3fn), q.scales.to(torch.float32)

    def gemm(xq: torch.Tensor, xs: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor,
             block: int) -> torch.Tensor:
        a = xq.to(torch.float32) * xs.repeat_interleave(block, 1)
        b = wq.to(torch.float32) * ws.repeat_interleave(block, 0).repeat_interleave(block, 1)
        return (a @ b.T).to(torch.bfloat16)

    module = types.ModuleType("torchao.kernel.blockwise_quantization")
    module.fp8_blockwise_act_quant = act_quant  # type: ignore[attr-defined]
    module.fp8_blockwise_weight_quant = weight_quant  # type: ignore[attr-defined]
    module.blockwise_fp8_gemm = gemm  # type: ignore[attr-defined]
    kernel = types.ModuleType("torchao.kernel")
    kernel.blockwise_quantization = module  # type: ignore[attr-defined]
    root = types.ModuleType("torchao")
    root.kernel = kernel  # type: ignore[attr-defined]
    for name, mod in (("torchao", root), ("torchao.kernel", kernel),
                      ("torchao.kernel.blockwise_quantization", module)):
        monkeypatch.setitem(sys.modules, name, mod)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_operands_are_quantized_in_their_own_dtype(fake_torchao: list[torch.dtype],
                                                   dtype: torch.dtype) -> None:
    """An fp32 weight (mHC's hc_fn, 24 rows: padded to a block) is quantized as it is: a bf16
    copy first would move its scales off its blocks' amax, an operand finding on an honest
    kernel (found on the H200 on 2026-12-04)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 256, generator=g).to(torch.bfloat16)
    w = (torch.randn(24, 256, generator=g) / 16).to(dtype)
    y, qa, qb = torchao_block(x, w, record=False)
    assert fake_torchao == [torch.bfloat16, dtype]
    assert y.shape == (5, 24) and y.dtype == torch.bfloat16
    assert qa.values.shape == (5, 256) and qb.values.shape == (24, 256)
    assert validate(qa, DEEPSEEK_ACT, x).findings == ()
    assert validate(qb, DEEPSEEK_WEIGHT, w).findings == ()
    ref = x.to(torch.float32) @ w.to(torch.float32).T
    assert torch.linalg.norm(y.float() - ref) / torch.linalg.norm(ref) < 0.1


def test_a_bf16_copy_of_an_fp32_weight_is_what_the_operand_check_flags() -> None:
    """The other side of the test above: the scheme's quantization of a bf16 copy fails
    validation against the fp32 tensor it stands for, so that check can fail."""
    w = torch.randn(24, 256, generator=torch.Generator().manual_seed(4)) / 16
    q = quantize(w.to(torch.bfloat16), DEEPSEEK_WEIGHT)
    kinds = {f.kind for f in validate(q, DEEPSEEK_WEIGHT, w).findings}
    assert "scale_value" in kinds
