"""Registering ops and variants: the registry's checks, the conftest hook, entry points."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import numcheck
from numcheck.ops import registry
from numcheck.ops.registry import OpSpec, ParamSpec, RegistrationError, TopkSpec, Variant
from tests.caseproject import case_project
from tests.fresh import FreshPython

# -- a tiny op of our own ----------------------------------------------------------------


def double_inputs(params: dict, seed: int) -> dict[str, torch.Tensor]:
    return {"x": numcheck.normal(numcheck.rng(seed, "x"), (params["n"],))}


def double_fp32(inputs: dict, params: dict) -> dict[str, torch.Tensor]:
    return {"y": inputs["x"] * 2}


def double_bf16(inputs: dict, params: dict) -> dict[str, torch.Tensor]:
    return {"y": (inputs["x"].bfloat16() * 2).float()}


def make_op(name: str = "double", **changes: object) -> OpSpec:
    op = OpSpec(
        name=name,
        version=1,
        reference="fp32",
        variants={"fp32": Variant("fp32", double_fp32, "fp32"),
                  "bf16": Variant("bf16", double_bf16, "bf16")},
        make_inputs=double_inputs,
        outputs=("y",),
        params={"n": ParamSpec(int, 8, "length")},
    )
    return replace(op, **changes)  # type: ignore[arg-type]


def test_register_and_add_variant() -> None:
    numcheck.register(make_op())
    numcheck.add_variant("double", Variant("tf32", double_fp32, "tf32"))
    assert list(numcheck.get_op("double").variants) == ["fp32", "bf16", "tf32"]


def test_duplicate_op_names_both_origins() -> None:
    registry.register(make_op(), origin="entry point 'a = pkg:reg' of pkg")
    with pytest.raises(RegistrationError) as err:
        registry.register(make_op(), origin="a pytest_numcheck_register hook at conftest.py:7")
    assert str(err.value) == (
        "numcheck: an op named 'double' is already registered (by entry point 'a = pkg:reg' "
        "of pkg); this one comes from a pytest_numcheck_register hook at conftest.py:7. Fix: "
        "give your op another name, or add your implementation to the existing op with "
        "add_variant('double', Variant(...))"
    )


def test_builtin_op_name_is_taken() -> None:
    with pytest.raises(RegistrationError, match=r"'indexer' is already registered \(by module "
                       r"numcheck.ops.indexer\)"):
        numcheck.register(make_op("indexer"))


def test_duplicate_variant() -> None:
    with pytest.raises(RegistrationError, match=r"op 'indexer' already has a variant 'bf16' "
                       r"\(from module numcheck.ops.indexer\); this one comes from .*Fix: give "
                       "your variant another name"):
        numcheck.add_variant("indexer", Variant("bf16", double_fp32, "bf16"))


def one_arg(inputs: dict) -> dict:
    return inputs


def three_args(inputs: dict, params: dict, scale: float) -> dict:
    return inputs


def with_defaults(inputs: dict, params: dict, scale: float = 1.0) -> dict:
    return inputs


@pytest.mark.parametrize("fn", [one_arg, three_args])
def test_variant_with_the_wrong_signature(fn: object) -> None:
    with pytest.raises(RegistrationError) as err:
        numcheck.add_variant("indexer", Variant("mine", fn, "bf16"))  # type: ignore[arg-type]
    message = str(err.value)
    assert message.startswith("numcheck: op 'indexer' (from module ")
    assert f"variant 'mine': {fn.__name__}(inputs" in message  # type: ignore[attr-defined]
    assert f"cannot be called as {fn.__name__}(inputs, params)" in message  # type: ignore[attr-defined]
    assert message.endswith(f"Fix: define it as def {fn.__name__}(inputs, params): ...")  # type: ignore[attr-defined]


def test_extra_defaulted_arguments_and_lambdas_are_fine() -> None:
    numcheck.add_variant("indexer", Variant("mine", with_defaults, "bf16"))
    op = numcheck.add_variant("indexer", Variant("mine2", lambda i, p: i, "bf16"))
    assert op.variants["mine"].fn is with_defaults
    assert op.variants["mine2"].fn({"x": 1}, {}) == {"x": 1}
    assert {"mine", "mine2"} <= set(numcheck.get_op("indexer").variants)


def test_not_a_function() -> None:
    with pytest.raises(RegistrationError, match="variant 'mine' is str, not a function"):
        numcheck.add_variant("indexer", Variant("mine", "fp32", "bf16"))  # type: ignore[arg-type]


def test_make_inputs_with_the_wrong_signature() -> None:
    with pytest.raises(RegistrationError, match=r"make_inputs: one_arg\(inputs\) "
                       r"cannot be called as one_arg\(params, seed\)"):
        numcheck.register(make_op(make_inputs=one_arg))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"name": "my op"}, "op name 'my op' .* cannot be used"),
        ({"reference": "fp64"}, "reference 'fp64' is not one of its variants"),
        ({"outputs": ()}, r"outputs \[\] must be a non-empty tuple"),
        ({"topk": TopkSpec("sel", "y")}, "TopkSpec indices 'sel' is not one of its outputs"),
        ({"output_precision": {"y": "fp8"}}, r"output_precision \{'y': 'fp8'\}"),
        ({"variants": {"fp32": Variant("ref", double_fp32, "fp32")}},
         r"variants\['fp32'\] is a variant named 'ref'"),
        ({"variants": {"fp32": Variant("fp32", double_fp32, "fp8")}},
         "precision 'fp8' is not one of fp32, tf32, fp16, bf16, e4m3, e5m2"),
        ({"rounding_reference": {"bf16": "nope"}}, r"rounding_reference \{'bf16': 'nope'\}"),
        ({"rounding_alternatives": {"bf16": {"split": double_fp32}}},
         (r"rounding_alternatives\['bf16'\] needs a precision class the op names a "
         r"rounding_reference for \(\[\]\)")),
        ({"rounding_reference": {"fp32": "fp32"},
          "rounding_alternatives": {"fp32": {"split": "not a function"}}},
         r"rounding_alternatives\['fp32'\] .* a mapping of labels to functions"),
        ({"variants": {"fp32": Variant("fp32", double_fp32, "fp32", devices=("tpu",))}},
         r"unknown devices \['tpu'\]"),
    ],
)
def test_bad_op_descriptions(change: dict, fragment: str) -> None:
    with pytest.raises(RegistrationError, match=fragment):
        numcheck.register(make_op(**change))
    assert "double" not in registry.all_ops()


def test_variant_for_an_unknown_op() -> None:
    with pytest.raises(RegistrationError, match="cannot add variant 'mine' .*unknown op 'nope'.*"
                       "Fix: register the op first"):
        numcheck.add_variant("nope", Variant("mine", double_fp32, "bf16"))


def test_registrar_names_the_calling_line() -> None:
    r = numcheck.Registrar("a pytest_numcheck_register hook")
    r.register(make_op())
    line = 1 + test_registrar_names_the_calling_line.__code__.co_firstlineno + 1
    with pytest.raises(RegistrationError, match=r"by a pytest_numcheck_register hook at "
                       rf".*test_registration.py:{line}\)"):
        r.register(make_op())


def test_isolated_restores_ops_and_origins() -> None:
    with registry.isolated():
        numcheck.register(make_op())
    assert "double" not in registry.all_ops()
    numcheck.register(make_op())  # no clash with the forgotten one


# -- the conftest hook, through pytester ------------------------------------------------

CASE = """
[small]
op = "double"
shape = { n = 16 }
"""

HOOK = """
from tests import test_registration as t
from numcheck import Variant

