"""Case-file loading and validation, against a fake op so the real ops can change freely."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest

from numcheck.cases import Case, CaseFileError, load_case_file, load_cases
from numcheck.numerics.budget_origin import lender_of
from numcheck.numerics.budgets import DEFAULT_BUDGETS, TopkBudget
from numcheck.ops.registry import Inputs, OpSpec, Outputs, Params, ParamSpec, TopkSpec, Variant
from tests.shipped import shipped_cases


def _run(inputs: Inputs, params: Params) -> Outputs:
    return {}


def _make_inputs(params: Params, seed: int) -> Inputs:
    return {}


TINY = OpSpec(
    name="tiny",
    version=1,
    reference="fp32",
    variants={
        "fp32": Variant("fp32", _run, "fp32"),
        "bf16": Variant("bf16", _run, "bf16"),
        "tf32": Variant("tf32", _run, "tf32", devices=("cuda",)),
    },
    make_inputs=_make_inputs,
    outputs=("scores", "idx"),
    params={
        "batch": ParamSpec(int, 2, "requests"),
        "length": ParamSpec(int, 16, "tokens per request"),
        "scale": ParamSpec(float, 1.0, "score scale"),
        "causal": ParamSpec(bool, False, "mask the future"),
    },
    presets={"small": {"length": 8, "scale": 0.5}, "big": {"batch": 8, "length": 64}},
    topk=TopkSpec(indices="idx", scores="scores"),
)
PLAIN = OpSpec(
    name="plain",
    version=1,
    reference="fp32",
    variants={"fp32": Variant("fp32", _run, "fp32"), "bf16": Variant("bf16", _run, "bf16")},
    make_inputs=_make_inputs,
    outputs=("y",),
    params={"n": ParamSpec(int, 4)},
)
OPS = {op.name: op for op in (TINY, PLAIN)}


def lookup(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r} (known ops: {', '.join(sorted(OPS))})") from None


def write(folder: Path, text: str, name: str = "tiny.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str) -> list[Case]:
    return load_case_file(write(tmp_path, text), lookup=lookup)


def load_one(tmp_path: Path, text: str) -> Case:
    (case,) = load(tmp_path, text)
    return case


def error(tmp_path: Path, text: str) -> CaseFileError:
    with pytest.raises(CaseFileError) as info:
        load(tmp_path, text)
    return info.value


def check(err: CaseFileError, *, case: str | None, key: str | None, fragment: str) -> str:
    """The layout every message shares: file, case, key, problem, then the fix."""
    message = str(err)
    prefix = str(err.path)
    if case is not None:
        prefix += f": case '{case}'"
    if key is not None:
        prefix += f": key '{key}'"
    assert message.startswith(prefix + ": "), message
    assert (err.case, err.key) == (case, key)
    assert ". Fix: " in message
    assert message.endswith(err.fix)
    assert fragment in message, message
    return message


# --- valid files ----------------------------------------------------------------------------

FULL = """
    [b4-l2k]
    op = "tiny"
    description = "four requests"
    preset = "small"
    shape = { batch = 4, scale = 2 }
    seeds = [3, 1]
    devices = ["cuda", "cpu"]
    variants = ["tf32", "bf16"]

    [b4-l2k.budget.bf16.scores]
    calc_diff = 1e-5
    max_abs = 0.5
    [b4-l2k.budget.bf16.idx]
    recall_min = 0.98
    tie_band_abs = 0.25
    [b4-l2k.budget.fp32.scores]
    rel_fro = 0
