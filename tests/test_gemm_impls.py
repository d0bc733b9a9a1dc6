"""The honest GEMM implementations per precision class: what each computes, the table, the
Triton kernel (under Triton's interpreter here), and the one-element facts on a real GPU."""

from __future__ import annotations

import pytest
import torch

from numcheck.honest.gemm_impls import (
    K_BLOCK,
    EmulatedGemm,
    GemmImpl,
    Recipe,
    canonical_operand,
    gemms_for,
    honest_gemms,
)
from numcheck.ops.splitk import split_k_matmul
from numcheck.precision import matmul_precision
from numcheck.precision.operand_rounding import to_bf16_values, to_tf32

A = 1 + 0.75 * 2.0**-10  # the element of the H200 measurement


def _one_element() -> tuple[torch.Tensor, torch.Tensor]:
    """A 16x16 GEMM whose [0, 0] result is A * 1.0 (the rest zero)."""
    a = torch.zeros(16, 16)
    a[0, 0] = A
    b = torch.eye(16)
    return a, b


def _impl(label: str) -> GemmImpl:
    return next(g for g in honest_gemms() if g.label == label)


def test_one_element_through_each_tf32_emulation() -> None:
    a, b = _one_element()
    assert _impl("tf32_rn").fn(a, b)[0, 0].item() == 1 + 2.0**-10   # cuBLAS's reading
    assert _impl("tf32_trunc").fn(a, b)[0, 0].item() == 1.0         # Triton's reading
    assert _impl("fp32").fn(a, b)[0, 0].item() == 1.000732421875    # exact


def test_each_class_has_every_kind_users_run() -> None:
    labels = {p: {g.label for g in gemms_for(p)} for p in ("fp32", "tf32", "bf16", "fp16")}
    assert {"tf32_rn", "tf32_trunc", "tf32_rn_kblocks", "tf32_trunc_kblocks", "tf32_rn_split4",
            "tf32_trunc_split4", "cublas_tf32", "triton_tf32"} <= labels["tf32"]
    assert {"bf16_out", "bf16_fp32out", "bf16_out_kblocks", "bf16_fp32out_kblocks",
            "bf16_out_split2", "bf16_out_split4_tree", "bf16_fp32out_split4", "cublas_bf16",
            "cublas_bf16_fp32out", "triton_bf16"} <= labels["bf16"]
    assert {"fp32", "fp32_kblocks", "fp32_split4", "triton_fp32"} <= labels["fp32"]
    assert {"fp16_out", "fp16_fp32out"} <= labels["fp16"]
    assert gemms_for("e4m3") == []  # scaled fp8 GEMMs need scales the table cannot know
    envelope = {p: {g.label for g in gemms_for(p) if g.envelope} for p in labels}
    assert envelope["tf32"] == {"tf32_rn", "tf32_trunc"}
    assert envelope["bf16"] == {"bf16_out", "bf16_out_split2", "bf16_out_split4_tree"}
    assert envelope["fp32"] == set()


def test_the_real_ones_are_cuda_only_and_triton_says_why_not_here() -> None:
    for label in ("cublas_tf32", "cublas_bf16", "cublas_bf16_fp32out"):
        assert _impl(label).devices == ("cuda",) and _impl(label).recipe is None
    triton = _impl("triton_tf32")
    if torch.cuda.is_available():
        assert triton.devices == ("cuda",) or triton.unavailable.startswith("triton not")
    else:  # no GPU: the member has nowhere to run, and says why (the skip reason)
        assert triton.devices == () and triton.unavailable


def test_emulated_gemms_compute_what_their_recipe_says() -> None:
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(2, 8, 200, generator=gen)
    b = torch.randn(2, 200, 5, generator=gen)
    with matmul_precision(tf32=False):
        ra, rb = to_tf32(a, "trunc"), to_tf32(b, "trunc")
        assert torch.equal(_impl("tf32_trunc").fn(a, b), ra @ rb)
        blocks = ra[..., :K_BLOCK] @ rb[..., :K_BLOCK, :]
        for k in range(K_BLOCK, 200, K_BLOCK):
            blocks = blocks + ra[..., k:k + K_BLOCK] @ rb[..., k:k + K_BLOCK, :]
        assert torch.equal(_impl("tf32_trunc_kblocks").fn(a, b), blocks)
        ba, bb = to_bf16_values(a), to_bf16_values(b)
        out = _impl("bf16_out").fn(a, b)
        assert torch.equal(out, (ba @ bb).to(torch.bfloat16).float())  # written in bf16
        split = split_k_matmul(ba, bb, 2, tree=False, partial=to_bf16_values)
        assert torch.equal(_impl("bf16_out_split2").fn(a, b), split)
        assert torch.equal(_impl("bf16_fp32out").fn(a, b), ba @ bb)  # fp32 kept
    # The coarser the operands, the larger the error.
    exact = a.double() @ b.double()
    err = {label: float((_impl(label).fn(a, b).double() - exact).abs().max())
           for label in ("fp32", "tf32_rn", "bf16_fp32out")}
    assert err["fp32"] < err["tf32_rn"] < err["bf16_fp32out"]


