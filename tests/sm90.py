"""Triton kernels compiled for sm_90 on a machine without a GPU: the PTX a test reads.

A kernel compiles from its source whether this process interprets Triton kernels or not
(under the interpreter, ``@triton.jit`` wraps the function; its source is compiled here). A
kernel that calls other ``@triton.jit`` functions compiles only where they are compiled
functions too: in a process with the interpreter off (tests/fresh.py). Callers skip on the
RuntimeError of a triton install without ptxas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def sm90_ptx(fn: Any, signature: Mapping[str, str], constants: Mapping[str, Any], *,
             options: Mapping[str, Any]) -> str:
    """The PTX of kernel ``fn`` for sm_90: ``signature`` maps every argument to its Triton
    type (``"constexpr"`` for constants), ``constants`` gives the constexprs' values.
    ``options`` are the launch options (say ``enable_fp_fusion``: left to
    TRITON_DEFAULT_FP_FUSION, Triton 3.9 warns that its default changes)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction):  # under TRITON_INTERPRET=1: compile its source
        fn = JITFunction(fn.fn)
    src = ASTSource(fn=fn, signature=dict(signature), constexprs={
        (fn.arg_names.index(c),): v for c, v in constants.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(options)).asm["ptx"]
