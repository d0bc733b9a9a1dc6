"""The numcheck_golden fixture: ad-hoc golden checks in ordinary tests (plain pytest runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from numcheck.goldens.files import GoldenMissing
from numcheck.plugin.golden_fixture import GoldenCheck, GoldenCheckFailure, folder_for_test

TEST_FILE = """
import torch

def inputs():
    g = torch.Generator().manual_seed({seed})
    return torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)

def test_gemm(numcheck_golden):
    a, b = inputs()
    ours = (a.bfloat16() @ b.bfloat16()).float() * {scale}
    numcheck_golden.check(ours, reference_fn=lambda: a @ b, budget={{"rel_fro": 1e-2}},
                          precision="bf16", name="y", inputs=(a, b))

def test_selection(numcheck_golden):
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(4, 64, generator=g)
    ours = scores.clone()
    if {far_flip}:
        ours[0] = -ours[0]  # row 0 picks its bottom 8: flips far from the k-th score
    numcheck_golden.check_topk(torch.topk(ours, 8).indices, reference_fn=lambda: scores,
                               budget={{"tie_band_rel": 1e-3}}, name="sel")
"""


def make(pytester: pytest.Pytester, *, seed: int = 0, scale: float = 1.0,
         far_flip: int = 0) -> None:
    pytester.makepyfile(test_k=TEST_FILE.format(seed=seed, scale=scale, far_flip=far_flip))


def golden(pytester: pytest.Pytester, test: str = "test_gemm", name: str = "y") -> Path:
    return pytester.path / "goldens" / "_tests" / f"test_k.py..{test}" / f"{name}.safetensors"


def test_workflow_missing_regen_pass_unchanged(pytester: pytest.Pytester) -> None:
    make(pytester)
    result = pytester.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        ("E  *GoldenMissing: no golden at *goldens/_tests/test_k.py..test_gemm/y.safetensors "
        "for case test_k.py::test_gemm [[]y[]]"),
        "E  *Fix: create it with: pytest --numcheck-regen test_k.py::test_gemm",
    ])
    assert not golden(pytester).exists()

    result = pytester.runpytest("--numcheck-regen")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*numcheck_golden goldens*",
        "golden rewritten: goldens/_tests/test_k.py..test_gemm/y.safetensors",
        "golden rewritten: goldens/_tests/test_k.py..test_selection/sel.safetensors",
    ])
    first = golden(pytester).read_bytes()
    pytester.runpytest().assert_outcomes(passed=2)
    result = pytester.runpytest("--numcheck-regen", "-k", "gemm")
    result.stdout.fnmatch_lines(["golden unchanged: goldens/_tests/test_k.py..test_gemm/y.safetensors"])
    assert golden(pytester).read_bytes() == first
    assert not golden(pytester, "test_selection", "sel").with_name("x").exists()


def test_over_budget_fails_with_one_layout(pytester: pytest.Pytester) -> None:
    make(pytester)
    pytester.runpytest("--numcheck-regen")
    make(pytester, scale=1.05)  # a 5% scale error; same inputs, so the golden is fresh
    result = pytester.runpytest("-k", "gemm")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E  *GoldenCheckFailure: numcheck FAIL test_k.py::test_gemm [[]y[]]",
        ("E  *worst: y.frac_outside = 0.9* > budget 0.01562: 121 of 128 elements outside the band, "
            "more than the 2 max_outside allows"),
        # Where the error sits, and the worst output's elements, as in a case failure.
        "E  *where: y: a global scale: output = 1.0* x golden *",
        "E  *y: mismatched elements 121 / 128 (94.5%) outside atol 0.01 + rtol 0.016 * |golden|",
        "E  *y: max abs error * at index (*); max rel error * at index (*)",
        "E  *also:  y.rel_fro = 0.049* > budget 0.01",
        "E  *also:  y.calc_diff = 0.001* > budget 0.0001",
        "E  *golden:      *goldens/_tests/test_k.py..test_gemm/y.safetensors",
        # frac_outside is not in the call's budget=: the defaults row, and how to override.
        ("E  *budget:      frac_outside = 0.01: default for bf16 from numcheck/numerics/"
         "budgets.py (no such key in budget= at test_k.py:10; pass budget={'frac_outside': "
         "...} to override)"),
        "E  *reproduce:   pytest test_k.py::test_gemm",
        ("E  *regenerate:  pytest --numcheck-regen test_k.py::test_gemm  (only if the "
        "reference itself changed)"),
    ])


def test_far_topk_flips_fail_with_the_flip_table(pytester: pytest.Pytester) -> None:
    make(pytester)
    pytester.runpytest("--numcheck-regen")
    make(pytester, far_flip=1)
    result = pytester.runpytest("-k", "selection")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E  *numcheck FAIL test_k.py::test_selection [[]sel[]]",
        "E  *worst: sel.* < budget *",
        "E  *where: sel: only row 0 is wrong (1 of 4 rows, 100% of the unexplained top-k flips)",
        "E  *also:  sel.recall_min = 0 < budget 0.95: worst row 0",
        "E  *unexplained top-k flips: 15 (in 1 of 4 rows; tie band 0.001 of the row max |score|)",
        "E  *row   token  dir  golden score   k-th score      margin",
        "E  *budget:      tie_recall_min = 1: default for bf16 from * (no such key in budget= at "
        "test_k.py:19; *",
    ])


def test_a_limit_the_test_set_is_named_at_its_line(pytester: pytest.Pytester) -> None:
    """The worst violation's limit comes from the call's budget=: the message points there,
    as a case failure points at its case file's line."""
    make(pytester)
    pytester.runpytest("--numcheck-regen")
    make(pytester, scale=1.003)  # a 0.3% scale error: rel_fro past a budget= of 1e-4
    text = (pytester.path / "test_k.py").read_text().replace('"rel_fro": 1e-2', '"rel_fro": 1e-4')
    (pytester.path / "test_k.py").write_text(text)
    result = pytester.runpytest("-k", "gemm")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E  *worst: y.rel_fro = * > budget 0.0001",
        "E  *budget:      test_k.py:10 (budget= of this check: rel_fro = 0.0001)",
    ])


