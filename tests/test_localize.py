"""Localization: where a failed check's error sits, in the op's structure (numcheck/localize/).

Pure tests on tiny shapes: honest rounding is never localized; errors planted in a known place
are named; structural transforms are recognised; numerics.check localizes failures only; the
message, the record and the extension API carry it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck.localize import failure as localize
from numcheck.localize.failure import localize_output
from numcheck.localize.grids import flip_grid
from numcheck.localize.spread import MIN_LIFT
from numcheck.numerics.budgets import DEFAULT_BUDGETS
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import (
    OpSpec,
    ParamSpec,
    RegistrationError,
    Variant,
    get_op,
    register,
)
from numcheck.ops.structure import Grouping, Structure, groupings_of
from tests.caseproject import case_project, write_goldens
from tests.shipped import shipped_cases

TESTS = Path(__file__).parent
ROOT = TESTS.parent
BF16 = DEFAULT_BUDGETS["bf16"]

TINY_INDEXER = {"batch": 3, "next_n": 2, "heads": 8, "head_dim": 32, "block_size": 16,
                "max_context": 250, "index_topk": 32}
TINY_MHC = {"tokens": 32, "hidden": 64}


def _indexer(seed: int = 0) -> tuple[dict[str, torch.Tensor], Any, torch.Tensor, torch.Tensor]:
    p = indexer.OP.resolve_params(None, TINY_INDEXER)
    inputs = indexer.make_inputs(p, seed)
    return inputs, p, indexer.fp32(inputs, p)["logits"], indexer.bf16(inputs, p)["logits"]


def _mhc(seed: int = 0) -> tuple[dict[str, torch.Tensor], Any, dict[str, torch.Tensor],
                                 dict[str, torch.Tensor]]:
    p = mhc.OP.resolve_params(None, TINY_MHC)
    inputs = mhc.make_inputs(p, seed)
    return inputs, p, mhc.fp32(inputs, p), mhc.bf16(inputs, p)


def _logits(actual: torch.Tensor, golden: torch.Tensor, inputs: Any, p: Any) -> Any:
    return localize_output("logits", actual, golden, None, indexer.LOGITS_STRUCTURE, inputs, p,
                           atol=BF16["atol"], rtol=BF16["rtol"])


# -- honest rounding is never localized --------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_honest_bf16_indexer_output_has_no_concentration(seed: int) -> None:
    inputs, p, golden, ours = _indexer(seed)
    loc = _logits(ours, golden, inputs, p)
    assert not loc.concentrated and loc.transform is None
    assert loc.lines[0].startswith("logits: no concentration: the error is spread evenly "
                                   "across rows, tokens, requests, MTP rows, pages")


@pytest.mark.parametrize("seed", [0, 1])
def test_honest_bf16_mhc_outputs_have_no_concentration(seed: int) -> None:
    inputs, p, golden, ours = _mhc(seed)
    for name in mhc.OP.outputs:
        loc = localize_output(name, ours[name], golden[name], None, mhc.STRUCTURE[name],
                              inputs, p, atol=BF16["atol"], rtol=BF16["rtol"])
        assert not loc.concentrated and loc.transform is None, (name, loc.lines)
        assert "no concentration" in loc.lines[0]


def test_a_few_nonzero_errors_are_not_a_place() -> None:
    """Like a TF32 variant's y: bit-equal but for a few rounding flips. Any grouping finer
    than the errors looks concentrated; the shuffle test says it is chance."""
    golden = torch.randn(64, 512, generator=torch.Generator().manual_seed(0))
    ours = golden.clone()
    picked = torch.randperm(golden.numel(), generator=torch.Generator().manual_seed(1))[:12]
    ours.view(-1)[picked] *= 1.01
    loc = localize_output("y", ours, golden, None, Structure(axes=("token", "channel")), {},
                          {}, atol=1e-5, rtol=1e-5)
    assert not loc.concentrated, loc.lines
    channels = next(c for c in loc.groupings if c.grouping == "channel")
    assert channels.lift > MIN_LIFT  # the lift alone would have been fooled


# -- errors in a known place are named ----------------------------------------------------


def test_last_partial_page_of_each_request() -> None:
    inputs, p, golden, ours = _indexer()
    bad = ours.clone()
    bs, n = p["block_size"], p["next_n"]
    for b, ctx in enumerate(inputs["context_lens"].tolist()):
        assert ctx % bs, "the seed must give partial last pages"
        start = (ctx - 1) // bs * bs
        bad[b * n:(b + 1) * n, start:ctx] *= 1.3
    loc = _logits(bad, golden, inputs, p)
    assert re.match(r"logits: only the last, partial page of each request is wrong "
                    r"\(3 of \d+ pages, 99.\d% of the error; worst page \d+ \(request \d, "
                    r"block \d+\), \|err\| [\d.]+ where the band allows [\d.]+\)$",
                    loc.lines[0]), loc.lines[0]


def test_only_one_mtp_row() -> None:
    inputs, p, golden, ours = _indexer()
    bad = ours.clone()
    bad[1::2] *= 1.2
    loc = _logits(bad, golden, inputs, p)
    assert loc.lines[0].startswith("logits: only MTP row 1 of each request is wrong ("), \
        loc.lines


def test_a_few_tokens_of_comb() -> None:
    inputs, p, golden, ours = _mhc()
    comb = ours["comb"].clone()
    comb[[3, 17]] = comb[[3, 17]] * 1.3
    loc = localize_output("comb", comb, golden["comb"], None, mhc.STRUCTURE["comb"], inputs,
                          p, atol=BF16["atol"], rtol=BF16["rtol"])
    assert loc.lines[0].startswith("comb: only token ")
    assert "2 of 32 tokens" in loc.lines[0] and "token 3" in loc.lines[0]
    assert "token 17" in loc.lines[0]


def test_the_comb_part_of_the_mixes() -> None:
    inputs, p, golden, ours = _mhc()
    mixes = ours["mixes"].clone()
    mixes[:, 2 * p["hc_mult"]:] *= 1.1
    loc = localize_output("mixes", mixes, golden["mixes"], None, mhc.STRUCTURE["mixes"], inputs,
                          p, atol=BF16["atol"], rtol=BF16["rtol"])
    assert "the comb part of the mixes" in loc.lines[0], loc.lines


def test_mask_off_by_one_names_the_first_masked_position() -> None:
    inputs, p, golden, _ = _indexer()
    wider = indexer.fp32(dict(inputs, context_lens=inputs["context_lens"] + 1), p)["logits"]
    loc = _logits(wider, golden, inputs, p)
    assert loc.measure == "mismatches" and loc.events >= 4  # a row at max_context has none
    assert loc.lines[0].startswith("logits: only the first masked position after each row's "
                                   "last valid token is wrong"), loc.lines


def test_one_nan_says_where_it_is() -> None:
    inputs, p, golden, ours = _indexer()
    bad = ours.clone()
    bad[2, 5] = float("nan")
    loc = _logits(bad, golden, inputs, p)
    assert loc.lines[0].startswith("logits: 1 NaN/inf mismatch, at index (2, 5); in request 1, "
                                   "MTP row 0 of each request, page "), loc.lines


def test_a_nan_of_a_sampled_golden_is_placed_from_its_statistics() -> None:
    """A sampled golden keeps the whole output's NaN/inf counts in its summary statistics
    (goldens/packing.STATS_FIELDS): a failed count check is localized from them, on the
    variant's whole output, not from the sampled values."""
    from numcheck.goldens.packing import pack_output, stored_output
    from numcheck.numerics.verdict import Violation

    inputs, p, golden, ours = _indexer()
    stored = stored_output("logits", pack_output("logits", golden, full=False))
    masked = int(torch.isneginf(golden).sum())  # the logits' masked positions are -inf
    assert masked > 0 and stored.sampled and stored.nonfinite == (0, 0, masked)
    bad = ours.clone()
    bad[2, 5] = float("nan")
    count = Violation("logits", "nan_count", 1, 0, detail="output has 1, golden has 0")
    # No budget: the count's localization must not reach the elementwise one, which reads it.
    (loc,) = localize.localize_failure(indexer.OP, p, inputs, {"logits": bad},
                                       {"logits": stored}, [count], None)
    assert loc.output == "logits" and loc.measure == "mismatches" and loc.events == 1
    assert "at index (2, 5)" in loc.lines[0], loc.lines


