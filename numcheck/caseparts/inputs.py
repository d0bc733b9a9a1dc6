"""A case's ``inputs``: which distribution its generated inputs come from, or which file of
recorded inputs it runs on; and the rule that such a case sets its own budgets.

    inputs.distribution = "llm"                       # numcheck.distributions
    inputs.file = "inputs/mhc-layer3.safetensors"     # numcheck.recorded, next to the case file

What a case names is added to its parameters under
:data:`~numcheck.distributions.INPUTS_PARAM` (absent for the default), so its golden's
parameter record pins it: a golden made for another distribution, or from another file
(its content hash), is stale.

**Budgets.** The per-precision default rows and the shipped budgets were measured on normal
inputs. Outlier channels, values near the format's largest or a model's own activations
change how far an honest variant strays, so a case whose inputs are not the op's default
must set every limit its checked variants are held to (its own tables, ``budget_like``, or
the coarse-output table): :func:`defaults_left` names the first limit it would take from a
default row, and the loader refuses the case (docs/cases.md, "Inputs"). The reference's
own budget (its drift across devices against a CPU golden) is exempt. Nothing here imports
pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from numcheck.distributions import DEFAULT, DISTRIBUTIONS
from numcheck.errors import NumcheckError
from numcheck.numerics.budget_origin import Default, lender_of, root
from numcheck.numerics.budgets import TIE_BAND_KEYS, VariantBudget, describe
from numcheck.ops.spec import Inputs, OpSpec
from numcheck.recorded.files import Recorded, RecordedError, read_recorded

__all__ = ["INPUTS_KEY", "INPUTS_KEYS", "InputSpec", "InputsError", "defaults_left",
           "parse_inputs", "recorded_call"]

#: The case key, and the keys of its table.
INPUTS_KEY = "inputs"
INPUTS_KEYS = ("distribution", "file")


class InputsError(NumcheckError):
    """A case's ``inputs`` that cannot be used: ``key`` (dotted, from the case), the problem
    and the fix; :mod:`numcheck.cases` adds the file and the case."""


@dataclass(frozen=True)
class InputSpec:
    """What a case's inputs are: generated from ``distribution``, or read from ``file``
    (its ``sha256`` when the case was read, and how many calls it holds)."""

    distribution: str = DEFAULT
    file: Path | None = None
    sha256: str = ""
    calls: int = 0

    @property
    def default(self) -> bool:
        """The op's own draw (normal inputs): no file, the default distribution."""
        return self.file is None and self.distribution == DEFAULT

    def describe(self) -> str:
        """``normal inputs``, ``llm inputs``, ``inputs recorded in <file>``."""
        if self.file is not None:
            return f"inputs recorded in {self.file.name}"
        return f"{self.distribution} inputs"

    def param(self) -> dict[str, Any] | None:
        """What the case's parameters hold under INPUTS_PARAM (None for the default)."""
        if self.file is not None:
            return {"file_sha256": self.sha256, "calls": self.calls}
        if self.distribution != DEFAULT:
            return {"distribution": self.distribution}
        return None


def parse_inputs(
    raw: Any, op: OpSpec, *, folder: Path, seeds: Sequence[int], params: Mapping[str, Any],
) -> InputSpec:
    """The case's ``inputs`` table (``raw``; None when absent) checked against the op: a
    distribution the op draws, or a recorded file of this op whose calls cover ``seeds``
    and whose tensors fit the op's inputs (and, where the op checks them, the case's
    ``params``). Raises :class:`InputsError`."""
    if raw is None:
        return InputSpec()
    example = 'inputs.distribution = "llm" or inputs.file = "inputs/<name>.safetensors"'
    if not isinstance(raw, dict):
        raise InputsError(INPUTS_KEY, f"expected a table, got {describe(raw)}",
                          f"write {example}")
    for key in raw:
        if key not in INPUTS_KEYS:
            raise InputsError(f"{INPUTS_KEY}.{key}", f"unknown key '{key}'",
                              f"use {', '.join(INPUTS_KEYS)}")
    if "distribution" in raw and "file" in raw:
        raise InputsError(INPUTS_KEY, "both a distribution and a file: recorded inputs are "
                          "what they are", "keep one of them")
    if "file" in raw:
        return _file_spec(raw["file"], op, folder, seeds, params)
    name = raw.get("distribution", DEFAULT)
    key = f"{INPUTS_KEY}.distribution"
    if not isinstance(name, str):
        raise InputsError(key, f"expected a string, got {describe(name)}",
                          f"write distribution = \"llm\", one of: {', '.join(DISTRIBUTIONS)}")
    if name not in DISTRIBUTIONS:
        raise InputsError(key, f"unknown input distribution '{name}'",
                          f"use one of: {', '.join(DISTRIBUTIONS)}")
    if name not in op.distributions:
        raise InputsError(key, f"op '{op.name}' does not draw '{name}' inputs (its input "
                          f"maker draws: {', '.join(op.distributions)})",
                          f"use one of those, or draw '{name}' in the op's make_inputs and "
                          "declare it in OpSpec(distributions=...) (docs/extending.md, "
                          "\"Input distributions\")")
    return InputSpec(distribution=name)


