"""One pass for a golden: read and validated once for its case, then handed to the numerics.

numcheck.goldens.case_golden checks everything about a golden before any variant runs (the
file, its freshness, every output of every seed against the metadata's record); the numerics
(numcheck.check.against_golden) read the validated stored outputs and never go back.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck.cases import Case, load_case_file
from numcheck.check.against_golden import run_numerics
from numcheck.check.make_golden import make_golden
from numcheck.check.run import CaseInputs
from numcheck.goldens import case_golden, files, freshness, packing
from numcheck.goldens.case_golden import CaseGolden, validate_for_case
from numcheck.goldens.files import Golden, GoldenFormatError, GoldenStale
from numcheck.goldens.packing import pack_output
from numcheck.ops.registry import get_op
from numcheck.ops.spec import OpSpec
from tests.caseproject import TINY_INDEXER, make_project, write_goldens

Made = tuple[OpSpec, Case, CaseInputs, dict[str, torch.Tensor], dict[str, Any]]
Edit = Callable[[dict[str, torch.Tensor], dict[str, Any]], None]
REGEN = "pytest --numcheck --numcheck-regen cases/indexer.toml::tiny"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    """The tiny indexer case's golden tensors and metadata, as the regen flag makes them."""
    toml = tmp_path_factory.mktemp("case") / "indexer.toml"
    toml.write_text(TINY_INDEXER.format(variants='"tf32"', next_n=1, extra=""))
    (case,) = load_case_file(toml)
    op = get_op(case.op)
    inputs = CaseInputs(op, case)
    tensors, meta = make_golden(op, case, "cpu", inputs)
    return op, case, inputs, tensors, meta


def validate(made: Made, edit: Edit | None = None, fingerprint: str | None = None) -> CaseGolden:
    op, case, inputs, tensors, meta = made
    mine, mine_meta = {k: t.clone() for k, t in tensors.items()}, copy.deepcopy(meta)
    if edit is not None:
        edit(mine, mine_meta)
    golden = Golden(Path("goldens/indexer/tiny.safetensors"), mine, mine_meta)
    fingerprint = inputs.fingerprint() if fingerprint is None else fingerprint
    return validate_for_case(golden, op, case, fingerprint=fingerprint, regen_hint=REGEN)


def test_every_output_of_every_seed_is_handed_on_as_recorded(made: Made) -> None:
    op, case, _, _, meta = made
    golden = validate(made)
    assert sorted(golden.outputs) == sorted((s, o) for s in case.seeds for o in op.outputs)
    for (seed, name), stored in golden.outputs.items():
        record = meta["outputs"][f"s{seed}/{name}"]
        assert (list(stored.recorded_shape or ()), stored.recorded_dtype) == (
            record["shape"], record["dtype"])


def test_a_missing_output_is_refused(made: Made) -> None:
    with pytest.raises(GoldenFormatError) as info:
        validate(made, lambda t, m: t.pop("s0/logits"))
    assert str(info.value).splitlines() == [
        "golden goldens/indexer/tiny.safetensors for case tiny has no output 's0/logits' (it "
        "has: s0/topk)",
        f"Fix: if the op's outputs changed on purpose, regenerate it with: {REGEN}",
    ]


def _half(t: dict[str, torch.Tensor], m: dict[str, Any]) -> None:
    t["s0/logits"] = t["s0/logits"].half()


def _shorter(t: dict[str, torch.Tensor], m: dict[str, Any]) -> None:
    t["s0/logits"] = t["s0/logits"][:, :-1].contiguous()


def _sampled_out_of_range(t: dict[str, torch.Tensor], m: dict[str, Any]) -> None:
    logits = t.pop("s0/logits")
    t.update(pack_output("s0/logits", logits, full=False))  # stored as a sample
    t["s0/logits.idx"][-1] = logits.numel()  # one position past the end


def _outputs_not_a_table(t: dict[str, torch.Tensor], m: dict[str, Any]) -> None:
    m["outputs"] = "s0/logits"


