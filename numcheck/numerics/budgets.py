"""Error budgets: how far each output of a variant may stray from its FP32 golden.

A case file gives a budget per variant and output, usually only the few keys it cares about;
:func:`complete_budget` fills in the rest from :data:`DEFAULT_BUDGETS`, keyed by the variant's
precision class. A budget given partly is completed from the table, never silently zero
(the habit of torch's ``_DTYPE_PRECISIONS``). A metric that is neither in the table nor given
is not gated at all. A metric the check cannot measure (``max_err_ratio`` of an op without a
rounding envelope: :class:`Unmeasured`) is never a limit: a key given for it is an error,
and its default is left out, so no budget claims a limit nothing gates.

Nothing here imports torch or pytest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from numcheck.errors import NumcheckError
from numcheck.numerics.budget_origin import Default, Given, NotMeasured, Origin
from numcheck.numerics.metric_names import ERROR_METRICS, SIM_METRICS, TOPK_LIMITS
from numcheck.precision import UNIT_ROUNDOFF, coarser

#: The band ``|x - y| <= atol + rtol * |y|``; ``frac_outside`` counts elements outside it.
BAND_KEYS = ("atol", "rtol")
#: How many elements may lie outside the band whatever ``frac_outside`` says (a count).
OUTSIDE_KEY = "max_outside"
#: How many rows (the output's first axis) may be set aside before the count: an honest error
#: that clusters in one token (an upstream scale a step off) must not fail a check.
OUTSIDE_ROWS_KEY = "max_outside_rows"
#: The most rows ``max_outside_rows`` may set aside (the metrics keep that many row counts).
MAX_OUTSIDE_ROWS = 8
#: Keys an ordinary (non-top-k) output budget accepts.
OUTPUT_KEYS = (*ERROR_METRICS, *SIM_METRICS, *BAND_KEYS, OUTSIDE_KEY, OUTSIDE_ROWS_KEY,
               "allow_nan")
#: Every limit an ordinary output's budget may hold: against the golden, and (a variant
#: with a declared quantization) against its simulated reference. The defaults rows hold
#: no simulated-reference limit: what an honest kernel may differ from it depends on the
#: declared accumulation and output, so its budget is calibrated on the scheme's honest
#: family (docs/budgets.md, "FP8 and FP4").
LIMIT_METRICS = (*ERROR_METRICS, *SIM_METRICS)
#: How close to the k-th score a flip counts as a near-tie: relative to it, or in score units.
TIE_BAND_KEYS = ("tie_band_rel", "tie_band_abs")
#: Keys the top-k output budget accepts.
TOPK_KEYS = (*TOPK_LIMITS, *TIE_BAND_KEYS)
#: ``[<case>.budget.<variant>] budget_like = "<other>"``: the variant takes the other's budget
#: tables, read as if they were written under its own name (numcheck.cases checks it). Named
#: here, without torch, for the case-file writers and the failure message too.
BUDGET_LIKE = "budget_like"

# docs/budgets.md explains each number. Any key of ERROR_METRICS or TOPK_LIMITS added to a
# row becomes gated by default for that precision; atol, rtol and one of tie_band_rel /
# tie_band_abs are required in every row. The fp16, fp8 and fp4 rows are derived from the
# bf16 row by :func:`scaled_row` (below the table).
_MEASURED_ROWS: Mapping[str, Mapping[str, float]] = {
    "fp32": {
        "rel_fro": 1e-5,
        "calc_diff": 1e-9,
        "frac_outside": 0.0,
        "atol": 1e-5,
        "rtol": 1e-5,
        "recall_min": 0.999,
        "tie_recall_min": 1.0,
        "tie_band_rel": 1e-5,
        "max_band_ratio": 8.0,
        "max_outside": 0,
    },
    "tf32": {
        "rel_fro": 2e-3,
        "calc_diff": 1e-6,
        "frac_outside": 1e-3,
        "atol": 1e-3,
        "rtol": 2e-3,
        "recall_min": 0.99,
        "tie_recall_min": 1.0,
        "tie_band_rel": 5e-3,
        "max_err_ratio": 2.9,
        "max_band_ratio": 8.0,
        "max_outside": 2,
    },
    "bf16": {
        "rel_fro": 1e-2,
        "calc_diff": 1e-4,
        "frac_outside": 1e-2,
        "atol": 1e-2,
        "rtol": 1.6e-2,
        "recall_min": 0.95,
        "tie_recall_min": 1.0,
        "tie_band_rel": 2e-2,
        "max_err_ratio": 2.9,
        "max_band_ratio": 8.0,
        "max_outside": 2,
    },
}

#: Keys that are widths of an error (they scale with the unit roundoff u), and keys that
#: are squares of one (calc_diff ~ rel_fro^2 / 2 for small errors: they scale with u^2).
_LINEAR_IN_U = ("rel_fro", "max_abs", "max_rel", "atol", "rtol", "tie_band_rel", "tie_band_abs")
_QUADRATIC_IN_U = ("calc_diff",)
#: Recall floors: the expected miss grows with the width of the error band (u).
_MISS_IN_U = ("recall_min", "recall_mean")


def scaled_row(row: Mapping[str, float], u_from: float, u_to: float) -> dict[str, float]:
    """A defaults row for a precision of unit roundoff ``u_to``, derived from a measured
    row at ``u_from`` the way the measured rows relate to their own u.

    Error widths scale with u, calc_diff with u^2, a recall floor's miss with u (floored at
    0); fractions of elements outside the band (the band scales too) and the scale-free
    ratios (``max_err_ratio``, ``max_band_ratio``) are kept.
    """
    k = u_to / u_from
    out: dict[str, float] = {}
    for key, value in row.items():
        if key in _LINEAR_IN_U:
            out[key] = float(f"{value * k:.2g}")
        elif key in _QUADRATIC_IN_U:
            out[key] = float(f"{value * k * k:.2g}")
        elif key in _MISS_IN_U:
            out[key] = max(0.0, round(1.0 - (1.0 - value) * k, 4))
        else:
            out[key] = value
    return out


#: Every precision class's defaults: the measured rows, and fp16 / fp8 / fp4 rows scaled
#: from bf16 (docs/budgets.md, "Precision classes").
DEFAULT_BUDGETS: Mapping[str, Mapping[str, float]] = {
    **_MEASURED_ROWS,
    **{
        p: scaled_row(_MEASURED_ROWS["bf16"], UNIT_ROUNDOFF["bf16"], UNIT_ROUNDOFF[p])
        for p in ("fp16", "e4m3", "e5m2", "e2m1")
    },
}

#: The simulated reference's default rows, by how the declared GEMM sums its products. The
#: simulated reference takes the quantization out (the op recomputed on the variant's own
#: quantized operands, exactly), so what an honest kernel differs from it by is its sums, its
#: output rounding and the op's epilogue, not its operand scheme: one row per kind of sums
#: serves every scheme. A row is a limit no honest member reaches on any op measured
#: (docs/budgets.md, "The simulated reference's default rows": every member of 1x128 /
#: 128x128 blocks, per row, per tensor, e4m3 as stored, NVFP4 and MXFP4 on the linear,
#: indexer and mHC ops and an MLP up-projection silu(x Wg^T) * (x Wu^T); CPU calibration
#: and held-out seeds, H200 seeds with the real kernels): promoted or float32 sums at most
#: 0.00368 sim_rel_fro (6.8e-6 sim_calc_diff), never promoted 0.0051 (1.3e-5, K = 16384).
#: The rows sit over 4x above them and under a 2% scale (0.02, 2e-4); sim_calc_diff is
#: sim_rel_fro^2 / 2, as for small errors. A variant declaring a quantization is held to its
#: row where its case sets no table, and calibration refuses a member measured past it
#: (numcheck.calibrate.guard).
SIM_DEFAULTS: Mapping[str, Mapping[str, float]] = {
    "fp32": {"sim_rel_fro": 0.016, "sim_calc_diff": 1.3e-4},
    "promoted": {"sim_rel_fro": 0.016, "sim_calc_diff": 1.3e-4},
    "none": {"sim_rel_fro": 0.035, "sim_calc_diff": 6.2e-4},
}
#: What each row's accumulation is called in messages.
SIM_ROW_NAMES = {"fp32": "float32 sums", "promoted": "promoted sums",
                 "none": "never-promoted sums"}


def sim_default_row(accumulation: Any) -> tuple[str, Mapping[str, float]] | None:
    """The simulated reference's default row of a declared accumulation
    (numcheck.precision.quant_accumulate.Accumulation), with its name: float32 sums, or a
    tensor core's as accurate as the one the rows were measured on (at least 13 kept bits,
    truncated or rounded to nearest, promoted at least every 128 of K). None for a model less
    accurate than that (fewer bits, rounding toward minus infinity, rarer promotions): no
    honest member of it was measured, so its variants need tables of their own."""
    kind = getattr(accumulation, "kind", None)
    if kind == "fp32":
        return SIM_ROW_NAMES[kind], SIM_DEFAULTS[kind]
    if kind not in ("promoted", "none"):
        return None
    measured = (accumulation.mantissa_bits >= 13 and accumulation.rounding in ("trunc", "rn")
                and (kind == "none" or accumulation.promote_every <= 128))
    return (SIM_ROW_NAMES[kind], SIM_DEFAULTS[kind]) if measured else None


# Keys whose value is a fraction, so it must lie in [0, 1].
_FRACTIONS = frozenset((*TOPK_LIMITS, "frac_outside"))


@dataclass(frozen=True)
class OutputBudget:
    """The budget of one ordinary output.

    ``limits`` maps each gated error metric (a key of :data:`ERROR_METRICS`) to the largest
    value allowed; metrics absent from it are not gated. ``atol`` and ``rtol`` define the band
    used by ``frac_outside``. ``allow_nan`` lets NaN in the output match NaN in the golden.
    """

    limits: Mapping[str, float]
    atol: float
    rtol: float
    allow_nan: bool = False
    #: Elements allowed outside the band even where ``frac_outside`` allows fewer: a rare
    #: honest element one step past the band, on a seed the calibration did not see, must not
    #: fail a check; how far past it may go is ``max_band_ratio``'s to bound.
    max_outside: int = 0
    #: Rows (the output's first axis: tokens) whose elements outside the band are set aside
    #: before ``frac_outside`` and ``max_outside`` are judged: the worst ones. Honest errors
    #: can cluster in a row, where an upstream per-row value (mHC's ``pre`` weights) is a
    #: rounding step off and a cancelling sum amplifies it; a bug spread over rows still counts.
    max_outside_rows: int = 0

    def frac_outside_limit(self, n_compared: int) -> float:
        """The ``frac_outside`` limit in force for an output of ``n_compared`` elements: the
        budget's fraction, or ``max_outside`` elements, whichever allows more."""
        limit = self.limits.get("frac_outside", math.inf)
        if self.max_outside and n_compared:
            return max(limit, self.max_outside / n_compared)
        return limit


