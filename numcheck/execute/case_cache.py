"""What the checks of one case share, made once per run: its inputs and its golden (and in a
calibration run, its references made on the spot).

The checks of a case (the reference, then each variant) run back to back: the case's inputs
are made once per seed (:class:`~numcheck.check.run.CaseInputs`) and kept until the next
case's first check; its golden is read and validated for the case once
(:func:`~numcheck.goldens.case_golden.load_for_case`) and handed to every check of the case,
or the :class:`~numcheck.goldens.files.GoldenError` that refused it raised for each. Under the
regen flag the golden is first regenerated from the reference, once per file, and what that
did is kept for the run's summary (:attr:`CaseCache.regen_notes`).

No pytest here: the pytest run holds one (:mod:`numcheck.plugin.session`), and the check's
executor (:mod:`numcheck.execute.executor`) reads from it.
"""

from __future__ import annotations

from pathlib import Path

from numcheck.calibrate import References
from numcheck.cases import Case
from numcheck.check.make_golden import regenerate
from numcheck.check.run import CaseInputs
from numcheck.goldens.case_golden import CaseGolden, load_for_case
from numcheck.goldens.files import GoldenError, golden_path
from numcheck.ops.registry import OpSpec


class CaseCache:
    """The current case's inputs and every case's golden (or the error that refused it)."""

    def __init__(self, goldens_dir: Path, device: str, *, regen: bool = False) -> None:
        self.goldens_dir = goldens_dir
        self.device = device
        self.regen = regen
        #: Golden file -> whether its regeneration wrote it (False: unchanged or refused).
        self.regenerated: dict[Path, bool] = {}
        #: What each regeneration did, in the summary's words (numcheck.goldens.regen.RegenOutcome).
        self.regen_notes: dict[Path, str] = {}
        self._goldens: dict[Path, CaseGolden | GoldenError] = {}
        self._inputs: tuple[Case, CaseInputs] | None = None
        self._references: References | None = None

    def path(self, op: OpSpec, case: Case) -> Path:
        """Where the case's golden is stored."""
        return golden_path(self.goldens_dir, op.name, case.id)

    def inputs(self, op: OpSpec, case: Case) -> CaseInputs:
        """The case's inputs, made once per seed; only the current case's are kept."""
        if self._inputs is None or self._inputs[0] is not case:
            self._inputs = (case, CaseInputs(op, case))
        return self._inputs[1]

    def references(self, op: OpSpec, case: Case) -> References:
        """A calibration's goldens of the case, made on the spot per seed and shared by the
        case's variants; only the current case's are kept."""
        if self._references is None or self._references.case is not case:
            self._references = References(op, case, self.device)
        return self._references

    def golden(self, op: OpSpec, case: Case, *, regen_hint: str) -> CaseGolden:
        """The case's golden, read and validated for the case once (every check of the case
        shares it, or the error that refused it, raised again for each).

        ``regen_hint`` is the command that regenerates it, for the error's message.
        """
        path = self.path(op, case)
        if self.regen and path not in self.regenerated:
            try:
                outcome = regenerate(path, op, case, self.device, self.inputs(op, case))
            except GoldenError as exc:  # refused: nothing written, every check reports it
                self.regenerated[path] = False
                self.regen_notes[path] = "refused (the reference gave NaN/Inf: see the failures)"
                self._goldens[path] = exc
            else:
                self.regenerated[path] = outcome.written
                self.regen_notes[path] = outcome.note
                self._goldens.pop(path, None)
        if path not in self._goldens:
            try:
                self._goldens[path] = load_for_case(
                    path, op, case, fingerprint=self.inputs(op, case).fingerprint,
                    regen_hint=regen_hint)
            except GoldenError as exc:
                self._goldens[path] = exc
        loaded = self._goldens[path]
        if isinstance(loaded, GoldenError):
            raise loaded
        return loaded