"""


def test_a_full_case(tmp_path: Path) -> None:
    case = load_one(tmp_path, FULL)
    assert case.id == "b4-l2k"
    assert case.op == "tiny"
    assert case.description == "four requests"
    assert case.preset == "small"
    assert case.source == tmp_path / "tiny.toml"
    assert case.seeds == (3, 1)
    assert case.devices == ("cpu", "cuda")  # registry order
    assert case.variants == ("bf16", "tf32")  # the op's order
    assert list(case.budgets) == ["fp32", "bf16", "tf32"]  # reference included


def test_precedence_is_defaults_then_preset_then_shape(tmp_path: Path) -> None:
    case = load_one(tmp_path, FULL)
    # batch from shape, length from the preset, scale from shape over the preset, causal default
    assert dict(case.params) == {"batch": 4, "length": 8, "scale": 2.0, "causal": False}
    assert isinstance(case.params["scale"], float)  # int accepted for float, stored as float


def test_budgets_are_completed_by_the_variant_precision(tmp_path: Path) -> None:
    case = load_one(tmp_path, FULL)
    bf16, tf32, fp32 = (DEFAULT_BUDGETS[p] for p in ("bf16", "tf32", "fp32"))
    scores = case.budgets["bf16"].outputs["scores"]
    # The bf16 row's max_err_ratio is left out: the fake op has no rounding envelope
    # (no gemm_site, no rounding_reference), so nothing could measure it.
    assert dict(scores.limits) == {
        "rel_fro": bf16["rel_fro"],
        "calc_diff": 1e-5,
        "frac_outside": bf16["frac_outside"],
        "max_band_ratio": bf16["max_band_ratio"],
        "max_abs": 0.5,
    }
    assert (scores.atol, scores.rtol) == (bf16["atol"], bf16["rtol"])
    assert case.budgets["bf16"].topk == TopkBudget(
        limits={"recall_min": 0.98, "tie_recall_min": bf16["tie_recall_min"]},
        tie_band=0.25,
        tie_band_kind="abs",
    )
    # tf32 gave nothing: its whole budget is the tf32 row
    tf32_scores = case.budgets["tf32"].outputs["scores"]
    assert tf32_scores.limits["calc_diff"] == tf32["calc_diff"]
    assert tf32_scores.atol == tf32["atol"]
    assert case.budgets["tf32"].topk is not None
    assert case.budgets["tf32"].topk.tie_band == tf32["tie_band_rel"]
    # the reference may be given a budget too (e.g. cuda against the cpu golden)
    assert case.budgets["fp32"].outputs["scores"].limits["rel_fro"] == 0.0
    assert case.budgets["fp32"].outputs["scores"].limits["calc_diff"] == fp32["calc_diff"]


def test_a_minimal_case_gets_every_default(tmp_path: Path) -> None:
    case = load_one(tmp_path, '[m]\nop = "tiny"\n')
    assert case.preset is None
    assert case.description == ""
    assert dict(case.params) == {"batch": 2, "length": 16, "scale": 1.0, "causal": False}
    assert case.seeds == (0,)
    assert case.devices == ("cpu", "cuda")
    assert case.variants == ("bf16", "tf32")
    assert set(case.budgets) == {"fp32", "bf16", "tf32"}
    assert (
        case.budgets["bf16"].outputs["scores"].limits["rel_fro"]
        == DEFAULT_BUDGETS["bf16"]["rel_fro"]
    )


def test_a_case_that_runs_one_variant_has_budgets_for_it_and_the_reference(
    tmp_path: Path,
) -> None:
    case = load_one(tmp_path, '[m]\nop = "tiny"\nvariants = ["tf32"]\npreset = "big"\n')
    assert case.variants == ("tf32",)
    assert set(case.budgets) == {"fp32", "tf32"}
    assert (case.params["batch"], case.params["length"]) == (8, 64)


def test_an_op_without_topk(tmp_path: Path) -> None:
    case = load_one(tmp_path, '[p]\nop = "plain"\n[p.budget.bf16.y]\natol = 1\n')
    assert case.budgets["bf16"].topk is None
    assert case.budgets["bf16"].outputs["y"].atol == 1.0


def test_several_cases_in_file_order(tmp_path: Path) -> None:
    cases = load(tmp_path, '[zeta]\nop = "tiny"\n[alpha]\nop = "plain"\n["v4.1_x"]\nop = "tiny"\n')
    assert [(c.id, c.op) for c in cases] == [
        ("zeta", "tiny"),
        ("alpha", "plain"),
        ("v4.1_x", "tiny"),
    ]


def test_load_cases_reads_every_toml_in_sorted_order(tmp_path: Path) -> None:
    write(tmp_path, '[b1]\nop = "tiny"\n', "b.toml")
    write(tmp_path, '[a1]\nop = "tiny"\n[a2]\nop = "plain"\n', "a.toml")
    write(tmp_path, "this is not read", "notes.txt")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", '[c1]\nop = "tiny"\n', "c.toml")
    cases = load_cases(tmp_path, lookup=lookup)
    assert [c.id for c in cases] == ["a1", "a2", "b1"]
    assert [c.source.name for c in cases] == ["a.toml", "a.toml", "b.toml"]


def test_load_cases_of_an_empty_folder(tmp_path: Path) -> None:
    assert load_cases(tmp_path, lookup=lookup) == []


def test_the_same_id_for_two_ops_is_fine(tmp_path: Path) -> None:
    write(tmp_path, '[same]\nop = "tiny"\n', "a.toml")
    write(tmp_path, '[same]\nop = "plain"\n', "b.toml")
    assert [c.op for c in load_cases(tmp_path, lookup=lookup)] == ["tiny", "plain"]


# --- folder and file errors -------------------------------------------------------------


def test_duplicate_op_and_id_across_files_names_both(tmp_path: Path) -> None:
    write(tmp_path, '[same]\nop = "tiny"\n', "a.toml")
    write(tmp_path, '[same]\nop = "tiny"\n', "b.toml")
    with pytest.raises(CaseFileError) as info:
        load_cases(tmp_path, lookup=lookup)
    message = check(info.value, case="same", key=None, fragment="already has a case 'same'")
    assert message.startswith(str(tmp_path / "b.toml"))
    assert str(tmp_path / "a.toml") in message
    assert "Fix: rename one of them" in message


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError) as info:
        load_cases(tmp_path / "nowhere", lookup=lookup)
    message = check(info.value, case=None, key=None, fragment="the case folder does not exist")
    assert "Fix: create it" in message
    assert "numcheck_cases ini key" in message


def test_folder_that_is_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, "", "cases")
    with pytest.raises(CaseFileError, match="is not a folder"):
        load_cases(path, lookup=lookup)


def test_malformed_toml_gives_line_and_column(tmp_path: Path) -> None:
    err = error(tmp_path, '[a]\nop = "tiny"\nseeds = [0,,1]\n')
    message = check(err, case=None, key=None, fragment="not valid TOML")
    assert "(at line 3, column 12)" in message


def test_truncated_toml(tmp_path: Path) -> None:
    err = error(tmp_path, '[a]\nop = "tiny"\nseeds = [0,\n')
    check(err, case=None, key=None, fragment="(at end of document)")


def test_duplicate_table_in_one_file_is_a_toml_error(tmp_path: Path) -> None:
    err = error(tmp_path, '[a]\nop = "tiny"\n[a]\nop = "tiny"\n')
    check(err, case=None, key=None, fragment="not valid TOML")


def test_empty_file(tmp_path: Path) -> None:
    err = error(tmp_path, "# nothing yet\n")
    message = check(err, case=None, key=None, fragment="the file holds no cases")
    assert message.startswith(str(tmp_path / "tiny.toml"))


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match="cannot read the file"):
        load_case_file(tmp_path / "missing.toml", lookup=lookup)


def test_top_level_value_that_is_not_a_table(tmp_path: Path) -> None:
    err = error(tmp_path, 'op = "tiny"\n')
    check(err, case="op", key=None, fragment="a top-level value must be a case table")


@pytest.mark.parametrize("case_id", ["Big", "-lead", "has space", "ünï", "a/b", ""])
def test_case_id_alphabet(tmp_path: Path, case_id: str) -> None:
    err = error(tmp_path, f'["{case_id}"]\nop = "tiny"\n')
    message = check(err, case=case_id, key=None, fragment="must match [a-z0-9][a-z0-9._-]*")
    assert "Fix: rename the table" in message


def test_case_id_fix_suggests_a_valid_id(tmp_path: Path) -> None:
    err = error(tmp_path, '["My Case"]\nop = "tiny"\n')
    assert err.fix == "rename the table, e.g. [my-case]"


# --- case-level errors: (toml, key, fragment of the message) ------------------------------

CASE_ERRORS = [
    ('description = "x"', "op", "the case names no op"),
    ("op = 3", "op", "expected a string, got integer 3"),
    ('op = "nope"', "op", "unknown op 'nope' (known ops: plain, tiny)"),
    ('op = "tiny"\nbatch = 4', "batch", "unknown case key 'batch'"),
    ('op = "tiny"\nseed = [0]', "seed", "unknown case key 'seed'"),
    ('op = "tiny"\ndescription = 3', "description", "expected a string, got integer 3"),
    ('op = "tiny"\npreset = "huge"', "preset", "unknown preset 'huge' for op 'tiny'"),
    ('op = "tiny"\npreset = 1', "preset", "expected a string, got integer 1"),
    ('op = "plain"\npreset = "small"', "preset", "unknown preset 'small' for op 'plain'"),
    ('op = "tiny"\nshape = 4', "shape", "expected a table, got integer 4"),
    ('op = "tiny"\nshape = { heads = 4 }', "shape.heads", "unknown shape parameter 'heads'"),
    ('op = "tiny"\nshape = { batch = "4" }', "shape.batch", "expected an integer, got string '4'"),
    ('op = "tiny"\nshape = { batch = 4.0 }', "shape.batch", "expected an integer, got float 4.0"),
    ('op = "tiny"\nshape = { batch = true }', "shape.batch", "expected an integer, got boolean"),
    ('op = "tiny"\nshape = { scale = true }', "shape.scale", "expected a number, got boolean"),
    ('op = "tiny"\nshape = { causal = 1 }', "shape.causal", "expected true or false, got integer"),
    ('op = "tiny"\nseeds = "0"', "seeds", "expected an array of integers, got string '0'"),
    ('op = "tiny"\nseeds = 0', "seeds", "expected an array of integers, got integer 0"),
    ('op = "tiny"\nseeds = []', "seeds", "the array is empty"),
    ('op = "tiny"\nseeds = [0, "1"]', "seeds", "expected integers, got string '1'"),
    ('op = "tiny"\nseeds = [true]', "seeds", "expected integers, got boolean True"),
    ('op = "tiny"\nseeds = [1.0]', "seeds", "expected integers, got float 1.0"),
    ('op = "tiny"\nseeds = [0, -1]', "seeds", "seed -1 is negative"),
    ('op = "tiny"\nseeds = [0, 1, 0]', "seeds", "seed 0 is listed more than once"),
    ('op = "tiny"\ndevices = "cpu"', "devices", "expected an array of strings, got string"),
    ('op = "tiny"\ndevices = []', "devices", "the array is empty"),
    ('op = "tiny"\ndevices = ["gpu"]', "devices", "unknown device 'gpu'"),
    ('op = "tiny"\ndevices = [0]', "devices", "expected strings, got integer 0"),
    ('op = "tiny"\ndevices = ["cpu", "cpu"]', "devices", "'cpu' is listed more than once"),
    ('op = "tiny"\nvariants = "bf16"', "variants", "expected an array of strings"),
    ('op = "tiny"\nvariants = []', "variants", "the array is empty"),
    ('op = "tiny"\nvariants = ["fp8"]', "variants", "unknown variant 'fp8' for op 'tiny'"),
    ('op = "tiny"\nvariants = ["fp32"]', "variants", "'fp32' is the reference of op 'tiny'"),
    ('op = "tiny"\nvariants = ["bf16", "bf16"]', "variants", "'bf16' is listed more than once"),
    ('op = "tiny"\nbudget = 1', "budget", "expected a table, got integer 1"),
    ('op = "tiny"\nbudget.fp8.scores.atol = 1', "budget.fp8", "unknown variant 'fp8'"),
    ('op = "tiny"\nbudget.bf16 = 1', "budget.bf16", "expected a table of outputs"),
]


@pytest.mark.parametrize(("body", "key", "fragment"), CASE_ERRORS)
def test_case_errors(tmp_path: Path, body: str, key: str, fragment: str) -> None:
    check(error(tmp_path, f"[c1]\n{body}\n"), case="c1", key=key, fragment=fragment)


@pytest.mark.parametrize(
    ("body", "fix"),
    [
        ('op = "nope"', "Fix: use the name of a registered op"),
        ('op = "tiny"\npreset = "huge"', "Fix: use one of: small, big"),
        ('op = "plain"\npreset = "small"', "Fix: remove the key: this op has no presets"),
        ('op = "tiny"\nshape = { heads = 4 }', "Fix: use one of: batch, length, scale, causal"),
        ('op = "tiny"\nshape = { batch = "4" }', "Fix: write e.g. batch = 2"),
        ('op = "tiny"\nshape = { causal = 1 }', "Fix: write e.g. causal = false"),
        ('op = "tiny"\nbatch = 4', "Fix: shape parameters go in shape = { batch = ... }"),
        ('op = "tiny"\nseed = [0]', "case keys are: op, description, preset, shape, seeds, "),
        ('op = "tiny"\nbf16 = 1', "Fix: budgets go in [<case>.budget.<variant>.<output>]"),
        ('op = "tiny"\ndevices = ["gpu"]', "Fix: use one of: cpu, cuda"),
        ('op = "tiny"\nvariants = ["fp8"]', "Fix: use one of: bf16, tf32"),
        ('op = "tiny"\nvariants = ["fp32"]', "Fix: list only variants to check: bf16, tf32"),
        ('op = "tiny"\nbudget.fp8.scores.atol = 1', "Fix: use one of: fp32, bf16, tf32"),
        ('op = "tiny"\nseeds = "0"', "Fix: write seeds = [0, 1]"),
    ],
)
def test_case_error_fixes(tmp_path: Path, body: str, fix: str) -> None:
    assert fix in str(error(tmp_path, f"[c1]\n{body}\n"))


def test_budget_for_a_variant_the_case_does_not_run(tmp_path: Path) -> None:
    err = error(
        tmp_path, '[c1]\nop = "tiny"\nvariants = ["bf16"]\n[c1.budget.tf32.scores]\natol = 1\n'
    )
    message = check(err, case="c1", key="budget.tf32", fragment="which the case does not run")
    assert "Fix: add 'tf32' to variants, or remove this budget" in message


# --- budget errors, reported with the full dotted key ---------------------------------------

BUDGET_ERRORS = [
    ("[c1.budget.bf16.logits]\natol = 1", "budget.bf16.logits", "unknown output 'logits'"),
    ("[c1.budget.bf16.scores]\nrel_frob = 1", "budget.bf16.scores.rel_frob", "unknown metric"),
    ('[c1.budget.bf16.scores]\ncalc_diff = "1e-3"', "budget.bf16.scores.calc_diff", "got string"),
    ("[c1.budget.bf16.scores]\ncalc_diff = -1e-3", "budget.bf16.scores.calc_diff", "negative"),
    ("[c1.budget.bf16.scores]\ncalc_diff = nan", "budget.bf16.scores.calc_diff", "NaN"),
    ("[c1.budget.tf32.scores]\nallow_nan = 1", "budget.tf32.scores.allow_nan", "true or false"),
    ("[c1.budget.bf16.idx]\nrecall_min = 1.5", "budget.bf16.idx.recall_min", "outside [0, 1]"),
    ("[c1.budget.bf16.idx]\nrecall_mean = -0.5", "budget.bf16.idx.recall_mean", "negative"),
    ("[c1.budget.bf16.scores]\nrecall_min = 0.9", "budget.bf16.scores.recall_min", "top-k key"),
    ("[c1.budget.bf16.idx]\nrel_fro = 0.1", "budget.bf16.idx.rel_fro", "is an error metric"),
    (
        "[c1.budget.bf16.idx]\ntie_band_rel = 0.1\ntie_band_abs = 0.1",
        "budget.bf16.idx",
        "both tie_band_rel and tie_band_abs",
    ),
    ("[c1.budget.fp32]\nscores = 3", "budget.fp32.scores", "expected a table of budget keys"),
]


@pytest.mark.parametrize(("table", "key", "fragment"), BUDGET_ERRORS)
def test_budget_errors(tmp_path: Path, table: str, key: str, fragment: str) -> None:
    check(error(tmp_path, f'[c1]\nop = "tiny"\n{table}\n'), case="c1", key=key, fragment=fragment)


def test_budget_error_on_an_op_without_topk(tmp_path: Path) -> None:
    err = error(tmp_path, '[p]\nop = "plain"\n[p.budget.bf16.y]\nrecall_min = 0.9\n')
    message = check(err, case="p", key="budget.bf16.y.recall_min", fragment="top-k key")
    assert "Fix: remove it: this op has no top-k output" in message


def test_the_first_bad_case_is_reported_by_id(tmp_path: Path) -> None:
    err = error(tmp_path, '[good]\nop = "tiny"\n[bad]\nop = "tiny"\nseeds = []\n')
    assert err.case == "bad"


def test_full_message_layout(tmp_path: Path) -> None:
    err = error(tmp_path, '[c1]\nop = "tiny"\nseeds = "0"\n')
    assert str(err) == (
        f"{tmp_path / 'tiny.toml'}: case 'c1': key 'seeds': expected an array of integers, "
        "got string '0'. Fix: write seeds = [0, 1]: a non-empty array of distinct integers >= 0"
    )


def test_case_file_error_is_a_value_error_and_pickles(tmp_path: Path) -> None:
    err = error(tmp_path, '[c1]\nop = "tiny"\nseeds = []\n')
    assert isinstance(err, ValueError)
    copy: Any = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.path, copy.case, copy.key) == (str(err), err.path, "c1", "seeds")


def test_mhc_y_of_fp32_and_fused_is_held_to_the_case_bf16_budget_on_y(tmp_path: Path) -> None:
    """y is bf16 for every variant: finer variants take the case's bf16 budget on it, key by
    key, unless they give the key themselves (docs/budgets.md)."""
    (tmp_path / "c.toml").write_text(
        '[t]\nop = "mhc_pre"\npreset = "v4pro"\nshape = { tokens = 4 }\n'
        'variants = ["bf16", "tf32"]\n'
        '[t.budget.bf16.y]\nrel_fro = 0.004\nfrac_outside = 0.001\nmax_err_ratio = 5\n'
        '[t.budget.tf32.y]\ncalc_diff = 1e-7\n'
    )
    (case,) = load_cases(tmp_path)
    fp32, tf32, bf16 = (case.budgets[v].outputs["y"] for v in ("fp32", "tf32", "bf16"))
    assert fp32.limits["rel_fro"] == tf32.limits["rel_fro"] == bf16.limits["rel_fro"] == 0.004
    assert fp32.limits["frac_outside"] == 0.001
    assert tf32.limits["calc_diff"] == 1e-7
    # measured against the bf16 rounding envelope on y, so held to the bf16 ratio there
    assert tf32.limits["max_err_ratio"] == fp32.limits["max_err_ratio"] == 5
    assert case.budgets["tf32"].outputs["mixes"].limits["max_err_ratio"] != 5
    # mixes is not a coarse output: tf32's own table default, not the case's bf16 y value
    assert case.budgets["tf32"].outputs["mixes"].limits["max_err_ratio"] == \
        DEFAULT_BUDGETS["tf32"]["max_err_ratio"]
    assert case.budgets["fp32"].outputs["mixes"].limits["rel_fro"] < 1e-3  # not a coarse output


# --- budget_like: a variant that takes another variant's budgets ----------------------------

BORROWED = """
    [c1]
    op = "tiny"
    [c1.budget.bf16.scores]
    calc_diff = 1e-5
    max_abs = 0.5
    [c1.budget.bf16.idx]
    recall_min = 0.98
    tie_band_abs = 0.25
    [c1.budget.tf32]
    budget_like = "bf16"