@dataclass(frozen=True)
class TopkBudget:
    """The budget of a top-k indices output: selection agreement, not elementwise error.

    ``limits`` maps each gated key of :data:`TOPK_LIMITS` to the smallest value allowed.
    ``tie_band`` is the width of the near-tie band around the k-th score, relative to it
    when ``tie_band_kind`` is ``"rel"`` and in score units when it is ``"abs"``.
    """

    limits: Mapping[str, float]
    tie_band: float
    tie_band_kind: str


@dataclass(frozen=True)
class VariantBudget:
    """Every budget of one variant: ``outputs`` holds the ordinary outputs by name (all of
    them, the top-k indices output excepted); ``topk`` is the top-k budget, or None when the
    op has no top-k output. ``origins`` says where each key's value comes from (output ->
    key -> :mod:`numcheck.numerics.budget_origin` origin, the top-k output under its own
    name): decided where the budget is completed, read by whoever must say where a limit is
    set."""

    outputs: Mapping[str, OutputBudget]
    topk: TopkBudget | None
    #: Not compared: two budgets that hold the same limits gate the same, wherever each
    #: value was written (a case file's copies and its ``budget_like`` load equal).
    origins: Mapping[str, Mapping[str, Origin]] = field(default_factory=dict, compare=False)

    def origin(self, output: str, key: str) -> Origin | None:
        """Where ``key`` of ``output`` comes from (None for a key the budget does not hold)."""
        return self.origins.get(output, {}).get(key)


