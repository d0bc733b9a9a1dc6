"""Tests for numcheck.goldens.files: storage, sampling, hashing, corruption and staleness."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch

from numcheck.goldens import files as goldens
from numcheck.goldens.files import (
    FORMAT_VERSION,
    REQUIRED_META,
    Golden,
    GoldenCorrupt,
    GoldenError,
    GoldenFormatError,
    GoldenMissing,
    GoldenStale,
    content_hash,
    golden_path,
    input_fingerprint,
    load_golden,
    save_golden,
)
from numcheck.goldens.freshness import require_fresh
from numcheck.goldens.packing import (
    FULL_LIMIT,
    SAMPLE_SIZE,
    output_keys,
    pack_output,
    summary_stats,
    unpack_pair,
)

HINT = "pytest --numcheck --numcheck-regen -k mhc_pre"
CASE = "mhc_pre/t64"
FP = "ab" * 32


def _meta(**over: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "op": "mhc_pre",
        "case": CASE,
        "op_version": 1,
        "fingerprint": FP,
        "torch_version": "2.13.0",
        "device": "cpu",
        "created": "2025-01-01T00:00:00+00:00",
        "seeds": [0, 1],
    }
    meta.update(over)
    return meta


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes of a tensor, so NaN and -0.0 compare exactly."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _big(dtype: torch.dtype, numel: int = FULL_LIMIT + 1000) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=g).to(dtype).reshape(-1, 8)
    return torch.randint(-(2**31), 2**31 - 1, (numel,), generator=g, dtype=dtype).reshape(-1, 8)


def _save(tmp_path: Path, tensors: dict[str, torch.Tensor], **over: Any) -> Path:
    path = golden_path(tmp_path / "goldens", "mhc_pre", "t64")
    save_golden(path, tensors, _meta(**over))
    return path


def _load(path: Path) -> Golden:
    return load_golden(path, case=CASE, regen_hint=HINT)


# ---------------------------------------------------------------------------- paths


def test_golden_path_layout(tmp_path: Path) -> None:
    assert (
        golden_path(tmp_path, "indexer", "b64_l8192") == tmp_path / "indexer/b64_l8192.safetensors"
    )


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "a\\b", ".hidden"])
def test_golden_path_rejects_unsafe_components(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="file name component"):
        golden_path(tmp_path, "indexer", bad)
    with pytest.raises(ValueError, match="file name component"):
        golden_path(tmp_path, bad, "case")


# ---------------------------------------------------------------------------- round trips


def test_round_trip_whole_outputs_exact(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    fp32 = torch.randn(64, 33, generator=g)
    fp32[0, :4] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0])
    outs = {
        "s0/y": fp32,
        "s0/bf": torch.randn(17, 5, generator=g).to(torch.bfloat16),
        "s0/i": torch.randint(-(2**31), 2**31 - 1, (100,), generator=g, dtype=torch.int32),
        "s0/f8": torch.randn(32, generator=g).to(torch.float8_e4m3fn),
        "s0/scalar": torch.tensor(3.25),
    }
    tensors: dict[str, torch.Tensor] = {}
    for key, t in outs.items():
        tensors.update(pack_output(key, t))
    assert set(tensors) == set(outs)  # all small: stored whole
    golden = _load(_save(tmp_path, tensors))
    for key, t in outs.items():
        got = golden.tensors[key]
        assert got.dtype == t.dtype and got.shape == t.shape
        assert torch.equal(_bits(got), _bits(t)), key
    assert golden.meta["format_version"] == FORMAT_VERSION
    assert golden.meta["seeds"] == [0, 1]
    assert golden.meta["shapes"]["s0/bf"] == [17, 5]
    assert golden.meta["dtypes"]["s0/bf"] == "bfloat16"
    assert golden.meta["dtypes"]["s0/f8"] == "float8_e4m3fn"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_round_trip_sampled_output(tmp_path: Path, dtype: torch.dtype) -> None:
    t = _big(dtype)
    packed = pack_output("s0/out", t)
    assert set(packed) == {"s0/out.idx", "s0/out.val", "s0/out.stats", "s0/out.shape"}
    golden = _load(_save(tmp_path, packed))
    assert output_keys(golden.tensors) == ["s0/out"]
    pair = unpack_pair("s0/out", t, golden.tensors)
    assert pair.sampled
    assert pair.expected.dtype == dtype and pair.expected.numel() == SAMPLE_SIZE
    assert torch.equal(_bits(pair.actual), _bits(pair.expected))
    assert pair.stats_expected is not None and pair.stats_actual is not None
    assert torch.equal(pair.stats_expected, pair.stats_actual)
    assert pair.stats_expected[0].item() == t.numel()


def test_pack_threshold_and_overrides() -> None:
    at_limit = torch.zeros(FULL_LIMIT)
    over_limit = torch.zeros(FULL_LIMIT + 1)
    assert set(pack_output("k", at_limit)) == {"k"}
    assert "k.idx" in pack_output("k", over_limit)
    assert set(pack_output("k", over_limit, full=True)) == {"k"}
    small = pack_output("k", torch.arange(10.0), full=False)
    assert torch.equal(small["k.idx"], torch.arange(10))  # fewer elements than SAMPLE_SIZE: all


def test_meta_values_round_trip_with_their_types(tmp_path: Path) -> None:
    extra = {"note": "123", "flag": "true", "plain": "hello", "n": 7, "d": {"b": [1, 2], "a": None}}
    golden = _load(_save(tmp_path, {"y": torch.ones(2)}, **extra))
    for key, value in extra.items():
        assert golden.meta[key] == value
        assert type(golden.meta[key]) is type(value)


# ---------------------------------------------------------------------------- sampling


def test_sample_is_deterministic_sorted_and_key_dependent() -> None:
    t = torch.randn(FULL_LIMIT * 2)
    a = pack_output("s0/logits", t)["s0/logits.idx"]
    b = pack_output("s0/logits", torch.randn(FULL_LIMIT * 2))["s0/logits.idx"]  # other values
    c = pack_output("s1/logits", t)["s1/logits.idx"]
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.dtype == torch.int64 and a.numel() == SAMPLE_SIZE
    assert bool((a[1:] > a[:-1]).all())  # sorted and distinct
    assert int(a.min()) >= 0 and int(a.max()) < t.numel()
    # stratified: every quarter of the tensor gets a quarter of the sample
    counts = torch.bincount(a // (t.numel() // 4), minlength=4)
    assert counts.tolist() == [SAMPLE_SIZE // 4] * 4


def test_sample_positions_are_pinned() -> None:
    # The positions must not change across torch versions or platforms: goldens would churn.
    idx = pack_output("k", torch.zeros(FULL_LIMIT + 1))["k.idx"]
    assert idx[:4].tolist() == [0, 6, 9, 15]
    assert int(idx.sum()) == 8589901478


def test_summary_stats_counts_nonfinite() -> None:
    t = torch.tensor([1.0, -2.0, float("nan"), float("inf"), float("-inf"), float("-inf")])
    s = summary_stats(t)
    assert s.dtype == torch.float64 and s.shape == (8,)
    assert s.tolist() == [6.0, -1.0, 5.0, -2.0, 1.0, 1.0, 1.0, 2.0]
    empty = summary_stats(torch.full((3,), float("nan"), dtype=torch.bfloat16))
    assert empty[0] == 3 and empty[1] == 0 and torch.isnan(empty[3:5]).all() and empty[5] == 3
    assert summary_stats(torch.tensor([3, 4], dtype=torch.int32)).tolist()[:5] == [2, 7, 25, 3, 4]


# ---------------------------------------------------------------------------- unpack_pair


def test_unpack_whole_pair_keeps_dtypes() -> None:
    ref = torch.randn(4, 8)
    variant = ref.to(torch.bfloat16)
    pair = unpack_pair("y", variant, pack_output("y", ref))
    assert not pair.sampled and pair.stats_actual is None and pair.stats_expected is None
    assert pair.actual.dtype == torch.bfloat16 and pair.expected.dtype == torch.float32
    assert pair.actual.shape == pair.expected.shape == (4, 8)


def test_unpack_sampled_pair_gathers_the_stored_positions() -> None:
    ref = torch.randn(64, 8192)
    stored = pack_output("logits", ref)
    variant = (ref + 1).to(torch.bfloat16)
    pair = unpack_pair("logits", variant, stored)
    assert pair.sampled and pair.actual.shape == pair.expected.shape == (SAMPLE_SIZE,)
    assert torch.equal(pair.actual, variant.reshape(-1)[stored["logits.idx"]])
    assert torch.allclose(pair.actual.float() - pair.expected, torch.ones(SAMPLE_SIZE), atol=0.07)


@pytest.mark.parametrize(
    ("ref", "variant", "stored_txt", "actual_txt"),
    [
        (
            torch.zeros(4, 8),
            torch.zeros(8, 4),
            "stored shape [4, 8] float32",
            "shape [8, 4] float32",
        ),
        (torch.zeros(4, 8), torch.zeros(4, 8, dtype=torch.int32), "[4, 8] float32", "int32"),
        (
            torch.zeros(64, 8192),
            torch.zeros(8192, 64, dtype=torch.bfloat16),
            "stored shape [64, 8192] float32",
            "actual shape [8192, 64] bfloat16",
        ),
        (torch.zeros(64, 8192), torch.zeros(64, 8191), "[64, 8192]", "[64, 8191]"),
    ],
)
def test_unpack_pair_mismatch_names_key_shapes_and_dtypes(
    tmp_path: Path, ref: torch.Tensor, variant: torch.Tensor, stored_txt: str, actual_txt: str
) -> None:
    path = tmp_path / "g.safetensors"
    with pytest.raises(GoldenFormatError) as info:
        unpack_pair("out", variant, pack_output("out", ref), path=path, case=CASE, regen_hint=HINT)
    msg = str(info.value)
    assert "'out'" in msg and stored_txt in msg and actual_txt in msg
    assert str(path) in msg and CASE in msg and msg.endswith(HINT)
    assert info.value.path == path and info.value.case == CASE


def test_unpack_pair_sampled_without_shape_checks_numel() -> None:
    stored = pack_output("out", torch.zeros(64, 8192))
    del stored["out.shape"]
    assert unpack_pair("out", torch.zeros(8192, 64), stored).sampled  # numel fits
    with pytest.raises(GoldenFormatError, match="numel differs"):
        unpack_pair("out", torch.zeros(64, 8191), stored)


def test_unpack_pair_unknown_key_lists_stored_outputs() -> None:
    stored = {**pack_output("a", torch.zeros(3)), **pack_output("b", torch.zeros(FULL_LIMIT + 1))}
    with pytest.raises(GoldenFormatError, match=r"has no output 'c' \(it has: a, b\)"):
        unpack_pair("c", torch.zeros(3), stored)


# ---------------------------------------------------------------------------- fingerprints


def test_fingerprint_is_stable_and_order_independent() -> None:
    x = torch.randn(4, 5)
    q = torch.randn(8).to(torch.float8_e4m3fn)
    fp = input_fingerprint({"x": x, "q": q})
    assert len(fp) == 64
    assert fp == input_fingerprint({"q": q.clone(), "x": x.clone()})
    assert fp == input_fingerprint({"x": x.t().contiguous().t(), "q": q})  # layout does not matter


def test_fingerprint_changes_with_one_byte_dtype_shape_or_name() -> None:
    x = torch.arange(12, dtype=torch.int32)
    base = input_fingerprint({"x": x})
    flipped = x.clone()
    flipped.view(torch.uint8)[5] ^= 1
    assert input_fingerprint({"x": flipped}) != base
    assert input_fingerprint({"x": x.view(torch.float32)}) != base  # same bytes, other dtype
    assert input_fingerprint({"x": x.reshape(3, 4)}) != base
    assert input_fingerprint({"y": x}) != base
    bf = torch.randn(6).to(torch.bfloat16)
    assert input_fingerprint({"x": bf}) != input_fingerprint({"x": bf.view(torch.int16)})


def test_content_hash_covers_meta_but_not_itself() -> None:
    t = {"y": torch.ones(3)}
    h = content_hash(t, {"op": "a"})
    assert h == content_hash(t, {"op": "a", "content_hash": "whatever"})
    assert h != content_hash(t, {"op": "b"})
    assert h != content_hash({"y": torch.ones(4)}, {"op": "a"})


# ---------------------------------------------------------------------------- corruption


def test_flipped_byte_in_tensor_region_is_corrupt(tmp_path: Path) -> None:
    path = _save(tmp_path, {**pack_output("y", torch.randn(1000)), "z": torch.arange(7)})
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(GoldenCorrupt) as info:
        _load(path)
    msg = str(info.value)
    assert msg.splitlines()[0].startswith(f"golden {path} for case {CASE} is corrupt: content hash")
    assert msg.splitlines()[1] == (
        f"Fix: restore it from version control (git checkout -- {path}) "
        f"or regenerate it with: {HINT}"
    )


def test_edited_metadata_is_corrupt(tmp_path: Path) -> None:
    path = _save(tmp_path, {"y": torch.ones(2)})
    data = path.read_bytes()
    assert b'"device":"cpu"' in data
    path.write_bytes(data.replace(b'"device":"cpu"', b'"device":"cpX"'))
    with pytest.raises(GoldenCorrupt, match="content hash"):
        _load(path)


@pytest.mark.parametrize("keep", [0, 5, 8, 40, -1])
def test_truncated_file_is_corrupt(tmp_path: Path, keep: int) -> None:
    path = _save(tmp_path, {"y": torch.randn(100)})
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(GoldenCorrupt, match="not a readable safetensors file") as info:
        _load(path)
    assert HINT in str(info.value) and info.value.path == path and info.value.case == CASE


@pytest.mark.parametrize(
    "garbage", [b"garbage" * 10, b"\x10\x00\x00\x00\x00\x00\x00\x00[1, 2, 3, 4, 5]   "]
)
def test_garbage_file_is_corrupt(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "g.safetensors"
    path.write_bytes(garbage)
    with pytest.raises(GoldenCorrupt):
        _load(path)


def test_directory_in_place_of_golden_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    path.mkdir()
    with pytest.raises(GoldenCorrupt, match="cannot read it"):
        _load(path)


def test_nan_and_inf_are_not_rejected(tmp_path: Path) -> None:
    y = torch.tensor([float("nan"), float("inf"), float("-inf"), 1.0])
    assert summary_stats(_load(_save(tmp_path, {"y": y})).tensors["y"])[5:].tolist() == [1, 1, 1]


# ---------------------------------------------------------------------------- format


def _write_raw(path: Path, meta: dict[str, Any]) -> None:
    """Write a golden by hand with a valid content hash, bypassing save_golden's checks."""
    tensors = {"y": torch.ones(2)}
    encoded = {k: goldens._encode(v) for k, v in meta.items()}
    encoded["content_hash"] = content_hash(tensors, encoded)
    path.write_bytes(safetensors.torch.save(tensors, metadata=encoded))


