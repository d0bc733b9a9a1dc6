#!/usr/bin/env bash
# H200 run E: calibration on CUDA, with a held-out check. The honest families (tests/honest.py)
# and every variant (python -m numcheck.calibrate) are measured on calibration seeds (4000+
# and 1000+, 40 each) and, separately, on held-out seeds 5000-5019; budgets are set from the
# first and checked against the second (docs/budgets.md). Then the planted-bug catch table on
# CUDA (shipped goldens and 3 fresh seeds).
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_e.sh   (about 7 minutes)
# Everything comes back as $OUT/run-e.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=e
source "$(dirname "$0")/h200_common.sh"
step honest-cal 150 python3 benchmarks/honest_calibration.py --device cuda --seeds 40 \
  --first-seed 4000 --json "$R/honest-calibration-h200.json"
step calibrate 110 python3 -m numcheck.calibrate --device cuda --seeds 40 --first-seed 1000 \
  --json "$R/calibration-h200.json"
step honest-held 80 python3 benchmarks/honest_calibration.py --device cuda --seeds 20 \
  --first-seed 5000 --json "$R/honest-heldout-h200.json"
step calib-held 60 python3 -m numcheck.calibrate --device cuda --seeds 20 --first-seed 5000 \
  --json "$R/calibration-heldout-h200.json"
step catch 80 python3 benchmarks/reliability_report.py --device cuda --seeds 3 \
  --skip false --json "$R/catch-cuda.json"
cat "$R/env.txt"; tail -n 12 "$R/catch.txt"
cat "$R/steps.txt"
