"""One-time preparation (numcheck/prepare.py) in the core, without pytest's plugin: what it
makes, when it runs, what it may not do, and every place that calls a variant honouring it.
The plugin's side (casts table, explain, report, timing) is in test_prepare_plugin.py."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from numcheck.cases import Case, load_case_file
from numcheck.check import run_check
from numcheck.check.cpu_tf32 import NOTE
from numcheck.check.make_golden import fresh_golden
from numcheck.check.overhead import audit_overhead
from numcheck.check.perf import measure_perf
from numcheck.check.result import CheckResult
from numcheck.check.run import CaseInputs, run_variant
from numcheck.inputs import to_device
from numcheck.ops import registry
from numcheck.ops.registry import RegistrationError, Variant, get_op
from numcheck.ops.spec import VariantError
from numcheck.overhead import limits
from numcheck.perf import timing
from numcheck.perf.noise import reset_machine_noise
from numcheck.perf.timing import TimerRequest
from numcheck.prepare import Preparations, prepare, with_preparation
from numcheck.report.htmlpage import render_html
from numcheck.report.records import Report, record_from_dict, record_from_result, record_to_dict
from numcheck.report.render import Commands, failure_message
from tests import prepared_variants
from tests.faketimer import FakePairTimer

TINY = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
seeds = [0, 1]
variants = [{variants}]
"""


def tiny(tmp_path: Path, variants: str = '"prepared_bf16"') -> Case:
    path = tmp_path / "mhc.toml"
    path.write_text(TINY.format(variants=variants))
    (case,) = load_case_file(path)
    return case


@pytest.fixture(autouse=True)
def _variants() -> None:
    prepared_variants.register_all()  # the registry is isolated per test (conftest.py)
    prepared_variants.PREPARE_CALLS.clear()


def _inputs(case: Case, seed: int = 0) -> dict[str, torch.Tensor]:
    return get_op("mhc_pre").make_inputs(case.params, seed)


# -- what a preparation makes ----------------------------------------------------------


def test_prepare_replaces_an_input_by_name_and_records_its_own_ledger(tmp_path: Path) -> None:
    case = tiny(tmp_path)
    inputs = _inputs(case)
    made = prepare(get_op("mhc_pre").variants["prepared_bf16"], inputs, case.params, "cpu")
    assert made is not None
    call = made.call_inputs(inputs)
    assert set(call) == set(inputs)  # same names: hc_fn replaced, nothing added
    assert call["hc_fn"].dtype == torch.bfloat16 and call["hc_fn"].shape == (256, 24)
    assert call["x"] is inputs["x"]
    assert made.replaced == {"hc_fn": (torch.float32, (24, 256))}
    assert [(e.kind, e.conversion, e.input) for e in made.ledger.entries] == [
        ("copy", "fp32 copy", "hc_fn"), ("cast", "fp32 -> bf16", "hc_fn")]
    assert made.summary().startswith(
        "prepared once: hc_fn bf16 [256, 24] (was fp32 [24, 256]), 12.3 kB held; 1 cast, "
        "1 copy, 86.0 kB moved (fp32 copy of [256, 24] at ")
    assert made.summary().endswith("; not in the per-call ledger, not timed")
    # A new name is added beside the inputs.
    added = Variant("added", prepared_variants.projection_kernel, "bf16",
                    prepare=lambda i, p: {"hc_fn_t": i["hc_fn"].t()})
    extra = prepare(added, inputs, case.params, "cpu")
    assert extra is not None and set(extra.call_inputs(inputs)) == {*inputs, "hc_fn_t"}
    assert extra.replaced == {} and "hc_fn_t fp32 [256, 24] (new)" in extra.summary()
    assert prepare(get_op("mhc_pre").variants["bf16"], inputs, case.params, "cpu") is None


def _fails(tmp_path: Path, fn: object) -> str:
    case = tiny(tmp_path)
    variant = Variant("bad", prepared_variants.projection_kernel, "bf16",
                      prepare=fn)  # type: ignore[arg-type]
    with pytest.raises(VariantError) as caught:
        run_variant(variant, get_op("mhc_pre"), _inputs(case), case, "cpu")
    return str(caught.value)


def _raises(inputs: object, p: object) -> dict[str, torch.Tensor]:
    raise RuntimeError("no quantizer for this shape")


