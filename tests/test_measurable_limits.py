"""No silent limits: a budget key that cannot be measured for its check is a case-file error,
and a default that cannot be measured never shows as a limit (issue 33, item 4)."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from numcheck.calibrate import suggest_values
from numcheck.cases import Case, CaseFileError, load_case_file, load_cases
from numcheck.check import run_check
from numcheck.check.make_golden import fresh_golden
from numcheck.honest.gemm_family import missing_envelope
from numcheck.numerics.budgets import DEFAULT_BUDGETS, BudgetError
from numcheck.ops import registry
from numcheck.ops.registry import Inputs, OpSpec, Outputs, Params, ParamSpec, Variant
from numcheck.plugin.golden_fixture import GoldenCheck
from numcheck.report.records import record_from_result
from tests.caseproject import case_project

ROOT = Path(__file__).resolve().parent.parent


def _inputs(params: Params, seed: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(8, 32, generator=g), "b": torch.randn(32, 16, generator=g)}


def _fp32(inputs: Inputs, params: Params) -> Outputs:
    return {"y": inputs["a"] @ inputs["b"]}


def _bf16(inputs: Inputs, params: Params) -> Outputs:
    return {"y": (inputs["a"].bfloat16() @ inputs["b"].bfloat16()).float()}


def _site(inputs: Inputs, params: Params, gemm: object) -> Outputs:
    return {"y": gemm(inputs["a"], inputs["b"])}  # type: ignore[operator]


#: A GEMM op that declares neither a GEMM site nor a rounding reference: no envelope.
BARE = OpSpec(
    name="bare", version=1, reference="fp32",
    variants={"fp32": Variant("fp32", _fp32, "fp32"), "bf16": Variant("bf16", _bf16, "bf16"),
              "fp8": Variant("fp8", _bf16, "e4m3"),
              "bf16_cuda": Variant("bf16_cuda", _bf16, "bf16", devices=("cuda",))},
    make_inputs=_inputs, outputs=("y",), params={"n": ParamSpec(int, 1)},
)
#: The same op declaring where its GEMM sits.
SITED = replace(BARE, name="sited", gemm_site=_site)
#: Its rounding reference for bf16 runs on CUDA only, and it has no GEMM site.
CUDA_REF = replace(BARE, name="cuda_ref", rounding_reference={"bf16": "bf16_cuda"})
OPS = {op.name: op for op in (BARE, SITED, CUDA_REF)}


def lookup(name: str) -> OpSpec:
    return OPS[name]


def load(tmp_path: Path, text: str) -> list[Case]:
    path = tmp_path / "ops.toml"
    path.write_text(textwrap.dedent(text))
    return load_case_file(path, lookup=lookup)


def error(tmp_path: Path, text: str) -> CaseFileError:
    with pytest.raises(CaseFileError) as info:
        load(tmp_path, text)
    return info.value


# --- where an envelope exists: decided once ----------------------------------------------


def test_an_op_without_gemm_site_or_reference_has_no_envelope() -> None:
    missing = missing_envelope(BARE, "bf16", ["cpu", "cuda"])
    assert missing is not None and missing.nowhere and missing.lacking == ("cpu", "cuda")
    assert missing.problem == ("op 'bare' has no rounding envelope for bf16: it declares no "
                               "gemm_site (where its GEMM sits) and names no "
                               "rounding_reference for bf16")
    assert "declare gemm_site on op 'bare'" in missing.fix
    assert missing.fix.endswith("or remove the key")
    assert missing_envelope(SITED, "bf16", ["cpu", "cuda"]) is None
    assert missing_envelope(SITED, "tf32", ["cpu", "cuda"]) is None


def test_a_gemm_site_gives_no_envelope_to_a_class_without_honest_gemms() -> None:
    # e4m3 GEMMs need scales the table of honest GEMMs cannot know: the fix is a reference.
    missing = missing_envelope(SITED, "e4m3", ["cpu"])
    assert missing is not None
    assert "its gemm_site gives no e4m3 envelope members" in missing.problem
    assert "declare gemm_site" not in missing.fix
    assert "name an honest e4m3 variant as the rounding_reference of op 'sited'" in missing.fix


def test_a_cuda_only_reference_measures_on_cuda_only() -> None:
    missing = missing_envelope(CUDA_REF, "bf16", ["cpu", "cuda"])
    assert missing is not None and missing.lacking == ("cpu",) and not missing.nowhere
    assert "its rounding reference 'bf16_cuda' runs on cuda only" in missing.problem
    assert 'run the case on cuda only (devices = ["cuda"])' in missing.fix
    assert missing_envelope(CUDA_REF, "bf16", ["cuda"]) is None


def test_an_unavailable_reference_measures_nothing_here_but_may_elsewhere() -> None:
    # A reference whose library is missing here (a Triton variant, say): a case file may
    # rely on it (installed=False), a run here cannot (installed=True).
    absent = replace(CUDA_REF, variants={
        **CUDA_REF.variants,
        "bf16_cuda": replace(CUDA_REF.variants["bf16_cuda"], devices=(),
                             unavailable="mylib not installed")})
    assert missing_envelope(absent, "bf16", ["cpu"], installed=False) is None
    here = missing_envelope(absent, "bf16", ["cpu"])
    assert here is not None and "is unavailable here (mylib not installed)" in here.problem


# --- case files ----------------------------------------------------------------------------


def test_max_err_ratio_without_an_envelope_is_a_case_file_error(tmp_path: Path) -> None:
    err = error(tmp_path, """
        [c]
        op = "bare"
        [c.budget.bf16.y]
        rel_fro = 1e-2
        max_err_ratio = 2
    """)
    assert (err.case, err.key) == ("c", "budget.bf16.y.max_err_ratio")
    text = str(err)
    assert text.startswith(f"{tmp_path / 'ops.toml'}: case 'c': key 'budget.bf16.y.max_err_ratio': ")
    assert "cannot be measured for variant 'bf16' on output 'y'" in text
    assert "so this limit would gate nothing" in text
    assert err.fix == ("declare gemm_site on op 'bare' (where its GEMM sits), name an honest "
                       "bf16 variant as its rounding_reference (docs/extending.md, \"Where the "
                       "GEMM sits\"), or remove the key")
    # The same key on the op that declares its GEMM site loads, and is the limit.
    sited = load(tmp_path, '[c]\nop = "sited"\n[c.budget.bf16.y]\nmax_err_ratio = 2\n')
    assert sited[0].budgets["bf16"].outputs["y"].limits["max_err_ratio"] == 2


def test_a_default_that_cannot_be_measured_is_no_limit(tmp_path: Path) -> None:
    (bare,) = load(tmp_path, '[c]\nop = "bare"\nvariants = ["bf16", "fp8"]\n')
    for variant in ("bf16", "fp8"):
        assert "max_err_ratio" not in bare.budgets[variant].outputs["y"].limits
        assert "rel_fro" in bare.budgets[variant].outputs["y"].limits  # the rest of the row
    (sited,) = load(tmp_path, '[c]\nop = "sited"\nvariants = ["bf16"]\n')
    assert (sited.budgets["bf16"].outputs["y"].limits["max_err_ratio"]
            == DEFAULT_BUDGETS["bf16"]["max_err_ratio"])


def test_a_key_measured_on_some_devices_only_is_an_error_naming_them(tmp_path: Path) -> None:
    case = '[c]\nop = "cuda_ref"\nvariants = ["bf16"]\n{devices}[c.budget.bf16.y]\nmax_err_ratio = 2\n'
    err = error(tmp_path, case.format(devices=""))
    assert "has no rounding envelope for bf16 on cpu" in str(err)
    assert 'run the case on cuda only (devices = ["cuda"])' in err.fix
    (cuda,) = load(tmp_path, case.format(devices='devices = ["cuda"]\n'))
    assert cuda.budgets["bf16"].outputs["y"].limits["max_err_ratio"] == 2
    # Its default stays (measured on CUDA); the run on the CPU says it measured nothing.
    (both,) = load(tmp_path, '[c]\nop = "cuda_ref"\nvariants = ["bf16"]\n')
    assert "max_err_ratio" in both.budgets["bf16"].outputs["y"].limits


def test_a_borrowed_key_the_borrower_cannot_measure_names_the_lenders_key(
        tmp_path: Path) -> None:
    # fp8 (e4m3) takes bf16's tables: bf16's max_err_ratio is measured, fp8's cannot be.
    err = error(tmp_path, """
        [c]
        op = "sited"
        variants = ["bf16", "fp8"]
        [c.budget.bf16.y]
        max_err_ratio = 2
        [c.budget.fp8]
        budget_like = "bf16"
    """)
    assert err.key == "budget.bf16.y.max_err_ratio"
    assert "variant 'fp8' (held to bf16's budgets)" in str(err)
    assert "no rounding envelope for e4m3" in str(err)


@pytest.mark.parametrize(("body", "key", "fragment", "fix"), [
    ('devices = ["cpu"]\noverhead.bf16 = { max_copy_share = 0.2 }', "overhead.bf16.max_copy_share",
     "is a limit of the kernels gate, which audits CUDA kernels only", 'add "cuda"'),
    ('devices = ["cpu"]\noverhead.fp32 = { cuda_core_gemm = true }',
     "overhead.fp32.cuda_core_gemm", "never checked on CUDA in this case (devices: cpu)",
     'add "cuda"'),
    ('devices = ["cpu"]\n[c.perf.bf16]\nspeedup_min = { H100 = 1.1 }',
     "perf.bf16.speedup_min.H100", "variant 'bf16' is never checked on cuda in this case",
     'add "cuda" to the case\'s devices, or remove the key'),
    ('devices = ["cpu"]\nperf = { speedup_min = { cuda = 1.1, every_class = true } }',
     "perf.speedup_min.cuda",
     "the case's variants are never checked on cuda", "remove the key"),
    ('variants = ["bf16_cuda"]\n[c.perf.bf16_cuda]\nspeedup_min = { cpu = 1.1 }',
     "perf.bf16_cuda.speedup_min.cpu", "never checked on cpu in this case (devices: cuda)",
     "remove the key"),
    ('perf_only = true\n[c.budget.bf16.y]\nrel_fro = 1e-2', "budget",
     "a perf-only case has no golden and runs no numerics", "remove them"),
])
def test_other_limits_that_would_gate_nothing(tmp_path: Path, body: str, key: str,
                                              fragment: str, fix: str) -> None:
    err = error(tmp_path, f'[c]\nop = "sited"\n{body}\n')
    assert (err.case, err.key) == ("c", key)
    assert fragment in str(err) and fix in err.fix


def test_the_shipped_cases_and_the_examples_load(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_cases(ROOT / "cases")
    for example, module in (("my_kernels", "my_kernels.numcheck_ops"),
                            ("liger_mhc", "liger_mhc.numcheck_ops"),
                            ("crashing_kernels", "crashing_kernels.numcheck_ops")):
        folder = ROOT / "examples" / example
        monkeypatch.syspath_prepend(folder)  # each example project's own package
        try:
            with registry.isolated():
                __import__(module)
                sys.modules[module].register(registry.Registrar(f"examples/{example}"))
                assert load_cases(folder / "checks" / "cases")
        finally:
            for name in [m for m in sys.modules if m.split(".")[0] == example]:
                del sys.modules[name]


# --- the run: a default measured elsewhere is said, never claimed --------------------------


def test_a_limit_nothing_measured_here_is_left_out_of_the_record(tmp_path: Path) -> None:
    (case,) = load(tmp_path, '[c]\nop = "cuda_ref"\nvariants = ["bf16"]\n')
    golden, inputs = fresh_golden(CUDA_REF, case)
    result = run_check(CUDA_REF, case, "bf16", "cpu", inputs, golden)
    assert result.passed
    assert list(result.ungated) == ["y.max_err_ratio"]
    assert "its rounding reference 'bf16_cuda' runs on cuda only" in result.ungated["y.max_err_ratio"]
    record = record_from_result(result)
    assert "max_err_ratio" not in record.budget["y"] and "rel_fro" in record.budget["y"]
    assert "max_err_ratio" not in record.metrics["y"]
    # max_band_ratio needs no envelope (its band is the budget's atol and rtol): measured.
    assert "max_band_ratio" in record.budget["y"] and "max_band_ratio" in record.metrics["y"]
    assert record.note is not None and "y.max_err_ratio not measured here" in record.note
    json.dumps(record.budget)  # plain data
    # Where it is measured, nothing is said.
    (sited,) = load(tmp_path, '[c]\nop = "sited"\nvariants = ["bf16"]\n')
    golden, inputs = fresh_golden(SITED, sited)
    measured = record_from_result(run_check(SITED, sited, "bf16", "cpu", inputs, golden))
    assert "max_err_ratio" in measured.budget["y"] and measured.note is None


def test_a_failure_says_which_limit_nothing_measured_here(tmp_path: Path) -> None:
    from numcheck.report.render import Commands, failure_message

    (case,) = load(tmp_path, '[c]\nop = "cuda_ref"\nvariants = ["bf16"]\n'
                             '[c.budget.bf16.y]\nrel_fro = 1e-9\n')
    golden, inputs = fresh_golden(CUDA_REF, case)
    result = run_check(CUDA_REF, case, "bf16", "cpu", inputs, golden)
    assert [v.key for v in result.violations] == ["y.rel_fro"]
    with registry.isolated():  # the message looks the op up for its budget: line
        registry.register(CUDA_REF)
        message = failure_message(result, Commands("repro", "regen"), "ops.toml")
    assert ("  not measured here: y.max_err_ratio (op 'cuda_ref' has no rounding envelope for "
            "bf16 on cpu: its rounding reference 'bf16_cuda' runs on cuda only") in message


def test_the_fixture_refuses_max_err_ratio_and_claims_no_default(tmp_path: Path) -> None:
    x = torch.linspace(1, 2, 64)
    check = GoldenCheck(tmp_path, "t.py::test", regen=True)
    with pytest.raises(BudgetError, match="key 'y.max_err_ratio': max_err_ratio .* cannot be "
                       "measured by the numcheck_golden fixture") as info:
        check.check(x.bfloat16(), reference_fn=lambda: x, budget={"max_err_ratio": 2},
                    name="y")
    assert info.value.fix.startswith("remove the key")


def test_calibration_suggests_no_value_for_a_metric_it_did_not_measure() -> None:
    # An op without an envelope measures no max_err_ratio: its row has none, and a
    # suggestion (floored at 1) would be a key the case file then refuses.
    row = {"rel_fro": 3e-3, "calc_diff": 4e-6, "frac_outside": 0.0, "max_band_ratio": 1.1}
    gated = ("rel_fro", "max_err_ratio", "max_band_ratio")
    assert "max_err_ratio" not in suggest_values(row, topk=False, gated=gated)
    measured = suggest_values({**row, "max_err_ratio": 1.0}, topk=False, gated=gated)
    assert measured["max_err_ratio"] >= 1.0


# --- through pytest, as a user meets it -------------------------------------------------------

USER_OP = """
import torch
import numcheck

