"""Stale goldens: reported at the end of a whole run, deleted only with --numcheck-prune."""

from __future__ import annotations

from pathlib import Path

import pytest

from numcheck.cases import CaseFileError
from numcheck.goldens.stale import find_stale, golden_files, prune
from tests.caseproject import TINY_INDEXER, golden, make_project, write_goldens


def _write(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _cases(tmp_path: Path) -> Path:
    cases = tmp_path / "cases"
    _write(cases / "indexer.toml", TINY_INDEXER.format(variants='"tf32"', next_n=1,
                                                      extra="").encode())
    return cases


def test_find_stale_lists_goldens_no_case_names(tmp_path: Path) -> None:
    cases, goldens = _cases(tmp_path), tmp_path / "goldens"
    used = _write(goldens / "indexer" / "tiny.safetensors")
    renamed = _write(goldens / "indexer" / "tiny-old.safetensors")
    no_op = _write(goldens / "retired_op" / "tiny.safetensors")
    # Not goldens: hidden leftovers of interrupted writes, locks, other files.
    _write(goldens / "indexer" / ".tiny.safetensors.1a2b3c4d.tmp")
    _write(goldens / "indexer" / ".tiny.safetensors.lock")
    _write(goldens / "indexer" / "README.md")
    assert golden_files(goldens) == sorted(p.resolve() for p in (used, renamed, no_op))
    assert find_stale(cases, goldens) == sorted([renamed.resolve(), no_op.resolve()])


def test_cases_in_subfolders_count(tmp_path: Path) -> None:
    cases, goldens = tmp_path / "cases", tmp_path / "goldens"
    body = TINY_INDEXER.format(variants='"tf32"', next_n=1, extra="")
    _write(cases / "more" / "indexer.toml", body.encode())
    _write(goldens / "indexer" / "tiny.safetensors")
    assert find_stale(cases, goldens) == []


def test_unreadable_case_file_means_nothing_is_stale(tmp_path: Path) -> None:
    cases, goldens = _cases(tmp_path), tmp_path / "goldens"
    _write(cases / "broken.toml", b"[oops\n")
    _write(goldens / "indexer" / "tiny-old.safetensors")
    with pytest.raises(CaseFileError, match="broken.toml"):
        find_stale(cases, goldens)


def test_prune_deletes_exactly_what_it_is_given(tmp_path: Path) -> None:
    keep = _write(tmp_path / "g" / "op" / "a.safetensors")
    gone = _write(tmp_path / "g" / "op" / "b.safetensors")
    assert prune([gone, tmp_path / "g" / "op" / "never.safetensors"]) == [gone]
    assert keep.exists() and not gone.exists()
    assert sorted(p.name for p in (tmp_path / "g" / "op").iterdir()) == ["a.safetensors"]


def test_stale_goldens_are_reported_and_pruned_only_on_request(
    pytester: pytest.Pytester,
) -> None:
    make_project(pytester)
    write_goldens(pytester)
    used = golden(pytester)
    kept = used.read_bytes()
    old = _write(golden(pytester, "tiny-old"), kept)
    ghost = _write(golden(pytester, "x", op="retired_op"), kept)

    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*numcheck: 2 stale golden(s): no case uses them*",
        "  goldens/indexer/tiny-old.safetensors",
        "  goldens/retired_op/x.safetensors",
        "Fix: delete them with pytest --numcheck --numcheck-prune, or restore the case*",
    ])
    assert old.exists() and ghost.exists()

    result = pytester.runpytest("--numcheck", "-k", "tf32")
    result.stdout.fnmatch_lines(["numcheck: stale goldens not checked (the run is narrowed by -k)*"])
    for narrowed in (("-k", "tf32"), ("cases/indexer.toml::tiny",)):
        result = pytester.runpytest("--numcheck", "--numcheck-prune", *narrowed)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*--numcheck-prune * needs the whole cases folder*Fix:*"])
    assert old.exists() and ghost.exists()

    result = pytester.runpytest("--numcheck", "--numcheck-prune")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "numcheck: deleted stale golden goldens/indexer/tiny-old.safetensors",
        "numcheck: deleted stale golden goldens/retired_op/x.safetensors",
    ])
    assert not old.exists() and not ghost.exists()
    assert used.read_bytes() == kept

    result = pytester.runpytest("--numcheck")
    assert "stale golden" not in result.stdout.str()


def test_prune_needs_numcheck(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--numcheck-prune")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--numcheck-prune only works together with --numcheck*"])
