"""A variant or honest member whose optional library is absent skips with its install
command on every path: the declaration, the plugin in-process, in its worker process and
under xdist, and the FP8 families and catch benchmarks. The library is hidden
(``sys.modules[name] = None``, or a name no one installs), so these run the same on a
machine that has torchao."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import numcheck
from numcheck.check import cannot_run
from numcheck.ops import registry
from numcheck.ops.spec import optional_library
from tests.caseproject import NO_CACHE, case_project
from tests.shipped import shipped_cases

TORCHAO_SKIP = ("variant 'fp8_block_torchao': torchao is not installed (it runs on cuda); "
                "fix: pip install 'numcheck[fp8]' (torchao >= 0.18)")


@pytest.fixture
def no_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao hidden, installed or not: an import of it fails, a lookup finds nothing."""
    monkeypatch.setitem(sys.modules, "torchao", None)


def test_a_missing_library_runs_nowhere_and_says_how_to_install_it() -> None:
    assert optional_library("json", ("cpu",), "pip install json") == (("cpu",), "")
    assert optional_library("numcheck_absent_lib", ("cpu", "cuda"), "pip install x") == (
        (), "numcheck_absent_lib is not installed (it runs on cpu, cuda); fix: pip install x")
    assert numcheck.optional_library is optional_library


def test_the_torchao_variant_skips_on_cuda_with_its_install_command(no_torchao: None) -> None:
    """The H100 run of issue 45: torchao absent, the variant declared to run on CUDA ran and
    raised ModuleNotFoundError. Declared by its library, it skips where torchao is missing."""
    from numcheck.ops.linear import torchao_variant

    variant = torchao_variant()
    assert variant.devices == () and variant.why_not("cuda").startswith(
        "torchao is not installed")
    (case,) = [c for c in shipped_cases() if c.id == "v3-q-a-prefill-t512"]
    assert case.devices == ("cuda",) and "fp8_block_torchao" in case.variants
    with registry.isolated():
        registry.set_variant("linear", variant)
        op = registry.get_op("linear")
        assert cannot_run(op, case, "fp8_block_torchao", "cuda") == TORCHAO_SKIP
        assert cannot_run(op, case, "fp8_block", "cuda") is None


def test_the_torchao_member_leaves_its_family_where_torchao_is_missing(
        no_torchao: None) -> None:
    from numcheck.honest.gemm_family import member_name, members
    from numcheck.precision.quant_declare import GemmQuant
    from numcheck.precision.quant_scheme import DEEPSEEK_ACT, DEEPSEEK_WEIGHT

    op = registry.get_op("linear")
    found = {member_name(g): g
             for g in members(op, "e4m3", GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT))}
    torchao = [g for name, g in found.items() if "torchao" in name]
    assert torchao and all(g.devices == () and "pip install" in g.unavailable for g in torchao)


def test_the_families_and_catch_benchmarks_skip_it(no_torchao: None, tmp_path: Path) -> None:
    """benchmarks/numerics/fp8_families.py ran the torchao head on every seed and counted its
    ModuleNotFoundError as errors; now the head is skipped with its reason, as in the
    catch benchmark."""
    from benchmarks.numerics import fp8_families
    from benchmarks.reliability import fp8_catch
    from numcheck.ops.linear import torchao_variant

    (case,) = [c for c in shipped_cases() if c.id == "v3-q-a-prefill-t512"]
    with registry.isolated():
        registry.set_variant("linear", torchao_variant())
        fams = fp8_families.families(case, "cuda")
        assert "fp8_block_torchao" not in fams and "fp8_block" in fams
        assert fp8_families.skipped(case, "cuda") == {
            "fp8_block_torchao": TORCHAO_SKIP.removeprefix("variant 'fp8_block_torchao': ")}
        out: dict[str, object] = {}
        op = registry.get_op("linear")
        assert fp8_catch._runnable(op, ["fp8_block", "fp8_block_torchao"], "cuda", out) == [
            "fp8_block"]
        assert out == {"skipped": {"fp8_block_torchao": TORCHAO_SKIP.removeprefix(
            "variant 'fp8_block_torchao': ")}}


#: A project whose variant needs a library no one installs (and torchao, hidden): the
#: plugin's conftest, so the worker process and xdist workers register it as the parent.
CONFTEST = """
import sys

import numcheck

sys.modules["torchao"] = None  # hidden, installed or not


def needs_lib(inputs, params):
    import numcheck_absent_lib  # never reached: the check skips

    return numcheck_absent_lib.run(inputs, params)


def pytest_numcheck_register(registry):
    devices, why = numcheck.optional_library("numcheck_absent_lib", ("cpu",),
                                             "pip install numcheck-absent-lib")
    registry.add_variant("mhc_pre", numcheck.Variant("needs_lib", needs_lib, "bf16",
                                                     devices=devices, unavailable=why))
"""
CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
variants = ["bf16", "needs_lib"]
"""
SKIP = ("variant 'needs_lib': numcheck_absent_lib is not installed (it runs on cpu); fix: "
        "pip install numcheck-absent-lib")


def _project(pytester: pytest.Pytester) -> None:
    case_project(pytester, {"mhc.toml": CASE}, conftest=CONFTEST, addopts=NO_CACHE)


def _skipped_not_erred(pytester: pytest.Pytester, *args: str) -> None:
    result = pytester.runpytest("--numcheck", "--numcheck-regen", "-rs", "--numcheck-report",
                                "r.json", *args)
    result.assert_outcomes(passed=2, skipped=1)  # fp32, bf16; needs_lib skipped
    result.stdout.fnmatch_lines([f"SKIPPED*{SKIP}"])
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    assert [r["status"] for r in records if r["variant"] == "needs_lib"] == ["skip"]
    assert not [r for r in records if r["status"] == "error"]


@pytest.mark.parametrize("isolate", ["off", "process"])
def test_the_plugin_skips_it_in_process_and_in_its_worker(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, isolate: str) -> None:
    monkeypatch.delitem(sys.modules, "numcheck_absent_lib", raising=False)
    _project(pytester)
    _skipped_not_erred(pytester, "--numcheck-isolate", isolate)


@pytest.mark.slow  # starts two xdist workers (seconds)
def test_the_plugin_skips_it_under_xdist(pytester: pytest.Pytester) -> None:
    _project(pytester)
    _skipped_not_erred(pytester, "-n", "2")
