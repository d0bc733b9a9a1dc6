"""Input distributions (numcheck/distributions): what each draws, that it is seeded and
device-independent, that the shipped ops draw every one, that a case names one (and is
refused one its op does not draw), that its golden pins it, and that a case off the default
inputs must set its own budgets."""

from __future__ import annotations

import importlib.util
import math
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from numcheck.cases import CaseFileError, load_case_file
from numcheck.distributions import (
    DISTRIBUTIONS,
    INPUTS_PARAM,
    OUTLIER_SCALE,
    activations,
    input_distribution,
)
from numcheck.inputs import rng
from numcheck.numerics.budget_origin import lender_of
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import OpSpec, RegistrationError, Variant, isolated, register

ROOT = Path(__file__).resolve().parent.parent


def draw(name: str, shape: tuple[int, ...] = (64, 512), **kw: object) -> torch.Tensor:
    return activations(rng(7, "x"), shape, name, **kw)  # type: ignore[arg-type]


def test_llm_activations_have_outlier_channels_and_a_per_token_spread() -> None:
    x = draw("llm", (256, 1024)).double()
    channel_rms = x.square().mean(dim=0).sqrt()
    typical = channel_rms.median()
    outliers = channel_rms > 20 * typical
    # A few channels (one per 256, at least two), each 50-100x the rest.
    assert int(outliers.sum()) == 4
    ratio = channel_rms[outliers] / typical
    assert float(ratio.min()) > 0.7 * OUTLIER_SCALE[0] and float(ratio.max()) < 1.5 * OUTLIER_SCALE[1]
    token_rms = x[:, ~outliers].square().mean(dim=1).sqrt().log()
    assert 0.8 < float(token_rms.std()) < 1.2  # log-normal magnitudes, sigma 1


def test_near_max_values_sit_just_under_the_largest() -> None:
    x = draw("near_max", dtype=torch.bfloat16).abs()
    top = torch.finfo(torch.bfloat16).max
    assert float(x.min()) >= 0.5 * top and float(x.max()) <= top
    assert torch.isfinite(x.to(torch.bfloat16)).all()
    assert float(draw("near_max", largest=3.0).abs().max()) <= 3.0


def test_zero_rows_are_exactly_zero_and_a_quarter_of_the_rows() -> None:
    x = draw("zero_rows", (40, 16))
    zero = (x == 0).all(dim=1)
    assert int(zero.sum()) == 10 and bool((x[~zero] != 0).any(dim=1).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float16])
def test_subnormal_values_stay_subnormal_in_their_format(dtype: torch.dtype) -> None:
    x = draw("subnormal", dtype=dtype)
    stored = x.to(dtype).float().abs()
    info = torch.finfo(dtype)
    assert float(stored.max()) <= info.smallest_normal
    assert float((stored > 0).float().mean()) > 0.95  # not flushed to zero


def test_ties_are_exact_and_plentiful() -> None:
    x = draw("ties")
    assert bool(((x / 0.5) == (x / 0.5).round()).all())
    assert len(torch.unique(x)) <= 17


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_draws_are_seeded_and_the_same_bytes_every_time(name: str) -> None:
    assert torch.equal(draw(name), draw(name))
    assert not torch.equal(draw(name), activations(rng(8, "x"), (64, 512), name))


def test_an_unknown_distribution_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown input distribution 'gaussian'"):
        draw("gaussian")


def _params(op: OpSpec, **over: object) -> dict[str, object]:
    return {**{n: s.default for n, s in op.params.items()}, **over}


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_the_shipped_ops_draw_every_distribution_with_a_finite_reference(name: str) -> None:
    ix = _params(indexer.OP, batch=2, heads=4, head_dim=32, max_context=192, index_topk=16,
                 **{INPUTS_PARAM: {"distribution": name}})
    out = indexer.fp32(indexer.make_inputs(ix, 0), ix)
    assert not torch.isnan(out["logits"]).any() and not torch.isposinf(out["logits"]).any()
    mp = _params(mhc.OP, tokens=8, hidden=64, **{INPUTS_PARAM: {"distribution": name}})
    inputs = mhc.make_inputs(mp, 0)
    assert all(torch.isfinite(t.float()).all() for t in mhc.fp32(inputs, mp).values())


