"""Calibration's payloads (numcheck.calibrate.payloads): typed in the code, plain data on the
two crossings (an xdist test report, a --numcheck-calibrate-json file), and the plain form is
the file format as it was (key for key, in order), so files written before still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numcheck.calibrate import Worst
from numcheck.calibrate.payloads import (
    RUN_FORMAT,
    CheckRef,
    NumericsPayload,
    SpeedPayload,
    SpeedRun,
    payload_from_data,
    payload_to_data,
    read_run,
    save_run,
)
from numcheck.numerics.calibration_record import CalibrationRecord

REF = CheckRef("dot", "c", "cases/dot.toml", "/x/cases/dot.toml", "cpu",
               "cases/dot.toml::c::bf16[cpu]")
RECORD = CalibrationRecord("pytest --numcheck --numcheck-calibrate-write", "2026-12-03",
                           "2.13", ("bf16", "gemm_bf16_out"), ("cpu",), (0,), 20, 1000)


def own_payload() -> NumericsPayload:
    return NumericsPayload(
        check=REF, variant="bf16", own_check=True, seeds=(0, 1000), fresh=1, first_seed=1000,
        k=0, topk_output=None, gated={"y": ("calc_diff", "rel_fro")}, reference="fp32",
        reference_device="cpu", budget_like=None, precision="bf16",
        output_precision={"y": "bf16"}, expect=(), pool=("bf16", "gemm_bf16_out"),
        pool_from="record", pool_missing=(), limits={"y": {"rel_fro": 1e-2}}, record=RECORD,
        table={"y": {"rel_fro": Worst(3e-3, 1000, "bf16"), "calc_diff": Worst(4e-6, 0, "bf16")}})


#: The plain form of :func:`own_payload`, as the file format has it (keys in its order).
OWN_DATA: dict[str, Any] = {
    "op": "dot", "case": "c", "source": "cases/dot.toml", "path": "/x/cases/dot.toml",
    "device": "cpu", "nodeid": "cases/dot.toml::c::bf16[cpu]", "kind": "numerics",
    "seeds": [0, 1000], "fresh": 1, "first_seed": 1000, "k": 0, "topk_output": None,
    "gated": {"y": ["calc_diff", "rel_fro"]}, "reference": "fp32", "reference_device": "cpu",
    "budget_like": None, "precision": "bf16", "output_precision": {"y": "bf16"},
    "origins": {}, "variant": "bf16", "runs": True, "expect": [], "pool": ["bf16", "gemm_bf16_out"],
    "pool_from": "record", "pool_missing": [], "limits": {"y": {"rel_fro": 1e-2}},
    "record": RECORD.as_table(),
    "table": {"y": {"rel_fro": [3e-3, 1000, "bf16"], "calc_diff": [4e-6, 0, "bf16"]}},
}


def test_a_numerics_payload_is_the_file_format_key_for_key() -> None:
    data = payload_to_data(own_payload())
    assert list(data) == list(OWN_DATA) and data == OWN_DATA
    assert payload_from_data(json.loads(json.dumps(data))) == own_payload()


def test_a_quantized_payload_carries_its_sims_row_and_removed_members() -> None:
    """Issue 44's keys: the simulated reference's row of the variant's declared sums (the
    class bound calibration judges it by) and the recorded members its pool removes; both
    round-trip, and neither is written where it says nothing (the format as it was)."""
    from dataclasses import replace

    fp8 = replace(own_payload(), sims=("promoted sums", {"sim_rel_fro": 0.016}),
                  pool_removed=("gemm_old",))
    data = payload_to_data(fp8)
    assert data["sims"] == {"name": "promoted sums", "row": {"sim_rel_fro": 0.016}}
    assert data["pool_removed"] == ["gemm_old"]
    assert payload_from_data(json.loads(json.dumps(data))) == fp8
    assert "sims" not in OWN_DATA and "pool_removed" not in OWN_DATA


def test_a_pool_members_payload_carries_only_its_table() -> None:
    """A member measured on the selected check's behalf: no pool, limits or record keys."""
    from dataclasses import replace

    member = replace(own_payload(), variant="gemm_bf16_out", own_check=False, pool=(),
                     pool_from=None, limits={}, record=None,
                     table={"y": {"rel_fro": Worst(2e-3, 0, "gemm_bf16_out")}})
    data = payload_to_data(member)
    assert list(data)[-4:] == ["variant", "runs", "expect", "table"]
    assert data["runs"] is False and "pool" not in data and "record" not in data
    assert payload_from_data(data) == member


def test_a_speed_payload_round_trips() -> None:
    speed = SpeedPayload(check=REF, variant="bf16", runs=(SpeedRun(1.2, 1.1, 1.3),),
                         expected_fail=False, current=1.05)
    data = payload_to_data(speed)
    assert data == {"op": "dot", "case": "c", "source": "cases/dot.toml",
                    "path": "/x/cases/dot.toml", "device": "cpu",
                    "nodeid": "cases/dot.toml::c::bf16[cpu]", "kind": "speed", "variant": "bf16",
                    "runs": [[1.2, 1.1, 1.3]], "expected_fail": False, "current": 1.05}
    assert payload_from_data(json.loads(json.dumps(data))) == speed


def test_keys_an_older_file_lacks_are_optional() -> None:
    """precision, output_precision, limits, record and the pool came after the first
    format-1 files: a payload without them still loads, as "not said"."""
    older = {k: v for k, v in OWN_DATA.items() if k not in (
        "precision", "output_precision", "pool", "pool_from", "pool_missing", "limits",
        "record")}
    payload = payload_from_data(older)
    assert isinstance(payload, NumericsPayload)
    assert (payload.precision, payload.pool, payload.limits, payload.record) == ("", (), {},
                                                                                 None)


@pytest.mark.parametrize("broken", [
    pytest.param({k: v for k, v in OWN_DATA.items() if k != "table"}, id="no-table"),
    pytest.param({**OWN_DATA, "kind": "timing"}, id="unknown-kind"),
    pytest.param({**OWN_DATA, "table": {"y": {"rel_fro": [3e-3]}}}, id="short-worst"),
    pytest.param({**OWN_DATA, "gated": ["y"]}, id="gated-not-a-table"),
])
def test_a_payload_that_is_not_one_is_refused(broken: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a calibration payload|neither 'numerics'"):
        payload_from_data(broken)


def test_a_run_saved_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "out" / "run.json"
    speed = SpeedPayload(check=REF, variant="bf16", runs=(SpeedRun(1.2, 1.1, 1.3),),
                         expected_fail=True, current=None)
    save_run(path, [own_payload(), speed], torch_version="2.13.0+cpu")
    data = json.loads(path.read_text())
    assert (data["numcheck_calibration"], data["torch"], data["devices"]) == (
        RUN_FORMAT, "2.13.0+cpu", ["cpu"])
    assert read_run(path) == [own_payload(), speed]
    path.write_text(json.dumps({**data, "payloads": [{"kind": "numerics"}]}))
    with pytest.raises(ValueError, match="not a calibration payload"):
        read_run(path)
    path.write_text(json.dumps({**data, "numcheck_calibration": 2}))
    with pytest.raises(ValueError, match="not a numcheck calibration file"):
        read_run(path)
