#!/usr/bin/env bash
# Performance evidence on a GPU: the production-shape perf cases with timing on,
# pytest-benchmark JSON, then the fidelity check (5 repeats). Prints a short table last.
# Usage (repo root, GPU machine):  OUT=/some/dir bash benchmarks/perf_h200.sh
# Writes: $OUT/env.txt, perf-cuda.txt (pytest output), bench.json (pytest-benchmark JSON),
#         fidelity.json / fidelity.txt, table.md. About 3-5 minutes on an H200.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-perf}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
CMD=(python3 -m pytest --numcheck --numcheck-perf --numcheck-device cuda -p no:cacheprovider
     -rxXs cases/perf.toml --benchmark-json "$OUT/bench.json"
     --benchmark-columns=median,iqr,min,max,rounds --benchmark-sort=fullname)
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import triton; print('triton', triton.__version__)" 2>/dev/null || echo "triton: none"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
  echo "command: ${CMD[*]}"
} 2>&1 | tee "$OUT/env.txt"
t0=$SECONDS
"${CMD[@]}" > "$OUT/perf-cuda.txt" 2>&1
echo "pytest rc=$? ($((SECONDS - t0)) s)" | tee -a "$OUT/env.txt"
sed -n '/numcheck summary/,$p' "$OUT/perf-cuda.txt" | tail -40
grep -A4 "^numcheck FAIL\|XPASS" "$OUT/perf-cuda.txt" | head -40
t0=$SECONDS
python3 benchmarks/fidelity.py --repeats 5 --json "$OUT/fidelity.json" > "$OUT/fidelity.txt" 2>&1
echo "fidelity rc=$? ($((SECONDS - t0)) s)" | tee -a "$OUT/env.txt"
echo
cat "$OUT/env.txt"
python3 benchmarks/perf_table.py "$OUT/bench.json" | tee "$OUT/table.md"
echo
cat "$OUT/fidelity.txt"
