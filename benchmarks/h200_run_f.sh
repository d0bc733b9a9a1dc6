#!/usr/bin/env bash
# H200 runs F and H: the budgets on CUDA in a few minutes: the numerics gate, the shipped
# variants and honest families on fresh seeds (FIRST_SEED .. +9, seeds that set no budget),
# and the planted-bug catch. Run F checked the morning's budgets on seeds 6000-6009; run H
# (benchmarks/h200_run_h.sh) the rounding-envelope budgets on 9000-9009.
# Usage (repo root, GPU machine): OUT=/dir [RUN=f] [FIRST_SEED=6000] bash benchmarks/h200_run_f.sh
# Everything comes back as $OUT/run-$RUN.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=${RUN:-f}
FIRST_SEED=${FIRST_SEED:-6000}
source "$(dirname "$0")/h200_common.sh"
step gate 100 python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider \
  --numcheck-markdown "$R/gate.md"
step false-fail 200 python3 benchmarks/reliability_report.py --device cuda --seeds 10 \
  --first-seed "$FIRST_SEED" --skip shipped fresh --json "$R/false-failures-cuda.json"
step catch 100 python3 benchmarks/reliability_report.py --device cuda --seeds 3 \
  --first-seed "$FIRST_SEED" --skip false --json "$R/catch-cuda.json"
cat "$R/env.txt"; tail -n 3 "$R/gate.txt"
grep -E "\| (shipped|yes) \| 10 \| [1-9]" "$R/false-fail.txt" | head
tail -n 8 "$R/catch.txt" | grep -v "false failures"; tail -n 2 "$R/false-fail.txt"
cat "$R/steps.txt"