def test_changed_inputs_are_stale_not_compared(pytester: pytest.Pytester) -> None:
    make(pytester)
    pytester.runpytest("--numcheck-regen")
    before = golden(pytester).read_bytes()
    make(pytester, seed=1)
    result = pytester.runpytest("-k", "gemm")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E  *GoldenStale: * is stale: input fingerprint *",
                                 ("E  *regenerate it with: pytest --numcheck-regen "
                                 "test_k.py::test_gemm")])
    assert golden(pytester).read_bytes() == before


def test_tampered_golden_is_corrupt_and_left_alone(pytester: pytest.Pytester) -> None:
    make(pytester)
    pytester.runpytest("--numcheck-regen")
    path = golden(pytester)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    result = pytester.runpytest("-k", "gemm")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E  *GoldenCorrupt: * is corrupt: content hash *"])
    assert path.read_bytes() == bytes(data)
    # Only the regen flag rewrites it.
    pytester.runpytest("--numcheck-regen", "-k", "gemm").assert_outcomes(passed=1)
    pytester.runpytest("-k", "gemm").assert_outcomes(passed=1)


def test_regen_alone_without_fixture_checks_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    result = pytester.runpytest("--numcheck-regen")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        ("numcheck: --numcheck-regen without --numcheck regenerates only numcheck_golden "
        "checks, and none ran. For case goldens: pytest --numcheck --numcheck-regen"),
    ])


def test_goldens_folder_follows_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnumcheck_goldens = data/gold\n")
    make(pytester)
    pytester.runpytest("--numcheck-regen", "-k", "gemm").assert_outcomes(passed=1)
    assert (pytester.path / "data" / "gold" / "_tests" / "test_k.py..test_gemm"
            / "y.safetensors").exists()


# -- the engine, directly ------------------------------------------------------------------


def test_folder_for_test_is_readable_and_unique() -> None:
    assert folder_for_test("tests/test_k.py::TestA::test_gemm[bf16-64]") == (
        "tests.test_k.py..TestA..test_gemm[bf16-64]"
    )
    odd = folder_for_test("t.py::test[a b]")
    assert odd.startswith("t.py..test[a_b]-") and len(odd) == len("t.py..test[a_b]-") + 10
    assert folder_for_test("t.py::test[a b]") != folder_for_test("t.py::test[a_b]")
    long = folder_for_test("t.py::test[" + "x" * 300 + "]")
    assert len(long) == 120 + 11
    assert ".." not in folder_for_test("../../etc::x")[:2]


def test_check_names_must_be_file_names_and_unique(tmp_path: Path) -> None:
    check = GoldenCheck(tmp_path, "t.py::test", regen=True)
    x = torch.ones(4)
    check.check(x, reference_fn=lambda: x, name="a")
    with pytest.raises(ValueError, match="already has a check named 'a'. Fix: give each check"):
        check.check(x, reference_fn=lambda: x, name="a")
    with pytest.raises(ValueError, match=r"check name '\.\./a' cannot name a file"):
        check.check(x, reference_fn=lambda: x, name="../a")


