#!/usr/bin/env bash
# H200 run F: the final budgets on CUDA, in under three minutes: the numerics gate, the
# shipped variants and honest families on fresh seeds 6000-6009, and the planted-bug catch.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_f.sh
# Everything comes back as $OUT/run-f.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=f
source "$(dirname "$0")/h200_common.sh"
step gate 60 python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider \
  --numcheck-markdown "$R/gate.md"
step false-fail 60 python3 benchmarks/reliability_report.py --device cuda --seeds 10 \
  --first-seed 6000 --skip shipped fresh --json "$R/false-failures-cuda.json"
step catch 40 python3 benchmarks/reliability_report.py --device cuda --seeds 3 \
  --first-seed 6000 --skip false --json "$R/catch-cuda.json"
cat "$R/env.txt"; tail -n 3 "$R/gate.txt"
grep -E "\| (shipped|yes) \| 10 \| [1-9]" "$R/false-fail.txt" | head
tail -n 8 "$R/catch.txt" | grep -v "false failures"; tail -n 2 "$R/false-fail.txt"
cat "$R/steps.txt"
