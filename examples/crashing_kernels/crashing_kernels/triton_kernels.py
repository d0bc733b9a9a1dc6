"""The Triton kernels of the CUDA variants: one honest, the others faulty on purpose.

Imported only when a CUDA variant runs, so the CPU run never imports Triton.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 128
#: An element offset far past any allocation (4 TiB of fp32): an unmapped address.
WILD = 1 << 40


@triton.jit
def row_scale_kernel(x_ptr, s_ptr, y_ptr, n, cols, EXTRA: tl.constexpr, BLOCK: tl.constexpr):
    """``y[i] = x[i] * s[i // cols]`` for ``i < n``. With ``EXTRA = 1`` it also reads
    ``x[n]``, one element past the end of x, and masks that value away: the outputs are the
    honest ones, the read is out of bounds (what compute-sanitizer's memcheck reports)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n + EXTRA, other=0.0)
    s = tl.load(s_ptr + offs // cols, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, x * s, mask=offs < n)


@triton.jit
def wild_load_kernel(x_ptr, y_ptr, n, WILD: tl.constexpr, BLOCK: tl.constexpr):
    """Loads through a pointer ``WILD`` elements past x: an illegal address."""
    pid = tl.program_id(0)
    offs = (pid * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    x = tl.load(x_ptr + offs + WILD, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, x, mask=offs < n)


@triton.jit
def spin_kernel(flag_ptr):
    """Spins until ``*flag_ptr`` becomes non-zero, which nothing ever makes it: the volatile
    load re-reads memory on every turn, so the compiler cannot hoist it out of the loop."""
    while tl.load(flag_ptr, volatile=True) == 0:
        pass
