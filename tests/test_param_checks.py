"""Op parameters: declared ranges checked when a case is read and when an op registers."""

from __future__ import annotations

from pathlib import Path

import pytest

from numcheck.cases import CaseFileError, load_case_file
from numcheck.ops import registry
from numcheck.ops.param_checks import ParamProblem, check_params, describe_range
from numcheck.ops.registry import ParamSpec, RegistrationError, get_op
from tests.test_registration import make_op


def _read(tmp_path: Path, op: str, shape: str, extra: str = "") -> CaseFileError:
    path = tmp_path / "c.toml"
    path.write_text(f'[bad]\nop = "{op}"\n{extra}shape = {{ {shape} }}\n')
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    return info.value


@pytest.mark.parametrize(
    ("op", "shape", "key", "message"),
    [
        ("indexer", "batch = -1", "shape.batch",
         "-1 is out of range (needs an integer >= 1). Fix: write e.g. batch = 4"),
        ("indexer", "block_size = 0", "shape.block_size",
         "0 is out of range (needs an integer >= 1). Fix: write e.g. block_size = 64"),
        ("indexer", "next_n = 0", "shape.next_n",
         "0 is out of range (needs an integer >= 1). Fix: write e.g. next_n = 1"),
        ("indexer", "min_context = 900, max_context = 800", "shape.min_context",
         ("min_context 900 > max_context 800. Fix: set min_context <= 800 (0 means "
         "max_context // 4), or raise max_context")),
        ("indexer", "next_n = 300, max_context = 256", "shape.next_n",
         ("next_n 300 > max_context 256: a request's query rows need that many tokens. Fix: "
         "set next_n <= 256, or raise max_context")),
        ("indexer", "near_ties = 0.9", "shape.near_ties",
         ("0.9 is out of range (needs a number >= 0 and <= 0.5). Fix: write e.g. "
         "near_ties = 0.0")),
        ("mhc_pre", "sinkhorn_iters = -1", "shape.sinkhorn_iters",
         "-1 is out of range (needs an integer >= 1). Fix: write e.g. sinkhorn_iters = 20"),
        ("mhc_pre", "eps = -1", "shape.eps",
         "-1.0 is out of range (needs a number > 0 and <= 1). Fix: write e.g. eps = 1e-06"),
        ("mhc_pre", "eps = nan", "shape.eps",
         "nan is out of range (needs a number > 0 and <= 1). Fix: write e.g. eps = 1e-06"),
    ],
)
def test_case_file_out_of_range_names_file_case_key_and_fix(
    tmp_path: Path, op: str, shape: str, key: str, message: str
) -> None:
    err = _read(tmp_path, op, shape)
    assert str(err) == f"{tmp_path / 'c.toml'}: case 'bad': key '{key}': {message}"
    assert (err.case, err.key) == ("bad", key)


def test_a_valid_case_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[ok]\nop = "indexer"\nshape = { min_context = 0, max_context = 64, '
                    'next_n = 2, block_size = 1 }\n')
    (case,) = load_case_file(path)
    assert case.params["next_n"] == 2


def test_every_shipped_case_is_within_its_op_ranges() -> None:
    from tests.shipped import shipped_cases

    for case in shipped_cases():
        assert check_params(get_op(case.op), case.params) == []


def test_describe_range() -> None:
    assert describe_range(ParamSpec(int, 1, min=1)) == "an integer >= 1"
    assert describe_range(ParamSpec(float, 1e-6, gt=0.0, max=1.0)) == "a number > 0 and <= 1"
    assert describe_range(ParamSpec(str, "a", choices=("a", "b"))) == 'one of "a", "b"'


def test_choices_are_checked_when_the_case_is_read(tmp_path: Path) -> None:
    op = make_op("fmt", params={"n": ParamSpec(int, 8, "length", min=1),
                                "fmt": ParamSpec(str, "amax448", "scale format",
                                                 choices=("amax448", "ue8m0"))})
    registry.register(op)
    err = _read(tmp_path, "fmt", 'fmt = "e8m0"')
    assert str(err).endswith(
        "key 'shape.fmt': \"e8m0\" is not allowed. Fix: use one of \"amax448\", \"ue8m0\", "
        'e.g. fmt = "amax448"')


def test_a_user_ops_cross_check_runs_at_read_time(tmp_path: Path) -> None:
    def rule(p: dict) -> list[ParamProblem]:
        return [ParamProblem("n", "n must be even", "write n = 8")] if p["n"] % 2 else []

    registry.register(make_op("even", params={"n": ParamSpec(int, 8, "length", min=1)},
                              check_params=rule))
    err = _read(tmp_path, "even", "n = 7")
    assert str(err).endswith("key 'shape.n': n must be even. Fix: write n = 8")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"params": {"n": ParamSpec(int, 0, "length", min=1)}},
         ("parameter 'n': its default 0 breaks its own range (an integer >= 1). Fix: correct "
         "the default or the range")),
        ({"params": {"n": ParamSpec(int, 8, "length", min=10, max=2)}},
         "parameter 'n': the range is empty (an integer >= 10 and <= 2). Fix: correct min/max"),
        ({"params": {"n": ParamSpec(list, [], "length")}},
         ("parameter 'n' has type 'list'. Fix: use int, float, bool or str (what a case file "
         "can hold)")),
        ({"params": {"n": ParamSpec(int, "8", "length")}},
         ("parameter 'n': default '8' is not of type int. Fix: give a default of the declared "
         "type")),
        ({"params": {"n": ParamSpec(str, "a", "length", min=1)}},
         ("parameter 'n': a range (min/max/gt) on a str parameter. Fix: use choices=(...) for "
         "a fixed set of values")),
        ({"params": {"n": ParamSpec(str, "c", "fmt", choices=("a", "b"))}},
         ('parameter \'n\': its default "c" breaks its own range (one of "a", "b"). Fix: '
         "correct the default or the range")),
        ({"presets": {"big": {"n": -4}}, "params": {"n": ParamSpec(int, 8, "length", min=1)}},
         "preset 'big': n: -4 is out of range (needs an integer >= 1). Fix: write e.g. n = 8"),
        ({"presets": {"big": {"m": 4}}},
         ("preset 'big' sets unknown parameter 'm'. Fix: declare it in params or remove it "
         "(params: n)")),
        ({"check_params": lambda p: [("n", "always wrong", "none")]},
         "check_params rejects the defaults (n: always wrong). Fix: make the defaults valid"),
        ({"nonfinite": {"z": ("nan",)}},
         "nonfinite names 'z', not one of its outputs ['y']. Fix: name an output"),
        ({"nonfinite": {"y": ("inf",)}},
         "nonfinite['y'] = ('inf',). Fix: a tuple of nan, +inf, -inf"),
    ],
)
def test_registration_checks_parameter_declarations(changes: dict, message: str) -> None:
    with pytest.raises(RegistrationError) as info:
        registry.register(make_op("decl", **changes), origin="conftest.py:3")
    assert str(info.value) == f"numcheck: op 'decl' (from conftest.py:3): {message}"
