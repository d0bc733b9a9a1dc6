"""liger-kernel's mHC forward kernels as variants of numcheck's ``mhc_pre`` op.

liger-kernel (``pip install liger-kernel``) is a library of Triton kernels for LLM training
and serving. ``liger_kernel.ops.mhc`` has DeepSeek's mHC in three forward kernels, which
together compute what numcheck's ``mhc_pre`` op computes:

- ``mhc_mm_norm_fwd(x, phi, eps)``: ``mixes = (x @ phi) * rsqrt(mean(x^2) + eps)`` in one
  kernel. ``phi`` is the projection as a contiguous ``[n*C, 24]``: numcheck's ``hc_fn``
  transposed. bf16 ``x`` and ``phi`` take the tensor-core path; an fp32 ``phi`` the fp32
  path (``tl.dot`` on fp32: TF32 on a GPU);
- ``mhc_split_sinkhorn_fwd``: ``pre``, ``post`` and ``comb`` (sigmoids, softmax + eps, a
  column normalisation, then Sinkhorn);
- ``mhc_pre_fwd(x, pre)``: ``y = sum_i pre_i x_i``, in fp32.

The kernel wants its weight transposed (and in bf16 on the tensor-core path). A serving
engine does that once, when it loads the model, so these variants do it in ``prepare``.
``register(registry)`` is called by the ``pytest_numcheck_register`` hook in conftest.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

import torch

import numcheck


def use_interpreter_without_cuda() -> None:
    """On a machine without CUDA, run Triton kernels under Triton's interpreter (the CPU).

    Triton reads ``TRITON_INTERPRET`` when it is first imported, and liger_kernel imports
    it on import, so this must run first. Under ``pytest --numcheck`` it changes nothing:
    numcheck has done the same before loading its own Triton kernels. Plain ``pytest`` and
    scripts need it here.
    """
    unset = "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ
    if unset and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


use_interpreter_without_cuda()


def interpreted() -> bool:
    """True when this process runs Triton kernels under the interpreter (on the CPU)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def where_it_runs() -> tuple[tuple[str, ...], str]:
    """The devices liger's kernels can run on in this process, and why not on the others
    (the skip reason of the variants' checks there)."""
    missing = [name for name in ("triton", "liger_kernel")
               if importlib.util.find_spec(name) is None]
    if missing:
        return (), f"{' and '.join(missing)} not installed; fix: pip install liger-kernel"
    if interpreted():
        return ("cpu",), ("TRITON_INTERPRET=1: Triton kernels run under its interpreter, on "
                          "the CPU only in this process; fix: unset it on a machine with CUDA")
    return ("cuda",), ("Triton kernels run compiled in this process (CUDA only); on the CPU "
                       "they need TRITON_INTERPRET=1 set before triton is imported")


def kernels() -> ModuleType:
    """``liger_kernel.ops.mhc``, imported on first use (it takes seconds: liger_kernel
    imports all of its ops)."""
    return importlib.import_module("liger_kernel.ops.mhc")


def prepare_bf16(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Inputs:
    """Load time: the projection as the kernel takes it, ``[n*C, 24]`` contiguous, in bf16."""
    phi = inputs["hc_fn"].t().contiguous().to(torch.bfloat16)
    if interpreted():
        # Triton's interpreter multiplies bf16 tl.dot operands as raw integers (numcheck's
        # docs/fused.md). Widened to fp32 (exactly), the weight sends the kernel down its
        # fp32 path, whose products of bf16 values are exact: what the tensor cores compute,
        # up to the order of the fp32 sums. The GPU gets the bf16 weight itself.
        phi = phi.float()
    return {"hc_fn": phi}


def prepare_fp32(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Inputs:
    """Load time: the projection as the kernel takes it, ``[n*C, 24]`` contiguous, fp32."""
    return {"hc_fn": inputs["hc_fn"].t().contiguous()}


def liger_mhc_pre(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """One call: liger's three forward kernels on x and the prepared projection."""
    mhc = kernels()
    x = inputs["x"]  # [T, n, C] bf16, contiguous: the kernels take it as it is
    t, n, c = x.shape
    mixes, _ = mhc.mhc_mm_norm_fwd(x.view(t, n * c), inputs["hc_fn"], eps=params["norm_eps"])
    scale = inputs["hc_scale"]  # [3]: one-element views, no copy
    pre, post, comb = mhc.mhc_split_sinkhorn_fwd(
        mixes, inputs["hc_base"], scale[0:1], scale[1:2], scale[2:3],
        tmax=params["sinkhorn_iters"], pre_eps=params["hc_eps"],
        sinkhorn_eps=params["hc_eps"], post_mult=2.0,
    )
    y = mhc.mhc_pre_fwd(x, pre)  # fp32 [T, C]; the op's y is bf16
    return {"mixes": mixes, "pre": pre, "post": post, "comb": comb, "y": y.to(torch.bfloat16)}


def liger_bf16_per_call(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """``liger_bf16`` with its weight layout made on every call, as glue without a
    ``prepare`` must: the same numbers, and two passes over hc_fn per call."""
    return liger_mhc_pre({**inputs, **prepare_bf16(inputs, params)}, params)


def register(registry: numcheck.Registrar) -> None:
    """Add liger's kernels as variants of numcheck's ``mhc_pre`` op."""
    devices, elsewhere = where_it_runs()
    for name, precision, prepare, fn in (
        ("liger_bf16", "bf16", prepare_bf16, liger_mhc_pre),
        ("liger_tf32", "tf32", prepare_fp32, liger_mhc_pre),
        ("liger_bf16_per_call", "bf16", None, liger_bf16_per_call),
    ):
        registry.add_variant("mhc_pre", numcheck.Variant(
            name, fn, precision, devices=devices, unavailable=elsewhere, prepare=prepare,
            doc=(prepare or fn).__doc__ or "",
        ))
