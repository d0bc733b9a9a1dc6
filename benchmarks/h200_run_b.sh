#!/usr/bin/env bash
# H200 evidence, run B (performance side): the perf cases with --numcheck-perf and
# pytest-benchmark JSON, numcheck's speedup against independent timers (fidelity, 5 runs),
# the fused kernels at production shapes, calibration and determinism on CUDA.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_b.sh
# Everything lands in /tmp/nb and comes back as $OUT/run-b.tgz; prints the step table last.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}; R=/tmp/nb; rm -rf "$R"; mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
} > "$R/env.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/pip.txt" 2>&1
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local rc=$?
  printf '%-12s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -E 'passed|failed|error|rc=' "$R/$name.txt" | tail -1 | cut -c1-90)" >> "$R/steps.txt"
  tar czf "$OUT/run-b.tgz" -C /tmp nb
}
step perf 250 python3 -m pytest --numcheck --numcheck-perf --numcheck-device cuda -p no:cacheprovider \
  -rxXs cases/perf.toml --benchmark-json "$R/bench.json" \
  --numcheck-report "$R/perf-report.json" --benchmark-columns=median,iqr,min,max,rounds
step table 20 python3 benchmarks/perf_table.py "$R/bench.json"
step fidelity 80 python3 benchmarks/fidelity.py --repeats 5 --json "$R/fidelity.json"
step fused 150 env OUT="$R" python3 benchmarks/fused_h200.py --budget-s 110
step calibrate 110 python3 -m numcheck.calibrate --device cuda --seeds 20 --json "$R/calibration-h200.json"
step determinism 40 python3 benchmarks/determinism.py --device cuda --runs 10 --json "$R/determinism-cuda.json"
cat "$R/env.txt"; tail -30 "$R/table.txt"; tail -12 "$R/fidelity.txt"; tail -14 "$R/fused.txt"
cat "$R/steps.txt"
