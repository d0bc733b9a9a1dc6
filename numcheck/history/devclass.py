"""Device classes of records and reports: which kind of machine a number came from.

A device's class is the GPU's model with the vendor and the board's details dropped, or
``cpu`` (:func:`numcheck.devices.device_class` has the rule and its table). Runs are
grouped, compared and drawn per class; every record carries its device's name
(``device_name``), from which its class is read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from numcheck.devices import UNKNOWN, device_class

__all__ = ["UNKNOWN", "classes_of", "device_class", "environment_class", "record_class",
           "report_class", "sort_classes"]

if TYPE_CHECKING:
    from numcheck.report.records import Record, Report


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
