"""The cast ledger: what it records, round trips, no-op conversions, source lines."""

from __future__ import annotations

import pytest
import torch
from fresh import FreshPython

from numcheck.ops import mhc
from numcheck.ops.registry import get_op
from numcheck.overhead.casts import CastLedger, dtype_name, ledger_table, megabytes, user_frame

HERE = "tests/test_casts.py"


def line_of(text: str) -> int:
    """The line number of ``text`` in this file (so the tests survive edits above them)."""
    with open(__file__) as handle:
        for number, line in enumerate(handle, 1):
            if text in line and "line_of(" not in line:
                return number
    raise AssertionError(text)


def test_a_cast_records_dtypes_shape_bytes_and_the_callers_line() -> None:
    x = torch.ones(4, 8, dtype=torch.bfloat16)
    with CastLedger() as ledger:
        y = x.float()  # the upcast under test
    (e,) = ledger.entries
    assert (e.kind, e.op, e.src_dtype, e.dst_dtype) == ("cast", "_to_copy", torch.bfloat16,
                                                        torch.float32)
    assert e.shape == (4, 8) and (e.bytes_read, e.bytes_written) == (64, 128)
    assert y.dtype == torch.float32
    assert e.where.file == HERE and e.where.line == line_of("# the upcast under test")
    assert e.where.function == "test_a_cast_records_dtypes_shape_bytes_and_the_callers_line"
    assert e.where.code == "y = x.float()  # the upcast under test"
    assert e.describe() == f"bf16 -> fp32 of [4, 8] at {HERE}:{e.where.line} (192 B)"


def test_round_trip_is_flagged_with_both_lines() -> None:
    x = torch.randn(16, 32).to(torch.bfloat16)
    with CastLedger() as ledger:
        xf = x.float()  # there
        back = xf.to(torch.bfloat16)  # and back
    assert torch.equal(back, x)  # exact, so no numeric check can see it
    first, second = ledger.entries
    assert first.round_trip_of is None and second.round_trip_of == 0
    assert ledger.round_trips == [second]
    text = ledger.describe_round_trip(second)
    assert text == (
        f"bf16 -> fp32 -> bf16 of [16, 32] at {HERE}:{line_of('# and back')} "
        f"(back; there at {HERE}:{line_of('# there')}), 3072 B moved while the bf16 "
        "original was still alive: use it (or a view of it)"
    )


def test_round_trip_through_views_and_copies() -> None:
    x = torch.randn(4, 2, 8).to(torch.bfloat16)
    with CastLedger() as ledger:
        xf = x.flatten(1).float()
        xf[:, :8].to(torch.bfloat16)  # a slice of the upcast copy
        xf.clone().view(4, 2, 8).to(torch.bfloat16)  # a copy of it, reshaped
    kinds = [(e.kind, e.round_trip_of) for e in ledger.entries]
    assert kinds == [("cast", None), ("cast", 0), ("copy", None), ("cast", 0)]


@pytest.mark.parametrize("case", ["original freed", "written in between", "new value",
                                  "to another dtype"])
def test_not_a_round_trip(case: str) -> None:
    with CastLedger() as ledger:
        x = torch.randn(8, 8).to(torch.bfloat16)
        xf = x.float()
        if case == "original freed":
            del x  # nothing left to reuse: casting back is the only way
            xf.to(torch.bfloat16)
        elif case == "written in between":
            xf.mul_(2)
            xf.to(torch.bfloat16)
        elif case == "new value":
            (xf * 2).to(torch.bfloat16)
        else:
            xf.to(torch.float16)
    assert ledger.round_trips == []


def test_no_op_conversion_and_copies() -> None:
    x = torch.randn(8, 8)
    with CastLedger() as ledger:
        x.to(torch.float32)  # returns x itself: no aten call, nothing recorded
        x.to(torch.float32, copy=True)  # a copy that changes nothing
        x.t().contiguous()  # a real layout change: a copy, not a no-op
        out = torch.empty(8, 8, dtype=torch.float64)
        out.copy_(x)  # a cast through copy_
    kinds = [(e.kind, e.op, e.no_op) for e in ledger.entries]
    assert kinds == [("copy", "_to_copy", True), ("copy", "clone", False),
                     ("cast", "copy_", False)]
    assert ledger.no_ops[0].conversion == "fp32 copy"
    assert ledger.entries[2].bytes_read == 256 and ledger.entries[2].bytes_written == 512
    assert ledger.bytes_moved == 256 * 2 + 256 * 2 + 256 + 512


