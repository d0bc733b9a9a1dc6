"""Determinism and batch invariance (numcheck.invariance, numcheck.check.invariance): bits
compared, a request's inputs alone, the case-file keys, and the planted counter-examples
each gate must catch while a correct variant passes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from numcheck.cases import Case, CaseFileError, load_case_file
from numcheck.check import held_gates, run_check
from numcheck.check.invariance import measure_invariance
from numcheck.check.make_golden import fresh_golden
from numcheck.invariance.bitwise import difference, differences
from numcheck.invariance.limits import DEFAULT_RUNS, InvarianceSpec, default_requests
from numcheck.ops import registry
from numcheck.ops.batch import (
    Batch,
    BatchAxis,
    batch_size,
    declaration_problems,
    request_inputs,
    request_outputs,
)
from numcheck.ops.registry import Variant
from tests import planted_invariance

GATES = {"determinism", "batch_invariance"}

MHC = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = [{variants}]
{keys}
"""
INDEXER = """
[tiny-idx]
op = "indexer"
shape = {{ batch = 4, max_context = 256, heads = 8, head_dim = 32, index_topk = 16, next_n = 2 }}
variants = [{variants}]
{keys}
"""


@pytest.fixture
def planted() -> Iterator[None]:
    """The planted counter-examples registered through the registry's public calls."""
    with registry.isolated():
        for op, variants in planted_invariance.PLANTED.items():
            for name, (fn, precision, _) in variants.items():
                registry.add_variant(op, Variant(name, fn, precision))
        yield


def load(tmp_path: Path, template: str, variants: str, keys: str) -> Case:
    path = tmp_path / "case.toml"
    path.write_text(template.format(variants=variants, keys=keys))
    (case,) = load_case_file(path)
    return case


# --- bits ------------------------------------------------------------------------------


def test_equal_bits_are_no_difference_and_zero_signs_or_nan_payloads_are() -> None:
    a = torch.tensor([1.0, 0.0, float("nan"), float("-inf")])
    assert difference("y", a, a.clone()) is None
    signed = difference("y", a, torch.tensor([1.0, -0.0, float("nan"), float("-inf")]))
    assert signed is not None and signed.differing == 1 and signed.first == (1,)
    assert signed.max_abs == 0.0  # equal values, other bits
    other_nan = a.clone().view(torch.int32)
    other_nan[2] += 1  # another NaN payload
    payload = difference("y", a, other_nan.view(torch.float32))
    assert payload is not None and payload.differing == 1 and payload.max_abs is None


def test_a_value_difference_says_how_many_where_and_how_far() -> None:
    a = torch.zeros(2, 3)
    b = a.clone()
    b[1, 2] = 2.0**-20
    d = difference("logits", a, b)
    assert d is not None and (d.kind, d.differing, d.total, d.first) == ("values", 1, 6, (1, 2))
    assert d.describe() == "logits: 1 of 6 elements differ (max |diff| 9.54e-07, first at (1, 2))"
    shape = difference("logits", a, torch.zeros(2, 4))
    assert shape is not None and shape.kind == "shape" and "[2, 3] against" in shape.describe()


def test_a_selection_is_told_apart_by_order_and_by_tokens() -> None:
    a = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int32)
    order = difference("topk", a, torch.tensor([[1, 3, 2], [4, 5, 6]], dtype=torch.int32),
                       selection=True)
    assert order is not None and (order.kind, order.rows) == ("order", 1)
    assert order.describe() == "topk: the same tokens in another order in 1 of 2 rows"
    tokens = difference("topk", a, torch.tensor([[1, 2, 7], [4, 5, 6]], dtype=torch.int32),
                        selection=True)
    assert tokens is not None and (tokens.kind, tokens.rows) == ("tokens", 1)
    assert differences({"topk": a}, {}, selection="topk")[0].kind == "shape"


# --- what a request is -----------------------------------------------------------------


def test_a_request_alone_is_its_entries_along_each_batched_axis() -> None:
    layout = Batch(inputs={"q": 0, "w": BatchAxis(0, per_request="n")},
                   outputs={"y": BatchAxis(1, per_request=2)}, size_param="batch")
    params = {"n": 3, "batch": 4}
    inputs = {"q": torch.arange(4).view(4, 1), "w": torch.arange(12), "shared": torch.ones(5)}
    assert batch_size(layout, inputs, params) == 4
    alone, sub = request_inputs(layout, inputs, params, [2])
    assert alone["q"].tolist() == [[2]] and alone["w"].tolist() == [6, 7, 8]
    assert alone["shared"] is inputs["shared"] and sub == {"n": 3, "batch": 1}
    rows = request_outputs(layout, {"y": torch.arange(16).view(2, 8)}, params, [1])
    assert rows["y"].tolist() == [[2, 3], [10, 11]]


