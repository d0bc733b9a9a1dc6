#!/usr/bin/env bash
# H200 run C: re-check what runs A and B found (the fixed tests, the gate with the re-set fused
# budgets) and re-time two perf cases with the kernel profiler out of timing runs.
RUN=c
source "$(dirname "$0")/h200_common.sh"
step tests 150 python3 -m pytest tests/test_fused.py tests/test_kernels.py tests/test_topk.py \
  tests/test_perf_plugin.py tests/test_shipped_cases.py -q -p no:cacheprovider -n 4
step gate 90 python3 -m pytest --numcheck --numcheck-device cuda -q -rx -p no:cacheprovider
step perf 200 python3 -m pytest --numcheck --numcheck-perf --numcheck-device cuda -q -rxX \
  -p no:cacheprovider --benchmark-json "$R/bench.json" \
  "cases/perf.toml::perf-indexer-v4flash-b64-l8k-decode" "cases/perf.toml::perf-mhc-v4pro-t4k-prefill"
step table 20 python3 benchmarks/perf_table.py "$R/bench.json"
cat "$R/table.txt"; grep -E "FAIL|XPASS" "$R/perf.txt" | head; cat "$R/steps.txt"