@dataclass(frozen=True)
class Unmeasured:
    """A metric that the checks of a variant cannot measure on an output (``max_err_ratio``
    without a rounding envelope: numcheck.honest.gemm_family.missing_envelope).

    A budget key for it is a :class:`BudgetError` with ``problem`` and ``fix``: a limit that
    gates nothing must not sit in a budget looking like one. ``nowhere``: on none of the
    devices the variant is checked on, so its default is left out of the budget; otherwise
    the default stays, gated where the metric is measured.
    """

    problem: str
    fix: str
    nowhere: bool = True


class BudgetError(NumcheckError):
    """A budget value or key that cannot be used.

    ``key`` is dotted and relative to the variant (``"<output>.<metric>"``), so a caller that
    knows the file and variant can prefix it; ``problem`` says what is wrong, ``fix`` how to
    repair it.
    """


def complete_budget(
    precision: str,
    given_outputs: Mapping[str, Mapping[str, Any]],
    *,
    outputs: Sequence[str],
    topk_output: str | None,
    output_precision: Mapping[str, str] | None = None,
    unmeasured: Mapping[str, Mapping[str, Unmeasured]] | None = None,
    given_origins: Mapping[str, Mapping[str, Origin]] | None = None,
    sims: tuple[str, Mapping[str, float]] | None = None,
) -> VariantBudget:
    """The full budget of a variant of precision class ``precision``, with the origin of
    every key (:attr:`VariantBudget.origins`).

    ``given_outputs`` maps output names to the keys a case gave for them (raw values, as read
    from TOML); every other key comes from the :data:`DEFAULT_BUDGETS` row of ``precision``.
    ``outputs`` names every output of the op; ``topk_output`` is the one holding top-k indices
    (it takes :data:`TOPK_KEYS`, the others :data:`OUTPUT_KEYS`). ``output_precision`` names
    outputs stored in a coarser dtype whatever the variant (mHC's ``y`` is bf16): their
    defaults come from the coarser of the two rows, since an fp32 path cannot be held to
    fp32 error on a bf16 output. ``unmeasured`` maps an output to the metrics its checks
    cannot measure (:class:`Unmeasured`): a key given for one of them is an error, and its
    default is dropped where it is measured nowhere (its origin: :class:`NotMeasured`).
    ``given_origins`` says where each given key comes from (output -> key; by default
    :class:`Given` in a table named after the output, at no known line); a key filled in
    is a :class:`Default` of the row it came from. ``sims``: a variant with a declared
    quantization, the simulated reference's default row of its sums (:func:`sim_default_row`,
    its name and values), filling the ``sim_*`` keys of every ordinary output the case
    leaves out.

    Raises :class:`BudgetError` for an unknown output or key, a key for a metric that cannot
    be measured, a value of the wrong type, a negative or NaN value, a fraction outside
    [0, 1], or both tie bands given; raises ValueError for an unknown precision or a
    ``topk_output`` not in ``outputs``.
    """
    defaults = _default_row(precision)
    if topk_output is not None and topk_output not in outputs:
        raise ValueError(f"numcheck: top-k output {topk_output!r} is not one of {list(outputs)}")
    for name, given in given_outputs.items():
        if name not in outputs:
            raise BudgetError(
                name,
                f"unknown output {name!r}",
                f"give budgets only for outputs of this op: {', '.join(outputs)}",
            )
        if not isinstance(given, Mapping):
            raise BudgetError(
                name,
                f"expected a table of budget keys, got {describe(given)}",
                f"write it as a table, e.g. {name} = {{ rel_fro = 1e-3 }}",
            )
    coarse = output_precision or {}
    budgets: dict[str, OutputBudget] = {}
    origins: dict[str, dict[str, Origin]] = {}
    for name in outputs:
        if name == topk_output:
            continue
        row = coarser(precision, coarse[name]) if name in coarse else precision
        given = given_outputs.get(name, {})
        missing = (unmeasured or {}).get(name, {})
        defaults = {**_default_row(row), **(sims[1] if sims is not None else {})}
        budgets[name] = _output_budget(name, defaults, given, topk_output, missing)
        default = Default(row, coarse[name] if row != precision else None)
        origins[name] = _origins(name, budgets[name], given, default, given_origins)
        if sims is not None:
            origins[name].update({key: Default(precision, sums=sims[0]) for key in sims[1]
                                  if key not in given})
        origins[name].update({key: NotMeasured(why.problem) for key, why in missing.items()
                              if why.nowhere and key not in budgets[name].limits})
    topk = None
    if topk_output is not None:
        others = [name for name in outputs if name != topk_output]
        given = given_outputs.get(topk_output, {})
        topk = _topk_budget(topk_output, defaults, given, others)
        origins[topk_output] = _origins(topk_output, topk, given, Default(precision),
                                        given_origins)
    return VariantBudget(outputs=budgets, topk=topk, origins=origins)


