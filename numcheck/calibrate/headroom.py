"""The one headroom rule: from the honest family's worst measurement to a budget value, and
the sizes past which a measurement is a bug's rather than an honest implementation's.

Every calibrator reads its numbers here (``pytest --numcheck --numcheck-calibrate``,
``python -m numcheck.calibrate --suggest``, the honest-family calibration of
:mod:`numcheck.calibrate.honest`); docs/budgets.md ("The headroom rule") explains them:

- **the requirement**: a bug whose own error is :data:`BUG_FACTOR` (2) times the honest
  family's worst must fail a calibrated budget;
- **the element ratio** (``max_err_ratio``: a variant's worst element over the worst element
  of the class's honest rounding envelope on the same inputs) is what carries it: its budget
  is 1.25x the family's worst, below 2, so such a bug fails on the seed that set the worst
  (2 > 1.25) and on every seed where an honest member reaches 1.25 / 2 = 62.5% of that worst;
  at 2x, a bug at exactly 2x the family would pass every calibration seed;
- **the averages and fractions** (``rel_fro``, ``calc_diff``, ``frac_outside``, the tie band,
  the hard band) keep 2x: they gate errors spread over many elements, absorb seeds, GPUs and
  BLAS builds nobody measured, and a 2x error moves ``calc_diff`` by 4x (it is quadratic);
- **against the simulated reference** (``sim_rel_fro`` 4x, ``sim_calc_diff`` 16x, its
  square): an honest low-precision output differs from it by its accumulation and by rare
  output rounding steps whose size follows the element's magnitude, a heavy tail: on 60 CPU
  seeds of an FP8 linear the worst of 20 seeds was passed 1.7x (``sim_rel_fro``) and 3x
  (``sim_calc_diff``) by one held-out seed. The kernel bugs this reference is for land 40x
  and more past it, and the element-level check there is the GEMM bound
  (numcheck.check.against_sim), not an average.

It also says when a measurement cannot be an honest member's: past the class's default row
(:data:`numcheck.numerics.budgets.DEFAULT_BUDGETS`, the class's honest limits) on a
scale-free width (``rel_fro``, ``calc_diff``, the tie band), or a worst element beyond 2x
the honest worst that row was set from.
Pure: no torch, no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: A bug whose own error is this many times the honest family's worst must fail.
BUG_FACTOR = 2.0
#: Budget = headroom x the honest family's worst, per metric; every metric not named here
#: takes :data:`DEFAULT_HEADROOM` (error widths, fractions, bands; the miss of a recall floor).
HEADROOM: Mapping[str, float] = {"max_err_ratio": 1.25, "sim_rel_fro": 4.0,
                                  "sim_calc_diff": 16.0}
DEFAULT_HEADROOM = 2.0
#: Budgets of a metric measured at 0 on every seed: never demand bit-exactness across
#: machines. ``max_err_ratio`` 1: a variant as good as the worst honest envelope member passes.
#: ``max_band_ratio`` 0.01: a hundredth of the class's band (about an fp32 ulp for the fp32
#: class), and ``frac_outside`` 0 (a band check, not an exactness check). Every key a
#: defaults row gates has one, so a family exact on an output (mHC's sigmoids on subnormal
#: inputs) still writes every limit, and a case off the default inputs, which must set them
#: all (numcheck.caseparts.inputs.defaults_left), loads after its calibration.
FLOORS: Mapping[str, float] = {"rel_fro": 1e-7, "calc_diff": 1e-14, "frac_outside": 0.0,
                               "max_band_ratio": 0.01, "tie_band_rel": 1e-6,
                               "max_err_ratio": 1.0}
#: The element ratio: judged against twice the honest worst its default row was set from.
ELEMENT_KEY = "max_err_ratio"
#: Keys whose suggested budget past the class's default row marks a bug-sized measurement:
#: the scale-free widths an honest member of the class stays well inside (docs/budgets.md
#: has the measured margins). Not ``frac_outside`` nor ``max_band_ratio``: both count against
#: a band of fixed atol and rtol, so they depend on the output's scale (an honest bf16 dot
#: product of 64 terms has 9% of its O(8) outputs outside bf16's band; mHC's bf16-stored y,
#: whose streams cancel, reaches 22 bands). Not ``recall_min``: exact ties swap on summation
#: order alone, and the floor always leaves room for two swaps per row. The element ratio
#: and the tie band catch what those would.
ROW_KEYS = ("rel_fro", "calc_diff", "tie_band_rel")

if not HEADROOM[ELEMENT_KEY] < BUG_FACTOR:  # checked at import: the rule must hold
    raise ValueError("numcheck: max_err_ratio's headroom must stay below BUG_FACTOR, or a bug "
                     "at BUG_FACTOR x the honest worst passes the seed that set that worst")


def headroom(metric: str) -> float:
    """The factor over the honest family's worst that ``metric``'s budget takes."""
    return HEADROOM.get(metric, DEFAULT_HEADROOM)


def round_up(x: float) -> float:
    """Round up to two significant digits (0, inf and NaN stay as they are)."""
    if x <= 0 or not math.isfinite(x):
        return x
    exp = math.floor(math.log10(x)) - 1
    return math.ceil(round(x / 10**exp, 6)) * 10**exp


def budget_value(metric: str, worst: float) -> float:
    """The budget of an error metric given the honest family's worst: headroom x worst,
    at least the metric's floor, rounded up to two significant digits."""
    return round_up(max(worst * headroom(metric), FLOORS.get(metric, 0.0)))


def honest_worst_of_row(row: Mapping[str, float], metric: str) -> float | None:
    """The honest worst a class's default row allows for: its value over the headroom."""
    return row[metric] / headroom(metric) if metric in row else None


def element_limit(row: Mapping[str, float]) -> float | None:
    """The largest worst element ratio an honest member of the row's class can have:
    :data:`BUG_FACTOR` x the honest worst the row's ``max_err_ratio`` was set from (2.9 /
    1.25 x 2 = 4.64 for bf16 and tf32). None where the row gates no element ratio (fp32)."""
    honest = honest_worst_of_row(row, ELEMENT_KEY)
    return None if honest is None else BUG_FACTOR * honest
