"""The fused Triton variants: right against the FP32 reference, and caught when wrong.

Runs wherever this process can run Triton kernels: on a machine without CUDA, under Triton's
interpreter (numcheck switches it on before importing triton; docs/fused.md says what that
run covers), on a GPU machine compiled on CUDA. Shapes are tiny so the interpreter is fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck.check.against_golden import run_numerics
from numcheck.check.run import CaseInputs
from numcheck.inputs import to_device
from numcheck.ops import indexer, mhc, triton_support
from numcheck.ops.registry import Variant, add_variant, get_op
from numcheck.selftest import shipped_golden
from tests.fresh import FreshPython
from tests.shipped import shipped_cases

ROOT = Path(__file__).resolve().parent.parent
get_op("indexer")  # loads the ops, which runs the Triton probe before anything imports triton

needs_triton = pytest.mark.skipif(
    not triton_support.DEVICES, reason=triton_support.unavailable_reason() or "no device"
)
DEVICE = triton_support.DEVICES[0] if triton_support.DEVICES else "cpu"


def _rel_fro(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def test_interpreter_bf16_dot_claim_is_why_operands_are_upcast() -> None:
    # The reason for EMULATE, pinned: Triton's interpreter multiplies bf16 operands as raw
    # integers. If a future triton fixes this, the interpreter could test the bf16 path.
    if triton_support.TRITON_MISSING:
        pytest.skip(triton_support.TRITON_MISSING)
    if not triton_support.INTERPRETED:
        pytest.skip("this process compiles Triton kernels (CUDA); the claim is about the "
                    "interpreter")
    import triton
    import triton.language as tl

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        offs = r[:, None] * N + r[None, :]
        tl.store(c_ptr + offs, tl.dot(tl.load(a_ptr + offs), tl.load(b_ptr + offs)))

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=gen).to(torch.float8_e4m3fn).float()
    b = torch.randn(16, 16, generator=gen).to(torch.float8_e4m3fn).float()
    exact = a.double() @ b.double()
    out = torch.empty(16, 16)
    dot[(1,)](a, b, out, 16)  # fp32 operands: exact for e4m3 values
    assert torch.equal(out.double(), exact)
    dot[(1,)](a.bfloat16(), b.bfloat16(), out, 16)  # bf16 operands: not even close
    assert (out.double() - exact).abs().max() > 1e3


# -- indexer -------------------------------------------------------------------------------

INDEXER_SHAPES = {
    "decode": {"batch": 3, "heads": 16, "head_dim": 32, "max_context": 300,
               "min_context": 40, "index_topk": 64},
    # next_n = 2 with a context shorter than one tile: rows see 1 and 2 tokens.
    "mtp2-short": {"batch": 3, "next_n": 2, "heads": 16, "head_dim": 32, "max_context": 257,
                   "min_context": 2, "index_topk": 32},
    "contiguous": {"batch": 2, "heads": 16, "head_dim": 32, "max_context": 130,
                   "shuffle_pages": False, "block_size": 16, "index_topk": 16},
}


@needs_triton
@pytest.mark.parametrize("name", sorted(INDEXER_SHAPES))
@pytest.mark.parametrize("operand", ["bf16", "fp8", "fp32"])
def test_indexer_fused_matches_reference(name: str, operand: str) -> None:
    from numcheck.ops import indexer_fused

    p = indexer.OP.resolve_params(None, INDEXER_SHAPES[name])
    inputs = indexer.make_inputs(p, seed=1)
    ref = indexer.fp32(inputs, p)
    got = indexer_fused.logits(to_device(inputs, DEVICE), p["max_context"], operand=operand)
    want = ref["logits"]
    assert got.shape == want.shape and got.dtype == torch.float32
    # The -inf mask must match exactly; finite logits to fp32 accuracy.
    assert torch.equal(torch.isneginf(got.cpu()), torch.isneginf(want))
    finite = torch.isfinite(want)
    assert _rel_fro(got.cpu()[finite], want[finite]) < 1e-6


@needs_triton
def test_indexer_fused_any_tile_gives_the_same_logits() -> None:
    from numcheck.ops import indexer_fused

    p = indexer.OP.resolve_params(None, INDEXER_SHAPES["decode"])
    inputs = to_device(indexer.make_inputs(p, seed=2), DEVICE)
    a = indexer_fused.logits(inputs, p["max_context"], block_l=16)
    b = indexer_fused.logits(inputs, p["max_context"], block_l=256)
    assert torch.equal(a, b)


#: Compiles mhc_fused's y kernel (``y += pre * x``) for sm_90 with numcheck's launch options
#: and, as the control, with fusion asked off; prints whether each PTX has an fp32 FMA.
_COMPILE_Y_KERNEL = r"""
import json
from numcheck.ops import mhc_fused, triton_support
from tests.sm90 import sm90_ptx