def _in_place(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
    inputs["hc_fn"].mul_(2)
    return {}


def test_a_bad_preparation_is_a_variant_error_naming_the_preparation(tmp_path: Path) -> None:
    line = _raises.__code__.co_firstlineno + 1  # the raise, named (issue 44)
    assert re.fullmatch(
        rf"variant 'bad': its preparation \(_raises\) raised RuntimeError at \S*"
        rf"test_prepare\.py:{line} \(_raises\): no quantizer for this shape",
        _fails(tmp_path, _raises))
    assert "returned list; expected a dict of tensors by name" in _fails(
        tmp_path, lambda i, p: [i["hc_fn"]])
    assert "returned 'scale': float; expected a dict of tensors" in _fails(
        tmp_path, lambda i, p: {"scale": 1.0})
    assert "'hc_fn' is on meta, expected cpu" in _fails(
        tmp_path, lambda i, p: {"hc_fn": i["hc_fn"].to("meta")})
    assert _fails(tmp_path, _in_place) == (
        "variant 'bad': its preparation (_in_place) wrote into input 'hc_fn' in place; the "
        "op's inputs are shared by every variant of the case. Fix: return a new tensor under "
        "that name instead")


def test_registration_checks_prepare() -> None:
    call = prepared_variants.projection_kernel
    with pytest.raises(RegistrationError) as not_callable:
        not_a_function = Variant("p1", call, "bf16", prepare=3)  # type: ignore[arg-type]
        registry.add_variant("mhc_pre", not_a_function, origin="a test")
    assert str(not_callable.value) == (
        "numcheck: op 'mhc_pre' (from a test): variant 'p1': prepare is int, not a function. "
        "Fix: pass a function called as prepare(inputs, params)")

    def load(inputs: object) -> dict[str, torch.Tensor]:
        return {}

    with pytest.raises(RegistrationError) as one_argument:
        registry.add_variant("mhc_pre", Variant("p2", call, "bf16", prepare=load),
                             origin="a test")
    assert str(one_argument.value) == (
        "numcheck: op 'mhc_pre' (from a test): variant 'p2': prepare: load(inputs) cannot be "
        "called as load(inputs, params) (too many positional arguments). Fix: define it as "
        "def load(inputs, params): ...")


# -- numerics: preparation and call checked together ------------------------------------


def _e4m3_weight(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
    """A preparation that quantizes the weight to e4m3 (then widens it): far coarser than
    the bf16 budget allows."""
    w = inputs["hc_fn"].t().contiguous()
    scale = w.abs().amax() / 448
    return {"hc_fn": ((w / scale).to(torch.float8_e4m3fn).float() * scale).bfloat16()}


def _checked(tmp_path: Path, *variants: str, gates: tuple[str, ...] = ()) -> list[CheckResult]:
    """Each of ``variants`` checked on the tiny case against its fresh golden, with
    ``coarse_prepare`` (a preparation to e4m3: :func:`_e4m3_weight`) registered."""
    registry.set_variant("mhc_pre", Variant("coarse_prepare", prepared_variants.projection_kernel,
                                            "bf16", prepare=_e4m3_weight))
    case = tiny(tmp_path, ", ".join(f'"{v}"' for v in variants))
    op = get_op("mhc_pre")
    golden, inputs = fresh_golden(op, case)
    return [run_check(op, case, v, "cpu", inputs, golden, gates=gates) for v in variants]


def test_a_typed_result_travels_whole_through_torch_save(tmp_path: Path) -> None:
    """A check runs in a worker process, which sends its result as torch.save's bytes
    (numcheck/check/worker.py): every typed part (the speed gate's, the ledger, the
    preparation, the invariance report, the plot data) comes back and makes the same
    record, and a preparation's tensors travel as their shapes and dtypes, not their data."""
    import io

    from numcheck.check.extras import annotate

    path = tmp_path / "mhc.toml"
    path.write_text(TINY.format(variants='"prepared_bf16"') + "deterministic = true\n")
    (case,) = load_case_file(path)
    op = get_op("mhc_pre")
    golden, inputs = fresh_golden(op, case)
    with timing.override(lambda request: FakePairTimer(1.0)):
        result = run_check(op, case, "prepared_bf16", "cpu", inputs, golden, keep_outputs=True,
                           gates={"casts", "perf", "determinism"})
    annotate(result, op, golden, inputs)
    for seed in result.seeds:  # as the worker does: written to the obtained file already
        seed.outputs = None
    buffer = io.BytesIO()
    torch.save(result, buffer)
    back = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert None not in (back.perf, back.overhead, back.prepared, back.invariance, back.plots)
    # (as JSON: a metric not measured is NaN, which equals nothing)
    assert record_to_dict(record_from_result(back)) == record_to_dict(record_from_result(result))
    assert back.prepared is not None and back.prepared.tensors["hc_fn"].is_meta
    assert back.prepared.bytes_held == result.prepared.bytes_held  # type: ignore[union-attr]


def test_the_numerics_judge_what_the_preparation_did(tmp_path: Path) -> None:
    good, bad = _checked(tmp_path, "prepared_bf16", "coarse_prepare")
    assert good.passed
    assert {v.key for v in bad.violations} >= {"mixes.rel_fro", "mixes.max_err_ratio"}
    assert bad.localization  # a failure of a prepared variant is localized like any other


def test_a_check_prepares_once_per_seed_whatever_gates_run(tmp_path: Path) -> None:
    case = tiny(tmp_path)
    op = get_op("mhc_pre")
    golden, inputs = fresh_golden(op, case)
    with timing.override(lambda request: FakePairTimer(1.0)):
        result = run_check(op, case, "prepared_bf16", "cpu", inputs, golden,
                           gates={"casts", "perf"})
    assert result.passed, result.violations
    assert len(prepared_variants.PREPARE_CALLS) == 2  # seeds 0 and 1; perf and casts reuse 0's
    assert result.prepared is not None and result.prepared.tensors["hc_fn"].dtype == torch.bfloat16
    assert result.overhead is not None and result.overhead.prepared is not None
    # The per-call ledger holds the call only: no copy of hc_fn.
    assert "hc_fn" not in result.overhead.ledger.input_passes()
    # The record's two ledgers list their entries alike (docs/report.md).
    record = record_from_result(result)
    assert record.casts is not None and record.casts["entries"]
    assert record.prepared is not None and record.prepared["tensors"]["hc_fn"]["dtype"] == "bf16"
    assert record.prepared["entries"][0].keys() == record.casts["entries"][0].keys()
    assert record.prepared["entries"][0]["op"] == "clone"


def test_the_per_call_ledger_names_prepared_tensors_as_inputs(tmp_path: Path) -> None:
    case = tiny(tmp_path)
    op = get_op("mhc_pre")
    report, found = audit_overhead(op, case, "copies_prepared", "cpu", _inputs(case),
                                        gates={"casts"})
    # Two clones of the prepared bf16 hc_fn: two passes over that input, not over nothing.
    assert report.ledger.input_passes()["hc_fn"] == 2.0
    assert [v.key for v in found] == ["casts.input_copies"]
    assert report.prepared is not None and len(report.prepared.ledger.entries) == 2


def test_the_kernel_audit_profiles_the_call_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiled: list[int] = []

    def fake_profile(fn: object, **kwargs: object) -> None:
        before = len(prepared_variants.PREPARE_CALLS)
        fn()  # type: ignore[operator]
        profiled.append(len(prepared_variants.PREPARE_CALLS) - before)

    monkeypatch.setattr(limits, "profile_kernels", fake_profile)
    case = tiny(tmp_path)
    audit_overhead(get_op("mhc_pre"), case, "prepared_bf16", "cpu", _inputs(case),
                        gates=set(), kernels=True)
    assert profiled == [0] and prepared_variants.PREPARE_CALLS == ["prepare"]


def test_timing_starts_after_the_preparation(tmp_path: Path) -> None:
    case = tiny(tmp_path)
    op = get_op("mhc_pre")
    timed: list[int] = []

    def make(request: TimerRequest) -> FakePairTimer:
        before = len(prepared_variants.PREPARE_CALLS)
        out = request.variant()  # the timed function: runs on the prepared weight
        assert isinstance(out, dict) and set(out) == set(op.outputs)
        timed.append(len(prepared_variants.PREPARE_CALLS) - before)
        return FakePairTimer(1.5)

    reset_machine_noise()  # this process's first timed check: the A/A timer is made too
    with timing.override(make):
        perf = measure_perf(op, case, "prepared_bf16", "cpu", _inputs(case))
    assert timed == [0, 0]  # the A/A noise timer, then the pair: neither prepares
    assert prepared_variants.PREPARE_CALLS == ["prepare"]
    assert perf.speedup.median > 1


# -- every other caller of a variant ---------------------------------------------------


def _prepared_form(variant: Variant, name: str = "w") -> Variant:
    """``variant`` with its hc_fn handed over by a preparation under another name: the same
    numbers, but the call fails unless its preparation ran."""
    fn = variant.fn

    def call(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
        rest = {k: v for k, v in inputs.items() if k != "hc_fn"}
        return fn({**rest, "hc_fn": inputs[name]}, p)  # type: ignore[arg-type]

    return replace(variant, fn=call, prepare=lambda i, p: {name: i["hc_fn"].clone()})


def _x_read_thrice(variant: Variant, name: str) -> Variant:
    """``variant`` on x cloned twice (three passes over x with its own upcast)."""
    fn = variant.fn

    def call(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
        return fn({**inputs, "x": inputs["x"].clone().clone()}, p)  # type: ignore[arg-type]

    return replace(variant, name=name, fn=call)


def test_the_reference_passes_are_counted_after_its_preparation(tmp_path: Path) -> None:
    """A variant over its static input_copies limit is weighed against the op's reference,
    which runs as every variant runs: after its one-time preparation (it raised KeyError
    on its prepared name before). The passes are remembered per reference: another
    reference registered under the op's name is measured anew."""
    fp32 = get_op("mhc_pre").variants["fp32"]
    registry.set_variant("mhc_pre", _x_read_thrice(fp32, "x_thrice"))
    registry.set_variant("mhc_pre", _prepared_form(fp32))
    case = tiny(tmp_path, '"x_thrice"')
    report, found = audit_overhead(get_op("mhc_pre"), case, "x_thrice", "cpu",
                                        _inputs(case), gates={"casts"})
    assert report.reference_passes == {"x": 1.0}  # the call's upcast; w, hc_fn: no copy
    (v,) = [v for v in found if v.key == "casts.input_copies"]
    assert (v.value, v.limit) == (3.0, 1.0)
    # A reference that reads x three times sets the limit for this variant to 3.
    registry.set_variant("mhc_pre", _prepared_form(_x_read_thrice(fp32, "fp32")))
    report, found = audit_overhead(get_op("mhc_pre"), case, "x_thrice", "cpu",
                                        _inputs(case), gates={"casts"})
    assert report.reference_passes == {"x": 3.0}
    assert [v.key for v in found if v.key == "casts.input_copies"] == []


def test_a_per_input_limit_may_name_a_tensor_the_preparation_adds(tmp_path: Path) -> None:
    """The per-call ledger names a prepared tensor of a new name as an input, so a case may
    give it a limit of its own; a name neither the op nor the preparation has is an error."""
    bf16 = get_op("mhc_pre").variants["bf16"]
    twice = _prepared_form(bf16)
    call = twice.fn
    registry.set_variant("mhc_pre", replace(
        twice, name="w_twice", fn=lambda i, p: call({**i, "w": i["w"].clone().clone()}, p)))
    path = tmp_path / "mhc.toml"
    # w: cloned twice, then the bf16 path's own cast of the second clone.
    for limit, expected in (("w = 3", []), ("w = 2", ["casts.input_copies"])):
        path.write_text(TINY.format(variants='"w_twice"')
                        + f"[tiny-mhc.overhead.w_twice]\nmax_input_copies = {{ {limit} }}\n")
        (case,) = load_case_file(path)
        report, found = audit_overhead(get_op("mhc_pre"), case, "w_twice", "cpu",
                                            _inputs(case), gates={"casts"})
        assert report.ledger.input_passes()["w"] == 3.0
        assert [v.key for v in found] == expected, limit
    path.write_text(TINY.format(variants='"w_twice"')
                    + "[tiny-mhc.overhead.w_twice]\nmax_input_copies = { ww = 2 }\n")
    (case,) = load_case_file(path)
    with pytest.raises(ValueError, match="'ww' is not an input of op 'mhc_pre'. Fix: use one "
                       "of: x, hc_fn, hc_scale, hc_base, w"):
        audit_overhead(get_op("mhc_pre"), case, "w_twice", "cpu", _inputs(case),
                            gates={"casts"})


def test_golden_envelope_and_tf32_note_run_prepared_variants(tmp_path: Path) -> None:
    op = get_op("mhc_pre")
    # The reference and the bf16 rounding reference, each with a preparation.
    registry.set_variant("mhc_pre", _prepared_form(op.variants["fp32"]))
    registry.set_variant("mhc_pre", _prepared_form(op.variants["bf16"]))
    op = get_op("mhc_pre")
    case = tiny(tmp_path, '"bf16", "bf16_roundtrip", "tf32"')
    golden, inputs = fresh_golden(op, case)  # the prepared reference made the golden
    for name in ("bf16", "bf16_roundtrip"):  # own outputs reused; the envelope's run
        result = run_check(op, case, name, "cpu", inputs, golden)
        assert result.passed, result.violations
        assert result.metric("mixes", "max_err_ratio") is not None
    from numcheck.check.extras import annotate

    tf32 = run_check(op, case, "tf32", "cpu", inputs, golden, keep_outputs=True)
    annotate(tf32, op, golden, inputs)  # runs the prepared reference on the same inputs
    assert tf32.note == NOTE


def test_calibration_and_the_self_test_run_prepared_variants(tmp_path: Path) -> None:
    from numcheck.calibrate import References, measure_variant
    from numcheck.selftest import error_to_family

    case = tiny(tmp_path, '"bf16", "prepared_bf16"')
    op = get_op("mhc_pre")
    table = measure_variant(op, case, "prepared_bf16", "cpu", [0, 1000], References(op, case,
                                                                                    "cpu"))
    assert table["mixes"]["rel_fro"].value > 0
    # The prepared variant computes what bf16 computes: its error against the honest
    # family (bf16 and itself) is the family's own.
    assert error_to_family(case, "prepared_bf16", ["bf16", "prepared_bf16"], 0) == 1.0
    assert error_to_family(case, "prepared_bf16", ["bf16"], 0) == 1.0


def test_with_preparation_is_prepare_then_call(tmp_path: Path) -> None:
    case = tiny(tmp_path)
    variant = get_op("mhc_pre").variants["prepared_bf16"]
    inputs = _inputs(case)
    out = with_preparation(variant)(inputs, case.params)
    direct = run_variant(variant, get_op("mhc_pre"), inputs, case, "cpu")
    assert all(torch.equal(out[k], direct[k]) for k in out)
    assert with_preparation(get_op("mhc_pre").variants["bf16"]) is get_op(
        "mhc_pre").variants["bf16"].fn
    with pytest.raises(ValueError, match="hc_fn must be bf16"):
        variant.fn(to_device(inputs, "cpu"), case.params)  # the call alone cannot run


def test_preparations_are_kept_per_seed_and_device(tmp_path: Path) -> None:
    case = tiny(tmp_path)
    variant = get_op("mhc_pre").variants["prepared_bf16"]
    preps = Preparations()
    first = preps.at(0)(variant, _inputs(case, 0), case.params, "cpu")
    assert preps.at(0)(variant, _inputs(case, 0), case.params, "cpu") is first
    assert preps.at(1)(variant, _inputs(case, 1), case.params, "cpu") is not first
    assert preps.first("prepared_bf16") is first
    assert len(prepared_variants.PREPARE_CALLS) == 2


# -- what readers see --------------------------------------------------------------------


def test_failure_message_record_and_page_carry_the_preparation(tmp_path: Path) -> None:
    (result,) = _checked(tmp_path, "coarse_prepare", gates=("casts",))
    message = failure_message(result, Commands("repro", "regen"), "cases/mhc.toml")
    assert ("\n  prepared once: hc_fn bf16 [256, 24] (was fp32 [24, 256]), 12.3 kB held; "
            "3 casts, 1 copy, 147.5 kB moved (fp32 copy of [256, 24] at ") in message
    record = record_from_result(result)
    assert result.prepared is not None and record.prepared == result.prepared.as_dict()
    assert (record.prepared["casts"], record.prepared["copies"]) == (3, 1)
    assert record_from_dict(record_to_dict(record)) == record
    old = {k: v for k, v in record_to_dict(record).items() if k != "prepared"}
    assert record_from_dict(old).prepared is None  # a report written before the field
    page = render_html(Report([record]), plots=False)
    assert "<h4>prepared once (load time: not per call, not timed, not gated)</h4>" in page
    assert "fp32 -&gt; e4m3" in page


def test_check_inputs_stay_unprepared_for_other_variants(tmp_path: Path) -> None:
    case = tiny(tmp_path, '"prepared_bf16", "bf16"')
    op = get_op("mhc_pre")
    golden, inputs = fresh_golden(op, case)
    run_check(op, case, "prepared_bf16", "cpu", inputs, golden)
    cpu, _ = inputs.get(0)
    assert cpu["hc_fn"].dtype == torch.float32 and cpu["hc_fn"].shape == (24, 256)
    assert isinstance(inputs, CaseInputs) and run_check(op, case, "bf16", "cpu", inputs,
                                                        golden).passed
