"""Obtained files: what a failed variant produced, kept for diffing against the golden.

A failure message shows the worst elements; to look further a user needs the outputs
themselves. On a failed check numcheck writes the variant's outputs, under the golden's own
tensor names (``s<seed>/<output>``), to ``<folder>/<op>/<case>.<variant>.obtained.safetensors``,
with metadata naming the op, case, variant, seeds, device and the fingerprint of the inputs
(the same fingerprint the golden pins), so the file says what it was made from.

The default folder is ``.numcheck/obtained`` under the rootdir: outside the goldens (an
obtained file is never a golden) and ignored by git (a ``.gitignore`` holding ``*`` is
written into the folder when numcheck creates it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

#: Where obtained files go when ``--numcheck-obtained`` is not given, relative to the rootdir.
DEFAULT_FOLDER = Path(".numcheck") / "obtained"
SUFFIX = ".obtained.safetensors"


def obtained_path(folder: Path, op: str, case: str, variant: str) -> Path:
    """``<folder>/<op>/<case>.<variant>.obtained.safetensors`` (case ids are unique per op)."""
    return folder / op / f"{case}.{variant}{SUFFIX}"


def _make_ignored(folder: Path) -> None:
    """Create ``folder`` with a ``.gitignore`` of ``*``; a folder that exists is the user's
    and is left as it is."""
    if folder.exists():
        return
    folder.mkdir(parents=True)
    (folder / ".gitignore").write_text("# numcheck obtained files: never committed\n*\n")


def write_obtained(
    folder: Path,
    *,
    op: str,
    case: str,
    variant: str,
    device: str,
    outputs: Sequence[tuple[int, Mapping[str, torch.Tensor]]],
    fingerprints: Mapping[int, str],
    case_fingerprint: str,
    golden: str,
    reason: str,
) -> Path:
    """Write one failed check's outputs (per seed) and return the file's path.

    ``outputs`` pairs each seed with the variant's outputs; ``fingerprints`` the seed's input
    fingerprint; ``case_fingerprint`` the hash over all seeds that the golden's metadata
    holds as ``fingerprint``. Written to a temporary file and renamed, so a reader never sees
    half a file.
    """
    from safetensors.torch import save_file

    from numcheck.goldens.packing import seed_key

    path = obtained_path(folder, op, case, variant)
    _make_ignored(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {
        seed_key(seed, name): t.detach().to("cpu").contiguous()
        for seed, outs in outputs for name, t in outs.items()
    }
    meta: dict[str, Any] = {
        "numcheck": "obtained",
        "op": op,
        "case": case,
        "variant": variant,
        "device": device,
        "seeds": json.dumps([seed for seed, _ in outputs]),
        "input_fingerprints": json.dumps({str(s): fp for s, fp in fingerprints.items()}),
        "fingerprint": case_fingerprint,
        "golden": golden,
        "reason": reason,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    return path
