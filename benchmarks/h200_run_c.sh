#!/usr/bin/env bash
# H200 run C: re-check what runs A and B found (the fixed tests, the gate with the re-set fused
# budgets) and re-time two perf cases with the kernel profiler out of timing runs.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}; R=/tmp/nc3; rm -rf "$R"; mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/pip.txt" 2>&1
step() {
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local rc=$?
  printf '%-10s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -E 'passed|failed|error' "$R/$name.txt" | tail -1 | cut -c1-100)" >> "$R/steps.txt"
  tar czf "$OUT/run-c.tgz" -C /tmp nc3
}
step tests 150 python3 -m pytest tests/test_fused.py tests/test_kernels.py tests/test_topk.py \
  tests/test_perf_plugin.py tests/test_shipped_cases.py -q -p no:cacheprovider -n 4
step gate 90 python3 -m pytest --numcheck --numcheck-device cuda -q -rx -p no:cacheprovider
step perf 200 python3 -m pytest --numcheck --numcheck-perf --numcheck-device cuda -q -rxX \
  -p no:cacheprovider --benchmark-json "$R/bench.json" \
  "cases/perf.toml::perf-indexer-v4flash-b64-l8k-decode" "cases/perf.toml::perf-mhc-v4pro-t4k-prefill"
step table 20 python3 benchmarks/perf_table.py "$R/bench.json"
cat "$R/table.txt"; grep -E "FAIL|XPASS" "$R/perf.txt" | head; cat "$R/steps.txt"
