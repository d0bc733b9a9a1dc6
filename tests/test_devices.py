"""Device labels: one format for goldens, records, perf and calibration files."""

from __future__ import annotations

import platform

import pytest
import torch

from numcheck.devices import device_label, device_name


def test_cpu_is_named_cpu_everywhere() -> None:
    assert device_name("cpu") == "cpu"
    assert device_label("cpu") == "cpu"


def test_cpu_model_names_the_processor() -> None:
    assert device_name("cpu", cpu_model=True) == (
        platform.processor() or platform.machine() or "cpu")


def test_cuda_label_carries_the_gpu_name(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def name(index: int) -> str:
        asked.append(index)
        return f"GPU{index}"

    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert device_name("cuda") == "GPU3"
    assert device_name("cuda:1") == "GPU1"
    assert device_name("cuda:1", index=2) == "GPU2"
    assert device_label("cuda") == "cuda (GPU3)"
    assert device_label("cuda:0") == "cuda (GPU0)"
    assert asked == [3, 1, 2, 3, 0]
