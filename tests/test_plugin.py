"""The pytest plugin, driven through pytester: collection, the golden workflow, failures."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.caseproject import (
    PLANTED,
    TINY_INDEXER,
    TINY_MHC,
    golden,
    make_project,
    write_goldens,
)


def test_without_flag_nothing_is_collected(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    result = pytester.runpytest("cases")
    result.assert_outcomes()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_plain_pytest_does_not_import_torch() -> None:
    code = "import numcheck.plugin, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_item_ids_are_readable(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf16", "bf16_fp32out", "tf32"')
    result = pytester.runpytest("--numcheck", "--collect-only", "-q", "--numcheck-device", "cpu")
    result.stdout.fnmatch_lines(
        [
            "cases/indexer.toml::tiny::fp32[[]cpu[]]",
            "cases/indexer.toml::tiny::bf16[[]cpu[]]",
            "cases/indexer.toml::tiny::bf16_fp32out[[]cpu[]]",
            "cases/indexer.toml::tiny::tf32[[]cpu[]]",
        ]
    )


def test_cuda_only_variant_skips_on_cpu_with_reason(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf16_fp32out"')
    pytester.runpytest("--numcheck", "--numcheck-regen", "--numcheck-device", "cpu")
    result = pytester.runpytest("--numcheck", "--numcheck-device", "cpu", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*variant 'bf16_fp32out' runs on cuda only*"])


def test_golden_workflow(pytester: pytest.Pytester) -> None:
    """missing -> fail with the command; regen -> pass; rerun -> pass, file untouched."""
    make_project(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-device", "cpu")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*GoldenMissing indexer::tiny::fp32[[]cpu[]]*",
            "*no golden at *goldens/indexer/tiny.safetensors*",
            "*pytest --numcheck --numcheck-regen cases/indexer.toml::tiny*",
        ]
    )
    assert not golden(pytester).exists()

    result = pytester.runpytest("--numcheck", "--numcheck-regen", "--numcheck-device", "cpu")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*golden created: goldens/indexer/tiny.safetensors*"])
    first = golden(pytester).read_bytes()

    result = pytester.runpytest("--numcheck", "--numcheck-device", "cpu")
    result.assert_outcomes(passed=2)
    assert golden(pytester).read_bytes() == first

    # Regenerating an unchanged case does not churn the file.
    result = pytester.runpytest("--numcheck", "--numcheck-regen", "--numcheck-device", "cpu")
    result.stdout.fnmatch_lines(["*golden unchanged: goldens/indexer/tiny.safetensors*"])
    assert golden(pytester).read_bytes() == first


def test_changed_output_fails(pytester: pytest.Pytester) -> None:
    make_project(pytester, mhc=True, planted=True)
    (pytester.path / "cases" / "mhc.toml").write_text(TINY_MHC.replace('"tf32"', '"y_scaled"'))
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-k", "y_scaled")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck FAIL mhc_pre::tiny-mhc::y_scaled[[]cpu[]]",
            "  worst: y.* > budget *",
            "  case:        cases/mhc.toml [[]tiny-mhc[]]",
            ("  reproduce:   pytest --numcheck --numcheck-device cpu "
            "'cases/mhc.toml::tiny-mhc::y_scaled[[]cpu[]]'"),
            "  regenerate:  pytest --numcheck --numcheck-regen cases/mhc.toml::tiny-mhc*",
        ]
    )


def test_stale_inputs_fail_and_leave_golden_alone(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    write_goldens(pytester)
    before = golden(pytester).read_bytes()
    # Same case id, other shape: the golden no longer matches the inputs.
    make_project(pytester, next_n=2)
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*GoldenStale*", "*fingerprint*", "*--numcheck-regen*"])
    assert golden(pytester).read_bytes() == before


def test_tampered_golden_fails_and_is_not_rewritten(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    write_goldens(pytester)
    path = golden(pytester)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*GoldenCorrupt*", "*content hash*"])
    assert path.read_bytes() == bytes(data)


def test_regen_respects_k(pytester: pytest.Pytester) -> None:
    make_project(pytester, mhc=True)
    result = pytester.runpytest("--numcheck", "--numcheck-regen", "-k", "tiny-mhc")
    result.assert_outcomes(passed=2)
    assert golden(pytester, "tiny-mhc", "mhc_pre").exists()
    assert not golden(pytester).exists()


def test_reference_drift_is_checked(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    write_goldens(pytester)
    # The reference itself changes (same inputs, same op version): the fp32 item fails.
    pytester.makeconftest(
        """