def inputs(params, seed):
    x = numcheck.normal(numcheck.rng(seed, "x"), (8, 64))
    w = numcheck.normal(numcheck.rng(seed, "w"), (32, 64), std=0.125)
    return {"x": x, "w": w}

def fp32(inputs, params):
    with numcheck.matmul_precision(tf32=False):
        return {"y": inputs["x"] @ inputs["w"].t()}

def bf16(inputs, params):
    return {"y": (inputs["x"].bfloat16() @ inputs["w"].bfloat16().t()).float()}

def site(inputs, params, gemm):
    return {"y": gemm(inputs["x"], inputs["w"].t())}

def pytest_numcheck_register(registry):
    registry.register(numcheck.OpSpec(
        name="mine", version=1, reference="fp32",
        variants={"fp32": numcheck.Variant("fp32", fp32, "fp32"),
                  "bf16": numcheck.Variant("bf16", bf16, "bf16")},
        make_inputs=inputs, outputs=("y",), params={"n": numcheck.ParamSpec(int, 1)},
        {gemm_site}
    ))
"""


def user_project(pytester: pytest.Pytester, *, gemm_site: bool, budget: str) -> None:
    case_project(pytester, {"mine.toml": f'[small]\nop = "mine"\nseeds = [0]\n\n'
                            f'[small.budget.bf16.y]\nrel_fro = 1e-2\n{budget}'},
                 conftest=USER_OP.replace("{gemm_site}", "gemm_site=site," if gemm_site else ""))


def test_a_user_op_without_gemm_site_and_max_err_ratio_fails_to_load(
        pytester: pytest.Pytester) -> None:
    user_project(pytester, gemm_site=False, budget="max_err_ratio = 2\n")
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        ("*cases/mine.toml: case 'small': key 'budget.bf16.y.max_err_ratio': max_err_ratio "
        "(the worst element against honest rounding on the same inputs) cannot be measured "
        "for variant 'bf16' on output 'y', so this limit would gate nothing: op 'mine' has no "
        "rounding envelope for bf16: it declares no gemm_site (where its GEMM sits) and names "
        "no rounding_reference for bf16. Fix: declare gemm_site on op 'mine' (where its GEMM "
        "sits), name an honest bf16 variant as its rounding_reference (docs/extending.md, "
        "\"Where the GEMM sits\"), or remove the key"),
    ])


def test_with_gemm_site_the_same_key_gates_and_is_reported(pytester: pytest.Pytester) -> None:
    user_project(pytester, gemm_site=True, budget="max_err_ratio = 2\n")
    assert pytester.runpytest("--numcheck", "--numcheck-regen").ret == 0
    result = pytester.runpytest("--numcheck", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=2)
    (bf16,) = [r for r in json.loads((pytester.path / "r.json").read_text())["records"]
               if r["variant"] == "bf16"]
    assert bf16["budget"]["y"]["max_err_ratio"] == 2
    assert 0 < bf16["metrics"]["y"]["max_err_ratio"] <= 2


def test_without_gemm_site_the_report_claims_no_max_err_ratio(pytester: pytest.Pytester) -> None:
    user_project(pytester, gemm_site=False, budget="")
    assert pytester.runpytest("--numcheck", "--numcheck-regen").ret == 0
    result = pytester.runpytest("--numcheck", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=2)
    (bf16,) = [r for r in json.loads((pytester.path / "r.json").read_text())["records"]
               if r["variant"] == "bf16"]
    assert "max_err_ratio" not in bf16["budget"]["y"]
    assert "max_err_ratio" not in bf16["metrics"]["y"]
    assert bf16["note"] is None


def test_an_expected_failure_that_cannot_be_measured_is_a_case_file_error(
        tmp_path: Path) -> None:
    err = error(tmp_path, """
        [c]
        op = "bare"
        variants = ["bf16"]
        expect.bf16 = { metrics = ["y.max_err_ratio"], reason = "planted" }
    """)
    assert (err.case, err.key) == ("c", "expect.bf16")
    assert "it expects y.max_err_ratio to fail, which cannot be measured here" in str(err)
    assert err.fix.startswith('expect outputs = ["y"] (any of its violations); declare gemm_site')