def test_flips_are_placed_on_the_scores_grid() -> None:
    inputs, p, golden, _ = _indexer()
    flips = [(r, t) for r in (0, 1) for t in range(20, 30)]  # block 1 of request 0
    grid = flip_grid("topk", golden, flips, len(flips))
    loc = localize.localize_grid(grid, indexer.LOGITS_STRUCTURE, inputs, p)
    page = int(inputs["block_table"][0, 1])
    assert loc.measure == "flips"
    assert loc.lines == (
        (f"topk: only page {page} (request 0, block 1) is wrong (1 of 43 pages, 100% of the "
        "unexplained top-k flips)"),
        "topk: only request 0 is wrong (2 of 6 rows, 100% of the unexplained top-k flips)")


# -- structural transforms -----------------------------------------------------------------


def test_shift_by_one_token() -> None:
    inputs, p, golden, ours = _indexer()
    shifted = torch.full_like(ours, float("-inf"))
    shifted[:, 1:] = ours[:, :-1]
    loc = _logits(shifted, golden, inputs, p)
    assert loc.transform is not None and loc.transform.kind == "shift"
    assert loc.lines[0].startswith("logits: matches the golden shifted by one token "
                                   "(output[token i + 1] = golden[token i]; rel error ")


def test_transposed_comb_and_permuted_rows_and_a_scale() -> None:
    inputs, p, golden, ours = _mhc()
    kw: dict[str, Any] = {"atol": BF16["atol"], "rtol": BF16["rtol"]}
    comb = localize_output("comb", ours["comb"].transpose(1, 2), golden["comb"], None,
                           mhc.STRUCTURE["comb"], inputs, p, **kw)
    assert comb.transform is not None and comb.transform.kind == "transpose"
    assert "comb row and comb column axes transposed" in comb.lines[0]
    order = torch.tensor([1, 0, *range(2, 32)])
    pre = localize_output("pre", ours["pre"][order], golden["pre"], None, mhc.STRUCTURE["pre"],
                          inputs, p, **kw)
    assert pre.transform is not None and pre.transform.kind == "permutation", pre.lines
    assert pre.lines[0].startswith("pre: its tokens are permuted: 2 of 32 hold another "
                                   "token's golden values (token 0 holds golden token 1")
    y = localize_output("y", (ours["y"].float() * 1.02).bfloat16(), golden["y"], None,
                        mhc.STRUCTURE["y"], inputs, p, **kw)
    assert y.transform is not None and y.lines[0].startswith("y: a global scale: output = 1.02")


