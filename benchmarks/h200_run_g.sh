#!/usr/bin/env bash
# H200 run G: the honest families measured against the rounding envelope on CUDA, on the
# calibration seeds 4000-4039, to pool with the CPU's 100 seeds when the budgets are re-set
# (benchmarks/honest_calibration.py --apply). Run H (h200_run_h.sh) then checks the budgets.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_g.sh   (about 3 minutes)
# Everything comes back as $OUT/run-g.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=g
source "$(dirname "$0")/h200_common.sh"
step honest-cal 400 python3 benchmarks/honest_calibration.py --device cuda --seeds 40 \
  --first-seed 4000 --json "$R/honest-calibration-h200.json"
cat "$R/env.txt"; tail -n 30 "$R/honest-cal.txt"
cat "$R/steps.txt"
