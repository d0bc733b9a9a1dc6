"""benchmarks/numerics/fp8_accumulation.py on the CPU (its model rows, its table and its JSON), and
benchmarks/numerics/fp8_families.py's selection and its readings of measured files (--suggest,
--tails, --margins)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.numerics import fp8_accumulation
from numcheck.cases import Case
from tests.shipped import shipped_cases


def _shipped_case(case_id: str) -> Case:
    """The case ``case_id`` of the shipped case files, as it loads."""
    (case,) = [c for c in shipped_cases() if c.id == case_id]
    return case


@pytest.mark.slow  # a dozen emulated GEMMs of K = 1024 with their bounds (seconds)
def test_the_cpu_path_writes_its_table_and_json(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert fp8_accumulation.main(["--device", "cpu", "--quick", "--seeds", "1",
                                  "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].startswith("row")
    data = json.loads((tmp_path / "fp8_accumulation.json").read_text())
    rows = {(r["name"], r["data"]): r for r in data["rows"]}
    assert data["meta"]["device"] == "cpu" and len(rows) == 10
    for r in rows.values():
        assert 0 < r["ratio"] <= 1.0 and r["seeds"] == 1  # the model under its own bound
    fast = rows[("model/tensor/fast/float32", "positive")]["rel_fro"]
    promoted = rows[("model/tensor/promoted128/float32", "positive")]["rel_fro"]
    assert fast > 10 * promoted  # no promotion over a long positive K loses far more


def test_fp8_families_heads_only_keeps_the_shipped_variants_alone() -> None:
    """--heads-only: each low-precision variant without its scheme's members (the many
    seeds that the tail keys frac_outside and max_band_ratio are set from)."""
    from benchmarks.numerics import fp8_families

    case = _shipped_case("tiny-k384")
    full = fp8_families.families(case, "cpu")
    heads = fp8_families.families(case, "cpu", heads_only=True)
    assert heads == {name: [name] for name in full}
    assert "fp8_block" in heads and "bf16" not in heads  # bf16 declares no quantization
    assert any(len(members) > 1 for members in full.values())


def test_fp8_families_tails_ships_twice_the_worst_and_never_lowers() -> None:
    """--tails: max(shipped, 2x the worst) per tail key, a raise marked; the case file's
    limit kept where the many seeds stay under half of it."""
    from benchmarks.numerics import fp8_families

    case = _shipped_case("tiny-k384")
    shipped = case.budgets["fp8_block"].outputs["y"].limits

    def rows(frac: float, band: float) -> list[str]:
        merged = {"cases": {"linear::tiny-k384": {"fp8_block": {
            "worst": {"y": {"frac_outside": frac, "max_band_ratio": band, "rel_fro": 0.9}},
            "checks": 150, "expected": False}}}}
        return fp8_families.tails(merged, [case]).splitlines()[2:]

    low = rows(shipped["frac_outside"] / 4, shipped["max_band_ratio"] / 4)
    assert len(low) == 2 and not any("raise" in r for r in low)  # rel_fro is no tail key
    assert low[0].endswith(f"| {shipped['frac_outside']:g} |")
    high = rows(shipped["frac_outside"], 3 * shipped["max_band_ratio"])
    assert all(r.endswith("(raise) |") for r in high)
    from numcheck.calibrate.headroom import round_up

    assert f"| {round_up(2 * 3 * shipped['max_band_ratio']):g} (raise) |" in high[1]


def test_fp8_families_select_takes_comma_separated_alternatives() -> None:
    """-k 'a,b' picks the cases whose id contains a or b (one device call for the cases a
    previous run did not reach); a plain substring still picks as before."""
    from benchmarks.numerics import fp8_families

    assert fp8_families.selected("v3-o-decode-t16", "v3-o-decode,fp8-v4flash-t32")
    assert fp8_families.selected("fp8-v4flash-t32", "v3-o-decode,fp8-v4flash-t32")
    assert not fp8_families.selected("v3-q-a-decode-t8", "v3-o-decode,fp8-v4flash-t32")
    assert fp8_families.selected("tiny-k384", "")
    assert not fp8_families.selected("tiny-k384", "v3-")


def test_fp8_families_suggest_reads_a_cuda_only_cases_measurements(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--suggest reads a JSON measured on another device: a CUDA-only case's budgets are
    suggested on a machine without a GPU (the H200's suggestion once listed none of them)."""
    from benchmarks.numerics import fp8_families

    case = _shipped_case("v3-o-decode-t16")
    assert "cpu" not in case.devices
    row = {"rel_fro": 0.03, "calc_diff": 5e-4, "frac_outside": 0.004, "max_err_ratio": 1.0,
           "max_band_ratio": 3.0}
    measured = tmp_path / "cuda.json"
    measured.write_text(json.dumps({"cases": {"linear::v3-o-decode-t16": {"fp8_block": {
        "members": ["fp8_block"], "worst": {"y": row}, "quant": {}, "failures": [],
        "errors": [], "checks": 1, "expected": True}}}}))
    assert fp8_families.main(["--suggest", str(measured)]) == 0
    out = capsys.readouterr().out
    assert "[v3-o-decode-t16.budget.fp8_block.y]" in out
    assert "rel_fro = 0.06" in out


def test_fp8_families_margins_are_the_worst_over_the_loaded_limit() -> None:
    """--margins: each key's worst over the limit the case loads (the case file's, else the
    class default it inherits); known-bad variants are left out, a key not measured is '-'."""
    from benchmarks.numerics import fp8_families

    case = _shipped_case("v3-o-decode-t16")
    limits = case.budgets["fp8_block"].outputs["y"].limits
    worst = {"rel_fro": limits["rel_fro"] / 2, "max_band_ratio": 0.6 * limits["max_band_ratio"]}
    merged = {"cases": {"linear::v3-o-decode-t16": {
        "fp8_block": {"worst": {"y": worst}, "checks": 5, "expected": False},
        "fp8_row": {"worst": {"y": {"rel_fro": 1.0}}, "checks": 5, "expected": True}}}}
    head, rule, *rows = fp8_families.margins(merged, [case]).splitlines()
    cells = dict(zip(head.strip("| ").split(" | "), rows[0].strip("| ").split(" | "),
                     strict=True))
    assert len(rows) == 1 and cells["variant"] == "fp8_block"
    assert cells["rel_fro"] == "0.50" and cells["max_band_ratio"] == "0.60"
    assert cells["calc_diff"] == "-"