def test_without_regen_the_reference_never_runs(tmp_path: Path) -> None:
    def reference() -> torch.Tensor:
        raise AssertionError("the reference must not run without the regen flag")

    with pytest.raises(GoldenMissing):
        GoldenCheck(tmp_path, "t.py::test").check(torch.ones(2), reference_fn=reference)


def test_budget_given_partly_is_completed_from_the_precision_row(tmp_path: Path) -> None:
    x = torch.linspace(1, 2, 64)
    GoldenCheck(tmp_path, "t.py::test", regen=True).check(x, reference_fn=lambda: x)
    noisy = x * (1 + 3e-3)
    # bf16 output: the bf16 row (rel_fro 1e-2) holds, nothing silently zero.
    metrics = GoldenCheck(tmp_path, "t.py::test").check(noisy.bfloat16(), reference_fn=lambda: x)
    assert metrics.rel_fro > 1e-3
    # fp32 output: the fp32 row is far tighter, and a given key overrides only itself.
    with pytest.raises(GoldenCheckFailure, match="output.rel_fro = 0.003 > budget 1e-05"):
        GoldenCheck(tmp_path, "t.py::test").check(noisy, reference_fn=lambda: x)
    with pytest.raises(GoldenCheckFailure, match="output.calc_diff = .* > budget 1e-09"):
        GoldenCheck(tmp_path, "t.py::test").check(noisy, reference_fn=lambda: x,
                                                  budget={"rel_fro": 1e-2})


def test_version_bump_makes_the_golden_stale(tmp_path: Path) -> None:
    from numcheck.goldens.files import GoldenStale

    x = torch.ones(3)
    GoldenCheck(tmp_path, "t.py::test", regen=True).check(x, reference_fn=lambda: x)
    with pytest.raises(GoldenStale, match="op_version 1 -> 2"):
        GoldenCheck(tmp_path, "t.py::test").check(x, reference_fn=lambda: x, version=2)


def test_large_outputs_are_sampled(tmp_path: Path) -> None:
    from numcheck.goldens.files import load_golden

    x = torch.randn(520, 520)  # just over FULL_LIMIT
    GoldenCheck(tmp_path, "t.py::test", regen=True).check(x, reference_fn=lambda: x, name="big")
    stored = load_golden(GoldenCheck(tmp_path, "t.py::test").path("big"), case="", regen_hint="")
    assert stored.tensors["big.val"].numel() == 65_536 and "big" not in stored.tensors
    GoldenCheck(tmp_path, "t.py::test").check(x, reference_fn=lambda: x, name="big")
    with pytest.raises(GoldenCheckFailure):
        GoldenCheck(tmp_path, "t.py::test").check(x * 1.1, reference_fn=lambda: x, name="big")


def test_a_nan_outside_a_sampled_golden_fails_the_fixture(tmp_path: Path) -> None:
    """A large output is compared at its golden's sample; a NaN elsewhere shows only in the
    whole output's counts, which the fixture checks as a case's numerics do."""
    from numcheck.goldens.packing import pack_output

    x = torch.randn(520, 520)  # just over FULL_LIMIT: sampled
    GoldenCheck(tmp_path, "t.py::test", regen=True).check(x, reference_fn=lambda: x, name="big")
    sampled = set(pack_output("big", x)["big.idx"].tolist())
    bad = x.clone()
    bad.view(-1)[next(i for i in range(x.numel()) if i not in sampled)] = float("nan")
    with pytest.raises(GoldenCheckFailure, match=r"big\.nan_count = 1 > budget 0"):
        GoldenCheck(tmp_path, "t.py::test").check(bad, reference_fn=lambda: x, name="big")


def test_topk_reference_may_give_its_own_selection(tmp_path: Path) -> None:
    scores = torch.arange(10.0).view(1, 10)
    golden_idx = torch.tensor([[9, 8, 7]])
    GoldenCheck(tmp_path, "t.py::test", regen=True).check_topk(
        golden_idx, reference_fn=lambda: (golden_idx, scores))
    report = GoldenCheck(tmp_path, "t.py::test").check_topk(
        torch.tensor([[9, 8, 7]]), reference_fn=lambda: scores)
    assert report.recall_min == 1.0
    with pytest.raises(GoldenCheckFailure, match="topk.recall_min = 0.6667 < budget 0.95"):
        GoldenCheck(tmp_path, "t.py::test").check_topk(
            torch.tensor([[9, 8, 0]]), reference_fn=lambda: scores)
