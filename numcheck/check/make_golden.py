"""Making a golden: the op's FP32 reference run on every seed of a case, packed as a file holds it.

:func:`make_golden` runs the reference (:func:`numcheck.check.run.run_variant`) and packs
its outputs (:mod:`numcheck.goldens.packing`) with the metadata that pins how they were made.
Under the regen flag :func:`regenerate` stores them (:func:`numcheck.goldens.regen.store`);
the self-test and calibration use :func:`fresh_golden`: the same golden, in memory,
validated for its case like a stored one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import Case
from numcheck.check.run import CaseInputs, run_variant
from numcheck.devices import device_label
from numcheck.goldens.case_golden import CaseGolden, validate_for_case
from numcheck.goldens.files import Golden
from numcheck.goldens.packing import (
    FULL_LIMIT,
    SAMPLE_SIZE,
    SWEEP_FULL_LIMIT,
    SWEEP_SAMPLE_SIZE,
    pack_output,
    seed_key,
)
from numcheck.goldens.regen import RegenOutcome, store
from numcheck.inputs import to_device
from numcheck.ops.spec import OpSpec
from numcheck.precision import dtype_name

__all__ = ["fresh_golden", "make_golden", "regenerate", "write_golden"]


def make_golden(
    op: OpSpec, case: Case, device: str, inputs: CaseInputs
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Run the reference for every seed: the tensors and metadata of the case's golden."""
    reference = op.variants[op.reference]
    # A sweep's points: many goldens of one case, each kept small (goldens/packing.py).
    limit, sample = ((FULL_LIMIT, SAMPLE_SIZE) if case.sweep is None
                     else (SWEEP_FULL_LIMIT, SWEEP_SAMPLE_SIZE))
    tensors: dict[str, torch.Tensor] = {}
    outputs_meta: dict[str, Any] = {}
    for seed in case.seeds:
        cpu_inputs, _ = inputs.get(seed)
        out = run_variant(reference, op, to_device(cpu_inputs, device), case, device)
        for name, t in out.items():
            key = seed_key(seed, name)
            # Top-k checks need the golden score of any token a variant may pick.
            full = True if op.topk is not None and name == op.topk.scores else None
            tensors.update(pack_output(key, t, full=full, full_limit=limit, sample=sample))
            outputs_meta[key] = {"shape": list(t.shape), "dtype": dtype_name(t.dtype)}
    meta: dict[str, Any] = {
        "op": op.name,
        "case": case.id,
        "op_version": op.version,
        "fingerprint": inputs.fingerprint(),
        "device": device_label(device),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seeds": list(case.seeds),
        "outputs": outputs_meta,
        "params": dict(case.params),
        "reference": op.reference,
    }
    return tensors, meta


def fresh_golden(op: OpSpec, case: Case, device: str = "cpu") -> tuple[CaseGolden, CaseInputs]:
    """The case's golden made now, in memory, on ``device`` and validated for the case; with
    the inputs it came from."""
    inputs = CaseInputs(op, case)
    tensors, meta = make_golden(op, case, device, inputs)
    golden = Golden(Path(f"<fresh {case.op}/{case.id}>"), tensors, meta)
    return validate_for_case(golden, op, case, fingerprint=inputs.fingerprint(),
                             regen_hint=""), inputs


def write_golden(path: Path, op: OpSpec, case: Case, device: str, inputs: CaseInputs) -> bool:
    """Regenerate a golden; returns False (and writes nothing) when the stored one is equal,
    or within the reference's reproducibility tolerance (see :func:`regenerate`)."""
    return regenerate(path, op, case, device, inputs).written


def regenerate(
    path: Path, op: OpSpec, case: Case, device: str, inputs: CaseInputs
) -> RegenOutcome:
    """Run the reference and store it (:func:`numcheck.goldens.regen.store`): the outcome says
    whether the file changed and how (``created``, ``rewritten``, ``unchanged (within
    reproducibility tolerance, ...)``); a reference output with NaN/Inf the op does not allow
    raises :class:`numcheck.goldens.regen.GoldenRefused` and writes nothing."""
    tensors, meta = make_golden(op, case, device, inputs)
    return store(path, op, case, tensors, meta)
