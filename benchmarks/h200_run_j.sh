#!/usr/bin/env bash
# H200 run J: bf16_folded (the folded-scale indexer) measured against the rounding envelope on
# CUDA: calibration seeds 4000-4039, held-out seeds 10000-10009 and the shipped seeds 0-3,
# each against a fresh CPU reference (benchmarks/folded_calibration.py). Budgets are set from
# the first (pooled with 100 CPU seeds), the others judged by `python -m numcheck.heldout`.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_j.sh   (about 2 minutes)
# Everything comes back as $OUT/run-j.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=j
source "$(dirname "$0")/h200_common.sh"
step folded-cal 240 python3 benchmarks/folded_calibration.py 4000 40 \
  "$R/bf16-folded-calibration-envelope-cuda.json" cuda
step folded-held 120 python3 benchmarks/folded_calibration.py 10000 10 \
  "$R/bf16-folded-heldout-envelope-cuda.json" cuda
step folded-shipped 60 python3 benchmarks/folded_calibration.py 0 4 \
  "$R/bf16-folded-shipped-seeds-cuda.json" cuda
cat "$R/env.txt"; tail -n 6 "$R/folded-cal.txt"
cat "$R/steps.txt"