def test_the_default_draw_is_todays_inputs_byte_for_byte() -> None:
    """A case naming nothing has no INPUTS_PARAM: its inputs (and goldens) are unchanged."""
    p = _params(mhc.OP, tokens=4, hidden=64)
    assert input_distribution(p) == "normal"
    llm = mhc.make_inputs({**p, INPUTS_PARAM: {"distribution": "llm"}}, 0)
    normal = mhc.make_inputs(p, 0)
    assert not torch.equal(llm["x"], normal["x"]) and torch.equal(llm["hc_fn"], normal["hc_fn"])


def test_the_indexer_subnormal_logits_are_made_of_subnormal_products() -> None:
    """Each e4m3 row keeps one full-scale element (its scale would lift the rest out of the
    subnormals otherwise): q's in its first column, each key's in another, so every product
    of q and a key pairs 448 with a subnormal, and flushing the subnormals leaves nothing."""
    p = _params(indexer.OP, batch=1, heads=2, head_dim=32, max_context=64, index_topk=8,
                **{INPUTS_PARAM: {"distribution": "subnormal"}})
    inputs = indexer.make_inputs(p, 0)
    tiny = torch.finfo(torch.float8_e4m3fn).smallest_normal  # values drawn up to it
    q = inputs["q"].float().abs()
    assert bool((q[..., 0] == 448).all()) and bool((q[..., 1:] <= tiny).all())
    assert float((q[..., 1:] < tiny).float().mean()) > 0.9
    keys, _ = indexer.paged_keys(inputs, 64)
    k = keys[0].float().abs()
    full = k == 448
    assert bool((full.sum(dim=-1) == 1).all()) and not bool(full[:, 0].any())
    assert bool((k[~full] <= tiny).all())
    # No product pairs two full-scale elements: each holds a factor of at most 2^-6, and
    # without the subnormals (FTZ) almost nothing is left of any logit.
    products = q[0, 0, 0].unsqueeze(0) * k  # head 0's products with every key
    assert float(products.max()) <= 448 * tiny
    flushed = products.where((q[0, 0, 0] >= tiny) & (k >= tiny), torch.zeros(()))
    assert float(flushed.sum() / products.sum()) < 0.1


def test_mhc_zero_rows_zeroes_whole_tokens() -> None:
    """A padding token is zero in every stream: a quarter of mHC's tokens, at least one."""
    p = _params(mhc.OP, tokens=8, hidden=64, **{INPUTS_PARAM: {"distribution": "zero_rows"}})
    for seed in range(5):
        x = mhc.make_inputs(p, seed)["x"].float()
        zero = (x == 0).flatten(1).all(dim=1)
        assert int(zero.sum()) == 2
        assert bool((x[~zero] != 0).flatten(1).any(dim=1).all())  # no other stream zeroed


def test_near_max_puts_indexer_logits_past_fp16() -> None:
    """Nearly every valid logit lies past fp16's largest finite value: a top-k kept in fp16
    sees infinities, however many tokens it selects."""
    p = _params(indexer.OP, batch=1, max_context=512, index_topk=64,
                **{INPUTS_PARAM: {"distribution": "near_max"}})
    logits = indexer.fp32(indexer.make_inputs(p, 0), p)["logits"]
    valid = logits[torch.isfinite(logits)]
    assert float((valid.abs() > torch.finfo(torch.float16).max).float().mean()) > 0.95
    assert float(valid.abs().max()) < 1e12  # far inside fp32


