"""Kernel audit (CUDA): where a variant's GPU time goes, by kind of kernel.

A whole-op timing cannot say why a faster GEMM did not make a faster op; a table of
kernel time by class can ("GEMM 52 us (tensor cores); casts 210 us (34%); elementwise
166 us; reduce 42 us"). :func:`classify` maps a kernel name to a class with an ordered
table of name patterns (:data:`KERNEL_CLASSES`, tested over real kernel names);
:func:`profile_kernels` runs a callable under ``torch.profiler`` for a few iterations and
:func:`audit_from_events` turns the profiler's events into a :class:`KernelAudit`.

Only the profiling needs a GPU; the classifier and the event parsing are pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

TENSOR_CORE_GEMM = "tensor_core_gemm"
CUDA_CORE_GEMM = "cuda_core_gemm"
COPY = "copy"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
OTHER = "other"

#: Display names of the classes, in report order.
CLASS_LABELS = {
    TENSOR_CORE_GEMM: "GEMM (tensor cores)",
    CUDA_CORE_GEMM: "GEMM (CUDA cores)",
    COPY: "casts/copies",
    ELEMENTWISE: "elementwise",
    REDUCTION: "reduction",
    OTHER: "other",
}

# First match wins, so the order carries meaning:
# 1. copies first: PyTorch's cast kernels are elementwise templates whose names hold the
#    functor (`elementwise_kernel<..., direct_copy_kernel_cuda ...>`), and they are copies.
# 2. CUDA-core GEMM before tensor-core GEMM: cuBLAS's FP32 xmma kernels carry `ffma` in a
#    name that otherwise looks like a tensor-core one (`sm80_xmma_gemm_f32f32_..._ffma`);
#    `gemv`/`gemmSN`/`gemmk1` are cuBLAS's CUDA-core small-shape kernels, any dtype.
# 3. tensor-core GEMM: cuBLASLt's Hopper JIT kernels (`nvjet_`), warpgroup MMA, the mma
#    shape tokens cuBLAS writes into one word (`s16816gemm`, `h884gemm`, `s1688gemm`),
#    CUTLASS `tensorop`, and xmma kernels with a low-precision operand type.
# 4. Triton's own prefixes say pointwise / reduction / persistent reduction.
KERNEL_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (COPY, re.compile(r"copy_kernel|direct_copy|Memcpy|CatArrayBatchedCopy", re.IGNORECASE)),
    (CUDA_CORE_GEMM, re.compile(
        r"(?:^|[^a-z0-9])(?:ffma|simt)(?:[^a-z0-9]|$)|[sdcz]gemm|gemv|gemmSN|gemmk1", re.IGNORECASE)),
    (TENSOR_CORE_GEMM, re.compile(
        r"nvjet|wgmma|hmma|tensorop|\d{3,6}gemm|xmma_gemm_\w*(?:tf32|bf16|f16|e4m3|e5m2|i8)"
        r"|gemm_\w*(?:bf16|f16|tf32)", re.IGNORECASE)),
    (REDUCTION, re.compile(r"^triton_(?:red|per)_|reduce|softmax|norm_kernel", re.IGNORECASE)),
    (ELEMENTWISE, re.compile(r"^triton_poi_|elementwise", re.IGNORECASE)),
)


def classify(name: str) -> str:
    """The class of a kernel name: one of the keys of :data:`CLASS_LABELS`."""
    for cls, pattern in KERNEL_CLASSES:
        if pattern.search(name):
            return cls
    return OTHER


@dataclass(frozen=True)
class KernelRecord:
    """One kernel name: its class, launches and time per iteration, and its source line."""

    name: str
    cls: str
    calls: float
    time_us: float
    where: str = "-"

    @property
    def short_name(self) -> str:
        """The name without the template arguments of a C++ symbol, capped at 60 characters."""
        core = self.name.removeprefix("void ")
        # Keep the functor that names a PyTorch elementwise kernel (direct_copy_kernel_cuda).
        functor = re.search(r"(\w+_kernel_cuda|\w+Functor\w*|\w+_functor)", core)
        head = core.split("<", 1)[0].split("(", 1)[0].removeprefix("at::native::")
        text = f"{head}<{functor.group(1)}>" if functor and functor.group(1) != head else head
        return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class KernelAudit:
    """GPU kernels of ``iterations`` calls of a variant, time per iteration."""

    iterations: int
    records: list[KernelRecord] = field(default_factory=list)

    @property
    def total_us(self) -> float:
        return sum(r.time_us for r in self.records)

    def time(self, cls: str) -> float:
        return sum(r.time_us for r in self.records if r.cls == cls)

    def share(self, cls: str) -> float:
        total = self.total_us
        return self.time(cls) / total if total > 0 else 0.0

    def of_class(self, cls: str) -> list[KernelRecord]:
        return sorted((r for r in self.records if r.cls == cls), key=lambda r: -r.time_us)

    def summary(self) -> str:
        """``GEMM 52 us (tensor cores); casts/copies 210 us (34%); elementwise 166 us; ...``."""
        parts = []
        for cls, label in CLASS_LABELS.items():
            t = self.time(cls)
            if t > 0:
                parts.append(f"{label} {t:.1f} us ({100 * self.share(cls):.0f}%)")
        return f"{'; '.join(parts) or 'no kernels'}; total {self.total_us:.1f} us per call"

    def table(self, limit: int = 12) -> list[str]:
        """Kernels by time, one line each, capped at ``limit`` rows."""
        rows = sorted(self.records, key=lambda r: -r.time_us)
        lines = [(f"    {'class':<16}  {'kernel':<60}  {'calls':>5}  {'us/call':>8}  "
                 f"{'share':>5}  where")]
        total = self.total_us or 1.0
        for r in rows[:limit]:
            lines.append(f"    {r.cls:<16}  {r.short_name:<60}  {r.calls:>5.0f}  {r.time_us:>8.1f}  "
                         f"{100 * r.time_us / total:>4.0f}%  {r.where}")
        if len(rows) > limit:
            lines.append(f"    ... {len(rows) - limit} more kernels")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "iterations": self.iterations,
            "total_us": self.total_us,
            "by_class_us": {cls: self.time(cls) for cls in CLASS_LABELS},
            "kernels": [
                {"name": r.name, "class": r.cls, "calls": r.calls, "time_us": r.time_us,
                 "where": r.where}
                for r in sorted(self.records, key=lambda r: -r.time_us)
            ],
        }


def _is_device(evt: Any) -> bool:
    kind = getattr(evt, "device_type", None)
    return getattr(kind, "name", str(kind)).upper().endswith("CUDA")


def _user_line(stack: Sequence[str] | None, skip: Sequence[str]) -> str | None:
    """The innermost profiler stack entry outside torch and ``skip``: ``path(98): fn``."""
    for entry in stack or ():
        if "/torch/" in entry or "<built-in" in entry or any(s in entry for s in skip):
            continue
        path, _, rest = entry.partition("(")
        line = rest.split(")", 1)[0]
        return f"{path[path.rfind('/numcheck/') + 1 :]}:{line}"  # from numcheck/ on, if in it
    return None


def audit_from_events(
    events: Iterable[Any], iterations: int, *, skip: Sequence[str] = ()
) -> KernelAudit:
    """A :class:`KernelAudit` from ``torch.profiler`` events (``prof.events()``).

    Device events (``device_type`` CUDA) give each kernel's name and duration; the CPU op
    that launched it (its ``kernels`` list) gives the Python stack, when the profile was
    taken ``with_stack=True``, and so the source line.
    """
    events = list(events)
    where: dict[str, list[str]] = {}
    for evt in events:
        if _is_device(evt) or getattr(evt, "is_legacy", False):
            continue
        launched = getattr(evt, "kernels", None) or ()
        if not launched:
            continue
        line = None
        node: Any = evt
        while node is not None and line is None:  # nested ops: climb to one with a stack
            line = _user_line(getattr(node, "stack", None), skip)
            node = getattr(node, "cpu_parent", None)
        for k in launched:
            lines = where.setdefault(k.name, [])
            if line and line not in lines:
                lines.append(line)
    calls: dict[str, int] = {}
    time_us: dict[str, float] = {}
    for evt in events:
        if not _is_device(evt):
            continue
        calls[evt.name] = calls.get(evt.name, 0) + 1
        time_us[evt.name] = time_us.get(evt.name, 0.0) + float(evt.time_range.elapsed_us())
    n = max(iterations, 1)
    records = [
        KernelRecord(name, classify(name), calls[name] / n, time_us[name] / n,
                     ", ".join(where.get(name, [])[:2]) or "-")
        for name in calls
    ]
    return KernelAudit(iterations, records)


def profile_kernels(
    fn: Callable[[], object], *, iterations: int = 5, warmup: int = 2,
    skip: Sequence[str] = (),
) -> KernelAudit:
    """Run ``fn`` ``warmup`` times, then profile ``iterations`` calls on the GPU."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 with_stack=True) as prof:
        for _ in range(iterations):
            fn()
        torch.cuda.synchronize()
    return audit_from_events(prof.events(), iterations, skip=skip)
