"""One error shape (numcheck/errors.py): the key / problem / fix errors share one base, and
every numcheck error class survives pickling whole, its message and its fields (checks run
in a worker process; pytest-xdist and the history's reader pools ship errors between
processes). The classes are walked from the package, so a new one is covered at once."""

from __future__ import annotations

import importlib
import inspect
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.importgraph import importable_up_front

from numcheck.errors import NumcheckError, reduce_whole


def error_classes() -> dict[str, type[BaseException]]:
    """Every exception class numcheck's modules define, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for name in importable_up_front():
        for obj in vars(importlib.import_module(name)).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) \
                    and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


def _aborted() -> BaseException:
    from numcheck.execute.aborted import CRASH, Aborted, CheckAborted

    return CheckAborted(Aborted(CRASH, "mhc_pre::tiny::bad[cpu]", "first call",
                                "the worker process was killed by SIGSEGV", ["worker log: x"]))


def _quantization() -> BaseException:
    from numcheck.precision.quant_scheme import FP8_ROW
    from numcheck.precision.quant_validate import Finding, QuantizationError, Validation

    found = Finding("scale_format", "3 scales are not powers of two", 3, 64, (0, 1))
    return QuantizationError(Validation(FP8_ROW, (found,)), "operand a")


GOLDEN = {"path": Path("goldens/mhc_pre/tiny.safetensors"), "case": "tiny"}
KEYED = ("budget.bf16.y.rel_fro", "the budget is negative (-1)", "give a number >= 0")

#: How numcheck makes each of its errors (qualified name -> an instance, as raised).
MADE: dict[str, Callable[[], BaseException]] = {
    "numcheck.errors.NumcheckError": lambda: NumcheckError(
        *KEYED, path="cases/mhc.toml", case="tiny"),
    "numcheck.caseparts.inputs.InputsError": lambda: _error("caseparts.inputs.InputsError",
                                                            "inputs.file", "no such file", "x"),
    "numcheck.caseparts.sweep.SweepError": lambda: _error("caseparts.sweep.SweepError",
                                                          "sweep.n", "no value", "give n"),
    "numcheck.numerics.budgets.BudgetError": lambda: _error("numerics.budgets.BudgetError",
                                                            *KEYED),
    "numcheck.invariance.limits.InvarianceError": lambda: _error(
        "invariance.limits.InvarianceError", "deterministic.devices", "unknown device", "cuda"),
    "numcheck.overhead.limits.OverheadError": lambda: _error(
        "overhead.limits.OverheadError", "max_cast_bytes_ratio", "negative", "give >= 0"),
    "numcheck.cases.CaseFileError": lambda: _error(
        "cases.CaseFileError", Path("cases/mhc.toml"), "negative", "give >= 0", case="tiny",
        key="budget.bf16.y.rel_fro"),
    "numcheck.recorded.files.RecordedError": lambda: _error(
        "recorded.files.RecordedError", "no call of op 'mhc_pre' was recorded", "call it"),
    "numcheck.report.records.ReportError": lambda: _error(
        "report.records.ReportError", "runs/a.json", "no such report file", "pass one"),
    "numcheck.goldens.files.GoldenError": lambda: _error("goldens.files.GoldenError", "g",
                                                         **GOLDEN),
    "numcheck.goldens.files.GoldenMissing": lambda: _error("goldens.files.GoldenMissing",
                                                           "missing", **GOLDEN),
    "numcheck.goldens.files.GoldenCorrupt": lambda: _error("goldens.files.GoldenCorrupt",
                                                           "corrupt", **GOLDEN),
    "numcheck.goldens.files.GoldenStale": lambda: _error("goldens.files.GoldenStale",
                                                         "stale", **GOLDEN),
    "numcheck.goldens.files.GoldenFormatError": lambda: _error(
        "goldens.files.GoldenFormatError", "format", path=None, case="tiny"),
    "numcheck.goldens.regen.GoldenRefused": lambda: _error("goldens.regen.GoldenRefused",
                                                           "NaN", **GOLDEN),
    "numcheck.goldens.freshness.GoldenNote": lambda: _error("goldens.freshness.GoldenNote",
                                                            "no parameter record"),
    "numcheck.execute.aborted.CheckAborted": _aborted,
    "numcheck.precision.quant_validate.QuantizationError": _quantization,
    "numcheck.honest.gemm_family._SameAs": lambda: _error("honest.gemm_family._SameAs",
                                                          ("gemm", 0, "fp32")),
    **{f"numcheck.{name}": (lambda name=name: _error(name, f"{name} said so"))
       for name in ("calibrate.casewriter.CaseWriteError", "disk.locking.LockTimeout",
                    "execute.isolated.IsolationError", "ops.registry.RegistrationError",
                    "ops.spec.VariantError", "perf.gpulock.DeviceLockTimeout",
                    "perf.timing.TimingError", "plugin.golden_fixture.GoldenCheckFailure",
                    "plugin.items.NumcheckFailure")},
}


def _error(name: str, *args: object, **kwargs: object) -> BaseException:
    module, _, cls = f"numcheck.{name}".rpartition(".")
    return getattr(importlib.import_module(module), cls)(*args, **kwargs)


def round_trip_problems(errors: dict[str, BaseException]) -> list[str]:
    """What does not survive pickling: the error itself, its type, its message or a field."""
    problems = []
    for name, error in errors.items():
        try:
            copy = pickle.loads(pickle.dumps(error))
        except Exception as exc:  # noqa: BLE001 - the problem to report
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if type(copy) is not type(error) or str(copy) != str(error):
            problems.append(f"{name}: came back as {type(copy).__name__}: {copy}")
        elif vars(copy) != vars(error):
            problems.append(f"{name}: fields {vars(error)} came back as {vars(copy)}")
    return problems


def test_every_numcheck_error_class_is_made_here() -> None:
    """The walk finds the classes; a new one needs a way to be made above (and so is
    pickled below)."""
    walked = error_classes()
    assert "numcheck.caseparts.sweep.SweepError" in walked  # the walk sees the package
    assert sorted(walked) == sorted(MADE)


def test_every_numcheck_error_survives_pickling_whole() -> None:
    errors = {name: make() for name, make in MADE.items()}
    assert all(type(e).__qualname__ == name.rpartition(".")[2] for name, e in errors.items())
    assert round_trip_problems(errors) == []


class PlantedKeyed(ValueError):
    """The shape four of numcheck's key / problem / fix copies had: an __init__ that takes
    more than the message, which unpickling calls with the message alone."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        super().__init__(f"key '{key}': {problem}. Fix: {fix}")
        self.key = key