def _file_spec(given: Any, op: OpSpec, folder: Path, seeds: Sequence[int],
               params: Mapping[str, Any]) -> InputSpec:
    key = f"{INPUTS_KEY}.file"
    if not isinstance(given, str) or not given:
        raise InputsError(key, f"expected a path, got {describe(given)}",
                          'write file = "inputs/<name>.safetensors" (relative to the case file)')
    if "://" in given:
        raise InputsError(key, f"'{given}' is a URL: recorded inputs are never fetched",
                          "record the inputs into a file next to the case file and name it")
    path = (folder / given).resolve()
    try:
        recorded = read_recorded(path)
    except RecordedError as exc:
        raise InputsError(key, f"{path}: {exc.problem}", exc.fix) from None
    if recorded.op != op.name:
        raise InputsError(key, f"{path} holds inputs of op '{recorded.op}', not '{op.name}'",
                          f"name a file recorded for op '{op.name}'")
    calls = len(recorded.calls)
    missing = [s for s in seeds if s >= calls]
    if missing:
        raise InputsError("seeds", f"seed {missing[0]} names call {missing[0]}, but {path.name} "
                          f"holds {calls} recorded call{'s' if calls != 1 else ''} "
                          f"(seeds 0..{calls - 1})",
                          f"set seeds to calls of the file, e.g. seeds = "
                          f"{list(range(min(calls, 2)))}, or record more calls")
    for seed in seeds:
        problems = _fit(op, recorded.calls[seed], params)
        if problems:
            where, problem, fix = problems[0]
            raise InputsError(where, f"call {seed} of {path.name}: {problem}", fix)
    return InputSpec(file=path, sha256=recorded.sha256, calls=calls)


def _fit(op: OpSpec, inputs: Mapping[str, torch.Tensor],
         params: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(key, problem, fix) of every way the recorded ``inputs`` do not fit the op: its
    inputs' names, dtypes and dimensions (those of its input maker at its default
    parameters), then the op's own check against the case's parameters."""
    problems = []
    made = _made_inputs(op)
    key = f"{INPUTS_KEY}.file"
    if sorted(inputs) != sorted(made):
        problem = f"it holds inputs {sorted(inputs)}; op '{op.name}' takes {sorted(made)}"
        fix = "name the inputs as the op does in the recorder's inputs function"
        return [(key, problem, fix)]
    for name, t in made.items():
        got = inputs[name]
        if got.dtype != t.dtype or got.dim() != t.dim():
            problem = f"input '{name}' is {_kind(got)}; op '{op.name}' takes {_kind(t)}"
            fix = f"convert it in the recorder's inputs function (e.g. .to({t.dtype}))"
            problems.append((key, problem, fix))
    if problems or op.check_inputs is None:
        return problems
    for p in op.check_inputs(dict(inputs), params):
        problems.append((f"shape.{p.key}", p.problem, p.fix))
    return problems


_MADE: dict[tuple[str, int], Inputs] = {}


def _made_inputs(op: OpSpec) -> Inputs:
    """The op's inputs at its default parameters (seed 0): their names, dtypes and
    dimensions are what a recorded file must hold."""
    key = (op.name, op.version)
    if key not in _MADE:
        _MADE[key] = op.make_inputs({n: s.default for n, s in op.params.items()}, 0)
    return _MADE[key]


def _kind(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} with {t.dim()} dimensions"


def recorded_call(spec: InputSpec, seed: int) -> Inputs:
    """Call ``seed`` of the case's recorded file, checked to be the file the case was read
    with (a file changed since is an error, never silently other inputs)."""
    assert spec.file is not None
    recorded = _read(spec.file)
    if recorded.sha256 != spec.sha256:
        raise RecordedError(f"{spec.file} changed since its case was read (sha256 "
                            f"{spec.sha256[:12]} -> {recorded.sha256[:12]})",
                            "run again: the case is read anew")
    return {name: t.clone() for name, t in recorded.calls[seed].items()}


_READ: dict[Path, tuple[float, Recorded]] = {}


def _read(path: Path) -> Recorded:
    """The file, read once per change of its modification time."""
    mtime = path.stat().st_mtime
    kept = _READ.get(path)
    if kept is None or kept[0] != mtime:
        _READ[path] = (mtime, read_recorded(path))
    return _READ[path][1]


def defaults_left(spec: InputSpec, variants: Sequence[str],
                  budgets: Mapping[str, VariantBudget], *, case: str) -> InputsError | None:
    """For a case on inputs other than the op's default draw: the first limit of a checked
    variant's budget that no table of the case sets (its origin is a default row, measured
    on normal inputs), as an error naming it and the calibration that sets it; None when
    every limit is the case's own (or the inputs are the default)."""
    if spec.default:
        return None
    for name in variants:
        budget = budgets[name]
        limits = {output: b.limits for output, b in budget.outputs.items()}
        for output, keys in budget.origins.items():
            held = limits.get(output, budget.topk.limits if budget.topk is not None else {})
            # The near-tie band is measured too: it counts as a limit of the top-k output.
            left = {k: row for k, o in keys.items() if isinstance(row := root(o), Default)
                    and (k in held or (output not in limits and k in TIE_BAND_KEYS))}
            if left:
                key, row = next(iter(left.items()))
                table = lender_of(budget.origins) or name
                return InputsError(
                    f"budget.{table}.{output}",
                    f"the case runs on {spec.describe()}, and {name}'s limit {key} on "
                    f"'{output}' is not set by the case: it would come from the default row "
                    f"of {row.precision}, measured on normal inputs, which need not hold on "
                    f"these", f"calibrate the case's honest families on its own inputs and "
                    f"write their tables (pytest --numcheck --numcheck-calibrate "
                    f"--numcheck-calibrate-write -k {case}; docs/budgets.md), or set "
                    f"{', '.join(left)} in [{case}.budget.{table}.{output}] from a "
                    "measurement on these inputs")
    return None