def _full_meta(**over: Any) -> dict[str, Any]:
    meta = _meta(format_version=FORMAT_VERSION, shapes={"y": [2]}, dtypes={"y": "float32"})
    meta.update(over)
    return meta


def test_hand_written_valid_golden_loads(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    _write_raw(path, _full_meta())
    assert _load(path).meta["op"] == "mhc_pre"


def test_missing_meta_field_is_format_error(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    meta = _full_meta()
    del meta["device"], meta["seeds"]
    _write_raw(path, meta)
    with pytest.raises(GoldenFormatError, match="lacks required metadata: device, seeds") as info:
        _load(path)
    assert str(info.value).endswith(f"Fix: regenerate it with: {HINT}")


def test_plain_safetensors_without_metadata_is_format_error(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    path.write_bytes(safetensors.torch.save({"y": torch.ones(2)}))
    with pytest.raises(GoldenFormatError, match="format_version, op, case"):
        _load(path)


def test_newer_format_version_is_format_error(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    _write_raw(path, _full_meta(format_version=FORMAT_VERSION + 1))
    with pytest.raises(GoldenFormatError) as info:
        _load(path)
    assert str(info.value) == (
        f"golden {path} for case {CASE} has format_version {FORMAT_VERSION + 1}; "
        f"this numcheck reads up to {FORMAT_VERSION}\n"
        f"Fix: upgrade numcheck, or regenerate it with: {HINT}"
    )


@pytest.mark.parametrize("bad", [0, "one", True])
def test_invalid_format_version_is_format_error(tmp_path: Path, bad: Any) -> None:
    path = tmp_path / "g.safetensors"
    _write_raw(path, _full_meta(format_version=bad))
    with pytest.raises(GoldenFormatError, match="invalid format_version"):
        _load(path)


def test_save_refuses_incomplete_meta(tmp_path: Path) -> None:
    meta = _meta()
    del meta["fingerprint"]
    path = tmp_path / "g.safetensors"
    with pytest.raises(ValueError, match="lacks fingerprint"):
        save_golden(path, {"y": torch.ones(1)}, meta)
    assert not path.exists()


def test_save_fills_created_and_torch_version(tmp_path: Path) -> None:
    meta = _meta()
    del meta["created"], meta["torch_version"]
    path = tmp_path / "g.safetensors"
    save_golden(path, {"y": torch.ones(1)}, meta)
    golden = _load(path)
    assert golden.meta["torch_version"] == torch.__version__
    assert golden.meta["created"].endswith("+00:00")


# ---------------------------------------------------------------------------- missing, stale


def test_missing_golden_message(tmp_path: Path) -> None:
    path = tmp_path / "mhc_pre" / "t64.safetensors"
    with pytest.raises(GoldenMissing) as info:
        _load(path)
    assert str(info.value) == f"no golden at {path} for case {CASE}\nFix: create it with: {HINT}"
    assert isinstance(info.value, GoldenError) and info.value.path == path


def test_require_fresh_accepts_matching_golden(tmp_path: Path) -> None:
    golden = _load(_save(tmp_path, {"y": torch.ones(1)}))
    require_fresh(golden, op_version=1, fingerprint=FP, seeds=[1, 0], regen_hint=HINT)  # order-free


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"fingerprint": "cd" * 32}, f"input fingerprint {'ab' * 6} -> {'cd' * 6}"),
        ({"op_version": 2}, "op_version 1 -> 2"),
        ({"seeds": [0, 1, 2]}, "seeds [0, 1] -> [0, 1, 2]"),
    ],
)
def test_require_fresh_names_what_differs(
    tmp_path: Path, change: dict[str, Any], expected: str
) -> None:
    golden = _load(_save(tmp_path, {"y": torch.ones(1)}))
    args: dict[str, Any] = {"op_version": 1, "fingerprint": FP, "seeds": [0, 1], **change}
    with pytest.raises(GoldenStale) as info:
        require_fresh(golden, regen_hint=HINT, **args)
    first, fix = str(info.value).splitlines()
    assert first.startswith(f"golden {golden.path} for case {CASE} is stale: {expected}")
    assert ";" not in first  # only what differs
    assert fix == f"Fix: if the change is intended, regenerate it with: {HINT}"
    assert info.value.case == CASE