def test_the_linear_op_draws_each_distribution_with_finite_sums() -> None:
    from numcheck.ops import linear

    base = _params(linear.OP, tokens=8, in_features=256, out_features=64)
    assert not torch.equal(linear.make_inputs(base, 0)["x"], linear.make_inputs(
        {**base, INPUTS_PARAM: {"distribution": "llm"}}, 0)["x"])
    for name in DISTRIBUTIONS:
        p = {**base, INPUTS_PARAM: {"distribution": name}}
        inputs = linear.make_inputs(p, 0)
        assert torch.equal(inputs["w"], linear.make_inputs(base, 0)["w"])  # the weight stays
        exact = inputs["x"].double() @ inputs["w"].double().T
        assert float(exact.abs().max()) < float(torch.finfo(torch.float32).max) / 2
        y = linear.fp32(inputs, p)["y"]
        assert bool(torch.isfinite(y).all()), name
    x = linear.make_inputs({**base, INPUTS_PARAM: {"distribution": "zero_rows"}}, 0)["x"]
    assert int((x == 0).all(dim=1).sum()) == 2
    sub = linear.make_inputs({**base, INPUTS_PARAM: {"distribution": "subnormal"}}, 0)
    tiny = torch.finfo(torch.bfloat16).smallest_normal
    assert bool((sub["x"].float().abs() <= tiny).all())
    y = linear.fp32(sub, {**base, INPUTS_PARAM: {"distribution": "subnormal"}})["y"].float()
    assert float((y != 0).float().mean()) > 0.9 and float(y.abs().max()) < 1e-36


# -- case files ------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_case_names_its_distribution_and_its_params_pin_it(tmp_path: Path) -> None:
    path = write(tmp_path, """
        [ix]
        op = "indexer"
        shape = { batch = 1, heads = 4, head_dim = 32, max_context = 64, index_topk = 8 }
        inputs.distribution = "llm"
        variants = ["bf16"]
        [ix.budget.bf16.logits]
        rel_fro = 0.01
        calc_diff = 1e-4
        frac_outside = 0.01
        max_err_ratio = 2.9
        max_band_ratio = 8
        [ix.budget.bf16.topk]
        recall_min = 0.9
        tie_recall_min = 1
        tie_band_rel = 0.01
    """)
    (case,) = load_case_file(path)
    assert case.inputs.distribution == "llm" and not case.inputs.default
    assert case.params[INPUTS_PARAM] == {"distribution": "llm"}


def test_a_golden_made_for_another_distribution_is_stale(tmp_path: Path) -> None:
    from numcheck.check.make_golden import make_golden
    from numcheck.check.run import CaseInputs
    from numcheck.goldens.case_golden import validate_for_case
    from numcheck.goldens.files import Golden, GoldenStale

    path = write(tmp_path, """
        [m]
        op = "mhc_pre"
        shape = { tokens = 4, hidden = 64 }
        variants = ["bf16"]
    """)
    (normal,) = load_case_file(path)
    tensors, meta = make_golden(mhc.OP, normal, "cpu", CaseInputs(mhc.OP, normal))
    golden = Golden(tmp_path / "g.safetensors", tensors, meta)
    llm = replace(normal, params={**normal.params, INPUTS_PARAM: {"distribution": "llm"}})
    with pytest.raises(GoldenStale, match="parameter inputs"):
        validate_for_case(golden, mhc.OP, llm, fingerprint=CaseInputs(mhc.OP, llm).fingerprint(),
                          regen_hint="regen")


@pytest.mark.parametrize(("inputs", "key", "fragment"), [
    ('inputs.distribution = "gaussian"', "inputs.distribution",
     "unknown input distribution 'gaussian'"),
    ('inputs.distribution = 3', "inputs.distribution", "expected a string"),
    ('inputs.kind = "llm"', "inputs.kind", "unknown key 'kind'"),
    ('inputs = "llm"', "inputs", "expected a table"),
])
def test_bad_inputs_keys_name_the_key_and_the_fix(tmp_path: Path, inputs: str, key: str,
                                                   fragment: str) -> None:
    path = write(tmp_path, f'[m]\nop = "mhc_pre"\n{inputs}\n')
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    assert (info.value.case, info.value.key) == ("m", key)
    assert fragment in str(info.value) and ". Fix: " in str(info.value)


