"""Device classes: which kind of machine a number came from, as one short word.

Runs are grouped, compared and drawn per device class: ``cpu``, or the GPU's model with the
vendor and the board's details dropped. The class comes from the GPU name torch reports
(``torch.cuda.get_device_name``), which every record carries as ``device_name``:

=================================  ============
device name                        class
=================================  ============
``cpu``                            ``cpu``
``NVIDIA H200``                    ``H200``
``NVIDIA H100 80GB HBM3``          ``H100``
``NVIDIA H100 PCIe``               ``H100``
``NVIDIA A100-SXM4-80GB``          ``A100``
``NVIDIA GeForce RTX 4090``        ``RTX-4090``
``AMD Instinct MI300X``            ``MI300X``
``NVIDIA H100 80GB HBM3 MIG 1g..`` ``H100-MIG``
=================================  ============

Rule: drop vendor and brand words (NVIDIA, AMD, Tesla, GeForce, Quadro, Instinct, Radeon);
keep the model words up to the first word that only describes the board (memory size,
``PCIe``, ``SXM4``, ``HBM3``, ``NVL``), and in a word joined by ``-`` only its first part;
a MIG slice is its own class (``-MIG``): it has a fraction of the GPU's units. Memory size
and form factor change neither the kernels nor their rounding, so an H100 PCIe and an H100
SXM share a class; the drift rules still tell their device names apart. A class is safe as
a folder name (letters, digits, ``.``, ``+``, ``-``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from numcheck.report.records import Record, Report

#: The class of a record whose device is not known at all.
UNKNOWN = "unknown"

_BRANDS = frozenset({"nvidia", "amd", "tesla", "geforce", "quadro", "instinct", "radeon",
                     "intel", "corporation"})
#: Words that describe the board, not the model: memory, form factor, memory kind.
_BOARD = re.compile(r"^(\d+(\.\d+)?\s*[gm]b|pcie|sxm\d*|hbm\d*e?|nvl\d*|oam|dgx|gddr\d*x?)$",
                    re.IGNORECASE)
_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")


@lru_cache(maxsize=256)
def device_class(name: str | None) -> str:
    """The class of a device name (the table in the module docstring).

    ``cpu`` stays ``cpu``; ``cuda`` (the kind alone, no GPU name known) stays ``cuda``;
    an empty name is :data:`UNKNOWN`.
    """
    if not name or not name.strip():
        return UNKNOWN
    text = name.strip()
    if text.lower() in ("cpu", "cuda"):
        return text.lower()
    words = [w for w in re.split(r"[\s_]+", text) if w]
    mig = any(w.upper() == "MIG" for w in words)
    kept: list[str] = []
    for word in words:
        if word.lower() in _BRANDS:
            continue
        head, dash, _ = word.partition("-")
        if word.upper() == "MIG" or _BOARD.match(head):
            break
        kept.append(head)
        if dash:  # "A100-SXM4-80GB": what follows the dash describes the board
            break
    if not kept:  # only brand or board words: keep the name as it is
        kept = words
    out = _UNSAFE.sub("-", "-".join(kept)).strip("-.") or UNKNOWN
    return f"{out}-MIG" if mig else out


def environment_class(environment: Mapping[str, Any]) -> str | None:
    """The class a report's environment names, when it names exactly one: its one GPU
    name, or ``cpu`` for a CPU run. None when it lists several GPUs (a mixed machine)."""
    names = list(environment.get("device_names") or [])
    classes = {device_class(n) for n in names}
    if len(classes) == 1:
        return classes.pop()
    if len(classes) > 1:
        return None
    kind = environment.get("device")
    return device_class(str(kind)) if kind else None


def record_class(record: Record, fallback: str | None) -> str:
    """The class of one record: from its device name, else ``fallback`` (the report's
    class: a skipped check carries no device name), else its device kind."""
    if record.device_name:
        return device_class(record.device_name)
    if fallback:
        return fallback
    return device_class(record.device) if record.device else UNKNOWN


def classes_of(records: Iterable[Record], environment: Mapping[str, Any]) -> list[str]:
    """Every class the records ran on, sorted (``cpu`` first)."""
    fallback = environment_class(environment)
    found = {record_class(r, fallback) for r in records}
    if not found:
        found = {fallback or UNKNOWN}
    return sort_classes(found)


def report_class(report: Report) -> str:
    """The class of a whole run: its one class, or its classes joined by ``+`` (a machine
    with two GPU models, one xdist worker on each)."""
    return "+".join(classes_of(report.records, report.environment))


def sort_classes(classes: Iterable[str]) -> list[str]:
    """``cpu`` first, then the GPUs by name, ``unknown`` last."""
    return sorted(set(classes), key=lambda c: (c != "cpu", c == UNKNOWN, c.lower()))
