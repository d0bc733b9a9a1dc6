"""What a check keeps for its readers beyond the verdict: plot data, a row note, and, on a
failure, the obtained file.

Called by the run's executor (:mod:`numcheck.execute.executor`) after
:func:`numcheck.check.run_check`; plain functions of the check's result, so they are tested
without pytest.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from numcheck.check.cpu_tf32 import tf32_cpu_note
from numcheck.check.plotdata import check_plots
from numcheck.goldens.obtained import write_obtained

if TYPE_CHECKING:
    from numcheck.check.result import CheckResult
    from numcheck.check.run import CaseInputs
    from numcheck.goldens.case_golden import CaseGolden
    from numcheck.ops.spec import OpSpec


def annotate(result: CheckResult, op: OpSpec, golden: CaseGolden, inputs: CaseInputs) -> None:
    """Fill ``result.plots`` (the record's histogram data) and add to ``result.note``."""
    case, variant = result.case, result.variant
    precision = op.variants[variant].precision
    result.plots = check_plots(op, precision, result.seeds, golden)
    note = tf32_cpu_note(op, case, variant, result.device, inputs, result.seeds)
    result.note = "; ".join(n for n in (result.note, note) if n) or None


def keep_failed(folder: Path, result: CheckResult, inputs: CaseInputs, *,
                golden: str) -> Path | None:
    """Write a failed check's outputs to its obtained file; None when it kept none."""
    outputs = [(s.seed, s.outputs) for s in result.seeds if s.outputs]
    if not outputs:
        return None
    top = result.worst()
    return write_obtained(
        folder, op=result.case.op, case=result.case.id, variant=result.variant,
        device=result.device, outputs=outputs,
        fingerprints={seed: inputs.get(seed)[1] for seed, _ in outputs},
        case_fingerprint=inputs.fingerprint(), golden=golden,
        reason="" if top is None else top.describe(),
    )