"""


def test_budget_like_reads_the_lenders_tables_as_copies_would(tmp_path: Path) -> None:
    """``budget_like = "bf16"`` gives tf32 exactly what copies of bf16's tables gave it: the
    keys written there, the rest from tf32's own defaults row (as copies kept in step by hand
    would)."""
    borrowed = load_one(tmp_path, BORROWED)
    copied = load_one(tmp_path, BORROWED.replace(
        '[c1.budget.tf32]\n    budget_like = "bf16"',
        "[c1.budget.tf32.scores]\n    calc_diff = 1e-5\n    max_abs = 0.5\n"
        "    [c1.budget.tf32.idx]\n    recall_min = 0.98\n    tie_band_abs = 0.25"))
    assert lender_of(borrowed.budgets["tf32"].origins) == "bf16"
    assert lender_of(copied.budgets["tf32"].origins) is None
    assert borrowed.budgets == copied.budgets
    tf32 = borrowed.budgets["tf32"].outputs["scores"]
    assert (tf32.limits["calc_diff"], tf32.limits["max_abs"]) == (1e-5, 0.5)
    assert tf32.atol == DEFAULT_BUDGETS["tf32"]["atol"]  # the borrower's own row
    assert borrowed.budgets["bf16"].outputs["scores"].atol == DEFAULT_BUDGETS["bf16"]["atol"]


def test_budget_like_may_name_the_reference(tmp_path: Path) -> None:
    case = load_one(tmp_path, '[c1]\nop = "tiny"\n[c1.budget.fp32.scores]\nrel_fro = 3e-7\n'
                    '[c1.budget.bf16]\nbudget_like = "fp32"\n')
    assert case.budgets["bf16"].outputs["scores"].limits["rel_fro"] == 3e-7


def test_a_budget_error_in_a_lent_table_names_the_lenders_key(tmp_path: Path) -> None:
    err = error(tmp_path, '[c1]\nop = "tiny"\n[c1.budget.tf32]\nbudget_like = "bf16"\n'
                '[c1.budget.bf16.scores]\nrel_frob = 1\n')
    check(err, case="c1", key="budget.bf16.scores.rel_frob", fragment="unknown metric")


BUDGET_LIKE_ERRORS = [
    ("[c1.budget.tf32]\nbudget_like = 3", "budget.tf32.budget_like",
     "expected a variant name, got integer 3",
     ('write budget_like = "<variant>" with one of: fp32, bf16')),
    ('[c1.budget.tf32]\nbudget_like = "tf32"', "budget.tf32.budget_like", "'tf32' names itself",
     "name the variant whose budgets it takes, one of: fp32, bf16"),
    ('[c1.budget.tf32]\nbudget_like = "fp8"', "budget.tf32.budget_like",
     "unknown variant 'fp8' for op 'tiny'", "use one of: fp32, bf16"),
    ('variants = ["tf32"]\n[c1.budget.tf32]\nbudget_like = "bf16"', "budget.tf32.budget_like",
     "'bf16' is not a variant this case runs",
     "add 'bf16' to variants, or give 'tf32' budget tables of its own"),
    ('[c1.budget.tf32]\nbudget_like = "bf16"\nscores = { calc_diff = 1e-6 }',
     "budget.tf32.scores",
     ("'tf32' takes bf16's budgets (budget_like = \"bf16\"), so its table cannot also set "
      "'scores'"),
     ("set it in [c1.budget.bf16.scores] (it then holds for both), or remove budget_like and "
      "give 'tf32' budget tables of its own")),
    ('[c1.budget.tf32]\nbudget_like = "bf16"\n[c1.budget.bf16]\nbudget_like = "fp32"',
     "budget.tf32.budget_like",
     "'bf16' takes its budgets from another variant in turn: tf32 -> bf16 -> fp32",
     'write budget_like = "fp32": borrow from the variant that sets the tables'),
    ('[c1.budget.tf32]\nbudget_like = "bf16"\n[c1.budget.bf16]\nbudget_like = "tf32"',
     "budget.tf32.budget_like", "budget_like goes round in a cycle: tf32 -> bf16 -> tf32",
     "give one of them budget tables of its own"),
]


@pytest.mark.parametrize(("body", "key", "problem", "fix"), BUDGET_LIKE_ERRORS)
def test_budget_like_errors(tmp_path: Path, body: str, key: str, problem: str,
                            fix: str) -> None:
    err = error(tmp_path, f'[c1]\nop = "tiny"\n{body}\n')
    check(err, case="c1", key=key, fragment=problem)
    assert err.fix == fix


def test_the_shipped_round_trip_takes_bf16s_budgets() -> None:
    """mHC's known-bad bf16_roundtrip is held to bf16's numerics (its cast ledger fails it):
    every shipped case with numerics says so with budget_like, none with copies."""
    cases = [c for c in shipped_cases()
             if "bf16_roundtrip" in c.variants and not c.perf_only]
    assert cases
    for case in cases:
        assert {v: lender_of(b.origins) for v, b in case.budgets.items() if lender_of(b.origins)} == {
            "bf16_roundtrip": "bf16"}, case.id
        assert case.budgets["bf16_roundtrip"] == case.budgets["bf16"]
