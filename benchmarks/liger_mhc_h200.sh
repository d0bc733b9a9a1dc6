#!/usr/bin/env bash
# examples/liger_mhc on CUDA: the example's gate on both cases (t8-c512 and numcheck's
# v4flash-t64, the kernels compiled: each (shape, path) compiles on the first call of a check),
# then benchmarks/liger_mhc.py's first-call and per-call times (Triton's cache from the gate).
# Usage (repo root, GPU machine): OUT=/dir [LIGER=liger-kernel==0.8.5] bash benchmarks/liger_mhc_h200.sh
# Without network, point LIGER at a carried wheel (pip download --no-deps liger-kernel==0.8.5).
# Everything comes back as $OUT/run-liger.tgz (benchmarks/h200_common.sh); prints the tables last.
RUN=liger
source "$(dirname "$0")/h200_common.sh"
step install 120 python3 -m pip install --no-deps "${LIGER:-liger-kernel==0.8.5}"
step gate 360 bash -c "cd examples/liger_mhc && python3 -m pytest --numcheck \
  --numcheck-device cuda -rxs -p no:cacheprovider --durations=12 \
  --numcheck-report '$R/liger_report.json' --numcheck-html '$R/liger_report.html'"
step times 100 python3 benchmarks/liger_mhc.py --device cuda --repeats 20
cat "$R/env.txt"
sed -n '/numcheck summary/,/numcheck casts and copies/p' "$R/gate.txt" | head -12
grep -E "^  worst:|^numcheck FAIL" "$R/gate.txt" | head -8
tail -n 5 "$R/times.txt"
cat "$R/steps.txt"