def test_a_batch_whose_inputs_disagree_is_an_error() -> None:
    layout = Batch(inputs={"a": 0, "b": 0}, outputs={"y": 0})
    with pytest.raises(ValueError, match="disagree on the number of requests"):
        batch_size(layout, {"a": torch.ones(3), "b": torch.ones(4)}, {})
    with pytest.raises(ValueError, match="names input 'c'"):
        batch_size(Batch(inputs={"c": 0}, outputs={"y": 0}), {"a": torch.ones(3)}, {})


def test_a_bad_batch_declaration_is_refused_at_registration() -> None:
    problems = declaration_problems(
        Batch(inputs={"x": BatchAxis(0, per_request="rows")}, outputs={"z": 0},
              size_param="count"), ("y",), {"tokens": 1})
    text = " ".join(problems)
    assert "misses ['y']" in text and "names ['z']" in text
    assert "per_request 'rows'" in text and "size_param 'count'" in text
    op = registry.get_op("mhc_pre")
    from dataclasses import replace

    with registry.isolated(), pytest.raises(registry.RegistrationError, match="every output"):
        registry.register(replace(op, name="mhc_bad_batch",
                                  batch=Batch(inputs={"x": 0}, outputs={"y": 0})))


def test_the_shipped_ops_say_what_a_request_is() -> None:
    idx = registry.get_op("indexer")
    assert idx.batch is not None and idx.batch.size_param == "batch"
    assert registry.get_op("mhc_pre").batch is not None
    assert default_requests(1) == (0,) and default_requests(4) == (0, 2, 3)


# --- the case-file keys ----------------------------------------------------------------


def test_the_keys_are_off_by_default_and_take_each_form(tmp_path: Path) -> None:
    off = load(tmp_path, MHC, '"bf16"', "")
    assert off.deterministic is None and off.batch_invariant is None
    assert held_gates(off, "bf16", "cpu", GATES) == set()
    on = load(tmp_path, MHC, '"bf16", "tf32"',
              'deterministic = true\nbatch_invariant = ["tf32"]')
    assert on.deterministic == InvarianceSpec(("fp32", "bf16", "tf32"), ("cpu", "cuda"))
    assert on.deterministic.runs == DEFAULT_RUNS
    assert on.batch_invariant is not None and on.batch_invariant.variants == ("tf32",)
    assert held_gates(on, "bf16", "cpu", GATES | {"casts"}) == {"casts", "determinism"}
    table = load(tmp_path, INDEXER, '"bf16"', 'deterministic = { runs = 5, devices = ["H100"] }\n'
                 'batch_invariant = { variants = ["bf16"], requests = [1, 3] }')
    assert table.deterministic is not None and table.deterministic.runs == 5
    assert not table.deterministic.holds("bf16", "cpu") and table.deterministic.holds("bf16", "cuda")
    assert table.batch_invariant is not None and table.batch_invariant.requests == (1, 3)
    # Measured on CUDA; it fails a check on the GPU model it names, reports on any other.
    det = table.deterministic
    assert det.gates_on("H100", "cuda") and not det.gates_on("B200", "cuda")
    assert det.unset("B200", "deterministic") == (
        "deterministic names no B200 (H100 only): measured and reported, not gated; measure "
        "B200's: python -m numcheck onboard --only invariance")
    # The short form takes the case's devices: the CPU is gated, a GPU model is not named.
    assert on.deterministic.gates_on("cpu", "cpu") and not on.deterministic.gates_on("H200", "cuda")
    every = load(tmp_path, INDEXER, '"bf16"',
                 'deterministic = { devices = ["cpu", "cuda"], every_class = true }')
    assert every.deterministic is not None and every.deterministic.gates_on("B200", "cuda")


