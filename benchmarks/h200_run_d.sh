#!/usr/bin/env bash
# H200 run D: the numerics gate on CUDA with the element-level and cast budgets (report, HTML,
# markdown, obtained files), the two-sided self-test on CUDA (shipped variants and honest
# families on 10 fresh seeds; planted bugs on the shipped goldens and 3 fresh seeds), the cast
# ledger's ratios and copy shares on CUDA, then the unit tests with their CUDA paths.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_d.sh   (about 8 minutes)
# Everything comes back as $OUT/run-d.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=d
source "$(dirname "$0")/h200_common.sh"
G=(--numcheck --numcheck-device cuda -q -rxs -p no:cacheprovider)
step gate 100 python3 -m pytest "${G[@]}" --numcheck-report "$R/gate.json" \
  --numcheck-markdown "$R/gate.md" --numcheck-html "$R/gate.html" --numcheck-obtained "$R/obtained"
step false-fail 150 python3 benchmarks/reliability_report.py --device cuda --seeds 10 \
  --skip shipped fresh --json "$R/false-failures-cuda.json"
step catch 90 python3 benchmarks/reliability_report.py --device cuda --seeds 3 \
  --skip false --json "$R/catch-cuda.json"
step casts 60 python3 benchmarks/cast_ratios.py --device cuda --out "$R"
step unit-tests 110 python3 -m pytest tests -q -p no:cacheprovider -n 8 -rs
cat "$R/env.txt"
sed -n '/numcheck summary/,/short test summary/p' "$R/gate.txt" | cut -c1-150 | head -45
tail -n 6 "$R/false-failures-cuda.txt"; tail -n 8 "$R/catch-cuda.txt"
awk 'NF>=7 && /^(indexer|mhc)/ {print $1, $2, $5, $6}' "$R/casts.txt" | head -40
tail -n 4 "$R/unit-tests.txt"
cat "$R/steps.txt"
