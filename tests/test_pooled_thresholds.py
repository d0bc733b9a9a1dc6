"""benchmarks/speed/pooled_thresholds.py: many runs' perf tables in, thresholds lowered only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.speed import pooled_thresholds
from numcheck.cases import load_cases

ROOT = Path(__file__).resolve().parent.parent

#: Rows as the end-of-run perf table prints them (docs/evidence/*/run/perf-N.txt): a gated
#: pass, a known-bad variant's decided miss, and a row the table's first section prints for
#: the same check (no timer column, no threshold), which is not a timing row.
BF16 = ("linear::perf-linear-v3-expert-down-prefill-t2048  bf16             cuda    cuda-graph  "
        "0.0807 ms    0.3%  1.52 ms     {s} [18.780, 18.895]  20x13  0.42 s  745      831.6  "
        "27.6%    pass (min 18.3)")
ROUNDTRIP = ("mhc_pre::perf-mhc-v4pro-t4k-prefill               bf16_roundtrip   cuda    "
             "cuda-graph  2.065 ms     0.1%  1.996 ms    {s} [0.965, 0.968]     20x1   0.08 s  "
             "2.73     143.9  4.8%     fail (min 1.02)")
SUMMARY = ("linear::perf-linear-v3-expert-down-prefill-t2048  bf16             cuda    -   "
           "                              -          -        -       -           18.83x "
           "[18.78, 18.89]     PASS")


#: The GPU runner's env.txt beside its logs: the card they were made on.
ENV = "date: 2026-12-07T14:07:07+00:00\ngpu: {gpu}, 580.159.04, 81559 MiB, 1980 MHz\n"


def _logs(tmp_path: Path, bf16: list[float], roundtrip: float = 1.06,
          gpu: str = "NVIDIA H100 80GB HBM3") -> list[str]:
    (tmp_path / "env.txt").write_text(ENV.format(gpu=gpu))
    paths = []
    for i, s in enumerate(bf16):
        path = tmp_path / f"perf-{i}.txt"
        path.write_text("\n".join([SUMMARY, BF16.format(s=s), ROUNDTRIP.format(s=roundtrip)]))
        paths.append(str(path))
    return paths


def _threshold(cases: Path, case_id: str, variant: str) -> float:
    case = next(c for c in load_cases(cases) if c.id == case_id)
    return case.perf[variant].speedup_min["H100"]


def test_the_table_rows_of_gated_checks_are_read_and_no_other(tmp_path: Path) -> None:
    runs = pooled_thresholds.pooled_speedups([Path(p) for p in _logs(tmp_path, [18.8, 19.2])])
    assert runs == {("linear::perf-linear-v3-expert-down-prefill-t2048", "bf16"): [18.8, 19.2],
                    ("mhc_pre::perf-mhc-v4pro-t4k-prefill", "bf16_roundtrip"): [1.06, 1.06]}


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    pytest.importorskip("tomlkit", reason="--write edits the case file with tomlkit")
    folder = tmp_path / "cases"
    folder.mkdir()
    shutil.copy(ROOT / "cases" / "perf.toml", folder / "perf.toml")
    return folder


def test_a_slower_card_lowers_the_threshold_and_a_faster_one_never_raises_it(
    tmp_path: Path, cases: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _threshold(cases, "perf-linear-v3-expert-down-prefill-t2048", "bf16")
    (tmp_path / "fast").mkdir()
    fast = _logs(tmp_path / "fast", [before * 1.5] * 3)
    assert pooled_thresholds.main([*fast, "--class", "H100", "--cases", str(cases), "--write"]) == 0
    assert _threshold(cases, "perf-linear-v3-expert-down-prefill-t2048", "bf16") == before

    (tmp_path / "slow").mkdir()
    slow = _logs(tmp_path / "slow", [18.0, 19.0, 19.5])
    assert pooled_thresholds.main([*slow, "--class", "H100", "--cases", str(cases), "--write"]) == 0
    after = _threshold(cases, "perf-linear-v3-expert-down-prefill-t2048", "bf16")
    assert after == 17.1  # the slowest of three runs x 0.95, rounded down: 18.0 x 0.95
    text = (cases / "perf.toml").read_text()
    assert f"H100 lowered from {before:g}: the rule over 3 recorded runs" in text
    assert "set by: python -m benchmarks.speed.pooled_thresholds --class H100" in text
    # The known-bad round trip: its runs would give an honest variant 1.0; it keeps 1.02.
    assert _threshold(cases, "perf-mhc-v4pro-t4k-prefill", "bf16_roundtrip") == 1.02
    assert "| linear::perf-linear-v3-expert-down-prefill-t2048::bf16 | 3 | 18.000 |" in (
        capsys.readouterr().out)


def test_a_log_of_another_class_or_of_no_known_card_is_refused(tmp_path: Path) -> None:
    (tmp_path / "h200").mkdir()
    h200 = _logs(tmp_path / "h200", [18.0], gpu="NVIDIA H200")
    with pytest.raises(SystemExit, match=r"perf-0.txt: made on a card of class H200, not H100"):
        pooled_thresholds.main([*h200, "--class", "H100"])
    (tmp_path / "h200" / "env.txt").unlink()
    with pytest.raises(SystemExit, match=r"no env.txt with a 'gpu:' line beside it"):
        pooled_thresholds.main([*h200, "--class", "H200"])
    assert pooled_thresholds.card_class(Path(_logs(tmp_path, [18.0])[0])) == "H100"