class PlantedDropped(ValueError):
    """Pickled by its message alone: a field does not come back."""

    def __init__(self, message: str, extra: int = 0) -> None:
        super().__init__(message)
        self.extra = extra

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class PlantedWhole(PlantedKeyed):
    __reduce__ = reduce_whole


def test_the_check_catches_an_error_that_does_not_pickle() -> None:
    problems = round_trip_problems({"keyed": PlantedKeyed(*KEYED),
                                    "dropped": PlantedDropped("x", extra=1),
                                    "whole": PlantedWhole(*KEYED),
                                    "base": NumcheckError(*KEYED)})
    assert [p.partition(":")[0] for p in problems] == ["keyed", "dropped"]
    assert "TypeError" in problems[0] and "extra" in problems[1]


@pytest.mark.parametrize(("error", "message"), [
    (lambda: _error("numerics.budgets.BudgetError", *KEYED),
     "key 'budget.bf16.y.rel_fro': the budget is negative (-1). Fix: give a number >= 0"),
    (lambda: _error("cases.CaseFileError", Path("cases/mhc.toml"), "negative", "give >= 0",
                    case="tiny", key="y.rel_fro"),
     "cases/mhc.toml: case 'tiny': key 'y.rel_fro': negative. Fix: give >= 0"),
    (lambda: _error("cases.CaseFileError", Path("cases/mhc.toml"), "not TOML", "fix it"),
     "cases/mhc.toml: not TOML. Fix: fix it"),
    (lambda: _error("recorded.files.RecordedError", "no call", "call it"),
     "no call. Fix: call it"),
    (lambda: _error("report.records.ReportError", "runs/", "no report", "pass one"),
     "runs/: no report. Fix: pass one"),
])
def test_the_one_shape_words_each_error_as_before(error: Callable[[], BaseException],
                                                  message: str) -> None:
    made = error()
    assert isinstance(made, NumcheckError) and isinstance(made, ValueError)
    assert str(made) == message
    assert message.endswith(f"{made.problem}. Fix: {made.fix}")
