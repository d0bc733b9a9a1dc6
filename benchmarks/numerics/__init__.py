"""The honest families and calibration: budgets measured, held out, FP8 / FP4 schemes."""