@pytest.mark.parametrize(("keys", "key", "fragment", "fix"), [
    ('deterministic = ["bf16_roundtrip"]', "deterministic.variants",
     "'bf16_roundtrip' is not one of the variants this case runs", 'variants = ["bf16"]'),
    ('deterministic = { runs = 1 }', "deterministic.runs", "from 2 to 100", "runs = 6"),
    ('deterministic = { requests = [0] }', "deterministic.requests", "unknown key 'requests'",
     "variants, devices, every_class, runs"),
    ('batch_invariant = { devices = ["tpu"] }', "batch_invariant.devices",
     "'tpu' is not a device class numcheck knows", "a model numcheck does not list yet"),
    # A GPU's gate keyed by the kind: what one model was measured to do held on every one.
    ('batch_invariant = { devices = ["cuda"] }', "batch_invariant.devices",
     "'cuda' is a device kind, not a GPU model", "every_class = true"),
    ('batch_invariant = { devices = ["cpu", "cpu"] }', "batch_invariant.devices",
     "a name is listed twice", "list each once"),
    ('devices = ["cpu"]\nbatch_invariant = { devices = ["H200"] }', "batch_invariant.devices",
     "'H200' runs as cuda, which is not one of the case's devices (cpu)",
     'devices = ["cpu", "H200"]'),
    ('deterministic = { devices = ["cuda"], every_class = "yes" }', "deterministic.every_class",
     "expected true or false", "every_class = true"),
    ('deterministic = { devices = ["cpu", "H200"], every_class = true }',
     "deterministic.every_class", "devices has no cuda", 'add "cuda"'),
    ('batch_invariant = { requests = [0, 8] }', "batch_invariant.requests",
     "request 8 is not in the case's batch of 8 (tokens)", "from 0 to 7"),
    ('deterministic = "yes"', "deterministic", "expected true, false, a list of variants",
     "deterministic = true"),
    ('perf_only = true\ndevices = ["cuda"]\ndeterministic = true', "deterministic",
     "a perf-only case runs no numerics", "remove the key"),
    ('expect.bf16 = { gates = ["determinism"], reason = "x" }', "expect.bf16",
     "holds 'bf16' only where the case's deterministic key names it", "add 'bf16' to"),
])
def test_a_bad_key_names_the_file_the_case_the_key_and_the_fix(
        tmp_path: Path, keys: str, key: str, fragment: str, fix: str) -> None:
    with pytest.raises(CaseFileError) as err:
        load(tmp_path, MHC, '"bf16"', keys)
    assert (err.value.case, err.value.key) == ("tiny-mhc", key)
    assert fragment in err.value.problem, err.value.problem
    assert fix in err.value.fix, err.value.fix


def test_batch_invariance_of_an_op_that_names_no_request_is_an_error(tmp_path: Path) -> None:
    from dataclasses import replace

    op = replace(registry.get_op("mhc_pre"), name="mhc_unbatched", batch=None)
    with registry.isolated():
        registry.register(op)
        with pytest.raises(CaseFileError, match=r"does not say what a request of its batch is.*"
                           r"Fix: declare OpSpec\(batch=numcheck.Batch"):
            load(tmp_path, MHC.replace('"mhc_pre"', '"mhc_unbatched"'), '"bf16"',
                 "batch_invariant = true")


# --- the gates on a check: the planted counter-examples fail, correct variants pass -----


def test_an_atomic_style_reduction_fails_determinism_alone(tmp_path: Path, planted: None) -> None:
    for template, op_name, variant in ((MHC, "mhc_pre", "atomic_splitk"),
                                      (INDEXER, "indexer", "atomic_heads")):
        case = load(tmp_path, template, f'"{variant}"', "deterministic = true")
        op = registry.get_op(op_name)
        golden, inputs = fresh_golden(op, case)
        result = run_check(op, case, variant, "cpu", inputs, golden, gates=GATES)
        # The numerics pass (fp32 sums in another order); the gate alone catches it.
        assert [v.key for v in result.violations] == ["determinism.runs_differing"], variant
        top = result.violations[0]
        assert top.value == DEFAULT_RUNS - 1 and top.limit == 0 and top.seed == 0
        assert "differs from run 1:" in top.detail and "not deterministic" in top.detail
        assert result.invariance is not None
        assert len(result.invariance.run_differences) == DEFAULT_RUNS - 1
        # Off (the default), the same variant passes: nothing else sees it.
        off = load(tmp_path, template, f'"{variant}"', "")
        assert run_check(op, off, variant, "cpu", inputs, golden, gates=GATES).passed