def test_a_distribution_the_op_does_not_draw_is_refused(tmp_path: Path) -> None:
    def make(params: object, seed: int) -> dict[str, torch.Tensor]:
        return {"x": torch.zeros(2)}

    def run(inputs: object, params: object) -> dict[str, torch.Tensor]:
        return {"y": torch.zeros(2)}

    op = OpSpec(name="plainop", version=1, reference="fp32",
                variants={"fp32": Variant("fp32", run, "fp32")}, make_inputs=make,
                outputs=("y",), params={})
    path = write(tmp_path, '[m]\nop = "plainop"\ninputs.distribution = "llm"\n')
    with pytest.raises(CaseFileError) as info:
        load_case_file(path, lookup=lambda name: op)
    assert info.value.key == "inputs.distribution"
    assert "does not draw 'llm' inputs (its input maker draws: normal)" in str(info.value)
    assert "OpSpec(distributions=...)" in info.value.fix


def test_registration_checks_the_distributions_an_op_declares() -> None:
    def make(params: object, seed: int) -> dict[str, torch.Tensor]:
        return {}

    base = OpSpec(name="declares", version=1, reference="fp32", variants={
        "fp32": Variant("fp32", lambda i, p: {}, "fp32")}, make_inputs=make, outputs=("y",),
        params={})
    with isolated():
        with pytest.raises(RegistrationError, match="distributions=.*'normal'"):
            register(replace(base, distributions=("llm",)))
        from numcheck.ops.registry import ParamSpec

        with pytest.raises(RegistrationError, match="parameter 'inputs'"):
            register(replace(base, params={"inputs": ParamSpec(int, 1)}))


def test_a_case_off_the_default_inputs_must_set_its_own_budgets(tmp_path: Path) -> None:
    """Budgets measured on normal inputs need not hold on outliers: the loader refuses to
    complete a limit from the default row, naming the first it would take and the command
    that measures it."""
    text = """
        [m]
        op = "mhc_pre"
        shape = { tokens = 4, hidden = 64 }
        inputs.distribution = "llm"
        variants = ["bf16"]
        [m.budget.bf16]
        mixes = { rel_fro = 0.01 }
    """
    with pytest.raises(CaseFileError) as info:
        load_case_file(write(tmp_path, text))
    err = info.value
    assert (err.case, err.key) == ("m", "budget.bf16.mixes")
    assert "runs on llm inputs, and bf16's limit calc_diff on 'mixes' is not set by the case" \
        in str(err)
    assert "--numcheck-calibrate-write -k m" in err.fix
    # Calibration reads it anyway: it is what writes the tables.
    (case,) = load_case_file(write(tmp_path, text), measuring=True)
    assert case.inputs.distribution == "llm"


SUBNORMAL_CASE = """\
[mhc-subnormal]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
inputs.distribution = "subnormal"
seeds = [0]
variants = ["tf32"]
"""


@pytest.mark.skipif(importlib.util.find_spec("tomlkit") is None,
                    reason="tomlkit (the calibrate extra) writes case files")