def test_views_and_promotion_are_not_recorded() -> None:
    x = torch.randn(4, 8)
    with CastLedger() as ledger:
        x.view(torch.int32)
        x.t()
        x.flatten()
        torch.view_as_real(torch.randn(4, dtype=torch.complex64))
        x.to(torch.bfloat16) * x  # one cast; the promotion back to fp32 is inside mul
    assert [e.conversion for e in ledger.entries] == ["fp32 -> bf16"]


def test_ledger_leaves_results_unchanged_and_stops_on_exit() -> None:
    x = torch.randn(32, 64).to(torch.bfloat16)
    with CastLedger() as ledger:
        inside = (x.float() @ x.float().T).to(torch.bfloat16)
    after = (x.float() @ x.float().T).to(torch.bfloat16)
    assert torch.equal(inside, after)
    assert len(ledger.entries) == 3


def test_user_frame_skips_named_files() -> None:
    assert user_frame().file == HERE
    assert user_frame(skip=(__file__,)).file != HERE


def test_mhc_roundtrip_variant_is_caught_at_its_line() -> None:
    op = get_op("mhc_pre")
    p = op.resolve_params(None, {"tokens": 8, "hidden": 64})
    inputs = op.make_inputs(p, 0)
    with CastLedger() as ledger:
        mhc.bf16_roundtrip(inputs, p)
    (rt,) = ledger.round_trips
    assert (rt.src_dtype, rt.dst_dtype, rt.shape) == (torch.float32, torch.bfloat16, (8, 256))
    assert rt.where.file == "numcheck/ops/mhc.py"
    assert rt.where.code == "x_flat = xf.to(torch.bfloat16)"
    assert ledger.entries[rt.round_trip_of].where.code == 'xf = inputs["x"].flatten(1).float()'
    table = "\n".join(ledger_table(ledger))
    assert "ROUND TRIP of #0" in table and "x_flat = xf.to(torch.bfloat16)" in table

    with CastLedger() as fixed:
        mhc.bf16(inputs, p)
    assert fixed.round_trips == [] and fixed.no_ops == []


def test_small_helpers() -> None:
    assert dtype_name(torch.float8_e4m3fn) == "e4m3" and dtype_name(torch.int32) == "int32"
    assert [megabytes(n) for n in (512, 51_200, 6_291_456)] == ["512 B", "51.2 kB", "6.29 MB"]


@pytest.mark.slow  # a fresh interpreter (tests/fresh.py)
def test_dynamo_is_not_imported_by_the_ledger(fresh_python: FreshPython) -> None:
    # torch._dynamo costs seconds to import; the ledger must not pull it in.
    code = ("import sys, torch; from numcheck.overhead.casts import CastLedger\n"
            "with CastLedger(): torch.ones(2).double()\n"
            "print('torch._dynamo' in sys.modules)")
    out = fresh_python.run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- round trips found by value ---------------------------------------------------------


def test_round_trip_behind_an_exact_op_is_found_by_value() -> None:
    x = torch.randn(64, 256).to(torch.bfloat16)
    with CastLedger() as ledger:
        xf = x.float()  # x leaves bf16 here
        back = (xf * 1.0).to(torch.bfloat16)  # x * 1.0: a new storage, the same value
    assert torch.equal(back, x)
    (rt,) = ledger.round_trips
    assert rt.round_trip_of is None and rt.same_value_as is not None
    assert rt.same_value_as.where.line == line_of("# x leaves bf16 here")
    assert ledger.describe_round_trip(rt) == (
        f"fp32 -> bf16 of [64, 256] at {HERE}:{line_of('# x * 1.0: a new')} gives back, bit for "
        f"bit, the bf16 [64, 256] tensor converted at {HERE}:{line_of('# x leaves bf16 here')}"
        ": a round trip by value, 98.3 kB moved while that tensor was still alive: use it "
        "(or a view of it)"
    )
    assert "ROUND TRIP (same value as" in "\n".join(ledger_table(ledger))


