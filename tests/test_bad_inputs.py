"""The bad-input catalogue (docs/reliability.md), end to end through the plugin.

One test per row. Each bad input must stop or fail the run (never pass silently) with a
message naming the file, the case and the fix, and must leave every golden as it was.
Rows already covered end to end elsewhere are listed in the doc with their test; the pure
modules' own tests (test_cases.py, test_goldens.py) pin the wording of every variation.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import safetensors.torch
import torch

from numcheck.cases import load_case_file
from numcheck.check.make_golden import write_golden
from numcheck.check.run import CaseInputs
from numcheck.goldens import files as goldens
from numcheck.goldens.files import load_golden, save_golden
from numcheck.ops.registry import get_op
from tests.caseproject import PLANTED, TINY_INDEXER, golden, make_project

Edit = Callable[[dict[str, torch.Tensor], dict[str, object]], None]


@pytest.fixture(scope="module")
def tiny_golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny case's golden, made once for the module the way --numcheck-regen makes it."""
    folder = tmp_path_factory.mktemp("golden-maker")
    toml = folder / "indexer.toml"
    toml.write_text(TINY_INDEXER.format(variants='"tf32"', next_n=1, extra=""))
    (case,) = load_case_file(toml)
    op = get_op(case.op)
    path = folder / "tiny.safetensors"
    assert write_golden(path, op, case, "cpu", CaseInputs(op, case))
    return path


def _project(pytester: pytest.Pytester, tiny_golden: Path, **kw: object) -> Path:
    make_project(pytester, **kw)  # type: ignore[arg-type]
    path = golden(pytester)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_golden, path)
    return path


def _rewrite(path: Path, edit: Edit) -> bytes:
    """Change a golden's content and save it properly (valid hash): a wrong but whole file."""
    g = load_golden(path, case="tiny", regen_hint="")
    tensors = {k: v.clone() for k, v in g.tensors.items()}
    meta = {k: v for k, v in g.meta.items() if k not in ("shapes", "dtypes", "content_hash")}
    edit(tensors, meta)
    save_golden(path, tensors, meta)
    return path.read_bytes()


def _run_fails(pytester: pytest.Pytester, path: Path, *args: str) -> pytest.RunResult:
    """Run the gate; nothing may pass, the golden must stay byte for byte as it was."""
    before = path.read_bytes()
    result = pytester.runpytest("--numcheck", *args)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1 and "passed" not in outcomes, outcomes
    assert path.read_bytes() == before
    return result


def _collection_stops(pytester: pytest.Pytester) -> pytest.RunResult:
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "passed" not in result.parseoutcomes()
    return result


# -------------------------------------------------------------------------- case files