def test_a_subnormal_case_calibrates_and_loads_in_one_step(pytester: pytest.Pytester) -> None:
    """On subnormal x, mHC's RMS statistic underflows and every honest member gives the
    sigmoids and y bit for bit: those outputs are exact. Calibration still writes every limit
    the case must set (the headroom rule's floors, each saying so), so the case loads and
    runs after the one command its error names, instead of being refused by that same
    command's fix (a loop)."""
    pytester.makeini("[pytest]\naddopts = --numcheck-device cpu -p no:cacheprovider\n")
    pytester.makeconftest("def pytest_numcheck_register(registry):\n"
                          "    import numcheck\n"
                          "    numcheck.add_gemm_members('mhc_pre', ('tf32',))\n")
    pytester.mkdir("cases")
    path = pytester.path / "cases" / "mhc.toml"
    path.write_text(SUBNORMAL_CASE)
    refused = pytester.runpytest("--numcheck")
    assert "is not set by the case" in refused.stdout.str()
    written = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "--numcheck-calibrate-pool",
                                 "tf32=tf32,gemm_tf32_rn", "--numcheck-calibrate-write",
                                 "-k", "mhc-subnormal")
    assert written.ret == 0, written.stdout.str()
    text = path.read_text()
    pre = text.split("[mhc-subnormal.budget.tf32.pre]", 1)[1].split("\n\n", 1)[0]
    assert "max_band_ratio = 0.01  # 0 on every seed: the headroom rule's floor" in pre
    (case,) = load_case_file(path)  # loads: every limit is the case's own
    assert case.budgets["tf32"].outputs["pre"].limits["max_band_ratio"] == 0.01
    regen = pytester.runpytest("--numcheck", "--numcheck-regen")
    assert regen.ret == 0, regen.stdout.str()
    gate = pytester.runpytest("--numcheck")
    gate.assert_outcomes(passed=2)


def test_the_shipped_distribution_cases_carry_calibrated_tables_for_every_variant() -> None:
    cases = [c for c in load_case_file(ROOT / "cases" / "distributions.toml")]
    assert {c.op for c in cases if c.inputs.distribution == "llm"} == {
        "indexer", "mhc_pre", "linear"}
    assert {(c.op, c.inputs.distribution) for c in cases} >= {
        ("indexer", "subnormal"), ("indexer", "near_max"), ("mhc_pre", "zero_rows"),
        ("linear", "zero_rows"), ("linear", "near_max")}
    for case in cases:
        for variant in case.variants:
            lender = lender_of(case.budgets[variant].origins) or variant
            assert lender in case.provenance, f"{case.id} {variant}: no calibration record"
            assert case.provenance[lender].fresh_seeds >= 20


def test_math_stays_finite_in_near_max_for_the_rms() -> None:
    """near_max for mHC's x stops where the fp32 sum of squares over a token stays finite."""
    p = _params(mhc.OP, tokens=2, hidden=4096)
    x = mhc.make_inputs({**p, INPUTS_PARAM: {"distribution": "near_max"}}, 0)["x"].float()
    assert math.isfinite(float(x.flatten(1).double().square().sum(dim=1).max()))
    assert float(x.square().sum(dim=(1, 2)).max()) < float(np.finfo(np.float32).max)


def test_normal_input_budgets_fail_the_shipped_bf16_on_llm_inputs() -> None:
    """Why a case off the default inputs sets its own budgets: on LLM-like activations the
    shipped bf16 indexer (unchanged, honest) breaks the budget its normal-input cases hold it
    to: with outlier channels many more logits sit outside bf16's band (frac_outside 0.034
    against 0.0004, 2026-12-04 CPU calibration)."""
    from numcheck.selftest import fresh_seed_outcomes
    from tests.shipped import shipped_cases

    cases = {c.id: c for c in shipped_cases()}
    llm, normal = cases["indexer-llm-b2-l1k"], cases["v4flash-b4-l2k"]
    on_llm = fresh_seed_outcomes(llm, ["bf16"], [0], gates=())
    assert all(o.passed for o in on_llm)
    held = replace(llm, budgets={**llm.budgets, "bf16": normal.budgets["bf16"]})
    (outcome,) = fresh_seed_outcomes(held, ["bf16"], [0], gates=())
    assert not outcome.passed and "logits.frac_outside" in outcome.reason
