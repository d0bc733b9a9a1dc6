"""Members derived from an op's GEMM site: the variants, the rounding envelope, and members
run once where they provably compute the same."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import numcheck
from numcheck.cases import Case, load_case_file
from numcheck.check.against_golden import run_numerics
from numcheck.check.make_golden import fresh_golden
from numcheck.check.run import CaseInputs
from numcheck.honest.gemm_family import (
    MemberRuns,
    add_gemm_members,
    envelope_members,
    member_fn,
    member_name,
    member_variants,
)
from numcheck.honest.gemm_impls import EmulatedGemm, GemmImpl, honest_gemms
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import (
    Inputs,
    OpSpec,
    Outputs,
    Params,
    ParamSpec,
    RegistrationError,
    Variant,
    get_op,
)
from numcheck.ops.spec import Gemm
from numcheck.ops.splitk import split_k_matmul

INDEXER = {"batch": 2, "next_n": 1, "heads": 8, "head_dim": 64, "block_size": 16,
           "max_context": 96, "min_context": 0, "index_topk": 16, "shuffle_pages": True,
           "near_ties": 0.0, "scale_fmt": "amax448"}
MHC = {"tokens": 8, "hc_mult": 4, "hidden": 256, "sinkhorn_iters": 20, "eps": 1e-6,
       "norm_eps": 1e-6, "hc_eps": 1e-6}


def _impl(label: str) -> GemmImpl:
    return next(g for g in honest_gemms() if g.label == label)


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fp32 GEMM the emulated members compute, by recipe."""
    done: list[str] = []
    real = EmulatedGemm.product

    def product(self: EmulatedGemm, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        done.append(self.recipe.operands)
        return real(self, a, b)

    monkeypatch.setattr(EmulatedGemm, "product", product)
    return done


def test_members_are_the_op_with_each_honest_gemm() -> None:
    names = [v.name for v in member_variants(mhc.OP, ["tf32"])]
    assert names == [member_name(g) for g in honest_gemms() if g.precision == "tf32"]
    assert "gemm_tf32_trunc" in names and "gemm_cublas_tf32" in names
    cuda_only = next(v for v in member_variants(mhc.OP, ["tf32"]) if v.name == "gemm_cublas_tf32")
    assert cuda_only.devices == ("cuda",) and cuda_only.precision == "tf32"
    inputs = mhc.make_inputs(MHC, 0)
    out = member_fn(mhc.OP, _impl("tf32_rn"))(inputs, MHC)
    assert torch.equal(out["mixes"], mhc.gemm_site(inputs, MHC, _impl("tf32_rn").fn)["mixes"])
    # The site with an IEEE fp32 GEMM is the op's reference up to the order of the fp32 sums.
    ref = mhc.fp32(inputs, MHC)
    assert torch.allclose(member_fn(mhc.OP, _impl("fp32"))(inputs, MHC)["mixes"], ref["mixes"],
                          rtol=1e-5, atol=1e-6)
    # ... and truncated TF32 is further from it than TF32 rounded to nearest.
    err = {m: float((member_fn(mhc.OP, _impl(m))(inputs, MHC)["mixes"] - ref["mixes"]).norm())
           for m in ("tf32_rn", "tf32_trunc")}
    assert 0 < err["tf32_rn"] < err["tf32_trunc"]


def test_an_op_without_a_gemm_site_has_no_members() -> None:
    op = replace(mhc.OP, gemm_site=None)
    assert member_variants(op) == [] and envelope_members(op, "tf32", "cpu") == []
    with pytest.raises(ValueError, match="declares no gemm_site.*Fix: give OpSpec"):
        member_fn(op, _impl("tf32_rn"))


def test_e4m3_operands_make_the_tf32_and_fp32_members_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The indexer's operands are e4m3: exact in TF32 and bf16. Rounded, truncated and fp32
    operands are the same values, so one GEMM serves every such member, and the outputs
    are those a full run of each gives, bit for bit."""
    inputs = indexer.make_inputs(INDEXER, 0)
    runs = MemberRuns(indexer.OP, inputs, INDEXER)
    done = _counted(monkeypatch)
    first = runs.outputs(_impl("tf32_rn"))
    for label in ("tf32_trunc", "bf16_fp32out", "fp32"):
        assert runs.outputs(_impl(label)) is first
    assert done == ["tf32_rn"]  # one GEMM for four members
    runs.outputs(_impl("bf16_out"))  # another output format: its own run
    runs.outputs(_impl("tf32_trunc_kblocks"))  # another accumulation: its own run
    assert len(done) == 3
    for label in ("tf32_trunc", "bf16_fp32out"):
        full = member_fn(indexer.OP, _impl(label))(inputs, INDEXER)
        assert all(torch.equal(full[k], first[k]) for k in first)


def test_members_whose_rounding_changes_the_operands_each_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """mHC's hc_fn is fp32: rounding and truncating it give other operands, other runs."""
    inputs = mhc.make_inputs(MHC, 0)
    runs = MemberRuns(mhc.OP, inputs, MHC)
    done = _counted(monkeypatch)
    rn, trunc = runs.outputs(_impl("tf32_rn")), runs.outputs(_impl("tf32_trunc"))
    assert done == ["tf32_rn", "tf32_trunc"] and not torch.equal(rn["mixes"], trunc["mixes"])
    assert runs.outputs(_impl("tf32_rn")) is rn  # asked again: kept


def test_a_site_that_catches_exceptions_still_runs_a_member_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def site(inputs: Inputs, p: Params, gemm: Gemm) -> Outputs:
        try:
            return indexer.gemm_site(inputs, p, gemm)
        except Exception:  # noqa: BLE001 - a user's site may do this
            raise AssertionError("the member's early stop reached the site") from None

    op = replace(indexer.OP, gemm_site=site)
    runs = MemberRuns(op, indexer.make_inputs(INDEXER, 0), INDEXER)
    done = _counted(monkeypatch)
    assert runs.outputs(_impl("tf32_rn")) is runs.outputs(_impl("tf32_trunc"))
    assert len(done) == 1


def _case(tmp_path: Path, text: str) -> Case:
    path = tmp_path / "cases.toml"
    path.write_text(text)
    (case,) = load_case_file(path)
    return case


def test_the_tf32_envelope_rounds_on_the_cpu(tmp_path: Path) -> None:
    """On a CPU the shipped tf32 variant computes IEEE fp32; its envelope is TF32 emulated
    (rounded and truncated operands): a real TF32 error, not the exactness floor."""
    case = _case(tmp_path, '[tiny]\nop = "mhc_pre"\nshape = { tokens = 8, hidden = 256 }\n'
                 'variants = ["tf32"]\n')
    golden, inputs = fresh_golden(mhc.OP, case)
    result = run_numerics(mhc.OP, case, "tf32", "cpu", golden, inputs)
    mixes = result.seeds[0].metrics["mixes"]
    assert mixes.max_abs < 1e-5 < mixes.honest_max_abs  # fp32 here, TF32 in the envelope
    assert {g.label for g in envelope_members(mhc.OP, "tf32", "cpu")} == {"tf32_rn", "tf32_trunc"}
    alone = run_numerics(replace(mhc.OP, gemm_site=None), case, "tf32", "cpu", golden,
                         CaseInputs(mhc.OP, case))
    assert alone.seeds[0].metrics["mixes"].honest_max_abs == 0.0  # the reference alone: exact


def test_each_class_envelope_is_made_once_per_seed_for_every_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case's inputs keep each class's envelope: a second bf16 variant runs no member,
    and a tf32 variant runs TF32's two while its bf16-stored y reuses bf16's three."""
    case = _case(tmp_path, '[tiny]\nop = "mhc_pre"\nshape = { tokens = 8, hidden = 256 }\n'
                 'variants = ["bf16", "bf16_roundtrip", "tf32"]\n')
    golden, inputs = fresh_golden(mhc.OP, case)
    done = _counted(monkeypatch)
    run_numerics(mhc.OP, case, "bf16", "cpu", golden, inputs)
    assert done == ["bf16", "bf16", "bf16"]  # bf16_out, its split-2 and split-4-tree twins
    run_numerics(mhc.OP, case, "bf16_roundtrip", "cpu", golden, inputs)
    assert len(done) == 3
    run_numerics(mhc.OP, case, "tf32", "cpu", golden, inputs)
    assert done[3:] == ["tf32_rn", "tf32_trunc"]
    # other inputs: anew
    run_numerics(mhc.OP, case, "tf32", "cpu", golden, CaseInputs(mhc.OP, case))
    assert done[5:] == ["tf32_rn", "tf32_trunc", "bf16", "bf16", "bf16"]


# -- a user's op: declare the GEMM site, get the members and the envelope --------------------


def _gelu_inputs(p: Params, seed: int) -> Inputs:
    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(p["rows"], 96, generator=gen),
            "w": torch.randn(96, 32, generator=gen) / 10}


def _gelu_site(inputs: Inputs, p: Params, gemm: Gemm) -> Outputs:
    return {"y": torch.nn.functional.gelu(gemm(inputs["x"], inputs["w"]))}


def _gelu_fp32(inputs: Inputs, p: Params) -> Outputs:
    with numcheck.matmul_precision(tf32=False):
        return {"y": torch.nn.functional.gelu(inputs["x"] @ inputs["w"])}


def _gelu_bf16(inputs: Inputs, p: Params) -> Outputs:
    y = inputs["x"].to(torch.bfloat16) @ inputs["w"].to(torch.bfloat16)
    return {"y": torch.nn.functional.gelu(y.float())}


def _gelu_op(**kw: object) -> OpSpec:
    return OpSpec(name="gelu_proj", version=1, reference="fp32",
                  variants={"fp32": Variant("fp32", _gelu_fp32, "fp32"),
                            "bf16": Variant("bf16", _gelu_bf16, "bf16")},
                  make_inputs=_gelu_inputs, outputs=("y",),
                  params={"rows": ParamSpec(int, 16, "rows", min=1)}, **kw)  # type: ignore[arg-type]


def test_a_users_op_that_declares_its_gemm_gets_members_and_an_envelope(tmp_path: Path) -> None:
    numcheck.register(_gelu_op(gemm_site=_gelu_site))
    names = add_gemm_members("gelu_proj", ["bf16"])
    assert "gemm_bf16_out_split2" in names and set(names) <= set(get_op("gelu_proj").variants)
    assert add_gemm_members("gelu_proj", ["bf16"]) == names  # registered once
    op = get_op("gelu_proj")
    case = _case(tmp_path, '[t]\nop = "gelu_proj"\nseeds = [3]\nvariants = ["bf16"]\n')
    golden, inputs = fresh_golden(op, case)
    result = run_numerics(op, case, "bf16", "cpu", golden, inputs)
    y = result.seeds[0].metrics["y"]
    assert y.measured("max_err_ratio") and 0 < y.max_err_ratio <= 1.0  # no rounding_reference
    assert not result.violations, result.violations
    without = run_numerics(replace(op, gemm_site=None), case, "bf16", "cpu", golden,
                           CaseInputs(op, case))
    assert not without.seeds[0].metrics["y"].measured("max_err_ratio")


def test_a_gemm_site_must_take_the_gemm() -> None:
    with pytest.raises(RegistrationError,
                       match=r"gemm_site: .* cannot be called as .*\(inputs, params, gemm\)"):
        numcheck.register(_gelu_op(gemm_site=lambda inputs, params: {}))


def _gelu_split2(inputs: Inputs, p: Params) -> Outputs:
    y = split_k_matmul(inputs["x"].to(torch.bfloat16), inputs["w"].to(torch.bfloat16), 2,
                       tree=False)
    return {"y": torch.nn.functional.gelu(y)}


def test_an_op_naming_its_own_envelope_keeps_it(tmp_path: Path) -> None:
    """rounding_reference and rounding_alternatives, without a GEMM site, still make the
    envelope: the worst of the reference and each alternative on the same inputs."""
    numcheck.register(_gelu_op(rounding_reference={"bf16": "bf16"},
                               rounding_alternatives={"bf16": {"split2": _gelu_split2}}))
    op = get_op("gelu_proj")
    case = _case(tmp_path, '[t]\nop = "gelu_proj"\nseeds = [3]\nvariants = ["bf16"]\n')
    golden, inputs = fresh_golden(op, case)
    result = run_numerics(op, case, "bf16", "cpu", golden, inputs)
    x = inputs.get(3)[0]
    ref = _gelu_fp32(x, case.params)["y"].double()
    worst = max(float((fn(x, case.params)["y"].double() - ref).abs().max())
                for fn in (_gelu_bf16, _gelu_split2))
    assert result.seeds[0].metrics["y"].honest_max_abs == pytest.approx(worst)


def test_every_member_a_family_names_is_registered_whatever_the_order() -> None:
    """Issue 44: a variant declaring float32 sums and a float32 result on DeepSeek's blocks
    has a member the shipped table lacks (gemm_e4m3_block_fp32_fp32acc_fp32out), which its
    failure's calibrate command pools. add_gemm_members registers it when the variant came
    first, and complete_members (the plugin calls it once registration is over) when the
    members were asked for first."""
    from numcheck.calibrate.family import honest_family
    from numcheck.honest.gemm_family import add_gemm_members, complete_members
    from numcheck.ops import registry
    from tests import fp8_mlp

    wanted = "gemm_e4m3_block_fp32_fp32acc_fp32out"
    with registry.isolated():
        registry.register(fp8_mlp.MLP_UP)
        add_gemm_members(fp8_mlp.OP, ["e4m3"])
        assert wanted not in registry.get_op(fp8_mlp.OP).variants
        registry.add_variant(fp8_mlp.OP, fp8_mlp.variant("fp8", fp8_mlp.FP8))
        complete_members()
        op = registry.get_op(fp8_mlp.OP)
        assert wanted in op.variants
        from numcheck.cases import _parse_case, _Where

        case = _parse_case(_Where(Path("cases/x.toml"), "c"), {
            "op": fp8_mlp.OP, "variants": ["fp8"]}, registry.get_op)
        family = honest_family(op, case, "fp8", "cpu")
        assert wanted in family.members and family.unregistered == ()
        assert all(m in op.variants for m in family.members)