def budget_keys(budget: OutputBudget | TopkBudget, given: Mapping[str, Any],
                defaults: Mapping[str, Any]) -> list[str]:
    """The keys a completed budget holds a value for: its limits, its band (``atol``,
    ``rtol``) or tie band, and the counts and ``allow_nan`` where given or in the row."""
    if isinstance(budget, TopkBudget):
        return [*budget.limits, f"tie_band_{budget.tie_band_kind}"]
    keys = [*budget.limits, *BAND_KEYS]
    keys += [k for k in (OUTSIDE_KEY, OUTSIDE_ROWS_KEY) if k in given or k in defaults]
    return keys + (["allow_nan"] if "allow_nan" in given else [])


def _origins(name: str, budget: OutputBudget | TopkBudget, given: Mapping[str, Any],
             default: Default, given_origins: Mapping[str, Mapping[str, Origin]] | None,
             ) -> dict[str, Origin]:
    named = (given_origins or {}).get(name, {})
    return {key: (named.get(key) or Given(name, None)) if key in given else default
            for key in budget_keys(budget, given, DEFAULT_BUDGETS[default.precision])}


#: Keys a finer variant's coarse output takes from the coarse class's budget (see
#: :func:`coarse_inheritance`). ``max_err_ratio`` too: on such an output it is measured
#: against the coarse class's rounding envelope (numcheck.check.run), as the coarse
#: class's is.
INHERITED_KEYS = ("rel_fro", "calc_diff", "frac_outside", "max_band_ratio", "max_err_ratio",
                  OUTSIDE_KEY, OUTSIDE_ROWS_KEY, *BAND_KEYS)
