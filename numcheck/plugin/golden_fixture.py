"""Ad-hoc golden checks inside ordinary tests: the engine of the ``numcheck_golden`` fixture.

A test computes an output and asks for it to be compared with the FP32 reference kept in
the goldens folder, under a budget::

    def test_my_gemm(numcheck_golden):
        x = make_x()
        numcheck_golden.check(my_bf16_gemm(x), reference_fn=lambda: fp32_gemm(x),
                              budget={"rel_fro": 1e-3}, name="y", inputs=x)

The golden lives at ``<goldens>/_tests/<sanitized test id>/<name>.safetensors`` and follows
the case goldens' workflow (the pytest-regressions habit): a missing golden fails with the
command that creates it; the reference function runs only under the regen flag; a golden
whose bytes changed is corrupt, one made from other inputs or another ``version`` is stale;
nothing is ever written without the flag. It reuses the case machinery: goldens, metrics,
top-k agreement, budgets with per-precision defaults, and verdicts. No pytest here: the
plugin builds a :class:`GoldenCheck` per test and passes the commands in. It lives in the
plugin's room because it words its failures as a case failure's (:mod:`numcheck.report`),
which sits above the code that runs checks.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from numcheck.check.against_golden import judge_output
from numcheck.devices import device_label
from numcheck.goldens.files import (
    Golden,
    GoldenError,
    input_fingerprint,
    load_golden,
    write_if_changed,
)
from numcheck.goldens.freshness import require_fresh
from numcheck.goldens.packing import StoredOutput, pack_output, stored_output
from numcheck.localize import failure as localize
from numcheck.localize.findings import Localization
from numcheck.numerics.budget_origin import FixtureArg, Origin
from numcheck.numerics.budgets import Unmeasured, VariantBudget, complete_budget
from numcheck.numerics.metrics import ErrorMetrics
from numcheck.numerics.topk import TopkReport, select_topk, topk_agreement
from numcheck.numerics.verdict import Violation, topk_violations, worst
from numcheck.ops.spec import TopkSpec
from numcheck.precision import precision_of
from numcheck.report.limit_text import origin_text
from numcheck.report.render import Commands, failure_detail, verdict_message

#: Sub-folder of the goldens folder that holds fixture goldens (no op name starts with "_").
FIXTURE_DIR = "_tests"
#: Names of checks inside one test: they become file names.
CHECK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: Longest test-id folder name before it is shortened (and a hash keeps it unique).
MAX_ID_CHARS = 120
#: A fixture check has no op, so no honest implementation to measure ``max_err_ratio``
#: against: a budget key for it is an error, and the precision row's default is left out.
NO_ENVELOPE = Unmeasured(
    "max_err_ratio (the worst element against honest rounding on the same inputs) cannot be "
    "measured by the numcheck_golden fixture, which compares with a stored golden only, so "
    "this limit would gate nothing",
    "remove the key; bound the worst element with max_abs, max_rel or max_band_ratio, or "
    "check the op in a case file with a rounding envelope (docs/extending.md)",
)

TensorInputs = torch.Tensor | Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | None


class GoldenCheckFailure(AssertionError):
    """An ad-hoc check that missed its budget; the message is the whole report."""


def folder_for_test(test_id: str) -> str:
    """A file-system-safe folder name for a pytest node id, readable and unique.

    ``tests/test_k.py::test_gemm[bf16]`` -> ``tests.test_k.py..test_gemm[bf16]``. Characters
    outside a portable set become ``_``; when that (or shortening) loses information, a
    short hash of the id is appended so two tests never share a folder.
    """
    readable = test_id.replace("::", "..").replace("/", ".")
    safe = re.sub(r"[^A-Za-z0-9._\[\]=+-]", "_", readable).lstrip(".") or "_"
    if safe != readable or len(safe) > MAX_ID_CHARS:
        digest = hashlib.sha256(test_id.encode()).hexdigest()[:10]
        safe = f"{safe[:MAX_ID_CHARS]}-{digest}"
    return safe


def _fingerprint(inputs: TensorInputs) -> str:
    if inputs is None:
        return ""
    if isinstance(inputs, torch.Tensor):
        named = {"0": inputs}
    elif isinstance(inputs, Mapping):
        named = dict(inputs)
    else:
        named = {str(i): t for i, t in enumerate(inputs)}
    return input_fingerprint(named)


@dataclass
class GoldenCheck:
    """Golden checks of one test (what the ``numcheck_golden`` fixture returns).

    ``regen`` is the regen flag; ``regen_command`` and ``reproduce_command`` go into
    messages; ``written`` collects ``(path, rewritten)`` of each regenerated golden.
    """

    goldens_dir: Path
    test_id: str
    regen: bool = False
    regen_command: str = ""
    reproduce_command: str = ""
    written: list[tuple[Path, bool]] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)

    def __repr__(self) -> str:
        return f"<numcheck_golden {self.test_id}{' (regen)' if self.regen else ''}>"

    def path(self, name: str) -> Path:
        """Where the golden of check ``name`` of this test lives."""
        return Path(self.goldens_dir) / FIXTURE_DIR / folder_for_test(self.test_id) / (
            f"{name}.safetensors"
        )

    def check(
        self,
        actual: torch.Tensor,
        *,
        reference_fn: Callable[[], torch.Tensor],
        budget: Mapping[str, Any] | None = None,
        precision: str | None = None,
        name: str = "output",
        inputs: TensorInputs = None,
        version: int = 1,
    ) -> ErrorMetrics:
        """Compare ``actual`` with the golden made by ``reference_fn`` under ``budget``.

        Args:
            actual: the output under test (any float dtype and device).
            reference_fn: returns the FP32 reference output; called only under the regen
                flag, so an expensive reference costs nothing on ordinary runs.
            budget: case-file output keys (``rel_fro``, ``calc_diff``, ``max_abs``, ``atol``...);
                the rest comes from the defaults row of ``precision``.
            precision: ``fp32``, ``tf32`` or ``bf16``; by default ``bf16`` for a bf16/fp16
                ``actual`` and ``fp32`` otherwise.
            name: names the golden file; unique within the test.
            inputs: tensors the output was computed from; their fingerprint is stored, and a
                golden made from other inputs fails as stale instead of comparing wrongly.
            version: bump it when the reference itself changes: older goldens become stale.

        Returns the measured :class:`~numcheck.numerics.metrics.ErrorMetrics`. Raises
        :class:`GoldenCheckFailure` when a budget is missed and a
        :class:`~numcheck.goldens.files.GoldenError` when the golden is missing, corrupt or stale.
        """
        __tracebackhide__ = True
        precision = precision or precision_of(actual.dtype)
        caller = _caller()
        full = complete_budget(precision, {name: dict(budget or {})}, outputs=(name,),
                               topk_output=None,
                               unmeasured={name: {"max_err_ratio": NO_ENVELOPE}},
                               given_origins=_fixture_origins(name, budget, caller))
        ob = full.outputs[name]
        golden = self._golden(name, inputs, version, lambda: {name: reference_fn()})
        stored = stored_output(name, golden.tensors, path=golden.path, case=self._label(name),
                               regen_hint=self.regen_command)
        # Judged as a case's output is: a sampled golden's non-finite counts included.
        metrics, violations = judge_output(name, actual, stored, precision, ob)
        if violations:
            where = _localize(None, {name: actual}, {name: stored}, violations, full)
            raise GoldenCheckFailure(self._message(
                name, violations, golden.path, metrics=metrics, localization=where,
                budget=_budget_line(violations, ob.limits, full, caller),
            ))
        return metrics

    def check_topk(
        self,
        indices: torch.Tensor,
        *,
        reference_fn: Callable[[], torch.Tensor | tuple[torch.Tensor, torch.Tensor]],
        budget: Mapping[str, Any] | None = None,
        precision: str = "bf16",
        name: str = "topk",
        inputs: TensorInputs = None,
        version: int = 1,
    ) -> TopkReport:
        """Compare a top-k selection ``[R, k]`` (-1 padded) with the golden one, tie-aware.

        ``reference_fn`` returns the FP32 scores ``[R, L]`` (the golden selection is then
        their :func:`~numcheck.numerics.topk.select_topk` with ``k = indices.shape[-1]``), or a pair
        ``(golden_indices, scores)``. ``budget`` takes the top-k keys (``recall_min``,
        ``tie_recall_min``, ``tie_band_rel`` ...), completed from the ``precision`` row: a
        flip counts as benign only when both tokens' golden scores lie within the tie band of
        the row's k-th score. Returns the :class:`~numcheck.numerics.topk.TopkReport`; raises like
        :meth:`check`.
        """
        __tracebackhide__ = True
        caller = _caller()
        full = complete_budget(precision, {name: dict(budget or {})}, outputs=(name,),
                               topk_output=name,
                               given_origins=_fixture_origins(name, budget, caller))
        tb = full.topk
        assert tb is not None
        k = indices.shape[-1]

        def reference() -> dict[str, torch.Tensor]:
            made = reference_fn()
            if isinstance(made, tuple):
                golden_idx, scores = made
            else:
                scores = made
                golden_idx = select_topk(scores, k)
            return {name: golden_idx, f"{name}.scores": scores}

        golden = self._golden(name, inputs, version, reference)
        stored = golden.tensors
        if name not in stored or f"{name}.scores" not in stored:
            raise GoldenError(
                f"golden {golden.path} for {self._label(name)} holds no top-k selection\n"
                f"Fix: regenerate it with: {self.regen_command}", path=golden.path,
                case=self._label(name),
            )
        report = topk_agreement(stored[name], indices.detach().cpu(), stored[f"{name}.scores"],
                                band=tb.tie_band, band_kind=tb.tie_band_kind)
        violations = topk_violations(name, report, tb)
        if violations:
            scores = f"{name}.scores"
            held = {key: stored_output(key, stored, path=golden.path, case=self._label(name))
                    for key in (name, scores)}
            where = _localize(TopkSpec(name, scores), {name: indices}, held, violations, full)
            message = self._message(
                name, violations, golden.path, report, localization=where,
                budget=_budget_line(violations, tb.limits, full, caller),
            )
            raise GoldenCheckFailure(message)
        return report

    # -- internals -----------------------------------------------------------------------

    def _label(self, name: str) -> str:
        return f"{self.test_id} [{name}]"

    def _golden(
        self,
        name: str,
        inputs: TensorInputs,
        version: int,
        reference: Callable[[], Mapping[str, torch.Tensor]],
    ) -> Golden:
        __tracebackhide__ = True
        if not CHECK_NAME.fullmatch(name):
            raise ValueError(
                f"numcheck_golden: check name {name!r} cannot name a file. Fix: use letters, "
                "digits, '_', '.' and '-', starting with a letter or digit"
            )
        if name in self._names:
            raise ValueError(
                f"numcheck_golden: test {self.test_id} already has a check named {name!r}. "
                "Fix: give each check in a test its own name="
            )
        self._names.add(name)
        path = self.path(name)
        fingerprint = _fingerprint(inputs)
        if self.regen:
            self.written.append((path, self._write(path, name, reference(), fingerprint, version)))
        try:
            golden = load_golden(path, case=self._label(name), regen_hint=self.regen_command)
            require_fresh(golden, op_version=version, fingerprint=fingerprint, seeds=[],
                          regen_hint=self.regen_command, case=self._label(name), op=FIXTURE_DIR)
        except GoldenError as exc:
            # The message says it all; the user's traceback should end in their test.
            raise exc.with_traceback(None) from None
        return golden

    def _write(
        self,
        path: Path,
        name: str,
        outputs: Mapping[str, torch.Tensor],
        fingerprint: str,
        version: int,
    ) -> bool:
        """Write the golden unless an equal one is there (no churn on a repeated regen)."""
        tensors: dict[str, torch.Tensor] = {}
        for key, t in outputs.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError(
                    f"numcheck_golden: the reference of {self._label(name)} returned "
                    f"{type(t).__name__}, expected a tensor"
                )
            # A selection check needs the golden score of any token a variant may pick, so
            # its outputs are stored whole; a plain output is sampled when it is large.
            tensors.update(pack_output(key, t, full=True if len(outputs) > 1 else None))
        device = device_label(str(next(iter(outputs.values())).device))
        meta = {"op": FIXTURE_DIR, "case": self._label(name), "op_version": version,
                "fingerprint": fingerprint, "device": device, "seeds": [],
                "test_id": self.test_id}
        return write_if_changed(path, tensors, meta, case=self._label(name))

    def _message(
        self, name: str, violations: list[Violation], path: Path,
        report: TopkReport | None = None, *, metrics: ErrorMetrics | None = None,
        localization: Sequence[Localization] = (), budget: str = "",
    ) -> str:
        """A case failure's layout, from its renderer: worst, where, mismatched elements,
        also, flips, golden, budget, reproduce, regenerate."""
        top = worst(violations)
        detail = failure_detail(localization, None if top is None else top.output,
                                metrics if top is not None and top.output == name else None)
        return verdict_message(
            f"numcheck FAIL {self._label(name)}", violations, topk=report,
            where=("golden:", str(path)), worst_detail=detail, budget=budget,
            commands=Commands(self.reproduce_command, self.regen_command),
        )


@dataclass(frozen=True)
class _Unstructured:
    """What localization reads of an op, for a fixture check: no declared structure (the
    output's own axes are its groupings) and, for ``check_topk``, the selection's names."""

    topk: TopkSpec | None
    structure: Mapping[str, Any] = field(default_factory=dict)


def _localize(
    topk: TopkSpec | None, outputs: Mapping[str, torch.Tensor],
    stored: Mapping[str, StoredOutput], violations: list[Violation], budget: VariantBudget,
) -> list[Localization]:
    """The failure's ``where:``, measured as a case failure's is
    (:func:`numcheck.localize.failure.localize_failure`); a diagnostic never replaces the
    verdict, so an error here becomes the one line that says so."""
    if not localize.enabled():
        return []
    try:
        return localize.localize_failure(_Unstructured(topk), {}, {}, outputs, stored,
                                         violations, budget)
    except Exception as exc:  # noqa: BLE001 - see above
        return [localize.failed(violations[0].output, None, exc)]


def _caller() -> str:
    """``file:line`` of the test line that called ``check`` or ``check_topk`` (two frames
    up), relative to the working directory where it lies below it."""
    frame = sys._getframe(2)
    path = Path(frame.f_code.co_filename)
    try:
        shown = path.resolve().relative_to(Path.cwd().resolve())
    except (OSError, ValueError):
        shown = path
    return f"{shown}:{frame.f_lineno}"


def _fixture_origins(name: str, budget: Mapping[str, Any] | None,
                     caller: str) -> dict[str, dict[str, Origin]]:
    """Each key of ``budget=`` comes from the call at ``caller``."""
    return {name: {key: FixtureArg(caller) for key in budget or {}}}


def _budget_line(
    violations: list[Violation], limits: Mapping[str, float], budget: VariantBudget,
    caller: str,
) -> str:
    """Where the worst violation's limit is set, as the budget's record says, worded as a
    case's is: the ``budget=`` of the call, or the precision's defaults row (and the key
    that would override it in the call at ``caller``); "" for a rule (a NaN, the -inf
    mask), which no budget sets."""
    top = worst(violations)
    origin = None if top is None else budget.origin(top.output, top.metric)
    if top is None or origin is None or top.metric not in limits:
        return ""
    return origin_text(origin, case="", variant="", output=top.output, key=top.metric,
                       value=limits[top.metric], source=caller, override=(
                           f"no such key in budget= at {caller}; pass budget="
                           f"{{{top.metric!r}: ...}} to override"))
