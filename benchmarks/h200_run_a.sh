#!/usr/bin/env bash
# H200 evidence, run A (correctness side): unit tests on the GPU, the CUDA gate serially and
# with 2 xdist workers (report, markdown, junit, compare), explain mode, the kernel audit,
# the example project, reference determinism, the self-test on CUDA, calibration on CUDA.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_a.sh
# Everything lands in /tmp/nc and comes back as $OUT/run-a.tgz; prints the step table last.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}; R=/tmp/nc; rm -rf "$R"; mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
} > "$R/env.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/pip.txt" 2>&1
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local rc=$?
  printf '%-14s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -E 'passed|failed|error|rc=' "$R/$name.txt" | tail -1 | cut -c1-90)" >> "$R/steps.txt"
  tar czf "$OUT/run-a.tgz" -C /tmp nc  # after every step: a killed run still brings back the rest
}
G=(--numcheck --numcheck-device cuda -q -rxs -p no:cacheprovider)
step unit-tests 200 python3 -m pytest tests -q -p no:cacheprovider -n 8 -rs
step gate-serial 120 python3 -m pytest "${G[@]}" --numcheck-report "$R/serial.json" \
  --numcheck-markdown "$R/serial.md" --junitxml "$R/junit.xml"
step gate-xdist 120 python3 -m pytest "${G[@]}" -n 2 --numcheck-report "$R/parallel.json"
step compare 30 python3 -m numcheck compare "$R/serial.json" "$R/parallel.json"
step explain 60 python3 -m pytest "${G[@]}" --numcheck-explain -k "v4flash-t64 or v4flash-b2-l1k-contiguous"
step audit 120 python3 benchmarks/audit_h200.py --out "$R"
step example 60 bash -c "cd examples/my_kernels && python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider"
step determinism 60 python3 benchmarks/determinism.py --device cuda --runs 20 --json "$R/determinism-cuda.json"
step reliability 120 python3 benchmarks/reliability_report.py --device cuda --seeds 10 --json "$R/reliability-cuda.json"
step calibrate 150 python3 -m numcheck.calibrate --device cuda --seeds 20 --json "$R/calibration-h200.json"
tar czf "$OUT/run-a.tgz" -C /tmp nc
cat "$R/env.txt"; sed -n '/numcheck summary/,/short test summary/p' "$R/gate-serial.txt" | cut -c1-160 | head -60
cat "$R/steps.txt"