signature = {"x_ptr": "*i16", "pre_ptr": "*fp32", "y_ptr": "*bf16", "T": "i32", "C": "i32",
             "N": "constexpr", "BLOCK_T": "constexpr", "BLOCK_C": "constexpr"}
constants = {"N": 4, "BLOCK_T": 16, "BLOCK_C": 256}
try:
    fma = {name: "fma.rn.f32" in sm90_ptx(mhc_fused._y_kernel, signature, constants,
                                          options=options)
           for name, options in (("launch", triton_support.GPU_LAUNCH),
                                 ("off", {"enable_fp_fusion": False}))}
except RuntimeError as exc:  # no ptxas in this triton install
    fma = {"skip": str(exc)}
print(json.dumps(fma))
"""


@pytest.mark.slow  # a fresh interpreter with Triton compiling, not interpreting (tests/fresh.py)
def test_the_kernels_contract_to_fma_as_measured_whatever_tritons_default(
        tmp_path: Path, fresh_python: FreshPython) -> None:
    """Under Triton 3.10's announced default (TRITON_DEFAULT_FP_FUSION=0), numcheck's launch
    options still compile the fused kernels' multiply-adds to one FMA each, as when their
    budgets were measured; with fusion asked off (the control) they are two roundings. In a
    fresh interpreter with the interpreter off (here: no GPU needed to compile for sm_90)."""
    if triton_support.TRITON_MISSING:
        pytest.skip(triton_support.TRITON_MISSING)
    proc = fresh_python.run(_COMPILE_Y_KERNEL, cwd=tmp_path, path=[ROOT],
                            env={"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fma = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in fma:
        pytest.skip(f"triton cannot compile for sm_90 here: {fma['skip']}")
    assert fma == {"launch": True, "off": False}


def test_indexer_fused_rejects_an_unknown_operand() -> None:
    if not triton_support.DEVICES:
        pytest.skip(triton_support.unavailable_reason())
    from numcheck.ops import indexer_fused

    p = indexer.OP.resolve_params(None, INDEXER_SHAPES["decode"])
    with pytest.raises(ValueError, match="operand must be one of"):
        indexer_fused.logits(indexer.make_inputs(p, 0), p["max_context"], operand="fp16")


# -- mHC pre -------------------------------------------------------------------------------

MHC_SHAPES = {
    "ragged": {"tokens": 5, "hidden": 96, "sinkhorn_iters": 20},  # T and n*C off every tile size
    "one-iter": {"tokens": 17, "hidden": 64, "sinkhorn_iters": 1},
}


@needs_triton
@pytest.mark.parametrize("name", sorted(MHC_SHAPES))
@pytest.mark.parametrize(("mode", "limit"), [("bf16x2", 1e-5), ("ieee", 1e-6), ("tf32", 2e-3)])
def test_mhc_fused_matches_reference(name: str, mode: str, limit: float) -> None:
    from numcheck.ops import mhc_fused

    p = mhc.OP.resolve_params(None, MHC_SHAPES[name])
    inputs = mhc.make_inputs(p, seed=3)
    ref = mhc.fp32(inputs, p)
    got = mhc_fused.mhc_pre(to_device(inputs, DEVICE), p, mode=mode)
    for name_ in ("mixes", "pre", "post", "comb"):
        assert got[name_].dtype == torch.float32
        assert _rel_fro(got[name_], ref[name_]) < limit, name_
    assert got["y"].dtype == torch.bfloat16
    assert _rel_fro(got["y"], ref["y"]) < 2e-3  # y is bf16: a few 1-ulp flips at most


@needs_triton
@pytest.mark.parametrize("split", [1, 2, 3])
def test_mhc_fused_split_over_nc_sums_the_same(split: int) -> None:
    from numcheck.ops import mhc_fused

    p = mhc.OP.resolve_params(None, {"tokens": 6, "hidden": 1536})
    inputs = to_device(mhc.make_inputs(p, seed=4), DEVICE)
    whole = mhc_fused.mhc_pre(inputs, p, mode="ieee", split=1)
    parts = mhc_fused.mhc_pre(inputs, p, mode="ieee", split=split)
    for name in ("mixes", "pre", "post", "comb"):
        # Same sums in another order: fp32 reassociation (1.9e-6 seen on the H200).
        assert _rel_fro(parts[name], whole[name]) < 1e-5


@needs_triton
def test_mhc_fused_rounds_hc_fn_to_nearest_like_torch() -> None:
    # mode="bf16" rounds hc_fn to bf16 in the kernel, by integer arithmetic; torch rounds it
    # to nearest even. Equal roundings leave only fp32 summation order between the kernel
    # and a float64 product with torch's rounding (truncation would give ~1e-3).
    from numcheck.ops import mhc_fused

    p = mhc.OP.resolve_params(None, {"tokens": 8, "hidden": 512})
    inputs = mhc.make_inputs(p, seed=5)
    got = mhc_fused.mhc_pre(to_device(inputs, DEVICE), p, mode="bf16")
    x = inputs["x"].flatten(1).double()
    w = inputs["hc_fn"].bfloat16().double()
    want = (x @ w.T) * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + p["eps"])
    assert _rel_fro(got["mixes"], want) < 1e-6


# -- the shipped gate holds fused to budgets a downgrade or a bug cannot meet ----------------


def _shipped(key: str):  # type: ignore[no-untyped-def]
    cases = {f"{c.op}::{c.id}": c for c in shipped_cases()}
    case = cases[key]
    golden, _ = shipped_golden(case, ROOT / "goldens")
    return case, golden


def _bad_mhc_bf16(inputs, p):  # type: ignore[no-untyped-def]
    from numcheck.ops import mhc_fused

    return mhc_fused.mhc_pre(inputs, p, mode="bf16")  # a silent downgrade to bf16 hc_fn


def _bad_indexer_stale_page(inputs, p):  # type: ignore[no-untyped-def]
    from numcheck.numerics.topk import select_topk
    from numcheck.ops import indexer_fused

    # Every request reads its pages one slot late in the block table: a paging bug.
    shifted = dict(inputs, block_table=torch.roll(inputs["block_table"], 1, dims=1))
    logits = indexer_fused.logits(shifted, p["max_context"])
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


@needs_triton
@pytest.mark.parametrize(
    ("key", "fn", "metrics"),
    [
        ("mhc_pre::v4pro-t32", _bad_mhc_bf16, {"mixes.rel_fro", "comb.rel_fro"}),
        ("indexer::v4flash-b2-l1k-contiguous", _bad_indexer_stale_page,
         {"logits.rel_fro", "topk.tie_recall_min"}),
    ],
    ids=["mhc-bf16-downgrade", "indexer-stale-page"],
)
def test_fused_budget_fails_a_bad_fused_variant(
    key: str, fn: Callable[..., Any], metrics: set[str]
) -> None:
    case, golden = _shipped(key)
    op = get_op(case.op)
    fused = op.variants["fused"]
    op = add_variant(case.op, Variant("bad", fn, fused.precision, devices=fused.devices))
    case = replace(case, budgets={**case.budgets, "bad": case.budgets["fused"]})
    result = run_numerics(op, case, "bad", DEVICE, golden, CaseInputs(op, case))
    assert not result.passed
    found = {f"{v.output}.{v.metric}" for v in result.violations}
    assert metrics <= found, found


@needs_triton
def test_mhc_fused_budget_is_tighter_than_tf32() -> None:
    case, _ = _shipped("mhc_pre::v4pro-t32")
    for output in ("mixes", "pre", "post", "comb", "y"):
        fused, tf32 = case.budgets["fused"].outputs[output], case.budgets["tf32"].outputs[output]
        assert fused.limits["rel_fro"] <= tf32.limits["rel_fro"], output


# -- without triton ------------------------------------------------------------------------


@pytest.mark.slow  # a fresh interpreter (tests/fresh.py) running a pytest session
def test_without_triton_the_fused_items_skip_with_the_reason(
    tmp_path: Path, fresh_python: FreshPython,
) -> None:
    # A `triton` package that fails to import stands in for an install without it.
    fake = tmp_path / "triton"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named triton (test)')\n")
    # `python -m pytest ...` in a fresh interpreter (triton not imported, nor numcheck).
    proc = fresh_python.run(
        "import sys, pytest; sys.exit(pytest.console_main())",
        ["--numcheck", "-q", "-rs", "-p", "no:cacheprovider", "-k", "fused and contiguous",
         "cases/indexer.toml"],
        cwd=ROOT, path=[tmp_path, ROOT], env={"TRITON_INTERPRET": None},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout, proc.stdout
    assert "variant 'fused': triton not installed" in proc.stdout, proc.stdout


def test_indexer_fused_refuses_prefill_shapes_with_a_reason() -> None:
    try:
        from numcheck.ops import indexer_fused
    except ImportError as exc:  # the kernels' module needs triton (the [fused] extra)
        pytest.skip(f"triton not installed: {exc}")

    p = indexer.OP.resolve_params("v4flash", {"batch": 1, "next_n": 8, "max_context": 128})
    with pytest.raises(ValueError, match="query rows exceed the kernel's 256"):
        indexer_fused.fused({}, p)
