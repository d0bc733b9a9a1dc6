"""The fused variants on a GPU: right (against FP32) and fast (against the memory floor).

One run, from the repository root (docs/fused.md):

    pip install --no-deps --no-build-isolation -e .
    OUT=/some/dir python -m benchmarks.speed.fused_roofline    # ~3-4 minutes on an H200; --budget-s
    python -m benchmarks.speed.fused_roofline --device cpu --tiny --out DIR   # the plumbing (CPU)

It does, each step guarded so one failure does not lose the rest, within a time budget:

1. the shipped cases' ``fused`` checks on the device (numcheck's own runner and goldens);
2. a measured device copy bandwidth (read + write, the memory roofline used for the floors);
3. the indexer at B=64, H=64, D=128, decode (next_n=1), L=8192 and 65536, top-512:
   fused vs fp32 (rel_fro, top-k recall and tie recall), and timings of fp32, bf16,
   bf16_fp32out, tf32, fused, and fused with fp8 MMA operands (full op, and logits only);
4. mHC pre at T=4096, n=4, C=7168 (hc_fn [24, 28672]) and C=4096: fused vs fp32, timings of
   fp32, bf16, bf16_roundtrip, tf32, fused (bf16x2), fused with TF32 operands; on CUDA a
   per-kernel breakdown of the fused variants from torch.profiler.

``--tiny`` shrinks every shape (B=2, L=256, H=8, D=32; T=16, C=64) and the loops, for the
CPU plumbing test (tests/test_benchmark_plumbing.py): the figures then mean nothing, the
code path is the GPU's. Timing: CUDA events (perf_counter on the CPU) around each call,
warm-up, median of >= ``--iters`` calls and IQR; speedup over fp32 with a 95% bootstrap
interval. % of floor = floor time / median time, with the floor = bytes that must move
(indexer: fp8 K read once + scales + q + weights + fp32 logits write; mHC: x read once) /
measured copy bandwidth. Writes OUT/fused_roofline.json and prints a short table last; exits
1 when a step erred (its table still printed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from numcheck.ops.registry import get_op

ROOT = Path(__file__).resolve().parents[2]

get_op("indexer")  # runs numcheck's Triton probe before anything imports triton

from numcheck.numerics.topk import select_topk, topk_agreement
from numcheck.ops import indexer, mhc, triton_support

RESULTS: dict[str, Any] = {"errors": [], "checks": [], "indexer": [], "mhc": []}
T0 = time.monotonic()
#: Where everything runs (--device), and the shapes (--tiny: the CPU plumbing test's).
DEVICE = "cuda"
TINY = False


def empty_cache() -> None:
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def guarded(label: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 -- one failure must not lose the rest of the run
        log(f"ERROR in {label}: {type(exc).__name__}: {exc}")
        RESULTS["errors"].append({"where": label, "error": f"{type(exc).__name__}: {exc}",
                                  "trace": traceback.format_exc()[-2000:]})
        empty_cache()
        return None


# -- timing --------------------------------------------------------------------------------


def time_ms(fn: Callable[[], Any], iters: int, warmup: int = 10) -> np.ndarray:
    """Per-call times in ms from CUDA events (one event pair per call); perf_counter on the
    CPU."""
    for _ in range(warmup):
        fn()
    if DEVICE != "cuda":
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return np.array(times)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return np.array([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])


def stats(ms: np.ndarray) -> dict[str, float]:
    q1, med, q3 = np.percentile(ms, [25, 50, 75])
    return {"median_ms": float(med), "iqr_ms": float(q3 - q1), "n": int(ms.size)}


def speedup_ci(base: np.ndarray, new: np.ndarray, reps: int = 2000) -> tuple[float, float, float]:
    """Median(base) / median(new) with a 95% bootstrap interval."""
    rng = np.random.default_rng(0)
    b = rng.choice(base, size=(reps, base.size))
    n = rng.choice(new, size=(reps, new.size))
    ratios = np.median(b, axis=1) / np.median(n, axis=1)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(np.median(base) / np.median(new)), float(lo), float(hi)


def copy_bandwidth() -> float:
    """Device copy bandwidth in bytes/s, counting the read and the write (1 GiB buffer)."""
    n = 2**20 if TINY else 2**30
    src = torch.empty(n, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), iters=30, warmup=5)
    return 2 * n / (float(np.median(ms)) * 1e-3)


# -- inputs made on the GPU (the CPU input makers are too slow at these sizes) -----------------


def indexer_inputs(b: int, length: int, h: int = 64, d: int = 128, n: int = 1,
                   page: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    blocks = math.ceil(length / page)
    pages = b * blocks + b
    keys = torch.randn(pages, page, d, device=DEVICE, generator=g)
    keys *= torch.exp(0.5 * torch.randn(pages, page, 1, device=DEVICE, generator=g))
    scale = keys.abs().amax(dim=-1).clamp_min(1e-4) / 448.0
    k8 = (keys / scale.unsqueeze(-1)).to(torch.float8_e4m3fn)
    cache = torch.empty(pages, page * (d + 4), dtype=torch.uint8, device=DEVICE)
    cache[:, : page * d] = k8.view(torch.uint8).view(pages, page * d)
    cache[:, page * d:] = scale.contiguous().view(torch.uint8).view(pages, page * 4)
    order = torch.randperm(pages, device=DEVICE, generator=g).to(torch.int32)
    table = order[: b * blocks].view(b, blocks).contiguous()
    qf = torch.randn(b, n, h, d, device=DEVICE, generator=g)
    q_scale = qf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-4) / 448.0
    q8 = (qf / q_scale).to(torch.float8_e4m3fn)
    w = torch.randn(b * n, h, device=DEVICE, generator=g) * (h ** -0.5) * (d ** -0.5)
    w = w * q_scale.view(b * n, h)
    return {
        "q": q8, "kv_cache": cache.view(pages, page, 1, d + 4), "weights": w.contiguous(),
        "context_lens": torch.full((b,), length, dtype=torch.int32, device=DEVICE),
        "block_table": table,
    }


def mhc_inputs(t: int, c: int, n: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn(t, n, c, device=DEVICE, generator=g)
    x *= torch.exp(0.5 * torch.randn(t, 1, 1, device=DEVICE, generator=g))
    x[:, :, torch.randperm(c, device=DEVICE, generator=g)[: max(c // 512, 1)]] *= 20.0
    mixes = (2 + n) * n
    return {
        "x": x.to(torch.bfloat16),
        "hc_fn": torch.randn(mixes, n * c, device=DEVICE, generator=g) * (n * c) ** -0.5,
        "hc_scale": torch.rand(3, device=DEVICE, generator=g) * 1.5 + 0.5,
        "hc_base": torch.randn(mixes, device=DEVICE, generator=g) * 0.5,
    }


def rel_fro(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


# -- steps ---------------------------------------------------------------------------------


def run_shipped_checks() -> None:
    from numcheck.cases import load_cases
    from numcheck.check.against_golden import run_numerics
    from numcheck.selftest import shipped_golden

    cases = [c for c in load_cases(ROOT / "cases")
             if "fused" in c.variants and not c.perf_only and DEVICE in c.devices]
    for case in cases[:1] if TINY else cases:  # perf-only: no golden
        op = get_op(case.op)
        golden, inputs = shipped_golden(case, ROOT / "goldens")
        r = run_numerics(op, case, "fused", DEVICE, golden, inputs)
        worst = r.worst()
        row = {"case": f"{case.op}::{case.id}", "passed": r.passed,
               "worst": None if worst is None else str(worst)}
        out = op.topk.scores if op.topk else op.outputs[0]
        row["rel_fro"] = r.metric(out, "rel_fro")
        if op.topk:
            row["recall_min"] = r.topk_value("recall_min")
            row["tie_recall_min"] = r.topk_value("tie_recall_min")
        RESULTS["checks"].append(row)
        log(f"check {row['case']}: {'PASS' if r.passed else 'FAIL'} rel_fro={row['rel_fro']}")


def bench_indexer(length: int, bw: float, iters: int, deadline: float) -> None:
    from numcheck.ops import indexer_fused

    b, h, d, n, k = (2, 8, 32, 1, 16) if TINY else (64, 64, 128, 1, 512)
    p = indexer.OP.resolve_params("v4flash", {"batch": b, "max_context": length, "next_n": n,
                                              "heads": h, "head_dim": d, "index_topk": k})
    inputs = indexer_inputs(b, length, h, d, n)
    row: dict[str, Any] = {"shape": f"indexer B={b} H={h} D={d} L={length} next_n={n}",
                           "L": length}
    floor_bytes = b * length * d + b * length * 4 + b * n * h * d + b * n * h * 4 + b * n * length * 4
    row["floor_bytes"] = floor_bytes
    row["floor_ms"] = floor_bytes / bw * 1e3

    ref = indexer.fp32(inputs, p)
    # Tile sweep for the fused logits kernel (cheap; picks the config timed below).
    best = None
    for block_l in (64,) if TINY else (64, 128, 256):
        for warps in (4,) if TINY else (4, 8):
            if time.monotonic() > deadline:
                break
            try:
                ms = time_ms(lambda bl=block_l, nw=warps: indexer_fused.logits(
                    inputs, length, block_l=bl, num_warps=nw), iters=15, warmup=3)
            except Exception as exc:  # noqa: BLE001
                log(f"  tile block_l={block_l} warps={warps}: {type(exc).__name__}")
                continue
            med = float(np.median(ms))
            if best is None or med < best[0]:
                best = (med, block_l, warps)
    bl, nw = (128, 8) if best is None else best[1:]
    row["fused_tile"] = {"block_l": bl, "num_warps": nw}

    def fused_op(operand: str = "bf16") -> dict[str, torch.Tensor]:
        lg = indexer_fused.logits(inputs, length, operand=operand, block_l=bl, num_warps=nw)
        return {"logits": lg, "topk": select_topk(lg, k)}

    acc = {}
    for label, fn in (("fused", fused_op), ("fused_fp8", lambda: fused_op("fp8")),
                      ("bf16", lambda: indexer.bf16(inputs, p))):
        out = fn()
        fin = torch.isfinite(ref["logits"])
        rep = topk_agreement(ref["topk"].cpu(), out["topk"].cpu(), ref["logits"].cpu(),
                             band=1e-6, band_kind="rel")
        acc[label] = {
            "rel_fro": rel_fro(out["logits"][fin].float(), ref["logits"][fin]),
            "mask_equal": bool(torch.equal(torch.isneginf(out["logits"]),
                                           torch.isneginf(ref["logits"]))),
            "recall_min": rep.recall_min, "recall_mean": rep.recall_mean,
            "tie_recall_min_1e-6": rep.tie_recall_min,
        }
    row["accuracy_vs_fp32"] = acc
    del ref
    empty_cache()

    fns: dict[str, Callable[[], Any]] = {
        "fp32": lambda: indexer.fp32(inputs, p),
        "bf16": lambda: indexer.bf16(inputs, p),
        "bf16_fp32out": lambda: indexer.bf16_fp32out(inputs, p),
        "tf32": lambda: indexer.tf32(inputs, p),
        "fused": fused_op,
        "fused_fp8": lambda: fused_op("fp8"),
        "fused_logits_only": lambda: indexer_fused.logits(inputs, length, block_l=bl,
                                                          num_warps=nw),
        "fused_fp8_logits_only": lambda: indexer_fused.logits(
            inputs, length, operand="fp8", block_l=bl, num_warps=nw),
        "topk_only": lambda: select_topk(ref_logits, k),
    }
    ref_logits = indexer_fused.logits(inputs, length, block_l=bl, num_warps=nw)
    row["timings"] = time_all(fns, iters, deadline, row["floor_ms"])
    RESULTS["indexer"].append(row)


def bench_mhc(t: int, c: int, bw: float, iters: int, deadline: float) -> None:
    from numcheck.ops import mhc_fused

    n = 4
    p = mhc.OP.resolve_params(None, {"tokens": t, "hidden": c, "hc_mult": n})
    inputs = mhc_inputs(t, c, n)
    x_bytes = t * n * c * 2
    row: dict[str, Any] = {"shape": f"mHC pre T={t} hc_fn [24, {n * c}]", "T": t, "C": c,
                           "floor_bytes": x_bytes, "floor_ms": x_bytes / bw * 1e3,
                           # y needs pre, which needs the whole projection: x is read twice
                           # and y written once by any implementation that cannot hold x.
                           "two_pass_floor_ms": (2 * x_bytes + t * c * 2) / bw * 1e3}
    ref = mhc.fp32(inputs, p)
    acc = {}
    for label, fn in (("fused", lambda: mhc_fused.mhc_pre(inputs, p)),
                      ("fused_tf32", lambda: mhc_fused.mhc_pre(inputs, p, mode="tf32")),
                      ("bf16", lambda: mhc.bf16(inputs, p)),
                      ("tf32", lambda: mhc.tf32(inputs, p))):
        out = fn()
        acc[label] = {name: rel_fro(out[name].float(), ref[name].float()) for name in ref}
    row["accuracy_vs_fp32"] = acc
    del ref
    fns: dict[str, Callable[[], Any]] = {
        "fp32": lambda: mhc.fp32(inputs, p),
        "bf16": lambda: mhc.bf16(inputs, p),
        "bf16_roundtrip": lambda: mhc.bf16_roundtrip(inputs, p),
        "tf32": lambda: mhc.tf32(inputs, p),
        "fused": lambda: mhc_fused.mhc_pre(inputs, p),
        "fused_tf32": lambda: mhc_fused.mhc_pre(inputs, p, mode="tf32"),
    }
    row["timings"] = time_all(fns, iters, deadline, row["floor_ms"])
    if DEVICE == "cuda":  # the profiler's CUDA times
        row["fused_kernels"] = guarded("mhc profile", lambda: kernel_breakdown(
            lambda: mhc_fused.mhc_pre(inputs, p)))
    RESULTS["mhc"].append(row)


def time_all(fns: dict[str, Callable[[], Any]], iters: int, deadline: float,
             floor_ms: float) -> dict[str, Any]:
    raw: dict[str, np.ndarray] = {}
    out: dict[str, Any] = {}
    for name, fn in fns.items():
        if time.monotonic() > deadline:
            out[name] = {"skipped": "time budget"}
            continue
        try:
            raw[name] = time_ms(fn, iters)
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            empty_cache()
            continue
        out[name] = stats(raw[name])
        out[name]["pct_of_floor"] = 100.0 * floor_ms / out[name]["median_ms"]
        log(f"  {name:24s} {out[name]['median_ms']:.4f} ms (IQR {out[name]['iqr_ms']:.4f})")
    if "fp32" in raw:
        for name, ms in raw.items():
            s, lo, hi = speedup_ci(raw["fp32"], ms)
            out[name]["speedup_vs_fp32"] = s
            out[name]["speedup_ci95"] = [lo, hi]
    return out


def kernel_breakdown(fn: Callable[[], Any], reps: int = 10) -> list[dict[str, Any]]:
    """CUDA time per kernel name over ``reps`` calls (torch.profiler), per call."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        cuda_us = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if cuda_us:
            rows.append({"kernel": ev.key[:90], "us_per_call": cuda_us / reps,
                         "calls_per_call": ev.count / reps})
    return sorted(rows, key=lambda r: -r["us_per_call"])[:8]