def test_operands_are_read_as_fresh_contiguous_fp32() -> None:
    """Two members whose rounding leaves the same values hand the GEMM the same layout:
    what lets numcheck.honest.gemm_family run such members once."""
    x = torch.randn(4, 6).to(torch.bfloat16).T
    c = canonical_operand(x)
    assert c.dtype == torch.float32 and c.is_contiguous() and c.data_ptr() != x.data_ptr()
    assert torch.equal(c, x.float())
    g = EmulatedGemm(Recipe("fp32"))
    assert g.operand(c).data_ptr() != c.data_ptr()


def test_a_recipe_names_known_formats_and_accumulations() -> None:
    with pytest.raises(ValueError, match="unknown format 'bf8'"):
        Recipe("bf8")
    with pytest.raises(ValueError, match="accumulation must be one of"):
        Recipe("fp32", "two_pass")


# -- the Triton kernel (its indexing, under the interpreter on a CPU) ------------------------


@pytest.mark.parametrize("mode", ["fp32", "tf32", "bf16"])
def test_the_triton_gemm_computes_the_product(mode: str) -> None:
    pytest.importorskip("triton", reason="triton not installed: pip install 'numcheck[fused]'")
    from numcheck.ops.triton_gemm import triton_matmul

    gen = torch.Generator().manual_seed(2)
    a = torch.randn(3, 70, 100, generator=gen)
    b = torch.randn(3, 24, 100, generator=gen).transpose(1, 2)  # a strided operand, N = 24
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = a.to(device), b.to(device)
    out = triton_matmul(a, b, mode)
    if mode == "bf16":
        a, b = a.to(torch.bfloat16).float(), b.to(torch.bfloat16).float()
    with matmul_precision(tf32=False):
        ref = a @ b
    tol = 5e-2 if mode == "tf32" and device == "cuda" else 1e-4
    assert out.shape == (3, 70, 24) and out.dtype == torch.float32
    assert float((out - ref).abs().max()) < tol
    two_d = triton_matmul(a[0], b[0], mode)
    assert torch.equal(two_d, out[0]) or float((two_d - out[0]).abs().max()) < tol
    with pytest.raises(ValueError, match="need \\[..., M, K\\] and \\[..., K, N\\]"):
        triton_matmul(a, b[:2], mode)


# -- on a real GPU: the two ways TF32 is read ------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs CUDA: the one-element facts are about cuBLAS and Triton "
                    "on a GPU's tensor cores (the CPU has no TF32)")
def test_cublas_rounds_and_triton_truncates_one_element_on_the_gpu() -> None:
    """An H200 (torch 2.11, triton 3.6): cuBLAS with allow_tf32 gives 1 + 2^-10 (operands
    rounded to nearest), Triton's tl.dot with its default input precision gives 1.0
    (truncated), input_precision='ieee' the exact 1.000732421875; the emulations agree."""
    a, b = (t.cuda() for t in _one_element())
    assert _impl("cublas_tf32").fn(a, b)[0, 0].item() == 1 + 2.0**-10
    assert _impl("tf32_rn").fn(a, b)[0, 0].item() == 1 + 2.0**-10
    pytest.importorskip("triton", reason="triton not installed: pip install 'numcheck[fused]'")
    from numcheck.ops.triton_gemm import triton_matmul

    assert triton_matmul(a, b, "tf32")[0, 0].item() == 1.0
    assert _impl("tf32_trunc").fn(a, b)[0, 0].item() == 1.0
    assert triton_matmul(a, b, "fp32")[0, 0].item() == 1.000732421875
