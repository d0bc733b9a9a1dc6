#!/usr/bin/env bash
# Issue 7 on a GPU machine: determinism of every variant on CUDA (and the CPU for comparison),
# the self-test figures with variants on CUDA, and the reliability tests.
# Usage (repo root, GPU machine): OUT=/some/dir bash benchmarks/gpu_reliability_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
python3 -m pytest tests/test_bad_inputs.py tests/test_golden_writes.py tests/test_stale.py \
  tests/test_determinism.py tests/test_selftest.py -q -p no:cacheprovider 2>&1 | tee "$OUT/tests.txt" | tail -3
python3 benchmarks/reliability_report.py --device cuda --seeds "${SEEDS:-30}" \
  --json "$OUT/reliability-cuda.json" > "$OUT/reliability-cuda.md" 2>&1; echo "report rc=$?"
tail -8 "$OUT/reliability-cuda.md"
python3 benchmarks/determinism.py --device cpu --runs 5 --json "$OUT/determinism-cpu.json" > "$OUT/determinism-cpu.txt"
python3 benchmarks/determinism.py --device cuda --runs "${RUNS:-20}" --json "$OUT/determinism-cuda.json" \
  | tee "$OUT/determinism-cuda.txt"