def test_require_fresh_lists_every_difference(tmp_path: Path) -> None:
    golden = _load(_save(tmp_path, {"y": torch.ones(1)}))
    with pytest.raises(GoldenStale) as info:
        require_fresh(golden, op_version=3, fingerprint="00" * 32, seeds=[5], regen_hint=HINT)
    msg = str(info.value)
    assert "op_version 1 -> 3" in msg and "fingerprint abababababab -> 000000000000" in msg
    assert "seeds [0, 1] -> [5]" in msg


# ---------------------------------------------------------------------------- writing


def test_atomic_write_keeps_original_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _save(tmp_path, {"y": torch.ones(4)})
    before = path.read_bytes()

    def boom(src: Any, dst: Any) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)  # what goldens calls
    with pytest.raises(OSError, match="disk on fire"):
        save_golden(path, {"y": torch.zeros(4)}, _meta())
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]
    fresh = path.parent / "new.safetensors"
    with pytest.raises(OSError, match="disk on fire"):
        save_golden(fresh, {"y": torch.zeros(4)}, _meta())
    assert os.listdir(path.parent) == [path.name]


def test_save_creates_parents_and_load_does_not_touch_the_file(tmp_path: Path) -> None:
    path = golden_path(tmp_path / "a" / "b", "indexer", "b1")
    save_golden(path, {"y": torch.ones(4)}, _meta())
    stat = path.stat()
    data = path.read_bytes()
    _load(path)
    assert path.read_bytes() == data and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert os.listdir(path.parent) == [path.name]


def test_same_content_gives_identical_bytes(tmp_path: Path) -> None:
    t = {**pack_output("s0/y", torch.randn(FULL_LIMIT + 7)), "s1/y": torch.randn(9)}
    many = {f"extra{i}": i for i in range(20)}  # safetensors' own metadata order is random
    a, b, c = tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "c.safetensors"
    save_golden(a, t, _meta(**many))
    save_golden(b, {k: v.clone() for k, v in t.items()}, _meta(**many))
    save_golden(c, t, _meta(created="2030-01-01T00:00:00+00:00", **many))
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    ga, gc = _load(a), _load(c)
    diff = {k for k in ga.meta if ga.meta[k] != gc.meta[k]}
    assert diff == {"created", "content_hash"}
    assert all(torch.equal(ga.tensors[k], gc.tensors[k]) for k in ga.tensors)


def test_required_meta_is_complete_after_save(tmp_path: Path) -> None:
    golden = _load(_save(tmp_path, {"y": torch.ones(1)}))
    assert set(REQUIRED_META) <= set(golden.meta)