def test_the_default_runs_catch_a_three_way_order_with_99_percent(
        tmp_path: Path, planted: None) -> None:
    """Three bf16 partials added in a random order give one of three results per call. The
    gate misses it only when every one of its calls gives the same: over every sequence of
    results its DEFAULT_RUNS calls can give (each equally likely), it misses exactly the 3
    constant ones, 3^(1 - k) of them: under 1% (with 3 calls it was 1 in 9)."""
    case = load(tmp_path, MHC.replace("tokens = 8, hidden = 64",
                                      "tokens = 1, hidden = 12, sinkhorn_iters = 1"),
                '"atomic3_bf16"', "deterministic = true")
    op = registry.get_op("mhc_pre")
    inputs = op.make_inputs(case.params, case.seeds[0])
    outs = {}
    for pick in range(3):  # the three orders really give three results
        planted_invariance.ORDERS = iter([pick])
        outs[pick] = op.variants["atomic3_bf16"].fn(inputs, case.params)["mixes"]
    assert not any(torch.equal(outs[a], outs[b]) for a, b in ((0, 1), (0, 2), (1, 2)))
    runs = DEFAULT_RUNS
    missed = 0
    try:
        for sequence in itertools.product(range(3), repeat=runs):
            planted_invariance.ORDERS = iter(sequence)
            report = measure_invariance(op, case, "atomic3_bf16", "cpu", inputs,
                                        determinism=True, batch=False)
            assert report.runs == runs
            missed += not report.run_differences
    finally:
        planted_invariance.ORDERS = None
    assert missed == 3 and missed / 3**runs <= 0.01


def test_split_k_chosen_by_batch_size_fails_batch_invariance(tmp_path: Path, planted: None) -> None:
    for template, op_name in ((MHC, "mhc_pre"), (INDEXER, "indexer")):
        case = load(tmp_path, template, '"splitk_by_batch"',
                    "deterministic = true\nbatch_invariant = true")
        op = registry.get_op(op_name)
        golden, inputs = fresh_golden(op, case)
        result = run_check(op, case, "splitk_by_batch", "cpu", inputs, golden, gates=GATES)
        # Deterministic, within the numerics budget, and batch-variant: that gate alone.
        assert [v.key for v in result.violations] == ["batch_invariance.requests_differing"]
        v = result.violations[0]
        assert v.value >= 1 and "alone differs from its rows in the batch of" in v.detail
        report = result.invariance
        assert report is not None and report.runs and not report.run_differences
        assert report.batch is not None
        assert report.requests == tuple(default_requests(report.batch))


def test_correct_variants_pass_both_gates_on_the_cpu(tmp_path: Path) -> None:
    # The shipped indexer variants that run here hold both (measured: docs/reliability.md);
    # a request's rows are next_n = 2 rows of logits and of top-k.
    case = load(tmp_path, INDEXER, '"bf16", "tf32", "bf16_folded"',
                "deterministic = true\nbatch_invariant = true")
    op = registry.get_op("indexer")
    golden, inputs = fresh_golden(op, case)
    for variant in ("fp32", "bf16", "tf32", "bf16_folded"):
        result = run_check(op, case, variant, "cpu", inputs, golden, gates=GATES)
        assert result.passed, (variant, [v.describe() for v in result.violations])
        assert result.invariance is not None
        assert result.invariance.compared == ("logits", "topk")
        assert result.invariance.requests == (0, 2, 3)


def test_a_gate_the_case_turns_on_for_another_device_does_not_run(tmp_path: Path,
                                                                  planted: None) -> None:
    case = load(tmp_path, MHC, '"atomic_splitk"', 'deterministic = { devices = ["H200"] }')
    op = registry.get_op("mhc_pre")
    golden, inputs = fresh_golden(op, case)
    result = run_check(op, case, "atomic_splitk", "cpu", inputs, golden, gates=GATES)
    assert result.passed and result.invariance is None