from dataclasses import replace
from numcheck.ops import registry
from tests import planted
ref = replace(registry.get_op("indexer").variants["fp32"], fn=planted.indexer_no_kv_scale)
registry.set_variant("indexer", ref)
"""
    )
    result = pytester.runpytest("--numcheck", "-k", "fp32")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["numcheck FAIL indexer::tiny::fp32[[]cpu[]]"])


def test_dropped_kv_scale_fails_pointing_at_the_logits(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"no_kv_scale"', planted=True)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-k", "no_kv_scale")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck FAIL indexer::tiny::no_kv_scale[[]cpu[]]",
            "  worst: logits.*",
            "*unexplained top-k flips*",
            "*row*token*dir*golden score*k-th score*margin*",
        ]
    )


def test_mask_off_by_one_fails_on_the_mask(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"mask_off_by_one"', planted=True)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-k", "mask_off_by_one")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*logits.inf_mask*the context mask*"])


BAND = """
[tiny.budget.near_flips.topk]
tie_band_rel = 0.05
recall_min = 0.9
[tiny.budget.far_flips.topk]
tie_band_rel = 0.05
recall_min = 0.9
"""


def test_flips_far_from_kth_fail_and_near_ties_pass(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"near_flips", "far_flips"', extra=BAND, planted=True)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-rA")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck FAIL indexer::tiny::far_flips[[]cpu[]]",
            "  worst: topk.tie_recall_min * < budget 1*flip(s) outside the tie band*",
        ]
    )
    assert "FAIL indexer::tiny::near_flips" not in result.stdout.str()


def test_variant_errors_are_reported_not_crashed(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"wrong_shape", "raises"', planted=True)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            # the line that raised, named (issue 44)
            ("*variant 'raises' raised RuntimeError at *planted.py:* (*): planted failure inside "
            "the variant*"),
        ]
    )
    result.stdout.fnmatch_lines(["*variant 'wrong_shape': output 'logits' is float32 [[]2, 255[]]*"])


def test_summary_table(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck")
    result.stdout.fnmatch_lines(
        [
            "*numcheck summary (cpu, torch *",
            "case*variant*device*closest to budget*calc_diff*rel_fro*recall*tie recall*verdict",
            "indexer::tiny*fp32*cpu*PASS",
            "indexer::tiny*tf32*cpu*PASS (tf32 = fp32 bit for bit on cpu)",
        ]
    )


def test_bad_case_file_is_a_collection_error_naming_file_case_key(
    pytester: pytest.Pytester,
) -> None:
    make_project(pytester, extra="[tiny.budget.tf32.logits]\ncalc_dif = 1e-3\n")
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*indexer.toml: case 'tiny': key 'budget.tf32.logits.calc_dif'*Fix:*"])


def test_cuda_requested_without_gpu_is_a_usage_error(pytester: pytest.Pytester) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    make_project(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-device", "cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--numcheck-device cuda*sees no CUDA device*Fix:*"])


def test_missing_cases_folder_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnumcheck_cases = nowhere\n")
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no cases folder at *nowhere*Fix:*numcheck_cases*"])


def test_ini_keys_move_the_folders(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnumcheck_cases = checks\nnumcheck_goldens = data/gold\n")
    checks = pytester.mkdir("checks")
    (checks / "indexer.toml").write_text(TINY_INDEXER.format(variants='"tf32"', next_n=1, extra=""))
    result = pytester.runpytest("--numcheck", "--numcheck-regen")
    result.assert_outcomes(passed=2)
    assert (pytester.path / "data" / "gold" / "indexer" / "tiny.safetensors").exists()


def test_regen_without_numcheck_writes_no_case_golden(pytester: pytest.Pytester) -> None:
    # Alone, the flag regenerates numcheck_golden fixture goldens only, and says so.
    make_project(pytester)
    result = pytester.runpytest("--numcheck-regen", "cases")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([("numcheck: --numcheck-regen without --numcheck regenerates "
                                 "only numcheck_golden checks*")])
    assert not golden(pytester).exists()


SEAM_CONFTEST = PLANTED + '''
import pytest

SEEN = []


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """Stand in for a process-isolating executor: see every request, run it in this
    process, and have one check die where its worker process would."""
    from numcheck.ops.spec import VariantError
    from numcheck.plugin.session import NumcheckSession

    state = config.stash[NumcheckSession.KEY]
    real = state.executor

    def seam(request):
        SEEN.append(f"{request.variant}[{request.device}]")
        if request.variant == "bf16":
            raise VariantError("bf16 died in its worker process")
        return real(request)

    state.executor = seam


def pytest_unconfigure(config):
    (config.rootpath / "seen.txt").write_text(" ".join(SEEN))
'''


def test_every_check_runs_through_the_session_executor(pytester: pytest.Pytester) -> None:
    """The items run their checks only through NumcheckSession.executor (the seam process
    isolation replaces, numcheck.execute.executor): an executor put in its place sees every
    check once, what it returns is the verdict, and what it raises is the check's error."""
    make_project(pytester, variants='"bf16", "far_flips"')
    pytester.makeconftest(SEAM_CONFTEST)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=2)
    assert (pytester.path / "seen.txt").read_text() == "fp32[cpu] bf16[cpu] far_flips[cpu]"
    result.stdout.fnmatch_lines([
        "numcheck VariantError indexer::tiny::bf16[cpu]",
        "  bf16 died in its worker process",
        "numcheck FAIL indexer::tiny::far_flips[[]cpu[]]",
    ])