def test_round_trip_by_value_of_an_earlier_result_in_another_shape() -> None:
    x = torch.randn(8, 4, 128)
    with CastLedger() as ledger:
        h = (x * 3).to(torch.bfloat16)  # a result made inside the variant
        h2 = h.flatten(1).float().clone()  # upcast, then copied
        (h2 + 0.0).to(torch.bfloat16)  # back: same bits as h, flattened
    (rt,) = ledger.round_trips
    seen = rt.same_value_as
    assert seen is not None and seen.input is None and seen.shape == (8, 4, 128)
    assert seen.where is not None and seen.where.line == line_of("# a result made inside")
    assert seen.role == "made"


def test_round_trip_by_value_of_an_input_names_it() -> None:
    x = torch.randn(16, 512).to(torch.bfloat16)
    with CastLedger(inputs={"x": x}) as ledger:
        y = x.to(torch.float32, copy=True).double()  # two hops away, never from x itself
        (y * 1.0).to(torch.bfloat16)
    (rt,) = ledger.round_trips
    assert rt.same_value_as is not None and rt.same_value_as.input == "x"
    assert "the bf16 [16, 512] tensor (input 'x') converted at" in ledger.describe_round_trip(rt)


@pytest.mark.parametrize("case", ["different values", "constant", "freed", "tiny", "integer"])
def test_honest_casts_are_not_round_trips_by_value(case: str) -> None:
    x = torch.randn(64, 256).to(torch.bfloat16)
    with CastLedger() as ledger:
        if case == "different values":
            (x.float() * 1.5).to(torch.bfloat16)  # a real computation, cast down once
            torch.randn(64, 256).to(torch.bfloat16)  # another tensor of x's shape
        elif case == "constant":
            torch.zeros(64, 256, dtype=torch.bfloat16).float()  # bf16 zeros leave bf16
            torch.zeros(64, 256).to(torch.bfloat16)  # zeros again: equal by construction
        elif case == "freed":
            y = x.float() * 1.0
            del x  # the bf16 original is gone: casting back is the only way
            y.to(torch.bfloat16)
        elif case == "tiny":
            s = torch.randn(8).to(torch.bfloat16)
            (s.float() * 1.0).to(torch.bfloat16)  # 16 bytes: below VALUE_MIN_BYTES
        else:
            i = torch.arange(4096, dtype=torch.int32)
            (i.long() + 0).to(torch.int32)  # integer casts are not compared
    assert ledger.round_trips == []


def test_value_tracking_can_be_switched_off() -> None:
    x = torch.randn(64, 256).to(torch.bfloat16)
    with CastLedger(by_value=False) as ledger:
        (x.float() * 1.0).to(torch.bfloat16)
    assert ledger.round_trips == [] and len(ledger.entries) == 2


def test_shipped_variants_have_no_round_trip_by_value() -> None:
    # Every shipped variant (the known-bad bf16_roundtrip aside) on a small shape of each op.
    from numcheck.ops import indexer

    for op, shape in ((get_op("mhc_pre"), {"tokens": 8, "hidden": 256}),
                      (get_op("indexer"), {"batch": 2, "max_context": 256, "heads": 8})):
        p = op.resolve_params(None, shape)
        inputs = op.make_inputs(p, 0)
        for name, variant in op.variants.items():
            if "cpu" not in variant.devices or name in ("bf16_roundtrip", "fused"):
                continue
            with CastLedger() as ledger:
                variant.fn(inputs, p)
            assert ledger.round_trips == [], (op.name, name)
    assert indexer.OP.name == "indexer"


def test_interpreter_argument_copies_are_not_recorded() -> None:
    # Under TRITON_INTERPRET the interpreter copies each kernel argument to the host and
    # back; a compiled kernel does not, so the ledger leaves those copies out.
    pytest.importorskip("triton")
    import numcheck.ops.fused  # noqa: F401  (registers the fused variants)

    op = get_op("indexer")
    variant = op.variants["fused"]
    if "cpu" not in variant.devices:
        pytest.skip(variant.unavailable or "the fused variant does not run on the CPU here")
    p = op.resolve_params(None, {"batch": 2, "max_context": 128, "heads": 8, "index_topk": 16})
    inputs = op.make_inputs(p, 0)
    with CastLedger() as ledger:
        variant.fn(inputs, p)
    assert [e.conversion for e in ledger.entries] == ["int64 -> int32"]  # the top-k indices
