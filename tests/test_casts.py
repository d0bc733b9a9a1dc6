"""The cast ledger: what it records, round trips, no-op conversions, source lines."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from numcheck.ops import mhc
from numcheck.ops.registry import get_op
from numcheck.overhead.casts import CastLedger, ledger_table, user_frame
from numcheck.overhead.movement import classify
from numcheck.overhead.units import megabytes
from numcheck.precision import short_dtype
from tests.fresh import FreshPython

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
                                  "to another dtype", "first result freed", "another view"])
def test_neither_a_round_trip_nor_a_repeated_cast(case: str) -> None:
    with CastLedger() as ledger:
        x = torch.randn(8, 8).to(torch.bfloat16)
        xf = x.float()
        if case == "original freed":
            del x  # nothing left to reuse: casting back (or again) is the only way
            xf.to(torch.bfloat16)
        elif case == "written in between":
            xf.mul_(2)  # a new value: casting it back, or x again, is no repeat either
            xf.to(torch.bfloat16)
            x.float()
        elif case == "new value":
            (xf * 2).to(torch.bfloat16)
        elif case == "to another dtype":
            xf.to(torch.float16)
            x.half()
        elif case == "first result freed":
            del xf
            x.float()
        else:
            x[:4].float()  # other elements: another value
    assert ledger.round_trips == [] and ledger.repeated_casts == []


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
    assert short_dtype(torch.float8_e4m3fn) == "e4m3" and short_dtype(torch.int32) == "int32"
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
            call = variant.fn
            if variant.prepare is not None:  # prepared once, apart from the call's ledger
                prepared = variant.prepare(inputs, p)
                call = functools.partial(lambda f, extra, i, q: f({**i, **extra}, q),
                                         variant.fn, prepared)
            with CastLedger() as ledger:
                call(inputs, p)
            assert ledger.round_trips == [], (op.name, name)
    assert indexer.OP.name == "indexer"


def test_interpreter_argument_copies_are_not_recorded() -> None:
    # Under TRITON_INTERPRET the interpreter copies each kernel argument to the host and
    # back; a compiled kernel does not, so the ledger leaves those copies out.
    pytest.importorskip("triton", reason="triton not installed: pip install 'numcheck[fused]'")
    import numcheck.ops.fused  # noqa: F401  (registers the fused variants)

    op = get_op("indexer")
    variant = op.variants["fused"]
    if "cpu" not in variant.devices:
        pytest.skip(variant.unavailable or "the fused variant does not run on the CPU here")
    p = op.resolve_params(None, {"batch": 2, "max_context": 128, "heads": 8, "index_topk": 16})
    inputs = op.make_inputs(p, 0)
    with CastLedger() as ledger:
        variant.fn(inputs, p)
    # torch.where(isneginf(values), -1, indices) and the cast of the top-k indices.
    assert [e.conversion for e in ledger.entries] == ["int64 where", "int64 -> int32"]


# -- data movement: copies made by any op that re-arranges an input's elements ----------

# x: 8 rows of 4 x 128 bf16 (8 kB, above VALUE_MIN_BYTES), the input every case reads.
X_SHAPE = (8, 4, 128)
X_BYTES = 8 * 4 * 128 * 2


def _x() -> torch.Tensor:
    return torch.randn(*X_SHAPE).to(torch.bfloat16)


#: (what, the op on x, the aten op the ledger names). Ops from the brief and beyond it:
#: views made contiguous, pads, scatters, *_copy view-copies, replication...
MOVES = [
    ("cat", lambda x: torch.cat([x, x], 0), "cat"),
    ("stack", lambda x: torch.stack(x.unbind(1), 1), "stack"),
    ("index_select", lambda x: x.index_select(0, torch.tensor([3, 1, 2])), "index_select"),
    ("gather", lambda x: x.gather(2, torch.zeros(8, 4, 128, dtype=torch.long)), "gather"),
    ("advanced index", lambda x: x[torch.tensor([0, 5, 5])], "index"),
    ("boolean mask", lambda x: x[x.float() > 0], "index"),
    ("take", lambda x: x.take(torch.arange(1000)), "take"),
    ("repeat", lambda x: x.repeat(2, 1, 1), "repeat"),
    ("repeat_interleave", lambda x: x.repeat_interleave(torch.tensor([2] * 8), 0),
     "index_select"),
    ("flip", lambda x: x.flip(0), "flip"),
    ("roll", lambda x: torch.roll(x, 1, 0), "roll"),
    ("rot90", lambda x: torch.rot90(x, 1, (1, 2)), "rot90"),
    ("pad", lambda x: torch.nn.functional.pad(x, (0, 2)), "constant_pad_nd"),
    ("where, a copied branch", lambda x: torch.where(x.float() > 0, x, 0), "where"),
    ("masked_fill", lambda x: x.masked_fill(x.float() > 0, 0), "masked_fill"),
    ("masked_select", lambda x: x.masked_select(x.float() > 0), "masked_select"),
    ("tril", lambda x: x.tril(), "tril"),
    ("slice_scatter", lambda x: torch.zeros_like(x).slice_scatter(x[:4], 0, 0, 4),
     "slice_scatter"),
    ("scatter", lambda x: torch.zeros_like(x).scatter(2, torch.zeros(8, 4, 128, dtype=torch.long),
                                                      x), "scatter"),
    ("index_put_", lambda x: torch.zeros_like(x).index_put_((torch.tensor([1]),), x[:1]),
     "index_put"),
    ("narrow_copy", lambda x: x.narrow_copy(0, 0, 4), "narrow_copy"),
    ("pixel_shuffle", lambda x: torch.nn.functional.pixel_shuffle(x.view(1, 16, 16, 16), 2),
     "pixel_shuffle"),
    ("embedding", lambda x: torch.nn.functional.embedding(torch.tensor([1, 2]), x.flatten(1)),
     "embedding"),
    ("upsample nearest", lambda x: torch.nn.functional.interpolate(x, scale_factor=2),
     "upsample_nearest1d"),
]


@pytest.mark.parametrize(("what", "move", "op"), MOVES, ids=[m[0] for m in MOVES])
def test_a_data_movement_op_is_a_copy_of_the_input_it_reads(
    what: str, move: Callable[[torch.Tensor], torch.Tensor], op: str
) -> None:
    x = _x()
    with CastLedger(inputs={"x": x}) as ledger:
        move(x)
    reads = [e for e in ledger.entries if e.input == "x" and e.op == op]
    assert reads, [(e.op, e.input) for e in ledger.entries]
    e = reads[0]
    assert e.kind == "copy" and e.conversion == f"bf16 {op}"
    assert (e.where.file, e.where.function) == (HERE, "<lambda>")  # the line of the op in MOVES
    assert e.bytes_read > 0 and e.bytes_written > 0 and 0 < e.input_bytes <= X_BYTES
    assert ledger.input_passes()["x"] > 0


def test_views_move_nothing() -> None:
    x = _x()
    with CastLedger(inputs={"x": x}) as ledger:
        x.view(8, 512)
        x.transpose(0, 1)
        x.permute(2, 0, 1)
        x[2:5, :, ::2]
        x[torch.tensor(1)]  # a 0-dim index selects a view
        x.expand(2, 8, 4, 128)
        x.unfold(2, 16, 16)
        x.narrow(0, 1, 3)
        x.unbind(1)
        x.chunk(2)
        x.flatten().reshape(8, 4, 128)  # contiguous: views all the way
        x.view(torch.int16)
        x.detach()
    assert ledger.entries == []


def test_bytes_of_data_movement() -> None:
    x, y = _x(), _x()
    rows = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3])
    positive = x.float() > 0
    with CastLedger(inputs={"x": x, "y": y}) as ledger:
        x[torch.tensor([1, 2])]  # a gather reads what it writes: 2 of 8 rows
        x[rows]  # 12 rows written from 8: reads at most the whole of x
        x.repeat(3, 1, 1)  # reads x once, writes it three times
        x[:1].expand(8, 4, 128).contiguous()  # an expanded row is read once
        torch.cat([x, y])  # one entry per input read
        torch.where(positive, x, y)  # both branches read in full
    gather, dup, repeat, expand, cat_x, cat_y, where_x, where_y = ledger.entries
    row = X_BYTES // 8
    assert (gather.bytes_read, gather.bytes_written) == (2 * row, 2 * row)
    assert (dup.bytes_read, dup.bytes_written, dup.input_bytes) == (X_BYTES, 12 * row, X_BYTES)
    assert (repeat.bytes_read, repeat.bytes_written) == (X_BYTES, 3 * X_BYTES)
    assert (expand.op, expand.bytes_read, expand.bytes_written) == ("clone", row, X_BYTES)
    assert [(e.input, e.bytes_read, e.bytes_written) for e in (cat_x, cat_y)] == [
        ("x", X_BYTES, X_BYTES), ("y", X_BYTES, X_BYTES)]
    assert [(e.input, e.bytes_read) for e in (where_x, where_y)] == [("x", X_BYTES),
                                                                      ("y", X_BYTES)]
    assert where_x.bytes_written + where_y.bytes_written == X_BYTES


def test_index_and_mask_tensors_are_metadata() -> None:
    x = _x()
    idx = torch.arange(8).repeat(64)  # 4 kB of int64 indices
    with CastLedger(inputs={"x": x, "idx": idx}) as ledger:
        x.flatten(1).index_select(0, idx[:8])
        torch.where(x.float() > 0, x, 0)
    assert {e.input for e in ledger.entries} == {"x"}


def test_copies_by_value_whatever_op_made_them() -> None:
    x = _x()
    with CastLedger(inputs={"x": x}) as ledger:
        x * 1  # the same bits: a copy by value
        x + 0
        torch.mul(x, 1, out=torch.empty_like(x))  # into a buffer
        torch.zeros_like(x).add_(x)  # in place, into a fresh buffer
        x.float().relu().to(torch.bfloat16).float()  # computes: not x's dtype
        x * 2  # a new value
        torch.zeros_like(x) * 1  # constant: equal by construction, not a copy
        small = torch.randn(16).to(torch.bfloat16)
        with CastLedger(inputs={"s": small}) as inner:
            small * 1  # 32 bytes: below VALUE_MIN_BYTES
    by_value = [e for e in ledger.entries if e.by_value]
    assert [(e.op, e.input, e.conversion) for e in by_value] == [
        ("mul", "x", "bf16 copy by mul"), ("add", "x", "bf16 copy by add"),
        ("mul", "x", "bf16 copy by mul"), ("add", "x", "bf16 copy by add")]
    assert by_value[0].where.line == line_of("# the same bits: a copy by value")
    assert ledger.input_passes()["x"] == 5.0  # four copies and the upcast
    assert inner.entries == []


def test_a_re_arrangement_is_a_new_tensor_unless_it_gives_back_the_input() -> None:
    x = _x()
    with CastLedger(inputs={"x": x}) as ledger:
        x.flip(0).float()  # a gather-like re-arrangement, then its upcast: x read once
    assert ledger.input_passes() == {"x": 1.0}
    for rebuild in (lambda: torch.cat([x[:, i] for i in range(4)], -1),  # x's streams
                    lambda: x.flip(0).flip(0),  # flipped back
                    lambda: x.repeat(2, 1, 1)[:8],  # a slice of a repeat: a view of x's bits
                    lambda: torch.where(torch.isfinite(x), x, 0)):  # nothing replaced
        with CastLedger(inputs={"x": x}) as ledger:
            rebuild().flatten(1).float()
        assert ledger.input_passes() == {"x": 2.0}, [e.conversion for e in ledger.entries]


def test_a_pass_is_capped_at_what_the_copy_holds_of_the_input() -> None:
    x = _x()
    with CastLedger(inputs={"x": x}) as ledger:
        half = x[:4].clone()  # holds half of x
        half.float()  # reads that half again
        half[torch.tensor([0, 1, 2, 3] * 4)]  # 16 rows gathered from it: still half of x
    assert ledger.input_passes() == {"x": 1.5}


def _shuffle_impl(x: torch.Tensor) -> torch.Tensor:
    return x.flip(0).clone()


def _scale_impl(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


@functools.cache  # an op is defined once per process; the library must stay alive
def _custom_ops() -> tuple[Any, Any, Any]:
    lib = torch.library.Library("numcheck_test", "DEF")
    for name, impl in (("shuffle", _shuffle_impl), ("scale", _scale_impl)):
        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, impl, "CompositeExplicitAutograd")
    return torch.ops.numcheck_test.shuffle, torch.ops.numcheck_test.scale, lib


def test_an_op_nobody_classified_is_a_copy_when_its_elements_are_the_inputs() -> None:
    # Ops defined outside aten (a kernel library's custom op) reach the ledger as one call
    # it has never heard of: decided by value. A re-arrangement of x is data movement of
    # x; a computation on x is not.
    shuffle, scale, _ = _custom_ops()
    x = _x()
    assert classify(torch.ops.numcheck_test.shuffle.default).kind == "unknown"
    with CastLedger(inputs={"x": x}) as ledger:
        shuffle(x)  # an unknown op that moves x's elements
        scale(x)
    (e,) = ledger.entries
    assert (e.op, e.input, e.bytes_read) == ("shuffle", "x", X_BYTES)
    assert e.where.line == line_of("# an unknown op that moves x's elements")


def test_an_op_that_moves_or_computes_by_mode_is_decided_by_value() -> None:
    # grid_sample is data movement in its nearest mode and compute in its bilinear one.
    x = torch.randn(1, 8, 16, 32)
    grid = (torch.rand(1, 16, 32, 2) * 2 - 1) * 0.9  # inside the image: no zero padding
    with CastLedger(inputs={"x": x}) as ledger:
        torch.nn.functional.grid_sample(x, grid, mode="nearest", align_corners=False)
        torch.nn.functional.grid_sample(x, grid, mode="bilinear", align_corners=False)
    assert [(e.op, e.input) for e in ledger.entries] == [("grid_sampler_2d", "x")]


def test_classification_from_schema_tags_and_names() -> None:
    aten = torch.ops.aten
    kinds = {op: classify(op).kind for op in (
        aten.view.default, aten.transpose.int, aten.expand.default, aten.select.int,
        aten._to_copy.default, aten.clone.default, aten.copy_.default,
        aten.cat.default, aten.permute_copy.default, aten.select_scatter.default,
        aten.index_copy.default, aten.where.self, aten.masked_fill.Scalar,
        aten.mm.default, aten.add.Tensor, aten.sum.dim_IntList, aten.topk.default,
        aten.sort.default, aten.empty.memory_format, aten.zeros_like.default,
        aten.arange.default, aten.new_empty.default, aten.empty_strided.default)}
    assert [k for k in kinds.values()] == (
        ["view"] * 4 + ["convert"] * 3 + ["move"] * 6 + ["compute"] * 5 + ["create"] * 5)
    put = classify(aten.index_put_.default)
    assert (put.kind, put.name, put.mutated, put.data_args) == ("move", "index_put", "self",
                                                                ("values",))
    assert classify(aten.where.self).data_args == ("self", "other")
    assert classify(aten.index.Tensor).data_args == ("self",)
    assert classify(aten.cat.out).mutated == "out"


def test_every_aten_op_the_shipped_variants_call_is_classified() -> None:
    # The ledger's rules over what the shipped variants actually run (a logging mode over
    # every shipped variant: docs/overhead.md): none is left to the run-time default.
    seen = [aten for aten in (
        "_softmax.default", "_to_copy.default", "add.Tensor", "alias.default", "arange.default",
        "bitwise_not.default", "bmm.default", "clone.default", "copy_.default",
        "detach.default", "div.Tensor", "empty.memory_format", "index.Tensor",
        "isneginf.default", "lt.Tensor", "masked_fill.Scalar", "mean.dim", "mm.default",
        "mul.Tensor", "new_empty.default", "permute.default", "pow.Tensor_Scalar",
        "relu.default", "rsqrt.default", "scalar_tensor.default", "select.int",
        "set_.source_Storage", "sigmoid.default", "slice.Tensor", "sub.Tensor",
        "sum.dim_IntList", "topk.default", "transpose.int", "unsqueeze.default",
        "view.default", "view.dtype", "where.self")]
    for name in seen:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
        assert classify(op).kind != "unknown", name
    moves = {n for n in seen if classify(
        getattr(getattr(torch.ops.aten, n.partition(".")[0]), n.partition(".")[2])).kind == "move"}
    assert moves == {"index.Tensor", "masked_fill.Scalar", "where.self"}
    creates = {n for n in seen if classify(
        getattr(getattr(torch.ops.aten, n.partition(".")[0]), n.partition(".")[2])).kind
        == "create"}
    assert creates == {"arange.default", "empty.memory_format", "new_empty.default",
                       "scalar_tensor.default"}


def test_inputs_sharing_one_buffer_are_charged_apart() -> None:
    # q, k and v sliced from one fused projection: each converted once is one pass each.
    qkv = torch.randn(3, 64, 128).to(torch.bfloat16)
    q, k, v = qkv.unbind(0)
    with CastLedger(inputs={"q": q, "k": k, "v": v}) as ledger:
        q.float()
        k.float()
        v[:, :64].float()  # half of v
    assert ledger.input_passes() == {"q": 1.0, "k": 1.0, "v": 0.5}


def test_two_ledgers_keep_their_own_entries() -> None:
    # A variant's one-time preparation and its call can each run under a ledger of its own.
    x = _x()
    with CastLedger(inputs={"x": x}) as prepared:
        w = x.flip(0)
    with CastLedger(inputs={"x": x, "w": w}) as call:
        w.float()
    assert [e.op for e in prepared.entries] == ["flip"]
    assert [(e.op, e.input) for e in call.entries] == [("_to_copy", "w")]
    assert prepared.input_passes() == {"x": 1.0} and call.input_passes() == {"w": 1.0}


def test_uninitialized_memory_holding_an_input_s_bits_is_no_copy() -> None:
    """``torch.empty_like(x)`` reads nothing: on an H200 the caching allocator handed it the
    block a freed ``x * 1`` had held, x's bits exactly, and the by-value rule called it a
    copy. The ledger is shown that very result here, so the test needs no allocator luck."""
    x = _x()
    blocks = [x.clone() for _ in range(3)]  # what the allocator hands out: x's bits, unseen
    with CastLedger(inputs={"x": x}) as ledger:
        x * 1  # a computed copy counts (and arms the by-value check)
        for block, (op, args) in zip(blocks, (
                (torch.ops.aten.empty_like.default, (x,)),
                (torch.ops.aten.new_empty.default, (x, list(x.shape))),
                (torch.ops.aten.empty_strided.default, (list(x.shape), list(x.stride())))),
                strict=True):
            ledger._observe(op, args, {}, block)  # the result holds x's bits
        x + 0  # and so does one after them
    assert [(e.op, e.input) for e in ledger.entries if e.by_value] == [("mul", "x"), ("add", "x")]


def test_a_creation_op_is_no_copy_whatever_its_result_holds() -> None:
    """Ops that read no tensor's elements (no tensor argument, or a template's shape only)
    copy no input, even when their result equals one: positions made by ``torch.arange``
    beside an input that holds the same positions. A computed copy of it still counts."""
    pos = torch.arange(1024)  # 8 kB of int64: above VALUE_MIN_BYTES
    with CastLedger(inputs={"pos": pos}) as ledger:
        torch.arange(1024)  # the same bits, made from nothing
        torch.full_like(pos, 7)
        pos + 0  # a copy by value
    assert [(e.op, e.input) for e in ledger.entries] == [("add", "pos")]


# -- repeated casts: the same source cast again, told from a round trip -----------------------

LIBRARY = '''import torch


def mhc_pre(x, weight):
    """A library kernel's glue: the fp32 weight cast to bf16 on every call, kept for backward."""
    w16 = weight.to(torch.bfloat16)  # the library's cast
    return x @ w16.T, w16