def _measured(folder: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(case, variant) pairs measured, and those batch-invariant at every point measured
    with a batch of more than one request."""
    import json

    measured: set[tuple[str, str]] = set()
    invariant: set[tuple[str, str]] = set()
    broken: set[tuple[str, str]] = set()
    for path in folder.glob("*.json"):
        for row in json.loads(path.read_text())["rows"]:
            key = (row["case"].split("@")[0], row["variant"])
            measured.add(key)
            if row["batch"] > 1:
                (broken if row["requests_differing"] else invariant).add(key)
    return measured, invariant - broken


def _measured_onboard(path: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The same from ``python -m numcheck onboard``'s JSON: the (case, variant) pairs
    deterministic at every point measured, and those batch-invariant at every point."""
    import json

    from tests.shipped import shipped_cases

    ops = {c.table: c.op for c in shipped_cases()}
    held: dict[str, set[tuple[str, str]]] = {"deterministic": set(), "batch_invariant": set()}
    broken: dict[str, set[tuple[str, str]]] = {"deterministic": set(), "batch_invariant": set()}
    for key in json.loads(path.read_text())["invariance"]["keys"]:
        for row in key["rows"]:
            pair = (f"{ops[key['case']]}::{key['case']}", row["variant"])
            (broken if row["differing"] else held)[key["key"]].add(pair)
    return (held["deterministic"] - broken["deterministic"],
            held["batch_invariant"] - broken["batch_invariant"])


def _measured_many(path: Path) -> dict[str, tuple[set[tuple[str, str]], set[tuple[str, str]]]]:
    """The same from a benchmarks/numerics/many_seeds.py run, per gate: the (case, variant) pairs
    that held on every seed and point measured (batch invariance: where more than one
    request was compared), and those a seed or point broke."""
    import gzip
    import json

    held: dict[str, set[tuple[str, str]]] = {"determinism": set(), "batch_invariance": set()}
    broke: dict[str, set[tuple[str, str]]] = {"determinism": set(), "batch_invariance": set()}
    for line in gzip.decompress(path.read_bytes()).decode().splitlines():
        row = json.loads(line)
        for variant, cell in row["variants"].items():
            for gate in held:
                got = cell.get(gate)
                if got is not None and (gate == "determinism" or got["of"] > 1):
                    (broke if got["differing"] else held)[gate].add((row["case"], variant))
    return {gate: (held[gate] - broke[gate], broke[gate]) for gate in held}


def test_the_shipped_cases_turn_the_keys_on_where_they_were_measured_to_hold() -> None:
    # cases/*.toml: measured with benchmarks/reliability/invariance.py on the CPU
    # (docs/evidence/2026-12-04-cpu-invariance) and on an H200
    # (docs/evidence/2026-12-04-h200-invariance), and with benchmarks/numerics/many_seeds.py on 50
    # fresh CPU seeds (docs/evidence/2026-12-06-cpu-coverage: a key holds there only if it
    # held on every seed). Every numerics case deterministic for every variant on each device
    # it was measured on, the CPU always (a case new since the H200 run claims the CPU alone
    # until the GPU regression run measures it); batch_invariant only for variants measured
    # invariant on each device it names (never mHC on the CPU: torch's CPU GEMM blocks rows
    # by the token count).
    from tests.shipped import shipped_cases

    root = Path(__file__).resolve().parent.parent
    evidence = root / "docs" / "evidence"
    cpu, h200 = (_measured(evidence / "2026-12-04-cpu-invariance"),
                 _measured(evidence / "2026-12-04-h200-invariance"))
    many = _measured_many(evidence / "2026-12-06-cpu-coverage" / "many-seeds-20000.jsonl.gz")
    det, bat = many["determinism"], many["batch_invariance"]
    on = {"cpu": ((cpu[0] | det[0]) - det[1], (cpu[1] | bat[0]) - bat[1]), "H200": h200,
          "H100": _measured_onboard(evidence / "2026-12-06-h100-onboard" / "onboard-H100.json")}
    cases = [c for c in shipped_cases() if not c.perf_only]
    assert cases
    for case in cases:
        op = registry.get_op(case.op)
        name = f"{case.op}::{case.id.split('@')[0]}"
        assert case.deterministic is not None, case.id
        assert set(case.deterministic.variants) == {op.reference, *case.variants}, case.id
        assert "cpu" not in case.devices or "cpu" in case.deterministic.devices, case.id
        for device in case.deterministic.devices:  # measured on every class the key names
            assert (name, case.variants[0]) in on[device][0], (case.id, device)
        if case.batch_invariant is None:
            continue
        if case.op == "mhc_pre":
            assert "cpu" not in case.batch_invariant.devices, case.id
        for device in case.batch_invariant.devices:
            for variant in case.batch_invariant.variants:
                assert (name, variant) in on[device][1], (case.id, variant, device,
                                                          "not measured to hold")
