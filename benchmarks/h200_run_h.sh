#!/usr/bin/env bash
# H200 run H: the rounding-envelope budgets on CUDA: the numerics gate, every shipped variant
# and honest-family member on held-out seeds 9000-9009 (seeds that set no budget), and the
# planted-bug catch.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_h.sh   (about 4 minutes)
# Everything comes back as $OUT/run-h.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=h
source "$(dirname "$0")/h200_common.sh"
step gate 100 python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider \
  --numcheck-markdown "$R/gate.md"
step false-fail 200 python3 benchmarks/reliability_report.py --device cuda --seeds 10 \
  --first-seed 9000 --skip shipped fresh --json "$R/false-failures-cuda.json"
step catch 100 python3 benchmarks/reliability_report.py --device cuda --seeds 3 \
  --first-seed 9000 --skip false --json "$R/catch-cuda.json"
cat "$R/env.txt"; tail -n 3 "$R/gate.txt"
grep -E "\| (shipped|yes) \| 10 \| [1-9]" "$R/false-fail.txt" | head
tail -n 8 "$R/catch.txt" | grep -v "false failures"; tail -n 2 "$R/false-fail.txt"
cat "$R/steps.txt"
