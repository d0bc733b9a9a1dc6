"""One tiny op, ``row_scale`` (``y = x * scale[:, None]`` in fp32), and variants of it that
pass, crash, hang, run out of memory or read out of bounds (README.md says what each does and
what numcheck reports for it).

``register(registry)`` is called by the ``pytest_numcheck_register`` hook in conftest.py.
Every faulty variant misbehaves inside its call, where numcheck's worker process runs it.
"""

from __future__ import annotations

import ctypes
import os
import time

import torch

import numcheck

ANY = ("cpu", "cuda")
CUDA = ("cuda",)


def row_scale_inputs(params: numcheck.Params, seed: int) -> numcheck.Inputs:
    """Seeded on the CPU with numcheck's streams: the same bytes on every machine."""
    rows, cols = params["rows"], params["cols"]
    x = numcheck.normal(numcheck.rng(seed, "x"), (rows, cols))
    scale = 1.0 + numcheck.normal(numcheck.rng(seed, "scale"), (rows,), std=0.25)
    return {"x": x, "scale": scale}


def fp32(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Reference: each row of x times its scale, in fp32."""
    return {"y": inputs["x"] * inputs["scale"].unsqueeze(1)}


def honest(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """The op in torch, as the reference computes it (any device): passes everywhere."""
    return {"y": torch.mul(inputs["x"], inputs["scale"].view(-1, 1))}


def _launch_row_scale(inputs: numcheck.Inputs, extra: int) -> torch.Tensor:
    from crashing_kernels import triton_kernels as k

    x, s = inputs["x"].contiguous(), inputs["scale"].contiguous()
    y = torch.empty_like(x)
    n, cols = x.numel(), x.shape[1]
    grid = (-(-(n + extra) // k.BLOCK),)
    k.row_scale_kernel[grid](x, s, y, n, cols, EXTRA=extra, BLOCK=k.BLOCK)
    return y


def honest_triton(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """A correct Triton kernel (CUDA): passes, under compute-sanitizer's memcheck too."""
    return {"y": _launch_row_scale(inputs, extra=0)}


def exits(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Ends its process with exit status 3, as a library calling exit() or abort() does."""
    os._exit(3)


def segfault(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Reads address 0 from C: SIGSEGV, as a native extension's bad pointer does."""
    ctypes.string_at(0)
    raise AssertionError("unreachable: reading address 0 did not fault")


def hangs(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Never returns. On the CPU a sleep loop; on CUDA a Triton kernel spinning on a flag
    that nothing sets (a deadlocked kernel), then a synchronize that waits for it."""
    x = inputs["x"]
    if x.device.type == "cuda":
        from crashing_kernels import triton_kernels as k

        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        k.spin_kernel[(1,)](flag)
        torch.cuda.synchronize(x.device)
    while True:
        time.sleep(0.05)


def oom(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Asks for more memory than the device has, in one allocation that fails at once (no
    memory is actually taken): on CUDA more bytes than the GPU's total memory, on the CPU
    2**62 bytes (4 EiB), past any address space."""
    x = inputs["x"]
    if x.device.type == "cuda":
        _, total = torch.cuda.mem_get_info(x.device)
        nbytes = total + (1 << 30)
    else:
        nbytes = 1 << 62
    big = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    return {"y": big[: x.numel() * 4].view(torch.float32).view_as(x)}


def device_assert(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """A gather with an index one past the row (CUDA): torch's device-side assert
    ('index out of bounds'), which leaves the process's CUDA context unusable."""
    x = inputs["x"]
    index = torch.full_like(x, x.shape[1], dtype=torch.int64)
    y = torch.gather(x, 1, index)
    torch.cuda.synchronize(x.device)
    return {"y": y * inputs["scale"].unsqueeze(1)}


def illegal_address(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """A Triton kernel loading through a wild pointer (CUDA): 'an illegal memory access was
    encountered', which leaves the process's CUDA context unusable."""
    from crashing_kernels import triton_kernels as k

    x = inputs["x"]
    y = torch.empty_like(x)
    n = x.numel()
    k.wild_load_kernel[(-(-n // k.BLOCK),)](x, y, n, WILD=k.WILD, BLOCK=k.BLOCK)
    torch.cuda.synchronize(x.device)
    return {"y": y}


def oob_masked_read(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """The honest Triton kernel plus a read of one element past the end of x, masked away
    (CUDA): the outputs are exact, so the numerics pass; compute-sanitizer's memcheck
    reports the read (it lands inside the caching allocator's block, so nothing faults)."""
    return {"y": _launch_row_scale(inputs, extra=1)}


#: The variants in the order their checks run (registration order): the honest ones after
#: faulty ones, so that each must get a healthy worker (on CUDA a fresh context, since a
#: device-side assert or an illegal address leaves the old one unusable).
ORDER = (exits, segfault, hangs, oom, honest, device_assert, illegal_address, honest_triton,
         oob_masked_read)
CUDA_ONLY = (honest_triton, device_assert, illegal_address, oob_masked_read)

ROW_SCALE = numcheck.OpSpec(
    name="row_scale",
    version=1,
    reference="fp32",
    variants={
        "fp32": numcheck.Variant("fp32", fp32, "fp32", doc=fp32.__doc__ or ""),
        **{fn.__name__: numcheck.Variant(fn.__name__, fn, "fp32", doc=fn.__doc__ or "",
                                         devices=CUDA if fn in CUDA_ONLY else ANY)
           for fn in ORDER},
    },
    make_inputs=row_scale_inputs,
    outputs=("y",),
    params={
        "rows": numcheck.ParamSpec(int, 8, "rows", min=1),
        "cols": numcheck.ParamSpec(int, 64, "columns", min=1),
    },
    doc="each row of x times its scale (crashing_kernels)",
)


def register(registry: numcheck.Registrar) -> None:
    """Register the op, its reference and every variant."""
    registry.register(ROW_SCALE)
