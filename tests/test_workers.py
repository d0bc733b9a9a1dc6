"""numcheck.plugin.workers: xdist worker id -> GPU index, and the concurrent golden writes it implies."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from numcheck.cases import load_case_file
from numcheck.check.make_golden import write_golden
from numcheck.check.run import CaseInputs
from numcheck.goldens.files import GoldenMissing, load_golden
from numcheck.ops.registry import get_op
from numcheck.plugin.workers import gpu_index, is_worker, pin_worker_gpu, worker_count, worker_id


@pytest.mark.parametrize(
    ("worker", "count", "index"),
    [("gw0", 8, 0), ("gw3", 8, 3), ("gw8", 8, 0), ("gw9", 8, 1), ("gw5", 2, 1), ("gw1", 1, 0),
     (None, 8, None), ("gw0", 0, None)],
)
def test_gpu_index(worker: str | None, count: int, index: int | None) -> None:
    assert gpu_index(worker, count) == index


def test_gpu_index_refuses_unknown_worker_ids() -> None:
    with pytest.raises(ValueError, match="worker id 'master' is not gw<number>.*CUDA_VISIBLE"):
        gpu_index("master", 2)


def test_worker_identity_from_config() -> None:
    controller = SimpleNamespace(option=SimpleNamespace(numprocesses=4))
    worker = SimpleNamespace(workerinput={"workerid": "gw2", "workercount": 4})
    assert (worker_id(controller), is_worker(controller), worker_count(controller)) == (
        None, False, 4)
    assert (worker_id(worker), is_worker(worker), worker_count(worker)) == ("gw2", True, 4)
    assert pin_worker_gpu(controller) is None  # nothing to pin outside a worker


def test_pin_respects_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMCHECK_NO_PIN", "1")
    assert pin_worker_gpu(SimpleNamespace(workerinput={"workerid": "gw1"})) is None


def test_concurrent_regeneration_leaves_one_valid_golden(tmp_path: Path) -> None:
    """What two xdist workers regenerating one case do: the reader never sees half a file."""
    (tmp_path / "indexer.toml").write_text(
        '[tiny]\nop = "indexer"\n'
        "shape = { batch = 2, heads = 4, head_dim = 32, max_context = 128, index_topk = 16 }\n"
    )
    case = load_case_file(tmp_path / "indexer.toml")[0]
    op = get_op("indexer")
    path = tmp_path / "goldens" / "tiny.safetensors"
    errors: list[BaseException] = []
    loads = []

    def writer() -> None:
        try:
            inputs = CaseInputs(op, case)
            for _ in range(4):
                path.unlink(missing_ok=True)  # force a real write every time
                write_golden(path, op, case, "cpu", inputs)
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    def reader() -> None:
        for _ in range(40):
            if path.exists():
                try:
                    loads.append(load_golden(path, case="tiny", regen_hint=""))
                except (FileNotFoundError, GoldenMissing):
                    pass  # unlinked by a writer between exists() and open: not a torn read
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)

    threads = [threading.Thread(target=f) for f in (writer, writer, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    final = load_golden(path, case="tiny", regen_hint="")
    assert final.meta["case"] == "tiny"
    assert [p.name for p in path.parent.iterdir()] == ["tiny.safetensors"]


def test_gpu_sharing_counts_workers_per_gpu() -> None:
    from numcheck.perf.sections import gpu_sharing, sharing_line

    assert gpu_sharing(0, 1) == {0: 1}
    assert gpu_sharing(4, 1) == {0: 4}
    assert gpu_sharing(3, 2) == {0: 2, 1: 1}
    assert gpu_sharing(4, 0) == {}
    assert sharing_line({0: 4}) == (
        "4 workers on cuda:0; timed sections take a per-GPU lock (numerics run in parallel "
        "between them)")
    assert sharing_line({0: 1, 1: 1}).endswith("one process per GPU")