# (Never the simulated reference's keys: they belong to a variant's own declared scheme.)


def coarse_inheritance(
    precision: str,
    given: Mapping[str, Any],
    given_by_variant: Mapping[str, Mapping[str, Any]],
    output_precision: Mapping[str, str],
    rounding_reference: Mapping[str, str],
) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """What a variant's coarse outputs take from the coarse class's budget, per output:
    ``(the variant whose table it comes from, the output's storage class, the keys taken)``;
    outputs that take nothing are left out.

    An output stored in a coarser dtype than the variant computes in (mHC's ``y`` is bf16 for
    every variant) differs from the golden by whole steps of that dtype wherever the two
    round a value on either side of a rounding boundary, and how many do depends on the
    inputs, not on the variant's own precision: an fp32 path measured at 6e-5 ``rel_fro`` on
    one seed reaches 4x that on another. Such an output is held to the budget the case gives
    the op's honest implementation at the coarse class (``rounding_reference``: ``bf16`` for
    mHC ``y``), key by key, where the variant's own table leaves a key out; a key the case
    gives the variant itself wins. ``given`` is the variant's tables by output,
    ``given_by_variant`` every variant's (numcheck.cases.budget_tables applies it, to the
    values and their origins at once)."""
    out: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    for output, storage in output_precision.items():
        if coarser(precision, storage) == precision:
            continue  # the variant is as coarse as the storage: its own budget applies
        variant = rounding_reference.get(storage, "")
        source = given_by_variant.get(variant, {}).get(output)
        own = given.get(output, {})
        if not isinstance(source, Mapping) or not isinstance(own, Mapping):
            continue  # nothing to inherit, or a malformed table complete_budget reports
        keys = tuple(k for k in source if k in INHERITED_KEYS and k not in own)
        if keys:
            out[output] = (variant, storage, keys)
    return out


