"""Device labels: the one place that turns ``"cpu"`` / ``"cuda"`` into a name for people.

Goldens, reports, the perf record, the roofline peaks and calibration files all say which
machine a number came from; building that string in one place keeps their formats alike.
``torch`` is imported inside the functions so the module stays cheap to import.
"""

from __future__ import annotations

import platform


def device_name(device: str, *, index: int | None = None, cpu_model: bool = False) -> str:
    """The name of the CUDA GPU (``index``, else the current device), or ``"cpu"``.

    ``device`` may carry an index (``"cuda:1"``); an explicit ``index`` wins over it. With
    ``cpu_model`` a CPU is named by its model (where the platform says it, else its
    architecture): timing records want to know which CPU the times came from.
    """
    kind, _, suffix = device.partition(":")
    if kind != "cuda":
        return (platform.processor() or platform.machine() or "cpu") if cpu_model else "cpu"
    import torch

    if index is None:
        index = int(suffix) if suffix else torch.cuda.current_device()
    return torch.cuda.get_device_name(index)


def device_label(device: str) -> str:
    """``"cpu"`` or ``"cuda (<GPU name>)"``: the device kind and, on a GPU, which one.

    The form stored in a golden's metadata, where the kind alone would hide the GPU model.
    """
    kind = device.partition(":")[0]
    return "cpu" if kind != "cuda" else f"cuda ({device_name(device)})"

