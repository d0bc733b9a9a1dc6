"""The names of what numcheck measures, in one place.

Budgets, case-file validation, gates, the JSON record, tables, drift and calibration all
speak of the same metrics; they import the names from here so a metric added or renamed
once is known everywhere. Plain tuples of strings: nothing here imports torch.
"""

from __future__ import annotations

#: Error metrics of an output, each an upper bound (the measured value must be <= the limit).
ERROR_METRICS = (
    "max_abs",
    "max_rel",
    "rel_fro",
    "calc_diff",
    "ulp_p50",
    "ulp_p99",
    "ulp_max",
    "frac_outside",
    "max_err_ratio",
    "max_band_ratio",
)
#: ``max_err_ratio``: the worst element's error as a multiple of the worst element error of
#: the op's rounding reference at the variant's precision (an honest implementation) on the
#: same inputs: element-level, so a few badly wrong elements fail it where rel_fro and
#: calc_diff average them away.
#: ``max_band_ratio``: the worst element's error in units of the band, ``max |a - e| /
#: (atol + rtol |e|)``: the second, wider band of a frac_outside budget, nothing outside it.
#: Error metrics of an output against its **simulated reference** (a low-precision variant's
#: op recomputed on the exact operands its own quantizer produced, dequantized:
#: numcheck.check.against_sim), each an upper bound: ``sim_rel_fro`` (||a - s|| / ||s||) and
#: ``sim_calc_diff`` (DeepGEMM's metric against its simulated reference). Measured only for a
#: variant that declares its quantization (``Variant.quant``); a key for another is a
#: case-file error (numcheck.cases).
SIM_METRICS = ("sim_rel_fro", "sim_calc_diff")
#: Violations the numerics check may raise on an ordinary output besides the budgeted error
#: metrics: the non-finite accounting and the sampled-output counts.
NONFINITE_METRICS = ("inf_mask", "nan", "nan_mask", "posinf_count", "neginf_count")
#: Top-k agreement statistics, each a lower bound in [0, 1] when budgeted.
TOPK_LIMITS = ("recall_min", "recall_mean", "tie_recall_min", "tie_recall_mean")
#: Top-k counts, exact (summed over seeds in a record).
TOPK_COUNTS = ("rows", "rows_with_flips", "n_flips", "n_unexplained")
#: The top-k statistics every table shows.
KEY_TOPK_METRICS = ("recall_min", "tie_recall_min")
#: Headline metrics of a record, shown in every table (of the op's first output / top-k).
KEY_METRICS = ("calc_diff", "rel_fro", *KEY_TOPK_METRICS)
#: Unexplained top-k flips kept and shown per check, worst first: in a top-k report, the JSON
#: record and a failure message's table. The counts stay exact beyond it.
MAX_FLIPS = 10