def describe(value: Any) -> str:
    """``value`` with its TOML type name, for error messages (``string '0'``)."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string"}
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return f"array {value!r}"
    return f"{names.get(type(value), type(value).__name__)} {value!r}"


def _default_row(precision: str) -> Mapping[str, float]:
    try:
        return DEFAULT_BUDGETS[precision]
    except KeyError:
        known = ", ".join(DEFAULT_BUDGETS)
        raise ValueError(
            f"numcheck: no default budget for precision {precision!r} (known: {known})"
        ) from None


def _output_budget(
    name: str, defaults: Mapping[str, float], given: Mapping[str, Any], topk_output: str | None,
    unmeasured: Mapping[str, Unmeasured],
) -> OutputBudget:
    for key in given:
        if key in unmeasured:
            raise BudgetError(f"{name}.{key}", unmeasured[key].problem, unmeasured[key].fix)
        if key in TOPK_KEYS:
            fix = (
                f"move it to the top-k output '{topk_output}'"
                if topk_output is not None
                else "remove it: this op has no top-k output"
            )
            raise BudgetError(
                f"{name}.{key}", f"'{key}' is a top-k key, but '{name}' is not a top-k output", fix
            )
        if key not in OUTPUT_KEYS:
            raise BudgetError(
                f"{name}.{key}",
                f"unknown metric '{key}'",
                f"use one of: {', '.join(OUTPUT_KEYS)}",
            )
    # A default the checks cannot measure anywhere is no limit: left out, so the budget (and
    # the report built from it) never claims it.
    limits = {key: value for key, value in defaults.items() if key in LIMIT_METRICS
              and not (key in unmeasured and unmeasured[key].nowhere)}
    limits.update(
        {key: _number(f"{name}.{key}", given[key]) for key in LIMIT_METRICS if key in given}
    )
    atol, rtol = (
        _number(f"{name}.{key}", given[key]) if key in given else defaults[key] for key in BAND_KEYS
    )
    allow_nan = given.get("allow_nan", False)
    if not isinstance(allow_nan, bool):
        raise BudgetError(
            f"{name}.allow_nan",
            f"expected true or false, got {describe(allow_nan)}",
            "write allow_nan = true or allow_nan = false",
        )
    max_outside = _count_key(name, OUTSIDE_KEY, given, defaults, "elements", 2)
    max_outside_rows = _count_key(name, OUTSIDE_ROWS_KEY, given, defaults, "rows", 1)
    if max_outside_rows > MAX_OUTSIDE_ROWS:
        raise BudgetError(
            f"{name}.{OUTSIDE_ROWS_KEY}",
            f"at most {MAX_OUTSIDE_ROWS} rows can be set aside, got {max_outside_rows}",
            "raise frac_outside instead: errors in that many rows are not a cluster",
        )
    return OutputBudget(limits=limits, atol=atol, rtol=rtol, allow_nan=allow_nan,
                        max_outside=max_outside, max_outside_rows=max_outside_rows)


def _count_key(name: str, key: str, given: Mapping[str, Any], defaults: Mapping[str, Any],
               unit: str, example: int) -> int:
    """A budget key that counts (elements, rows): an integer >= 0 (a whole float is taken)."""
    value = given.get(key, defaults.get(key, 0))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BudgetError(
            f"{name}.{key}",
            f"expected a count of {unit} (an integer >= 0), got {describe(value)}",
            f"write e.g. {key} = {example}",
        )
    return value


def _topk_budget(
    name: str, defaults: Mapping[str, float], given: Mapping[str, Any], others: Sequence[str]
) -> TopkBudget:
    for key in given:
        if key in OUTPUT_KEYS:
            raise BudgetError(
                f"{name}.{key}",
                f"'{key}' is an error metric, but '{name}' holds top-k indices, "
                "which are checked by selection agreement",
                f"put error metrics on another output ({', '.join(others) or 'none'}); "
                f"here use one of: {', '.join(TOPK_KEYS)}",
            )
        if key not in TOPK_KEYS:
            raise BudgetError(
                f"{name}.{key}",
                f"unknown top-k key '{key}'",
                f"use one of: {', '.join(TOPK_KEYS)}",
            )
    if all(key in given for key in TIE_BAND_KEYS):
        raise BudgetError(
            name,
            "both tie_band_rel and tie_band_abs are given",
            "keep one: tie_band_rel is relative to the k-th score, tie_band_abs is in score units",
        )
    limits = {key: value for key, value in defaults.items() if key in TOPK_LIMITS}
    limits.update(
        {key: _number(f"{name}.{key}", given[key]) for key in TOPK_LIMITS if key in given}
    )
    # The case's tie band, else the defaults' (checked numbers, so _number keeps them).
    for source in (given, defaults):
        for kind in ("rel", "abs"):
            key = f"tie_band_{kind}"
            if key in source:
                return TopkBudget(limits=limits, tie_band=_number(f"{name}.{key}", source[key]),
                                  tie_band_kind=kind)
    raise AssertionError("unreachable: _check_defaults requires a tie band in every row")


def _number(key: str, value: Any) -> float:
    metric = key.rsplit(".", 1)[-1]
    if isinstance(value, bool) or not isinstance(value, int | float):
        example = f"{metric} = 1e-3"
        if isinstance(value, str):
            try:
                float(value)
                example = f"{metric} = {value.strip()}"
            except ValueError:
                pass
        raise BudgetError(
            key, f"expected a number, got {describe(value)}", f"write a bare number: {example}"
        )
    number = float(value)
    if math.isnan(number):
        raise BudgetError(
            key, "the budget is NaN, which no measurement can meet", "give a finite number"
        )
    if number < 0:
        raise BudgetError(key, f"the budget is negative ({value!r})", "give a number >= 0")
    if metric in _FRACTIONS and number > 1:
        raise BudgetError(
            key,
            f"{metric} is a fraction, so {value!r} is outside [0, 1]",
            "give a number in [0, 1]",
        )
    return number


def _check_defaults(table: Mapping[str, Mapping[str, float]]) -> None:
    # Checked at import so an edit to the table fails loudly, not at the first case.
    for precision, row in table.items():
        allowed = (*LIMIT_METRICS, *BAND_KEYS, OUTSIDE_KEY, OUTSIDE_ROWS_KEY, *TOPK_KEYS)
        for key, value in row.items():
            if key not in allowed:
                raise ValueError(f"numcheck: DEFAULT_BUDGETS[{precision!r}]: unknown key {key!r}")
            _number(f"DEFAULT_BUDGETS.{precision}.{key}", value)
        missing = [key for key in BAND_KEYS if key not in row]
        if missing or not any(key in row for key in TIE_BAND_KEYS):
            raise ValueError(
                f"numcheck: DEFAULT_BUDGETS[{precision!r}] needs atol, rtol and one of "
                f"tie_band_rel / tie_band_abs"
            )


_check_defaults(DEFAULT_BUDGETS)
