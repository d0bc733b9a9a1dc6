"""FP8 GEMMs against their simulated reference: numcheck's accumulation model and, on CUDA,
the real kernels, each held to the bound of the model it declares.

    python -m benchmarks.numerics.fp8_accumulation [--device cuda] [--seeds 10] [--out DIR]
                                                       [--quick] [--alternatives]

For each row it quantizes ``a`` and ``b`` (numcheck.precision.quantize), computes the GEMM
and compares it with the product of the exact dequantized operands in float64
(numcheck.precision.quant_accumulate.simulated_reference): ``rel_fro`` (the Frobenius norm of
the difference over the reference's), the largest elementwise relative difference, and
``ratio``, the worst ``|y - y_sim| / bound`` of numcheck.precision.quant_bound under the
row's declared accumulation (at most 1 for an honest kernel). Over ``--seeds`` seeds it
keeps the worst of each.

Rows:

- ``model/...``: numcheck's emulation at the shapes of docs/fp8.md's H200 probe (a, b ~ N(0,1),
  M=256, N=512, K=4096; all-positive |N(0,1)|, M=N=128, K = 4096, 16384, 65536), on
  ``--device`` (the emulation is exact arithmetic: the same figures on a CPU and a GPU);
- CUDA only: ``torch._scaled_mm`` per tensor and per row, ``use_fast_accum`` off and on,
  fp32 and bf16 out (declared: promoted every 128 / none); a Triton ``tl.dot`` on e4m3
  operands with its defaults (declared: none); torchao's ``blockwise_fp8_gemm`` fed by its own
  quantizers (declared: promoted every 128, bf16 out), whose output
  numcheck.precision.quant_validate also checks against DeepSeek's declared schemes. A real
  kernel's row also gives ``vs_model``: its rel_fro against numcheck's emulation of the same
  operands.

``--alternatives`` adds rows for other accumulation models on N(0,1) data (12 or 14 kept bits,
truncation toward minus infinity, 16-product steps, promotion every 32): what the H200
figures rule out. ``--quick`` uses small shapes (the CPU test of this script). Writes ``fp8_accumulation.json``
under ``--out`` and prints the table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from numcheck.precision.quant_accumulate import (
    FAST_ACCUMULATION,
    PROMOTED_128,
    Accumulation,
    emulated_gemm,
    simulated_reference,
)
from numcheck.precision.quant_bound import compare_to_simulated
from numcheck.precision.quant_scheme import DEEPSEEK_ACT, DEEPSEEK_WEIGHT, FP8_ROW, FP8_TENSOR
from numcheck.precision.quant_validate import validate
from numcheck.precision.quantize import Quantized, as_quantized, quantize

#: A kernel: (a, b quantized as [N, K]) -> y [M, N] in float32.
Kernel = Callable[[Quantized, Quantized], torch.Tensor]


@dataclass
class Row:
    """The worst figures of one GEMM over the seeds."""

    name: str
    shape: tuple[int, int, int]
    data: str
    declared: str
    rel_fro: float = 0.0
    max_rel: float = 0.0
    ratio: float = 0.0
    vs_model: float = math.nan
    note: str = ""
    seeds: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, y: torch.Tensor, a: Quantized, b: Quantized, acc: Accumulation,
            out: torch.dtype, model: torch.Tensor | None) -> None:
        sim = simulated_reference(a, b)
        d = y.double().to(sim.device) - sim
        self.rel_fro = max(self.rel_fro, float(d.norm() / sim.norm()))
        self.max_rel = max(self.max_rel, float((d.abs() / sim.abs().clamp(min=1e-30)).max()))
        self.ratio = max(self.ratio, compare_to_simulated(y, a, b, acc, out).worst)
        if model is not None:
            dm = y.double().to(sim.device) - model.double().to(sim.device)
            vs = float(dm.norm() / sim.norm())
            self.vs_model = vs if math.isnan(self.vs_model) else max(self.vs_model, vs)
        self.seeds += 1


def _operands(data: str, m: int, n: int, k: int, seed: int, device: str
              ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    if data == "positive":
        a, b = a.abs(), b.abs()
    return a.to(device), b.to(device)


def _scaled_mm(fast: bool, out: torch.dtype, rowwise: bool) -> Kernel:
    def run(a: Quantized, b: Quantized) -> torch.Tensor:
        fa = a.values.to(torch.float8_e4m3fn)
        fb = b.values.to(torch.float8_e4m3fn).t()  # [K, N], column-major as cuBLAS wants
        if rowwise:
            sa, sb = a.scales.reshape(-1, 1), b.scales.reshape(1, -1)
        else:
            sa, sb = a.scales.reshape(()), b.scales.reshape(())
        return torch._scaled_mm(fa, fb, scale_a=sa, scale_b=sb, out_dtype=out,
                                use_fast_accum=fast).float()

    return run


def _triton_e4m3() -> Kernel:
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a_ptr, b_ptr, c_ptr, m, n, k,  # type: ignore[no-untyped-def]
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, k, BK):
            a = tl.load(a_ptr + rm[:, None] * k + (k0 + rk)[None, :],
                        mask=(rm[:, None] < m) & ((k0 + rk)[None, :] < k), other=0.0)
            b = tl.load(b_ptr + rn[None, :] * k + (k0 + rk)[:, None],
                        mask=(rn[None, :] < n) & ((k0 + rk)[:, None] < k), other=0.0)
            acc = tl.dot(a, b, acc)  # the library's defaults: the accumulator stays in the MMA
        tl.store(c_ptr + rm[:, None] * n + rn[None, :], acc, mask=(rm[:, None] < m) &
                 (rn[None, :] < n))

    def run(a: Quantized, b: Quantized) -> torch.Tensor:
        fa = a.values.to(torch.float8_e4m3fn).contiguous()
        fb = b.values.to(torch.float8_e4m3fn).contiguous()
        m, k = fa.shape
        n = fb.shape[0]
        c = torch.empty(m, n, dtype=torch.float32, device=fa.device)
        mm[(triton.cdiv(m, 64), triton.cdiv(n, 64))](fa, fb, c, m, n, k, BM=64, BN=64, BK=128)
        return c * (a.scales.reshape(()) * b.scales.reshape(()))

    return run


def _model_rows(device: str, seeds: int, quick: bool) -> list[Row]:
    rows = []
    normal = (32, 64, 1024) if quick else (256, 512, 4096)
    specs: list[tuple[str, Any, str, tuple[int, int, int], Accumulation, torch.dtype]] = []
    for scaling, scheme in (("tensor", FP8_TENSOR), ("row", FP8_ROW)):
        for acc in (PROMOTED_128, FAST_ACCUMULATION):
            for out in (torch.float32, torch.bfloat16):
                specs.append((f"model/{scaling}/{acc.label}/{str(out)[6:]}", scheme, "normal",
                              normal, acc, out))
    for k in ((1024,) if quick else (4096, 16384, 65536)):
        mn = 16 if quick else 128
        for acc in (PROMOTED_128, FAST_ACCUMULATION):
            specs.append((f"model/tensor/{acc.label}/float32", FP8_TENSOR, "positive",
                          (mn, mn, k), acc, torch.float32))
    for name, scheme, data, (m, n, k), acc, out in specs:
        row = Row(name, (m, n, k), data, acc.label)
        # The long positive K: fewer seeds (each 65536-long GEMM is emulated step by step).
        for seed in range(seeds if k <= 4096 else max(1, seeds // 5)):
            x, w = _operands(data, m, n, k, seed, device)
            a, b = quantize(x, scheme), quantize(w, scheme)
            row.add(emulated_gemm(a, b, acc, out), a, b, acc, out, None)
        rows.append(row)
    return rows


def _alternative_rows(device: str, seeds: int, quick: bool) -> list[Row]:
    """Other accumulation models on the probe's N(0,1) data (smaller M and N): the choices
    the H200 figures rule out."""
    m, n, k = (16, 32, 1024) if quick else (64, 128, 4096)
    fast, promoted = FAST_ACCUMULATION, PROMOTED_128
    models = [fast, replace(fast, mantissa_bits=12), replace(fast, mantissa_bits=14),
              replace(fast, rounding="floor"), replace(fast, fused=16, fused_min=8),
              promoted, replace(promoted, promote_every=32)]
    rows = []
    for acc in models:
        row = Row(f"alternative/tensor/{acc.label}/float32", (m, n, k), "normal", acc.label)
        for seed in range(seeds):
            x, w = _operands("normal", m, n, k, seed, device)
            a, b = quantize(x, FP8_TENSOR), quantize(w, FP8_TENSOR)
            row.add(emulated_gemm(a, b, acc, torch.float32), a, b, acc, torch.float32, None)
        rows.append(row)
    return rows


def _cuda_rows(seeds: int, quick: bool) -> list[Row]:
    rows = []
    m, n, k = (32, 64, 1024) if quick else (256, 512, 4096)
    for scaling, scheme in (("tensor", FP8_TENSOR), ("row", FP8_ROW)):
        for fast in (False, True):
            acc = FAST_ACCUMULATION if fast else PROMOTED_128
            for out in (torch.float32, torch.bfloat16):
                rows.append(_real_row(f"_scaled_mm/{scaling}/fast={fast}/{str(out)[6:]}",
                                      _scaled_mm(fast, out, scaling == "row"), scheme, scheme,
                                      acc, out, (m, n, k), seeds))
    for kk in ((1024,) if quick else (4096, 16384, 65536)):
        mn = 16 if quick else 128
        for fast in (False, True):
            acc = FAST_ACCUMULATION if fast else PROMOTED_128
            rows.append(_real_row(f"_scaled_mm/tensor/fast={fast}/float32", _scaled_mm(
                fast, torch.float32, False), FP8_TENSOR, FP8_TENSOR, acc, torch.float32,
                (mn, mn, kk), max(1, seeds // 2), data="positive"))
    try:
        tri = _triton_e4m3()
        rows.append(_real_row("triton/tl.dot e4m3/defaults", tri, FP8_TENSOR, FP8_TENSOR,
                              FAST_ACCUMULATION, torch.float32, (m, n, k), seeds))
    except Exception as exc:  # noqa: BLE001 - a missing or failing Triton is a row's note
        rows.append(Row("triton/tl.dot e4m3/defaults", (m, n, k), "normal", "fast",
                        note=f"not run: {type(exc).__name__}: {exc}"))
    rows.append(_torchao_row(seeds, quick))
    return rows


def _real_row(name: str, kernel: Kernel, sa: Any, sb: Any, acc: Accumulation,
              out: torch.dtype, shape: tuple[int, int, int], seeds: int,
              data: str = "normal") -> Row:
    m, n, k = shape
    row = Row(name, shape, data, acc.label)
    try:
        for seed in range(seeds):
            x, w = _operands(data, m, n, k, seed, "cuda")
            a, b = quantize(x, sa), quantize(w, sb)
            row.add(kernel(a, b), a, b, acc, out, emulated_gemm(a, b, acc, out))
    except Exception as exc:  # noqa: BLE001 - one failing kernel is a row's note
        row.note = f"failed: {type(exc).__name__}: {exc}"
    return row


def _torchao_row(seeds: int, quick: bool) -> Row:
    m, n, k = (32, 256, 1024) if quick else (256, 512, 4096)
    row = Row("torchao/blockwise_fp8_gemm", (m, n, k), "normal", PROMOTED_128.label)
    try:
        from torchao.kernel.blockwise_quantization import (  # type: ignore[import-not-found]
            blockwise_fp8_gemm,
            fp8_blockwise_act_quant,
            fp8_blockwise_weight_quant,
        )
    except Exception as exc:  # noqa: BLE001
        row.note = f"not run: torchao not importable ({type(exc).__name__}: {exc})"
        return row
    findings: list[str] = []
    try:
        for seed in range(seeds):
            x, w = _operands("normal", m, n, k, seed, "cuda")
            xb, wb = x.bfloat16(), w.bfloat16()
            xq, xs = fp8_blockwise_act_quant(xb, 128)
            wq, ws = fp8_blockwise_weight_quant(wb, 128)
            a = as_quantized(xq, xs, DEEPSEEK_ACT)
            b = as_quantized(wq, ws, DEEPSEEK_WEIGHT)
            for q, scheme, orig in ((a, DEEPSEEK_ACT, xb), (b, DEEPSEEK_WEIGHT, wb)):
                v = validate(q, scheme, orig.float())
                if not v.ok:
                    findings.append(v.describe())
            y = blockwise_fp8_gemm(xq, xs, wq, ws, 128).float()
            row.add(y, a, b, PROMOTED_128, torch.bfloat16,
                    emulated_gemm(a, b, PROMOTED_128, torch.bfloat16))
        row.extra["validate"] = findings[:3] or "every operand follows DeepSeek's schemes"
    except Exception as exc:  # noqa: BLE001
        row.note = f"failed: {type(exc).__name__}: {exc}"
    return row


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width table."""
    lines = [(f"{'row':44s} {'M,N,K':>17s} {'data':8s} {'declared':11s} {'rel_fro':>9s} "
              f"{'max_rel':>9s} {'ratio':>7s} {'vs_model':>9s}  seeds")]
    for r in rows:
        shape = ",".join(map(str, r.shape))
        if r.note:
            lines.append(f"{r.name:44s} {shape:>17s} {r.data:8s} {r.declared:11s} {r.note}")
            continue
        lines.append(f"{r.name:44s} {shape:>17s} {r.data:8s} {r.declared:11s} "
                     f"{r.rel_fro:9.3e} {r.max_rel:9.3e} {r.ratio:7.3f} {r.vs_model:9.2e}  "
                     f"{r.seeds}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    parser.add_argument("--quick", action="store_true", help="small shapes (CPU tests)")
    parser.add_argument("--alternatives", action="store_true",
                        help="also the accumulation models the H200 figures rule out")
    args = parser.parse_args(argv)
    start = time.monotonic()
    rows = _model_rows(args.device, args.seeds, args.quick)
    if args.alternatives:
        rows += _alternative_rows(args.device, args.seeds, args.quick)
    if args.device == "cuda":
        rows += _cuda_rows(args.seeds, args.quick)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"device": args.device, "torch": torch.__version__, "seeds": args.seeds,
                "quick": args.quick, "seconds": round(time.monotonic() - start, 1)}
        if args.device == "cuda":
            meta["gpu"] = torch.cuda.get_device_name()
        (out / "fp8_accumulation.json").write_text(json.dumps(
            {"meta": meta, "rows": [r.__dict__ for r in rows]}, indent=1, default=str))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