# -- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    global DEVICE, TINY
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget-s", type=float, default=210.0, help="stop starting new work after")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    choices=("cpu", "cuda"))
    ap.add_argument("--tiny", action="store_true", help="tiny shapes: the CPU plumbing test")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/numcheck-out")))
    args = ap.parse_args(argv)
    DEVICE, TINY = args.device, args.tiny
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = T0 + args.budget_s
    if DEVICE not in triton_support.DEVICES or (DEVICE == "cuda"
                                                and not torch.cuda.is_available()):
        log(f"no fused on {DEVICE} here: {triton_support.unavailable_reason()}")
        return 2
    import triton

    from numcheck.devices import device_name

    RESULTS["env"] = {"device": device_name(DEVICE, cpu_model=True), "torch": torch.__version__,
                      "cuda": torch.version.cuda, "triton": triton.__version__, "tiny": TINY}
    log(f"env {RESULTS['env']}")
    guarded("shipped checks", run_shipped_checks)
    bw = guarded("copy bandwidth", copy_bandwidth) or 4.0e12
    RESULTS["copy_bandwidth_GBps"] = bw / 1e9
    log(f"copy bandwidth {bw / 1e9:.0f} GB/s (read + write)")
    iters = min(args.iters, 3) if TINY else args.iters
    for length in (256,) if TINY else (8192, 65536):
        if time.monotonic() < deadline:
            log(f"indexer L={length}")
            guarded(f"indexer L={length}", lambda L=length: bench_indexer(L, bw, iters,
                                                                          deadline))
            empty_cache()
    for t, c in ((16, 64),) if TINY else ((4096, 7168), (4096, 4096)):
        if time.monotonic() < deadline:
            log(f"mhc C={c}")
            guarded(f"mhc C={c}", lambda t=t, c=c: bench_mhc(t, c, bw, iters, deadline))
            empty_cache()
    RESULTS["wall_s"] = time.monotonic() - T0
    (args.out / "fused_roofline.json").write_text(json.dumps(RESULTS, indent=2, default=str))
    print_table()
    return 1 if RESULTS["errors"] else 0


