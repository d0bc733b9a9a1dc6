"""Known-bad variants in case files: ``expect.<variant> = { outputs | gates | metrics = [...],
reason = ... }``."""

from __future__ import annotations

from pathlib import Path

import pytest

from numcheck.cases import CaseFileError, Expectation, load_case_file
from numcheck.check import run_check, settle_expected
from numcheck.gates import GATES, Gate, gate_registered, register_gate
from numcheck.numerics.verdict import Violation
from tests.caseproject import PLANTED, case_project, write_goldens

CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = [{variants}]
{expect}
"""


def write(tmp_path: Path, variants: str, expect: str) -> Path:
    path = tmp_path / "mhc.toml"
    path.write_text(CASE.format(variants=variants, expect=expect))
    return path


def test_expectation_is_parsed(tmp_path: Path) -> None:
    path = write(tmp_path, '"bf16_roundtrip"',
                 'expect.bf16_roundtrip = { fails = ["y.rel_fro"], reason = "known" }')
    (case,) = load_case_file(path)
    assert case.expect["bf16_roundtrip"].fails == ("y.rel_fro",)
    assert case.expect["bf16_roundtrip"].reason == "known"


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ('expect.tf32 = { fails = ["y.rel_fro"], reason = "x" }',
         "key 'expect.tf32': 'tf32' is not a variant this case runs"),
        ('expect.bf16 = { fails = ["y.rel_fro"] }',
         "needs a reason and what is expected to fail (outputs, gates or metrics)"),
        ('expect.bf16 = { reason = "x" }',
         "needs a reason and what is expected to fail (outputs, gates or metrics)"),
        ('expect.bf16 = { fail = ["y.rel_fro"], reason = "x" }', "unknown key 'fail'"),
        ('expect.bf16 = { fails = [], reason = "x" }', "expected a non-empty list"),
        ('expect.bf16 = { fails = ["y.recall_min"], reason = "x" }',
         "unknown gate metric 'y.recall_min'"),
        ('expect.bf16 = { fails = ["speed.up"], reason = "x" }', "unknown gate metric 'speed.up'"),
        ('expect.bf16 = { fails = ["y.rel_fro"], reason = "" }', "expected a non-empty string"),
        ("expect = 3", "key 'expect': expected a table, got integer 3"),
        ("perf = 3", "key 'perf': expected a table, got integer 3"),
    ],
)
def test_bad_expectations_name_file_case_key(tmp_path: Path, expect: str, message: str) -> None:
    with pytest.raises(CaseFileError) as info:
        load_case_file(write(tmp_path, '"bf16"', expect))
    text = str(info.value)
    assert "mhc.toml: case 'tiny-mhc'" in text and message in text and "Fix:" in text


def test_registered_gates_are_accepted(tmp_path: Path) -> None:
    # A throwaway name: "casts" and "kernels" are built in (numcheck.gates).
    with gate_registered(Gate("planted", ("round_trips",))):
        path = write(tmp_path, '"bf16"',
                     'expect.bf16 = { fails = ["planted.round_trips"], reason = "x" }')
        (case,) = load_case_file(path)
        assert case.expect["bf16"].fails == ("planted.round_trips",)
        with pytest.raises(ValueError, match="different gate"):
            register_gate(Gate("planted", ("other",)))
    assert "planted" not in GATES
    with pytest.raises(CaseFileError, match="planted"):
        load_case_file(path)


def project(pytester: pytest.Pytester, variants: str, expect: str) -> None:
    case_project(pytester, {"mhc.toml": CASE.format(variants=variants, expect=expect)},
                 conftest=PLANTED)
    write_goldens(pytester)


def test_caught_known_bad_variant_is_xfailed(pytester: pytest.Pytester) -> None:
    project(pytester, '"y_scaled"',
            'expect.y_scaled = { fails = ["y.rel_fro", "y.calc_diff"], reason = "planted" }')
    result = pytester.runpytest("--numcheck", "-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*expected failure (y.rel_fro): planted*"])


def test_known_bad_variant_that_passes_fails_strictly(pytester: pytest.Pytester) -> None:
    project(pytester, '"tf32"', 'expect.tf32 = { fails = ["y.rel_fro"], reason = "should fail" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck XPASS(strict) mhc_pre::tiny-mhc::tf32[[]cpu[]]",
            "  expected y.rel_fro to fail (should fail),",
            "  but the variant passed it: the gate no longer catches this known-bad variant.",
        ]
    )


def test_failure_outside_the_expectation_is_a_failure_that_shows_it(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, '"y_scaled"', 'expect.y_scaled = { fails = ["mixes.rel_fro"], reason = "x" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        ("numcheck FAIL mhc_pre::tiny-mhc::y_scaled[[]cpu[]]: known-bad, and it fails outside "
        "its expectation"),
        "  worst: y.rel_fro = * > budget 0.01 (seed 0)",
        "  expected:    metrics mixes.rel_fro (x)",
        "  outside it:  y.rel_fro = * > budget 0.01 (seed 0)",
        "  not caught:  mixes.rel_fro (expected to fail, passed)",
    ])


def test_inactive_gate_leaves_the_check_ordinary(pytester: pytest.Pytester) -> None:
    # The perf gate (numcheck.perf.limits) is active only with --numcheck-perf.
    project(pytester, '"tf32"', 'expect.tf32 = { fails = ["perf.speedup_min"], reason = "slow" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=2)


def test_every_expected_gate_must_still_catch(pytester: pytest.Pytester) -> None:
    # Two gates expected; only the y numerics catch the planted bug, the mixes do not.
    project(pytester, '"y_scaled"',
            'expect.y_scaled = { fails = ["y.rel_fro", "mixes.rel_fro"], reason = "planted" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck XPASS(strict) mhc_pre::tiny-mhc::y_scaled[[]cpu[]]",
            "  expected mixes.rel_fro to fail (planted),",
        ]
    )


# --- what kind of failure: an output, a gate, or metrics (issue 33, item 5) ---------------


def test_each_form_is_parsed_and_covers_its_kind(tmp_path: Path) -> None:
    path = write(tmp_path, '"bf16_roundtrip"', 'expect.bf16_roundtrip = { outputs = ["y"], '
                 'gates = ["casts", "perf"], metrics = ["mixes.rel_fro"], reason = "known" }')
    (case,) = load_case_file(path)
    e = case.expect["bf16_roundtrip"]
    assert (e.outputs, e.gates, e.metrics) == (("y",), ("casts", "perf"), ("mixes.rel_fro",))
    assert e.describe() == "outputs y; gates casts, perf; metrics mixes.rel_fro"
    # An output named whole covers every metric of it, a gate each of its metrics but the
    # perf gate's undecided (noise never catches a known-bad variant).
    assert all(e.covers(f"y.{m}") for m in ("rel_fro", "max_band_ratio", "nan", "posinf_count"))
    assert all(e.covers(f"casts.{m}") for m in GATES["casts"].metrics)
    assert e.covers("perf.speedup_min") and not e.covers("perf.speedup_undecided")
    assert e.covers("mixes.rel_fro") and not e.covers("mixes.calc_diff")
    assert e.targets() == {"y": None, "casts": GATES["casts"].metrics,
                           "perf": ("speedup_min",), "mixes": ("rel_fro",)}
    # ``fails`` keeps its meaning for older readers: every key the expectation covers.
    assert "casts.round_trips" in e.fails and "y.calc_diff" in e.fails
    # ``metrics`` is ``fails``'s newer name: the two read the same.
    old, new = (load_case_file(write(tmp_path, '"bf16"', f'expect.bf16 = {{ {k} = '
                                     '["y.rel_fro"], reason = "x" }'))[0].expect["bf16"]
                for k in ("fails", "metrics"))
    assert old == new


@pytest.mark.parametrize(
    ("variants", "expect", "key", "message", "fix"),
    [
        ('"bf16"', 'expect.bf16 = { outputs = ["z"], reason = "x" }', "expect.bf16.outputs",
         "unknown output 'z'", "use outputs of op 'mhc_pre': mixes, pre, post, comb, y"),
        ('"bf16"', 'expect.bf16 = { outputs = ["casts"], reason = "x" }', "expect.bf16.outputs",
         "unknown output 'casts'", "'casts' is a gate: write gates = [\"casts\"]"),
        ('"bf16"', 'expect.bf16 = { gates = ["y"], reason = "x" }', "expect.bf16.gates",
         "unknown gate 'y'", "'y' is an output: write outputs = [\"y\"]"),
        ('"bf16"', 'expect.bf16 = { gates = [], reason = "x" }', "expect.bf16.gates",
         "expected a non-empty list", "write expect"),
        ('"bf16"', 'expect.bf16 = { gates = "casts", reason = "x" }', "expect.bf16.gates",
         "expected a non-empty list", "write expect"),
        ('"bf16"', 'expect.bf16 = { metrics = ["y.rel_fro"], fails = ["y.rel_fro"], reason = "x" }',
         "expect.bf16.fails", "fails is the older name of metrics: both given", "keep one"),
        ('"bf16"', 'expect.bf16 = { metrics = ["y.max_abs"], reason = "x" }', "expect.bf16",
         ("it expects y.max_abs to fail, which is no limit of 'bf16''s budget on 'y', so it can "
         "never fail"), 'expect outputs = ["y"] (any of its violations), or set a max_abs limit'),
        ('"bf16"', 'devices = ["cpu"]\nexpect.bf16 = { gates = ["kernels"], reason = "x" }',
         "expect.bf16", "it expects the kernels gate to fail, which audits CUDA kernels only",
         'add "cuda"'),
        ('"bf16"',
         'devices = ["cpu"]\nexpect.bf16 = { metrics = ["kernels.copy_share"], reason = "x" }',
         "expect.bf16",
         "'bf16' is never checked on CUDA in this case", 'add "cuda"'),
        ('"bf16"', 'perf_only = true\nexpect.bf16 = { outputs = ["y"], reason = "x" }',
         "expect.bf16", "a perf-only case runs no numerics", "expect gates of this case"),
    ],
)
def test_an_expectation_that_could_never_be_met_names_file_case_key_fix(
        tmp_path: Path, variants: str, expect: str, key: str, message: str, fix: str) -> None:
    with pytest.raises(CaseFileError) as info:
        load_case_file(write(tmp_path, variants, expect))
    err = info.value
    assert (err.case, err.key) == ("tiny-mhc", key)
    assert message in err.problem and fix in err.fix, str(err)


def violation(key: str) -> Violation:
    output, _, metric = key.partition(".")
    return Violation(output, metric, 1.0, 0.0)


def expectation(tmp_path: Path, variant: str, text: str) -> Expectation:
    (case,) = load_case_file(write(tmp_path, f'"{variant}"', f"expect.{variant} = {text}"))
    return case.expect[variant]


def test_a_gate_expectation_takes_any_violation_of_the_gate_but_noise(tmp_path: Path) -> None:
    gates = expectation(tmp_path, "bf16", '{ gates = ["casts", "perf"], reason = "slow" }')
    on = {"casts", "perf"}.__contains__
    caught = settle_expected(gates, [violation("casts.input_copies"),
                                     violation("perf.speedup_min")], on)
    assert caught is not None and caught.xfail
    assert caught.caught == ("casts.input_copies", "perf.speedup_min")
    # An undecided speedup is noise: it catches nothing, and it falls outside.
    noisy = settle_expected(gates, [violation("casts.round_trips"),
                                    violation("perf.speedup_undecided")], on)
    assert noisy is not None and not noisy.xfail
    assert noisy.missed == ("perf",)
    assert [v.key for v in noisy.outside] == ["perf.speedup_undecided"]
    # Without --numcheck-perf only the casts gate is expected to catch it.
    casts_only = settle_expected(gates, [violation("casts.round_trips")], "casts".__eq__)
    assert casts_only is not None and casts_only.xfail


def test_an_output_expectation_takes_any_violation_of_the_output(tmp_path: Path) -> None:
    y = expectation(tmp_path, "bf16", '{ outputs = ["y"], reason = "planted" }')
    on = {"mixes", "pre", "post", "comb", "y"}.__contains__
    for keys in (["y.rel_fro", "y.calc_diff"], ["y.max_band_ratio"], ["y.nan"]):
        settled = settle_expected(y, [violation(k) for k in keys], on)
        assert settled is not None and settled.xfail and settled.caught == tuple(sorted(keys))
    # Another output failing too is outside the expectation; y not failing is a miss.
    both = settle_expected(y, [violation("y.rel_fro"), violation("mixes.rel_fro")], on)
    assert both is not None and not both.xfail and [v.key for v in both.outside] == [
        "mixes.rel_fro"]
    missed = settle_expected(y, [], on)
    assert missed is not None and missed.missed == ("y",) and not missed.outside


#: The planted bug whose symptom depends on the seed (tests/planted.py): on these seeds of
#: the tiny case y is 3% off (rel_fro, calc_diff, frac_outside, max_err_ratio), on those one
#: element of y is (max_band_ratio, with max_err_ratio on some).
SCALE_SEEDS, ELEMENT_SEEDS = (0, 7), (1, 2)
SEED_CASE = """
[{name}]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
seeds = [{seed}]
variants = ["y_seed_dependent"]
expect.y_seed_dependent = {{ {what}, reason = "planted" }}
"""
#: What seed 0's run fails: the list a user would copy into the case file.
SEED0_METRICS = 'metrics = ["y.rel_fro", "y.calc_diff", "y.frac_outside", "y.max_err_ratio"]'


def test_a_seed_dependent_bug_is_xfail_on_every_seed_when_its_output_is_named(
        tmp_path: Path) -> None:
    from numcheck.check.make_golden import fresh_golden
    from numcheck.ops import registry
    from tests import planted

    with registry.isolated():
        planted.register_all()
        op = registry.get_op("mhc_pre")
        tripped, verdicts = {}, {}
        for seed in (*SCALE_SEEDS, *ELEMENT_SEEDS):
            for form in ('outputs = ["y"]', SEED0_METRICS):
                path = tmp_path / "mhc.toml"
                path.write_text(SEED_CASE.format(name="s", seed=seed, what=form))
                (case,) = load_case_file(path)
                golden, inputs = fresh_golden(op, case)
                result = run_check(op, case, "y_seed_dependent", "cpu", inputs, golden)
                tripped[seed] = frozenset(v.key for v in result.violations)
                assert result.settled is not None
                verdicts[seed, form] = result.settled.xfail
        # The seeds trip different metrics: the planted bug is seed-dependent indeed.
        assert tripped[0] == {"y.rel_fro", "y.calc_diff", "y.frac_outside", "y.max_err_ratio"}
        assert all(tripped[s] == tripped[0] for s in SCALE_SEEDS)
        assert all("y.max_band_ratio" in tripped[s] and "y.rel_fro" not in tripped[s]
                   for s in ELEMENT_SEEDS)
        # Named by its output: XFAIL on every seed. By seed 0's metrics: on its kind only.
        assert all(verdicts[s, 'outputs = ["y"]'] for s in (*SCALE_SEEDS, *ELEMENT_SEEDS))
        assert all(verdicts[s, SEED0_METRICS] for s in SCALE_SEEDS)
        assert not any(verdicts[s, SEED0_METRICS] for s in ELEMENT_SEEDS)


def test_the_message_shows_the_expectation_and_what_it_leaves_out(
        pytester: pytest.Pytester) -> None:
    case_project(pytester, {"mhc.toml": "".join(
        SEED_CASE.format(name=f"{kind}-s{seed}", seed=seed, what=what)
        for kind, what in (("out", 'outputs = ["y"]'), ("met", SEED0_METRICS))
        for seed in (SCALE_SEEDS[0], ELEMENT_SEEDS[0]))}, conftest=PLANTED)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-rx")
    result.assert_outcomes(passed=4, xfailed=3, failed=1)
    result.stdout.fnmatch_lines([
        ("*out-s0::y_seed_dependent*expected failure (y.calc_diff, y.frac_outside, "
        "y.max_err_ratio, y.rel_fro): planted*"),
        "*out-s1::y_seed_dependent*expected failure (y.max_band_ratio, y.max_err_ratio): planted*",
    ])
    result.stdout.fnmatch_lines([
        ("numcheck FAIL mhc_pre::met-s1::y_seed_dependent[[]cpu[]]: known-bad, and it fails "
        "outside its expectation"),
        "  worst: y.max_band_ratio = * > budget 8 *",
        "  also:  y.max_err_ratio = * > budget 2.9 *",
        "  expected:    metrics y.rel_fro, y.calc_diff, y.frac_outside, y.max_err_ratio (planted)",
        "  outside it:  y.max_band_ratio = * > budget 8 *",
        "",
        "  case:        cases/mhc.toml [[]met-s1[]]",
    ])
