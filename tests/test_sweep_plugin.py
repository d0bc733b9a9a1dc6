"""A shape sweep through the plugin (pytester): one item per point and variant, ids that -k
selects and the reproduce line reproduces, a golden per point made by the regen flag, a
missing one failing with the command that makes it, failures naming the point, and one
summary row per sweep listing its failing points (terminal and markdown); the JSON report
keeps every point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.caseproject import case_project

SWEEP = """
[tile]
op = "indexer"
description = "one request around the 128-token tile, tiny heads"
shape = { batch = 1, heads = 4, head_dim = 32, index_topk = 16 }
sweep.max_context = [127, 128, 129]
seeds = [0]
variants = ["bf16", "tile_count_off_by_one"]
"""

CONFTEST = """
from tests.variant_tables import register_table
from tests import planted_sweeps

def pytest_numcheck_register(registry):
    register_table({"indexer": dict(planted_sweeps.SWEEP_PLANTED_TABLE)})
"""


def make_project(pytester: pytest.Pytester) -> None:
    case_project(pytester, {"sweeps.toml": SWEEP}, conftest=CONFTEST)


def point_golden(pytester: pytest.Pytester, length: int) -> Path:
    return pytester.path / "goldens" / "indexer" / f"tile@max_context{length}.safetensors"


def test_each_point_is_an_item_named_by_its_value(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    result = pytester.runpytest("--numcheck", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "cases/sweeps.toml::tile::max_context127::fp32[[]cpu[]]",
        "cases/sweeps.toml::tile::max_context127::bf16[[]cpu[]]",
        "cases/sweeps.toml::tile::max_context127::tile_count_off_by_one[[]cpu[]]",
        "cases/sweeps.toml::tile::max_context128::fp32[[]cpu[]]",
        "cases/sweeps.toml::tile::max_context129::tile_count_off_by_one[[]cpu[]]",
        "9 tests collected*",
    ])
    result = pytester.runpytest("--numcheck", "--collect-only", "-q", "-k", "max_context128")
    result.stdout.fnmatch_lines(["3/9 tests collected (6 deselected)*"])


def test_a_missing_point_golden_fails_with_the_command_that_makes_it(
        pytester: pytest.Pytester) -> None:
    make_project(pytester)
    result = pytester.runpytest("--numcheck", "-k", "max_context128 and fp32")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*GoldenMissing indexer::tile@max_context128::fp32[[]cpu[]]*",
        "*no golden at *goldens/indexer/tile@max_context128.safetensors*",
        ("*create it with: pytest --numcheck --numcheck-regen cases/sweeps.toml::tile::"
        "max_context128*"),
    ])


def test_regen_makes_every_point_and_the_sweep_names_its_failing_points(
        pytester: pytest.Pytester) -> None:
    make_project(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-regen", "cases/sweeps.toml::tile",
                                "-k", "not tile_count")
    result.assert_outcomes(passed=6)
    for length in (127, 128, 129):
        assert point_golden(pytester, length).is_file()
    result.stdout.fnmatch_lines(["*golden created: goldens/indexer/tile@max_context129*"])

    result = pytester.runpytest("--numcheck", "--numcheck-markdown", "out.md",
                                "--numcheck-report", "out.json")
    # The planted bug drops the one token of a last tile that holds one: max_context 129.
    result.assert_outcomes(passed=8, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tile@max_context129::tile_count_off_by_one[[]cpu[]]",
        "  worst: logits.inf_mask = 1 *",
        "  case:        cases/sweeps.toml [[]tile@max_context129[]]",
        ("  reproduce:   pytest --numcheck --numcheck-device cpu "
        "'cases/sweeps.toml::tile::max_context129::tile_count_off_by_one[[]cpu[]]'"),
        ("  regenerate:  pytest --numcheck --numcheck-regen "
        "cases/sweeps.toml::tile::max_context129*"),
    ])
    result.stdout.fnmatch_lines([
        "*numcheck summary*",
        ("indexer::tile *tile_count_off_by_one *cpu *max_context129: logits.inf_mask 1/0 *"
        "FAIL (1 of 3 points: max_context129)"),
        "indexer::tile *fp32 *cpu *PASS (3 points)",
    ])
    summary = [line for line in result.outlines if line.startswith("indexer::tile ")
               and line.endswith(("points)", "max_context129)"))]
    assert len(summary) == 3  # one row per variant, not per point
    result.stdout.fnmatch_lines(["indexer::tile (worst of 3 points: *) *tile_count_off_by_one*"])
    markdown = (pytester.path / "out.md").read_text()
    assert "FAIL (1 of 3 points: max_context129)" in markdown
    assert "`indexer::tile@max_context129::tile_count_off_by_one[cpu]`" in markdown
    records = json.loads((pytester.path / "out.json").read_text())["records"]
    assert len(records) == 9
    failing = [r for r in records if r["status"] == "fail"]
    assert [(r["case"], r["sweep"]["case"], r["sweep"]["point"], r["sweep"]["values"])
            for r in failing] == [("tile@max_context129", "tile", "max_context129",
                                   {"max_context": 129})]

    # The reproduce line runs that point alone, and fails the same way.
    result = pytester.runpytest(
        "--numcheck", "cases/sweeps.toml::tile::max_context129::tile_count_off_by_one[cpu]")
    result.assert_outcomes(failed=1)
    # -k selects a point; there the planted variant passes.
    result = pytester.runpytest("--numcheck", "-k", "max_context128")
    result.assert_outcomes(passed=3)


def test_a_points_budget_line_names_the_sweeps_table(pytester: pytest.Pytester) -> None:
    """Every point is held to its sweep case's tables: a miss names that table's line, and
    the next step calibrates the whole sweep (its points pool into one table)."""
    make_project(pytester)
    path = pytester.path / "cases" / "sweeps.toml"
    path.write_text(SWEEP.replace('["bf16", "tile_count_off_by_one"]', '["bf16"]')
                    + "\n[tile.budget.bf16.logits]\nrel_fro = 1e-9\n")
    line = path.read_text().splitlines().index("rel_fro = 1e-9") + 1
    pytester.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32")
    result = pytester.runpytest("--numcheck", "-k", "max_context128 and bf16")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tile@max_context128::bf16[[]cpu[]]",
        f"  budget:      cases/sweeps.toml:{line} ([[]tile.budget.bf16.logits[]] rel_fro = 1e-09)",
        ("*calibrate the honest bf16 family*: pytest --numcheck --numcheck-calibrate "
        "--numcheck-device cpu cases/sweeps.toml::tile --numcheck-calibrate-pool bf16=*"),
    ])
