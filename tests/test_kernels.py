"""Kernel audit: the classifier over real kernel names, and profiler-event parsing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from numcheck.overhead.kernels import (
    COPY,
    CUDA_CORE_GEMM,
    ELEMENTWISE,
    OTHER,
    REDUCTION,
    TENSOR_CORE_GEMM,
    KernelAudit,
    KernelRecord,
    audit_from_events,
    classify,
    profile_kernels,
)

# Real kernel names: seen on an H200 (the GEMMs of docs/ops.md), from public profiles,
# cuBLAS/CUTLASS heuristics logs and PyTorch's own kernels.
REAL_NAMES = {
    TENSOR_CORE_GEMM: [
        "nvjet_sm90_tst_128x64_64x4_1x2_h_bz_coopA_NNT",  # bf16 on H200
        "nvjet_sm100_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
        "nvjet_sm120_tst_mma_64x64x128_3_32x32x128_tmaAB_alignCD4_bz_TNNN",
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas"),  # TF32 on H100/H200
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x1x2_tensor16x8x8",
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas"),
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",
        "ampere_fp16_s16816gemm_fp16_128x64_ldg8_f2f_stages_64x4_tn",
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>"
        "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8::Params)"),
        "cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4",
        "cutlass_80_wmma_tensorop_f16_s161616gemm_f16_16x16_128x2_tn_align8",
        "volta_h884gemm_64x64_ldg8_nn",
        "turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn",
        "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8",
        "sm90_gemm_bf16_bf16_f32_wgmma_tma_warpspecialized_cooperative",
    ],
    CUDA_CORE_GEMM: [
        ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
        "aligna4_alignc4_execute_kernel__51a_cublas"),  # the FP32 GEMM on H200
        "ampere_sgemm_128x64_nn",
        "ampere_sgemm_64x32_sliced1x4_tn",
        "ampere_sgemm_32x128_tn",
        "cutlass_80_simt_sgemm_128x128_8x4_nn_align1",
        "volta_sgemm_128x64_nt",
        ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float> >(float, float)"),
        ("void gemv2T_kernel_val<int, int, __half, __half, __half, float, 128, 16, 2, 4, false, "
        "false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__half const>, "
        "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half>, "
        "float> >(float, float)"),
        ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched"
        "<float const>, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<float const, float>)"),
        ("void gemmk1_kernel<int, float, 256, 5, false, false, false, false, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float>, float, 0>(cublasGemmk1Params<float, float>)"),
        ("void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensor<float const>, "
        "cublasGemvTensorStridedBatched<float> > >(cublasDotParams<cublasGemvTensor<float const>, "
        "cublasGemvTensorStridedBatched<float> >)"),
    ],
    COPY: [
        "direct_copy_kernel_cuda",  # H200
        "bfloat16_copy_kernel_cuda",  # H200
        ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native"
        "::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
        "{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native"
        "::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
        "{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::"
        "native::gpu_kernel_impl_nocast<...>)"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda(float)#1}, "
        "std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIterator"
        "Base&)::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
        "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#8}::operator()() const"
        "::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, "
        "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWith"
        "Cast<1>, at::native::memory::StoreWithCast<1> >(...)"),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
        "namespace)::OpaqueType<4u>, unsigned int, 2, 128, 1>(...)"),
        "Memcpy DtoD (Device -> Device)",
        "Memcpy HtoD (Pageable -> Device)",
    ],
    REDUCTION: [
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps"
        "<float, float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)"),
        ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_"
        "wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::Tensor"
        "Iterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(...)"),
        ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>"
        "(cublasSplitKParams<float>, float const*, float const*, float*, float const*, "
        "float const*, float const*, float const*, float*, void*, long, float*, int*)"),
        ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, (anonymous "
        "namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"),
        "triton_red_fused_mean_pow_0",
        "triton_per_fused__softmax_1",
    ],
    ELEMENTWISE: [
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"),
        ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native"
        "::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >"
        "(at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)"),
        ("void at::native::unrolled_elementwise_kernel<at::native::sigmoid_kernel_cuda(at::Tensor"
        "IteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
        "{lambda(float)#1}, std::array<char*, 2ul>, 4, ...>(...)"),
        ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<...> >"
        "(long, ...)"),
        "triton_poi_fused_add_mul_sigmoid_0",
    ],
    OTHER: [
        ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::"
        "TensorInfo<float, unsigned int>, unsigned int, unsigned int, bool, unsigned int, "
        "unsigned int, at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, "
        "at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)"),
        "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<...>(...)",
        "Memset (Device)",
        "void at::native::(anonymous namespace)::fill_kernel(...)",
        "triton_tem_fused_mm_0",
    ],
}


@pytest.mark.parametrize(
    ("expected", "name"), [(cls, name) for cls, names in REAL_NAMES.items() for name in names]
)
def test_real_kernel_names_are_classified(expected: str, name: str) -> None:
    assert classify(name) == expected


def test_record_short_names_keep_the_functor() -> None:
    copy = KernelRecord(REAL_NAMES[COPY][3], COPY, 1, 1.0)
    assert copy.short_name == "vectorized_elementwise_kernel<bfloat16_copy_kernel_cuda>"
    assert KernelRecord("ampere_sgemm_128x64_nn", CUDA_CORE_GEMM, 1, 1).short_name == (
        "ampere_sgemm_128x64_nn")
    assert len(KernelRecord("x" * 200, OTHER, 1, 1).short_name) == 60


# -- profiler events, faked with the attributes torch.profiler's FunctionEvent has ---------


@dataclass
class _Kind:
    name: str


@dataclass
class _Range:
    us: float

    def elapsed_us(self) -> float:
        return self.us


@dataclass
class _Kernel:
    name: str


@dataclass
class _Event:
    name: str
    device_type: _Kind
    time_range: _Range = field(default_factory=lambda: _Range(0.0))
    kernels: list[_Kernel] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)
    cpu_parent: Any = None
    is_legacy: bool = False


CPU, CUDA = _Kind("CPU"), _Kind("CUDA")
SGEMM = REAL_NAMES[CUDA_CORE_GEMM][0]
COPY_K = "bfloat16_copy_kernel_cuda"


def fake_events(iterations: int) -> list[_Event]:
    parent = _Event("aten::to", CPU, stack=[
        "/site-packages/torch/_tensor.py(40): to",
        "/repo/numcheck/ops/mhc.py(99): bf16_roundtrip",
        "/repo/numcheck/overhead/limits.py(170): audit_variant",
    ])
    events: list[_Event] = [parent]
    for _ in range(iterations):
        events += [
            _Event("aten::copy_", CPU, kernels=[_Kernel(COPY_K)], cpu_parent=parent),
            _Event("aten::mm", CPU, kernels=[_Kernel(SGEMM)],
                   stack=["/repo/numcheck/ops/indexer.py(196): fp32"]),
            _Event(COPY_K, CUDA, _Range(30.0)),
            _Event(SGEMM, CUDA, _Range(60.0)),
            _Event("triton_poi_fused_add_0", CUDA, _Range(10.0)),
        ]
    return events


def test_audit_from_events_times_per_call_with_source_lines() -> None:
    audit = audit_from_events(fake_events(4), iterations=4)
    assert audit.total_us == pytest.approx(100.0)
    assert audit.time(CUDA_CORE_GEMM) == pytest.approx(60.0)
    assert audit.share(COPY) == pytest.approx(0.3)
    (copy,) = audit.of_class(COPY)
    assert copy.calls == 1 and copy.where == "numcheck/ops/mhc.py:99"  # from the parent op
    assert audit.of_class(CUDA_CORE_GEMM)[0].where == "numcheck/ops/indexer.py:196"
    assert audit.of_class(ELEMENTWISE)[0].where == "-"
    assert audit.summary() == (
        "GEMM (CUDA cores) 60.0 us (60%); casts/copies 30.0 us (30%); elementwise 10.0 us (10%); "
        "total 100.0 us per call"
    )
    table = audit.table()
    assert table[1].split()[0] == CUDA_CORE_GEMM and "60%" in table[1]
    assert audit.as_dict()["by_class_us"][COPY] == pytest.approx(30.0)


def test_empty_audit() -> None:
    audit = KernelAudit(3)
    assert audit.share(COPY) == 0.0 and audit.summary() == "no kernels; total 0.0 us per call"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel audit profiles CUDA kernels")
def test_profile_kernels_on_the_gpu() -> None:  # pragma: no cover - GPU only
    a = torch.randn(256, 256, device="cuda")
    audit = profile_kernels(lambda: (a @ a).to(torch.bfloat16), iterations=3)
    assert audit.time(COPY) > 0
    assert audit.time(CUDA_CORE_GEMM) + audit.time(TENSOR_CORE_GEMM) > 0
    # Source lines of kernels are best effort: torch 2.11's profiler on the H200 gave none
    # (docs/overhead.md); the cast ledger's source lines do not depend on the profiler.
    assert all(isinstance(r.where, str) for r in audit.records)
