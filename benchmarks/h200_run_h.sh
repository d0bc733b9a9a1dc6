#!/usr/bin/env bash
# H200 run H: the rounding-envelope budgets on CUDA on held-out seeds 9000-9009 (run F's
# steps, benchmarks/h200_run_f.sh). Usage (repo root, GPU machine):
#   OUT=/dir bash benchmarks/h200_run_h.sh   (about 2 minutes; $OUT/run-h.tgz)
RUN=h FIRST_SEED=9000 exec bash "$(dirname "$0")/h200_run_f.sh"
