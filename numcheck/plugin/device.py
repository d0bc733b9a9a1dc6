"""The device a ``--numcheck`` run checks on: chosen once, pinned per xdist worker, named.

``--numcheck-device`` wins over the ``numcheck_device`` ini key; ``auto`` is CUDA when torch
sees a GPU, else the CPU. On CUDA each xdist worker is pinned to its own GPU before any CUDA
work (:func:`numcheck.plugin.workers.pin_worker_gpu`). The id in test names and records stays
``cpu`` or ``cuda``; the device's name (the GPU's) is asked for once, when a record needs it.
"""

from __future__ import annotations

import pytest
import torch

from numcheck.devices import device_name
from numcheck.plugin import options
from numcheck.plugin.workers import pin_worker_gpu


def resolve_device(requested: str) -> str:
    """``auto`` -> cuda when torch sees a GPU, else cpu; ``cuda`` without one is an error."""
    has_cuda = torch.cuda.is_available()
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    if requested == "cuda" and not has_cuda:
        build = torch.version.cuda or "cpu-only"
        raise pytest.UsageError(
            f"{options.DEVICE_OPTION} cuda: torch {torch.__version__} (CUDA build: {build}) "
            f"sees no CUDA device. Fix: run on a GPU machine, or use "
            f"{options.DEVICE_OPTION} auto to fall back to the CPU"
        )
    return requested


def requested_device(config: pytest.Config) -> str:
    """The device asked for: ``--numcheck-device``, else the ``numcheck_device`` ini key."""
    given = config.getoption(options.DEVICE_OPTION)
    if given is not None:
        return str(given)
    value = str(config.getini(options.DEVICE_INI)).strip() or "auto"
    if value not in options.DEVICES:
        raise pytest.UsageError(
            f"ini key {options.DEVICE_INI} = {value!r} in {config.inipath or 'the ini file'}: "
            f"not a device. Fix: set it to one of {', '.join(options.DEVICES)}"
        )
    return value


class RunDevice:
    """The run's device (``cpu`` or ``cuda``), this process's GPU index, and its name."""

    def __init__(self, config: pytest.Config) -> None:
        self.kind = resolve_device(requested_device(config))
        #: This worker's GPU, when it was pinned (None on the CPU, serially, or unpinned).
        self.index: int | None = None
        if self.kind == "cuda":
            # Before any CUDA work of this process: each xdist worker gets its own GPU.
            self.index = pin_worker_gpu(config)
        self._name: str | None = None

    def name(self) -> str:
        """``cpu``, or the CUDA device's name (of this worker's GPU)."""
        if self._name is None:
            if self.kind == "cuda":
                self.index = torch.cuda.current_device()
            self._name = device_name(self.kind, index=self.index)
        return self._name