'''


def _library(tmp_path: Any) -> Any:
    import importlib.util

    path = tmp_path / "fakelib" / "mhc_pre.py"
    path.parent.mkdir()
    path.write_text(LIBRARY)
    spec = importlib.util.spec_from_file_location("fakelib_mhc_pre", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("how", ["same tensor", "a copy of it"])
def test_a_repeated_cast_names_both_sites_and_is_no_round_trip(tmp_path: Any, how: str) -> None:
    """A library casts its fp32 weight to bf16 on every call; the user's glue casts the same
    weight again for its own use: a repeated cast (by path, or by value for a copy)."""
    lib = _library(tmp_path)
    w = torch.randn(24, 512)
    x = torch.randn(4, 512).to(torch.bfloat16)
    with CastLedger(inputs={"hc_fn": w}) as ledger:
        y, saved = lib.mhc_pre(x, w)
        src = w if how == "same tensor" else w.clone()
        w16 = src.to(torch.bfloat16)  # the glue's own cast of the weight
    assert torch.equal(w16, saved) and y.shape == (4, 24)
    assert ledger.round_trips == []
    (rep,) = ledger.repeated_casts
    first = ledger.entries[rep.repeat_of]
    assert first.where.file.endswith("fakelib/mhc_pre.py") and first.where.line == 6
    assert rep.where.file == HERE and rep.where.line == line_of("# the glue's own cast")
    text = ledger.describe_repeated_cast(rep)
    assert text.startswith(f"fp32 -> bf16 of [24, 512] at {HERE}:{rep.where.line} casts again "
                           "the fp32 tensor")
    assert f"already cast to bf16 at {first.where}: a repeated cast (not a round trip)" in text
    assert "REPEATED CAST of #0" in "\n".join(ledger_table(ledger))
    assert rep.as_dict()["repeat_of"] == 0


def test_a_real_round_trip_stays_a_round_trip_beside_a_repeat() -> None:
    x = torch.randn(64, 256).to(torch.bfloat16)
    with CastLedger() as ledger:
        xf = x.float()
        xf.to(torch.bfloat16)  # bf16 -> fp32 -> bf16: a round trip by path
        (xf * 1.0).to(torch.bfloat16)  # and by value
        kept = xf.to(torch.float16)
        xf.to(torch.float16)  # a repeat of the line above, its result alive
    assert [e.index for e in ledger.round_trips] == [1, 2]
    assert [(e.index, e.repeat_of) for e in ledger.repeated_casts] == [(4, 3)]
    assert kept.dtype == torch.float16


def test_the_casts_gate_names_a_repeated_cast_apart_from_round_trips(tmp_path: Any) -> None:
    from numcheck.overhead.limits import OverheadBudget, audit_variant, overhead_violations

    lib = _library(tmp_path)

    def glue(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
        y, saved = lib.mhc_pre(inputs["x"], inputs["hc_fn"])
        own = inputs["hc_fn"].to(torch.bfloat16)
        return {"y": y + (own[:, :1].T * 0), "saved": saved}

    inputs = {"x": torch.randn(4, 512).to(torch.bfloat16), "hc_fn": torch.randn(24, 512)}
    report = audit_variant(glue, inputs, {})
    (v,) = [v for v in overhead_violations(report, OverheadBudget(), {"casts"})
            if v.metric in ("round_trips", "repeated_casts")]
    assert v.metric == "repeated_casts" and v.value == 1
    assert "fakelib/mhc_pre.py:6: a repeated cast (not a round trip)" in v.detail
    record = report.as_dict()
    assert record["round_trips"] == [] and len(record["repeated_casts"]) == 1
    assert "repeated casts 1" in report.summary()
    allowed = OverheadBudget(repeated_casts=True)
    assert all(v.metric != "repeated_casts"
               for v in overhead_violations(report, allowed, {"casts"}))