def pytest_numcheck_register(registry):
    registry.register(t.make_op())
    registry.add_variant("double", Variant("tf32", t.double_fp32, "tf32"))
{extra}
"""


def project(pytester: pytest.Pytester, extra: str = "", case: str = CASE) -> None:
    case_project(pytester, {"double.toml": case}, conftest=HOOK.format(extra=extra))


def test_hook_registers_ops_and_variants(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--numcheck", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "cases/double.toml::small::fp32[[]cpu[]]",
        "cases/double.toml::small::bf16[[]cpu[]]",
        "cases/double.toml::small::tf32[[]cpu[]]",
    ])
    result = pytester.runpytest("--numcheck", "--numcheck-regen")
    result.assert_outcomes(passed=3)
    assert (pytester.path / "goldens" / "double" / "small.safetensors").exists()
    pytester.runpytest("--numcheck").assert_outcomes(passed=3)


def test_hook_is_not_called_without_numcheck(pytester: pytest.Pytester) -> None:
    project(pytester, extra="    raise RuntimeError('must not run')")
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    pytester.runpytest("test_plain.py").assert_outcomes(passed=1)


def test_hook_clash_is_a_usage_error_naming_both(pytester: pytest.Pytester) -> None:
    project(pytester, extra='    registry.add_variant("indexer", Variant("bf16", t.double_fp32, '
                            '"bf16"))')
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        ("ERROR: numcheck: op 'indexer' already has a variant 'bf16' (from module "
        "numcheck.ops.indexer); this one comes from a pytest_numcheck_register hook at "
        "conftest.py:7. Fix: give your variant another name"),
    ])


def test_hook_wrong_signature_is_a_usage_error(pytester: pytest.Pytester) -> None:
    project(pytester, extra='    registry.add_variant("double", Variant("bad", t.one_arg, "bf16"))')
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([("ERROR: numcheck: op 'double' (from a pytest_numcheck_register "
                                 "hook at conftest.py:7): variant 'bad': one_arg(inputs) cannot be called as "
                                 "one_arg(inputs, params) (too many positional arguments). "
                                 "Fix: define it as def one_arg(inputs, params): ...")])


def test_a_hook_that_raises_is_one_line_naming_its_line_and_the_fix(
        pytester: pytest.Pytester) -> None:
    """Issue 44: a scheme written with the precision class where its element format belongs
    (element="e4m3") was a 44-line INTERNALERROR; it is one line naming the user's line,
    what was wrong and the fix."""
    project(pytester, extra=('    from numcheck.precision.quant_scheme import OperandScheme\n'
                             '    OperandScheme(element="e4m3")'))
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        ("ERROR: numcheck: a pytest_numcheck_register hook raised ValueError at conftest.py:8 "
         "(pytest_numcheck_register): OperandScheme: unknown element format 'e4m3' ('e4m3' is a "
         "precision class; its element format is 'e4m3fn'); known: e4m3fn, e5m2, e2m1, "
         "e4m3fnuz, e5m2fnuz. Fix: "
         "OperandScheme(element='e4m3fn', ...)"),
    ])
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()
    assert len([ln for ln in result.stderr.lines if ln.strip()]) == 1
    with pytest.raises(ValueError, match=r"^AsStored: unknown element format 'e5m3'; known"):
        numcheck.fp8.AsStored("e5m3")


# -- outputs of the wrong shape, dtype or device ----------------------------------------


def wrong_dtype(inputs: dict, params: dict) -> dict[str, torch.Tensor]:
    return {"y": (inputs["x"] * 2).bfloat16()}


def wrong_shape(inputs: dict, params: dict) -> dict[str, torch.Tensor]:
    return {"y": (inputs["x"] * 2)[:-1]}


def wrong_device(inputs: dict, params: dict) -> dict[str, torch.Tensor]:
    return {"y": (inputs["x"] * 2).to("meta")}  # stands for "left on another device"


def wrong_names(inputs: dict, params: dict) -> dict[str, torch.Tensor]:
    return {"out": inputs["x"] * 2}


@pytest.mark.parametrize(
    ("variant", "line"),
    [
        ("wrong_dtype", ("*op 'double' variant 'wrong_dtype': output 'y' is bfloat16 [[]16[]]; "
                        "the reference gives float32 [[]16[]]. Fix: return every output in the "
                        "reference's shape and dtype*")),
        ("wrong_shape", ("*op 'double' variant 'wrong_shape': output 'y' is float32 [[]15[]]; "
                        "the reference gives float32 [[]16[]]*")),
        ("wrong_device", "*variant 'wrong_device': output 'y' is on meta, expected cpu*"),
        ("wrong_names", ("*variant 'wrong_names' returned outputs [[]'out'[]]; op 'double' names "
                        "[[]'y'[]]*")),
    ],
)
def test_bad_outputs_are_variant_errors(pytester: pytest.Pytester, variant: str, line: str) -> None:
    extra = f'    registry.add_variant("double", Variant("{variant}", t.{variant}, "bf16"))'
    project(pytester, extra=extra)
    pytester.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32")
    result = pytester.runpytest("--numcheck", "-k", variant)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"numcheck VariantError double::small::{variant}[[]cpu[]]", line])


# -- numcheck.ops entry points, through the real metadata lookup ------------------------

PACKAGE = '''
import numcheck

def register(registry):
    """The entry point: a callable that receives the registrar."""
    registry.register(numcheck.OpSpec(
        name="{op}", version=1, reference="fp32",
        variants={{"fp32": numcheck.Variant("fp32", fp32, "fp32"),
                   "bf16": numcheck.Variant("bf16", bf16, "bf16")}},
        make_inputs=make_inputs, outputs=("y",),
        params={{"n": numcheck.ParamSpec(int, 8)}},
    ))

def make_inputs(params, seed):
    return {{"x": numcheck.normal(numcheck.rng(seed, "x"), (params["n"],))}}

def fp32(inputs, params):
    return {{"y": inputs["x"].exp()}}

def bf16(inputs, params):
    return {{"y": inputs["x"].bfloat16().exp().float()}}
'''

MODULE_FORM = '''
import numcheck
from {pkg} import fp32

def tf32(inputs, params):
    return fp32(inputs, params)

numcheck.add_variant("{op}", numcheck.Variant("tf32", tf32, "tf32"))  # on import
'''


def install_dist(pytester: pytest.Pytester, pkg: str, entry_points: str) -> None:
    """A real (if tiny) installed distribution: a package and its *.dist-info on sys.path."""
    site = pytester.mkdir("site")
    (site / pkg).mkdir()
    op = pkg.replace("_pkg", "")
    (site / pkg / "__init__.py").write_text(PACKAGE.format(op=op))
    (site / pkg / "more.py").write_text(MODULE_FORM.format(pkg=pkg, op=op))
    info = site / f"{pkg}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pkg}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[numcheck.ops]\n{entry_points}\n")
    pytester.syspathinsert(site)


def test_entry_points_register_ops(pytester: pytest.Pytester) -> None:
    # A fresh package name per test: the module stays imported in this process.
    install_dist(pytester, "expo_pkg", "expo = expo_pkg:register\nexpo-more = expo_pkg.more")
    case_project(pytester, {"expo.toml": '[tiny]\nop = "expo"\n'})
    result = pytester.runpytest("--numcheck", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "cases/expo.toml::tiny::fp32[[]cpu[]]",
        "cases/expo.toml::tiny::bf16[[]cpu[]]",
        "cases/expo.toml::tiny::tf32[[]cpu[]]",
    ])
    pytester.runpytest("--numcheck", "--numcheck-regen").assert_outcomes(passed=3)
    pytester.runpytest("--numcheck").assert_outcomes(passed=3)


def test_entry_point_and_hook_clash_names_both(pytester: pytest.Pytester) -> None:
    install_dist(pytester, "clash_pkg", "clash = clash_pkg:register")
    project(pytester, extra="    registry.register(t.make_op('clash'))")
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        ("ERROR: numcheck: an op named 'clash' is already registered (by entry point 'clash = "
        "clash_pkg:register' of clash_pkg at *clash_pkg*__init__.py:6); this one comes from a "
        "pytest_numcheck_register hook at conftest.py:7.*"),
    ])


def test_broken_entry_point_is_a_usage_error(pytester: pytest.Pytester) -> None:
    install_dist(pytester, "broken_pkg", "broken = broken_pkg:no_such_function")
    case_project(pytester, {"broken.toml": '[tiny]\nop = "broken"\n'})
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        ("ERROR: numcheck: entry point 'broken = broken_pkg:no_such_function' of broken_pkg "
        "(group numcheck.ops) failed: AttributeError: *Fix: repair or uninstall broken_pkg*"),
    ])


def test_hook_in_a_conftest_of_the_cases_folder(pytester: pytest.Pytester) -> None:
    # Historic hook: a conftest.py that loads during collection is still called in time.
    project(pytester)
    (pytester.path / "conftest.py").rename(pytester.path / "cases" / "conftest.py")
    result = pytester.runpytest("--numcheck", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["cases/double.toml::small::tf32[[]cpu[]]"])


def test_set_variant_replaces_inside_isolated_and_isolated_restores() -> None:
    original = numcheck.get_op("indexer").variants["fp32"]
    with registry.isolated():
        swapped = Variant("fp32", with_defaults, "fp32")
        registry.set_variant("indexer", swapped)
        assert numcheck.get_op("indexer").variants["fp32"] is swapped
        registry.set_variant("indexer", Variant("extra", with_defaults, "bf16"))
        assert "extra" in numcheck.get_op("indexer").variants
        with pytest.raises(RegistrationError, match="precision 'fp64'"):
            registry.set_variant("indexer", Variant("bad", with_defaults, "fp64"))
    assert numcheck.get_op("indexer").variants["fp32"] is original
    assert "extra" not in numcheck.get_op("indexer").variants


@pytest.mark.slow  # a fresh interpreter (tests/fresh.py)
def test_builtin_op_modules_register_nothing_on_import(fresh_python: FreshPython) -> None:
    code = ("import sys; from numcheck.ops import indexer, mhc, fused; "
            "print('numcheck.ops.registry' in sys.modules)")
    done = fresh_python.run(code, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