def test_malformed_toml(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    (pytester.path / "cases" / "indexer.toml").write_text('[tiny\nop = "indexer"\n')
    result = _collection_stops(pytester)
    result.stdout.fnmatch_lines(
        ["*cases/indexer.toml: not valid TOML: * (at line 1, column *)*Fix: correct the TOML*"]
    )


def test_unknown_op(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    path = pytester.path / "cases" / "indexer.toml"
    path.write_text(path.read_text().replace('op = "indexer"', 'op = "indexr"'))
    _collection_stops(pytester).stdout.fnmatch_lines(
        [("*indexer.toml: case 'tiny': key 'op': unknown op 'indexr' (known ops: indexer, "
         "linear, mhc_pre*). Fix: use the name of a registered op")]
    )


def test_unknown_variant(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf17"')
    _collection_stops(pytester).stdout.fnmatch_lines(
        [("*indexer.toml: case 'tiny': key 'variants': unknown variant 'bf17' for op 'indexer'."
         " Fix: use one of: bf16, bf16_fp32out, tf32, bf16_folded, fused, fp8, nvfp4_emu, "
         "mxfp4_emu")]
    )


def test_budget_of_the_wrong_type(pytester: pytest.Pytester) -> None:
    make_project(pytester, extra='[tiny.budget.tf32.logits]\nrel_fro = "small"\n')
    _collection_stops(pytester).stdout.fnmatch_lines(
        [("*indexer.toml: case 'tiny': key 'budget.tf32.logits.rel_fro': expected a number, "
         "got string 'small'. Fix: write a bare number*")]
    )


def test_negative_budget(pytester: pytest.Pytester) -> None:
    make_project(pytester, extra="[tiny.budget.tf32.logits]\nrel_fro = -1e-3\n")
    _collection_stops(pytester).stdout.fnmatch_lines(
        [("*indexer.toml: case 'tiny': key 'budget.tf32.logits.rel_fro': the budget is negative"
         " (-0.001). Fix: give a number >= 0")]
    )


@pytest.mark.parametrize(
    ("shape", "mhc", "line"),
    [
        ("batch = -1", False, ("key 'shape.batch': -1 is out of range (needs an integer >= 1). "
         "Fix: write e.g. batch = 4")),
        ("block_size = 0", False, ("key 'shape.block_size': 0 is out of range (needs an integer "
         ">= 1). Fix: write e.g. block_size = 64")),
        ("min_context = 300", False, ("key 'shape.min_context': min_context 300 > max_context "
         "256. Fix: set min_context <= 256 (0 means max_context // 4), or raise max_context")),
        ("next_n = 0", False, ("key 'shape.next_n': 0 is out of range (needs an integer >= 1). "
         "Fix: write e.g. next_n = 1")),
        ("sinkhorn_iters = -1", True, ("key 'shape.sinkhorn_iters': -1 is out of range (needs an "
         "integer >= 1). Fix: write e.g. sinkhorn_iters = 20")),
        ("eps = -1", True, ("key 'shape.eps': -1.0 is out of range (needs a number > 0 and <= "
         "1). Fix: write e.g. eps = 1e-06")),
    ],
)
def test_parameter_out_of_range_stops_before_any_regen(
    pytester: pytest.Pytester, shape: str, mhc: bool, line: str
) -> None:
    make_project(pytester, mhc=mhc)
    name = "mhc.toml" if mhc else "indexer.toml"
    path = pytester.path / "cases" / name
    key = shape.split(" = ")[0]
    text = path.read_text()
    if re.search(rf"\b{key} = ", text):  # the tiny case sets it already: change its value
        text = re.sub(rf"\b{key} = [^,}}]+", shape, text)
    else:
        anchor = "hidden = 64" if mhc else "index_topk = 32"
        text = text.replace(anchor, f"{anchor}, {shape}")
    path.write_text(text)
    result = pytester.runpytest("--numcheck", "--numcheck-regen")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "passed" not in result.parseoutcomes()
    case = "tiny-mhc" if mhc else "tiny"
    result.stdout.fnmatch_lines([f"*cases/{name}: case '{case}': {line}"])
    assert "Traceback" not in result.stdout.str() and len(result.stdout.lines) < 40
    assert not (pytester.path / "goldens").exists()  # nothing was regenerated


def test_golden_copied_from_another_case(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    make_project(pytester)
    cases = pytester.path / "cases" / "indexer.toml"
    cases.write_text(cases.read_text().replace("[tiny]", "[tiny-copy]"))
    path = golden(pytester, "tiny-copy")
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_golden, path)
    _run_fails(pytester, path).stdout.fnmatch_lines(
        [("*golden *tiny-copy.safetensors for case tiny-copy is stale: it was made for case "
         "'tiny' of op 'indexer', not for case 'tiny-copy' of op 'indexer' (copied or renamed "
         "from indexer/tiny.safetensors)*")])


def test_changed_parameter_that_keeps_the_inputs(pytester: pytest.Pytester,
                                                 tiny_golden: Path) -> None:
    # index_topk changes no input: only the parameter record can tell.
    path = _project(pytester, tiny_golden)
    cases = pytester.path / "cases" / "indexer.toml"
    cases.write_text(cases.read_text().replace("index_topk = 32", "index_topk = 16"))
    _run_fails(pytester, path).stdout.fnmatch_lines(
        ["*for case tiny is stale: parameter index_topk 32 -> 16*"])


def test_empty_cases_folder(pytester: pytest.Pytester) -> None:
    pytester.mkdir("cases")
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*the cases folder *cases holds no *.toml case file. Fix: add one*numcheck_cases*"]
    )


def test_duplicate_case_ids(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    shutil.copyfile(pytester.path / "cases" / "indexer.toml", pytester.path / "cases" / "more.toml")
    _collection_stops(pytester).stdout.fnmatch_lines(
        [("*more.toml: case 'tiny': op 'indexer' already has a case 'tiny' in *indexer.toml. "
         "Fix: rename one of them: the id names the golden file and the test")]
    )


# -------------------------------------------------------------------------- goldens


def test_truncated_golden(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    path = _project(pytester, tiny_golden)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _run_fails(pytester, path).stdout.fnmatch_lines([
        "numcheck GoldenCorrupt indexer::tiny::fp32[[]cpu[]]",
        "*golden *goldens/indexer/tiny.safetensors for case tiny is corrupt: not a readable*",
        ("*Fix: restore it from version control (git checkout -- *) or regenerate it with: "
        "pytest --numcheck --numcheck-regen cases/indexer.toml::tiny"),
        "  case:        cases/indexer.toml [[]tiny[]]",
    ])


def test_golden_of_the_wrong_shape(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    path = _project(pytester, tiny_golden)

    def shorter(t: dict[str, torch.Tensor], meta: dict[str, object]) -> None:
        t["s0/logits"] = t["s0/logits"][:, :-1].contiguous()
        meta["outputs"]["s0/logits"]["shape"] = list(t["s0/logits"].shape)  # type: ignore[index]

    _rewrite(path, shorter)
    _run_fails(pytester, path).stdout.fnmatch_lines([
        "numcheck GoldenFormatError indexer::tiny::fp32[[]cpu[]]",
        ("*golden *tiny.safetensors for case tiny: output 'logits' is stored as float32 [[]2, 255[]],"
        " but the reference 'fp32' now gives float32 [[]2, 256[]]"),
        ("*Fix: if the reference changed on purpose, regenerate it with: pytest --numcheck "
        "--numcheck-regen cases/indexer.toml::tiny"),
    ])


def test_golden_of_the_wrong_dtype(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    path = _project(pytester, tiny_golden)

    def half(t: dict[str, torch.Tensor], meta: dict[str, object]) -> None:
        t["s0/logits"] = t["s0/logits"].half()  # same float family: metrics alone would run

    _rewrite(path, half)
    _run_fails(pytester, path).stdout.fnmatch_lines([
        "numcheck GoldenFormatError indexer::tiny::tf32[[]cpu[]]",
        ("*output 'logits' is stored as float16 but its metadata says float32 (goldens hold the "
        "reference's own dtype)"),
        "*Fix: regenerate it with: pytest --numcheck --numcheck-regen cases/indexer.toml::tiny",
    ])


def _raw_rewrite(path: Path, meta_edit: Callable[[dict[str, str]], None]) -> None:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8 : 8 + n])["__metadata__"]
    tensors = safetensors.torch.load(data)
    meta_edit(meta)
    meta["content_hash"] = goldens.content_hash(tensors, meta)  # a consistent file
    path.write_bytes(safetensors.torch.save(tensors, metadata=meta))


def test_golden_metadata_missing_fields(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    path = _project(pytester, tiny_golden)
    _raw_rewrite(path, lambda meta: [meta.pop("fingerprint"), meta.pop("seeds")])
    _run_fails(pytester, path).stdout.fnmatch_lines([
        "numcheck GoldenFormatError indexer::tiny::fp32[[]cpu[]]",
        "*golden *tiny.safetensors for case tiny lacks required metadata: fingerprint, seeds",
        "*Fix: regenerate it with: pytest --numcheck --numcheck-regen cases/indexer.toml::tiny",
    ])


def test_golden_of_a_newer_format(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    path = _project(pytester, tiny_golden)
    _raw_rewrite(path, lambda meta: meta.update(format_version="2"))
    _run_fails(pytester, path).stdout.fnmatch_lines([
        "numcheck GoldenFormatError indexer::tiny::fp32[[]cpu[]]",
        "*for case tiny has format_version 2; this numcheck reads up to 1",
        "*Fix: upgrade numcheck, or regenerate it with: pytest --numcheck --numcheck-regen *",
    ])


def _first_valid(t: torch.Tensor) -> int:
    return int(torch.isfinite(t[0]).nonzero()[-1])


def test_nan_in_a_golden(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    path = _project(pytester, tiny_golden)

    def nan(t: dict[str, torch.Tensor], meta: dict[str, object]) -> None:
        t["s0/logits"][0, _first_valid(t["s0/logits"])] = float("nan")

    _rewrite(path, nan)
    _run_fails(pytester, path).stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::fp32[[]cpu[]]",
        "*logits.nan = 1 > budget 0 (seed 0): 0 NaN in the output, 1 in the golden*",
        "  case:        cases/indexer.toml [[]tiny[]]",
        "  regenerate:  pytest --numcheck --numcheck-regen cases/indexer.toml::tiny*",
    ])


def test_inf_in_a_golden(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    path = _project(pytester, tiny_golden)

    def inf(t: dict[str, torch.Tensor], meta: dict[str, object]) -> None:
        t["s0/logits"][0, _first_valid(t["s0/logits"])] = float("inf")

    _rewrite(path, inf)
    _run_fails(pytester, path).stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::fp32[[]cpu[]]",
        ("*logits.inf_mask = 1 > budget 0 *(seed 0): the +/-inf pattern (the context mask) must "
        "match the golden exactly*"),
        "  regenerate:  pytest --numcheck --numcheck-regen cases/indexer.toml::tiny*",
    ])


# -------------------------------------------------------------------------- variants


def _variant_fails(
    pytester: pytest.Pytester, tiny_golden: Path, variant: str
) -> pytest.RunResult:
    path = _project(pytester, tiny_golden, variants=f'"{variant}"')
    pytester.makeconftest(PLANTED)
    result = pytester.runpytest("--numcheck", "-k", variant)
    result.assert_outcomes(failed=1, deselected=1)
    assert path.read_bytes() == tiny_golden.read_bytes()
    return result


def test_nan_in_a_variant_output(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    _variant_fails(pytester, tiny_golden, "nan_one_row").stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::nan_one_row[[]cpu[]]",
        ("*logits.nan = 1 > budget 0 (seed 0): 1 NaN in the output, 0 in the golden (set "
        "allow_nan = true in the budget only if NaN is expected)"),
        "  case:        cases/indexer.toml [[]tiny[]]",
    ])


def test_inf_in_a_variant_output(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    _variant_fails(pytester, tiny_golden, "inf_one_row").stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::inf_one_row[[]cpu[]]",
        "*logits.inf_mask = 1 > budget 0 *(seed 0): the +/-inf pattern*",
    ])


def test_variant_of_the_wrong_dtype(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    _variant_fails(pytester, tiny_golden, "wrong_dtype").stdout.fnmatch_lines([
        "numcheck VariantError indexer::tiny::wrong_dtype[[]cpu[]]",
        ("  op 'indexer' variant 'wrong_dtype': output 'logits' is float64 [[]2, 256[]]; the "
        "reference gives float32 [[]2, 256[]]. Fix: return every output in the reference's*"),
        "  case:        cases/indexer.toml [[]tiny[]]",
    ])


def test_variant_on_the_wrong_device(pytester: pytest.Pytester, tiny_golden: Path) -> None:
    _variant_fails(pytester, tiny_golden, "wrong_device").stdout.fnmatch_lines([
        "numcheck VariantError indexer::tiny::wrong_device[[]cpu[]]",
        "  variant 'wrong_device': output * is on meta, expected cpu",
    ])