def test_transforms_work_on_a_sampled_golden() -> None:
    inputs, p, golden, ours = _mhc()
    y, g = ours["y"], golden["y"]
    shifted = torch.zeros_like(y)
    shifted[1:] = y[:-1]
    positions = torch.arange(0, g.numel(), 7)
    loc = localize_output("y", shifted, g.reshape(-1)[positions], positions,
                          mhc.STRUCTURE["y"], inputs, p, atol=BF16["atol"], rtol=BF16["rtol"])
    assert loc.transform is not None and loc.transform.kind == "shift"


def test_a_wrong_output_is_not_called_a_transform() -> None:
    """A transform must leave almost nothing: dividing out a scale from a wrong per-token
    scale leaves most of the error, so it is not a global scale."""
    inputs, p, golden, _ = _indexer()
    per_token = golden * torch.linspace(0.5, 3.0, golden.shape[1])
    assert _logits(per_token, golden, inputs, p).transform is None


# -- the extension API ---------------------------------------------------------------------


def test_an_undeclared_output_gets_its_plain_axes() -> None:
    assert [g.name for g in groupings_of(None, (4, 8))] == ["row", "column"]
    assert [g.names for g in groupings_of(None, (4, 1, 8))] == [
        "indices along dim 0", "indices along dim 2"]
    declared = Structure(axes=("token", "channel"),
                         groupings=(Grouping("half", lambda i, p, s: torch.arange(s[1]) // 4),))
    assert [g.name for g in groupings_of(declared, (4, 8))] == ["token", "channel", "half"]


def _tiny_op(structure: dict[str, Structure]) -> OpSpec:
    def make(params: Any, seed: int) -> dict[str, torch.Tensor]:
        return {"x": torch.ones(2, 3)}

    def ref(inputs: Any, params: Any) -> dict[str, torch.Tensor]:
        return {"y": inputs["x"]}

    return OpSpec(name="tiny_struct", version=1, reference="fp32",
                  variants={"fp32": Variant("fp32", ref, "fp32")}, make_inputs=make,
                  outputs=("y",), params={"n": ParamSpec(int, 1)}, structure=structure)


def test_a_structure_for_an_unknown_output_is_a_registration_error() -> None:
    with pytest.raises(RegistrationError, match=r"structure\['z'\] needs an output of the op"):
        register(_tiny_op({"z": Structure()}))
    assert register(_tiny_op({"y": Structure(axes=("a", "b"))})).structure["y"].axes == ("a", "b")


# -- numerics.check, the message, the record ---------------------------------------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Any:
    from numcheck.cases import load_cases
    from numcheck.check.make_golden import fresh_golden
    from tests import planted_located

    planted_located.register_all()
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "indexer.toml").write_text(
        '[tiny]\nop = "indexer"\nshape = { batch = 2, heads = 4, head_dim = 32, '
        'max_context = 256, index_topk = 32, next_n = 2 }\nseeds = [0, 1]\n'
        'variants = ["bf16", "mtp_row1_weights"]\n'
        '[tiny.budget.mtp_row1_weights.logits]\nrel_fro = 4e-3\n')
    (case,) = load_cases(folder)
    op = get_op("indexer")
    golden, inputs = fresh_golden(op, case)
    return op, case, golden, inputs


def test_the_runner_localizes_failures_only(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from numcheck.check.against_golden import run_numerics
    from numcheck.report.records import record_from_dict, record_from_result, record_to_dict
    from numcheck.report.render import Commands, failure_message

    op, case, golden, inputs = tiny
    calls = []
    real = localize.localize_failure
    monkeypatch.setattr(localize, "localize_failure",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    good = run_numerics(op, case, "bf16", "cpu", golden, inputs)
    assert good.passed and not calls and good.localization == []
    bad = run_numerics(op, case, "mtp_row1_weights", "cpu", golden, inputs)
    assert not bad.passed and len(calls) == 1  # once per check, on its first failing seed
    assert bad.localization[0].lines[0].startswith(
        "logits: only MTP row 1 of each request is wrong (2 of 4 rows")

    message = failure_message(bad, Commands("pytest repro", "pytest regen"), "cases/x.toml")
    lines = message.splitlines()
    worst = next(i for i, line in enumerate(lines) if line.startswith("  worst: "))
    assert lines[worst + 1].startswith("  where: logits: only MTP row 1 of each request is wrong")

    record = record_from_result(bad)
    assert record.localization is not None
    first = record.localization[0]
    assert first["output"] == "logits" and first["measure"] == "error"
    assert first["lines"][0] == bad.localization[0].lines[0]
    rows = next(g for g in first["groupings"] if g["grouping"] == "MTP row")
    assert rows["concentrated"] and rows["labels"] == [0, 1]
    data = json.loads(json.dumps(record_to_dict(record), allow_nan=False))
    assert record_from_dict(data) == record
    assert record_from_result(good).localization is None


def test_localization_can_be_switched_off(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from numcheck.check.against_golden import run_numerics

    op, case, golden, inputs = tiny
    monkeypatch.setenv(localize.ENV, "0")
    bad = run_numerics(op, case, "mtp_row1_weights", "cpu", golden, inputs)
    assert not bad.passed and bad.localization == []


# -- the self-test on shipped cases (the figures: benchmarks/reliability/localize_report.py) --


@pytest.mark.parametrize(("key", "bugs"), [
    ("indexer::v4pro-b2-l4k-mtp2", ("tail_page_scales", "mtp_row1_weights", "logits_shifted",
                                    "mask_off_by_one")),
    ("mhc_pre::v4pro-t32", ("comb_few_tokens", "comb_transposed", "y_scaled")),
])
def test_planted_bugs_are_named_first(key: str, bugs: tuple[str, ...]) -> None:
    from numcheck.selftest.localization import located_table
    from tests import planted, planted_located

    planted.register_all()
    planted_located.register_all()
    case = next(c for c in shipped_cases() if f"{c.op}::{c.id}" == key)
    expected = {k: v for k, v in planted_located.EXPECTED.items() if k[1] in bugs}
    rows = located_table([case], expected, ROOT / "goldens")
    assert len(rows) == len(bugs)
    missed = [(r.bug, r.lines[:1]) for r in rows if not (r.caught and r.named_first)]
    assert not missed


# -- through the plugin ----------------------------------------------------------------------

PROJECT_CASE = """
[tiny]
op = "indexer"
shape = { batch = 2, heads = 4, head_dim = 32, max_context = 256, index_topk = 32, next_n = 2 }
seeds = [0]
variants = ["mtp_row1_weights"]
"""

PROJECT_CONFTEST = """
from tests import planted_located
planted_located.register_all()
"""


def test_the_failure_message_and_report_say_where(pytester: pytest.Pytester) -> None:
    case_project(pytester, {"indexer.toml": PROJECT_CASE}, conftest=PROJECT_CONFTEST)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::mtp_row1_weights[[]cpu[]]",
        "  worst: *",
        "  where: logits: only MTP row 1 of each request is wrong (* rows, *% of the error; *)",
    ])
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    bad = next(r for r in records if r["variant"] == "mtp_row1_weights")
    good = next(r for r in records if r["variant"] == "fp32")
    assert bad["localization"][0]["lines"][0].startswith("logits: only MTP row 1")
    assert good["localization"] is None


def test_heatmaps_are_self_contained_html() -> None:
    from numcheck.report.localize_html import localization_html

    inputs, p, golden, ours = _indexer()
    bad = ours.clone()
    bad[1::2] *= 1.2
    page = localization_html([_logits(bad, golden, inputs, p).as_dict()])
    assert "only MTP row 1 of each request is wrong" in page
    assert 'title="MTP row 1: ' in page and "of the error" in page
    assert "<script" not in page and "http" not in page and "url(" not in page
    assert localization_html(None) == ""


def test_a_recall_failure_with_only_near_tie_flips_has_nothing_to_place() -> None:
    """recall_min can fail while every flip is inside the tie band: the flip grid is empty,
    and the localization says so instead of failing itself (a fresh-seed run of the
    self-test once crashed here)."""
    scores = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    grid = flip_grid("topk", scores, [], 0)
    found = localize.localize_grid(grid, None, {}, {})
    assert list(found.lines) == ["topk: no unexplained flip: every flip lies within the tie band"]


def test_a_localization_that_raises_leaves_the_verdict_standing(
        tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from numcheck.check.against_golden import run_numerics

    op, case, golden, inputs = tiny

    def broken(*args: Any, **kwargs: Any) -> None:
        raise IndexError("planted")

    monkeypatch.setattr(localize, "localize_failure", broken)
    bad = run_numerics(op, case, "mtp_row1_weights", "cpu", golden, inputs)
    assert not bad.passed and bad.violations
    (found,) = bad.localization
    assert found.lines == (
        "logits: localization failed (IndexError: planted); the verdict stands",)
