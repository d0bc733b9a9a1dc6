"""A golden is pinned to its case, op, inputs, seeds and every parameter the op declares."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck.goldens.files import GoldenStale
from numcheck.goldens.freshness import GoldenNote, require_fresh
from tests.caseproject import TINY_MHC, golden, make_project, write_goldens
from tests.test_goldens import CASE, FP, HINT, _load, _save

PARAMS = {"tokens": 8, "sinkhorn_iters": 20, "eps": 1e-6}


def _fresh(tmp_path: Path, record: Any = PARAMS, **kw: Any) -> None:
    over = {} if record is None else {"params": record}
    golden = _load(_save(tmp_path, {"y": torch.ones(1)}, **over))
    args: dict[str, Any] = {"op_version": 1, "fingerprint": FP, "seeds": [0, 1],
                            "regen_hint": HINT, "case": CASE, "op": "mhc_pre",
                            "params": PARAMS, "param_defaults": {}, **kw}
    require_fresh(golden, **args)


def test_same_parameters_are_fresh(tmp_path: Path) -> None:
    _fresh(tmp_path)
    _fresh(tmp_path, params={**PARAMS, "eps": 1e-6, "tokens": 8.0})  # 8 and 8.0 are equal


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        ({"sinkhorn_iters": 10}, "parameter sinkhorn_iters 20 -> 10"),
        ({"eps": 1e-5}, "parameter eps 1e-06 -> 1e-05"),
    ],
)
def test_a_changed_parameter_is_stale_and_named(
    tmp_path: Path, new: dict[str, Any], expected: str
) -> None:
    with pytest.raises(GoldenStale) as info:
        _fresh(tmp_path, params={**PARAMS, **new})
    first = str(info.value).splitlines()[0]
    assert first.endswith(f"for case {CASE} is stale: {expected}")


def test_a_parameter_added_to_the_op_later_counts_at_its_default(tmp_path: Path) -> None:
    # An op gains norm_eps (default 1e-6): old goldens, made before it existed, stay fresh
    # while the case keeps the default, and go stale when the case sets another value.
    _fresh(tmp_path, params={**PARAMS, "norm_eps": 1e-6}, param_defaults={"norm_eps": 1e-6})
    with pytest.raises(GoldenStale, match=r"parameter norm_eps \(not recorded\) -> 0.001"):
        _fresh(tmp_path, params={**PARAMS, "norm_eps": 1e-3}, param_defaults={"norm_eps": 1e-6})


def test_a_golden_without_a_parameter_record_is_checked_on_inputs_with_a_note(
    tmp_path: Path,
) -> None:
    with pytest.warns(GoldenNote, match="has no record of the parameters it was made with; it "
                      "is checked on its input fingerprint alone"):
        _fresh(tmp_path, record=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fresh(tmp_path)  # a recorded golden warns nothing


def test_a_golden_of_another_case_says_where_it_came_from(tmp_path: Path) -> None:
    with pytest.raises(GoldenStale) as info:
        _fresh(tmp_path, case="v4pro-t32")
    assert str(info.value).splitlines()[0].endswith(
        f"for case v4pro-t32 is stale: it was made for case '{CASE}' of op 'mhc_pre', not for "
        f"case 'v4pro-t32' of op 'mhc_pre' (copied or renamed from mhc_pre/{CASE}.safetensors)")


# ------------------------------------------------------------------ through the plugin


def test_changing_sinkhorn_iters_makes_the_golden_stale(pytester: pytest.Pytester) -> None:
    make_project(pytester, mhc=True)
    cases = pytester.path / "cases"
    (cases / "indexer.toml").unlink()
    write_goldens(pytester)
    path = golden(pytester, "tiny-mhc", "mhc_pre")
    before = path.read_bytes()
    (cases / "mhc.toml").write_text(TINY_MHC.replace("hidden = 64", "hidden = 64, "
                                                     "sinkhorn_iters = 10"))
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "passed" not in result.parseoutcomes()
    result.stdout.fnmatch_lines([("*golden */mhc_pre/tiny-mhc.safetensors for case tiny-mhc is "
                                 "stale: parameter sinkhorn_iters 20 -> 10")])
    assert path.read_bytes() == before


def test_a_golden_copied_from_another_case_names_its_case(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    cases = pytester.path / "cases"
    text = (cases / "indexer.toml").read_text()
    (cases / "indexer.toml").write_text(text + text.replace("[tiny]", "[tiny2]"))
    write_goldens(pytester)
    shutil.copyfile(golden(pytester), golden(pytester, "tiny2"))
    result = pytester.runpytest("--numcheck")
    result.stdout.fnmatch_lines([("*tiny2.safetensors for case tiny2 is stale: it was made for "
                                 "case 'tiny' of op 'indexer', not for case 'tiny2' of op "
                                 "'indexer' (copied or renamed from indexer/tiny.safetensors)*")])