def _record_without_shape(t: dict[str, torch.Tensor], m: dict[str, Any]) -> None:
    m["outputs"]["s0/logits"] = {"dtype": "float32"}


@pytest.mark.parametrize(("edit", "problem"), [
    (_half, "output 'logits' is stored as float16 but its metadata says float32 (goldens hold "
            "the reference's own dtype)"),
    (_shorter, "output 'logits' is stored in shape [2, 255] but its metadata says [2, 256]"),
    (_sampled_out_of_range, "output 'logits': its stored sample positions do not fit its shape "
                            "[2, 256]"),
    (_outputs_not_a_table, "its metadata's outputs record is str, not a table"),
    (_record_without_shape, "output 'logits' has a malformed metadata record {'dtype': "
                            "'float32'} (expected shape and dtype)"),
], ids=["dtype", "shape", "sample-positions", "outputs-record", "output-record"])
def test_a_golden_that_disagrees_with_its_own_record_is_refused(
    made: Made, edit: Edit, problem: str
) -> None:
    with pytest.raises(GoldenFormatError) as info:
        validate(made, edit)
    assert str(info.value).splitlines() == [
        f"golden goldens/indexer/tiny.safetensors for case tiny: {problem}",
        f"Fix: regenerate it with: {REGEN}",
    ]


def test_a_stale_golden_is_refused(made: Made) -> None:
    with pytest.raises(GoldenStale, match=r"is stale: input fingerprint \w+ -> 000000000000"):
        validate(made, fingerprint="0" * 64)


def test_a_golden_serves_only_the_case_it_was_validated_for(made: Made) -> None:
    _, case, _, _, _ = made
    golden = validate(made)
    golden.require(case)
    golden.require(replace(case, budgets={}))  # held to other budgets: the same case
    with pytest.raises(ValueError, match="validated for case 'tiny' .*, not for case 'other'"):
        golden.require(replace(case, id="other"))
    with pytest.raises(ValueError, match=r"not for case 'tiny' \(seeds \[0, 1\]\)"):
        golden.require(replace(case, seeds=(0, 1)))
    with pytest.raises(ValueError, match="output 'logits' of seed 7 was not validated"):
        golden.output(7, "logits")


def test_the_numerics_read_the_validated_outputs_and_never_call_back(
    made: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    op, case, inputs, _, _ = made
    golden = validate(made)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the numerics called back into the goldens room")

    for module, name in [(files, "load_golden"), (freshness, "require_fresh"),
                         (packing, "stored_output"), (packing, "unpack_pair"),
                         (case_golden, "validate_for_case"), (case_golden, "load_for_case")]:
        # Wherever the function is bound: a module that imported it by name calls its own
        # binding, which patching the defining module alone would leave in place.
        real = getattr(module, name)
        for loaded in list(sys.modules.values()):
            if (getattr(loaded, "__name__", "").startswith("numcheck")
                    and vars(loaded).get(name) is real):
                monkeypatch.setattr(loaded, name, refused)
    # Nor do they read the file's tensors: only the stored outputs handed over.
    emptied = replace(golden, golden=replace(golden.golden, tensors={}))
    for variant in ("fp32", "tf32"):
        result = run_numerics(op, case, variant, "cpu", emptied, inputs)
        assert result.passed and result.metric("logits", "rel_fro") is not None
        assert result.seeds[0].topk is not None


def test_the_session_validates_each_case_golden_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(pytester, variants='"bf16", "tf32"')
    write_goldens(pytester)
    calls: list[str] = []
    real = case_golden.validate_for_case

    def counted(golden: Golden, op: OpSpec, case: Case, **kwargs: Any) -> CaseGolden:
        calls.append(case.id)
        return real(golden, op, case, **kwargs)

    monkeypatch.setattr(case_golden, "validate_for_case", counted)
    result = pytester.runpytest("--numcheck", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)  # fp32, bf16, tf32 of one case
    assert calls == ["tiny"]