def print_table() -> None:
    print("\n== fused variants on", RESULTS.get("env", {}).get("device"), "==")
    for c in RESULTS["checks"]:
        print(f"check {c['case']:40s} {'PASS' if c['passed'] else 'FAIL'}  "
              f"rel_fro={c.get('rel_fro')}  worst={c.get('worst')}")
    print(f"copy bandwidth: {RESULTS.get('copy_bandwidth_GBps', 0):.0f} GB/s")
    head = f"{'shape':44s} {'variant':22s} {'median ms':>10s} {'IQR':>8s} {'%floor':>7s} " \
           f"{'x fp32 [95% CI]':>22s}"
    print(head)
    for row in RESULTS["indexer"] + RESULTS["mhc"]:
        for name, s in row.get("timings", {}).items():
            if "median_ms" not in s:
                print(f"{row['shape']:44s} {name:22s} {str(s)[:40]}")
                continue
            ci = s.get("speedup_ci95", [float("nan")] * 2)
            print(f"{row['shape']:44s} {name:22s} {s['median_ms']:10.4f} {s['iqr_ms']:8.4f} "
                  f"{s['pct_of_floor']:6.1f}% {s.get('speedup_vs_fp32', float('nan')):6.2f}x "
                  f"[{ci[0]:.2f}, {ci[1]:.2f}]")
        print(f"{row['shape']:44s} floor {row['floor_ms']:.4f} ms"
              + (f", two-pass floor {row['two_pass_floor_ms']:.4f} ms"
                 if "two_pass_floor_ms" in row else ""))
        for name, a in row.get("accuracy_vs_fp32", {}).items():
            print(f"{row['shape']:44s} accuracy {name}: "
                  + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in a.items()))
    if RESULTS["errors"]:
        print("errors:", "; ".join(e["where"] + ": " + e["error"][:120]
                                   for e in RESULTS["errors"]))


if __name__ == "__main__":
    sys.exit(main())
