"""Triton for the fused variants: is it installed, and where can its kernels run here.

A Triton kernel runs on a GPU, or on the CPU under Triton's interpreter. The interpreter is
switched on by ``TRITON_INTERPRET=1``, read when ``@triton.jit`` decorates a function. The
kernels use library functions (``tl.sum``...) that triton decorates when ``triton.language``
is imported, so the variable must be set before triton is first imported, and it holds for
the whole process: a process runs its kernels either compiled (CUDA) or interpreted (CPU).

What numcheck does (docs/fused.md):

- on a machine where torch sees no CUDA device and triton is not imported yet, it sets
  ``TRITON_INTERPRET=1`` before importing triton (there is no GPU to compile for, so nothing
  is lost) and the fused variants run on the CPU;
- otherwise it follows the environment: interpreter on -> fused runs on the CPU only,
  interpreter off -> CUDA only; the other device skips with the reason.

The interpreter computes ``tl.dot`` with numpy. It is exact for fp32 and fp8 operands but
returns garbage for bf16 operands (it keeps bf16 as raw uint16 bits and multiplies the
integers; measured with triton 3.6: max error 4.9e10 on a 32x32 product of values below 4).
The kernels therefore take an ``EMULATE`` constexpr: under the interpreter, operands the GPU
feeds to the tensor cores in bf16 are upcast to fp32 first. That is exact (bf16 and e4m3
values, and products of two of them, are exact in fp32), so the interpreter computes what
the GPU computes up to the order of fp32 accumulation.
"""

from __future__ import annotations

import os
import sys

#: Set when this module switched the interpreter on itself (no CUDA, triton not imported).
AUTO_INTERPRET = False

#: What the shipped variants' kernel launches pass on a GPU, beside their tile options (the
#: honest member ``triton_matmul`` passes nothing: it models the library's defaults).
#: ``enable_fp_fusion``: Triton contracts a multiply and an add into one FMA (one rounding
#: where there were two) unless told otherwise, and takes its default from
#: ``TRITON_DEFAULT_FP_FUSION``: on up to Triton 3.9, announced to turn off in 3.10. The
#: fused variants' budgets were measured with it on, so their kernels ask for it: a Triton
#: upgrade or that variable leaves their bits as measured. (The interpreter runs each
#: operation alone, whatever the option; the option is not passed there.)
GPU_LAUNCH: dict[str, object] = {"enable_fp_fusion": True}


def _probe() -> tuple[str, tuple[str, ...], str]:
    """(why fused cannot run at all, devices it can run on, why not on the others)."""
    global AUTO_INTERPRET
    if "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
            AUTO_INTERPRET = True
    try:
        import triton.language as tl
    except ImportError as exc:  # an optional dependency: the fused items skip with this reason
        return f"triton not installed ({exc}); fix: pip install 'numcheck[fused]'", (), ""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - every triton >= 3.0 has it
        InterpretedFunction = ()  # type: ignore[assignment,misc]
    stdlib_interpreted = isinstance(tl.sum, InterpretedFunction)
    if stdlib_interpreted:
        why = (
            "torch sees no CUDA device, so numcheck runs Triton kernels under the interpreter"
            if AUTO_INTERPRET else "TRITON_INTERPRET=1 is set"
        )
        return "", ("cpu",), (
            f"{why}: they run on the CPU only in this process; fix: unset TRITON_INTERPRET "
            "on a machine with CUDA to run them there"
        )
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return (
            "TRITON_INTERPRET=1 was set after triton was imported, so its library functions "
            "are compiled but the kernels interpreted; fix: set it before Python starts"
        ), (), ""
    return "", ("cuda",), (
        "on the CPU Triton kernels need its interpreter, which is off in this process; fix: "
        "run with TRITON_INTERPRET=1 set before Python starts (numcheck sets it by itself "
        "only on machines without CUDA)"
    )


#: Why the fused variants cannot run in this process at all ("" when they can).
#: ``DEVICES``: where they run here; ``OTHER_DEVICES_REASON``: why not elsewhere.
TRITON_MISSING, DEVICES, OTHER_DEVICES_REASON = _probe()
#: True when the kernels run under the interpreter (then MMA operands are upcast to fp32).
INTERPRETED = DEVICES == ("cpu",)


def unavailable_reason() -> str:
    """The skip reason for a device missing from :data:`DEVICES`."""
    return TRITON_MISSING or OTHER_DEVICES_REASON
