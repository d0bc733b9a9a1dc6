"""Regeneration: refuse undeclared NaN/Inf, keep the stored bytes within the reference's
reproducibility tolerance, rewrite only on a real change."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from numcheck.cases import load_case_file
from numcheck.check.make_golden import regenerate
from numcheck.check.run import CaseInputs
from numcheck.goldens.files import load_golden, save_golden
from numcheck.goldens.regen import GoldenRefused
from numcheck.goldens.reproducibility import REFERENCE_EPS_FACTOR, difference, stats_difference
from numcheck.ops import registry
from numcheck.ops.registry import Variant, get_op
from tests.caseproject import TINY_MHC, golden, make_project
from tests.test_registration import make_op

EPS = torch.finfo(torch.float32).eps


# ------------------------------------------------------------------ the tolerance itself


def test_last_bit_moves_are_within_and_real_changes_are_not() -> None:
    old = torch.linspace(-3.0, 3.0, 101)
    scale = 3.0
    moved = old + 5 * EPS * scale  # what another CPU's summation order does (measured ~5)
    d = difference(old, moved)
    assert d.within and d.n_differ > 0 and 4 < d.eps_units < 6
    assert not difference(old, old + 2 * REFERENCE_EPS_FACTOR * EPS * scale).within
    assert not difference(old, old * 1.0015).within  # a real change (scaled weights)


def test_a_bf16_output_may_round_the_other_way_once() -> None:
    old = torch.tensor([2.03125, 100.0, -0.5], dtype=torch.bfloat16)
    one_step = torch.tensor([2.046875, 100.0, -0.5], dtype=torch.bfloat16)
    assert difference(old, one_step).within
    three_steps = torch.tensor([2.078125, 100.0, -0.5], dtype=torch.bfloat16)
    assert not difference(old, three_steps).within


def test_masks_and_integers_must_match_exactly() -> None:
    inf = float("-inf")
    assert difference(torch.tensor([1.0, inf]), torch.tensor([1.0, inf])).n_differ == 0
    assert not difference(torch.tensor([1.0, inf]), torch.tensor([1.0, -1e30])).within
    assert not difference(torch.tensor([3, 4]), torch.tensor([3, 5])).within
    nan = float("nan")
    assert difference(torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0])).within


def test_summary_statistics_counts_are_exact_sums_tolerant() -> None:
    stats = torch.tensor([1000.0, 12.5, 900.0, -3.0, 3.0, 0.0, 0.0, 5.0], dtype=torch.float64)
    near = stats.clone()
    near[1] += 1000 * 3 * EPS  # every element moved by one eps of the scale
    assert stats_difference(stats, near).within
    more_inf = stats.clone()
    more_inf[7] = 6.0
    assert not stats_difference(stats, more_inf).within


# ------------------------------------------------------------------ regenerate()


def _tiny_mhc(tmp_path: Path) -> tuple[Path, object, object, CaseInputs]:
    toml = tmp_path / "mhc.toml"
    toml.write_text(TINY_MHC)
    (case,) = load_case_file(toml)
    op = get_op(case.op)
    path = tmp_path / "goldens" / "tiny-mhc.safetensors"
    return path, op, case, CaseInputs(op, case)


def _perturb(path: Path, rel: float, *, drop_params: bool = False) -> bytes:
    """Save the golden again with every fp32 output moved by ``rel`` x its max |value|."""
    g = load_golden(path, case="tiny-mhc", regen_hint="")
    tensors = {}
    for k, t in g.tensors.items():
        if t.dtype == torch.float32:
            t = t + rel * float(t.abs().max())
        tensors[k] = t
    meta = {k: v for k, v in g.meta.items() if k not in ("shapes", "dtypes", "content_hash")}
    if drop_params:
        del meta["params"]
    save_golden(path, tensors, meta)
    return path.read_bytes()


def test_regen_keeps_the_bytes_within_tolerance_and_rewrites_a_real_change(
    tmp_path: Path,
) -> None:
    path, op, case, inputs = _tiny_mhc(tmp_path)
    assert regenerate(path, op, case, "cpu", inputs).note == "created"
    again = regenerate(path, op, case, "cpu", inputs)
    assert (again.written, again.note) == (False, "unchanged")

    kept = _perturb(path, 4 * EPS)  # as if made on another CPU
    outcome = regenerate(path, op, case, "cpu", inputs)
    assert not outcome.written and path.read_bytes() == kept
    assert outcome.note.startswith("unchanged (within reproducibility tolerance, max diff: "
                                   "float32: ")
    assert outcome.note.endswith("fp32 eps x the output's max |value|; tolerance 64 fp32 eps x "
                                 "max |value| + 1 rounding step; stored bytes kept)")

    _perturb(path, 1e-4)  # a real change of the reference
    outcome = regenerate(path, op, case, "cpu", inputs)
    assert (outcome.written, outcome.note) == (True, "rewritten")
    assert regenerate(path, op, case, "cpu", inputs).note == "unchanged"


def test_regen_records_missing_parameters_without_touching_the_outputs(tmp_path: Path) -> None:
    path, op, case, inputs = _tiny_mhc(tmp_path)
    regenerate(path, op, case, "cpu", inputs)
    _perturb(path, 2 * EPS, drop_params=True)
    old = load_golden(path, case="tiny-mhc", regen_hint="")
    outcome = regenerate(path, op, case, "cpu", inputs)
    assert outcome.written and outcome.note.startswith(
        "metadata updated (parameters recorded); outputs unchanged (within reproducibility")
    new = load_golden(path, case="tiny-mhc", regen_hint="")
    assert new.meta["params"] == dict(case.params)  # type: ignore[attr-defined]
    assert all(torch.equal(old.tensors[k], new.tensors[k]) for k in old.tensors)


def _nan_reference(inputs: dict, params: dict) -> dict[str, torch.Tensor]:
    y = inputs["x"] * 2
    y[0] = float("nan")
    return {"y": y}


def test_regen_refuses_a_reference_with_undeclared_nan(tmp_path: Path) -> None:
    registry.register(make_op("nanny", variants={
        "fp32": Variant("fp32", _nan_reference, "fp32")}))
    toml = tmp_path / "c.toml"
    toml.write_text('[n]\nop = "nanny"\n')
    (case,) = load_case_file(toml)
    op = get_op("nanny")
    path = tmp_path / "nanny" / "n.safetensors"
    with pytest.raises(GoldenRefused) as info:
        regenerate(path, op, case, "cpu", CaseInputs(op, case))
    assert str(info.value) == (
        f"numcheck: refusing to write the golden of case n ({toml}): the reference 'fp32' of "
        "op 'nanny' produced values it does not allow (seed 0, output 'y': 1 NAN; allowed "
        "non-finite values: none). The stored golden is left as it was.\nFix: check the "
        "case's shape parameters (an epsilon <= 0, an empty or degenerate shape) in the case "
        "file; if the op really produces them, declare them in its OpSpec, e.g. "
        "nonfinite={'y': ('nan',)}")
    assert not path.exists()
    # Declared, the same NaN is the reference's own value and is stored.
    registry.register(make_op("nanok", variants={"fp32": Variant("fp32", _nan_reference, "fp32")},
                              nonfinite={"y": ("nan",)}))
    toml.write_text('[n]\nop = "nanok"\n')
    (case,) = load_case_file(toml)
    assert regenerate(path, get_op("nanok"), case, "cpu",
                      CaseInputs(get_op("nanok"), case)).written


def test_the_indexers_inf_mask_is_declared() -> None:
    assert get_op("indexer").nonfinite == {"logits": ("-inf",)}


def test_plugin_regen_refusal_fails_every_item_and_writes_nothing(
    pytester: pytest.Pytester,
) -> None:
    make_project(pytester)
    pytester.makeconftest(
        "import torch\n"
        "from numcheck.ops.registry import OpSpec, ParamSpec, Variant\n"
        "def make(p, seed):\n    return {'x': torch.ones(4)}\n"
        "def ref(i, p):\n    return {'y': i['x'] / 0 * 0}\n"
        "def pytest_numcheck_register(registry):\n"
        "    registry.register(OpSpec('nanny', 1, 'fp32', {'fp32': Variant('fp32', ref, 'fp32'),"
        " 'bf16': Variant('bf16', ref, 'bf16')}, make, ('y',), {}))\n")
    (pytester.path / "cases" / "indexer.toml").write_text('[n]\nop = "nanny"\n')
    result = pytester.runpytest("--numcheck", "--numcheck-regen")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*refusing to write the golden of case n*4 NAN*",
                                 "golden refused (the reference gave NaN/Inf*"])
    assert not golden(pytester, "n", "nanny").exists()


def test_plugin_regen_summary_says_unchanged_within_tolerance(pytester: pytest.Pytester) -> None:
    make_project(pytester, mhc=True)
    (pytester.path / "cases" / "indexer.toml").unlink()
    assert pytester.runpytest("--numcheck", "--numcheck-regen").ret == 0
    path = golden(pytester, "tiny-mhc", "mhc_pre")
    g = load_golden(path, case="tiny-mhc", regen_hint="")
    tensors = {k: (t + 3 * EPS * float(t.abs().max()) if t.dtype == torch.float32 else t)
               for k, t in g.tensors.items()}
    save_golden(path, tensors, {k: v for k, v in g.meta.items()
                                if k not in ("shapes", "dtypes", "content_hash")})
    kept = path.read_bytes()
    result = pytester.runpytest("--numcheck", "--numcheck-regen")
    assert result.ret == 0
    result.stdout.fnmatch_lines([("golden unchanged (within reproducibility tolerance, max diff: "
                                 "float32: *; stored bytes kept): goldens/mhc_pre/tiny-mhc"
                                 ".safetensors")])
    assert path.read_bytes() == kept
