"""Devices: the one place that names the machine a number came from, and its class.

Goldens, reports, the perf record, the roofline peaks and calibration files all say which
machine a number came from; building that string in one place keeps their formats alike.
A GPU's **class** is its model (:func:`device_class`): the unit that speed thresholds and
the other settings measured on one GPU model are keyed by in case files, and that runs are
grouped and compared by. ``torch`` is imported inside the functions so the module stays
cheap to import.

``NUMCHECK_DEVICE_NAME`` (:data:`DEVICE_NAME_ENV`), when set, is the name numcheck gives the
run's device in place of the one torch reports, on any device: how numcheck's own tests
(and a user trying a case file) see what a run on another GPU model would do, on a CPU. It
changes which class's values a check is held to, never where it runs; every record and the
run header carry the name, so a run under it is never mistaken for one on that GPU.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Iterable
from functools import lru_cache

#: The environment variable that names the run's device in place of torch's name for it.
DEVICE_NAME_ENV = "NUMCHECK_DEVICE_NAME"
#: The command that measures a GPU model's settings (speed thresholds, determinism, batch
#: invariance) and writes them into the case files (docs/speed.md, "Your runner is not an H200").
ONBOARD = "python -m numcheck onboard"
#: The class of a device whose name is not known at all.
UNKNOWN = "unknown"
#: Device kinds: where a variant runs (``--numcheck-device``). ``cpu`` is a class too
#: (numcheck does not tell CPU models apart); ``cuda`` is every GPU model at once.
KINDS = ("cpu", "cuda")

#: GPU models a case file may key a setting by (their classes, as :func:`device_class`
#: names them): NVIDIA's data-centre and workstation GPUs from Volta on, its consumer GPUs
#: from Ampere on, AMD's Instinct GPUs (torch's ``cuda`` device over HIP). A model not here
#: is added by the ini key ``numcheck_gpu_models`` (:func:`set_gpu_models`), so a typo is an
#: error, not a threshold that never applies.
GPU_MODELS = frozenset({
    # NVIDIA data centre
    "V100", "T4", "A2", "A10", "A10G", "A16", "A30", "A40", "A100", "A800", "H20", "H100",
    "H800", "H200", "GH200", "L4", "L20", "L40", "L40S", "B100", "B200", "B300", "GB200",
    "GB300",
    # NVIDIA workstation and consumer
    "RTX-A4000", "RTX-A5000", "RTX-A6000", "RTX-3080", "RTX-3090", "RTX-4080", "RTX-4090",
    "RTX-5080", "RTX-5090", "GB10",
    # AMD Instinct
    "MI100", "MI210", "MI250", "MI250X", "MI300A", "MI300X", "MI325X", "MI350X", "MI355X",
})
_EXTRA_MODELS: set[str] = set()

_BRANDS = frozenset({"nvidia", "amd", "tesla", "geforce", "quadro", "instinct", "radeon",
                     "intel", "corporation"})
#: Words that describe the board, not the model: memory, form factor, memory kind.
_BOARD = re.compile(r"^(\d+(\.\d+)?\s*[gm]b|pcie|sxm\d*|hbm\d*e?|nvl\d*|oam|dgx|gddr\d*x?)$",
                    re.IGNORECASE)
_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")


def device_name(device: str, *, index: int | None = None, cpu_model: bool = False) -> str:
    """The name of the CUDA GPU (``index``, else the current device), or ``"cpu"``.

    ``device`` may carry an index (``"cuda:1"``); an explicit ``index`` wins over it. With
    ``cpu_model`` a CPU is named by its model (where the platform says it, else its
    architecture): timing records want to know which CPU the times came from.
    ``NUMCHECK_DEVICE_NAME``, when set, is the name on any device (module docstring).
    """
    given = os.environ.get(DEVICE_NAME_ENV, "").strip()
    if given:
        return given
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


@lru_cache(maxsize=256)
def device_class(name: str | None) -> str:
    """The class of a device name: ``cpu``, or the GPU's model.

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

    Rule: drop vendor and brand words (NVIDIA, AMD, Tesla, GeForce, Quadro, Instinct,
    Radeon); keep the model words up to the first word that only describes the board
    (memory size, ``PCIe``, ``SXM4``, ``HBM3``, ``NVL``), and in a word joined by ``-`` only
    its first part; a MIG slice is its own class (``-MIG``): it has a fraction of the GPU's
    units. Memory size and form factor change neither the kernels nor their rounding, so an
    H100 PCIe and an H100 SXM share a class; the drift rules still tell their device names
    apart. A class is safe as a folder name (letters, digits, ``.``, ``+``, ``-``).
    ``cuda`` (the kind alone, no GPU name known) stays ``cuda``; an empty name is
    :data:`UNKNOWN`.
    """
    if not name or not name.strip():
        return UNKNOWN
    text = name.strip()
    if text.lower() in KINDS:
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


def run_class(device: str) -> str:
    """The class of the run's ``device`` (``cpu``, ``cuda``, ``cuda:1``): ``cpu``, or its
    GPU's model (``NUMCHECK_DEVICE_NAME`` wins on either)."""
    return device_class(device_name(device))


def class_kind(cls: str) -> str:
    """The device kind a class runs as: ``cpu`` for the CPU, ``cuda`` for a GPU model."""
    return "cpu" if cls == "cpu" else "cuda"


def set_gpu_models(names: Iterable[str]) -> None:
    """Accept ``names`` as GPU models in case files beside :data:`GPU_MODELS` (the ini key
    ``numcheck_gpu_models``, set by each run: a run without it accepts none)."""
    _EXTRA_MODELS.clear()
    _EXTRA_MODELS.update(n.strip() for n in names if n.strip())


def gpu_models() -> frozenset[str]:
    """Every GPU model a case file may name: :data:`GPU_MODELS` and those added."""
    return GPU_MODELS | _EXTRA_MODELS


def class_key_problem(key: str) -> tuple[str, str] | None:
    """Why ``key`` is not a device class a case file may key a setting by (the problem
    and the fix), or None when it is one: ``cpu`` or a known GPU model (a MIG slice of one
    too). ``cuda``, the kind, is a problem here: callers accept it only where the case
    file says the value holds on every GPU model."""
    if key == "cpu" or key in gpu_models() or (
            key.endswith("-MIG") and key[:-4] in gpu_models()):
        return None
    if key.lower() in KINDS or key.lower() in ("gpu", "rocm", "hip"):
        return (f"'{key}' is a device kind, not a GPU model: a value measured on one GPU "
                "model does not hold on another",
                "key it by the GPU model it was measured on (H200 = ...), or, measured to hold "
                "on every GPU model, write cuda = ... with every_class = true in the same table")
    named = device_class(key)
    if named != key and (named in gpu_models() or named == "cpu"):
        return f"'{key}' is a device name, not its class", f"write {named}"
    near = [m for m in sorted(gpu_models()) if m.lower() == key.lower()]
    hint = f"write {near[0]}" if near else (
        "write the class of a GPU model (python -m numcheck onboard --class prints this "
        "machine's); a model numcheck does not list yet: add it to the ini key "
        "numcheck_gpu_models")
    return (f"'{key}' is not a device class numcheck knows (cpu, or a GPU model of "
            "numcheck.devices.GPU_MODELS: H100, H200, B200, MI300X...)", hint)
